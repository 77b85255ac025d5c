//! `cpu.direct_blocked`: implicit GEMM with no workspace. For every (output row, filter tap)
//! pair, the input row read by that tap is a strided matrix in place, so the convolution is a
//! sum of small GEMMs on views of the tensors. The blocking is tunable:
//!
//! - forward and backward-data: `rb` rows per task, `kb` output channels per task (K for
//!   forward, C for backward-data), `lo` loop order (0: taps outer, 1: rows outer);
//! - backward-weight: tasks own a (`kb` x `cb`) block of one tap of dw, so no two tasks write
//!   the same element and no partial sums are needed.

use gconv_core::geometry::positions;
use gconv_core::{
    Config, ConvProblem, Direction, Field, GconvError, Geometry, Invoker, NotApplicable, Result, Schema, Solve, Solver,
    Values,
};
use rayon::prelude::*;

use crate::matmul::{gemm, SharedMut, Span, View};
use crate::{Host, HostInvoker, HostKernel};

pub struct DirectBlocked;

const ROW_BLOCKS: [u32; 5] = [1, 2, 4, 8, 16];
const CHANNEL_BLOCKS: [u32; 6] = [8, 16, 32, 64, 128, 256];

/// Forward's and backward-data's fields: rows a task, channels a task, loop order; block sizes
/// bounded per problem by `Limits`.
const ROWS_SCHEMA: Schema = Schema::new(&[
    Field::new("rb", Values::Range(1, u32::MAX)),
    Field::new("kb", Values::Range(1, u32::MAX)),
    Field::new("lo", Values::OneOf(&[0, 1])),
]);
/// Backward-weight's: a block of K by one of C.
const WEIGHT_SCHEMA: Schema =
    Schema::new(&[Field::new("kb", Values::Range(1, u32::MAX)), Field::new("cb", Values::Range(1, u32::MAX))]);

/// A typed config; its text form is `rb<rows>_kb<channels>_lo<order>` for forward and
/// backward-data and `kb<k block>_cb<c block>` for backward-weight.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Blocking {
    Rows { rows: usize, channels: usize, taps_outer: bool },
    Weight { k_block: usize, c_block: usize },
}

impl Blocking {
    fn to_config(self) -> Config {
        match self {
            Blocking::Rows { rows, channels, taps_outer } => {
                ROWS_SCHEMA.print([rows as u32, channels as u32, u32::from(!taps_outer)])
            }
            Blocking::Weight { k_block, c_block } => WEIGHT_SCHEMA.print([k_block as u32, c_block as u32]),
        }
    }

    fn from_config(p: &ConvProblem, config: &Config) -> Result<Self> {
        let limits = Limits::new(p);
        let bad = |reason: String| GconvError::BadConfig { text: config.to_string(), reason };
        let blocking = if p.direction == Direction::BackwardWeight {
            let [kb, cb] = WEIGHT_SCHEMA.parse(config)?;
            Blocking::Weight { k_block: kb as usize, c_block: cb as usize }
        } else {
            let [rb, kb, lo] = ROWS_SCHEMA.parse(config)?;
            Blocking::Rows { rows: rb as usize, channels: kb as usize, taps_outer: lo == 0 }
        };
        let in_range = |v: usize, max: usize| (1..=max).contains(&v);
        match blocking {
            Blocking::Rows { rows, channels, .. } => {
                if !in_range(rows, limits.rows) || !in_range(channels, limits.channels) {
                    return Err(bad(format!(
                        "needs 1 <= rb <= {} and 1 <= kb <= {} for this problem",
                        limits.rows, limits.channels
                    )));
                }
            }
            Blocking::Weight { k_block, c_block } => {
                if !in_range(k_block, limits.rows) || !in_range(c_block, limits.channels) {
                    return Err(bad(format!(
                        "needs 1 <= kb <= {} and 1 <= cb <= {} for this problem",
                        limits.rows, limits.channels
                    )));
                }
            }
        }
        Ok(blocking)
    }
}

/// Upper bounds of the two block sizes: (rows, channels) for forward and backward-data,
/// (K/G, C/G) for backward-weight.
struct Limits {
    rows: usize,
    channels: usize,
}

impl Limits {
    fn new(p: &ConvProblem) -> Self {
        let geo = Geometry::new(p);
        match p.direction {
            Direction::Forward => Limits { rows: geo.output[0] * geo.output[1], channels: geo.kg },
            Direction::BackwardData => Limits { rows: geo.input[0] * geo.input[1], channels: geo.cg },
            Direction::BackwardWeight => Limits { rows: geo.kg, channels: geo.cg },
        }
    }
}

/// Candidate block sizes up to `max`: the listed powers of two below it, and `max` itself.
fn candidates(list: &'static [u32], max: usize) -> impl Iterator<Item = usize> + Clone {
    list.iter().map(|&v| v as usize).filter(move |&v| v < max).chain(std::iter::once(max))
}

