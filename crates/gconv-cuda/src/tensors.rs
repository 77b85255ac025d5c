//! A problem's three tensors and a workspace in GPU memory, and the stream their work runs on.

use std::sync::Arc;

use cudarc::driver::{CudaSlice, CudaStream, DevicePtr};
use gconv_core::{ConvProblem, ConvTensors, Direction, Result, Tensor};

use crate::device::{driver_error, CudaDevice};
use crate::{Buffer, CudaBuffers};

pub struct DeviceTensors {
    /// The uploading thread's stream: everything done with these tensors is ordered on it.
    stream: Arc<CudaStream>,
    x: CudaSlice<u8>,
    w: CudaSlice<u8>,
    y: CudaSlice<u8>,
    workspace: Option<CudaSlice<u8>>,
}

impl DeviceTensors {
    pub fn upload(device: &CudaDevice, t: &ConvTensors) -> Result<Self> {
        let stream = device.stream()?;
        let copy = |t: &Tensor| stream.clone_htod(t.as_bytes()).map_err(|e| driver_error("copy to the GPU", e));
        Ok(DeviceTensors { x: copy(&t.x)?, w: copy(&t.w)?, y: copy(&t.y)?, workspace: None, stream })
    }

    pub fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }

    /// Makes sure the workspace holds at least `bytes`.
    pub fn reserve_workspace(&mut self, bytes: u64) -> Result<()> {
        if bytes > 0 && self.workspace.as_ref().is_none_or(|w| (w.len() as u64) < bytes) {
            self.workspace = None;
            let stream = &self.stream;
            let size =
                usize::try_from(bytes).map_err(|e| gconv_core::GconvError::Backend(format!("workspace size: {e}")))?;
            self.workspace = Some(stream.alloc_zeros::<u8>(size).map_err(|e| driver_error("allocate a workspace", e))?);
        }
        Ok(())
    }

    /// Buffers for a solution of `p` with `workspace_bytes` of workspace (reserved before),
    /// checked to cover them. The pointers stay valid while `self` lives.
    pub fn buffers(&self, p: &ConvProblem, workspace_bytes: u64) -> Result<CudaBuffers<'_>> {
        let stream = &self.stream;
        let buffer = |s: &CudaSlice<u8>| Buffer { ptr: s.device_ptr(stream).0, bytes: s.len() as u64 };
        let workspace = self.workspace.as_ref().map_or(Buffer { ptr: 0, bytes: 0 }, buffer);
        CudaBuffers::covering(
            p,
            workspace_bytes,
            [buffer(&self.x), buffer(&self.w), buffer(&self.y), workspace],
            stream,
        )
    }

    fn output(&self, direction: Direction) -> &CudaSlice<u8> {
        match direction {
            Direction::Forward => &self.y,
            Direction::BackwardData => &self.x,
            Direction::BackwardWeight => &self.w,
        }
    }

    /// Fills the direction's output with all-ones bytes: NaN in fp32, fp16 and bf16. (Takes
    /// `&mut self`: it writes the tensor.)
    pub fn poison_output(&mut self, direction: Direction) -> Result<()> {
        let stream = &self.stream;
        let out = self.output(direction);
        let bytes = out.len();
        let (ptr, _) = out.device_ptr(stream);
        // SAFETY: writes exactly the bytes of a live allocation on its own stream.
        unsafe { cudarc::driver::result::memset_d8_async(ptr, 0xff, bytes, stream.cu_stream()) }
            .map_err(|e| driver_error("poison the output", e))
    }

    /// Copies the direction's output back into `out`, a host tensor of the same size.
    pub fn download_output(&self, p: &ConvProblem, out: &mut Tensor) -> Result<()> {
        let bytes =
            self.stream.clone_dtoh(self.output(p.direction)).map_err(|e| driver_error("copy from the GPU", e))?;
        out.copy_from_bytes(&bytes)
    }
}
