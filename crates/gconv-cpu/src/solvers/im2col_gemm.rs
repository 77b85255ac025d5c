//! `cpu.im2col_gemm`: per image and group, unfold the input into a column matrix in the
//! workspace and run one GEMM. The column matrix is [C/G * filter, output positions], stored
//! row-major for NCHW (rows are contiguous along output positions) and transposed for NHWC
//! (each output position holds its taps x channels contiguously), so both fills are copies of
//! contiguous runs.

use gconv_core::geometry::positions;
use gconv_core::{Config, ConvProblem, Direction, Geometry, Invoker, Layout, NotApplicable, Result, Solve, Solver};
use rayon::prelude::*;

use super::partition;
use crate::matmul::{gemm, SharedMut, Span, View};
use crate::{Host, HostInvoker, HostKernel};

/// NCHW backward-data batches images until its GEMMs are about this wide.
const GEMM_COLUMNS: usize = 512;

pub struct Im2colGemm {
    pub threads: usize,
}

impl Solver for Im2colGemm {
    fn id(&self) -> &'static str {
        "cpu.im2col_gemm"
    }

    fn applicable(&self, _p: &ConvProblem) -> Result<(), NotApplicable> {
        Ok(())
    }

    fn workspace_bytes(&self, p: &ConvProblem, _config: &Config) -> u64 {
        Plan::new(p, self.threads).workspace_elements() as u64 * 4
    }
}

impl Solve<Host> for Im2colGemm {
    fn solution(&self, p: &ConvProblem, _config: &Config) -> Result<Box<dyn Invoker<Host>>> {
        let plan = Plan::new(p, self.threads);
        Ok(HostInvoker::boxed(p, plan.workspace_elements() as u64 * 4, plan))
    }
}

/// How the work is split: `slots` parallel tasks, each with its own column buffer (and, for
/// backward-weight over the batch, its own partial weight gradient).
struct Plan {
    geo: Geometry,
    channels_last: bool,
    threads: usize,
    /// Rows of the column matrix: C/G x filter volume.
    rows: usize,
    /// Columns of the column matrix: output volume.
    cols: usize,
    slots: usize,
    /// NCHW backward-data: images per GEMM. Small output planes make thin GEMMs, so several
    /// images' dy is gathered side by side into one wider matrix first.
    batch: usize,
    /// Backward-weight: split by group (each task owns whole groups of dw) when there are
    /// enough groups, else by batch into private partial sums.
    weight_by_group: bool,
}

impl Plan {
    fn new(p: &ConvProblem, threads: usize) -> Self {
        let geo = Geometry::new(p);
        let weight_by_group = geo.g >= threads;
        let cols = geo.output_volume();
        let batch = if p.layout == Layout::Nchw && p.direction == Direction::BackwardData {
            geo.n.min((GEMM_COLUMNS / cols).max(1))
        } else {
            1
        };
        let items = match p.direction {
            Direction::BackwardWeight if weight_by_group => geo.g,
            Direction::BackwardWeight => geo.n,
            _ => geo.n.div_ceil(batch) * geo.g,
        };
        Plan {
            batch,
            rows: geo.cg * geo.filter_volume(),
            cols,
            channels_last: p.layout == Layout::Nhwc,
            slots: items.clamp(1, threads.max(1)),
            threads: threads.max(1),
            weight_by_group,
            geo,
        }
    }

    fn col_len(&self) -> usize {
        self.rows * self.cols
    }

    fn partial_len(&self) -> usize {
        if self.weight_by_group {
            0
        } else {
            self.geo.k() * self.rows
        }
    }

    /// The gathered dy of a batch of images, [K/G, batch x output volume].
    fn gathered_len(&self) -> usize {
        if self.batch > 1 {
            self.geo.kg * self.cols * self.batch
        } else {
            0
        }
    }

    fn slot_len(&self) -> usize {
        self.col_len() * self.batch + self.partial_len() + self.gathered_len()
    }

    fn workspace_elements(&self) -> usize {
        self.slots * self.slot_len()
    }

    /// Threads left to each GEMM when fewer tasks than threads run at once.
    fn gemm_threads(&self) -> usize {
        (self.threads / self.slots).max(1)
    }

    /// The column matrix as [rows, cols].
    fn col_span(&self) -> Span {
        let (rows, cols) = (self.rows, self.cols);
        if self.channels_last {
            Span { offset: 0, rows, cols, rs: 1, cs: rows }
        } else {
            Span { offset: 0, rows, cols, rs: cols, cs: 1 }
        }
    }

    /// Group g's weights as [K/G, rows]: the same span in both layouts because the column
    /// matrix orders its rows like the weight tensor.
    fn weight_span(&self, g: usize) -> Span {
        let geo = &self.geo;
        Span { offset: g * geo.kg * geo.w.outer, rows: geo.kg, cols: self.rows, rs: geo.w.outer, cs: 1 }
    }

