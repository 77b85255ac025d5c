//! Running a plan of `cuda.gemm_blas`: its GEMMs through cuBLAS, batched where consecutive, and
//! gconv's kernels around them.

use std::sync::Arc;

use cudarc::cublas::sys::{cublasComputeType_t, cudaDataType};
use cudarc::driver::CudaFunction;
use gconv_core::{Invoker, Result};

use super::{Gemm, Operand, Role, THREADS};
use crate::blas::{BlasHandle, Gemm as BlasGemm, Matrix};
use crate::launch::{self, Arg};
use crate::{ConvParams, Cuda, CudaBuffers};

/// A step ready to run.
pub(super) enum Call {
    Gemm(Gemm),
    Kernel(Kernel),
}

/// One of gconv's kernels around the GEMMs, its arguments the params, then its buffers, then
/// its integers: (params, from, to) for im2col and col2im, (params, partials, running sum,
/// dW, images, first, last) for the sum over images, (params, from, to, rows, width, from_ld,
/// to_ld) for the pitched copies.
pub(super) struct Kernel {
    pub(super) function: CudaFunction,
    pub(super) blocks: u32,
    pub(super) buffers: Vec<Role>,
    pub(super) ints: Vec<i32>,
    pub(super) what: &'static str,
}

pub(super) struct BlasInvoker {
    pub(super) blas: Arc<BlasHandle>,
    pub(super) steps: Vec<Call>,
    pub(super) params: ConvParams,
    pub(super) data: cudaDataType,
    pub(super) compute: cublasComputeType_t,
}

impl BlasInvoker {
    fn launch(&self, kernel: &Kernel, b: &CudaBuffers<'_>) -> Result<()> {
        let buffers = kernel.buffers.iter().map(|r| Arg::Buffer(r.buffer(b)));
        let ints = kernel.ints.iter().map(|&i| Arg::Int(i));
        let args: Vec<Arg> = std::iter::once(Arg::Params(&self.params)).chain(buffers).chain(ints).collect();
        launch::kernel(b, &kernel.function, launch::flat(kernel.blocks, THREADS), &args, kernel.what)
    }
}

impl Invoker<Cuda> for BlasInvoker {
    fn run(&self, b: &mut CudaBuffers<'_>) -> Result<()> {
        let matrix = |o: &Operand, data| Matrix {
            buffer: o.tensor.buffer(b),
            offset: o.offset,
            ld: o.ld,
            stride: o.stride,
            data,
        };
        for run in self.steps.chunk_by(|a, b| matches!((a, b), (Call::Gemm(_), Call::Gemm(_)))) {
            if let [Call::Kernel(kernel)] = run {
                self.launch(kernel, b)?;
                continue;
            }
            let gemms = run.iter().filter_map(|call| match call {
                Call::Gemm(g) => Some(BlasGemm {
                    trans_a: g.trans_a,
                    trans_b: g.trans_b,
                    m: g.m,
                    n: g.n,
                    k: g.k,
                    a: matrix(&g.a, self.data),
                    b: matrix(&g.b, self.data),
                    c: matrix(&g.c, if g.c_fp32 { cudaDataType::CUDA_R_32F } else { self.data }),
                    batch: g.batch,
                    beta: 0.0,
                    compute: self.compute,
                }),
                Call::Kernel(_) => None,
            });
            self.blas.run_on(b.stream(), b.workspace, gemms)?;
        }
        Ok(())
    }
}
