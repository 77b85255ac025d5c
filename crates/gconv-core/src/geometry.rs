//! A validated problem in index form: always three spatial dimensions (missing outer ones have
//! size 1) and the element strides of each tensor, so loops need not care about rank or layout.

use crate::problem::{ConvProblem, Layout};

/// Element strides of one tensor. For x and y the outer index is the batch image and `c` the
/// channel; for w the outer index is the output channel k and `c` the channel within the group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Strides {
    pub outer: usize,
    pub c: usize,
    pub spatial: [usize; 3],
}

impl Strides {
    /// Packed strides for a tensor of `outer` x `channels` x `spatial` in the given layout family.
    fn packed(layout: Layout, channels: usize, spatial: [usize; 3]) -> Self {
        let plane = spatial[1] * spatial[2];
        let volume = spatial[0] * plane;
        match layout {
            Layout::Nchw => Strides { outer: channels * volume, c: volume, spatial: [plane, spatial[2], 1] },
            Layout::Nhwc => {
                Strides { outer: channels * volume, c: 1, spatial: [plane * channels, spatial[2] * channels, channels] }
            }
        }
    }

    pub fn offset(&self, outer: usize, c: usize, pos: [usize; 3]) -> usize {
        outer * self.outer + c * self.c + pos[0] * self.spatial[0] + pos[1] * self.spatial[1] + pos[2] * self.spatial[2]
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Geometry {
    pub n: usize,
    pub g: usize,
    /// Input channels per group.
    pub cg: usize,
    /// Output channels per group.
    pub kg: usize,
    pub input: [usize; 3],
    pub filter: [usize; 3],
    pub output: [usize; 3],
    pub stride: [usize; 3],
    pub pad: [usize; 3],
    pub dilation: [usize; 3],
    pub x: Strides,
    pub w: Strides,
    pub y: Strides,
}

impl Geometry {
    /// The problem must have passed `validate()`.
    pub fn new(p: &ConvProblem) -> Self {
        let lead = 3 - p.rank();
        let mut input = [1; 3];
        let mut filter = [1; 3];
        let mut output = [1; 3];
        let mut stride = [1; 3];
        let mut pad = [0; 3];
        let mut dilation = [1; 3];
        for (i, d) in p.dims.iter().enumerate() {
            input[lead + i] = d.input as usize;
            filter[lead + i] = d.filter as usize;
            output[lead + i] = d.output() as usize;
            stride[lead + i] = d.stride as usize;
            pad[lead + i] = d.pad as usize;
            dilation[lead + i] = d.dilation as usize;
        }
        let (c, k, g) = (p.c as usize, p.k as usize, p.g as usize);
        Geometry {
            n: p.n as usize,
            g,
            cg: c / g,
            kg: k / g,
            input,
            filter,
            output,
            stride,
            pad,
            dilation,
            x: Strides::packed(p.layout, c, input),
            w: Strides::packed(p.layout, c / g, filter),
            y: Strides::packed(p.layout, k, output),
        }
    }

    pub fn c(&self) -> usize {
        self.g * self.cg
    }

    pub fn k(&self) -> usize {
        self.g * self.kg
    }

    pub fn input_volume(&self) -> usize {
        self.input.iter().product()
    }

    pub fn filter_volume(&self) -> usize {
        self.filter.iter().product()
    }

    pub fn output_volume(&self) -> usize {
        self.output.iter().product()
    }

    /// Input coordinate read by output coordinate `o` through filter tap `f` along dimension
    /// `dim`, or None where it falls into the padding.
    #[inline]
    pub fn input_coord(&self, dim: usize, o: usize, f: usize) -> Option<usize> {
        (o * self.stride[dim] + f * self.dilation[dim]).checked_sub(self.pad[dim]).filter(|&i| i < self.input[dim])
    }

    /// Output coordinate that reads input coordinate `i` through filter tap `f` along `dim`,
    /// if any: the inverse of [`Geometry::input_coord`], used by backward-data.
    #[inline]
    pub fn output_coord(&self, dim: usize, i: usize, f: usize) -> Option<usize> {
        let shifted = (i + self.pad[dim]).checked_sub(f * self.dilation[dim])?;
        if shifted % self.stride[dim] != 0 {
            return None;
        }
        Some(shifted / self.stride[dim]).filter(|&o| o < self.output[dim])
    }

    /// Input position read by output position `o` through filter tap `f`, if not padding.
    #[inline]
    pub fn input_pos(&self, o: [usize; 3], f: [usize; 3]) -> Option<[usize; 3]> {
        Some([self.input_coord(0, o[0], f[0])?, self.input_coord(1, o[1], f[1])?, self.input_coord(2, o[2], f[2])?])
    }

    /// Output position that reads input position `i` through filter tap `f`, if any.
    #[inline]
    pub fn output_pos(&self, i: [usize; 3], f: [usize; 3]) -> Option<[usize; 3]> {
        Some([self.output_coord(0, i[0], f[0])?, self.output_coord(1, i[1], f[1])?, self.output_coord(2, i[2], f[2])?])
    }

    /// The half-open range of output coordinates whose input coordinate through tap `f` is
    /// inside the input (not in the padding) along `dim`.
    pub fn valid_outputs(&self, dim: usize, f: usize) -> std::ops::Range<usize> {
        let (s, p, off) = (self.stride[dim], self.pad[dim], f * self.dilation[dim]);
        // o*s + off - p >= 0  <=>  o >= ceil((p - off) / s)
        let lo = p.saturating_sub(off).div_ceil(s);
        // o*s + off - p <= input - 1  <=>  o <= (input - 1 + p - off) / s
        let hi = match (self.input[dim] - 1 + p).checked_sub(off) {
            Some(v) => (v / s + 1).min(self.output[dim]),
            None => 0,
        };
        lo..hi.max(lo)
    }
}

/// Every position of a box, outermost dimension first.
pub fn positions(extent: [usize; 3]) -> impl Iterator<Item = [usize; 3]> {
    (0..extent[0]).flat_map(move |a| (0..extent[1]).flat_map(move |b| (0..extent[2]).map(move |c| [a, b, c])))
}