impl Solver for DirectBlocked {
    fn id(&self) -> &'static str {
        "cpu.direct_blocked"
    }

    fn applicable(&self, _p: &ConvProblem) -> Result<(), NotApplicable> {
        Ok(())
    }

    fn default_config(&self, p: &ConvProblem) -> Config {
        let limits = Limits::new(p);
        let blocking = match p.direction {
            Direction::BackwardWeight => {
                Blocking::Weight { k_block: limits.rows.min(64), c_block: limits.channels.min(64) }
            }
            _ => Blocking::Rows { rows: limits.rows.min(4), channels: limits.channels.min(64), taps_outer: false },
        };
        blocking.to_config()
    }

    fn configs<'a>(&'a self, p: &'a ConvProblem) -> Box<dyn Iterator<Item = Config> + 'a> {
        let limits = Limits::new(p);
        let channels = candidates(&CHANNEL_BLOCKS, limits.channels);
        if p.direction == Direction::BackwardWeight {
            let k_blocks = candidates(&CHANNEL_BLOCKS, limits.rows);
            return Box::new(k_blocks.flat_map(move |k_block| {
                channels.clone().map(move |c_block| Blocking::Weight { k_block, c_block }.to_config())
            }));
        }
        let rows = ROW_BLOCKS.iter().map(|&r| r as usize).filter(move |&r| r <= limits.rows);
        Box::new(rows.flat_map(move |rows| {
            channels.clone().flat_map(move |channels| {
                [true, false].map(|taps_outer| Blocking::Rows { rows, channels, taps_outer }.to_config())
            })
        }))
    }

    fn check_config(&self, p: &ConvProblem, config: &Config) -> Result<()> {
        Blocking::from_config(p, config).map(|_| ())
    }
}

impl Solve<Host> for DirectBlocked {
    fn solution(&self, p: &ConvProblem, config: &Config) -> Result<Box<dyn Invoker<Host>>> {
        let blocking = Blocking::from_config(p, config)?;
        Ok(HostInvoker::boxed(p, 0, Kernel { geo: Geometry::new(p), blocking }))
    }
}

struct Kernel {
    geo: Geometry,
    blocking: Blocking,
}

/// One parallel task of forward or backward-data.
struct RowTask {
    n: usize,
    rows: std::ops::Range<usize>,
    g: usize,
    channels: std::ops::Range<usize>,
}

impl Kernel {
    /// Splits (image, rows, group, channels) into tasks, `total_rows` rows per image.
    fn row_tasks(&self, total_rows: usize, total_channels: usize) -> Vec<RowTask> {
        let Blocking::Rows { rows: rb, channels: cb, .. } = self.blocking else { unreachable!() };
        let mut tasks = Vec::new();
        for n in 0..self.geo.n {
            for r0 in (0..total_rows).step_by(rb) {
                for g in 0..self.geo.g {
                    for c0 in (0..total_channels).step_by(cb) {
                        tasks.push(RowTask {
                            n,
                            rows: r0..(r0 + rb).min(total_rows),
                            g,
                            channels: c0..(c0 + cb).min(total_channels),
                        });
                    }
                }
            }
        }
        tasks
    }

    /// Visits (row, tap) pairs of a task in the configured order.
    fn for_each_row_tap(&self, rows: std::ops::Range<usize>, mut visit: impl FnMut(usize, [usize; 3])) {
        let Blocking::Rows { taps_outer, .. } = self.blocking else { unreachable!() };
        if taps_outer {
            for tap in positions(self.geo.filter) {
                rows.clone().for_each(|r| visit(r, tap));
            }
        } else {
            for r in rows {
                positions(self.geo.filter).for_each(|tap| visit(r, tap));
            }
        }
    }

    /// Input column of the first valid output column of tap `fx`, and that output range.
    fn columns(&self, fx: usize) -> (usize, std::ops::Range<usize>) {
        let geo = &self.geo;
        let ow = geo.valid_outputs(2, fx);
        (ow.start * geo.stride[2] + fx * geo.dilation[2] - geo.pad[2], ow)
    }
}

impl HostKernel for Kernel {
    fn forward(&self, x: &[f32], w: &[f32], y: &mut [f32], _ws: &mut [f32]) {
        let geo = &self.geo;
        let y = SharedMut::new(y);
        self.row_tasks(geo.output[0] * geo.output[1], geo.kg).into_par_iter().for_each(|task| {
            let k0 = task.g * geo.kg + task.channels.start;
            self.for_each_row_tap(task.rows.clone(), |row, tap| {
                let (od, oh) = (row / geo.output[1], row % geo.output[1]);
                let (Some(id), Some(ih)) = (geo.input_coord(0, od, tap[0]), geo.input_coord(1, oh, tap[1])) else {
                    return;
                };
                let (iw0, ow) = self.columns(tap[2]);
                if ow.is_empty() {
                    return;
                }
                let (m, kb) = (ow.len(), task.channels.len());
                let dst = Span {
                    offset: geo.y.offset(task.n, k0, [od, oh, ow.start]),
                    rows: m,
                    cols: kb,
                    rs: geo.y.spatial[2],
                    cs: geo.y.c,
                };
                let lhs = Span {
                    offset: geo.x.offset(task.n, task.g * geo.cg, [id, ih, iw0]),
                    rows: m,
                    cols: geo.cg,
                    rs: geo.x.spatial[2] * geo.stride[2],
                    cs: geo.x.c,
                };
                let rhs =
                    Span { offset: geo.w.offset(k0, 0, tap), rows: geo.cg, cols: kb, rs: geo.w.c, cs: geo.w.outer };
                // SAFETY: the task owns rows `task.rows`, channels `task.channels` of image n.
                unsafe { gemm(View::at(y, dst), View::of(x, lhs), View::of(w, rhs), true, 1) };
            });
        });
    }

