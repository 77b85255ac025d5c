//! Activation tensors converted between network layers' formats on the GPU: a cast where only
//! the data type changes, a tiled transpose (and cast) per image where the layout does.

use std::sync::Arc;

use cudarc::driver::{CudaFunction, CudaSlice, CudaStream, LaunchConfig, PushKernelArg};
use gconv_core::{Conversion, DataType, Layout, Result, Tensor, Timer, TimingOptions};

use crate::device::{driver_error, CudaDevice};
use crate::timing::GpuTimer;
use crate::KernelSource;

const SOURCE: &str = include_str!("kernels/convert.cu");
const TILE: u32 = 32;

/// A conversion built for the device, launched on its buffers.
pub struct DeviceConversion {
    function: CudaFunction,
    config: LaunchConfig,
    /// (rows, columns) of each image's matrix for a transpose; `None` for a cast.
    matrix: Option<(i32, i32)>,
    elements: u64,
}

impl DeviceConversion {
    pub fn new(device: &CudaDevice, c: &Conversion) -> Result<Self> {
        let token = |dtype: DataType| match dtype.storage() {
            DataType::F16 => "F16",
            DataType::Bf16 => "BF16",
            _ => "F32",
        };
        let src = KernelSource {
            file: "convert.cu",
            text: SOURCE,
            // Every build starts with common.cuh, which wants a storage type of its own.
            defines: vec![
                "GCONV_F32".into(),
                format!("SRC_{}", token(c.from.dtype)),
                format!("DST_{}", token(c.to.dtype)),
            ],
            arch_specific: false,
        };
        let too_large = || {
            gconv_core::GconvError::Backend(format!(
                "a conversion of {} elements is too large for one launch",
                c.elements()
            ))
        };
        let (pixels, channels) = (u32::try_from(c.pixels()).map_err(|_| too_large())?, c.c);
        let elements = c.elements();
        if c.from.layout == c.to.layout {
            let blocks = elements.div_ceil(256).clamp(1, u64::from(device.sm_count) * 16) as u32;
            let config = LaunchConfig { grid_dim: (blocks, 1, 1), block_dim: (256, 1, 1), shared_mem_bytes: 0 };
            return Ok(DeviceConversion {
                function: device.function(&src, "gconv_cast")?,
                config,
                matrix: None,
                elements,
            });
        }
        let (rows, cols) = match c.from.layout {
            Layout::Nchw => (channels, pixels),
            Layout::Nhwc => (pixels, channels),
        };
        let grid = (cols.div_ceil(TILE), rows.div_ceil(TILE), c.n);
        if grid.1 > 65_535 || grid.2 > 65_535 {
            return Err(too_large());
        }
        let config = LaunchConfig { grid_dim: grid, block_dim: (TILE, 8, 1), shared_mem_bytes: 0 };
        let matrix = Some((rows as i32, cols as i32));
        Ok(DeviceConversion { function: device.function(&src, "gconv_transpose")?, config, matrix, elements })
    }

    /// Enqueues the conversion of `input` into `output`.
    pub fn launch(&self, stream: &Arc<CudaStream>, input: &CudaSlice<u8>, output: &mut CudaSlice<u8>) -> Result<()> {
        let mut launch = stream.launch_builder(&self.function);
        launch.arg(input).arg(output);
        let (rows, cols);
        match self.matrix {
            Some(matrix) => {
                (rows, cols) = matrix;
                launch.arg(&rows).arg(&cols);
            }
            None => {
                launch.arg(&self.elements);
            }
        }
        // SAFETY: the buffers hold the conversion's elements in its source and destination
        // types (the caller sized them by the same Conversion), the sizes are the kernel's.
        unsafe { launch.launch(self.config) }.map_err(|e| driver_error("launch a conversion", e))?;
        Ok(())
    }
}

/// The device buffers of a conversion.
fn buffers(stream: &Arc<CudaStream>, c: &Conversion, input: Option<&Tensor>) -> Result<(CudaSlice<u8>, CudaSlice<u8>)> {
    let bytes = |dtype: DataType| c.elements() as usize * dtype.size_bytes();
    let alloc = |e| driver_error("allocate a conversion's buffers", e);
    let source = match input {
        Some(t) => stream.clone_htod(t.as_bytes()).map_err(|e| driver_error("copy to the GPU", e))?,
        None => stream.alloc_zeros::<u8>(bytes(c.from.dtype)).map_err(alloc)?,
    };
    Ok((source, stream.alloc_zeros::<u8>(bytes(c.to.dtype)).map_err(alloc)?))
}

pub fn convert(device: &CudaDevice, c: &Conversion, input: &Tensor) -> Result<Tensor> {
    c.check_input(input)?;
    let stream = device.stream()?;
    let kernel = DeviceConversion::new(device, c)?;
    let (source, mut target) = buffers(&stream, c, Some(input))?;
    kernel.launch(&stream, &source, &mut target)?;
    let mut out = Tensor::try_zeros(c.to.dtype.storage(), c.elements() as usize)?;
    out.copy_from_bytes(&stream.clone_dtoh(&target).map_err(|e| driver_error("copy from the GPU", e))?)?;
    Ok(out)
}

pub fn timer<'a>(device: &'a CudaDevice, c: &Conversion, options: TimingOptions) -> Result<Box<dyn Timer + 'a>> {
    let stream = device.stream()?;
    let kernel = DeviceConversion::new(device, c)?;
    let (source, mut target) = buffers(&stream, c, None)?;
    Ok(Box::new(GpuTimer::new(device, stream.clone(), options, move || kernel.launch(&stream, &source, &mut target))?))
}
