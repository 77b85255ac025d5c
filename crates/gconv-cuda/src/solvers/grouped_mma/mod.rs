//! `cuda.grouped_mma`: grouped convolutions with few channels per group (8 to 64), every
//! direction, on the tensor cores' `mma.sync` (m16n8k16, fp32 accumulators), channels-last
//! 1D, 2D and 3D, bf16 and fp16. The implicit GEMMs' tiles are far wider than such a group's
//! channels; here a block stages a tile of pixels (with its halo) for several groups in shared
//! memory and ldmatrix does the im2col gather through per-lane row addresses.
//!
//! Pieces: `gather` (forward and backward-data, kernels/grouped_mma.cu), `weight`
//! (backward-weight, kernels/grouped_mma_weight.cu); each owns its tile space.

mod gather;
mod weight;

use std::sync::Arc;

use gconv_core::{
    require, Config, ConvProblem, DataType, Direction, Field, GconvError, Invoker, Layout, NotApplicable, Result,
    Solve, Solver, Values,
};

use super::direct::{self, DirectInvoker, Kernels};
use super::{builds_from_kernel, BuiltFrom};
use crate::device::{CudaDevice, SmLimits};
use crate::{ConvParams, Cuda, KernelSource};

const WARPS: u32 = 4;
/// Tiles of pixels (rows x columns): 64 or 128 pixels in rows of 16 for ldmatrix, one row
/// for 1D.
const TILES: [(u32, u32); 6] = [(4, 16), (8, 8), (8, 16), (16, 8), (1, 64), (1, 128)];
const GROUPS_PER_BLOCK: [u32; 5] = [1, 2, 4, 8, 16];
/// The fields both kernels' configs begin with: tile rows (`th`) and columns (`tw`), paired
/// as `TILES` lists them, and groups a block (`gb`).
const TILE_FIELDS: [Field; 3] = [
    Field::new("th", Values::OneOf(&[1, 4, 8, 16])),
    Field::new("tw", Values::OneOf(&[8, 16, 64, 128])),
    Field::new("gb", Values::OneOf(&GROUPS_PER_BLOCK)),
];
/// So that two blocks fit an SM.
const MAX_SHARED_BYTES: u64 = 96 << 10;
const MAX_GRID_YZ: u64 = 65_535;

pub struct GroupedMma {
    pub device: Arc<CudaDevice>,
}

/// Why a tile shape or groups per block is not one of the kernels', if it is not.
fn check_block(th: u32, tw: u32, gb: u32) -> std::result::Result<(), String> {
    if !TILES.contains(&(th, tw)) {
        return Err(format!("th x tw must be one of {TILES:?}"));
    }
    if !GROUPS_PER_BLOCK.contains(&gb) {
        return Err(format!("gb must be one of {GROUPS_PER_BLOCK:?}"));
    }
    Ok(())
}

/// A bf16 channels-last problem of these sizes (input, filter, stride, pad, dilation per
/// dimension), where they make a valid one: what the kernels' property tests draw.
#[cfg(test)]
fn drawn_problem(
    direction: Direction,
    n: u32,
    [c, k, g]: [u32; 3],
    dims: &[(u32, u32, u32, u32, u32)],
) -> Option<ConvProblem> {
    let dims = dims.iter().map(|&(input, filter, stride, pad, dilation)| gconv_core::SpatialDim {
        input,
        filter,
        stride,
        pad,
        dilation,
    });
    let p = ConvProblem { direction, dtype: DataType::Bf16, layout: Layout::Nhwc, n, c, k, g, dims: dims.collect() };
    p.validate().is_ok().then_some(p)
}

/// Why a tile of `th` rows taking `shared_bytes` does not fit the problem, if it does not.
fn check_fit(p: &ConvProblem, th: u32, shared_bytes: u64) -> std::result::Result<(), String> {
    if p.dims.len() == 1 && th > 1 {
        return Err("1D problems take one-row tiles (th 1)".into());
    }
    if shared_bytes > MAX_SHARED_BYTES {
        return Err(format!("needs {shared_bytes} bytes of shared memory, more than {MAX_SHARED_BYTES}"));
    }
    Ok(())
}

/// Tile shapes in order of preference: rows of 16 pixels where the tiled extent (`cols`) is
/// that wide (4 of them where a stride widens the window), 8 x 8 where it is narrower, one row
/// of 128 in 1D.
fn preferred_shapes(p: &ConvProblem, cols: u32, strided: bool) -> &'static [(u32, u32)] {
    match p.dims.len() {
        1 => &[(1, 128), (1, 64)],
        _ if cols < 16 => &[(8, 8), (4, 16)],
        _ if strided => &[(4, 16), (8, 8)],
        _ => &[(8, 16), (4, 16), (8, 8)],
    }
}

