//! `cuda.gemm_blas`: 1x1 convolutions with unit stride and no padding are GEMMs; cuBLAS runs
//! them as strided-batched GEMMs (fp32 accumulation; fp32 data without TF32). In NHWC all images
//! form one matrix and groups are the batch. In NCHW each image is a matrix of its own: the batch
//! runs over images (the weights' stride 0) and a GEMM per group, or over groups and a GEMM per
//! image, whichever launches fewer; backward-weight has every (image, group) product written as an
//! fp32 partial dW in the workspace, in chunks of images, and a kernel sums each chunk into dW,
//! rounding once at the end (summed in bf16, 256 images were 3.4x over the error bound; a GEMM
//! per image, each adding into dW, cost 32 launches where cuDNN's one kernel took a tenth).
//! Grouped NHWC backward-weight with a long reduction over pixels and few output tiles splits
//! the pixels into chunks the same way, each chunk's fp32 partial summed by that kernel: a batch
//! of 8 GEMMs of 32 x 64 outputs over 92,416 pixels took cuBLAS 3.5 ms, 8 output tiles for 132 SMs.
//! How long a chunk is, is tunable there (`kc<rows>`; `default` chooses): where a group's output
//! is a single small tile (8 x 16), each GEMM walks its chunk's rows alone, and 256 chunks of
//! 11,664 rows still took 3.4 ms.
//! In NCHW a GEMM's operands are rows of an image's pixels; where a half-precision row's bytes
//! are not a multiple of 16 (Inception's 17 x 17 = 289 pixels), cuBLAS falls back to kernels
//! for misaligned operands (a bf16 1x1 of 768 -> 160 channels at 43 TFLOP/s, cuDNN's kernel
//! twice as fast). The `ld16` config copies the rows the GEMMs read into a workspace copy whose
//! rows are padded to 16 bytes, and the rows they write back out of one (`pitch_rows`).
//! Any other channels-last problem takes the explicit path: im2col writes a column matrix into
//! the workspace (kernels/im2col.cu) that stands in for x in the same GEMMs, with taps x Cg
//! channels; backward-data has the GEMM write fp32 columns that col2im sums into dx.
//!
//! cuBLAS is column-major: a row-major R x C matrix with row stride ld is, to cuBLAS, a C x R
//! matrix with leading dimension ld. Each direction below is written in those terms.

use std::sync::{Arc, OnceLock};

use cudarc::cublas::sys::{cublasComputeType_t, cudaDataType};
use gconv_core::{
    require, Config, ConvProblem, DataType, Direction, GconvError, Invoker, Layout, NotApplicable, Result, Solve,
    Solver, SolverKind,
};

use self::invoker::{BlasInvoker, Call, Kernel};
use self::plan::{plan, Rows, Step};
use super::{builds_from_kernel, BuiltFrom};
use crate::blas::{BlasHandle, WORKSPACE_BYTES as BLAS_WORKSPACE_BYTES};
use crate::device::CudaDevice;
use crate::launch::Buffer;
use crate::{ConvParams, Cuda, CudaBuffers, KernelSource};

const IM2COL_SOURCE: &str = include_str!("../../kernels/im2col.cu");
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

/// One strided-batched GEMM: C = op(A) op(B), operands at element offsets from the tensors'
/// base pointers.
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
    /// C is fp32 whatever the problem's type (backward-data columns, partial weights).
    c_fp32: bool,
}

impl Gemm {
    /// C = op(A) op(B) in `batch` steps, op transposing where `trans` says (for A, for B), the
    /// product m x n over k; C in the problem's type and overwritten.
    fn new(trans: (bool, bool), (m, n, k): (i32, i32, i32), a: Operand, b: Operand, c: Operand, batch: i32) -> Self {
        Gemm { trans_a: trans.0, trans_b: trans.1, m, n, k, a, b, c, batch, c_fp32: false }
    }

    /// C in fp32 whatever the problem's type.
    fn into_fp32(self, fp32: bool) -> Self {
        Gemm { c_fp32: fp32, ..self }
    }
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
    /// The fp32 running sum of dW over chunks of images, in the workspace (only where there are
    /// several chunks).
    Sum,
    /// A chunk of images' fp32 partial weight gradients, in the workspace after the running sum.
    Partials {
        after_sum: u64,
    },
    /// A copy of x's or y's pixel rows at a padded pitch, `after` bytes into the workspace
    /// after cuBLAS's own.
    Pitched {
        after: u64,
    },
}

