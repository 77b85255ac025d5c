//! `cuda.depthwise_tiled`: depthwise (G = C = K) forward, and backward-data at stride 1, in
//! the channels-last layouts, from shared-memory tiles (kernels/depthwise_tiled.cu). A block
//! stages the source rectangle its (`th` x `rh`) x `tw` destination tile reads, halo included,
//! for 32 lanes of channels (two per lane in 16-bit types), then each thread sums `rh` rows x
//! `tw` columns from it with its channels' weights in registers. Tunable: `th` (warps per
//! block), `rh` (rows per thread) and `tw` (columns per thread); the filter height and width
//! are compile-time, the sizes run-time.

use std::sync::Arc;

use cudarc::driver::LaunchConfig;
use gconv_core::geometry::Geometry;
use gconv_core::{require, Config, ConvProblem, DataType, Direction, GconvError, Invoker, Layout, NotApplicable, Result, Solve, Solver};

use super::direct::{check_filter, filter_hw, DirectInvoker, Kernels};
use super::{builds_from_kernel, BuiltFrom};
use crate::device::CudaDevice;
use crate::{ConvParams, Cuda, KernelSource};

const SOURCE: &str = include_str!("../kernels/depthwise_tiled.cu");
const WARPS: [u32; 2] = [4, 8];
const ROWS: [u32; 3] = [1, 2, 4];
const COLUMNS: [u32; 2] = [4, 8];
/// Shared memory a block may take without opting in to more.
const MAX_STAGED_BYTES: u64 = 48 << 10;
const MAX_GRID_Z: u32 = 65_535;

pub struct DepthwiseTiled {
    pub device: Arc<CudaDevice>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Tile {
    th: u32,
    rh: u32,
    tw: u32,
}

/// The destination's extents (depth, rows, columns), outer ones 1 below 3D: the output
/// forward, the input's gradient backward.
fn destination(p: &ConvProblem) -> [u32; 3] {
    let g = Geometry::new(p);
    (if p.direction == Direction::Forward { g.output } else { g.input }).map(|v| v as u32)
}

/// Channels per thread: a 4-byte pair of 16-bit values, or one fp32.
fn channels_per_thread(p: &ConvProblem) -> u32 {
    if p.dtype.size_bytes() == 2 { 2 } else { 1 }
}

/// The problem's (stride, dilation) along H and W.
fn hw(p: &ConvProblem) -> [(u32, u32); 2] {
    let g = Geometry::new(p);
    [1, 2].map(|i| (g.stride[i] as u32, g.dilation[i] as u32))
}

/// Every tile, in config order.
fn tiles() -> impl Iterator<Item = Tile> {
    WARPS.into_iter().flat_map(|th| ROWS.into_iter().flat_map(move |rh| COLUMNS.into_iter().map(move |tw| Tile { th, rh, tw })))
}

impl Tile {
    fn to_config(self) -> Config {
        Config::new([("th", self.th), ("rh", self.rh), ("tw", self.tw)])
    }

    /// Bytes of the source rectangle a block stages.
    fn staged_bytes(self, p: &ConvProblem) -> u64 {
        let (fh, fw) = filter_hw(p);
        let [(sh, dh), (sw, dw)] = hw(p);
        let rows = u64::from((self.th * self.rh - 1) * sh + (fh - 1) * dh + 1);
        let cols = u64::from((self.tw - 1) * sw + (fw - 1) * dw + 1);
        rows * cols * 32 * u64::from(channels_per_thread(p)) * p.dtype.size_bytes() as u64
    }

    fn from_config(p: &ConvProblem, config: &Config) -> Result<Self> {
        let [th, rh, tw] = config.expect_fields(["th", "rh", "tw"])?;
        let tile = Tile { th, rh, tw };
        let bad = |reason: String| GconvError::BadConfig { text: config.to_string(), reason };
        if !WARPS.contains(&th) || !ROWS.contains(&rh) || !COLUMNS.contains(&tw) {
            return Err(bad(format!("th must be one of {WARPS:?}, rh one of {ROWS:?} and tw one of {COLUMNS:?}")));
        }
        if tile.staged_bytes(p) > MAX_STAGED_BYTES {
            return Err(bad(format!("the tile stages {} bytes, over {MAX_STAGED_BYTES}", tile.staged_bytes(p))));
        }
        Ok(tile)
    }

