//! The GPU as a [`Runtime`]: the solvers, one line each, tensors in GPU memory, timing by the
//! one measurement path (timing.rs), the naive kernels as the reference, cuDNN as the
//! yardstick.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use gconv_core::verify::{error_scale_floor, Verification};
use gconv_core::{
    BuildStats, CallerBuffers, Config, ConvProblem, ConvTensors, Conversion, DataType, GconvError, Peaks, Registry,
    ReplayCounts, Result, Runtime, Solution, Solver, Tensor, Timer, TimingOptions, Workload, Yardstick,
};

use crate::check::Reference;
use crate::cudnn::Cudnn;
use crate::device::{driver_error, CudaDevice};
use crate::replay::Replays;
use crate::solvers::*;
use crate::timing::GpuTimer;
use crate::{Buffer, Cuda, CudaBuffers, DeviceTensors};

/// The CUDA backend on one GPU, in the device's primary context (shared with other runtimes and
/// libraries of the process). A workload's runs, timings and verifications go to the stream of
/// the thread that uploaded it, so threads working on workloads of their own never meet; any
/// number of runtimes may live, work and be dropped side by side.
pub struct CudaRuntime {
    pub device: Arc<CudaDevice>,
    registry: Registry<Cuda>,
    cudnn: Arc<Cudnn>,
    key: String,
    peaks: Mutex<HashMap<DataType, Peaks>>,
    replays: Replays,
}

/// Every CUDA solver, one line each, in priority order.
fn registry(device: &Arc<CudaDevice>, cudnn: &Arc<Cudnn>) -> Registry<Cuda> {
    Registry::new(vec![
        Box::new(gemm_blas::GemmBlas::new(device.clone())),
        Box::new(depthwise::Depthwise { device: device.clone() }),
        Box::new(depthwise_tiled::DepthwiseTiled { device: device.clone() }),
        Box::new(grouped_direct::GroupedDirect { device: device.clone() }),
        Box::new(grouped_mma::GroupedMma { device: device.clone() }),
        Box::new(pointwise::Pointwise { device: device.clone() }),
        Box::new(igemm_wgmma::IgemmWgmma { device: device.clone() }),
        Box::new(igemm::Igemm::tensor_cores(device.clone())),
        Box::new(igemm::Igemm::simt(device.clone())),
        Box::new(cudnn::CudnnSolver { library: cudnn.clone() }),
        Box::new(naive::Naive { device: device.clone() }),
    ])
}

impl CudaRuntime {
    pub fn new(device: Arc<CudaDevice>) -> Self {
        let cudnn = Cudnn::new(device.clone());
        CudaRuntime {
            registry: registry(&device, &cudnn),
            key: device.key(),
            cudnn,
            device,
            peaks: Mutex::default(),
            replays: Replays::new(),
        }
    }

    /// The first GPU, kernels cached under `kernel_cache`; or why there is none usable.
    pub fn probe(kernel_cache: Option<PathBuf>) -> std::result::Result<Self, String> {
        CudaDevice::probe(kernel_cache).map(Self::new)
    }

    /// GPU `ordinal`, as [`CudaRuntime::probe`].
    pub fn probe_ordinal(ordinal: usize, kernel_cache: Option<PathBuf>) -> std::result::Result<Self, String> {
        CudaDevice::probe_ordinal(ordinal, kernel_cache).map(Self::new)
    }
}

