//! The exact result kept on the GPU (the naive kernels with fp32 output, computed from the
//! workload's own inputs) and verification against it by a reduction kernel: find reads back
//! two words per candidate instead of the output tensor.

use cudarc::driver::{CudaSlice, DevicePtr, LaunchConfig, PushKernelArg};
use gconv_core::verify::{tolerance, Verification};
use gconv_core::{ConvProblem, Result};

use crate::device::{driver_error, CudaDevice};
use crate::solvers::naive::gpu_reference;
use crate::{Buffer, CudaBuffers, KernelSource};

const SOURCE: &str = include_str!("kernels/verify.cu");
const THREADS: u32 = 256;

pub struct Reference {
    exact: CudaSlice<f32>,
    worst: CudaSlice<u64>,
    scale: CudaSlice<u32>,
    /// The least error scale (gconv-core's `error_scale_floor` of the inputs).
    floor: f64,
}

impl Reference {
    /// Computes the exact result of the inputs in `buffers`.
    pub fn new(device: &CudaDevice, p: &ConvProblem, buffers: &CudaBuffers<'_>, floor: f64) -> Result<Self> {
        let stream = buffers.stream();
        let alloc = |what| driver_error("allocate the reference", what);
        let exact = stream.alloc_zeros::<f32>(p.result_elements(p.direction) as usize).map_err(alloc)?;
        let target = Buffer { ptr: exact.device_ptr(stream).0, bytes: exact.len() as u64 * 4 };
        gpu_reference(device, p, &mut buffers.with_output(p, target)?)?;
        // Waited for here, so that its time is the reference's and not the first candidate's.
        stream.synchronize().map_err(|e| driver_error("compute the reference", e))?;
        Ok(Reference {
            exact,
            worst: stream.alloc_zeros::<u64>(1).map_err(alloc)?,
            scale: stream.alloc_zeros::<u32>(1).map_err(alloc)?,
            floor,
        })
    }

    /// Compares the output in `buffers` with the reference, with gconv-core's tolerance.
    pub fn verify(&mut self, device: &CudaDevice, p: &ConvProblem, buffers: &CudaBuffers<'_>) -> Result<Verification> {
        let stream = buffers.stream();
        let function = device.function(&KernelSource::new("verify.cu", SOURCE, p.dtype), "gconv_verify")?;
        stream.memset_zeros(&mut self.worst).map_err(|e| driver_error("clear the verdict", e))?;
        stream.memset_zeros(&mut self.scale).map_err(|e| driver_error("clear the verdict", e))?;
        let n = self.exact.len() as i64;
        let got = buffers.output(p.direction).ptr;
        let blocks = (n as u64).div_ceil(u64::from(THREADS)).clamp(1, u64::from(device.sm_count) * 8) as u32;
        let mut launch = stream.launch_builder(&function);
        launch.arg(&got).arg(&self.exact).arg(&n).arg(&mut self.worst).arg(&mut self.scale);
        // SAFETY: `got` holds n elements of the problem's type (the direction's output), the
        // reference n floats, the verdict one u64 and one u32.
        unsafe {
            launch.launch(LaunchConfig { grid_dim: (blocks, 1, 1), block_dim: (THREADS, 1, 1), shared_mem_bytes: 0 })
        }
        .map_err(|e| driver_error("launch the verification", e))?;
        let worst = stream.clone_dtoh(&self.worst).map_err(|e| driver_error("read the verdict", e))?[0];
        let scale = stream.clone_dtoh(&self.scale).map_err(|e| driver_error("read the verdict", e))?[0];
        let scale = f64::from(f32::from_bits(scale)).max(self.floor).max(f64::MIN_POSITIVE);
        let max_error = f64::from(f32::from_bits((worst >> 32) as u32)) / scale;
        let tolerance = tolerance(p);
        Ok(Verification {
            max_error,
            tolerance,
            worst_index: (worst & 0xffff_ffff) as usize,
            passed: max_error <= tolerance,
        })
    }
}
