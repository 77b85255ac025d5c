//! `cuda.igemm_tc` and `cuda.igemm_simt`: implicit GEMM for channels-last problems
//! (kernels/igemm/), every direction, groups in the grid. `igemm_tc` multiplies on tensor
//! cores with fp32 accumulation: 16-bit tiles by mma.sync m16n8k16, tf32 problems' fp32 tiles
//! rounded to TF32 by m16n8k8; `igemm_simt` is the same pipeline with fp32 FMAs, for fp32 and
//! tf32 data. The config space is the block tile (bm x bn x bk),
//! the warp grid (tensor cores), the cp.async pipeline depth and, for backward-weight, the
//! split of the pixel reduction (`ks`) and how slices are summed (`red`: 0 atomics into an
//! fp32 workspace, 1 one workspace slice each and a reduction kernel).
//!
//! Pieces: `tile` (the tile space, a tile's resources, config text and checks, the kernel's
//! defines), `occupancy` (blocks per SM from the device's limits), `cost` (the default tile).

mod cost;
mod occupancy;
#[cfg(test)]
mod tests;
mod tile;

use std::sync::Arc;

use cudarc::driver::sys::CUfunction_attribute as FuncAttr;
use cudarc::driver::{CudaFunction, LaunchConfig};
use gconv_core::{
    require, Config, ConvProblem, DataType, Direction, Invoker, Layout, NotApplicable, Result, Solve, Solver,
};

use super::{builds_from_kernel, BuiltFrom};
use crate::device::{backend_error, CudaDevice, SmLimits};
use crate::launch::{self, Arg};
use crate::{ConvParams, Cuda, CudaBuffers, KernelSource};
use tile::{Shape, Tile, SPLITS};

/// The kernel's pieces, by role, in the order the kernel needs them.
const SOURCE: &str = concat!(
    include_str!("../../kernels/igemm/layout.cuh"),
    include_str!("../../kernels/igemm/pipeline.cuh"),
    include_str!("../../kernels/igemm/geometry.cuh"),
    include_str!("../../kernels/igemm/math.cuh"),
    include_str!("../../kernels/igemm/epilogue.cuh"),
    include_str!("../../kernels/igemm/loader.cuh"),
    include_str!("../../kernels/igemm/mainloop.cuh"),
    include_str!("../../kernels/igemm/kernel.cu"),
    include_str!("../../kernels/split_reduce.cuh"),
);
const SPLIT_THREADS: u32 = 256;
/// Gathered rows keep one bit per tap along each dimension: at most 21 in 64 bits.
const MAX_FILTER_TAPS: u32 = 21;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Math {
    /// mma.sync on fp16/bf16.
    TensorCores,
    /// fp32 FMA.
    Simt,
}

pub struct Igemm {
    pub device: Arc<CudaDevice>,
    plan: Planner,
}

impl Igemm {
    pub fn tensor_cores(device: Arc<CudaDevice>) -> Self {
        Igemm { plan: Planner::new(Math::TensorCores, &device), device }
    }

    pub fn simt(device: Arc<CudaDevice>) -> Self {
        Igemm { plan: Planner::new(Math::Simt, &device), device }
    }
}

/// The tile logic, apart from the GPU so that it can be tested without one: which tiles are
/// valid for a problem and which one to use by default.
#[derive(Debug, Clone, Copy)]
struct Planner {
    math: Math,
    sm_count: u32,
    sm: SmLimits,
}

impl Planner {
    fn new(math: Math, device: &CudaDevice) -> Self {
        Planner { math, sm_count: device.sm_count, sm: device.sm }
    }
}

impl Solver for Igemm {
    fn id(&self) -> &'static str {
        match self.plan.math {
            Math::TensorCores => "cuda.igemm_tc",
            Math::Simt => "cuda.igemm_simt",
        }
    }

    fn applicable(&self, p: &ConvProblem) -> Result<(), NotApplicable> {
        require!(p.layout == Layout::Nhwc, "implicit GEMM here reads channels-last (NHWC) tensors only");
        match self.plan.math {
            Math::TensorCores => require!(
                p.dtype != DataType::F32,
                "exact fp32 runs on cuda.igemm_simt (tf32, from --allow-tf32, may use tensor cores)"
            ),
            Math::Simt => {
                require!(p.dtype.storage() == DataType::F32, "16-bit types run on tensor cores (cuda.igemm_tc)")
            }
        }
        let (major, minor) = self.device.capability;
        require!(major >= 8, "needs cp.async and mma.sync (sm_80 or newer), the GPU is sm_{major}{minor}");
        require!(
            p.dims.iter().all(|d| d.filter <= MAX_FILTER_TAPS),
            "filters longer than {MAX_FILTER_TAPS} taps along a dimension are not supported"
        );
        let tile = self.plan.default_tile(p);
        tile.check(&self.plan, p).map_err(NotApplicable)?;
        Ok(())
    }

    fn workspace_bytes(&self, p: &ConvProblem, config: &Config) -> u64 {
        Tile::from_config(&self.plan, p, config).map_or(0, |t| t.workspace_bytes(p))
    }

    fn default_config(&self, p: &ConvProblem) -> Config {
        self.plan.default_tile(p).to_config(self.plan.math, p.direction)
    }

    fn configs<'a>(&'a self, p: &'a ConvProblem) -> Box<dyn Iterator<Item = Config> + 'a> {
        let splits: Vec<(u32, bool)> = if p.direction == Direction::BackwardWeight {
            SPLITS.into_iter().flat_map(|s| [(s, false), (s, true)]).filter(|&(s, two)| s > 1 || !two).collect()
        } else {
            vec![(1, false)]
        };
        let tiles = self.plan.candidate_tiles().into_iter().flat_map(move |t| {
            splits.clone().into_iter().map(move |(splits, two_stage)| Tile { splits, two_stage, ..t })
        });
        Box::new(
            tiles
                .filter(move |t| t.check(&self.plan, p).is_ok())
                .map(move |t| t.to_config(self.plan.math, p.direction)),
        )
    }

    fn check_config(&self, p: &ConvProblem, config: &Config) -> Result<()> {
        Tile::from_config(&self.plan, p, config).map(|_| ())
    }

    builds_from_kernel!();
}