impl Runtime for CudaRuntime {
    fn backend(&self) -> &'static str {
        "cuda"
    }

    fn device_key(&self) -> &str {
        &self.key
    }

    fn facts(&self) -> gconv_core::DeviceFacts {
        gconv_core::DeviceFacts { units: self.device.sm_count, clock_mhz: self.device.clock_mhz }
    }

    fn worker_devices(&self) -> Vec<String> {
        let count = self.device.visible_devices as usize;
        if count < 2 {
            return Vec::new();
        }
        // Ordinals are relative to what this process was allowed to see: a worker must be
        // given the same names its parent was.
        match std::env::var("CUDA_VISIBLE_DEVICES") {
            Ok(list) if !list.trim().is_empty() => list.split(',').map(|d| d.trim().to_string()).take(count).collect(),
            _ => (0..count).map(|i| i.to_string()).collect(),
        }
    }

    fn describe(&self) -> String {
        let d = &self.device;
        let cudnn = d
            .cudnn_version
            .map_or("no cuDNN".to_string(), |v| format!("cuDNN {}.{}.{}", v / 10000, v / 100 % 100, v % 100));
        format!(
            "cuda: {} ({}, {} SMs, NVRTC {}.{}, driver API {}.{}, {cudnn})",
            d.name,
            d.arch(),
            d.sm_count,
            d.nvrtc_version.0,
            d.nvrtc_version.1,
            d.driver_version / 1000,
            d.driver_version % 1000 / 10
        )
    }

    fn owns_device_key(&self, key: &str) -> bool {
        key.starts_with("cuda:")
    }

    fn build_stats(&self) -> Option<BuildStats> {
        let (listings, listings_from_disk) = self.cudnn.listing_counts();
        Some(BuildStats { listings, listings_from_disk, ..self.device.build_stats() })
    }

    fn solvers(&self) -> Vec<&dyn Solver> {
        self.registry.solvers()
    }

    fn build(&self, id: &str, p: &ConvProblem, config: Config) -> Result<Solution> {
        self.registry.build(id, p, config)
    }

    unsafe fn run_on(&self, s: &Solution, b: &CallerBuffers) -> Result<()> {
        // SAFETY: the caller promises a live stream of the device's primary context.
        let stream = unsafe { self.device.borrowed_stream(b.stream)? };
        let p = &s.problem;
        let elem = p.dtype.size_bytes() as u64;
        let buffer = |ptr, bytes| Buffer { ptr, bytes };
        let given = [
            buffer(b.x, p.input_elements() * elem),
            buffer(b.w, p.weight_elements() * elem),
            buffer(b.y, p.output_elements() * elem),
            buffer(b.workspace, b.workspace_bytes),
        ];
        if given[..3].iter().any(|b| b.ptr == 0) {
            return Err(GconvError::TensorMismatch("a null address for a tensor".into()));
        }
        // Kernels load 16 bytes at a time and cuDNN's graphs are declared 16-byte aligned.
        if let Some(b) = given.iter().find(|b| !b.ptr.is_multiple_of(16)) {
            return Err(GconvError::TensorMismatch(format!("address {:#x} is not 16-byte aligned", b.ptr)));
        }
        let mut buffers = CudaBuffers::covering(p, s.workspace_bytes, given, &stream)?;
        self.replays.run(&self.device, s, s.invoker::<Cuda>()?, &mut buffers)
    }

    fn set_launch_replay(&self, enabled: bool) {
        self.replays.set_enabled(enabled);
    }

    fn launch_replays(&self) -> ReplayCounts {
        self.replays.counts()
    }

    fn synchronize(&self) -> Result<()> {
        // This thread's stream: the one its workloads enqueue on.
        self.device.stream()?.synchronize().map_err(|e| driver_error("run on the GPU", e))
    }

    fn upload(&self, p: &ConvProblem, tensors: &ConvTensors) -> Result<Box<dyn Workload>> {
        Ok(Box::new(CudaWorkload {
            device: self.device.clone(),
            problem: p.clone(),
            gpu: DeviceTensors::upload(&self.device, tensors)?,
            error_floor: error_scale_floor(p, tensors),
            reference: None,
        }))
    }

    fn convert(&self, c: &Conversion, input: &Tensor) -> Result<Tensor> {
        crate::convert::convert(&self.device, c, input)
    }

    fn conversion_timer(&self, c: &Conversion, options: TimingOptions) -> Result<Box<dyn Timer + '_>> {
        crate::convert::timer(&self.device, c, options)
    }

    fn peaks(&self, dtype: DataType) -> Result<Option<Peaks>> {
        if let Some(peaks) = self.peaks.lock().unwrap().get(&dtype) {
            return Ok(Some(*peaks));
        }
        let measured = crate::roofline::measure_peaks(&self.device, dtype)?;
        self.peaks.lock().unwrap().insert(dtype, measured);
        Ok(Some(measured))
    }

    fn vendor_pick(&self, p: &ConvProblem) -> Result<Option<(&'static str, Config)>> {
        if self.cudnn.version().is_none() || self.cudnn.supports(p).is_err() {
            return Ok(None);
        }
        Ok(self.cudnn.heuristic_pick(p)?.map(|config| ("cuda.cudnn", config)))
    }

    fn yardstick(&self, p: &ConvProblem) -> Result<Option<Yardstick>> {
        if self.cudnn.version().is_none() {
            return Ok(None);
        }
        let listed = self.cudnn.quick_candidates(p)?;
        Ok(listed.heuristic.clone().map(|heuristic| Yardstick {
            library: "cuDNN",
            solver: "cuda.cudnn",
            heuristic,
            find: listed.find.clone(),
        }))
    }
}

