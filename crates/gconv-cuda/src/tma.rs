//! TMA tensor maps (sm_90): the descriptors a kernel's TMA unit reads a buffer through, passed
//! to the kernel by value.

use cudarc::driver::sys as cu;
use cudarc::driver::DeviceRepr;
use gconv_core::{DataType, GconvError, Result};

use crate::device::driver_error;
use crate::Buffer;

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
