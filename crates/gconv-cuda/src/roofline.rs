//! The device's measured peaks, for roofline bounds: a large cuBLAS GEMM for arithmetic and a
//! device-to-device copy for memory bandwidth, each the best of a few samples taken the one
//! way gconv times GPU work, on non-zero data.

use cudarc::cublas::sys::cublasOperation_t;
use cudarc::cublas::{CudaBlas, Gemm, GemmConfig};
use cudarc::driver::{CudaSlice, DeviceRepr};
use gconv_core::{DataType, Peaks, Result, Timer, TimingOptions};
use half::{bf16, f16};

use crate::blas::BlasHandle;
use crate::device::{backend_error, driver_error, CudaDevice};
use crate::timing::GpuTimer;

const GEMM_SIZE: usize = 8192;
const COPY_BYTES: usize = 1 << 30;
const SAMPLES: usize = 5;

/// Measures both peaks for `dtype` (fp32 GEMM without TF32; tf32 and 16-bit GEMMs on tensor
/// cores).
pub fn measure_peaks(device: &CudaDevice, dtype: DataType) -> Result<Peaks> {
    let stream = device.stream()?;
    let src = filled::<f32>(device, COPY_BYTES / 4)?;
    let mut dst = stream.alloc_zeros::<f32>(COPY_BYTES / 4).map_err(|e| driver_error("allocate", e))?;
    let timer = GpuTimer::new(device, stream.clone(), TimingOptions::default(), || {
        stream.memcpy_dtod(&src, &mut dst).map_err(|e| driver_error("copy", e))
    })?;
    let copy = best(timer)?;
    drop((src, dst));
    let handle = BlasHandle::new(device)?;
    let workspace = stream
        .alloc_zeros::<u8>(crate::blas::WORKSPACE_BYTES as usize)
        .map_err(|e| driver_error("allocate cuBLAS's workspace", e))?;
    handle.set_workspace(&workspace)?;
    let blas = &handle.blas;
    let gemm = match dtype {
        DataType::F32 => best_gemm::<f32>(device, blas)?,
        DataType::Tf32 => {
            // SAFETY: a live handle; the mode only lets cuBLAS use TF32 for fp32 GEMMs.
            unsafe {
                cudarc::cublas::sys::cublasSetMathMode(
                    *blas.handle(),
                    cudarc::cublas::sys::cublasMath_t::CUBLAS_TF32_TENSOR_OP_MATH,
                )
            }
            .result()
            .map_err(|e| backend_error("allow TF32 in cuBLAS", e))?;
            best_gemm::<f32>(device, blas)?
        }
        DataType::F16 => best_gemm::<f16>(device, blas)?,
        DataType::Bf16 => best_gemm::<bf16>(device, blas)?,
    };
    let n = GEMM_SIZE as f64;
    Ok(Peaks { flops_per_s: 2.0 * n * n * n / gemm, bytes_per_s: 2.0 * COPY_BYTES as f64 / copy })
}

fn best(mut timer: GpuTimer<'_>) -> Result<f64> {
    (0..SAMPLES).try_fold(f64::INFINITY, |best, _| Ok(best.min(timer.sample()?)))
}

/// `len` pseudo-random values in [-1, 1): zeros run faster than real data.
fn filled<T: DeviceRepr + num_traits::FromPrimitive>(device: &CudaDevice, len: usize) -> Result<CudaSlice<T>> {
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let host: Vec<T> = (0..len)
        .map(|_| {
            state = state.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
            T::from_f32((state >> 40) as f32 / (1u64 << 23) as f32 - 1.0)
                .unwrap_or_else(|| unreachable!("small floats convert"))
        })
        .collect();
    device.stream()?.clone_htod(&host).map_err(|e| driver_error("copy to the GPU", e))
}

fn best_gemm<T>(device: &CudaDevice, blas: &CudaBlas) -> Result<f64>
where
    T: DeviceRepr
        + cudarc::driver::ValidAsZeroBits
        + num_traits::One
        + num_traits::Zero
        + num_traits::FromPrimitive
        + Copy,
    CudaBlas: Gemm<T>,
{
    let stream = device.stream()?;
    let elems = GEMM_SIZE * GEMM_SIZE;
    let a = filled::<T>(device, elems)?;
    let b = filled::<T>(device, elems)?;
    let mut c = stream.alloc_zeros::<T>(elems).map_err(|e| driver_error("allocate", e))?;
    let n = GEMM_SIZE as i32;
    let cfg = GemmConfig {
        transa: cublasOperation_t::CUBLAS_OP_N,
        transb: cublasOperation_t::CUBLAS_OP_N,
        m: n,
        n,
        k: n,
        alpha: T::one(),
        lda: n,
        ldb: n,
        beta: T::zero(),
        ldc: n,
    };
    // SAFETY: a, b and c hold n x n elements each.
    let timer = GpuTimer::new(device, stream.clone(), TimingOptions::default(), || {
        unsafe { blas.gemm(cfg, &a, &b, &mut c) }.map_err(|e| backend_error("GEMM", e))
    })?;
    let seconds = best(timer)?;
    Ok(seconds)
}