struct CudaWorkload {
    device: Arc<CudaDevice>,
    problem: ConvProblem,
    gpu: DeviceTensors,
    /// [`error_scale_floor`] of the uploaded inputs.
    error_floor: f64,
    /// The exact result, on the GPU: the naive kernels with fp32 output (the CPU's plain loops
    /// are too slow for real layers).
    reference: Option<Reference>,
}

/// The buffers `s` runs on: the workload's data `gpu` of `problem`, when `s` was built for that
/// problem, and a workspace of the size `s` asks for.
fn buffers_for<'g>(gpu: &'g mut DeviceTensors, problem: &ConvProblem, s: &Solution) -> Result<CudaBuffers<'g>> {
    if s.problem != *problem {
        return Err(GconvError::Backend(format!(
            "{} was built for {}, and the data is for {}",
            s.solver_id,
            s.problem.key(),
            problem.key()
        )));
    }
    gpu.reserve_workspace(s.workspace_bytes)?;
    gpu.buffers(problem, s.workspace_bytes)
}

impl Workload for CudaWorkload {
    fn run(&mut self, s: &Solution) -> Result<()> {
        self.enqueue(s)?;
        self.gpu.stream().synchronize().map_err(|e| driver_error("run on the GPU", e))
    }

    fn enqueue(&mut self, s: &Solution) -> Result<()> {
        s.invoker::<Cuda>()?.run(&mut buffers_for(&mut self.gpu, &self.problem, s)?)
    }

    fn timer<'a>(&'a mut self, s: &'a Solution, options: TimingOptions) -> Result<Box<dyn Timer + 'a>> {
        let stream = self.gpu.stream().clone();
        let mut buffers = buffers_for(&mut self.gpu, &self.problem, s)?;
        let invoker = s.invoker::<Cuda>()?;
        Ok(Box::new(GpuTimer::new(&self.device, stream, options, move || invoker.run(&mut buffers))?))
    }

    fn output(&self) -> Result<Tensor> {
        let p = &self.problem;
        let mut out = Tensor::try_zeros(p.dtype, p.result_elements(p.direction) as usize)?;
        self.gpu.download_output(p, &mut out)?;
        Ok(out)
    }

    fn prepare_reference(&mut self) -> Result<()> {
        if self.reference.is_none() {
            let buffers = self.gpu.buffers(&self.problem, 0)?;
            self.reference = Some(Reference::new(&self.device, &self.problem, &buffers, self.error_floor)?);
        }
        Ok(())
    }

    fn run_checked(&mut self, s: &Solution) -> Result<Verification> {
        self.prepare_reference()?;
        self.gpu.poison_output(self.problem.direction)?;
        self.run(s)?;
        let buffers = self.gpu.buffers(&self.problem, 0)?;
        self.reference.as_mut().expect("prepared above").verify(&self.device, &self.problem, &buffers)
    }
}
