//! A problem's three tensors and a workspace in GPU memory.

use cudarc::driver::sys::CUevent_flags;
use cudarc::driver::{CudaSlice, DevicePtr};
use gconv_core::{ConvProblem, ConvTensors, Result, Solution, Tensor};

use crate::device::{backend_error, CudaDevice};
use crate::{Cuda, CudaBuffers};

pub struct DeviceTensors {
    x: CudaSlice<u8>,
    w: CudaSlice<u8>,
    y: CudaSlice<u8>,
    workspace: Option<CudaSlice<u8>>,
}

impl DeviceTensors {
    pub fn upload(device: &CudaDevice, t: &ConvTensors) -> Result<Self> {
        let stream = device.stream()?;
        let copy = |t: &Tensor| stream.clone_htod(t.as_bytes()).map_err(|e| backend_error("copy to the GPU", e));
        Ok(DeviceTensors { x: copy(&t.x)?, w: copy(&t.w)?, y: copy(&t.y)?, workspace: None })
    }

    /// Makes sure the workspace holds at least `bytes`.
    pub fn reserve_workspace(&mut self, device: &CudaDevice, bytes: u64) -> Result<()> {
        if bytes > 0 && self.workspace.as_ref().is_none_or(|w| (w.len() as u64) < bytes) {
            self.workspace = None;
            let stream = device.stream()?;
            let size = usize::try_from(bytes).map_err(|e| backend_error("workspace size", e))?;
            self.workspace = Some(stream.alloc_zeros::<u8>(size).map_err(|e| backend_error("allocate a workspace", e))?);
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

    /// Runs a solution once on these tensors and returns its GPU time in seconds, measured
    /// with CUDA events around the launches.
    pub fn run_timed(&mut self, device: &CudaDevice, solution: &Solution<Cuda>) -> Result<f64> {
        self.reserve_workspace(device, solution.workspace_bytes)?;
        let ctx = device.context()?;
        let event = || ctx.new_event(Some(CUevent_flags::CU_EVENT_DEFAULT)).map_err(|e| backend_error("create an event", e));
        let (start, end) = (event()?, event()?);
        let mut buffers = self.buffers(device)?;
        start.record(buffers.stream).map_err(|e| backend_error("record an event", e))?;
        solution.invoker.run(&mut buffers)?;
        end.record(buffers.stream).map_err(|e| backend_error("record an event", e))?;
        end.synchronize().map_err(|e| backend_error("run on the GPU", e))?;
        let ms = start.elapsed_ms(&end).map_err(|e| backend_error("read an event", e))?;
        Ok(f64::from(ms) * 1e-3)
    }

    /// Copies the direction's output back into `out`, a host tensor of the same size.
    pub fn download_output(&self, device: &CudaDevice, p: &ConvProblem, out: &mut Tensor) -> Result<()> {
        let stream = device.stream()?;
        let src = match p.direction {
            gconv_core::Direction::Forward => &self.y,
            gconv_core::Direction::BackwardData => &self.x,
            gconv_core::Direction::BackwardWeight => &self.w,
        };
        let bytes = stream.clone_dtoh(src).map_err(|e| backend_error("copy from the GPU", e))?;
        out.copy_from_bytes(&bytes)
    }
}
