//! `cuda.gemm_blas`: 1x1 convolutions with unit stride and no padding are GEMMs; cuBLAS runs
//! them as strided-batched GEMMs with groups as the batch (fp32 accumulation; fp32 data without
//! TF32). In NHWC all images form one matrix; in NCHW each image is a batch step of its own.
//!
//! cuBLAS is column-major: a row-major R x C matrix with row stride ld is, to cuBLAS, a C x R
//! matrix with leading dimension ld. Each direction below is written in those terms.

use std::ffi::c_void;
use std::sync::{Arc, OnceLock};

use cudarc::cublas::sys::{cublasComputeType_t, cublasGemmAlgo_t, cublasOperation_t, cudaDataType};
use cudarc::cublas::{result as blas, CudaBlas};
use gconv_core::{Config, ConvProblem, DataType, Direction, GconvError, Invoker, Layout, NotApplicable, Result, Solver};

use crate::device::{backend_error, CudaDevice};
use crate::{Cuda, CudaBuffers};

pub struct GemmBlas {
    pub device: Arc<CudaDevice>,
    handle: OnceLock<std::result::Result<Arc<CudaBlas>, String>>,
}

impl GemmBlas {
    pub fn new(device: Arc<CudaDevice>) -> Self {
        GemmBlas { device, handle: OnceLock::new() }
    }

    /// One cuBLAS handle on gconv's stream, created on first use.
    fn blas(&self) -> Result<Arc<CudaBlas>> {
        self.handle
            .get_or_init(|| {
                let stream = self.device.stream().map_err(|e| e.to_string())?;
                CudaBlas::new(stream.clone()).map(Arc::new).map_err(|e| format!("cannot create a cuBLAS handle: {e:?}"))
            })
            .clone()
            .map_err(GconvError::Backend)
    }
}

/// One strided-batched GEMM: C = alpha op(A) op(B) + beta C, operands at byte offsets from the
/// tensors' base pointers.
#[derive(Debug, Clone, Copy)]
struct Gemm {
    trans_a: bool,
    trans_b: bool,
    m: i32,
    n: i32,
    k: i32,
    a: Operand,
    b: Operand,
    c: Operand,
    batch: i32,
}

#[derive(Debug, Clone, Copy)]
struct Operand {
    tensor: Role,
    /// Element offset of the first matrix.
    offset: i64,
    ld: i32,
    /// Elements between batch steps.
    stride: i64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    X,
    W,
    Y,
}

/// The GEMM calls of a problem: one per image in NCHW (accumulating over images for
/// backward-weight), one in all in NHWC.
fn plan(p: &ConvProblem) -> Vec<(Gemm, f32)> {
    let (n, c, k, g) = (p.n as i64, p.c as i64, p.k as i64, p.g as i64);
    let (cg, kg) = (c / g, k / g);
    let positions: i64 = p.dims.iter().map(|d| i64::from(d.input)).product();
    let op = |tensor, offset, ld: i64, stride| Operand { tensor, offset, ld: ld as i32, stride };
    let weights = op(Role::W, 0, cg, kg * cg);
    match p.layout {
        Layout::Nhwc => {
            let np = (n * positions) as i32;
            let x = op(Role::X, 0, c, cg);
            let y = op(Role::Y, 0, k, kg);
            let gemm = match p.direction {
                // y^T (Kg x NP) = W (Kg x Cg) . x^T (Cg x NP)
                Direction::Forward => Gemm { trans_a: true, trans_b: false, m: kg as i32, n: np, k: cg as i32, a: weights, b: x, c: y, batch: g as i32 },
                // dx^T (Cg x NP) = W^T (Cg x Kg) . dy^T (Kg x NP)
                Direction::BackwardData => Gemm { trans_a: false, trans_b: false, m: cg as i32, n: np, k: kg as i32, a: weights, b: y, c: x, batch: g as i32 },
                // dW^T (Cg x Kg) = x^T (Cg x NP) . dy (NP x Kg)
                Direction::BackwardWeight => Gemm { trans_a: false, trans_b: true, m: cg as i32, n: kg as i32, k: np, a: x, b: y, c: weights, batch: g as i32 },
            };
            vec![(gemm, 0.0)]
        }
        Layout::Nchw => (0..n)
            .map(|image| {
                let p32 = positions as i32;
                let x = op(Role::X, image * c * positions, positions, cg * positions);
                let y = op(Role::Y, image * k * positions, positions, kg * positions);
                let gemm = match p.direction {
                    // y^T (P x Kg) = x^T (P x Cg) . W^T (Cg x Kg)
                    Direction::Forward => Gemm { trans_a: false, trans_b: false, m: p32, n: kg as i32, k: cg as i32, a: x, b: weights, c: y, batch: g as i32 },
                    // dx^T (P x Cg) = dy^T (P x Kg) . W (Kg x Cg)
                    Direction::BackwardData => Gemm { trans_a: false, trans_b: true, m: p32, n: cg as i32, k: kg as i32, a: y, b: weights, c: x, batch: g as i32 },
                    // dW^T (Cg x Kg) += x (Cg x P) . dy^T (P x Kg)
                    Direction::BackwardWeight => Gemm { trans_a: true, trans_b: false, m: cg as i32, n: kg as i32, k: p32, a: x, b: y, c: weights, batch: g as i32 },
                };
                let beta = if p.direction == Direction::BackwardWeight && image > 0 { 1.0 } else { 0.0 };
                (gemm, beta)
            })
            .collect(),
    }
}

