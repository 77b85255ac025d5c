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

use gconv_core::{require, Config, ConvProblem, DataType, Direction, GconvError, Invoker, Layout, NotApplicable, Result, Solve, Solver};

use super::direct::{self, DirectInvoker, Kernels};
use super::{builds_from_kernel, BuiltFrom};
use crate::device::{CudaDevice, SmLimits};
use crate::{ConvParams, Cuda, KernelSource};

const WARPS: u32 = 4;
/// Tiles of pixels (rows x columns): 64 or 128 pixels in rows of 16 for ldmatrix, one row
/// for 1D.
const TILES: [(u32, u32); 6] = [(4, 16), (8, 8), (8, 16), (16, 8), (1, 64), (1, 128)];
const GROUPS_PER_BLOCK: [u32; 5] = [1, 2, 4, 8, 16];
/// So that two blocks fit an SM.
const MAX_SHARED_BYTES: u64 = 96 << 10;
const MAX_GRID_YZ: u64 = 65_535;

pub struct GroupedMma {
    pub device: Arc<CudaDevice>,
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
            return Err(NotApplicable::because("no tile's pixels and filters fit in shared memory"));
        };
        let (x, y, z) = tile.grid(p);
        require!(y <= MAX_GRID_YZ && z <= MAX_GRID_YZ && x <= u64::from(i32::MAX as u32), "too many tiles, planes or groups for the grid");
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

    fn kernel(&self, p: &ConvProblem, config: &Config) -> Result<Option<KernelSource>> {
        by_direction!(p, T => Ok(Some(T::from_config(p, config)?.source(p))))
    }
}

impl Solve<Cuda> for GroupedMma {
    fn solution(&self, p: &ConvProblem, config: &Config) -> Result<Box<dyn Invoker<Cuda>>> {
        let kernels = by_direction!(p, T => T::from_config(p, config)?.kernels(p, &self.device, self.id())?);
        Ok(Box::new(DirectInvoker { solver: self.id(), params: ConvParams::new(p), direction: p.direction, kernels }))
    }
}