impl BuiltFrom for Igemm {
    fn device(&self) -> &CudaDevice {
        &self.device
    }

    fn kernels(&self, p: &ConvProblem, config: &Config) -> Result<Vec<KernelSource>> {
        Ok(vec![Tile::from_config(&self.plan, p, config)?.source(&self.plan, p)])
    }
}

impl Solve<Cuda> for Igemm {
    fn solution(&self, p: &ConvProblem, config: &Config) -> Result<Box<dyn Invoker<Cuda>>> {
        let tile = Tile::from_config(&self.plan, p, config)?;
        let src = tile.source(&self.plan, p);
        let main = self.device.function(&src, "igemm")?;
        let shared = tile.shared_bytes(p);
        launch::allow_shared(&main, shared, "cuda.igemm")?;
        let registers = main
            .get_attribute(FuncAttr::CU_FUNC_ATTRIBUTE_NUM_REGS)
            .map_err(|e| backend_error("read cuda.igemm's register count", e))?;
        let carveout = self.plan.carveout_percent(tile.threads(), registers as u32, shared);
        main.set_attribute(FuncAttr::CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT, carveout as i32)
            .map_err(|e| backend_error("set cuda.igemm's shared-memory carveout", e))?;
        let shape = Shape::new(p);
        let (x, y, z) = shape.grid(&tile);
        let launch = LaunchConfig {
            grid_dim: (x as u32, y as u32, z as u32),
            block_dim: (tile.threads(), 1, 1),
            shared_mem_bytes: shared,
        };
        let split = match (p.direction, tile.splits) {
            (Direction::BackwardWeight, 2..) => {
                let weights = p.weight_elements();
                Some(Split {
                    zero_bytes: if tile.two_stage { 0 } else { weights * 4 },
                    reduce: self.device.function(&src, "split_reduce")?,
                    slices: if tile.two_stage { tile.splits as i32 } else { 1 },
                    count: weights as i32,
                    blocks: (weights.div_ceil(u64::from(SPLIT_THREADS)) as u32).clamp(1, self.device.sm_count * 8),
                })
            }
            _ => None,
        };
        // Blocks of one group, told apart by phase or slice.
        let zdim = (z / shape.groups) as i32;
        Ok(Box::new(IgemmInvoker { main, params: ConvParams::new(p), direction: p.direction, launch, zdim, split }))
    }
}

/// Backward-weight with more than one slice: zero the workspace (atomics) and reduce it.
struct Split {
    /// Bytes of fp32 sums to zero before atomics add into them; 0 for two stages.
    zero_bytes: u64,
    reduce: CudaFunction,
    slices: i32,
    count: i32,
    blocks: u32,
}

struct IgemmInvoker {
    main: CudaFunction,
    params: ConvParams,
    direction: Direction,
    launch: LaunchConfig,
    zdim: i32,
    split: Option<Split>,
}

impl Invoker<Cuda> for IgemmInvoker {
    fn run(&self, b: &mut CudaBuffers<'_>) -> Result<()> {
        let what = "launch cuda.igemm";
        let (a, bm, out) = match self.direction {
            Direction::Forward => (b.x, b.w, b.y),
            Direction::BackwardData => (b.y, b.w, b.x),
            Direction::BackwardWeight => (b.y, b.x, b.w),
        };
        if let Some(split) = self.split.as_ref().filter(|s| s.zero_bytes > 0) {
            b.zero_workspace(split.zero_bytes)?;
        }
        let args = [
            Arg::Params(&self.params),
            Arg::Buffer(a),
            Arg::Buffer(bm),
            Arg::Buffer(out),
            Arg::Buffer(b.workspace),
            Arg::Int(self.zdim),
        ];
        launch::kernel(b, &self.main, self.launch, &args, what)?;
        if let Some(Split { reduce, slices, count, blocks, .. }) = &self.split {
            let args = [Arg::Buffer(b.workspace), Arg::Int(*slices), Arg::Int(*count), Arg::Buffer(out)];
            launch::kernel(b, reduce, launch::flat(*blocks, SPLIT_THREADS), &args, what)?;
        }
        Ok(())
    }
}
