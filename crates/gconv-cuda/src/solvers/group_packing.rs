//! Packing a grouped layer's groups into blocks (kernels/pack_groups.cu), for `cuda.igemm_wgmma`
//! on channels-last layers whose groups have fewer input channels than its TMA rows (64 16-bit
//! or 32 tf32 elements), such as ResNeXt's 32 groups of 4 to 32 channels: `blocked` consecutive
//! groups become one of a row's channels whose filter is block-diagonal (an output channel's
//! taps hold its own group's channels and zeros in the others'). The products then read whole
//! rows per tap; forward's and backward-data's MMAs skip the zeros where groups are square
//! (`diagonal`), backward-weight's multiply them too (`blocked` times its MMA work, bounded by
//! MAX_BLOCKED). Skipping them pays only where the source is staged with its halo: with
//! im2col's loads ResNeXt's layers ran no faster on the H100.
//! Forward and backward-data read the blocked filter from w itself where two groups make a
//! block (the kernel's FilterBlocks: boxes of one group's rows, shifted so that the other
//! group's columns fall outside w's rows and load as zeros); 16-bit forward with more groups a
//! block, and backward-data where the tile holds the filter's stages across its units, have the
//! kernel's helper warps write it from w into the stages (FILL_FILTER); else they run on it
//! packed into the workspace by a kernel before them (3.5-4.4 us under Nsight Compute on the
//! H100, beside ResNeXt layers that take cuDNN 9-50 us). Backward-weight
//! computes the blocked filter's gradient and keeps only its diagonal blocks, which the
//! products' epilogue stores straight into the user's filter.

use cudarc::driver::CudaFunction;
use gconv_core::{ConvProblem, DataType, Direction, Invoker, Layout, Result};

use crate::launch::{self, Arg, Buffer};
use crate::{Cuda, CudaBuffers, CudaDevice, KernelSource};

const SOURCE: &str = include_str!("../kernels/pack_groups.cu");
const THREADS: u32 = 256;
/// The blocked filter starts at this alignment in the workspace (TMA's 16 bytes, and more).
const ALIGN: u64 = 256;
/// The most groups blocked into one: the MMAs' work grows by as much.
const MAX_BLOCKED: u32 = 16;
/// The fewest groups in a block whose filter the products' helper warps write (see
/// fills_filter).
const FILLED_FROM: u32 = 4;

/// The pack kernel's source.
pub(super) fn source(dtype: DataType) -> KernelSource {
    KernelSource::new("pack_groups.cu", SOURCE, dtype)
}

/// How a grouped layer runs blocked: the layer the products run (`blocked` times fewer groups,
/// as many channels), and the filter's shape: `rows` (K x taps) of `cg` channels, in groups
/// of `kg` output channels.
#[derive(Debug, Clone)]
pub(super) struct GroupPacking {
    pub packed: ConvProblem,
    blocked: u32,
    rows: u64,
    cg: u32,
    kg: u32,
}

impl GroupPacking {
    /// The blocking of `p`, where it is grouped, channels-last, with fewer input channels per
    /// group than a TMA row of `row` elements that a whole number of its groups fill (at most
    /// MAX_BLOCKED, dividing the groups). Backward-weight too, since its epilogue keeps the
    /// diagonal blocks: ResNeXt's 32 groups of 32 channels, two to a block, 14.7 -> 11.9 us
    /// (14x14 at stride 2) and 14.2 -> 11.7 (7x7) on the H100, against a row tile per group.
    pub fn of(p: &ConvProblem, row: u32) -> Option<GroupPacking> {
        let cg = p.c_per_group();
        let blocked = row.checked_div(cg)?;
        let fits = p.g > 1
            && p.layout == Layout::Nhwc
            && cg < row
            && row.is_multiple_of(cg)
            && (2..=MAX_BLOCKED).contains(&blocked)
            && p.g.is_multiple_of(blocked);
        let rows = p.weight_elements() / u64::from(cg);
        // The kernels index the blocked filter in 32 bits.
        if !fits || rows * u64::from(row) > i32::MAX as u64 {
            return None;
        }
        let packed = ConvProblem { g: p.g / blocked, ..p.clone() };
        Some(GroupPacking { packed, blocked, rows, cg, kg: p.k / p.g })
    }

