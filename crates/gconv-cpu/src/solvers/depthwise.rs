//! `cpu.depthwise`: direct loops for G = C = K, one filter per channel. The innermost loop runs
//! over contiguous memory so it vectorises: channels in NHWC, output columns in NCHW.

use gconv_core::geometry::{positions, Strides};
use gconv_core::{Config, ConvProblem, Direction, Geometry, Invoker, Layout, NotApplicable, Result, Solve, Solver};
use rayon::prelude::*;

use super::partition;
use crate::matmul::SharedMut;
use crate::{Host, HostInvoker, HostKernel};

pub struct Depthwise {
    pub threads: usize,
}

impl Solver for Depthwise {
    fn id(&self) -> &'static str {
        "cpu.depthwise"
    }

    fn applicable(&self, p: &ConvProblem) -> Result<(), NotApplicable> {
        gconv_core::applicability::depthwise(p)
    }

    fn workspace_bytes(&self, p: &ConvProblem, _config: &Config) -> u64 {
        Depthwise::plan(p, self.threads).workspace_elements() as u64 * 4
    }
}

impl Solve<Host> for Depthwise {
    fn solution(&self, p: &ConvProblem, _config: &Config) -> Result<Box<dyn Invoker<Host>>> {
        let plan = Depthwise::plan(p, self.threads);
        Ok(HostInvoker::boxed(p, plan.workspace_elements() as u64 * 4, plan))
    }
}

impl Depthwise {
    fn plan(p: &ConvProblem, threads: usize) -> Plan {
        let geo = Geometry::new(p);
        Plan {
            channels_last: p.layout == Layout::Nhwc,
            direction: p.direction,
            slots: geo.n.clamp(1, threads.max(1)),
            geo,
        }
    }
}

struct Plan {
    geo: Geometry,
    channels_last: bool,
    direction: Direction,
    /// NHWC backward-weight: tasks over the batch, each with a private [filter, C] sum.
    slots: usize,
}

impl Plan {
    /// NHWC keeps the filters transposed to [tap, C] so a tap's weights are contiguous, and
    /// backward-weight keeps per-task partial sums in the same order.
    fn workspace_elements(&self) -> usize {
        let per_copy = self.geo.filter_volume() * self.geo.c();
        match (self.channels_last, self.direction) {
            (false, _) => 0,
            (true, Direction::BackwardWeight) => per_copy * self.slots,
            (true, _) => per_copy,
        }
    }

    fn transpose_filters(&self, w: &[f32], wt: &mut [f32]) {
        let (c, f) = (self.geo.c(), self.geo.filter_volume());
        for ch in 0..c {
            for t in 0..f {
                wt[t * c + ch] = w[ch * f + t];
            }
        }
    }

    /// NCHW: for channel plane pair (input plane, output plane) of one (image, channel), visit
    /// every (tap weight index, input row start, output row start, valid output columns).
    fn for_each_row_pair(&self, mut visit: impl FnMut(usize, [usize; 3], usize, std::ops::Range<usize>)) {
        let geo = &self.geo;
        for (t, tap) in positions(geo.filter).enumerate() {
            let ow = geo.valid_outputs(2, tap[2]);
            if ow.is_empty() {
                continue;
            }
            for od in 0..geo.output[0] {
                let Some(id) = geo.input_coord(0, od, tap[0]) else { continue };
                for oh in 0..geo.output[1] {
                    let Some(ih) = geo.input_coord(1, oh, tap[1]) else { continue };
                    visit(t, [id, ih, tap[2]], (od * geo.output[1] + oh) * geo.output[2], ow.clone());
                }
            }
        }
    }

    /// NHWC forward and backward-data: every output vector (all channels of one position) is
    /// the sum over taps of a source vector times that tap's per-channel weights, with `source`
    /// mapping (destination position, tap) to the source position it reads, if any.
    #[allow(clippy::too_many_arguments)]
    fn gather_channels_last(
        &self,
        src: &[f32],
        src_strides: &Strides,
        w: &[f32],
        dst: &mut [f32],
        dst_extent: [usize; 3],
        ws: &mut [f32],
        source: impl Fn([usize; 3], [usize; 3]) -> Option<[usize; 3]> + Sync,
    ) {
        let geo = &self.geo;
        let c = geo.c();
        let wt = &mut ws[..geo.filter_volume() * c];
        self.transpose_filters(w, wt);
        let wt = &*wt;
        let [d0, d1, d2] = dst_extent;
        dst.par_chunks_mut(d2 * c).enumerate().for_each(|(row, out)| {
            let (n, a, b) = (row / (d0 * d1), row / d1 % d0, row % d1);
            for col in 0..d2 {
                let acc = &mut out[col * c..(col + 1) * c];
                for (t, tap) in positions(geo.filter).enumerate() {
                    if let Some(pos) = source([a, b, col], tap) {
                        let from = &src[src_strides.offset(n, 0, pos)..][..c];
                        for ((d, s), wv) in acc.iter_mut().zip(from).zip(&wt[t * c..(t + 1) * c]) {
                            *d += wv * s;
                        }
                    }
                }
            }
        });
    }

