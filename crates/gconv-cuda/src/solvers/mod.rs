//! One module per solver (and its `.cu` in `kernels/`); `crate::runtime` lists them.

pub mod cudnn;
pub mod depthwise;
pub mod depthwise_tiled;
mod direct;
pub mod gemm_blas;
mod group_packing;
pub mod grouped_direct;
pub mod grouped_mma;
pub mod igemm;
pub mod igemm_wgmma;
pub mod naive;
pub mod pointwise;
mod tap_packing;

use gconv_core::{Config, ConvProblem, Result};

use crate::device::CudaDevice;
use crate::KernelSource;

/// A solver whose solutions run kernels built by NVRTC: `kernels` says which (every source a
/// solution launches from, helpers included, so that a precompiled solution builds nothing when
/// it first runs), and [`builds_from_kernel!`] derives `needs_build` and `prepare` from it.
pub(crate) trait BuiltFrom {
    fn device(&self) -> &CudaDevice;
    fn kernels(&self, p: &ConvProblem, config: &Config) -> Result<Vec<KernelSource>>;
}

/// Whether any of the solution's kernels is unbuilt (a config the solver rejects counts as
/// unbuilt: building it reports why).
pub(crate) fn needs_build(solver: &impl BuiltFrom, p: &ConvProblem, config: &Config) -> bool {
    solver.kernels(p, config).map_or(true, |sources| sources.iter().any(|s| !solver.device().is_built(s)))
}

/// Builds the solution's kernels into the caches.
pub(crate) fn prepare(solver: &impl BuiltFrom, p: &ConvProblem, config: &Config) -> Result<()> {
    solver.kernels(p, config)?.iter().try_for_each(|source| solver.device().precompile(source))
}

/// `Solver::needs_build` and `Solver::prepare` of a [`BuiltFrom`] solver.
macro_rules! builds_from_kernel {
    () => {
        fn needs_build(&self, p: &gconv_core::ConvProblem, config: &gconv_core::Config) -> bool {
            crate::solvers::needs_build(self, p, config)
        }

        fn prepare(&self, p: &gconv_core::ConvProblem, config: &gconv_core::Config) -> gconv_core::Result<()> {
            crate::solvers::prepare(self, p, config)
        }
    };
}
pub(crate) use builds_from_kernel;
