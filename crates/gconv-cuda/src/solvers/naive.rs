//! `cuda.naive`: direct convolution, each sum in the definition's order (kernels/naive.cu). The
//! GPU reference: every direction, dtype and layout; sizes are run-time arguments, so one build
//! per (direction, dtype) serves every shape. It is find's fallback: it runs only when no
//! other candidate could.

use std::sync::Arc;

use cudarc::driver::CudaFunction;
use gconv_core::{Config, ConvProblem, Direction, Invoker, NotApplicable, Result, Solve, Solver};

use super::{builds_from_kernel, BuiltFrom};
use crate::device::CudaDevice;
use crate::launch::{self, Arg};
use crate::{ConvParams, Cuda, CudaBuffers, KernelSource};

const SOURCE: &str = include_str!("../kernels/naive.cu");
const THREADS: u32 = 256;
/// Output channels one thread sums in the forward and backward-data kernels.
const CH_BLOCK: u32 = 8;

pub struct Naive {
    pub device: Arc<CudaDevice>,
}

fn source(p: &ConvProblem) -> KernelSource {
    KernelSource::new("naive.cu", SOURCE, p.dtype).define("CH_BLOCK", CH_BLOCK)
}

/// Threads' work items: channel blocks of output positions, or weights (times images for the
/// reference, which sums each image on its own thread).
fn work_items(p: &ConvProblem, reference: bool) -> u64 {
    let spatial = |dims: Vec<u32>| dims.into_iter().map(u64::from).product::<u64>();
    let blocks = |channels: u32| u64::from(p.g) * u64::from(channels.div_ceil(CH_BLOCK));
    match p.direction {
        Direction::Forward => u64::from(p.n) * blocks(p.k_per_group()) * spatial(p.output_dims()),
        Direction::BackwardData => {
            u64::from(p.n) * blocks(p.c_per_group()) * spatial(p.dims.iter().map(|d| d.input).collect())
        }
        Direction::BackwardWeight => p.weight_elements() * if reference { u64::from(p.n) } else { 1 },
    }
}

fn function_name(direction: Direction) -> &'static str {
    match direction {
        Direction::Forward => "naive_fwd",
        Direction::BackwardData => "naive_bwd_data",
        Direction::BackwardWeight => "naive_bwd_weight",
    }
}

impl Solver for Naive {
    fn id(&self) -> &'static str {
        "cuda.naive"
    }

    fn applicable(&self, _p: &ConvProblem) -> Result<(), NotApplicable> {
        Ok(())
    }

    fn is_fallback(&self) -> bool {
        true
    }

    builds_from_kernel!();
}

impl BuiltFrom for Naive {
    fn device(&self) -> &CudaDevice {
        &self.device
    }

    fn kernels(&self, p: &ConvProblem, _config: &Config) -> Result<Vec<KernelSource>> {
        Ok(vec![source(p)])
    }
}

impl Solve<Cuda> for Naive {
    fn solution(&self, p: &ConvProblem, _config: &Config) -> Result<Box<dyn Invoker<Cuda>>> {
        Ok(Box::new(NaiveInvoker::new(&self.device, p, source(p), false)?))
    }
}

/// The exact result on the GPU: the naive kernels with fp32 output, for problems too large
/// for the CPU reference to be quick. `buffers` hold the inputs, and in place of the output the
/// fp32 buffer the reference goes to, zeroed (backward-weight adds into it).
pub fn gpu_reference(device: &CudaDevice, p: &ConvProblem, buffers: &mut CudaBuffers<'_>) -> Result<()> {
    NaiveInvoker::new(device, p, source(p).define("GCONV_REF_OUT", 1), true)?.run(buffers)
}

struct NaiveInvoker {
    function: CudaFunction,
    params: ConvParams,
    direction: Direction,
    blocks: u32,
}

impl NaiveInvoker {
    fn new(device: &CudaDevice, p: &ConvProblem, source: KernelSource, reference: bool) -> Result<Self> {
        let function = device.function(&source, function_name(p.direction))?;
        // A grid-stride loop: enough blocks to fill the GPU, no more than the work needs.
        let blocks =
            work_items(p, reference).div_ceil(u64::from(THREADS)).min(u64::from(device.sm_count) * 64).max(1) as u32;
        Ok(NaiveInvoker { function, params: ConvParams::new(p), direction: p.direction, blocks })
    }
}

impl Invoker<Cuda> for NaiveInvoker {
    fn run(&self, b: &mut CudaBuffers<'_>) -> Result<()> {
        let (in_a, in_b, out) = match self.direction {
            Direction::Forward => (b.x, b.w, b.y),
            Direction::BackwardData => (b.y, b.w, b.x),
            Direction::BackwardWeight => (b.x, b.y, b.w),
        };
        let args = [Arg::Params(&self.params), Arg::Buffer(in_a), Arg::Buffer(in_b), Arg::Buffer(out)];
        launch::kernel(b, &self.function, launch::flat(self.blocks, THREADS), &args, "launch cuda.naive")
    }
}
