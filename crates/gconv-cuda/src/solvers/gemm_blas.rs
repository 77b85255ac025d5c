//! `cuda.gemm_blas`: 1x1 convolutions with unit stride and no padding are GEMMs; cuBLAS runs
//! them as strided-batched GEMMs with groups as the batch (fp32 accumulation; fp32 data without
//! TF32). In NHWC all images form one matrix; in NCHW each image is a GEMM of its own, and
//! backward-weight sums the images' products in an fp32 copy of dW in the workspace, rounded to
//! a 16-bit dW once at the end (summed in bf16, 256 images were 3.4x over the error bound).
//! Any other channels-last problem takes the explicit path: im2col writes a column matrix into
//! the workspace (kernels/im2col.cu) that stands in for x in the same GEMMs, with taps x Cg
//! channels; backward-data has the GEMM write fp32 columns that col2im sums into dx.
//!
//! cuBLAS is column-major: a row-major R x C matrix with row stride ld is, to cuBLAS, a C x R
//! matrix with leading dimension ld. Each direction below is written in those terms.

use std::sync::{Arc, OnceLock};

use cudarc::cublas::sys::{cublasComputeType_t, cudaDataType};
use cudarc::driver::CudaFunction;
use gconv_core::{
    require, Config, ConvProblem, DataType, Direction, GconvError, Invoker, Layout, NotApplicable, Result, Solve,
    Solver, SolverKind,
};

use super::{builds_from_kernel, BuiltFrom};
use crate::blas::{BlasHandle, Gemm as BlasGemm, Matrix, WORKSPACE_BYTES as BLAS_WORKSPACE_BYTES};
use crate::device::CudaDevice;
use crate::launch::{self, Arg, Buffer};
use crate::{ConvParams, Cuda, CudaBuffers, KernelSource};

const IM2COL_SOURCE: &str = include_str!("../kernels/im2col.cu");
const THREADS: u32 = 256;

pub struct GemmBlas {
    pub device: Arc<CudaDevice>,
    handle: OnceLock<std::result::Result<Arc<BlasHandle>, String>>,
}

impl GemmBlas {
    pub fn new(device: Arc<CudaDevice>) -> Self {
        GemmBlas { device, handle: OnceLock::new() }
    }

