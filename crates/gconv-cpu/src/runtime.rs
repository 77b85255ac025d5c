//! The CPU as a [`Runtime`]: tensors stay in host memory, samples are timed by the wall clock
//! around back-to-back synchronous calls.

use std::time::Instant;

use gconv_core::conversion::convert_on_host;
use gconv_core::reference::reference;
use gconv_core::runtime::calls_per_sample;
use gconv_core::verify::{error_scale_floor, verify, Verification};
use gconv_core::{
    CallerBuffers, Config, ConvProblem, ConvTensors, Conversion, Direction, GconvError, Registry, Result, Runtime,
    Solution, Solver, Tensor, Timer, TimingMethod, TimingOptions, Workload,
};

use crate::{CpuDevice, Host, HostBuffers};

pub struct CpuRuntime {
    pub device: CpuDevice,
    registry: Registry<Host>,
    key: String,
}

impl CpuRuntime {
    pub fn new(device: CpuDevice) -> Self {
        CpuRuntime { registry: crate::registry(&device), key: device.key(), device }
    }

    /// The machine's CPU with every core.
    pub fn detect() -> Self {
        Self::new(CpuDevice::detect())
    }
}

impl Runtime for CpuRuntime {
    fn backend(&self) -> &'static str {
        "cpu"
    }

    fn device_key(&self) -> &str {
        &self.key
    }

    /// The clock is left unknown: /proc/cpuinfo gives the current, not the peak, frequency.
    fn facts(&self) -> gconv_core::DeviceFacts {
        gconv_core::DeviceFacts { units: self.device.threads as u32, clock_mhz: 0 }
    }

    fn describe(&self) -> String {
        format!("cpu: {} ({}, {} threads)", self.device.model, self.device.simd, self.device.threads)
    }

    fn owns_device_key(&self, key: &str) -> bool {
        key.starts_with("cpu:")
    }

    fn solvers(&self) -> Vec<&dyn Solver> {
        self.registry.solvers()
    }

    fn build(&self, id: &str, p: &ConvProblem, config: Config) -> Result<Solution> {
        self.registry.build(id, p, config)
    }

    fn upload(&self, p: &ConvProblem, tensors: &ConvTensors) -> Result<Box<dyn Workload>> {
        Ok(Box::new(CpuWorkload { problem: p.clone(), tensors: tensors.clone(), workspace: Vec::new(), exact: None }))
    }

    /// Runs through tensors of its own: the inputs are copied in and the output copied out
    /// (the CPU solvers widen every tensor to fp32 anyway).
    unsafe fn run_on(&self, s: &Solution, b: &CallerBuffers) -> Result<()> {
        let p = &s.problem;
        let dtype = p.dtype.storage();
        let elem = dtype.size_bytes();
        let tensor = |address: u64, elements: u64| -> Result<Tensor> {
            if address == 0 {
                return Err(GconvError::TensorMismatch("a null address for a tensor".into()));
            }
            let mut t = Tensor::try_zeros(dtype, elements as usize)?;
            // SAFETY: the caller promises `elements` values of the problem's type at `address`.
            t.copy_from_bytes(unsafe { std::slice::from_raw_parts(address as *const u8, elements as usize * elem) })?;
            Ok(t)
        };
        let mut tensors = ConvTensors {
            x: tensor(b.x, p.input_elements())?,
            w: tensor(b.w, p.weight_elements())?,
            y: tensor(b.y, p.output_elements())?,
        };
        let mut workspace = Vec::new();
        run_solution(s, &mut tensors, &mut workspace)?;
        let out = tensors.output(p.direction).as_bytes();
        let address = match p.direction {
            Direction::Forward => b.y,
            Direction::BackwardData => b.x,
            Direction::BackwardWeight => b.w,
        };
        // SAFETY: the caller promises the output tensor's bytes at `address`, apart from the inputs.
        unsafe { std::ptr::copy_nonoverlapping(out.as_ptr(), address as *mut u8, out.len()) };
        Ok(())
    }

    fn convert(&self, c: &Conversion, input: &Tensor) -> Result<Tensor> {
        convert_on_host(c, input)
    }

    fn conversion_timer(&self, c: &Conversion, _options: TimingOptions) -> Result<Box<dyn Timer + '_>> {
        let input = Tensor::try_random(c.from.dtype.storage(), c.elements() as usize, 1)?;
        let c = c.clone();
        Ok(Box::new(WallClock::new(Box::new(move || convert_on_host(&c, &input).map(drop)))?))
    }
}

