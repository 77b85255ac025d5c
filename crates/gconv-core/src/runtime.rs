//! The runtime: what find, tuning, bench and the CLI need from a backend, behind one
//! object-safe trait. A backend is a crate that implements [`Runtime`] plus one line in the
//! CLI's list of runtimes.

use serde::Serialize;

use crate::config::Config;
use crate::conversion::Conversion;
use crate::error::{GconvError, Result};
use crate::problem::{ConvProblem, DataType};
use crate::solver::{BuildStats, Solution, Solver};
use crate::tensor::{ConvTensors, Tensor};
use crate::verify::Verification;

/// How samples are taken; every timing report says which.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct TimingOptions {
    /// Flush the device's cache before each sample (warm by default, as PyTorch's benchmark
    /// and cuDNN's find see it).
    pub cold_cache: bool,
}

impl TimingOptions {
    pub fn label(self) -> &'static str {
        if self.cold_cache {
            "cold L2"
        } else {
            "warm L2"
        }
    }
}

/// How a timer makes its calls back to back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum TimingMethod {
    /// A CUDA graph of the calls, replayed between two events.
    GraphReplay,
    /// The calls queued behind a spin kernel, so the GPU never waits for the host.
    SpinQueued,
    /// Host wall clock around synchronous calls (the CPU).
    WallClock,
}

impl TimingMethod {
    pub fn label(self) -> &'static str {
        match self {
            TimingMethod::GraphReplay => "graph replay",
            TimingMethod::SpinQueued => "spin-queued calls",
            TimingMethod::WallClock => "wall clock",
        }
    }
}

/// Times one solution on one workload. Each sample runs `calls()` calls back to back and
/// returns the time per call; how many samples to take and what to make of them is the
/// tuner's policy.
pub trait Timer {
    /// The time of the one call the timer was calibrated on: enough to time-box a slow
    /// candidate before anything else is spent on it.
    fn estimate(&self) -> f64;
    fn sample(&mut self) -> Result<f64>;
    fn calls(&self) -> u32;
    fn method(&self) -> TimingMethod;
}

/// A problem's data where the backend's solutions read and write it, and the exact result
/// they are checked against.
pub trait Workload {
    /// Runs the solution once, synchronously.
    fn run(&mut self, s: &Solution) -> Result<()>;
    /// Runs the solution once without waiting for it where the backend queues work (then
    /// [`Runtime::synchronize`] waits); a backend with no queue runs it synchronously.
    fn enqueue(&mut self, s: &Solution) -> Result<()> {
        self.run(s)
    }
    /// A timer for `s` on this data. Making it runs one call, the timer's one-call estimate;
    /// that may be the solution's first call (find's warm-up), so a backend whose first call
    /// costs extra host time must time it again.
    fn timer<'a>(&'a mut self, s: &'a Solution, options: TimingOptions) -> Result<Box<dyn Timer + 'a>>;
    /// The output tensor of the last run, on the host.
    fn output(&self) -> Result<Tensor>;
    /// Computes the exact result of this data, once, where the backend keeps it.
    fn prepare_reference(&mut self) -> Result<()>;
    /// Fills the output with NaN (so nothing a solution leaves unwritten passes), runs the
    /// solution once and compares its output with the exact result where the data lives: on a
    /// GPU only the verdict crosses the bus.
    fn run_checked(&mut self, s: &Solution) -> Result<Verification>;
}

/// The device's measured peaks, for roofline bounds.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Peaks {
    pub flops_per_s: f64,
    pub bytes_per_s: f64,
}

impl Peaks {
    /// The time no kernel can beat: the larger of compute time and memory time.
    pub fn bound_s(&self, flops: f64, bytes: f64) -> f64 {
        (flops / self.flops_per_s).max(bytes / self.bytes_per_s)
    }
}

/// A vendor library's own choices for a problem, for `gconv bench`: the configs (of one of
/// the runtime's solvers) that its heuristic and its find would take.
#[derive(Debug, Clone)]
pub struct Yardstick {
    pub library: &'static str,
    pub solver: &'static str,
    /// The heuristic's first choice.
    pub heuristic: Config,
    /// What the library's find times; its pick is the fastest.
    pub find: Vec<Config>,
}

/// What a performance model knows of a device.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, serde::Deserialize)]
pub struct DeviceFacts {
    /// SMs of a GPU, threads of a CPU.
    pub units: u32,
    /// Clock in MHz; 0 where unknown.
    pub clock_mhz: u32,
}

/// Memory the caller owns, where a solution runs without gconv allocating, copying or waiting:
/// device addresses of the runtime's GPU and the caller's stream (`0`, the legacy default
/// stream), or host addresses on the CPU (where `stream` is unused). The tensors are packed
/// in the problem's layout; x, w and y are read or written as the problem's direction says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CallerBuffers {
    pub x: u64,
    pub w: u64,
    pub y: u64,
    pub workspace: u64,
    /// At least the solution's [`Solution::workspace_bytes`].
    pub workspace_bytes: u64,
    pub stream: u64,
}

/// What [`Runtime::run_on`]'s launch replay did so far: runs captured into a graph, graph
/// launches in place of runs, and runs that could not be captured (launched as they are).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ReplayCounts {
    pub captured: u64,
    pub replayed: u64,
    pub refused: u64,
}

