//! Where find and tuning run: a backend's registry, its device key, and how to run a solution
//! on a problem's data and read the output back.

use std::time::Instant;

use std::sync::Arc;

use gconv_core::{Backend, BuildStats, ConvProblem, ConvTensors, Registry, Result, Solution, Tensor};
use gconv_cpu::{CpuDevice, Host, HostBuffers};
use gconv_cuda::{Cuda, CudaDevice, DeviceTensors};

pub trait Target {
    type B: Backend;
    /// A problem's data as the backend holds it.
    type Workload;

    fn registry(&self) -> &Registry<Self::B>;
    fn device_key(&self) -> &str;
    /// One line for people: the device, its properties.
    fn describe(&self) -> String;
    /// Kernel builds so far (none on the CPU).
    fn build_stats(&self) -> Option<BuildStats> {
        None
    }
    /// Places the host tensors where the backend's solutions read them.
    fn workload(&self, p: &ConvProblem, tensors: &ConvTensors) -> Result<Self::Workload>;
    /// Runs the solution once and returns its duration in seconds.
    fn run(&self, w: &mut Self::Workload, s: &Solution<Self::B>) -> Result<f64>;
    /// The output tensor of the last run, on the host.
    fn output(&self, w: &Self::Workload, p: &ConvProblem) -> Result<Tensor>;
    /// The exact result that runs are verified against.
    fn reference(&self, p: &ConvProblem, tensors: &ConvTensors) -> Result<Vec<f64>> {
        Ok(gconv_core::reference::reference(p, tensors))
    }
}

/// The CPU: tensors stay in host memory, a fresh workspace per solution.
pub struct CpuTarget {
    pub device: CpuDevice,
    registry: Registry<Host>,
    key: String,
}

impl CpuTarget {
    pub fn new(device: CpuDevice) -> Self {
        CpuTarget { registry: gconv_cpu::registry(&device), key: device.key(), device }
    }
}

pub struct CpuWorkload {
    tensors: ConvTensors,
    workspace: Vec<f32>,
}

impl Target for CpuTarget {
    type B = Host;
    type Workload = CpuWorkload;

    fn registry(&self) -> &Registry<Host> {
        &self.registry
    }

    fn device_key(&self) -> &str {
        &self.key
    }

    fn describe(&self) -> String {
        format!("cpu: {} ({}, {} threads)", self.device.model, self.device.simd, self.device.threads)
    }

    fn workload(&self, _p: &ConvProblem, tensors: &ConvTensors) -> Result<CpuWorkload> {
        Ok(CpuWorkload { tensors: tensors.clone(), workspace: Vec::new() })
    }

    fn run(&self, w: &mut CpuWorkload, s: &Solution<Host>) -> Result<f64> {
        let needed = usize::try_from(s.workspace_bytes.div_ceil(4)).unwrap_or(usize::MAX);
        if w.workspace.len() < needed {
            w.workspace.clear();
            w.workspace.try_reserve_exact(needed).map_err(|_| {
                gconv_core::GconvError::Backend(format!("cannot allocate a workspace of {} bytes", s.workspace_bytes))
            })?;
            w.workspace.resize(needed, 0.0);
        }
        let start = Instant::now();
        s.invoker.run(&mut HostBuffers { tensors: &mut w.tensors, workspace: &mut w.workspace })?;
        Ok(start.elapsed().as_secs_f64())
    }

    fn output(&self, w: &CpuWorkload, p: &ConvProblem) -> Result<Tensor> {
        Ok(w.tensors.output(p.direction).clone())
    }
}

/// An NVIDIA GPU: tensors live in GPU memory, timing by CUDA events.
pub struct CudaTarget {
    pub device: Arc<CudaDevice>,
    registry: Registry<Cuda>,
    key: String,
}

impl CudaTarget {
    pub fn new(device: Arc<CudaDevice>) -> Self {
        CudaTarget { registry: gconv_cuda::registry(&device), key: device.key(), device }
    }
}

pub struct CudaWorkload {
    gpu: DeviceTensors,
    /// The output tensor's host twin, for reading results back.
    output: Tensor,
}

impl Target for CudaTarget {
    type B = Cuda;
    type Workload = CudaWorkload;

    fn registry(&self) -> &Registry<Cuda> {
        &self.registry
    }

    fn device_key(&self) -> &str {
        &self.key
    }

    fn describe(&self) -> String {
        let d = &self.device;
        format!(
            "cuda: {} ({}, {} SMs, NVRTC {}.{}, driver API {}.{})",
            d.name,
            d.arch(),
            d.sm_count,
            d.nvrtc_version.0,
            d.nvrtc_version.1,
            d.driver_version / 1000,
            d.driver_version % 1000 / 10
        )
    }

    fn build_stats(&self) -> Option<BuildStats> {
        Some(self.device.build_stats())
    }

    fn workload(&self, p: &ConvProblem, tensors: &ConvTensors) -> Result<CudaWorkload> {
        Ok(CudaWorkload { gpu: DeviceTensors::upload(&self.device, tensors)?, output: tensors.output(p.direction).clone() })
    }

    fn run(&self, w: &mut CudaWorkload, s: &Solution<Cuda>) -> Result<f64> {
        w.gpu.run_timed(&self.device, s)
    }

    /// The naive GPU kernels with fp32 output: the CPU's plain loops are too slow for real
    /// layers.
    fn reference(&self, p: &ConvProblem, tensors: &ConvTensors) -> Result<Vec<f64>> {
        gconv_cuda::solvers::naive::gpu_reference(&self.device, p, tensors)
    }

    fn output(&self, w: &CudaWorkload, p: &ConvProblem) -> Result<Tensor> {
        let mut out = w.output.clone();
        w.gpu.download_output(&self.device, p, &mut out)?;
        Ok(out)
    }
}
