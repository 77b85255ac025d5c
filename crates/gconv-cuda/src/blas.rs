//! A cuBLAS handle on gconv's stream with its workspace set explicitly, so that GEMMs captured
//! into CUDA graphs never allocate (NVIDIA suggests 32 MiB on Hopper).

use std::ffi::c_void;

use cudarc::cublas::CudaBlas;
use cudarc::driver::{CudaSlice, DevicePtr};
use gconv_core::{GconvError, Result};

use crate::device::CudaDevice;

const WORKSPACE_BYTES: usize = 32 << 20;

pub struct BlasHandle {
    pub blas: CudaBlas,
    _workspace: CudaSlice<u8>,
}

impl BlasHandle {
    pub fn new(device: &CudaDevice) -> Result<Self> {
        let stream = device.stream()?;
        let fail = |what: &str, e: &dyn std::fmt::Debug| GconvError::Backend(format!("cannot {what}: {e:?}"));
        let blas = CudaBlas::new(stream.clone()).map_err(|e| fail("create a cuBLAS handle", &e))?;
        let workspace = stream.alloc_zeros::<u8>(WORKSPACE_BYTES).map_err(|e| fail("allocate cuBLAS's workspace", &e))?;
        let (ptr, _) = workspace.device_ptr(stream);
        // SAFETY: a live handle and a device allocation that lives as long as it.
        unsafe { cudarc::cublas::sys::cublasSetWorkspace_v2(*blas.handle(), ptr as *mut c_void, WORKSPACE_BYTES) }
            .result()
            .map_err(|e| fail("set cuBLAS's workspace", &e))?;
        Ok(BlasHandle { blas, _workspace: workspace })
    }
}