/// A backend on one device.
pub trait Runtime: Send + Sync {
    /// `cpu`, `cuda`: the name `--backend` takes.
    fn backend(&self) -> &'static str;
    /// Identifies the device in databases.
    fn device_key(&self) -> &str;
    /// One line for people: the device, its properties.
    fn describe(&self) -> String;
    fn facts(&self) -> DeviceFacts;
    /// Whether a database record's device key names a device of this backend, so that this
    /// runtime's solvers judge it (`db prune`).
    fn owns_device_key(&self, key: &str) -> bool;
    /// Where this process sees several devices of this backend: what each worker process is
    /// given (as `CUDA_VISIBLE_DEVICES`) to see one of them. Empty for a single device.
    fn worker_devices(&self) -> Vec<String> {
        Vec::new()
    }
    /// Kernel builds so far, where the backend builds kernels.
    fn build_stats(&self) -> Option<BuildStats> {
        None
    }
    /// Every solver, in priority order.
    fn solvers(&self) -> Vec<&dyn Solver>;
    fn solver(&self, id: &str) -> Result<&dyn Solver> {
        self.solvers().into_iter().find(|s| s.id() == id).ok_or_else(|| GconvError::UnknownSolver(id.to_string()))
    }
    /// Builds solver `id`'s solution for the problem and config.
    fn build(&self, id: &str, p: &ConvProblem, config: Config) -> Result<Solution>;
    /// Places the host tensors where the backend's solutions read them.
    fn upload(&self, p: &ConvProblem, tensors: &ConvTensors) -> Result<Box<dyn Workload>>;
    /// Runs `s` on the caller's memory, enqueued on the caller's stream: no allocation, no
    /// synchronisation and no host round trip on a GPU, so the call can be captured in a CUDA
    /// graph. The sizes are checked against the problem; the addresses cannot be.
    ///
    /// # Safety
    /// Each address must point to memory of this runtime's device (host memory on the CPU)
    /// holding at least the problem's tensor (the workspace: `workspace_bytes`), live until
    /// the work is done, and a GPU stream must belong to the device's primary context. The
    /// output must not overlap the inputs.
    unsafe fn run_on(&self, s: &Solution, _buffers: &CallerBuffers) -> Result<()> {
        Err(GconvError::Backend(format!("the {} backend cannot run {} on caller memory", self.backend(), s.solver_id)))
    }
    /// Whether [`Runtime::run_on`] may launch a run it has seen before on the same addresses
    /// from a graph captured of it, where the backend has graphs (on by default there).
    fn set_launch_replay(&self, _enabled: bool) {}
    /// What the launch replay did so far (nothing, where the backend has none).
    fn launch_replays(&self) -> ReplayCounts {
        ReplayCounts::default()
    }
    /// Waits for everything enqueued on the device ([`Workload::enqueue`]).
    fn synchronize(&self) -> Result<()> {
        Ok(())
    }
    /// Measured arithmetic and memory peaks for `dtype`, where the backend measures them.
    /// Converts an activation tensor between two network layers' formats on this device.
    fn convert(&self, c: &Conversion, _input: &Tensor) -> Result<Tensor> {
        Err(GconvError::Backend(format!(
            "the {} backend has no conversion from {} to {}",
            self.backend(),
            c.from,
            c.to
        )))
    }
    /// A timer of [`Runtime::convert`] on data of its own on the device.
    fn conversion_timer(&self, c: &Conversion, _options: TimingOptions) -> Result<Box<dyn Timer + '_>> {
        Err(GconvError::Backend(format!(
            "the {} backend has no conversion from {} to {}",
            self.backend(),
            c.from,
            c.to
        )))
    }
    fn peaks(&self, _dtype: DataType) -> Result<Option<Peaks>> {
        Ok(None)
    }
    /// The vendor library this backend is judged against, if any.
    fn yardstick(&self, _p: &ConvProblem) -> Result<Option<Yardstick>> {
        Ok(None)
    }
    /// The vendor library's own heuristic pick (solver id and config), where it has one: the
    /// yardstick's, which a backend may ask for without listing everything the yardstick lists.
    fn vendor_pick(&self, p: &ConvProblem) -> Result<Option<(&'static str, Config)>> {
        Ok(self.yardstick(p)?.map(|y| (y.solver, y.heuristic)))
    }
}

/// A sample should last about this long, so that per-sample overheads (event resolution, a
/// graph launch) vanish in it.
pub const SAMPLE_SECONDS: f64 = 1e-3;
/// At most this many calls per sample, for the fastest solutions.
pub const MAX_CALLS_PER_SAMPLE: u32 = 1000;

/// Calls per sample for a solution that takes `one_call_s` per call.
pub fn calls_per_sample(one_call_s: f64) -> u32 {
    if one_call_s.is_finite() && one_call_s > 0.0 {
        (SAMPLE_SECONDS / one_call_s).ceil().clamp(1.0, f64::from(MAX_CALLS_PER_SAMPLE)) as u32
    } else {
        MAX_CALLS_PER_SAMPLE
    }
}
