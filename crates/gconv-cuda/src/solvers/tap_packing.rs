//! Packing the taps along W into the channels (kernels/pack_taps.cu), for `cuda.igemm_wgmma`
//! on dense channels-last layers whose channels are too few for its TMA rows (16 bytes at the
//! least, and an RGB stem has 3 channels): x becomes x' with, for each output column, the FW
//! source columns it reads side by side (zero-padded to a multiple of 8 channels), the filter
//! becomes FD x FH x 1 taps over those channels, and the layer is a convolution of stride 1 and
//! no padding along W over x'. Forward runs it as it is; backward-weight computes the packed
//! filter's gradient and unpacks it; backward-data computes x''s gradient and sums each
//! source column's terms back (the columns of neighbouring outputs overlap where FW exceeds
//! the stride).

use cudarc::driver::CudaFunction;
use gconv_core::geometry::Geometry;
use gconv_core::{ConvProblem, DataType, Direction, Invoker, Layout, Result, SpatialDim};

use crate::launch::{self, Arg, Buffer};
use crate::{Cuda, CudaBuffers, CudaDevice, KernelSource};

const SOURCE: &str = include_str!("../kernels/pack_taps.cu");

/// The pack and unpack kernels' source.
pub(super) fn source(dtype: DataType) -> KernelSource {
    KernelSource::new("pack_taps.cu", SOURCE, dtype)
}
const THREADS: u32 = 256;
/// Packed regions in the workspace start at this alignment (TMA's 16 bytes, and more).
const ALIGN: u64 = 256;

/// One tensor's packing: `rows` rows of `width` columns of `channels` into rows of `out`
/// columns of `packed` channels (see pack_taps.cu).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct TapPacking {
    rows: u64,
    width: u32,
    out: u32,
    channels: u32,
    taps: u32,
    stride: u32,
    pad: u32,
    packed: u32,
}

impl TapPacking {
    fn packed_elements(&self) -> u64 {
        self.rows * u64::from(self.out) * u64::from(self.packed)
    }

    fn args(&self) -> [Arg<'static>; 8] {
        [
            self.rows as i32,
            self.width as i32,
            self.out as i32,
            self.channels as i32,
            self.taps as i32,
            self.stride as i32,
            self.pad as i32,
            self.packed as i32,
        ]
        .map(Arg::Int)
    }

    /// pack_taps on the CPU.
    #[cfg(test)]
    pub(super) fn pack(&self, src: &[f32]) -> Vec<f32> {
        let (width, out, c, packed) = (self.width as i64, self.out as i64, self.channels as i64, self.packed as i64);
        (0..self.packed_elements() as i64)
            .map(|i| {
                let (channel, rest) = (i % packed, i / packed);
                let (f, ch, wo, row) = (channel / c, channel % c, rest % out, rest / out);
                let w = wo * self.stride as i64 - self.pad as i64 + f;
                if f < self.taps as i64 && (0..width).contains(&w) {
                    src[((row * width + w) * c + ch) as usize]
                } else {
                    0.0
                }
            })
            .collect()
    }

    /// unpack_taps on the CPU.
    #[cfg(test)]
    pub(super) fn unpack(&self, packed: &[f32]) -> Vec<f64> {
        let (width, out, c, stride) = (self.width as i64, self.out as i64, self.channels as i64, self.stride as i64);
        (0..(self.rows * u64::from(self.width) * u64::from(self.channels)) as i64)
            .map(|i| {
                let (ch, w, row) = (i % c, i / c % width, i / c / width);
                (0..self.taps as i64)
                    .map(|f| w + self.pad as i64 - f)
                    .filter(|&t| t >= 0 && t % stride == 0 && t / stride < out)
                    .map(|t| {
                        let f = w + self.pad as i64 - t;
                        f64::from(packed[((row * out + t / stride) * self.packed as i64 + f * c + ch) as usize])
                    })
                    .sum()
            })
            .collect()
    }
}

/// How a layer runs packed: the layer the products run, and its activation's and filter's
/// packings.
#[derive(Debug, Clone)]
pub(super) struct Packing {
    pub packed: ConvProblem,
    pub activation: TapPacking,
    pub filter: TapPacking,
}

impl Packing {
    /// The packing of `p`, where it is dense, channels-last, with fewer than a multiple of 8
    /// channels, no dilation along W, its taps x channels along W in one TMA row of `row`
    /// elements, and output channels a multiple of 8.
    pub fn of(p: &ConvProblem, row: u32) -> Option<Packing> {
        let last = p.dims.last()?;
        let packed_channels = (last.filter * p.c).next_multiple_of(8);
        let fits = p.g == 1
            && p.layout == Layout::Nhwc
            && !p.c.is_multiple_of(8)
            && p.k.is_multiple_of(8)
            && last.dilation == 1
            && packed_channels <= row;
        if !fits {
            return None;
        }
        let geo = Geometry::new(p);
        let out = geo.output[2] as u32;
        let mut packed = p.clone();
        packed.c = packed_channels;
        *packed.dims.last_mut()? = SpatialDim { input: out, filter: 1, stride: 1, pad: 0, dilation: 1 };
        // Rows: everything but W (images x depth x height of x; K x FD x FH of the filter).
        let outer = |extents: [usize; 3]| (extents[0] * extents[1]) as u64;
        let activation = TapPacking {
            rows: u64::from(p.n) * outer(geo.input),
            width: geo.input[2] as u32,
            out,
            channels: p.c,
            taps: last.filter,
            stride: last.stride,
            pad: last.pad,
            packed: packed_channels,
        };
        let filter = TapPacking {
            rows: u64::from(p.k) * outer(geo.filter),
            width: last.filter,
            out: 1,
            stride: 1,
            pad: 0,
            ..activation
        };
        Some(Packing { packed, activation, filter })
    }

