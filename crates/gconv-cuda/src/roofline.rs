//! The device's measured peaks, for roofline bounds: a large cuBLAS GEMM for arithmetic and a
//! device-to-device copy for memory bandwidth, each the best of a few runs.

use cudarc::cublas::{CudaBlas, Gemm, GemmConfig};
use cudarc::cublas::sys::cublasOperation_t;
use gconv_core::{DataType, Result};
use half::{bf16, f16};
use serde::Serialize;

use crate::device::{backend_error, CudaDevice};

#[derive(Debug, Clone, Copy, Serialize)]
pub struct Peaks {
    pub flops_per_s: f64,
    pub bytes_per_s: f64,
}

impl Peaks {
    /// The time no kernel can beat: the larger of compute time and memory time.
    pub fn bound_s(&self, flops: f64, bytes: f64) -> f64 {
        (flops / self.flops_per_s).max(bytes / self.bytes_per_s)
    }
}

const GEMM_SIZE: usize = 8192;
const COPY_BYTES: usize = 1 << 30;
const RUNS: usize = 5;

/// Measures both peaks for `dtype` (fp32 GEMM without TF32; 16-bit GEMM on tensor cores).
pub fn measure_peaks(device: &CudaDevice, dtype: DataType) -> Result<Peaks> {
    let stream = device.stream()?;
    let src = stream.alloc_zeros::<u8>(COPY_BYTES).map_err(|e| backend_error("allocate", e))?;
    let mut dst = stream.alloc_zeros::<u8>(COPY_BYTES).map_err(|e| backend_error("allocate", e))?;
    let mut copy = f64::INFINITY;
    for _ in 0..RUNS {
        copy = copy.min(device.time(|s| s.memcpy_dtod(&src, &mut dst).map_err(|e| backend_error("copy", e)))?);
    }
    drop((src, dst));
    let blas = CudaBlas::new(stream.clone()).map_err(|e| backend_error("create a cuBLAS handle", e))?;
    let gemm = match dtype {
        DataType::F32 => best_gemm::<f32>(device, &blas)?,
        DataType::Tf32 => {
            // SAFETY: a live handle; the mode only lets cuBLAS use TF32 for fp32 GEMMs.
            unsafe { cudarc::cublas::sys::cublasSetMathMode(*blas.handle(), cudarc::cublas::sys::cublasMath_t::CUBLAS_TF32_TENSOR_OP_MATH) }
                .result()
                .map_err(|e| backend_error("allow TF32 in cuBLAS", e))?;
            best_gemm::<f32>(device, &blas)?
        }
        DataType::F16 => best_gemm::<f16>(device, &blas)?,
        DataType::Bf16 => best_gemm::<bf16>(device, &blas)?,
    };
    let n = GEMM_SIZE as f64;
    Ok(Peaks { flops_per_s: 2.0 * n * n * n / gemm, bytes_per_s: 2.0 * COPY_BYTES as f64 / copy })
}

fn best_gemm<T>(device: &CudaDevice, blas: &CudaBlas) -> Result<f64>
where
    T: cudarc::driver::DeviceRepr + cudarc::driver::ValidAsZeroBits + num_traits::One + num_traits::Zero + Copy,
    CudaBlas: Gemm<T>,
{
    let stream = device.stream()?;
    let elems = GEMM_SIZE * GEMM_SIZE;
    let a = stream.alloc_zeros::<T>(elems).map_err(|e| backend_error("allocate", e))?;
    let b = stream.alloc_zeros::<T>(elems).map_err(|e| backend_error("allocate", e))?;
    let mut c = stream.alloc_zeros::<T>(elems).map_err(|e| backend_error("allocate", e))?;
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
    let mut best = f64::INFINITY;
    for _ in 0..RUNS {
        // SAFETY: a, b and c hold n x n elements each.
        best = best.min(device.time(|_| unsafe { blas.gemm(cfg, &a, &b, &mut c) }.map_err(|e| backend_error("GEMM", e)))?);
    }
    Ok(best)
}
