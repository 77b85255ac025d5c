//! What the direct kernels (`cuda.depthwise`, `cuda.grouped_direct`) share: forward and
//! backward-data are one gather launch; backward-weight zeroes an fp32 workspace, adds partial
//! sums into it (grid.y: filter taps or depth), then rounds it into dw.

use cudarc::driver::{CudaFunction, LaunchConfig, PushKernelArg};
use gconv_core::{ConvProblem, Direction, Invoker, Result};

use crate::device::backend_error;
use crate::{ConvParams, Cuda, CudaBuffers};

pub const THREADS: u32 = 256;

/// Filter (height, width): the last two spatial dimensions, 1 where the rank is lower.
pub fn filter_hw(p: &ConvProblem) -> (u32, u32) {
    let f: Vec<u32> = p.dims.iter().map(|d| d.filter).collect();
    match f.as_slice() {
        [w] => (1, *w),
        [.., h, w] => (*h, *w),
        [] => (1, 1),
    }
}

pub enum Kernels {
    /// `(params, src, w, dst)` over a flat grid.
    Gather { function: CudaFunction, blocks: u32 },
    /// `zero(ws, count)`, `partial(params, x, dy, ws)`, `store(params, ws, dw)`.
    Weight { zero: CudaFunction, partial: CudaFunction, store: CudaFunction, grid: (u32, u32), block: (u32, u32), sums: i32, blocks: u32 },
}

pub struct DirectInvoker {
    pub solver: &'static str,
    pub params: ConvParams,
    pub direction: Direction,
    pub kernels: Kernels,
}

fn flat(blocks: u32) -> LaunchConfig {
    LaunchConfig { grid_dim: (blocks, 1, 1), block_dim: (THREADS, 1, 1), shared_mem_bytes: 0 }
}

impl Invoker<Cuda> for DirectInvoker {
    fn run(&self, b: &mut CudaBuffers<'_>) -> Result<()> {
        let launch_err = |e| backend_error(&format!("launch {}", self.solver), e);
        // SAFETY (every launch below): the arguments match the kernels' signatures and the
        // pointers come from buffers sized for this problem, the workspace included.
        match &self.kernels {
            Kernels::Gather { function, blocks } => {
                let (src, dst) = match self.direction {
                    Direction::Forward => (b.x, b.y),
                    _ => (b.y, b.x),
                };
                let mut l = b.stream.launch_builder(function);
                l.arg(&self.params).arg(&src).arg(&b.w).arg(&dst);
                unsafe { l.launch(flat(*blocks)) }.map_err(launch_err)?;
            }
            Kernels::Weight { zero, partial, store, grid, block, sums, blocks } => {
                let mut l = b.stream.launch_builder(zero);
                l.arg(&b.workspace).arg(sums);
                unsafe { l.launch(flat(*blocks)) }.map_err(launch_err)?;
                let mut l = b.stream.launch_builder(partial);
                l.arg(&self.params).arg(&b.x).arg(&b.y).arg(&b.workspace);
                let cfg = LaunchConfig { grid_dim: (grid.0, grid.1, 1), block_dim: (block.0, block.1, 1), shared_mem_bytes: 0 };
                unsafe { l.launch(cfg) }.map_err(launch_err)?;
                let mut l = b.stream.launch_builder(store);
                l.arg(&self.params).arg(&b.workspace).arg(&b.w);
                unsafe { l.launch(flat(*blocks)) }.map_err(launch_err)?;
            }
        }
        Ok(())
    }
}