    /// One cuBLAS handle, created on first use; each call sets its stream and workspace.
    fn blas(&self) -> Result<Arc<BlasHandle>> {
        self.handle
            .get_or_init(|| BlasHandle::new(&self.device).map(Arc::new).map_err(|e| e.to_string()))
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
    /// C is fp32 whatever the problem's type (backward-data columns, summed weights).
    c_fp32: bool,
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
    /// The column matrix in the workspace.
    Col,
    /// The fp32 weight gradient the images are summed in, in the workspace.
    Sum,
}

impl Role {
    fn buffer(self, b: &CudaBuffers<'_>) -> Buffer {
        match self {
            Role::X => b.x,
            Role::W => b.w,
            Role::Y => b.y,
            Role::Col | Role::Sum => b.workspace.from_byte(BLAS_WORKSPACE_BYTES),
        }
    }
}

/// Whether the problem needs the column matrix rather than being a GEMM on x itself.
fn explicit(p: &ConvProblem) -> bool {
    gconv_core::applicability::plain_1x1(p).is_err()
}

/// Rows of the column matrix: N x output positions.
fn col_rows(p: &ConvProblem) -> u64 {
    let outputs: u64 = p.output_dims().iter().map(|&o| u64::from(o)).product();
    u64::from(p.n) * outputs
}

/// Elements of one row of the column matrix: G x taps x Cg.
fn col_row_elements(p: &ConvProblem) -> u64 {
    let taps: u64 = p.dims.iter().map(|d| u64::from(d.filter)).product();
    u64::from(p.c) * taps
}

fn col_elements(p: &ConvProblem) -> u64 {
    col_rows(p) * col_row_elements(p)
}

/// Whether the images' weight gradients are summed in fp32 before dW is written: NCHW
/// backward-weight over several images in a 16-bit type.
fn sums_in_fp32(p: &ConvProblem) -> bool {
    p.layout == Layout::Nchw && p.direction == Direction::BackwardWeight && p.n > 1 && p.dtype.size_bytes() == 2
}

fn weight_elements(p: &ConvProblem) -> u64 {
    let taps: u64 = p.dims.iter().map(|d| u64::from(d.filter)).product();
    u64::from(p.k) * u64::from(p.c / p.g) * taps
}

/// Bytes of one column element: backward-data sums fp32 columns.
fn col_bytes(p: &ConvProblem) -> u64 {
    if p.direction == Direction::BackwardData {
        4
    } else {
        p.dtype.size_bytes() as u64
    }
}

/// The im2col (or col2im) build: channels per thread, the widest vector up to 16 bytes that
/// divides the channels per group.
fn im2col_source(p: &ConvProblem) -> KernelSource {
    let cg = p.c / p.g;
    let max = 16 / col_bytes(p).max(p.dtype.size_bytes() as u64) as u32;
    let vec = [8u32, 4, 2, 1].into_iter().find(|&v| v <= max && cg.is_multiple_of(v)).unwrap_or(1);
    KernelSource::new("im2col.cu", IM2COL_SOURCE, p.dtype).define("VEC", vec)
}

/// The GEMM calls of a problem: one per image in NCHW (accumulating over images for
/// backward-weight), one in all in NHWC.
fn plan(p: &ConvProblem) -> Vec<(Gemm, f32)> {
    let (n, c, k, g) = (p.n as i64, p.c as i64, p.k as i64, p.g as i64);
    let (cg, kg) = (c / g, k / g);
    let positions: i64 = p.dims.iter().map(|d| i64::from(d.input)).product();
    let op = |tensor, offset, ld: i64, stride| Operand { tensor, offset, ld: ld as i32, stride };
    match p.layout {
        Layout::Nhwc => {
            // The explicit path reduces over taps x Cg column values per group instead of Cg.
            let (red, x, pixels) = if explicit(p) {
                let taps: i64 = p.dims.iter().map(|d| i64::from(d.filter)).product();
                let outputs: i64 = p.output_dims().iter().map(|&o| i64::from(o)).product();
                (taps * cg, op(Role::Col, 0, g * taps * cg, taps * cg), outputs)
            } else {
                (cg, op(Role::X, 0, c, cg), positions)
            };
            let np = (n * pixels) as i32;
            let weights = op(Role::W, 0, red, kg * red);
            let y = op(Role::Y, 0, k, kg);
            let (red, kg, batch) = (red as i32, kg as i32, g as i32);
            let gemm = match p.direction {
                // y^T (Kg x NP) = W (Kg x red) . x^T (red x NP)
                Direction::Forward => Gemm {
                    trans_a: true,
                    trans_b: false,
                    m: kg,
                    n: np,
                    k: red,
                    a: weights,
                    b: x,
                    c: y,
                    batch,
                    c_fp32: false,
                },
                // dx^T (red x NP) = W^T (red x Kg) . dy^T (Kg x NP)
                Direction::BackwardData => Gemm {
                    trans_a: false,
                    trans_b: false,
                    m: red,
                    n: np,
                    k: kg,
                    a: weights,
                    b: y,
                    c: x,
                    batch,
                    c_fp32: x.tensor == Role::Col,
                },
                // dW^T (red x Kg) = x^T (red x NP) . dy (NP x Kg)
                Direction::BackwardWeight => Gemm {
                    trans_a: false,
                    trans_b: true,
                    m: red,
                    n: kg,
                    k: np,
                    a: x,
                    b: y,
                    c: weights,
                    batch,
                    c_fp32: false,
                },
            };
            vec![(gemm, 0.0)]
        }
        Layout::Nchw => (0..n)
            .map(|image| {
                let p32 = positions as i32;
                let x = op(Role::X, image * c * positions, positions, cg * positions);
                let y = op(Role::Y, image * k * positions, positions, kg * positions);
                let summed = sums_in_fp32(p);
                let weights = op(if summed { Role::Sum } else { Role::W }, 0, cg, kg * cg);
                let gemm = match p.direction {
                    // y^T (P x Kg) = x^T (P x Cg) . W^T (Cg x Kg)
                    Direction::Forward => Gemm {
                        trans_a: false,
                        trans_b: false,
                        m: p32,
                        n: kg as i32,
                        k: cg as i32,
                        a: x,
                        b: weights,
                        c: y,
                        batch: g as i32,
                        c_fp32: false,
                    },
                    // dx^T (P x Cg) = dy^T (P x Kg) . W (Kg x Cg)
                    Direction::BackwardData => Gemm {
                        trans_a: false,
                        trans_b: true,
                        m: p32,
                        n: cg as i32,
                        k: kg as i32,
                        a: y,
                        b: weights,
                        c: x,
                        batch: g as i32,
                        c_fp32: false,
                    },
                    // dW^T (Cg x Kg) += x (Cg x P) . dy^T (P x Kg)
                    Direction::BackwardWeight => Gemm {
                        trans_a: true,
                        trans_b: false,
                        m: cg as i32,
                        n: kg as i32,
                        k: p32,
                        a: x,
                        b: y,
                        c: weights,
                        batch: g as i32,
                        c_fp32: summed,
                    },
                };
                let beta = if p.direction == Direction::BackwardWeight && image > 0 { 1.0 } else { 0.0 };
                (gemm, beta)
            })
            .collect(),
    }
}

impl Solver for GemmBlas {
    fn id(&self) -> &'static str {
        "cuda.gemm_blas"
    }

