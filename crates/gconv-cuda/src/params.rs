//! The kernel-side view of a problem: `ConvParams` in kernels/common.cuh.

use cudarc::driver::DeviceRepr;
use gconv_core::geometry::Strides;
use gconv_core::{ConvProblem, Geometry};

/// Field for field the `ConvParams` struct of kernels/common.cuh; passed by value.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ConvParams {
    pub n: i32,
    pub g: i32,
    pub cg: i32,
    pub kg: i32,
    pub input: [i32; 3],
    pub filter: [i32; 3],
    pub output: [i32; 3],
    pub stride: [i32; 3],
    pub pad: [i32; 3],
    pub dilation: [i32; 3],
    pub xs: [i32; 5],
    pub ws: [i32; 5],
    pub ys: [i32; 5],
}

// SAFETY: a plain #[repr(C)] struct of i32s, laid out like its C twin.
unsafe impl DeviceRepr for ConvParams {}

/// Every size fits in i32: `ConvProblem::validate` caps tensors below 2^31 elements.
fn i32s<const N: usize>(v: [usize; N]) -> [i32; N] {
    v.map(|x| x as i32)
}

fn strides(s: &Strides) -> [i32; 5] {
    i32s([s.outer, s.c, s.spatial[0], s.spatial[1], s.spatial[2]])
}

impl ConvParams {
    pub fn new(p: &ConvProblem) -> Self {
        let g = Geometry::new(p);
        ConvParams {
            n: g.n as i32,
            g: g.g as i32,
            cg: g.cg as i32,
            kg: g.kg as i32,
            input: i32s(g.input),
            filter: i32s(g.filter),
            output: i32s(g.output),
            stride: i32s(g.stride),
            pad: i32s(g.pad),
            dilation: i32s(g.dilation),
            xs: strides(&g.x),
            ws: strides(&g.w),
            ys: strides(&g.y),
        }
    }
}

/// Which filter tap a lowered product's tap t reads, per dimension f = origin + step x t (the
/// identity for a forward convolution; backward-data's phase taps, flipped), and the filter's
/// own extents: the `TapMap` of kernels/igemm_wgmma.cu; passed by value.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TapMap {
    pub origin: [i32; 3],
    pub step: [i32; 3],
    pub filter: [i32; 3],
}

// SAFETY: a plain #[repr(C)] struct of i32s, laid out like its C twin.
unsafe impl DeviceRepr for TapMap {}