    /// The groups blocked into one.
    pub fn blocked(&self) -> u32 {
        self.blocked
    }

    /// Whether the products read the blocked filter from w itself (forward; backward-data in
    /// 16-bit types, which reads w in place): by TMA boxes where two groups make a block, so
    /// that a block of filter rows takes two boxes (on the H100, ResNeXt's layers of 32
    /// channels a group ran 0.85-0.91x the time of the packed filter, but those of 16 and 8 as
    /// four and eight boxes of 16 and 8 rows 1.01-1.08x and 1.13-1.61x), or written by the
    /// kernel's helper warps (`fills_filter`; `held`: the products' tile holds the filter's
    /// stages across units).
    pub fn reads_user_filter(&self, held: bool) -> bool {
        let p = &self.packed;
        let reads_w =
            p.direction == Direction::Forward || p.direction == Direction::BackwardData && p.dtype != DataType::Tf32;
        reads_w && self.blocked == 2 || self.fills_filter(held)
    }

    /// Whether the products' helper warps write the blocked filter from w into their stages
    /// (the kernel's FILL_FILTER: 16-bit types, from four groups a block on; forward, and
    /// backward-data where the tile holds the filter's stages across units, `held`). On the
    /// H100, ResNeXt's forward layers of 16, 8 and 4 channels a group ran 0.93-0.99x the time
    /// of the packed filter; their backward-data 0.99-1.04x where every unit writes it again.
    pub fn fills_filter(&self, held: bool) -> bool {
        let p = &self.packed;
        let direction = p.direction == Direction::Forward || p.direction == Direction::BackwardData && held;
        direction && p.dtype != DataType::Tf32 && self.blocked >= FILLED_FROM
    }

    /// The channels of a group whose block-diagonal filter tile forward's and backward-data's
    /// MMAs multiply only where it is not zero (the kernel's DIAGONAL: 16-bit types, as many
    /// output as input channels a group), or None: they multiply the whole tile.
    pub fn diagonal(&self) -> Option<u32> {
        let p = &self.packed;
        (self.cg == self.kg && p.dtype != DataType::Tf32 && p.direction != Direction::BackwardWeight).then_some(self.cg)
    }

    /// The filter's taps (its rows are K x taps).
    fn taps(&self) -> u64 {
        self.rows / u64::from(self.packed.k)
    }

    fn blocked_elements(&self) -> u64 {
        self.rows * u64::from(self.blocked * self.cg)
    }

    fn args(&self) -> [Arg<'static>; 5] {
        let taps = self.taps() as i32;
        [self.rows as i32, taps, self.cg as i32, self.kg as i32, self.blocked as i32].map(Arg::Int)
    }

    /// pack_groups on the CPU.
    #[cfg(test)]
    fn pack(&self, w: &[f32]) -> Vec<f32> {
        let (taps, cg, kg, blocked) = (self.taps(), u64::from(self.cg), u64::from(self.kg), u64::from(self.blocked));
        (0..self.blocked_elements())
            .map(|i| {
                let (r, column) = (i / (blocked * cg), i % (blocked * cg));
                let j = r / taps % (blocked * kg) / kg;
                if column / cg == j {
                    w[(r * cg + column % cg) as usize]
                } else {
                    0.0
                }
            })
            .collect()
    }

    /// The blocked gradient's diagonal blocks, as backward-weight's epilogue keeps them.
    #[cfg(test)]
    fn diagonal_blocks(&self, packed: &[f64]) -> Vec<f64> {
        let (taps, cg, kg, blocked) = (self.taps(), u64::from(self.cg), u64::from(self.kg), u64::from(self.blocked));
        (0..self.rows * cg)
            .map(|i| {
                let r = i / cg;
                let j = r / taps % (blocked * kg) / kg;
                packed[(r * blocked * cg + j * cg + i % cg) as usize]
            })
            .collect()
    }

