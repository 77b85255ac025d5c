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
}

impl Role {
    fn buffer(self, b: &CudaBuffers<'_>) -> Buffer {
        match self {
            Role::X => b.x,
            Role::W => b.w,
            Role::Y => b.y,
            Role::Col | Role::Sum => b.workspace.from_byte(BLAS_WORKSPACE_BYTES),
            Role::Partials { after_sum } => b.workspace.from_byte(BLAS_WORKSPACE_BYTES + after_sum),
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
/// chunk that splits the reduction.
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

fn check_chunk_config(p: &ConvProblem, config: &Config) -> Result<()> {
    let splits =
        |rows: u32| CHUNK_ROWS.contains(&rows) && reduction_split(p, PARTIALS_BYTES, Some(rows.into())).is_some();
    match config.fields() {
        [] => Ok(()),
        [(name, rows)] if name == "kc" && splits(*rows) => Ok(()),
        _ => Err(GconvError::BadConfig {
            text: config.to_string(),
            reason: format!(
                "cuda.gemm_blas takes `default`, or `kc<rows>` for the rows a chunk ({CHUNK_ROWS:?}) of a grouped channels-last backward-weight's reduction, in 2 or more chunks; this problem's reduction has {} rows",
                col_rows(p)
            ),
        }),
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

/// One step of a call, in order.
#[derive(Debug, Clone, Copy)]
enum Step {
    Gemm(Gemm),
    /// x into the column matrix, before the GEMM.
    Im2col,
    /// The GEMM's fp32 columns summed into dx.
    Col2im,
    /// A chunk of `images` images' partial weight gradients added to the running sum (the first
    /// chunk starts it), and after the last chunk rounded into dW.
    SumImages {
        images: i32,
        first: bool,
        last: bool,
    },
}

fn op(tensor: Role, offset: i64, ld: i64, stride: i64) -> Operand {
    Operand { tensor, offset, ld: ld as i32, stride }
}

/// The steps of a problem with a config, backward-weight's partials in chunks of at most
/// `budget` bytes.
fn plan(p: &ConvProblem, config: &Config, budget: u64) -> Vec<Step> {
    match p.layout {
        Layout::Nhwc => match reduction_split(p, budget, chunk_rows(config)) {
            Some(split) => plan_nhwc_split(p, split),
            None => plan_nhwc(p),
        },
        Layout::Nchw if sums_images(p) => plan_nchw_weights(p, budget),
        Layout::Nchw => plan_nchw(p),
    }
}

fn plan_nhwc(p: &ConvProblem) -> Vec<Step> {
    let (n, c, k, g) = (p.n as i64, p.c as i64, p.k as i64, p.g as i64);
    let (cg, kg) = (c / g, k / g);
    let positions: i64 = p.dims.iter().map(|d| i64::from(d.input)).product();
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
        Direction::Forward => Gemm::new((true, false), (kg, np, red), weights, x, y, batch),
        // dx^T (red x NP) = W^T (red x Kg) . dy^T (Kg x NP)
        Direction::BackwardData => {
            Gemm::new((false, false), (red, np, kg), weights, y, x, batch).into_fp32(x.tensor == Role::Col)
        }
        // dW^T (red x Kg) = x^T (red x NP) . dy (NP x Kg)
        Direction::BackwardWeight => Gemm::new((false, true), (red, kg, np), x, y, weights, batch),
    };
    match (explicit(p), p.direction) {
        (false, _) => vec![Step::Gemm(gemm)],
        (true, Direction::BackwardData) => vec![Step::Gemm(gemm), Step::Col2im],
        (true, _) => vec![Step::Im2col, Step::Gemm(gemm)],
    }
}

/// Plain NHWC backward-weight with its reduction split ([`reduction_split`]): each chunk of rows
/// writes an fp32 partial dW for every group, batched over the chunks of a group, or over the
/// groups of a chunk, whichever launches fewer; then their sum.
fn plan_nhwc_split(p: &ConvProblem, (chunks, per_chunk): (u64, u64)) -> Vec<Step> {
    let (c, k, g) = (i64::from(p.c), i64::from(p.k), i64::from(p.g));
    let (cg, kg) = (c / g, k / g);
    let (chunks, per_chunk, rows) = (chunks as i64, per_chunk as i64, col_rows(p) as i64);
    let weights = weight_elements(p) as i64;
    let full = rows / per_chunk;
    let last_rows = rows - full * per_chunk;
    let partials = Role::Partials { after_sum: 0 };
    // dW_g^T (Cg x Kg) = x_g^T (Cg x rows) . dy_g (rows x Kg), over a chunk's rows.
    let gemm = |chunk: i64, group: i64, rows: i64, (x_step, y_step, w_step): (i64, i64, i64), batch: i64| {
        Step::Gemm(
            Gemm::new(
                (false, true),
                (cg as i32, kg as i32, rows as i32),
                op(Role::X, chunk * per_chunk * c + group * cg, c, x_step),
                op(Role::Y, chunk * per_chunk * k + group * kg, k, y_step),
                op(partials, chunk * weights + group * kg * cg, cg, w_step),
                batch as i32,
            )
            .into_fp32(true),
        )
    };
    let over_chunks = (1 + i64::from(last_rows > 0)) * g;
    let mut steps: Vec<Step> = if over_chunks <= chunks {
        let chunk_steps = (per_chunk * c, per_chunk * k, weights);
        (0..g)
            .flat_map(|group| {
                let last = (last_rows > 0).then(|| gemm(full, group, last_rows, chunk_steps, 1));
                std::iter::once(gemm(0, group, per_chunk, chunk_steps, full)).chain(last)
            })
            .collect()
    } else {
        (0..chunks).map(|chunk| gemm(chunk, 0, per_chunk.min(rows - chunk * per_chunk), (cg, kg, kg * cg), g)).collect()
    };
    steps.push(Step::SumImages { images: chunks as i32, first: true, last: true });
    steps
}

/// NCHW forward and backward-data, and backward-weight of one image: a GEMM per group batched
/// over images (the weights' stride 0), or a GEMM per image batched over groups, whichever
/// launches fewer.
fn plan_nchw(p: &ConvProblem) -> Vec<Step> {
    let (n, c, k, g) = (p.n as i64, p.c as i64, p.k as i64, p.g as i64);
    let (cg, kg) = (c / g, k / g);
    let positions: i64 = p.dims.iter().map(|d| i64::from(d.input)).product();
    let over_images = g <= n;
    let (launches, batch) = if over_images { (g, n) } else { (n, g) };
    (0..launches)
        .map(|at| {
            let (image, group) = if over_images { (0, at) } else { (at, 0) };
            let (x_step, y_step, w_step) = if over_images { (c, k, 0) } else { (cg, kg, kg * cg) };
            let x = op(Role::X, (image * c + group * cg) * positions, positions, x_step * positions);
            let y = op(Role::Y, (image * k + group * kg) * positions, positions, y_step * positions);
            let weights = op(Role::W, group * kg * cg, cg, w_step);
            let (p32, cg, kg, batch) = (positions as i32, cg as i32, kg as i32, batch as i32);
            Step::Gemm(match p.direction {
                // y^T (P x Kg) = x^T (P x Cg) . W^T (Cg x Kg)
                Direction::Forward => Gemm::new((false, false), (p32, kg, cg), x, weights, y, batch),
                // dx^T (P x Cg) = dy^T (P x Kg) . W (Kg x Cg)
                Direction::BackwardData => Gemm::new((false, true), (p32, cg, kg), y, weights, x, batch),
                // dW^T (Cg x Kg) = x (Cg x P) . dy^T (P x Kg)
                Direction::BackwardWeight => Gemm::new((true, false), (cg, kg, p32), x, y, weights, batch),
            })
        })
        .collect()
}

/// NCHW backward-weight over several images: per chunk of images one GEMM batched over every
/// (image, group) pair, whose operands are then evenly spaced (x's Cg x P blocks, dy's Kg x P,
/// the partials' Kg x Cg), then the sum of the chunk's partials.
fn plan_nchw_weights(p: &ConvProblem, budget: u64) -> Vec<Step> {
    let (c, k, g) = (p.c as i64, p.k as i64, p.g as i64);
    let (cg, kg) = (c / g, k / g);
    let positions: i64 = p.dims.iter().map(|d| i64::from(d.input)).product();
    let per_chunk = images_per_chunk(p, budget);
    let partials = Role::Partials { after_sum: sum_bytes(p, budget) };
    (0..p.n)
        .step_by(per_chunk as usize)
        .flat_map(|first_image| {
            let images = per_chunk.min(p.n - first_image);
            let image = i64::from(first_image);
            // dW_i^T (Cg x Kg) = x_i (Cg x P) . dy_i^T (P x Kg), for each (image, group) i.
            let gemm = Gemm::new(
                (true, false),
                (cg as i32, kg as i32, positions as i32),
                op(Role::X, image * c * positions, positions, cg * positions),
                op(Role::Y, image * k * positions, positions, kg * positions),
                op(partials, 0, cg, kg * cg),
                (i64::from(images) * g) as i32,
            )
            .into_fp32(true);
            let sum =
                Step::SumImages { images: images as i32, first: first_image == 0, last: first_image + images == p.n };
            [Step::Gemm(gemm), sum]
        })
        .collect()
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
        } else if sums_images(p) {
            sum_bytes(p, PARTIALS_BYTES) + u64::from(images_per_chunk(p, PARTIALS_BYTES)) * weight_elements(p) * 4
        } else if let Some((chunks, _)) = reduction_split(p, PARTIALS_BYTES, chunk_rows(config)) {
            chunks * weight_elements(p) * 4
        } else {
            0
        };
        BLAS_WORKSPACE_BYTES + after
    }

    /// `default`, and where the reduction of a grouped NHWC backward-weight can be split, each
    /// length of chunk that splits it.
    fn configs<'a>(&'a self, p: &'a ConvProblem) -> Box<dyn Iterator<Item = Config> + 'a> {
        Box::new(chunk_configs(p).into_iter())
    }

    fn check_config(&self, p: &ConvProblem, config: &Config) -> Result<()> {
        check_chunk_config(p, config)
    }

    builds_from_kernel!();
}

/// The im2col (or col2im) kernel of the explicit path, or the sum over images; other plain 1x1
/// GEMMs need none.
impl BuiltFrom for GemmBlas {
    fn device(&self) -> &CudaDevice {
        &self.device
    }

    fn kernels(&self, p: &ConvProblem, config: &Config) -> Result<Vec<KernelSource>> {
        let sums = sums_images(p) || reduction_split(p, PARTIALS_BYTES, chunk_rows(config)).is_some();
        Ok((explicit(p) || sums).then(|| im2col_source(p)).into_iter().collect())
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
                        buffers: [Role::X, Role::Col],
                        ints: None,
                        what: "launch the im2col of cuda.gemm_blas",
                    }),
                    // A thread per vector of dx.
                    Step::Col2im => Call::Kernel(Kernel {
                        function: function("col2im")?,
                        blocks: spread(p.input_elements(), 32),
                        buffers: [Role::Col, Role::X],
                        ints: None,
                        what: "launch the col2im of cuda.gemm_blas",
                    }),
                    Step::SumImages { images, first, last } => Call::Kernel(Kernel {
                        function: function("sum_images")?,
                        blocks: spread(weight_elements(p), 8),
                        buffers: [Role::Partials { after_sum: sum_bytes(p, PARTIALS_BYTES) }, Role::Sum],
                        ints: Some([images, i32::from(first), i32::from(last)]),
                        what: "launch the sum over images of cuda.gemm_blas",
                    }),
                })
            })
            .collect::<Result<Vec<Call>>>()?;
        Ok(Box::new(BlasInvoker { blas: self.blas()?, steps, params, data, compute }))
    }
}

mod invoker;
#[cfg(test)]
mod tests;
