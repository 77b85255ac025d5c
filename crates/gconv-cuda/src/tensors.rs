//! A problem's three tensors and a workspace in GPU memory.

use cudarc::driver::{CudaSlice, DevicePtr};
use gconv_core::{ConvProblem, ConvTensors, Result, Tensor};

use crate::device::{driver_error, CudaDevice};
use crate::CudaBuffers;

pub struct DeviceTensors {
    x: CudaSlice<u8>,
    w: CudaSlice<u8>,
    y: CudaSlice<u8>,
    workspace: Option<CudaSlice<u8>>,
}

impl DeviceTensors {
    pub fn upload(device: &CudaDevice, t: &ConvTensors) -> Result<Self> {
        let stream = device.stream()?;
        let copy = |t: &Tensor| stream.clone_htod(t.as_bytes()).map_err(|e| driver_error("copy to the GPU", e));
        Ok(DeviceTensors { x: copy(&t.x)?, w: copy(&t.w)?, y: copy(&t.y)?, workspace: None })
    }

    /// Makes sure the workspace holds at least `bytes`.
    pub fn reserve_workspace(&mut self, device: &CudaDevice, bytes: u64) -> Result<()> {
        if bytes > 0 && self.workspace.as_ref().is_none_or(|w| (w.len() as u64) < bytes) {
            self.workspace = None;
            let stream = device.stream()?;
            let size = usize::try_from(bytes).map_err(|e| gconv_core::GconvError::Backend(format!("workspace size: {e}")))?;
            self.workspace = Some(stream.alloc_zeros::<u8>(size).map_err(|e| driver_error("allocate a workspace", e))?);
        }
        Ok(())
    }

    /// Buffers for an invoker. The pointers stay valid while `self` lives.
    pub fn buffers<'a>(&self, device: &'a CudaDevice) -> Result<CudaBuffers<'a>> {
        let stream = device.stream()?;
        let ptr = |s: &CudaSlice<u8>| s.device_ptr(stream).0;
        Ok(CudaBuffers {
            x: ptr(&self.x),
            w: ptr(&self.w),
            y: ptr(&self.y),
            workspace: self.workspace.as_ref().map_or(0, ptr),
            stream,
        })
    }

    /// Copies the direction's output back into `out`, a host tensor of the same size.
    pub fn download_output(&self, device: &CudaDevice, p: &ConvProblem, out: &mut Tensor) -> Result<()> {
        let stream = device.stream()?;
        let src = match p.direction {
            gconv_core::Direction::Forward => &self.y,
            gconv_core::Direction::BackwardData => &self.x,
            gconv_core::Direction::BackwardWeight => &self.w,
        };
        let bytes = stream.clone_dtoh(src).map_err(|e| driver_error("copy from the GPU", e))?;
        out.copy_from_bytes(&bytes)
    }
}