    /// Image n, group g of y (or dy) as [K/G, output positions].
    fn y_span(&self, n: usize, g: usize) -> Span {
        let s = &self.geo.y;
        Span {
            offset: s.offset(n, g * self.geo.kg, [0; 3]),
            rows: self.geo.kg,
            cols: self.cols,
            rs: s.c,
            cs: s.spatial[2],
        }
    }

    /// Adds image n's share of group g's weight gradient to `dst`: its column matrix, built in
    /// `col`, times its output gradient.
    ///
    /// # Safety
    /// No other task reads or writes `dst` meanwhile.
    unsafe fn add_weight_product(&self, x: &[f32], dy: &[f32], n: usize, g: usize, col: &mut [f32], dst: View) {
        self.im2col(x, n, g, col);
        let (dy, col) = (View::of(dy, self.y_span(n, g)), View::of(col, self.col_span()).t());
        // SAFETY: as the caller promises for dst; the operands are read-only slices.
        unsafe { gemm(dst, dy, col, true, self.gemm_threads()) };
    }

    fn im2col(&self, x: &[f32], n: usize, g: usize, col: &mut [f32]) {
        let geo = &self.geo;
        let c0 = g * geo.cg;
        if self.channels_last {
            for (o, pos) in positions(geo.output).enumerate() {
                let row = &mut col[o * self.rows..(o + 1) * self.rows];
                for (t, tap) in positions(geo.filter).enumerate() {
                    let dst = &mut row[t * geo.cg..(t + 1) * geo.cg];
                    match geo.input_pos(pos, tap) {
                        Some(i) => {
                            let start = geo.x.offset(n, c0, i);
                            dst.copy_from_slice(&x[start..start + geo.cg]);
                        }
                        None => dst.fill(0.0),
                    }
                }
            }
        } else {
            let f_vol = geo.filter_volume();
            for c in 0..geo.cg {
                for (t, tap) in positions(geo.filter).enumerate() {
                    let row = &mut col[(c * f_vol + t) * self.cols..][..self.cols];
                    row.fill(0.0);
                    for_each_valid_row(geo, tap, |o_row, i_row, ow| {
                        let base = geo.x.offset(n, c0 + c, [i_row[0], i_row[1], 0]);
                        for o in ow {
                            let i = o * geo.stride[2] + tap[2] * geo.dilation[2] - geo.pad[2];
                            row[o_row + o] = x[base + i];
                        }
                    });
                }
            }
        }
    }

    /// Adds the column matrix back into image n, group g of dx. In NCHW, rows of `col` are
    /// `row_stride` apart (wider than a row when several images share the matrix).
    ///
    /// # Safety
    /// The caller owns channels [g*C/G, (g+1)*C/G) of image n in `dx`.
    unsafe fn col2im(&self, col: &[f32], row_stride: usize, n: usize, g: usize, dx: SharedMut) {
        let geo = &self.geo;
        let c0 = g * geo.cg;
        if self.channels_last {
            for (o, pos) in positions(geo.output).enumerate() {
                let row = &col[o * self.rows..(o + 1) * self.rows];
                for (t, tap) in positions(geo.filter).enumerate() {
                    if let Some(i) = geo.input_pos(pos, tap) {
                        let dst = dx.slice(geo.x.offset(n, c0, i), geo.cg);
                        for (d, s) in dst.iter_mut().zip(&row[t * geo.cg..(t + 1) * geo.cg]) {
                            *d += s;
                        }
                    }
                }
            }
        } else {
            let f_vol = geo.filter_volume();
            for c in 0..geo.cg {
                let plane = dx.slice(geo.x.offset(n, c0 + c, [0; 3]), geo.input_volume());
                for (t, tap) in positions(geo.filter).enumerate() {
                    let row = &col[(c * f_vol + t) * row_stride..][..self.cols];
                    for_each_valid_row(geo, tap, |o_row, i_row, ow| {
                        let base = geo.x.offset(0, 0, [i_row[0], i_row[1], 0]);
                        for o in ow {
                            let i = o * geo.stride[2] + tap[2] * geo.dilation[2] - geo.pad[2];
                            plane[base + i] += row[o_row + o];
                        }
                    });
                }
            }
        }
    }
}

/// For filter tap `tap`, calls `visit(output row start, input row (d, h), valid output columns)`
/// for every output row (d, h) whose input row is inside the input.
fn for_each_valid_row(
    geo: &Geometry,
    tap: [usize; 3],
    mut visit: impl FnMut(usize, [usize; 2], std::ops::Range<usize>),
) {
    let ow = geo.valid_outputs(2, tap[2]);
    for od in 0..geo.output[0] {
        let Some(id) = geo.input_coord(0, od, tap[0]) else { continue };
        for oh in 0..geo.output[1] {
            let Some(ih) = geo.input_coord(1, oh, tap[1]) else { continue };
            visit((od * geo.output[1] + oh) * geo.output[2], [id, ih], ow.clone());
        }
    }
}

