//! `cuda.igemm_wgmma`: forward implicit GEMM on Hopper's warpgroup MMA (`wgmma.mma_async`)
//! fed by the tensor memory accelerator (kernels/igemm_wgmma.cu), built for `sm_90a` and
//! offered on sm_90 devices only. Channels-last 2D, bf16 and fp16, groups in the grid. The
//! activation tile comes by TMA im2col (the filter tap as the load's offset, the padding
//! zero-filled by the TMA unit), the filter tile by a tiled TMA load; a producer warpgroup
//! issues both onto an mbarrier pipeline of `st` stages and two consumer warpgroups multiply.
//! Problem sizes are run-time (kernel parameters and tensor maps), so one build serves every
//! shape with the same filter size.

use std::sync::Arc;

use cudarc::driver::LaunchConfig;
use gconv_core::geometry::Geometry;
use gconv_core::{require, Config, ConvProblem, DataType, Direction, GconvError, Invoker, Layout, NotApplicable, Result, Solve, Solver};

use super::direct::{check_filter, filter_hw};
use super::{builds_from_kernel, BuiltFrom};
use crate::device::CudaDevice;
use crate::launch::{self, Arg, Im2col, TensorMap};
use crate::{ConvParams, Cuda, CudaBuffers, KernelSource};

const SOURCE: &str = include_str!("../kernels/igemm_wgmma.cu");
/// Output pixels per block tile (two consumer warpgroups of 64 rows).
const BM: u32 = 128;
/// Output channels per block tile.
const BN: u32 = 128;
/// Input channels of one tap per reduction block: one 128-byte swizzled row of 16-bit values.
const BK: u32 = 64;
const THREADS: u32 = 3 * 128;
const STAGES: [u32; 3] = [3, 4, 5];
/// TMA im2col corners of a rank-4 tensor are signed 8-bit.
const CORNER: std::ops::RangeInclusive<i64> = -128..=127;
/// TMA element strides (the convolution stride) go up to 8.
const MAX_STRIDE: usize = 8;
const MAX_GRID_YZ: u32 = 65_535;

pub struct IgemmWgmma {
    pub device: Arc<CudaDevice>,
}

fn stages(config: &Config) -> Result<u32> {
    let [st] = config.expect_fields(["st"])?;
    if !STAGES.contains(&st) {
        return Err(GconvError::BadConfig { text: config.to_string(), reason: format!("st must be one of {STAGES:?}") });
    }
    Ok(st)
}

/// Shared memory of `st` stages: an activation and a filter tile each, their full and empty
/// barriers, and room to align the tiles to 1024 bytes as the 128-byte swizzle wants.
fn shared_bytes(st: u32) -> u32 {
    1024 + st * (BM + BN) * BK * 2 + st * 2 * 8
}

/// The im2col window's corners (W then H): at tap offset zero it starts at -pad and ends at
/// the last output position's first tap, (out - 1) * stride - pad, written as an offset from
/// the extent.
fn corners(p: &ConvProblem) -> ([i64; 2], [i64; 2]) {
    let g = Geometry::new(p);
    let corner = |i: usize| {
        let (input, output, stride, pad) = (g.input[i] as i64, g.output[i] as i64, g.stride[i] as i64, g.pad[i] as i64);
        (-pad, (output - 1) * stride + 1 - input - pad)
    };
    let (w, h) = (corner(2), corner(1));
    ([w.0, h.0], [w.1, h.1])
}

fn source(p: &ConvProblem, st: u32) -> KernelSource {
    let (fh, fw) = filter_hw(p);
    KernelSource::new("igemm_wgmma.cu", SOURCE, p.dtype)
        .define("FH", fh)
        .define("FW", fw)
        .define("BN", BN)
        .define("STAGES", st)
        .define("IN_F16", u32::from(p.dtype == DataType::F16))
        .arch_specific()
}