impl Role {
    fn buffer(self, b: &CudaBuffers<'_>) -> Buffer {
        match self {
            Role::X => b.x,
            Role::W => b.w,
            Role::Y => b.y,
            Role::Col | Role::Sum => b.workspace.from_byte(BLAS_WORKSPACE_BYTES),
            Role::Partials { after_sum } => b.workspace.from_byte(BLAS_WORKSPACE_BYTES + after_sum),
            Role::Pitched { after } => b.workspace.from_byte(BLAS_WORKSPACE_BYTES + after),
        }
    }
}

/// Workspace bytes the partial weight gradients of one chunk of images may take: a chunk runs
/// as one batched GEMM, so larger weights take fewer images a chunk (at least one).
const PARTIALS_BYTES: u64 = 64 << 20;

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

/// Whether the images' weight gradients are summed by gconv's kernel: NCHW backward-weight
/// over several images.
fn sums_images(p: &ConvProblem) -> bool {
    p.layout == Layout::Nchw && p.direction == Direction::BackwardWeight && p.n > 1
}

fn weight_elements(p: &ConvProblem) -> u64 {
    let taps: u64 = p.dims.iter().map(|d| u64::from(d.filter)).product();
    u64::from(p.k) * u64::from(p.c / p.g) * taps
}

/// GEMMs a batch may hold: the largest grid y or z dimension, where batched GEMM kernels
/// commonly put the batch.
const MAX_BATCH: u64 = 65_535;

/// Images a chunk when the partials may take `budget` bytes; a chunk's (image, group) pairs
/// are one batch.
fn images_per_chunk(p: &ConvProblem, budget: u64) -> u32 {
    let by_bytes = budget / (weight_elements(p) * 4);
    by_bytes.min(MAX_BATCH / u64::from(p.g)).clamp(1, u64::from(p.n)) as u32
}

/// GEMMs of output tiles a split reduction aims for: two waves of a large GPU's SMs.
const SPLIT_GEMM_TILES: u64 = 256;
/// Pixels a chunk of a split reduction has at least, so each GEMM does real work.
const MIN_CHUNK_PIXELS: u64 = 2048;

/// Rows a chunk that a tuned config (`kc<rows>`) may name.
const CHUNK_ROWS: [u32; 5] = [1024, 2048, 4096, 8192, 16384];

/// The rows a chunk a config names (`kc`), `None` for `default`.
fn chunk_rows(config: &Config) -> Option<u64> {
    config.get("kc").map(u64::from)
}

/// The configs of a problem: none where nothing is tunable, else `default` and each length of
/// chunk that splits the reduction, or the padded pitch of misaligned pixel rows.
fn tunable_configs(p: &ConvProblem) -> Vec<Config> {
    let mut configs = chunk_configs(p);
    if misaligned_rows(p) {
        configs.extend([Config::empty(), Config::new([("ld", PITCH_BYTES)])]);
    }
    configs
}

/// `default` and each length of chunk that splits the reduction, or none.
fn chunk_configs(p: &ConvProblem) -> Vec<Config> {
    let chunked: Vec<Config> = CHUNK_ROWS
        .into_iter()
        .filter(|&rows| reduction_split(p, PARTIALS_BYTES, Some(u64::from(rows))).is_some())
        .map(|rows| Config::new([("kc", rows)]))
        .collect();
    match chunked.is_empty() {
        true => chunked,
        false => std::iter::once(Config::empty()).chain(chunked).collect(),
    }
}

fn check_tunable_config(p: &ConvProblem, config: &Config) -> Result<()> {
    let splits =
        |rows: u32| CHUNK_ROWS.contains(&rows) && reduction_split(p, PARTIALS_BYTES, Some(rows.into())).is_some();
    match config.fields() {
        [] => Ok(()),
        [(name, rows)] if name == "kc" && splits(*rows) => Ok(()),
        [(name, bytes)] if name == "ld" && *bytes == PITCH_BYTES && misaligned_rows(p) => Ok(()),
        _ => Err(GconvError::BadConfig {
            text: config.to_string(),
            reason: format!(
                "cuda.gemm_blas takes `default`; `kc<rows>` for the rows a chunk ({CHUNK_ROWS:?}) of a grouped channels-last backward-weight's reduction, in 2 or more chunks (this problem's reduction has {} rows); or `ld{PITCH_BYTES}` for a plain channels-first problem whose pixel rows are not a multiple of {PITCH_BYTES} bytes",
                col_rows(p)
            ),
        }),
    }
}

/// The bytes a config (`ld16`) pads channels-first pixel rows to.
const PITCH_BYTES: u32 = 16;

