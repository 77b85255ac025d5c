//! gconv-cuda: the CUDA backend. Kernels are CUDA C++ in `kernels/`, built at run time by
//! NVRTC into CUBIN for the GPU's exact architecture, cached on disk and in the process.
//! cudarc loads the CUDA libraries dynamically: without a driver or GPU, [`CudaDevice::probe`]
//! says why and nothing else here is used.

mod compile;
pub mod cudnn_peer;
mod device;
mod params;
pub mod roofline;
pub mod solvers;
mod tensors;

use std::sync::Arc;

use cudarc::driver::CudaStream;
use gconv_core::{Backend, Registry};

pub use compile::KernelSource;
pub use device::CudaDevice;
pub use params::ConvParams;
pub use tensors::DeviceTensors;

/// The CUDA backend: invokers get device pointers and the stream to launch on.
pub struct Cuda;

impl Backend for Cuda {
    const NAME: &'static str = "cuda";
    type Buffers<'a> = CudaBuffers<'a>;
}

pub struct CudaBuffers<'a> {
    pub x: u64,
    pub w: u64,
    pub y: u64,
    /// At least the solution's `workspace_bytes`.
    pub workspace: u64,
    pub stream: &'a Arc<CudaStream>,
}

/// Every CUDA solver, one line each, in priority order.
pub fn registry(device: &Arc<CudaDevice>) -> Registry<Cuda> {
    use solvers::*;
    Registry::new(vec![
        Box::new(gemm_blas::GemmBlas::new(device.clone())),
        Box::new(depthwise::Depthwise { device: device.clone() }),
        Box::new(grouped_direct::GroupedDirect { device: device.clone() }),
        Box::new(igemm::Igemm::tensor_cores(device.clone())),
        Box::new(igemm::Igemm::simt(device.clone())),
        Box::new(naive::Naive { device: device.clone() }),
    ])
}
