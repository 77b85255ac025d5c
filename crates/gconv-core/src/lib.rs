//! gconv-core: the problem model, host tensors, the solver contract, the runtime trait, the
//! reference implementation and verification. No backend lives here.

pub mod applicability;
pub mod config;
pub mod conversion;
pub mod error;
pub mod geometry;
pub mod problem;
pub mod reference;
pub mod runtime;
pub mod solver;
pub mod tensor;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
pub mod verify;

pub use config::{Config, Field, Schema, Values};
pub use conversion::{Conversion, Format};
pub use error::{GconvError, Result};
pub use geometry::Geometry;
pub use problem::{ConvProblem, DataType, Direction, Layout, SpatialDim};
pub use runtime::{
    CallerBuffers, DeviceFacts, Peaks, ReplayCounts, Runtime, Timer, TimingMethod, TimingOptions, Workload, Yardstick,
};
pub use solver::{Backend, BuildStats, Invoker, NotApplicable, Registry, Solution, Solve, Solver, SolverKind};
pub use tensor::{ConvTensors, Tensor};

#[cfg(test)]
mod tests;