impl HostKernel for Plan {
    fn forward(&self, x: &[f32], w: &[f32], y: &mut [f32], ws: &mut [f32]) {
        let geo = &self.geo;
        let y_shared = SharedMut::new(y);
        let parts = partition(geo.n * geo.g, self.slots);
        ws.par_chunks_mut(self.slot_len()).zip(parts).for_each(|(col, items)| {
            for item in items {
                let (n, g) = (item / geo.g, item % geo.g);
                self.im2col(x, n, g, col);
                let dst = View::at(y_shared, self.y_span(n, g));
                // SAFETY: each item writes only image n, group g of y.
                unsafe {
                    gemm(
                        dst,
                        View::of(w, self.weight_span(g)),
                        View::of(col, self.col_span()),
                        false,
                        self.gemm_threads(),
                    )
                };
            }
        });
    }

    fn backward_data(&self, dy: &[f32], w: &[f32], dx: &mut [f32], ws: &mut [f32]) {
        let geo = &self.geo;
        let dx_shared = SharedMut::new(dx);
        let blocks = geo.n.div_ceil(self.batch);
        let parts = partition(blocks * geo.g, self.slots);
        ws.par_chunks_mut(self.slot_len()).zip(parts).for_each(|(slot, items)| {
            let (col, gathered) = slot.split_at_mut(self.col_len() * self.batch);
            for item in items {
                let (block, g) = (item / geo.g, item % geo.g);
                let images = block * self.batch..((block + 1) * self.batch).min(geo.n);
                let width = images.len() * self.cols;
                let dy_view = if self.batch == 1 {
                    View::of(dy, self.y_span(images.start, g))
                } else {
                    // NCHW planes of the batch's images side by side: [K/G, images x P].
                    for (j, n) in images.clone().enumerate() {
                        for k in 0..geo.kg {
                            let src = geo.y.offset(n, g * geo.kg + k, [0; 3]);
                            gathered[k * width + j * self.cols..][..self.cols]
                                .copy_from_slice(&dy[src..src + self.cols]);
                        }
                    }
                    View::of(gathered, Span { offset: 0, rows: geo.kg, cols: width, rs: width, cs: 1 })
                };
                let col_span = if self.batch == 1 {
                    self.col_span()
                } else {
                    Span { offset: 0, rows: self.rows, cols: width, rs: width, cs: 1 }
                };
                let dst = View::at(SharedMut::new(col), col_span);
                // SAFETY: the column and gather buffers are this task's own; each col2im
                // target is one image's group g of dx, which only this item touches.
                unsafe {
                    gemm(dst, View::of(w, self.weight_span(g)).t(), dy_view, false, self.gemm_threads());
                    for (j, n) in images.enumerate() {
                        self.col2im(&col[j * self.cols..], width, n, g, dx_shared);
                    }
                }
            }
        });
    }

    fn backward_weight(&self, x: &[f32], dy: &[f32], dw: &mut [f32], ws: &mut [f32]) {
        let geo = &self.geo;
        if self.weight_by_group {
            let dw_shared = SharedMut::new(dw);
            let parts = partition(geo.g, self.slots);
            ws.par_chunks_mut(self.slot_len()).zip(parts).for_each(|(col, groups)| {
                for g in groups {
                    let dst = View::at(dw_shared, self.weight_span(g));
                    for n in 0..geo.n {
                        // SAFETY: this task owns group g of dw.
                        unsafe { self.add_weight_product(x, dy, n, g, col, dst) };
                    }
                }
            });
            return;
        }
        let parts = partition(geo.n, self.slots);
        ws.par_chunks_mut(self.slot_len()).zip(parts).for_each(|(slot, images)| {
            let (col, partial) = slot.split_at_mut(self.col_len());
            partial.fill(0.0);
            for n in images {
                for g in 0..geo.g {
                    let dst = View::at(SharedMut::new(partial), self.weight_span(g));
                    // SAFETY: the partial sum belongs to this task alone.
                    unsafe { self.add_weight_product(x, dy, n, g, col, dst) };
                }
            }
        });
        let (col_len, slot_len) = (self.col_len(), self.slot_len());
        let partials: Vec<&[f32]> = ws.chunks(slot_len).map(|s| &s[col_len..]).collect();
        dw.par_chunks_mut(4096).enumerate().for_each(|(chunk, out)| {
            let start = chunk * 4096;
            for partial in &partials {
                for (d, s) in out.iter_mut().zip(&partial[start..]) {
                    *d += s;
                }
            }
        });
    }
}
