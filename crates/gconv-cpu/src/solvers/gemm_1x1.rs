//! `cpu.gemm_1x1`: a 1x1 convolution with unit stride and no padding is a GEMM per group, with
//! no unfolding. In NHWC all images are one matrix (one GEMM per group); in NCHW each image is.

use gconv_core::{Config, ConvProblem, Direction, Geometry, Invoker, Layout, NotApplicable, Result, Solve, Solver};
use rayon::prelude::*;

use super::partition;
use crate::matmul::{gemm, SharedMut, Span, View};
use crate::{Host, HostInvoker, HostKernel};

pub struct Gemm1x1 {
    pub threads: usize,
}

impl Solver for Gemm1x1 {
    fn id(&self) -> &'static str {
        "cpu.gemm_1x1"
    }

    fn applicable(&self, p: &ConvProblem) -> Result<(), NotApplicable> {
        gconv_core::applicability::plain_1x1(p)
    }
}

impl Solve<Host> for Gemm1x1 {
    fn solution(&self, p: &ConvProblem, _config: &Config) -> Result<Box<dyn Invoker<Host>>> {
        let geo = Geometry::new(p);
        let channels_last = p.layout == Layout::Nhwc;
        // NHWC: one item per group spanning the whole batch; NCHW: one per (image, group).
        let images_per_item = if channels_last { geo.n } else { 1 };
        let items = match p.direction {
            Direction::BackwardWeight => geo.g,
            _ => geo.g * geo.n / images_per_item,
        };
        let slots = items.clamp(1, self.threads.max(1));
        let kernel = Gemm1x1Kernel { images_per_item, slots, gemm_threads: (self.threads / slots).max(1), geo };
        Ok(HostInvoker::boxed(p, 0, kernel))
    }
}

struct Gemm1x1Kernel {
    geo: Geometry,
    images_per_item: usize,
    slots: usize,
    gemm_threads: usize,
}

impl Gemm1x1Kernel {
    fn items_per_group(&self) -> usize {
        self.geo.n / self.images_per_item
    }

    /// Channels [g*per_group, (g+1)*per_group) of item `i` of x- or y-shaped data, as
    /// [channels, positions]. `strides` is x's or y's.
    fn data_span(&self, strides: &gconv_core::geometry::Strides, per_group: usize, i: usize, g: usize) -> Span {
        let cols = self.images_per_item * self.geo.output_volume();
        let n = i * self.images_per_item;
        Span {
            offset: strides.offset(n, g * per_group, [0; 3]),
            rows: per_group,
            cols,
            rs: strides.c,
            cs: strides.spatial[2],
        }
    }

    fn x_span(&self, i: usize, g: usize) -> Span {
        self.data_span(&self.geo.x, self.geo.cg, i, g)
    }

    fn y_span(&self, i: usize, g: usize) -> Span {
        self.data_span(&self.geo.y, self.geo.kg, i, g)
    }

    /// Group g's weights as [K/G, C/G].
    fn w_span(&self, g: usize) -> Span {
        let geo = &self.geo;
        Span { offset: g * geo.kg * geo.cg, rows: geo.kg, cols: geo.cg, rs: geo.cg, cs: 1 }
    }

    /// Runs `body(item, group)` over every (item, group) pair, `slots` tasks at a time.
    fn for_each_item(&self, body: impl Fn(usize, usize) + Sync) {
        let per_group = self.items_per_group();
        partition(per_group * self.geo.g, self.slots).into_par_iter().for_each(|range| {
            for item in range {
                body(item % per_group, item / per_group);
            }
        });
    }
}

impl HostKernel for Gemm1x1Kernel {
    fn forward(&self, x: &[f32], w: &[f32], y: &mut [f32], _ws: &mut [f32]) {
        let y = SharedMut::new(y);
        self.for_each_item(|i, g| {
            let (dst, lhs, rhs) =
                (View::at(y, self.y_span(i, g)), View::of(w, self.w_span(g)), View::of(x, self.x_span(i, g)));
            // SAFETY: each (item, group) writes its own part of y.
            unsafe { gemm(dst, lhs, rhs, false, self.gemm_threads) };
        });
    }

    fn backward_data(&self, dy: &[f32], w: &[f32], dx: &mut [f32], _ws: &mut [f32]) {
        let dx = SharedMut::new(dx);
        self.for_each_item(|i, g| {
            let (dst, lhs, rhs) =
                (View::at(dx, self.x_span(i, g)), View::of(w, self.w_span(g)).t(), View::of(dy, self.y_span(i, g)));
            // SAFETY: each (item, group) writes its own part of dx.
            unsafe { gemm(dst, lhs, rhs, false, self.gemm_threads) };
        });
    }

    fn backward_weight(&self, x: &[f32], dy: &[f32], dw: &mut [f32], _ws: &mut [f32]) {
        let dw = SharedMut::new(dw);
        partition(self.geo.g, self.slots).into_par_iter().for_each(|groups| {
            for g in groups {
                let dst = View::at(dw, self.w_span(g));
                for i in 0..self.items_per_group() {
                    let (lhs, rhs) = (View::of(dy, self.y_span(i, g)), View::of(x, self.x_span(i, g)).t());
                    // SAFETY: this task owns group g of dw.
                    unsafe { gemm(dst, lhs, rhs, true, self.gemm_threads) };
                }
            }
        });
    }
}
