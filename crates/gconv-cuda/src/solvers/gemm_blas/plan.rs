//! The steps of `cuda.gemm_blas` for a problem and config: its strided-batched GEMMs in cuBLAS's
//! column-major terms, and gconv's kernels around them.

use gconv_core::{Config, ConvProblem, Direction, Layout};

use super::{
    chunk_rows, col_rows, explicit, images_per_chunk, nchw_partials_bytes, positions, reduction_split, row_pitch,
    sum_bytes, sums_images, weight_elements, Gemm, Operand, Role,
};

/// One step of a call, in order.
#[derive(Debug, Clone, Copy)]
pub(super) enum Step {
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
    /// `rows` rows of `width` elements copied from `from_ld` apart to `to_ld` apart.
    Pitch {
        from: Role,
        to: Role,
        rows: i32,
        width: i32,
        from_ld: i32,
        to_ld: i32,
    },
}

fn op(tensor: Role, offset: i64, ld: i64, stride: i64) -> Operand {
    Operand { tensor, offset, ld: ld as i32, stride }
}

/// The steps of a problem with a config, backward-weight's partials in chunks of at most
/// `budget` bytes.
pub(super) fn plan(p: &ConvProblem, config: &Config, budget: u64) -> Vec<Step> {
    match p.layout {
        Layout::Nhwc => match reduction_split(p, budget, chunk_rows(config)) {
            Some(split) => plan_nhwc_split(p, split),
            None => plan_nhwc(p),
        },
        Layout::Nchw => {
            let rows = Rows::of(p, config, budget);
            let gemms = match sums_images(p) {
                true => plan_nchw_weights(p, budget, rows),
                false => plan_nchw(p, rows),
            };
            rows.around(p, gemms)
        }
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
/// launches fewer; the pixel rows where `rows` says.
fn plan_nchw(p: &ConvProblem, rows: Rows) -> Vec<Step> {
    let (n, c, k, g) = (p.n as i64, p.c as i64, p.k as i64, p.g as i64);
    let (cg, kg) = (c / g, k / g);
    let (positions, pitch) = (positions(p), rows.pitch);
    let over_images = g <= n;
    let (launches, batch) = if over_images { (g, n) } else { (n, g) };
    (0..launches)
        .map(|at| {
            let (image, group) = if over_images { (0, at) } else { (at, 0) };
            let (x_step, y_step, w_step) = if over_images { (c, k, 0) } else { (cg, kg, kg * cg) };
            let x = op(rows.x, (image * c + group * cg) * pitch, pitch, x_step * pitch);
            let y = op(rows.y, (image * k + group * kg) * pitch, pitch, y_step * pitch);
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
/// the partials' Kg x Cg), then the sum of the chunk's partials; the pixel rows where `rows` says.
fn plan_nchw_weights(p: &ConvProblem, budget: u64, rows: Rows) -> Vec<Step> {
    let (c, k, g) = (p.c as i64, p.k as i64, p.g as i64);
    let (cg, kg) = (c / g, k / g);
    let (positions, pitch) = (positions(p), rows.pitch);
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
                op(rows.x, image * c * pitch, pitch, cg * pitch),
                op(rows.y, image * k * pitch, pitch, kg * pitch),
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

/// Where a channels-first plan's GEMMs find x's and y's pixel rows, and their pitch.
#[derive(Debug, Clone, Copy)]
pub(super) struct Rows {
    x: Role,
    y: Role,
    pitch: i64,
}

impl Rows {
    /// In the tensors, or in pitched copies after the partials where the config pads them.
    pub(super) fn of(p: &ConvProblem, config: &Config, budget: u64) -> Self {
        let pitch = row_pitch(p, config);
        if pitch == positions(p) {
            return Rows { x: Role::X, y: Role::Y, pitch };
        }
        let x_after = nchw_partials_bytes(p, budget).next_multiple_of(256);
        let x_bytes = u64::from(p.n) * u64::from(p.c) * pitch as u64 * p.dtype.size_bytes() as u64;
        let y_after = (x_after + x_bytes).next_multiple_of(256);
        Rows { x: Role::Pitched { after: x_after }, y: Role::Pitched { after: y_after }, pitch }
    }

    /// Workspace bytes up to the end of y's pitched copy; none where the rows are not copied.
    pub(super) fn end(&self, p: &ConvProblem) -> u64 {
        match self.y {
            Role::Pitched { after } => {
                after + u64::from(p.n) * u64::from(p.k) * self.pitch as u64 * p.dtype.size_bytes() as u64
            }
            _ => 0,
        }
    }

    /// `gemms` with the copies into the pitched rows the GEMMs read before them and out of
    /// those they write after them.
    fn around(&self, p: &ConvProblem, gemms: Vec<Step>) -> Vec<Step> {
        if self.x == Role::X {
            return gemms;
        }
        let (n, c, k, positions) = (i64::from(p.n), i64::from(p.c), i64::from(p.k), positions(p));
        let copy = |from, to, channels: i64, (from_ld, to_ld)| Step::Pitch {
            from,
            to,
            rows: (n * channels) as i32,
            width: positions as i32,
            from_ld: from_ld as i32,
            to_ld: to_ld as i32,
        };
        let into = (positions, self.pitch);
        let out = (self.pitch, positions);
        let (before, after) = match p.direction {
            Direction::Forward => (vec![copy(Role::X, self.x, c, into)], vec![copy(self.y, Role::Y, k, out)]),
            Direction::BackwardData => (vec![copy(Role::Y, self.y, k, into)], vec![copy(self.x, Role::X, c, out)]),
            Direction::BackwardWeight => {
                (vec![copy(Role::X, self.x, c, into), copy(Role::Y, self.y, k, into)], Vec::new())
            }
        };
        before.into_iter().chain(gemms).chain(after).collect()
    }
}
