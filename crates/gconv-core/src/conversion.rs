//! Converting an activation tensor between the formats (data type, layout) of two network
//! layers: what a network pays where neighbouring layers run in different formats. The host
//! implementation here is the reference every backend's conversion is checked against.

use std::fmt;

use rayon::prelude::*;

use crate::error::{GconvError, Result};
use crate::problem::{DataType, Layout};
use crate::tensor::Tensor;

/// How a layer stores its activations.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Format {
    pub dtype: DataType,
    pub layout: Layout,
}

impl fmt::Display for Format {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.dtype, self.layout.name(2))
    }
}

/// One activation tensor (N images of C channels over `spatial`) converted from one format to
/// another.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Conversion {
    pub n: u32,
    pub c: u32,
    pub spatial: Vec<u32>,
    pub from: Format,
    pub to: Format,
}

impl Conversion {
    pub fn elements(&self) -> u64 {
        u64::from(self.n) * u64::from(self.c) * self.pixels()
    }

    /// Elements of one channel of one image.
    pub fn pixels(&self) -> u64 {
        self.spatial.iter().map(|&s| u64::from(s)).product()
    }

    /// Bytes read and written.
    pub fn bytes(&self) -> u64 {
        self.elements() * (self.from.dtype.size_bytes() + self.to.dtype.size_bytes()) as u64
    }

    /// Whether the data must move at all: TF32 is stored as fp32, so fp32 and tf32 layers of
    /// one layout share their tensors as they are.
    pub fn is_noop(&self) -> bool {
        self.from.dtype.storage() == self.to.dtype.storage() && self.from.layout == self.to.layout
    }

    /// Where element `i` of the destination is read in the source.
    pub fn source_index(&self, i: u64) -> u64 {
        let (c, pixels) = (u64::from(self.c), self.pixels());
        let (image, channel, pixel) = match self.to.layout {
            Layout::Nchw => (i / (c * pixels), i / pixels % c, i % pixels),
            Layout::Nhwc => (i / (c * pixels), i % c, i / c % pixels),
        };
        match self.from.layout {
            Layout::Nchw => (image * c + channel) * pixels + pixel,
            Layout::Nhwc => (image * pixels + pixel) * c + channel,
        }
    }

    pub fn check_input(&self, input: &Tensor) -> Result<()> {
        if input.dtype() != self.from.dtype.storage() || input.len() as u64 != self.elements() {
            return Err(GconvError::TensorMismatch(format!(
                "a conversion from {} of {} elements got a {} tensor of {}",
                self.from,
                self.elements(),
                input.dtype(),
                input.len()
            )));
        }
        Ok(())
    }
}

/// The conversion on the host: the reference, and the CPU backend's own.
pub fn convert_on_host(c: &Conversion, input: &Tensor) -> Result<Tensor> {
    c.check_input(input)?;
    let source = input.to_f32();
    let mut out = Tensor::try_zeros(c.to.dtype.storage(), c.elements() as usize)?;
    out.write_f32_with(|dst| {
        dst.par_iter_mut().enumerate().for_each(|(i, v)| *v = source[c.source_index(i as u64) as usize])
    });
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nchw_to_nhwc_moves_channels_innermost_and_rounds_to_the_new_type() {
        let from = Format { dtype: DataType::F32, layout: Layout::Nchw };
        let to = Format { dtype: DataType::Bf16, layout: Layout::Nhwc };
        let c = Conversion { n: 2, c: 3, spatial: vec![2, 2], from, to };
        let values: Vec<f32> = (0..24).map(|i| i as f32 + 0.001).collect();
        let out = convert_on_host(&c, &Tensor::from_f32(DataType::F32, &values)).unwrap();
        assert_eq!(out.dtype(), DataType::Bf16);
        let out = out.to_f32();
        // Image 1, pixel (0, 1), channel 2 sits at ((1 * 4) + 1) * 3 + 2 in NHWC, and at
        // (1 * 3 + 2) * 4 + 1 = 21 in NCHW.
        assert_eq!(out[17], half::bf16::from_f32(21.001).to_f32());
        let back = Conversion { from: to, to: from, ..c.clone() };
        let round_trip = convert_on_host(&back, &Tensor::from_f32(DataType::Bf16, &out)).unwrap();
        assert_eq!(round_trip.to_f32()[21], out[17]);
        assert!(
            convert_on_host(&back, &Tensor::from_f32(DataType::F32, &values)).is_err(),
            "the input's type is checked"
        );
    }
}
