//! What the direct kernels (`cuda.depthwise`, `cuda.grouped_direct`) share: forward and
//! backward-data are one gather launch; backward-weight zeroes an fp32 workspace, adds partial
//! sums into it (grid.y: filter taps or depth), then rounds it into dw.

use cudarc::driver::{CudaFunction, LaunchConfig};
use gconv_core::{require, ConvProblem, Direction, Invoker, NotApplicable, Result};

use crate::launch::{self, flat, Arg};
use crate::{ConvParams, Cuda, CudaBuffers};

pub const THREADS: u32 = 256;
/// Filter heights and widths are compiled in, up to this.
const MAX_FILTER: u32 = 7;

/// Filter (height, width): the last two spatial dimensions, 1 where the rank is lower.
pub fn filter_hw(p: &ConvProblem) -> (u32, u32) {
    let f: Vec<u32> = p.dims.iter().map(|d| d.filter).collect();
    match f.as_slice() {
        [w] => (1, *w),
        [.., h, w] => (*h, *w),
        [] => (1, 1),
    }
}

/// Why the filter is too large for the compiled sizes, if it is.
pub fn check_filter(p: &ConvProblem) -> std::result::Result<(), NotApplicable> {
    let (fh, fw) = filter_hw(p);
    require!(
        fh <= MAX_FILTER && fw <= MAX_FILTER,
        "filter {fh}x{fw} is larger than the compiled sizes (up to {MAX_FILTER}x{MAX_FILTER})"
    );
    Ok(())
}

/// Backward-weight sums into an fp32 copy of the weights; the other directions need nothing.
pub fn workspace_bytes(p: &ConvProblem) -> u64 {
    match p.direction {
        Direction::BackwardWeight => p.weight_elements() * 4,
        _ => 0,
    }
}

pub enum Kernels {
    /// `(params, src, w, dst)` on its grid.
    Gather { function: CudaFunction, launch: LaunchConfig },
    /// `sums` fp32 sums zeroed in the workspace, then `partial(params, x, dy, ws)` on its
    /// launch shape, `store(params, ws, dw)` on `blocks` blocks.
    Weight { partial: CudaFunction, partial_launch: LaunchConfig, store: CudaFunction, sums: u64, blocks: u32 },
}

pub struct DirectInvoker {
    pub solver: &'static str,
    pub params: ConvParams,
    pub direction: Direction,
    pub kernels: Kernels,
}

impl Invoker<Cuda> for DirectInvoker {
    fn run(&self, b: &mut CudaBuffers<'_>) -> Result<()> {
        let what = format!("launch {}", self.solver);
        let params = Arg::Params(&self.params);
        match &self.kernels {
            Kernels::Gather { function, launch } => {
                let (src, dst) = match self.direction {
                    Direction::Forward => (b.x, b.y),
                    _ => (b.y, b.x),
                };
                launch::kernel(
                    b,
                    function,
                    *launch,
                    &[params, Arg::Buffer(src), Arg::Buffer(b.w), Arg::Buffer(dst)],
                    &what,
                )
            }
            Kernels::Weight { partial, partial_launch, store, sums, blocks } => {
                b.zero_workspace(sums * 4)?;
                launch::kernel(
                    b,
                    partial,
                    *partial_launch,
                    &[Arg::Params(&self.params), Arg::Buffer(b.x), Arg::Buffer(b.y), Arg::Buffer(b.workspace)],
                    &what,
                )?;
                launch::kernel(
                    b,
                    store,
                    flat(*blocks, THREADS),
                    &[params, Arg::Buffer(b.workspace), Arg::Buffer(b.w)],
                    &what,
                )
            }
        }
    }
}