    fn backward_data(&self, dy: &[f32], w: &[f32], dx: &mut [f32], _ws: &mut [f32]) {
        let geo = &self.geo;
        let dx = SharedMut::new(dx);
        self.row_tasks(geo.input[0] * geo.input[1], geo.cg).into_par_iter().for_each(|task| {
            let c0 = task.g * geo.cg + task.channels.start;
            self.for_each_row_tap(task.rows.clone(), |row, tap| {
                let (id, ih) = (row / geo.input[1], row % geo.input[1]);
                let (Some(od), Some(oh)) = (geo.output_coord(0, id, tap[0]), geo.output_coord(1, ih, tap[1])) else {
                    return;
                };
                let (iw0, ow) = self.columns(tap[2]);
                if ow.is_empty() {
                    return;
                }
                let (m, cb) = (ow.len(), task.channels.len());
                let dst = Span {
                    offset: geo.x.offset(task.n, c0, [id, ih, iw0]),
                    rows: m,
                    cols: cb,
                    rs: geo.x.spatial[2] * geo.stride[2],
                    cs: geo.x.c,
                };
                let lhs = Span {
                    offset: geo.y.offset(task.n, task.g * geo.kg, [od, oh, ow.start]),
                    rows: m,
                    cols: geo.kg,
                    rs: geo.y.spatial[2],
                    cs: geo.y.c,
                };
                let rhs = Span {
                    offset: geo.w.offset(task.g * geo.kg, task.channels.start, tap),
                    rows: geo.kg,
                    cols: cb,
                    rs: geo.w.outer,
                    cs: geo.w.c,
                };
                // SAFETY: the task owns input rows `task.rows`, channels `task.channels` of image n.
                unsafe { gemm(View::at(dx, dst), View::of(dy, lhs), View::of(w, rhs), true, 1) };
            });
        });
    }

    fn backward_weight(&self, x: &[f32], dy: &[f32], dw: &mut [f32], _ws: &mut [f32]) {
        let geo = &self.geo;
        let Blocking::Weight { k_block, c_block } = self.blocking else { unreachable!() };
        let dw = SharedMut::new(dw);
        let mut tasks = Vec::new();
        for g in 0..geo.g {
            for k0 in (0..geo.kg).step_by(k_block) {
                for c0 in (0..geo.cg).step_by(c_block) {
                    for tap in positions(geo.filter) {
                        tasks.push((g, k0..(k0 + k_block).min(geo.kg), c0..(c0 + c_block).min(geo.cg), tap));
                    }
                }
            }
        }
        tasks.into_par_iter().for_each(|(g, ks, cs, tap)| {
            let (k0, c0) = (g * geo.kg + ks.start, g * geo.cg + cs.start);
            let dst = Span {
                offset: geo.w.offset(k0, cs.start, tap),
                rows: ks.len(),
                cols: cs.len(),
                rs: geo.w.outer,
                cs: geo.w.c,
            };
            let (iw0, ow) = self.columns(tap[2]);
            if ow.is_empty() {
                return;
            }
            for n in 0..geo.n {
                for od in 0..geo.output[0] {
                    let Some(id) = geo.input_coord(0, od, tap[0]) else { continue };
                    for oh in 0..geo.output[1] {
                        let Some(ih) = geo.input_coord(1, oh, tap[1]) else { continue };
                        let lhs = Span {
                            offset: geo.y.offset(n, k0, [od, oh, ow.start]),
                            rows: ks.len(),
                            cols: ow.len(),
                            rs: geo.y.c,
                            cs: geo.y.spatial[2],
                        };
                        let rhs = Span {
                            offset: geo.x.offset(n, c0, [id, ih, iw0]),
                            rows: ow.len(),
                            cols: cs.len(),
                            rs: geo.x.spatial[2] * geo.stride[2],
                            cs: geo.x.c,
                        };
                        // SAFETY: the task owns this (k block, c block, tap) of dw.
                        unsafe { gemm(View::at(dw, dst), View::of(dy, lhs), View::of(x, rhs), true, 1) };
                    }
                }
            }
        });
    }
}