/// A kernel's space of block tiles: what the solver asks of the forward/backward-data one and
/// of the backward-weight one.
trait BlockTile: Copy + PartialEq + Sized {
    /// Why the problem's channels per group are not the kernel's, if they are not.
    fn takes(p: &ConvProblem) -> Result<(), NotApplicable>;
    fn all() -> Vec<Self>;
    /// Why the tile cannot run the problem, if it cannot.
    fn check(self, p: &ConvProblem) -> std::result::Result<(), String>;
    /// The tile to run where no tuned one is known, on a GPU of `sms` SMs like `sm`.
    fn preferred(p: &ConvProblem, sms: u32, sm: &SmLimits) -> Option<Self>;
    fn to_config(self) -> Config;
    /// The tile a config's fields name, unchecked.
    fn from_fields(config: &Config) -> Result<Self>;
    fn grid(self, p: &ConvProblem) -> (u64, u64, u64);
    fn source(self, p: &ConvProblem) -> KernelSource;
    fn kernels(self, p: &ConvProblem, device: &CudaDevice, solver: &str) -> Result<Kernels>;

    fn from_config(p: &ConvProblem, config: &Config) -> Result<Self> {
        let tile = Self::from_fields(config)?;
        tile.check(p).map_err(|reason| GconvError::BadConfig { text: config.to_string(), reason })?;
        Ok(tile)
    }

    fn fitting(p: &ConvProblem) -> impl Iterator<Item = Self> {
        Self::all().into_iter().filter(|t| t.check(p).is_ok())
    }

    fn applicable(p: &ConvProblem) -> Result<(), NotApplicable> {
        Self::takes(p)?;
        let Some(tile) = Self::fitting(p).next() else {
            return Err(NotApplicable::because(
                "no tile config fits: every one exceeds the shared memory or the registers",
            ));
        };
        let (x, y, z) = tile.grid(p);
        require!(
            y <= MAX_GRID_YZ && z <= MAX_GRID_YZ && x <= u64::from(i32::MAX as u32),
            "too many tiles, planes or groups for the grid"
        );
        Ok(())
    }
}

/// `$body` with `$tile` the tile type of the problem's direction.
macro_rules! by_direction {
    ($p:expr, $tile:ident => $body:expr) => {
        if $p.direction == Direction::BackwardWeight {
            type $tile = weight::Tile;
            $body
        } else {
            type $tile = gather::Tile;
            $body
        }
    };
}

impl Solver for GroupedMma {
    fn id(&self) -> &'static str {
        "cuda.grouped_mma"
    }

    fn applicable(&self, p: &ConvProblem) -> Result<(), NotApplicable> {
        let (major, minor) = self.device.capability;
        require!(major >= 8, "needs mma.sync on 16-bit types (sm_80 or newer), this is sm_{major}{minor}");
        require!(p.layout == Layout::Nhwc, "reads channels-last (NWC, NHWC, NDHWC) tensors only");
        require!(matches!(p.dtype, DataType::Bf16 | DataType::F16), "multiplies bf16 or fp16 on the tensor cores");
        require!(p.g > 1, "for grouped convolutions (dense ones go to the implicit GEMMs)");
        by_direction!(p, T => T::applicable(p))
    }

    fn workspace_bytes(&self, p: &ConvProblem, _config: &Config) -> u64 {
        direct::workspace_bytes(p)
    }

    fn default_config(&self, p: &ConvProblem) -> Config {
        by_direction!(p, T => T::preferred(p, self.device.sm_count, &self.device.sm).map_or_else(Config::empty, T::to_config))
    }

    fn configs<'a>(&'a self, p: &'a ConvProblem) -> Box<dyn Iterator<Item = Config> + 'a> {
        by_direction!(p, T => Box::new(T::fitting(p).map(T::to_config)))
    }

    fn check_config(&self, p: &ConvProblem, config: &Config) -> Result<()> {
        by_direction!(p, T => T::from_config(p, config).map(|_| ()))
    }

    builds_from_kernel!();
}

impl BuiltFrom for GroupedMma {
    fn device(&self) -> &CudaDevice {
        &self.device
    }

    fn kernels(&self, p: &ConvProblem, config: &Config) -> Result<Vec<KernelSource>> {
        by_direction!(p, T => Ok(vec![T::from_config(p, config)?.source(p)]))
    }
}

impl Solve<Cuda> for GroupedMma {
    fn solution(&self, p: &ConvProblem, config: &Config) -> Result<Box<dyn Invoker<Cuda>>> {
        let kernels = by_direction!(p, T => T::from_config(p, config)?.kernels(p, &self.device, self.id())?);
        Ok(Box::new(DirectInvoker { solver: self.id(), params: ConvParams::new(p), direction: p.direction, kernels }))
    }
}
