//! Every launch of gconv's own kernels and every fill of a solution's buffers. Buffers carry
//! their lengths, and a `CudaBuffers` exists only once they are checked to cover the problem a
//! solution was built for (its tensors and workspace): the kernels and vendor calls given them
//! stay inside. The `unsafe` of launching lives here, so solver files hold none.

use std::sync::Arc;

use cudarc::driver::sys::{self as cu, CUfunction_attribute as FuncAttr};
use cudarc::driver::{CudaFunction, CudaStream, DeviceRepr, LaunchConfig, PushKernelArg};
use gconv_core::{ConvProblem, DataType, Direction, GconvError, Result};

use crate::device::{backend_error, driver_error};
use crate::params::{FilterBlocks, Products, TapMap};
use crate::ConvParams;

/// Dynamic shared memory a kernel may take without opting in to more.
pub const DEFAULT_SHARED_BYTES: u32 = 48 * 1024;

/// Lets `function` (of `solver`) take `bytes` of dynamic shared memory: an opt-in above
/// [`DEFAULT_SHARED_BYTES`], nothing to do below.
pub fn allow_shared(function: &CudaFunction, bytes: u32, solver: &str) -> Result<()> {
    if bytes <= DEFAULT_SHARED_BYTES {
        return Ok(());
    }
    function
        .set_attribute(FuncAttr::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, bytes as i32)
        .map_err(|e| backend_error(&format!("allow {solver}'s shared memory"), e))
}

/// A device allocation as a kernel sees it: its address and length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Buffer {
    pub ptr: u64,
    pub bytes: u64,
}

impl Buffer {
    /// The part of this buffer from `bytes` on (empty past its end).
    pub fn from_byte(self, bytes: u64) -> Buffer {
        let skipped = bytes.min(self.bytes);
        Buffer { ptr: self.ptr + skipped, bytes: self.bytes - skipped }
    }
}

/// The buffers one run of a solution reads and writes, on the stream to launch on.
pub struct CudaBuffers<'a> {
    pub x: Buffer,
    pub w: Buffer,
    pub y: Buffer,
    pub workspace: Buffer,
    /// Private, so that only [`CudaBuffers::covering`] makes buffers.
    stream: &'a Arc<CudaStream>,
}

impl<'a> CudaBuffers<'a> {
    /// The buffers, when each holds what problem `p` needs of it (the output may be wider than
    /// the problem's type: the reference writes fp32) and the workspace at least `workspace`
    /// bytes.
    pub fn covering(
        p: &ConvProblem,
        workspace_bytes: u64,
        [x, w, y, workspace]: [Buffer; 4],
        stream: &'a Arc<CudaStream>,
    ) -> Result<Self> {
        let elem = p.dtype.size_bytes() as u64;
        let needs = [
            ("x", x, p.input_elements() * elem),
            ("w", w, p.weight_elements() * elem),
            ("y", y, p.output_elements() * elem),
            ("the workspace", workspace, workspace_bytes),
        ];
        for (name, buffer, bytes) in needs {
            if buffer.bytes < bytes {
                return Err(GconvError::Backend(format!(
                    "{name} holds {} bytes, and {} needs {bytes}",
                    buffer.bytes,
                    p.key()
                )));
            }
        }
        Ok(CudaBuffers { x, w, y, workspace, stream })
    }

    /// The stream the buffers' work goes to.
    pub fn stream(&self) -> &Arc<CudaStream> {
        self.stream
    }

    /// The buffer a direction writes.
    pub fn output(&self, direction: Direction) -> Buffer {
        match direction {
            Direction::Forward => self.y,
            Direction::BackwardData => self.x,
            Direction::BackwardWeight => self.w,
        }
    }

    /// These buffers with the direction's output replaced by `output`, checked again.
    pub fn with_output(&self, p: &ConvProblem, output: Buffer) -> Result<Self> {
        let [mut x, mut w, mut y] = [self.x, self.w, self.y];
        *match p.direction {
            Direction::Forward => &mut y,
            Direction::BackwardData => &mut x,
            Direction::BackwardWeight => &mut w,
        } = output;
        CudaBuffers::covering(p, self.workspace.bytes, [x, w, y, self.workspace], self.stream)
    }

    /// Zeroes the first `bytes` of the workspace (fp32 zero is all-zero bits).
    pub fn zero_workspace(&self, bytes: u64) -> Result<()> {
        if bytes > self.workspace.bytes {
            return Err(GconvError::Backend(format!(
                "cannot zero {bytes} bytes of a {}-byte workspace",
                self.workspace.bytes
            )));
        }
        // SAFETY: the range lies inside the workspace allocation, written on its own stream.
        unsafe {
            cudarc::driver::result::memset_d8_async(self.workspace.ptr, 0, bytes as usize, self.stream.cu_stream())
        }
        .map_err(|e| driver_error("zero the workspace", e))
    }
}