fn positions(p: &ConvProblem) -> i64 {
    p.dims.iter().map(|d| i64::from(d.input)).product()
}

/// Whether a plain channels-first half-precision problem's pixel rows, the GEMMs' leading
/// dimension, are off cuBLAS's 16-byte alignment. Not fp32's: its 4-byte aligned rows ran as fast
/// as padded ones, the copies' cost aside (the padded config was 1.06-7x slower on all 30 fp32
/// problems of the H200's sweeps).
fn misaligned_rows(p: &ConvProblem) -> bool {
    let bytes = p.dtype.size_bytes() as i64;
    bytes == 2 && p.layout == Layout::Nchw && !explicit(p) && positions(p) * bytes % 16 != 0
}

/// Elements from one pixel row to the next in what the GEMMs read: the rows as they are, or
/// padded to the config's pitch.
fn row_pitch(p: &ConvProblem, config: &Config) -> i64 {
    let bytes = p.dtype.size_bytes() as u64;
    match config.get("ld") {
        Some(pitch) => (positions(p) as u64).next_multiple_of(u64::from(pitch) / bytes) as i64,
        None => positions(p),
    }
}

/// Bytes of NCHW backward-weight's running sum and partials, after which the pitched copies lie.
fn nchw_partials_bytes(p: &ConvProblem, budget: u64) -> u64 {
    match sums_images(p) {
        true => sum_bytes(p, budget) + u64::from(images_per_chunk(p, budget)) * weight_elements(p) * 4,
        false => 0,
    }
}

/// How a plain grouped NHWC backward-weight's reduction over the N x pixels rows is split:
/// (chunks, rows a chunk), the last chunk holding the rest; into chunks of `rows_a_chunk` rows
/// where given (`None` where that leaves fewer than 2 chunks or more than the budget holds),
/// else `None` where one GEMM a group is enough (the groups' output tiles fill the GPU, or the
/// reduction is short). One group is left to cuBLAS, whose own GEMM was within 1.24x of the
/// best candidate at the median of the H200 sweeps' dense layers, where its batched GEMMs over
/// groups were 5.9x.
fn reduction_split(p: &ConvProblem, budget: u64, rows_a_chunk: Option<u64>) -> Option<(u64, u64)> {
    let plain_weights = p.layout == Layout::Nhwc && p.direction == Direction::BackwardWeight && !explicit(p);
    if !plain_weights || p.g == 1 {
        return None;
    }
    let rows = col_rows(p);
    let most = (budget / (weight_elements(p) * 4)).min(MAX_BATCH);
    if let Some(per_chunk) = rows_a_chunk {
        let chunks = rows.div_ceil(per_chunk);
        return (2..=most).contains(&chunks).then_some((chunks, per_chunk));
    }
    let tiles = u64::from(p.c_per_group()).div_ceil(64) * u64::from(p.k_per_group()).div_ceil(64);
    let wanted = SPLIT_GEMM_TILES.div_ceil(tiles * u64::from(p.g));
    let chunks = wanted.min(rows / MIN_CHUNK_PIXELS).min(most);
    if chunks < 2 {
        return None;
    }
    // Chunks that divide the rows evenly run as one batched GEMM a group, without a last one apart.
    let even = (chunks.div_ceil(2).max(2)..=chunks).rev().find(|c| rows.is_multiple_of(*c));
    let chunks = even.unwrap_or(chunks);
    let per_chunk = rows.div_ceil(chunks);
    Some((rows.div_ceil(per_chunk), per_chunk))
}

/// Bytes of the running sum of dW: none where one chunk holds every image.
fn sum_bytes(p: &ConvProblem, budget: u64) -> u64 {
    if sums_images(p) && p.n.div_ceil(images_per_chunk(p, budget)) > 1 {
        weight_elements(p) * 4
    } else {
        0
    }
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

impl Solver for GemmBlas {
    fn id(&self) -> &'static str {
        "cuda.gemm_blas"
    }

    /// The GEMMs are cuBLAS's (im2col, col2im and the images' sum are gconv's).
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

    /// cuBLAS's own workspace, then the column matrix, or the running sum and one chunk's
    /// partial weight gradients, where there are.
    fn workspace_bytes(&self, p: &ConvProblem, config: &Config) -> u64 {
        let after = if explicit(p) {
            col_elements(p) * col_bytes(p)
        } else if p.layout == Layout::Nchw {
            nchw_partials_bytes(p, PARTIALS_BYTES).max(Rows::of(p, config, PARTIALS_BYTES).end(p))
        } else if let Some((chunks, _)) = reduction_split(p, PARTIALS_BYTES, chunk_rows(config)) {
            chunks * weight_elements(p) * 4
        } else {
            0
        };
        BLAS_WORKSPACE_BYTES + after
    }

    /// `default`, and where the reduction of a grouped NHWC backward-weight can be split, each
    /// length of chunk that splits it; where NCHW pixel rows are misaligned, their padded pitch.
    fn configs<'a>(&'a self, p: &'a ConvProblem) -> Box<dyn Iterator<Item = Config> + 'a> {
        Box::new(tunable_configs(p).into_iter())
    }

    fn check_config(&self, p: &ConvProblem, config: &Config) -> Result<()> {
        check_tunable_config(p, config)
    }

    builds_from_kernel!();
}