impl Solver for IgemmWgmma {
    fn id(&self) -> &'static str {
        "cuda.igemm_wgmma"
    }

    fn applicable(&self, p: &ConvProblem) -> Result<(), NotApplicable> {
        let (major, minor) = self.device.capability;
        require!((major, minor) == (9, 0), "needs an sm_90 GPU (wgmma and TMA built for sm_90a), this is sm_{major}{minor}");
        require!(p.direction == Direction::Forward, "forward only (backward-data and backward-weight are to come)");
        require!(p.layout == Layout::Nhwc && p.dims.len() == 2, "needs a 2D channels-last layout (NHWC)");
        require!(matches!(p.dtype, DataType::Bf16 | DataType::F16), "needs bf16 or fp16 operands (tf32 would need K-major fp32 tiles)");
        check_filter(p)?;
        let (cg, kg) = (p.c / p.g, p.k / p.g);
        require!(cg.is_multiple_of(BK), "needs input channels per group a multiple of {BK} (one 128-byte TMA row per tap), got {cg}");
        require!(kg.is_multiple_of(8), "needs output channels per group a multiple of 8 (16-byte filter rows and paired stores), got {kg}");
        let g = Geometry::new(p);
        require!(g.stride[1..].iter().all(|&s| s <= MAX_STRIDE), "strides over {MAX_STRIDE} are beyond TMA's element strides");
        let (lower, upper) = corners(p);
        require!(lower.iter().chain(&upper).all(|c| CORNER.contains(c)), "the im2col window's corners {lower:?} / {upper:?} leave TMA's {CORNER:?}");
        require!(kg.div_ceil(BN) <= MAX_GRID_YZ && p.g <= MAX_GRID_YZ, "too many column tiles or groups for the grid");
        let rows = u64::from(p.n) * g.output[1] as u64 * g.output[2] as u64;
        require!(rows.div_ceil(u64::from(BM)) <= u64::from(i32::MAX as u32), "{rows} output pixels are too many row tiles for the grid");
        Ok(())
    }

    fn workspace_bytes(&self, _p: &ConvProblem, _config: &Config) -> u64 {
        0
    }

    fn default_config(&self, _p: &ConvProblem) -> Config {
        Config::new([("st", 4)])
    }

    fn configs<'a>(&'a self, _p: &'a ConvProblem) -> Box<dyn Iterator<Item = Config> + 'a> {
        Box::new(STAGES.into_iter().map(|st| Config::new([("st", st)])))
    }

    fn check_config(&self, _p: &ConvProblem, config: &Config) -> Result<()> {
        stages(config).map(|_| ())
    }

    builds_from_kernel!();
}

impl BuiltFrom for IgemmWgmma {
    fn device(&self) -> &CudaDevice {
        &self.device
    }

    fn kernel(&self, p: &ConvProblem, config: &Config) -> Result<Option<KernelSource>> {
        Ok(Some(source(p, stages(config)?)))
    }
}

impl Solve<Cuda> for IgemmWgmma {
    fn solution(&self, p: &ConvProblem, config: &Config) -> Result<Box<dyn Invoker<Cuda>>> {
        let st = stages(config)?;
        let function = self.device.function(&source(p, st), "igemm_wgmma")?;
        let shared = shared_bytes(st);
        launch::allow_shared(&function, shared, self.id())?;
        let g = Geometry::new(p);
        let rows = u64::from(p.n) * g.output[1] as u64 * g.output[2] as u64;
        let launch = LaunchConfig {
            grid_dim: (rows.div_ceil(u64::from(BM)) as u32, (p.k / p.g).div_ceil(BN), p.g),
            block_dim: (THREADS, 1, 1),
            shared_mem_bytes: shared,
        };
        let (lower, upper) = corners(p);
        let im2col = Im2col {
            extents: [p.c, g.input[2] as u32, g.input[1] as u32, p.n].map(u64::from),
            lower: lower.map(|c| c as i32),
            upper: upper.map(|c| c as i32),
            strides: [g.stride[2] as u32, g.stride[1] as u32],
            channels: BK,
            pixels: BM,
        };
        let (fh, fw) = filter_hw(p);
        let filter = (u64::from(p.k), u64::from(fh * fw * (p.c / p.g)));
        Ok(Box::new(WgmmaInvoker { function, launch, params: ConvParams::new(p), dtype: p.dtype, im2col, filter }))
    }
}

struct WgmmaInvoker {
    function: cudarc::driver::CudaFunction,
    launch: LaunchConfig,
    params: ConvParams,
    dtype: DataType,
    im2col: Im2col,
    /// The filter as a matrix: K rows of FH x FW x C/G.
    filter: (u64, u64),
}

impl Invoker<Cuda> for WgmmaInvoker {
    fn run(&self, b: &mut CudaBuffers<'_>) -> Result<()> {
        // Tensor maps hold the buffers' addresses, so they are made per run (a few
        // microseconds of host time; a captured graph keeps the ones it was captured with).
        let x = TensorMap::im2col(b.x, self.dtype, &self.im2col)?;
        let w = TensorMap::tiled(b.w, self.dtype, self.filter.0, self.filter.1, BN, BK)?;
        let args = [Arg::TensorMap(&x), Arg::TensorMap(&w), Arg::Params(&self.params), Arg::Buffer(b.y)];
        launch::kernel(b, &self.function, self.launch, &args, "launch cuda.igemm_wgmma")
    }
}