    /// Input column read by output column `o` through the tap whose W index is `fx`.
    #[inline]
    fn input_col(&self, o: usize, fx: usize) -> usize {
        o * self.geo.stride[2] + fx * self.geo.dilation[2] - self.geo.pad[2]
    }

    fn input_row_start(&self, i: [usize; 3]) -> usize {
        (i[0] * self.geo.input[1] + i[1]) * self.geo.input[2]
    }
}

impl HostKernel for Plan {
    fn forward(&self, x: &[f32], w: &[f32], y: &mut [f32], ws: &mut [f32]) {
        let geo = &self.geo;
        let c = geo.c();
        if !self.channels_last {
            let (iv, ov, fv) = (geo.input_volume(), geo.output_volume(), geo.filter_volume());
            y.par_chunks_mut(ov).enumerate().for_each(|(plane, out)| {
                let input = &x[plane * iv..(plane + 1) * iv];
                let filt = &w[(plane % c) * fv..][..fv];
                self.for_each_row_pair(|t, i, o_row, ow| {
                    let in_row = &input[self.input_row_start(i)..];
                    let wv = filt[t];
                    if geo.stride[2] == 1 {
                        let start = self.input_col(ow.start, i[2]);
                        let src = &in_row[start..start + ow.len()];
                        for (d, s) in out[o_row + ow.start..o_row + ow.end].iter_mut().zip(src) {
                            *d += wv * s;
                        }
                    } else {
                        for o in ow {
                            out[o_row + o] += wv * in_row[self.input_col(o, i[2])];
                        }
                    }
                });
            });
            return;
        }
        self.gather_channels_last(x, &geo.x, w, y, geo.output, ws, |o, tap| geo.input_pos(o, tap));
    }

    fn backward_data(&self, dy: &[f32], w: &[f32], dx: &mut [f32], ws: &mut [f32]) {
        let geo = &self.geo;
        let c = geo.c();
        if !self.channels_last {
            let (iv, ov, fv) = (geo.input_volume(), geo.output_volume(), geo.filter_volume());
            dx.par_chunks_mut(iv).enumerate().for_each(|(plane, grad_in)| {
                let grad_out = &dy[plane * ov..(plane + 1) * ov];
                let filt = &w[(plane % c) * fv..][..fv];
                self.for_each_row_pair(|t, i, o_row, ow| {
                    let row_start = self.input_row_start(i);
                    let wv = filt[t];
                    for o in ow {
                        grad_in[row_start + self.input_col(o, i[2])] += wv * grad_out[o_row + o];
                    }
                });
            });
            return;
        }
        self.gather_channels_last(dy, &geo.y, w, dx, geo.input, ws, |i, tap| geo.output_pos(i, tap));
    }

    fn backward_weight(&self, x: &[f32], dy: &[f32], dw: &mut [f32], ws: &mut [f32]) {
        let geo = &self.geo;
        let (c, fv) = (geo.c(), geo.filter_volume());
        if !self.channels_last {
            let (iv, ov) = (geo.input_volume(), geo.output_volume());
            dw.par_chunks_mut(fv).enumerate().for_each(|(ch, grad_w)| {
                for n in 0..geo.n {
                    let plane = n * c + ch;
                    let input = &x[plane * iv..(plane + 1) * iv];
                    let grad_out = &dy[plane * ov..(plane + 1) * ov];
                    self.for_each_row_pair(|t, i, o_row, ow| {
                        let in_row = &input[self.input_row_start(i)..];
                        let mut sum = 0.0f32;
                        for o in ow {
                            sum += in_row[self.input_col(o, i[2])] * grad_out[o_row + o];
                        }
                        grad_w[t] += sum;
                    });
                }
            });
            return;
        }
        // Per task: sums over its images in [tap, C] order, then one reduction into dw.
        let shared = SharedMut::new(ws);
        partition(geo.n, self.slots).into_par_iter().enumerate().for_each(|(slot, images)| {
            // SAFETY: slot `slot` owns its own [tap, C] block.
            let acc = unsafe { shared.slice(slot * fv * c, fv * c) };
            acc.fill(0.0);
            for n in images {
                for o in positions(geo.output) {
                    let grad_out = &dy[geo.y.offset(n, 0, o)..][..c];
                    for (t, tap) in positions(geo.filter).enumerate() {
                        if let Some(i) = geo.input_pos(o, tap) {
                            let src = &x[geo.x.offset(n, 0, i)..][..c];
                            for ((a, s), g) in acc[t * c..(t + 1) * c].iter_mut().zip(src).zip(grad_out) {
                                *a += s * g;
                            }
                        }
                    }
                }
            }
        });
        let partials = &*ws;
        dw.par_chunks_mut(fv).enumerate().for_each(|(ch, grad_w)| {
            for (t, slot_sum) in grad_w.iter_mut().enumerate() {
                *slot_sum = (0..self.slots).map(|s| partials[s * fv * c + t * c + ch]).sum();
            }
        });
    }
}
