//! gconv-cuda: the CUDA backend. Kernels are CUDA C++ in `kernels/`, built at run time by
//! NVRTC into CUBIN for the GPU's exact architecture, cached on disk and in the process;
//! vendor libraries (cuBLAS, cuDNN's graph API) are solvers beside them. cudarc loads the CUDA
//! libraries dynamically: without a driver or GPU, [`CudaRuntime::probe`] says why and nothing
//! else here is used.

mod blas;
mod build_claim;
mod check;
mod compile;
mod convert;
pub mod cudnn;
mod cudnn_library;
mod device;
mod graph;
mod launch;
mod params;
mod replay;
pub mod roofline;
mod runtime;
pub mod solvers;
mod tensors;
mod timing;
mod tma;

use gconv_core::Backend;

pub use compile::KernelSource;
pub use device::CudaDevice;
pub use launch::{Buffer, CudaBuffers};
pub use params::ConvParams;
pub use runtime::CudaRuntime;
use tensors::DeviceTensors;

/// The CUDA backend: invokers get device pointers and the stream to launch on.
pub struct Cuda;

impl Backend for Cuda {
    const NAME: &'static str = "cuda";
    type Buffers<'a> = CudaBuffers<'a>;
}
