//! The kernel-side view of a problem: `ConvParams` in kernels/common.cuh.

use cudarc::driver::DeviceRepr;
use gconv_core::geometry::Strides;
use gconv_core::{ConvProblem, Geometry};

use crate::tma::TensorMap;

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
/// own extents: the `TapMap` of kernels/igemm_wgmma/products.cuh; passed by value.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TapMap {
    pub origin: [i32; 3],
    pub step: [i32; 3],
    pub filter: [i32; 3],
}

// SAFETY: a plain #[repr(C)] struct of i32s, laid out like its C twin.
unsafe impl DeviceRepr for TapMap {}

/// How igemm_wgmma's producer loads a block's filter rows: `rows` at a time, and for a layer
/// whose groups run blocked (see group_packing), read from w itself, `group_rows` output
/// channels of `channels` each a group (1 and 0 where unblocked), w's address for the kernels
/// whose helper warps write the filter (FILL_FILTER): the `FilterBlocks` of
/// kernels/igemm_wgmma/products.cuh; passed by value.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FilterBlocks {
    pub rows: u32,
    pub group_rows: i32,
    pub channels: i32,
    pub w: u64,
}

// SAFETY: a plain #[repr(C)] struct of integers, laid out like its C twin (a device pointer
// for w).
unsafe impl DeviceRepr for FilterBlocks {}

/// The products igemm_wgmma runs in one launch (forward's one, or backward-data's sub-pixel
/// phases): the `Products` struct of kernels/igemm_wgmma/products.cuh, passed by value as a grid
/// constant (its tensor maps must lie in the kernel's parameters). A slot past `count` repeats
/// the first product.
#[repr(C, align(128))]
pub struct Products {
    pub src: [TensorMap; MAX_PRODUCTS],
    pub filter: [TensorMap; MAX_PRODUCTS],
    pub params: [ConvParams; MAX_PRODUCTS],
    pub taps: [TapMap; MAX_PRODUCTS],
    /// Where each product's first destination pixel lies in the destination, in elements.
    pub dst_offset: [i64; MAX_PRODUCTS],
    pub count: i32,
}

/// Products per launch: 2D and 3D phases at stride 2 in one.
pub const MAX_PRODUCTS: usize = 8;

// SAFETY: #[repr(C)] fields laid out like the C struct's (tensor maps 128-byte aligned first,
// then i32s and i64s at their natural alignment; checked by a test).
unsafe impl DeviceRepr for Products {}

/// One product's part of a launch.
pub struct ProductArgs {
    pub src: TensorMap,
    pub filter: TensorMap,
    pub params: ConvParams,
    pub taps: TapMap,
    pub dst_offset: i64,
}

impl Products {
    /// The launch's products: one to MAX_PRODUCTS of them.
    pub fn new(products: &[ProductArgs]) -> Option<Self> {
        if products.is_empty() || products.len() > MAX_PRODUCTS {
            return None;
        }
        let at = |i: usize| products.get(i).unwrap_or(&products[0]);
        Some(Products {
            src: std::array::from_fn(|i| at(i).src),
            filter: std::array::from_fn(|i| at(i).filter),
            params: std::array::from_fn(|i| at(i).params),
            taps: std::array::from_fn(|i| at(i).taps),
            dst_offset: std::array::from_fn(|i| at(i).dst_offset),
            count: products.len() as i32,
        })
    }
}

#[cfg(test)]
mod tests {
    use std::mem::{offset_of, size_of};

    use super::*;

    #[test]
    fn products_lie_as_the_kernels_struct_does() {
        // C: 128-byte tensor maps, ConvParams of 37 ints, TapMap of 9, then the i64 offsets at
        // 8-byte alignment, the count, and padding to the maps' 128-byte alignment.
        assert_eq!(size_of::<ConvParams>(), 37 * 4);
        assert_eq!(size_of::<TapMap>(), 9 * 4);
        assert_eq!(offset_of!(Products, filter), 128 * MAX_PRODUCTS);
        assert_eq!(offset_of!(Products, params), 256 * MAX_PRODUCTS);
        assert_eq!(offset_of!(Products, taps), (256 + 148) * MAX_PRODUCTS);
        assert_eq!(offset_of!(Products, dst_offset), (256 + 148 + 36) * MAX_PRODUCTS);
        assert_eq!(offset_of!(Products, count), (256 + 148 + 36 + 8) * MAX_PRODUCTS);
        assert_eq!(size_of::<Products>(), ((256 + 148 + 36 + 8) * MAX_PRODUCTS + 4).next_multiple_of(128));
    }
}