    /// The workspace: the packed layer's own, then the blocked filter.
    fn filter_at(&self, inner: u64) -> u64 {
        inner.next_multiple_of(ALIGN)
    }

    pub fn workspace_bytes(&self, inner: u64) -> u64 {
        self.filter_at(inner) + self.blocked_elements() * self.packed.dtype.size_bytes() as u64
    }

    /// The packed layer's invoker (forward or backward-data) after the filter's packing.
    pub fn invoker(
        self,
        device: &CudaDevice,
        inner: Box<dyn Invoker<Cuda>>,
        inner_workspace: u64,
    ) -> Result<GroupPackedInvoker> {
        let function = device.function(&source(self.packed.dtype), "pack_groups")?;
        let blocks = device.sm_count * 8;
        Ok(GroupPackedInvoker { packing: self, function, inner, inner_workspace, blocks })
    }
}

pub(super) struct GroupPackedInvoker {
    packing: GroupPacking,
    /// pack_groups, before the products.
    function: CudaFunction,
    inner: Box<dyn Invoker<Cuda>>,
    inner_workspace: u64,
    blocks: u32,
}

impl Invoker<Cuda> for GroupPackedInvoker {
    fn run(&self, b: &mut CudaBuffers<'_>) -> Result<()> {
        let packed = &self.packing.packed;
        let w = b.workspace.from_byte(self.packing.filter_at(self.inner_workspace));
        let inner_workspace = Buffer { ptr: b.workspace.ptr, bytes: self.inner_workspace.min(b.workspace.bytes) };
        let mut args = vec![Arg::Buffer(b.w), Arg::Buffer(w)];
        args.extend(self.packing.args());
        launch::kernel(
            b,
            &self.function,
            launch::flat(self.blocks, THREADS),
            &args,
            "launch cuda.igemm_wgmma's group blocking",
        )?;
        self.inner.run(&mut CudaBuffers::covering(
            packed,
            self.inner_workspace,
            [b.x, w, b.y, inner_workspace],
            b.stream(),
        )?)
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
        /// The blocked layer, between the kernels' packings as the CPU twins do them, computes
        /// the layer's result in every direction: rows a whole number of groups wide (all of
        /// them: one group left; or the fewest that block).
        #[test]
        fn the_blocked_layer_is_the_layer(
            (p, row) in (small_problem(), any::<bool>()).prop_filter_map("a layer that blocks", |(mut p, all)| {
                p.layout = Layout::Nhwc;
                let blocked = if all { p.g } else { (2..=p.g).find(|d| p.g.is_multiple_of(*d))? };
                let row = p.c_per_group() * blocked;
                GroupPacking::of(&p, row).map(|_| (p, row))
            }),
        ) {
            let packing = GroupPacking::of(&p, row).unwrap();
            let q = &packing.packed;
            prop_assert_eq!(q.c_per_group(), row);
            let t = ConvTensors::random(&p, 3);
            let inputs = ConvTensors { x: t.x.clone(), w: Tensor::from_f32(p.dtype, &packing.pack(&t.w.to_f32())), y: t.y.clone() };
            let result = reference(q, &inputs);
            let got = if p.direction == Direction::BackwardWeight { packing.diagonal_blocks(&result) } else { result };
            let exact = reference(&p, &t);
            prop_assert_eq!(got.len(), exact.len());
            let scale = exact.iter().fold(1.0f64, |m, r| m.max(r.abs()));
            let worst = got.iter().zip(&exact).map(|(g, r)| (g - r).abs() / scale).fold(0.0, f64::max);
            prop_assert!(worst < 1e-5, "{} blocked as {}: off by {worst:e}", p.key(), q.key());
        }
    }
}