    fn source(self, p: &ConvProblem) -> KernelSource {
        let (fh, fw) = filter_hw(p);
        let unit = hw(p).iter().all(|&(stride, dilation)| stride == 1 && dilation == 1);
        KernelSource::new("depthwise_tiled.cu", SOURCE, p.dtype)
            .define("FH", fh)
            .define("FW", fw)
            .define("CPT", channels_per_thread(p))
            .define("TH", self.th)
            .define("RH", self.rh)
            .define("TW", self.tw)
            .define("UNIT", u32::from(unit))
            .define("BACKWARD_DATA", u32::from(p.direction == Direction::BackwardData))
    }
}

impl Solver for DepthwiseTiled {
    fn id(&self) -> &'static str {
        "cuda.depthwise_tiled"
    }

    fn applicable(&self, p: &ConvProblem) -> Result<(), NotApplicable> {
        gconv_core::applicability::depthwise(p)?;
        check_filter(p)?;
        require!(p.layout == Layout::Nhwc, "needs a channels-last layout (NWC, NHWC, NDHWC)");
        require!(p.dtype != DataType::Tf32, "tf32 has nothing to multiply on tensor cores here; the fp32 problem runs it");
        require!(p.c.is_multiple_of(channels_per_thread(p)), "needs an even channel count in 16-bit types (two channels per 4-byte load), got C={}", p.c);
        require!(p.direction != Direction::BackwardWeight, "backward-weight is cuda.depthwise's");
        require!(
            p.direction == Direction::Forward || p.dims.iter().all(|d| d.stride == 1),
            "backward-data only at stride 1 (strided backward-data is cuda.depthwise's)"
        );
        // One block row per image and destination depth.
        let images = u64::from(p.n) * u64::from(destination(p)[0]);
        require!(images <= u64::from(MAX_GRID_Z), "N x depth {images} is over the grid's {MAX_GRID_Z}");
        require!(self.configs(p).next().is_some(), "no tile's halo fits in {MAX_STAGED_BYTES} bytes of shared memory");
        Ok(())
    }

    fn workspace_bytes(&self, _p: &ConvProblem, _config: &Config) -> u64 {
        0
    }

    fn default_config(&self, p: &ConvProblem) -> Config {
        // The largest tile the destination fills: more rows and columns per thread where it is
        // large, less idle tile where it is small (7 x 7 layers).
        let [_, rows, cols] = destination(p);
        let rh = match rows {
            32.. => 4,
            16.. => 2,
            _ => 1,
        };
        let preferred = Tile { th: if rows >= 8 { 8 } else { 4 }, rh, tw: if cols >= 8 { 8 } else { 4 } };
        let fits = |t: &Tile| t.staged_bytes(p) <= MAX_STAGED_BYTES;
        Some(preferred).filter(fits).or_else(|| tiles().find(fits)).unwrap_or(preferred).to_config()
    }

    fn configs<'a>(&'a self, p: &'a ConvProblem) -> Box<dyn Iterator<Item = Config> + 'a> {
        Box::new(tiles().filter(|t| t.staged_bytes(p) <= MAX_STAGED_BYTES).map(Tile::to_config))
    }

    fn check_config(&self, p: &ConvProblem, config: &Config) -> Result<()> {
        Tile::from_config(p, config).map(|_| ())
    }

    builds_from_kernel!();
}

impl BuiltFrom for DepthwiseTiled {
    fn device(&self) -> &CudaDevice {
        &self.device
    }

    fn kernel(&self, p: &ConvProblem, config: &Config) -> Result<Option<KernelSource>> {
        Ok(Some(Tile::from_config(p, config)?.source(p)))
    }
}

impl Solve<Cuda> for DepthwiseTiled {
    fn solution(&self, p: &ConvProblem, config: &Config) -> Result<Box<dyn Invoker<Cuda>>> {
        let tile = Tile::from_config(p, config)?;
        let function = self.device.function(&tile.source(p), "dw_tiled")?;
        let params = ConvParams::new(p);
        let [depth, rows, cols] = destination(p);
        let lanes = p.c / channels_per_thread(p);
        let launch = LaunchConfig {
            grid_dim: (rows.div_ceil(tile.th * tile.rh) * cols.div_ceil(tile.tw), lanes.div_ceil(32), p.n * depth),
            block_dim: (32, tile.th, 1),
            shared_mem_bytes: tile.staged_bytes(p) as u32,
        };
        Ok(Box::new(DirectInvoker { solver: self.id(), params, direction: p.direction, kernels: Kernels::Gather { function, launch } }))
    }
}