/// The im2col (or col2im) kernel of the explicit path, the sum over images, the copies of
/// pitched rows; other plain 1x1 GEMMs need none.
impl BuiltFrom for GemmBlas {
    fn device(&self) -> &CudaDevice {
        &self.device
    }

    fn kernels(&self, p: &ConvProblem, config: &Config) -> Result<Vec<KernelSource>> {
        let sums = sums_images(p) || reduction_split(p, PARTIALS_BYTES, chunk_rows(config)).is_some();
        let pitched = row_pitch(p, config) != positions(p);
        Ok((explicit(p) || sums || pitched).then(|| im2col_source(p)).into_iter().collect())
    }
}

impl Solve<Cuda> for GemmBlas {
    fn solution(&self, p: &ConvProblem, config: &Config) -> Result<Box<dyn Invoker<Cuda>>> {
        let data = match p.dtype {
            DataType::F32 | DataType::Tf32 => cudaDataType::CUDA_R_32F,
            DataType::F16 => cudaDataType::CUDA_R_16F,
            DataType::Bf16 => cudaDataType::CUDA_R_16BF,
        };
        let compute = match p.dtype {
            DataType::Tf32 => cublasComputeType_t::CUBLAS_COMPUTE_32F_FAST_TF32,
            _ => cublasComputeType_t::CUBLAS_COMPUTE_32F,
        };
        let params = ConvParams::new(p);
        let function = |name| self.device.function(&im2col_source(p), name);
        let spread = |work: u64, per_sm: u64| {
            work.div_ceil(u64::from(THREADS)).clamp(1, u64::from(self.device.sm_count) * per_sm) as u32
        };
        let steps = plan(p, config, PARTIALS_BYTES)
            .into_iter()
            .map(|step| {
                Ok(match step {
                    Step::Gemm(gemm) => Call::Gemm(gemm),
                    // A warp per column-matrix row (pixel).
                    Step::Im2col => Call::Kernel(Kernel {
                        function: function("im2col")?,
                        blocks: spread(col_rows(p) * 32, 32),
                        buffers: vec![Role::X, Role::Col],
                        ints: Vec::new(),
                        what: "launch the im2col of cuda.gemm_blas",
                    }),
                    // A thread per vector of dx.
                    Step::Col2im => Call::Kernel(Kernel {
                        function: function("col2im")?,
                        blocks: spread(p.input_elements(), 32),
                        buffers: vec![Role::Col, Role::X],
                        ints: Vec::new(),
                        what: "launch the col2im of cuda.gemm_blas",
                    }),
                    Step::SumImages { images, first, last } => Call::Kernel(Kernel {
                        function: function("sum_images")?,
                        blocks: spread(weight_elements(p), 8),
                        buffers: vec![Role::Partials { after_sum: sum_bytes(p, PARTIALS_BYTES) }, Role::Sum, Role::W],
                        ints: vec![images, i32::from(first), i32::from(last)],
                        what: "launch the sum over images of cuda.gemm_blas",
                    }),
                    // A thread per element copied.
                    Step::Pitch { from, to, rows, width, from_ld, to_ld } => Call::Kernel(Kernel {
                        function: function("pitch_rows")?,
                        blocks: spread(rows as u64 * width as u64, 32),
                        buffers: vec![from, to],
                        ints: vec![rows, width, from_ld, to_ld],
                        what: "launch the pitched copy of cuda.gemm_blas",
                    }),
                })
            })
            .collect::<Result<Vec<Call>>>()?;
        Ok(Box::new(BlasInvoker { blas: self.blas()?, steps, params, data, compute }))
    }
}

mod invoker;
mod plan;
#[cfg(test)]
mod tests;