struct CpuWorkload {
    problem: ConvProblem,
    tensors: ConvTensors,
    workspace: Vec<f32>,
    /// The reference result and the error scale floor of the inputs.
    exact: Option<(Vec<f64>, f64)>,
}

impl Workload for CpuWorkload {
    fn run(&mut self, s: &Solution) -> Result<()> {
        run_solution(s, &mut self.tensors, &mut self.workspace)
    }

    fn timer<'a>(&'a mut self, s: &'a Solution, _options: TimingOptions) -> Result<Box<dyn Timer + 'a>> {
        // No cache flush on the CPU: its caches are small next to these tensors.
        Ok(Box::new(WallClock::new(Box::new(move || self.run(s)))?))
    }

    fn output(&self) -> Result<Tensor> {
        Ok(self.tensors.output(self.problem.direction).clone())
    }

    fn prepare_reference(&mut self) -> Result<()> {
        if self.exact.is_none() {
            // Runs overwrite only the output; the inputs the reference reads stay as uploaded.
            self.exact =
                Some((reference(&self.problem, &self.tensors), error_scale_floor(&self.problem, &self.tensors)));
        }
        Ok(())
    }

    fn run_checked(&mut self, s: &Solution) -> Result<Verification> {
        self.prepare_reference()?;
        self.tensors.output_mut(self.problem.direction).fill_nan();
        self.run(s)?;
        let (exact, floor) = self.exact.as_ref().expect("prepared above");
        Ok(verify(&self.problem, self.tensors.output(self.problem.direction), exact, *floor))
    }
}

/// Runs `s` on `tensors`, growing `workspace` to what it needs.
fn run_solution(s: &Solution, tensors: &mut ConvTensors, workspace: &mut Vec<f32>) -> Result<()> {
    let needed = usize::try_from(s.workspace_bytes.div_ceil(4)).unwrap_or(usize::MAX);
    if workspace.len() < needed {
        workspace.clear();
        workspace
            .try_reserve_exact(needed)
            .map_err(|_| GconvError::Backend(format!("cannot allocate a workspace of {} bytes", s.workspace_bytes)))?;
        workspace.resize(needed, 0.0);
    }
    s.invoker::<Host>()?.run(&mut HostBuffers { tensors, workspace })
}

/// Back-to-back calls timed by the wall clock.
struct WallClock<'a> {
    call: Box<dyn FnMut() -> Result<()> + 'a>,
    calls: u32,
    estimate: f64,
}

impl<'a> WallClock<'a> {
    /// Calibrates on one call.
    fn new(mut call: Box<dyn FnMut() -> Result<()> + 'a>) -> Result<Self> {
        let start = Instant::now();
        call()?;
        let estimate = start.elapsed().as_secs_f64();
        Ok(WallClock { call, calls: calls_per_sample(estimate), estimate })
    }
}

impl Timer for WallClock<'_> {
    fn estimate(&self) -> f64 {
        self.estimate
    }

    fn sample(&mut self) -> Result<f64> {
        let start = Instant::now();
        for _ in 0..self.calls {
            (self.call)()?;
        }
        Ok(start.elapsed().as_secs_f64() / f64::from(self.calls))
    }

    fn calls(&self) -> u32 {
        self.calls
    }

    fn method(&self) -> TimingMethod {
        TimingMethod::WallClock
    }
}