    /// The workspace: the packed layer's own, then the packed activation, then the filter.
    fn regions(&self, inner: u64) -> [u64; 3] {
        let elem = self.packed.dtype.size_bytes() as u64;
        let activation = inner.next_multiple_of(ALIGN);
        let filter = activation + (self.activation.packed_elements() * elem).next_multiple_of(ALIGN);
        [activation, filter, filter + self.filter.packed_elements() * elem]
    }

    pub fn workspace_bytes(&self, inner: u64) -> u64 {
        self.regions(inner)[2]
    }

    /// The packed layer's invoker wrapped in the packing around it.
    pub fn invoker(
        self,
        device: &CudaDevice,
        dtype: DataType,
        inner: Box<dyn Invoker<Cuda>>,
        inner_workspace: u64,
    ) -> Result<PackedInvoker> {
        let source = source(dtype);
        let [pack, unpack] = ["pack_taps", "unpack_taps"].map(|name| device.function(&source, name));
        let blocks = device.sm_count * 8;
        Ok(PackedInvoker { packing: self, pack: pack?, unpack: unpack?, inner, inner_workspace, blocks })
    }
}

pub(super) struct PackedInvoker {
    packing: Packing,
    pack: CudaFunction,
    unpack: CudaFunction,
    inner: Box<dyn Invoker<Cuda>>,
    inner_workspace: u64,
    blocks: u32,
}

impl PackedInvoker {
    fn launch(
        &self,
        b: &CudaBuffers<'_>,
        function: &CudaFunction,
        packing: &TapPacking,
        from: Buffer,
        to: Buffer,
    ) -> Result<()> {
        let mut args = vec![Arg::Buffer(from), Arg::Buffer(to)];
        args.extend(packing.args());
        launch::kernel(b, function, launch::flat(self.blocks, THREADS), &args, "launch cuda.igemm_wgmma's tap packing")
    }
}

impl Invoker<Cuda> for PackedInvoker {
    fn run(&self, b: &mut CudaBuffers<'_>) -> Result<()> {
        let Packing { packed, activation, filter } = &self.packing;
        let [activation_at, filter_at, _] = self.packing.regions(self.inner_workspace);
        let inner_workspace = Buffer { ptr: b.workspace.ptr, bytes: self.inner_workspace.min(b.workspace.bytes) };
        let (x, w) = (b.workspace.from_byte(activation_at), b.workspace.from_byte(filter_at));
        match packed.direction {
            Direction::Forward => {
                self.launch(b, &self.pack, activation, b.x, x)?;
                self.launch(b, &self.pack, filter, b.w, w)?;
                self.inner.run(&mut CudaBuffers::covering(
                    packed,
                    self.inner_workspace,
                    [x, w, b.y, inner_workspace],
                    b.stream(),
                )?)
            }
            Direction::BackwardWeight => {
                self.launch(b, &self.pack, activation, b.x, x)?;
                self.inner.run(&mut CudaBuffers::covering(
                    packed,
                    self.inner_workspace,
                    [x, w, b.y, inner_workspace],
                    b.stream(),
                )?)?;
                self.launch(b, &self.unpack, filter, w, b.w)
            }
            Direction::BackwardData => {
                self.launch(b, &self.pack, filter, b.w, w)?;
                self.inner.run(&mut CudaBuffers::covering(
                    packed,
                    self.inner_workspace,
                    [x, w, b.y, inner_workspace],
                    b.stream(),
                )?)?;
                self.launch(b, &self.unpack, activation, x, b.x)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use gconv_core::reference::reference;
    use gconv_core::testing::small_problem;
    use gconv_core::{ConvTensors, Tensor};
    use proptest::prelude::*;

    use super::*;

    proptest! {
        #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]
        /// The packed layer, between the kernels' packings as the CPU twins do them, computes
        /// the layer's result in every direction.
        #[test]
        fn the_packed_layer_is_the_layer(
            p in small_problem().prop_filter_map("a layer that packs", |mut p| {
                p.layout = Layout::Nhwc;
                p.g = 1;
                p.k = p.k.next_multiple_of(8);
                Packing::of(&p, 64).map(|_| p)
            }),
        ) {
            let packing = Packing::of(&p, 64).unwrap();
            let t = ConvTensors::random(&p, 3);
            let (x, w, y) = (t.x.to_f32(), t.w.to_f32(), t.y.to_f32());
            let q = &packing.packed;
            let packed = |values: Vec<f32>| Tensor::from_f32(DataType::F32, &values);
            let inputs = ConvTensors {
                x: packed(packing.activation.pack(&x)),
                w: packed(packing.filter.pack(&w)),
                y: packed(y.to_vec()),
            };
            let result = reference(q, &inputs);
            let got = match p.direction {
                Direction::Forward => result,
                Direction::BackwardWeight => packing.filter.unpack(&result.iter().map(|&v| v as f32).collect::<Vec<_>>()),
                Direction::BackwardData => packing.activation.unpack(&result.iter().map(|&v| v as f32).collect::<Vec<_>>()),
            };
            let exact = reference(&p, &t);
            prop_assert_eq!(got.len(), exact.len());
            let scale = exact.iter().fold(1.0f64, |m, r| m.max(r.abs()));
            let worst = got.iter().zip(&exact).map(|(g, r)| (g - r).abs() / scale).fold(0.0, f64::max);
            prop_assert!(worst < 1e-5, "{} packed as {}: off by {worst:e}", p.key(), q.key());
        }
    }
}
