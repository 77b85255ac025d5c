//! `cuda.naive`: direct convolution, one thread per output element (kernels/naive.cu). The GPU
//! reference: every direction, dtype and layout; sizes are run-time arguments, so one build
//! per (direction, dtype) serves every shape.

use std::sync::Arc;

use cudarc::driver::{CudaFunction, LaunchConfig, PushKernelArg};
use gconv_core::{Config, ConvProblem, Direction, Invoker, NotApplicable, Result, Solve, Solver};

use crate::device::{backend_error, CudaDevice};
use crate::{ConvParams, Cuda, CudaBuffers, KernelSource};

const SOURCE: &str = include_str!("../kernels/naive.cu");
const THREADS: u32 = 256;

pub struct Naive {
    pub device: Arc<CudaDevice>,
}

fn source(p: &ConvProblem) -> KernelSource {
    KernelSource::new("naive.cu", SOURCE, p.dtype)
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

    fn needs_build(&self, p: &ConvProblem, _config: &Config) -> bool {
        !self.device.is_built(&source(p))
    }

    fn prepare(&self, p: &ConvProblem, _config: &Config) -> Result<()> {
        self.device.precompile(&source(p))
    }
}

impl Solve<Cuda> for Naive {
    fn solution(&self, p: &ConvProblem, _config: &Config) -> Result<Box<dyn Invoker<Cuda>>> {
        Ok(Box::new(NaiveInvoker::new(&self.device, p, source(p))?))
    }
}

/// The exact result on the GPU: the naive kernels with fp32 output, for problems too large
/// for the CPU reference to be quick. `buffers` hold the inputs, and in place of the output the
/// fp32 buffer the reference goes to.
pub fn gpu_reference(device: &CudaDevice, p: &ConvProblem, buffers: &mut CudaBuffers<'_>) -> Result<()> {
    NaiveInvoker::new(device, p, source(p).define("GCONV_REF_OUT", 1))?.run(buffers)
}

struct NaiveInvoker {
    function: CudaFunction,
    params: ConvParams,
    direction: Direction,
    blocks: u32,
}

impl NaiveInvoker {
    fn new(device: &CudaDevice, p: &ConvProblem, source: KernelSource) -> Result<Self> {
        let function = device.function(&source, function_name(p.direction))?;
        let outputs = p.result_elements(p.direction);
        // A grid-stride loop: enough blocks to fill the GPU, no more than the work needs.
        let blocks = outputs.div_ceil(u64::from(THREADS)).min(u64::from(device.sm_count) * 64).max(1) as u32;
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
        let cfg = LaunchConfig { grid_dim: (self.blocks, 1, 1), block_dim: (THREADS, 1, 1), shared_mem_bytes: 0 };
        let mut launch = b.stream.launch_builder(&self.function);
        launch.arg(&self.params).arg(&in_a).arg(&in_b).arg(&out);
        // SAFETY: the arguments match the kernel's signature; the pointers come from
        // DeviceTensors sized for this problem.
        unsafe { launch.launch(cfg) }.map_err(|e| backend_error("launch cuda.naive", e))?;
        Ok(())
    }
}