/// A TMA tensor map over one of a solution's buffers, passed to a kernel by value (a
/// `const __grid_constant__` parameter). The TMA unit reads only inside the dimensions it was
/// encoded with, which lie inside the buffer.
#[repr(transparent)]
#[derive(Clone, Copy)]
pub struct TensorMap(cu::CUtensorMap);

// SAFETY: a plain 128-byte-aligned #[repr(C)] array of u64, as the driver defines it.
unsafe impl DeviceRepr for TensorMap {}

/// A channels-last tensor (NWC, NHWC or NDHWC: rank 3 to 5) read in TMA im2col mode: `pixels`
/// pixels of `channels` channels per load, walking the output positions of a convolution whose
/// window, at tap offset zero, runs from `lower` to the extent plus `upper` in steps of
/// `strides`. Loads are 128-byte swizzled; what lies outside the tensor reads as zeros.
pub struct Im2col {
    /// Channels, the spatial extents innermost first (W, H, D), images.
    pub extents: Vec<u64>,
    /// Per spatial dimension, innermost first.
    pub lower: Vec<i32>,
    pub upper: Vec<i32>,
    pub strides: Vec<u32>,
    pub channels: u32,
    pub pixels: u32,
}

fn tma_type(dtype: DataType) -> Result<cu::CUtensorMapDataType> {
    use cu::CUtensorMapDataType as T;
    match dtype {
        DataType::Bf16 => Ok(T::CU_TENSOR_MAP_DATA_TYPE_BFLOAT16),
        DataType::F16 => Ok(T::CU_TENSOR_MAP_DATA_TYPE_FLOAT16),
        // fp32 in memory, multiplied as tf32.
        DataType::Tf32 => Ok(T::CU_TENSOR_MAP_DATA_TYPE_TFLOAT32),
        other => Err(GconvError::Backend(format!("no TMA tensor map for {other} here"))),
    }
}

/// The settings every map here shares: no interleave, 128-byte swizzle (what the wgmma
/// descriptors expect), 128-byte L2 promotion, zeros outside the tensor.
const SWIZZLE: cu::CUtensorMapSwizzle = cu::CUtensorMapSwizzle::CU_TENSOR_MAP_SWIZZLE_128B;
const INTERLEAVE: cu::CUtensorMapInterleave = cu::CUtensorMapInterleave::CU_TENSOR_MAP_INTERLEAVE_NONE;
const L2_PROMOTION: cu::CUtensorMapL2promotion = cu::CUtensorMapL2promotion::CU_TENSOR_MAP_L2_PROMOTION_L2_128B;
const ZERO_FILL: cu::CUtensorMapFloatOOBfill = cu::CUtensorMapFloatOOBfill::CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE;

impl TensorMap {
    /// A map written by `encode` (one of the driver's encoders), checked.
    fn encoded(what: &str, encode: impl FnOnce(*mut cu::CUtensorMap) -> cu::CUresult) -> Result<Self> {
        let mut map = std::mem::MaybeUninit::<cu::CUtensorMap>::uninit();
        encode(map.as_mut_ptr()).result().map_err(|e| driver_error(what, e))?;
        // SAFETY: the encoder succeeded, so it wrote the whole map.
        Ok(TensorMap(unsafe { map.assume_init() }))
    }

    /// The im2col map of `buffer`, elements of `dtype` packed in `shape.extents`.
    pub fn im2col(buffer: Buffer, dtype: DataType, shape: &Im2col) -> Result<Self> {
        let rank = shape.extents.len();
        let spatial = rank.saturating_sub(2);
        if !(3..=5).contains(&rank) || [shape.lower.len(), shape.upper.len(), shape.strides.len()] != [spatial; 3] {
            return Err(GconvError::Backend(format!(
                "an im2col map wants rank 3 to 5 and corners and strides per spatial dimension, got extents {:?}",
                shape.extents
            )));
        }
        let elem = dtype.size_bytes() as u64;
        if shape.extents.iter().product::<u64>() * elem > buffer.bytes {
            return Err(GconvError::Backend(format!(
                "an im2col map of {:?} reaches past its {}-byte buffer",
                shape.extents, buffer.bytes
            )));
        }
        let strides: Vec<u64> = (1..rank).map(|i| shape.extents[..i].iter().product::<u64>() * elem).collect();
        let element_strides: Vec<u32> = std::iter::once(1).chain(shape.strides.iter().copied()).chain([1]).collect();
        let data_type = tma_type(dtype)?;
        // SAFETY: every pointer is to a live local vector of the length `rank` implies
        // (checked above).
        Self::encoded("encode an im2col tensor map", |map| unsafe {
            cu::cuTensorMapEncodeIm2col(
                map,
                data_type,
                rank as u32,
                buffer.ptr as *mut std::ffi::c_void,
                shape.extents.as_ptr(),
                strides.as_ptr(),
                shape.lower.as_ptr(),
                shape.upper.as_ptr(),
                shape.channels,
                shape.pixels,
                element_strides.as_ptr(),
                INTERLEAVE,
                SWIZZLE,
                L2_PROMOTION,
                ZERO_FILL,
            )
        })
    }