impl Solver<Cuda> for GemmBlas {
    fn id(&self) -> &'static str {
        "cuda.gemm_blas"
    }

    fn applicable(&self, p: &ConvProblem) -> Result<(), NotApplicable> {
        gconv_core::applicability::plain_1x1(p)
    }

    fn solution(&self, p: &ConvProblem, _config: &Config) -> Result<Box<dyn Invoker<Cuda>>> {
        let data = match p.dtype {
            DataType::F32 | DataType::Tf32 => cudaDataType::CUDA_R_32F,
            DataType::F16 => cudaDataType::CUDA_R_16F,
            DataType::Bf16 => cudaDataType::CUDA_R_16BF,
        };
        let compute = match p.dtype {
            DataType::Tf32 => cublasComputeType_t::CUBLAS_COMPUTE_32F_FAST_TF32,
            _ => cublasComputeType_t::CUBLAS_COMPUTE_32F,
        };
        Ok(Box::new(BlasInvoker { blas: self.blas()?, gemms: plan(p), data, compute, elem: p.dtype.size_bytes() as u64 }))
    }
}

struct BlasInvoker {
    blas: Arc<CudaBlas>,
    gemms: Vec<(Gemm, f32)>,
    data: cudaDataType,
    compute: cublasComputeType_t,
    elem: u64,
}

impl Invoker<Cuda> for BlasInvoker {
    fn run(&self, b: &mut CudaBuffers<'_>) -> Result<()> {
        let base = |o: &Operand| {
            let tensor = match o.tensor {
                Role::X => b.x,
                Role::W => b.w,
                Role::Y => b.y,
            };
            (tensor + o.offset as u64 * self.elem) as *mut c_void
        };
        let op = |t: bool| if t { cublasOperation_t::CUBLAS_OP_T } else { cublasOperation_t::CUBLAS_OP_N };
        let alpha = 1.0f32;
        for (g, beta) in &self.gemms {
            // SAFETY: the handle is live and on the stream the buffers belong to; every
            // operand lies inside its tensor by construction of `plan`.
            unsafe {
                blas::gemm_strided_batched_ex(
                    *self.blas.handle(),
                    op(g.trans_a),
                    op(g.trans_b),
                    g.m,
                    g.n,
                    g.k,
                    &alpha as *const f32 as *const c_void,
                    base(&g.a),
                    self.data,
                    g.a.ld,
                    g.a.stride,
                    base(&g.b),
                    self.data,
                    g.b.ld,
                    g.b.stride,
                    beta as *const f32 as *const c_void,
                    base(&g.c),
                    self.data,
                    g.c.ld,
                    g.c.stride,
                    g.batch,
                    self.compute,
                    cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
                )
            }
            .map_err(|e| backend_error("cuBLAS GEMM of cuda.gemm_blas", e))?;
        }
        Ok(())
    }
}