    /// The GEMMs are cuBLAS's (im2col and col2im are gconv's).
    fn kind(&self) -> SolverKind {
        SolverKind::Vendor("cuBLAS")
    }

    fn applicable(&self, p: &ConvProblem) -> Result<(), NotApplicable> {
        if !explicit(p) {
            return Ok(());
        }
        require!(
            p.layout == Layout::Nhwc,
            "not a plain 1x1 GEMM, and the im2col path reads channels-last (NHWC) tensors only"
        );
        require!(
            col_elements(p) <= i32::MAX as u64,
            "the im2col matrix would have {} elements, more than 2^31",
            col_elements(p)
        );
        Ok(())
    }

    /// cuBLAS's own workspace, then the column matrix or the fp32 weight sum where there is one.
    fn workspace_bytes(&self, p: &ConvProblem, _config: &Config) -> u64 {
        let after = match (explicit(p), sums_in_fp32(p)) {
            (true, _) => col_elements(p) * col_bytes(p),
            (false, true) => weight_elements(p) * 4,
            (false, false) => 0,
        };
        BLAS_WORKSPACE_BYTES + after
    }

    builds_from_kernel!();
}

/// The im2col (or col2im) kernel of the explicit path, or the rounding of an fp32 weight sum;
/// other plain 1x1 GEMMs need none.
impl BuiltFrom for GemmBlas {
    fn device(&self) -> &CudaDevice {
        &self.device
    }

    fn kernels(&self, p: &ConvProblem, _config: &Config) -> Result<Vec<KernelSource>> {
        Ok((explicit(p) || sums_in_fp32(p)).then(|| im2col_source(p)).into_iter().collect())
    }
}

impl Solve<Cuda> for GemmBlas {
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
        let columns = if explicit(p) {
            let backward_data = p.direction == Direction::BackwardData;
            let function = self.device.function(&im2col_source(p), if backward_data { "col2im" } else { "im2col" })?;
            // col2im: a thread per vector of dx; im2col: a warp per column-matrix row (pixel).
            let work = if backward_data { p.input_elements() } else { col_rows(p) * 32 };
            let blocks = work.div_ceil(u64::from(THREADS)).clamp(1, u64::from(self.device.sm_count) * 32) as u32;
            let (from, to) = if backward_data { (Role::Col, Role::X) } else { (Role::X, Role::Col) };
            Some(Columns { function, params: ConvParams::new(p), blocks, from, to })
        } else if sums_in_fp32(p) {
            let function = self.device.function(&im2col_source(p), "round_weights")?;
            let blocks = weight_elements(p).div_ceil(u64::from(THREADS)).clamp(1, u64::from(self.device.sm_count) * 8);
            Some(Columns { function, params: ConvParams::new(p), blocks: blocks as u32, from: Role::Sum, to: Role::W })
        } else {
            None
        };
        Ok(Box::new(BlasInvoker { blas: self.blas()?, gemms: plan(p), data, compute, columns }))
    }
}

/// The im2col launch before the GEMMs (forward, backward-weight) or col2im after them
/// (backward-data); or the rounding of the fp32 weight sum into dW after them.
struct Columns {
    function: CudaFunction,
    params: ConvParams,
    blocks: u32,
    from: Role,
    to: Role,
}

impl Columns {
    fn after_gemm(&self) -> bool {
        self.from != Role::X
    }

    fn launch(&self, b: &CudaBuffers<'_>) -> Result<()> {
        let args = [Arg::Params(&self.params), Arg::Buffer(self.from.buffer(b)), Arg::Buffer(self.to.buffer(b))];
        launch::kernel(
            b,
            &self.function,
            launch::flat(self.blocks, THREADS),
            &args,
            "launch the im2col of cuda.gemm_blas",
        )
    }
}

struct BlasInvoker {
    blas: Arc<BlasHandle>,
    gemms: Vec<(Gemm, f32)>,
    data: cudaDataType,
    compute: cublasComputeType_t,
    columns: Option<Columns>,
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
        if let Some(columns) = self.columns.as_ref().filter(|c| !c.after_gemm()) {
            columns.launch(b)?;
        }
        let gemms = self.gemms.iter().map(|(g, beta)| BlasGemm {
            trans_a: g.trans_a,
            trans_b: g.trans_b,
            m: g.m,
            n: g.n,
            k: g.k,
            a: matrix(&g.a, self.data),
            b: matrix(&g.b, self.data),
            c: matrix(&g.c, if g.c_fp32 { cudaDataType::CUDA_R_32F } else { self.data }),
            batch: g.batch,
            beta: *beta,
            compute: self.compute,
        });
        self.blas.run_on(b.stream(), b.workspace, gemms)?;
        if let Some(columns) = self.columns.as_ref().filter(|c| c.after_gemm()) {
            columns.launch(b)?;
        }
        Ok(())
    }
}