    /// The tiled map of a packed array of `dtype` in `buffer` (rank 3 to 5), extents innermost
    /// first, read in boxes of `boxes` (out-of-range elements zero-filled).
    pub fn tiled<const RANK: usize>(
        buffer: Buffer,
        dtype: DataType,
        extents: [u64; RANK],
        boxes: [u32; RANK],
    ) -> Result<Self> {
        let elem = dtype.size_bytes() as u64;
        if extents.iter().product::<u64>() * elem > buffer.bytes {
            return Err(GconvError::Backend(format!(
                "a tiled map of {extents:?} reaches past its {}-byte buffer",
                buffer.bytes
            )));
        }
        if !(3..=5).contains(&RANK) {
            return Err(GconvError::Backend(format!("a tiled map wants rank 3 to 5, got {RANK}")));
        }
        let strides: Vec<u64> = (1..RANK).map(|i| extents[..i].iter().product::<u64>() * elem).collect();
        let element_strides = [1u32; RANK];
        let data_type = tma_type(dtype)?;
        // SAFETY: as in `im2col`, for rank RANK.
        Self::encoded("encode a tiled tensor map", |map| unsafe {
            cu::cuTensorMapEncodeTiled(
                map,
                data_type,
                RANK as u32,
                buffer.ptr as *mut std::ffi::c_void,
                extents.as_ptr(),
                strides.as_ptr(),
                boxes.as_ptr(),
                element_strides.as_ptr(),
                INTERLEAVE,
                SWIZZLE,
                L2_PROMOTION,
                ZERO_FILL,
            )
        })
    }
}

/// One argument of a kernel, in the order of its parameter list.
pub enum Arg<'a> {
    Params(&'a ConvParams),
    Buffer(Buffer),
    Int(i32),
    TensorMap(&'a TensorMap),
    Products(&'a Products),
    Taps(&'a TapMap),
    Blocks(&'a FilterBlocks),
}

/// How a grid is launched.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Residency {
    /// Blocks start as SMs come free.
    Any,
    /// Every block resident at once (a cooperative launch), also beside other streams' kernels:
    /// for grids whose blocks wait on one another.
    AllAtOnce,
}

/// Launches `function` on the buffers' stream. `args` follow the kernel's parameter list as
/// its `.cu` file declares it; every buffer among them is one of `b`'s, checked to cover the
/// problem the kernel was built for.
pub fn kernel(
    b: &CudaBuffers<'_>,
    function: &CudaFunction,
    config: LaunchConfig,
    args: &[Arg<'_>],
    what: &str,
) -> Result<()> {
    kernel_with(b, function, config, Residency::Any, args, what)
}

/// [`kernel`], launched with the given residency.
pub fn kernel_with(
    b: &CudaBuffers<'_>,
    function: &CudaFunction,
    config: LaunchConfig,
    residency: Residency,
    args: &[Arg<'_>],
    what: &str,
) -> Result<()> {
    let mut launch = b.stream.launch_builder(function);
    for arg in args {
        match arg {
            Arg::Params(params) => launch.arg(*params),
            Arg::Buffer(buffer) => launch.arg(&buffer.ptr),
            Arg::Int(value) => launch.arg(value),
            Arg::TensorMap(map) => launch.arg(*map),
            Arg::Products(products) => launch.arg(*products),
            Arg::Taps(taps) => launch.arg(*taps),
            Arg::Blocks(blocks) => launch.arg(*blocks),
        };
    }
    // SAFETY: the arguments are the kernel's parameters in order (above), and the buffers hold
    // what the problem needs (`CudaBuffers::covering`), which is all a kernel of it touches.
    let launched = unsafe {
        match residency {
            Residency::Any => launch.launch(config),
            Residency::AllAtOnce => launch.launch_cooperative(config),
        }
    };
    launched.map_err(|e| backend_error(what, e))?;
    Ok(())
}

/// A one-dimensional launch of `blocks` blocks of `threads` threads.
pub fn flat(blocks: u32, threads: u32) -> LaunchConfig {
    LaunchConfig { grid_dim: (blocks, 1, 1), block_dim: (threads, 1, 1), shared_mem_bytes: 0 }
}
