//! `cuda.igemm_wgmma`: implicit GEMM on Hopper's warpgroup MMA (`wgmma.mma_async`) fed by the
//! tensor memory accelerator (kernels/igemm_wgmma.cu), built for `sm_90a` and offered on sm_90
//! devices only. Channels-last 1D, 2D and 3D; bf16, fp16 and fp32 as tf32 in every direction;
//! groups in the grid.
//!
//! Forward reads x by TMA im2col (the filter tap as the load's offset, the padding zero-filled by
//! the TMA unit) and the filter by tiled loads, both K-major; a 1x1 filter at stride 1 without
//! padding reads its source (x, backward-data's dy) by tiled loads as a matrix of pixels x
//! channels, in every direction. Backward-data is the forward product of dy with the filter flipped
//! and transposed and the padding mirrored (16-bit types read w's rows straight as an MN-major B,
//! each product tap mapped to w's; tf32, K-major only, from a transposed copy a small kernel writes
//! into the workspace), once per sub-pixel phase at a stride over one (each phase's dx pixels are
//! reached by one residue class of taps and written with the stride; a phase no tap reaches gets
//! zeros), up to eight phases' products in one launch. Backward-weight multiplies dy (tiled loads)
//! by x (im2col at each tap's offsets), both MN-major (tf32 wgmma takes K-major operands only: the
//! producer warpgroup's other three warps transpose each tf32 stage in shared memory as it lands),
//! per group and tap, its pixel reduction split into `ks` slices summed (`red`) by atomics into an
//! fp32 workspace, in two stages, or in the cluster (2 or 4 slices as CTAs of one cluster adding
//! their tiles through distributed shared memory: one launch, no workspace); or stream-K (`red 3`):
//! a CTA per SM takes an even share of all tiles' blocks of pixels, a tile cut between CTAs
//! finished by the one with its first blocks from the others' partial sums in the workspace.
//! Forward and backward-data split their reductions (taps x channels) the same way where `ks` is
//! over 1, for layers with too few tiles to fill the GPU. A dense layer with too few channels for a
//! TMA row (an RGB stem) runs packed: its taps along W moved into the channels (see tap_packing); a
//! grouped layer with too few per group (ResNeXt's) runs with its groups blocked into groups of a
//! row's channels, the filter block-diagonal (see group_packing).
//!
//! A producer warpgroup issues the loads onto an mbarrier pipeline of `st` stages and `wg`
//! consumer warpgroups multiply 64 x `bn` each. `cl` 2 runs clusters of two CTAs on adjacent
//! row tiles, each loading half of the tile they share (the filter's, or backward-weight's
//! x) and multicasting it to both; `ps` 1 makes the grid persistent, a cluster per SM (pair)
//! walking the tiles with its pipeline running on across them. Problem sizes are run-time
//! (kernel parameters and tensor maps), so one build serves every shape of a config at a
//! spatial rank and type. `hl 1` (2D forward and unit-stride backward-data) stages the source
//! as a rectangle of whole rows with its halo, once per block of channels, and reads every tap's
//! tile from it, where im2col loads each tap's pixels again.

use std::borrow::Cow;
use std::sync::Arc;

use cudarc::driver::{CudaFunction, LaunchConfig};
use gconv_core::geometry::Geometry;
use gconv_core::{
    applicability, require, Config, ConvProblem, DataType, Direction, GconvError, Invoker, Layout, NotApplicable,
    Result, Solve, Solver,
};

use super::group_packing::{self, GroupPacking};
use super::tap_packing::{self, Packing};
use super::{builds_from_kernel, BuiltFrom};
use crate::device::CudaDevice;
use crate::launch::{self, Arg, Buffer, Residency};
use crate::params::{FilterBlocks, ProductArgs, Products, TapMap, MAX_PRODUCTS};
use crate::tma::{Im2col, TensorMap};
use crate::{ConvParams, Cuda, CudaBuffers, KernelSource};

/// split_reduce only in the builds whose split launches it (the kernel's SPLIT 1 and 2).
const SOURCE: &str = concat!(
    include_str!("../kernels/igemm_wgmma.cu"),
    "#if SPLIT == 1 || SPLIT == 2\n",
    include_str!("../kernels/split_reduce.cuh"),
    "#endif\n"
);
/// Tiles are rows of 128 bytes (the swizzle's width): a reduction block of forward and
/// backward-data is one such row of source channels of one tap (64 16-bit values, 32 fp32).
const ROW_BYTES: u32 = 128;
/// Rows of one consumer warpgroup's MMA.
const ROWS_PER_CONSUMER: u32 = 64;
const COLUMNS: [u32; 3] = [64, 128, 256];
const CONSUMERS: [u32; 2] = [1, 2];
/// 64-row slices per consumer warpgroup (forward and backward-data).
const ROW_SLICES: [u32; 2] = [1, 2];
const STAGES: [u32; 3] = [3, 4, 5];
/// `hl 1` may also take a stage per block of a 3x3 filter's unit of one chunk of channels
/// (ResNeXt's blocked groups): each stage then holds one tap's filter tile, loaded again only
/// where a CTA's next unit changes group (the kernel's HeldFilter).
const HELD_STAGES: u32 = 9;
/// The least share of a halo unit's rows that are the layer's pixels for the blocked layers'
/// default to stage its source with its halo (see WgmmaConfig::held_halo).
const MIN_HALO_USE: f64 = 0.5;
/// The time of a blocked layer's forward per row on 128-row tiles against 256-row ones at as
/// many waves' rows (H100, ResNeXt's c256 g32 56x56 stride 2: 33.2 us against 28.2).
const HALF_TILE_COST: f64 = 1.18;
/// CTAs per cluster.
const CLUSTERS: [u32; 2] = [1, 2];
/// Backward-weight's taps per unit: each block of dy loaded once for them all.
const UNIT_TAPS: [u32; 4] = [1, 2, 3, 4];
/// A consumer's accumulators (BN / 2 fp32 per B tile) the kernels may hold, of the 232
/// registers it takes; of 208 where two consumers share the SM with a transposing producer
/// warpgroup (tf32 backward-weight: 192 spilled there).
const MAX_ACCUMULATORS: u32 = 192;
const MAX_ACCUMULATORS_BESIDE_TRANSPOSER: u32 = 128;
/// Barriers per stage: full, empty and (tf32 backward-weight) transposed.
const BARRIERS_PER_STAGE: u32 = 3;
/// What one block may opt in to on sm_90.
const MAX_SHARED_BYTES: u32 = 227 * 1024;
/// HALO's full and empty barriers of its two halo buffers.
const HALO_BARRIERS: u32 = 4;
/// TMA's longest box side.
const MAX_BOX: u32 = 256;
/// TMA element strides (the convolution stride) go up to 8.
const MAX_STRIDE: usize = 8;
const MAX_GRID_X: u64 = i32::MAX as u64;
const MAX_GRID_YZ: u64 = 65_535;
/// Slices backward-weight's pixel reduction may be split into.
const SPLITS: [u32; 8] = [1, 2, 4, 8, 16, 32, 64, 128];
/// Forward's and backward-data's reductions (taps x channels) are far shorter.
const MAX_PRODUCT_SPLITS: u32 = 16;
/// A slice should reduce at least this many blocks of pixels, or its share of the
/// pipeline's fill and the reduction outweigh its work.
const MIN_BLOCKS_PER_SLICE: u64 = 8;
/// Two-stage backward-weight keeps one fp32 copy of the weights per slice.
const MAX_WORKSPACE_BYTES: u64 = 1 << 30;
/// Threads per block of split_reduce.
const REDUCE_THREADS: u32 = 256;
/// The filter transpose of backward-data: 32 x 32 tiles, 8 rows of threads.
const FLIP_TILE: u32 = 32;
const FLIP_ROWS: u32 = 8;

pub struct IgemmWgmma {
    pub device: Arc<CudaDevice>,
}

/// A block tile: columns, consumer warpgroups (`mr` slices of 64 rows each), pipeline stages,
/// CTAs per cluster, whether the grid is persistent, and (backward-weight) the taps a unit sums
/// at once, a B tile each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Tile {
    bn: u32,
    wg: u32,
    st: u32,
    cl: u32,
    persistent: bool,
    taps: u32,
    mr: u32,
    /// Forward and backward-data: the source staged as a rectangle with its halo (the kernel's
    /// HALO), not loaded per tap by im2col. The default only for blocked grouped layers, at
    /// HELD_STAGES (see WgmmaConfig::held_halo); elsewhere tunable: on the H100 it took 0.89x
    /// im2col's time on ResNeXt's c512 g32 14x14 3x3 with the filter reloaded per unit,
    /// 0.98-1.09x on other 3x3 layers of 14x14 to 56x56, and 2.5x at 7x7 on 256-row tiles (7 of
    /// 64 rows a slice in use).
    halo: bool,
}

impl Tile {
    fn check(self, dtype: DataType) -> std::result::Result<(), String> {
        if !COLUMNS.contains(&self.bn) {
            return Err(format!("bn must be one of {COLUMNS:?}"));
        }
        if !CONSUMERS.contains(&self.wg) {
            return Err(format!("wg must be one of {CONSUMERS:?}"));
        }
        if !(STAGES.contains(&self.st) || self.halo && self.st == HELD_STAGES) {
            return Err(format!("st must be one of {STAGES:?}, or {HELD_STAGES} with hl 1"));
        }
        if !CLUSTERS.contains(&self.cl) {
            return Err(format!("cl must be one of {CLUSTERS:?}"));
        }
        if !UNIT_TAPS.contains(&self.taps) {
            return Err(format!("tp must be one of {UNIT_TAPS:?}"));
        }
        if !ROW_SLICES.contains(&self.mr) {
            return Err(format!("mr must be one of {ROW_SLICES:?}"));
        }
        if self.halo && (!self.persistent || self.cl > 1 || self.taps > 1) {
            return Err(
                "hl 1 (the source staged with its halo) takes a persistent grid of lone CTAs: ps 1, cl 1".into()
            );
        }
        let accumulators = self.bn / 2 * self.taps * self.mr;
        if accumulators > MAX_ACCUMULATORS {
            return Err(format!(
                "bn {} x tp {} x mr {} needs {accumulators} accumulators a thread, the kernel holds {MAX_ACCUMULATORS}",
                self.bn, self.taps, self.mr
            ));
        }
        let shared = self.shared_bytes(dtype);
        if shared > MAX_SHARED_BYTES {
            return Err(format!("needs {shared} bytes of shared memory, a block may have {MAX_SHARED_BYTES}"));
        }
        Ok(())
    }

    fn rows(self) -> u32 {
        ROWS_PER_CONSUMER * self.wg * self.mr
    }

    /// Whether a stage per block of a unit holds the filter's tiles across a CTA's units of one
    /// group (HELD_STAGES with hl 1; the kernel's HeldFilter), on 64-column tiles: where
    /// backward-data's helper warps may write a blocked filter, then once per run of units.
    fn writes_held_filter(self) -> bool {
        self.halo && self.st == HELD_STAGES && self.bn == 64
    }

    /// Every stage's A tile (none with `halo`: see HaloTile) and B tiles, their full and empty
    /// barriers, room to align the tiles to 1024 bytes as the 128-byte swizzle wants, and a
    /// persistent grid's staging of the results (as the stages, 1024-byte aligned).
    fn shared_bytes(self, dtype: DataType) -> u32 {
        let elem = dtype.size_bytes() as u32;
        let staging = if self.persistent { 1024 + self.rows() * self.bn * elem } else { 0 };
        let a_rows = if self.halo { 0 } else { self.rows() };
        1024 + self.st * (a_rows + self.bn * self.taps) * ROW_BYTES
            + self.st * BARRIERS_PER_STAGE * 8
            + HALO_BARRIERS * 8
            + staging
    }

    /// Whether `slices` slices of the tile's reduction can sum in one cluster (see the kernel's
    /// KSPLIT): each CTA of a slice keeps the tile's rows the others store, in fp32, in its stages
    /// (forward and backward-data: past the staged results).
    fn check_cluster_sums(self, p: &ConvProblem, slices: u32) -> std::result::Result<(), String> {
        if self.persistent {
            return Err("red 2 (sums in the cluster) takes a grid of a cluster per tile, not ps 1".into());
        }
        let elem = p.dtype.size_bytes() as u32;
        let staged = if p.direction == Direction::BackwardWeight { 0 } else { self.rows() * self.bn * elem };
        let kept = (self.rows() - self.rows() / slices) * self.bn * self.taps * 4;
        let stages = self.st * (self.rows() + self.bn * self.taps) * ROW_BYTES;
        if staged + kept > stages {
            return Err(format!("ks {slices} summed in the cluster keeps {kept} bytes of sums past {staged} of staged results, and the stages hold {stages}"));
        }
        Ok(())
    }

    fn all(dtype: DataType) -> impl Iterator<Item = Tile> {
        let shapes = COLUMNS
            .into_iter()
            .flat_map(|bn| CONSUMERS.into_iter().flat_map(move |wg| STAGES.into_iter().map(move |st| (bn, wg, st))));
        shapes
            .flat_map(|(bn, wg, st)| {
                CLUSTERS.into_iter().flat_map(move |cl| {
                    [false, true].map(|persistent| Tile { bn, wg, st, cl, persistent, taps: 1, mr: 1, halo: false })
                })
            })
            .filter(move |t| t.check(dtype).is_ok())
    }

    /// A grid of `units` units: a cluster each, or as many clusters as the SMs hold at once
    /// (one CTA per SM) walking them.
    fn grid(self, units: u64, sms: u32) -> u32 {
        let clusters = if self.persistent { units.min(u64::from(sms / self.cl).max(1)) } else { units };
        (clusters * u64::from(self.cl)) as u32
    }

    fn source(self, p: &ConvProblem) -> KernelSource {
        let source = KernelSource::new("igemm_wgmma.cu", SOURCE, p.dtype)
            .define("BN", self.bn)
            .define("CONSUMERS", self.wg)
            .define("MR", self.mr)
            .define("STAGES", self.st)
            .define("CLUSTER", self.cl)
            .define("PERSISTENT", u32::from(self.persistent))
            .define("WEIGHT", u32::from(p.direction == Direction::BackwardWeight))
            .define("SPATIAL", p.dims.len());
        // Defined only where set, so that other builds keep their keys.
        let source = if self.halo { source.define("HALO", 1) } else { source };
        source.arch_specific()
    }
}

/// How a product splits its reduction (backward-weight's pixels, the others' taps x channels):
/// into `slices`, summed as `reduction` says. One slice writes the destination directly.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Split {
    slices: u32,
    reduction: Reduction,
}

/// How a split's slices are summed (the config's `red`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reduction {
    /// 0: added into an fp32 workspace by atomics (zeroed before), rounded into the destination
    /// by a second kernel.
    Atomic,
    /// 1: one fp32 copy of the destination per slice, summed by a second kernel.
    TwoStage,
    /// 2: the slices are CTAs of one cluster that sum their tiles in shared memory (see the
    /// kernel's KSPLIT): one launch, no workspace; 2 or 4 slices, not persistent.
    Cluster,
    /// 3: stream-K (backward-weight, see the kernel's SPLIT 3): one slice, a grid of at most a
    /// CTA per SM sharing all tiles' reduction blocks evenly, tiles cut between CTAs summed
    /// through the workspace by the CTA that takes their first blocks.
    StreamK,
}

impl Reduction {
    const ALL: [Reduction; 4] = [Reduction::Atomic, Reduction::TwoStage, Reduction::Cluster, Reduction::StreamK];

    fn code(self) -> u32 {
        match self {
            Reduction::Atomic => 0,
            Reduction::TwoStage => 1,
            Reduction::Cluster => 2,
            Reduction::StreamK => 3,
        }
    }

    fn from_code(code: u32) -> Option<Reduction> {
        Reduction::ALL.into_iter().find(|r| r.code() == code)
    }
}

const UNSPLIT: Split = Split { slices: 1, reduction: Reduction::Atomic };

/// The slices a cluster's sums take.
const CLUSTER_SPLITS: [u32; 2] = [2, 4];

impl Split {
    fn all() -> impl Iterator<Item = Split> {
        SPLITS
            .into_iter()
            .flat_map(|slices| Reduction::ALL.map(|reduction| Split { slices, reduction }))
            .filter(|s| s.check().is_ok())
    }

    fn check(self) -> std::result::Result<(), String> {
        if !SPLITS.contains(&self.slices) {
            return Err(format!("ks must be one of {SPLITS:?}"));
        }
        match self.reduction {
            Reduction::TwoStage if self.slices == 1 => Err("red 1 (two-stage) needs ks over 1".into()),
            Reduction::Cluster if !CLUSTER_SPLITS.contains(&self.slices) => {
                Err(format!("red 2 (sums in the cluster) takes ks {CLUSTER_SPLITS:?}"))
            }
            Reduction::StreamK if self.slices != 1 => {
                Err("red 3 (stream-K) shares the reduction out itself: ks must be 1".into())
            }
            _ => Ok(()),
        }
    }

    /// The slices that sum in one cluster (the kernel's KSPLIT): 1 unless the reduction is there.
    fn cluster_slices(self) -> u32 {
        if self.reduction == Reduction::Cluster {
            self.slices
        } else {
            1
        }
    }

    /// The kernel's output mode: 0 the destination, 1 atomics into the workspace, 2 a slice of
    /// it, 3 stream-K.
    fn mode(self) -> i32 {
        match (self.slices, self.reduction) {
            (_, Reduction::StreamK) => 3,
            (1, _) | (_, Reduction::Cluster) => 0,
            (_, Reduction::Atomic) => 1,
            (_, Reduction::TwoStage) => 2,
        }
    }

    /// The fp32 copies of the destination of `elements` it needs in the workspace: none, one or
    /// one per slice (stream-K's partial sums are per CTA: see StreamK).
    fn workspace_bytes(self, elements: u64) -> u64 {
        let copies = match self.mode() {
            1 => 1,
            2 => u64::from(self.slices),
            _ => 0,
        };
        elements * 4 * copies
    }

    /// The second kernel, if the split needs one, and how much of the workspace to zero before
    /// the atomics, for a destination of `elements`.
    fn reduce(self, elements: u64, device: &CudaDevice, source: &KernelSource) -> Result<Option<Reduce>> {
        Ok(match self.mode() {
            0 | 3 => None,
            mode => Some(Reduce {
                function: device.function(source, "split_reduce")?,
                zero_bytes: if mode == 1 { elements * 4 } else { 0 },
                slices: if mode == 1 { 1 } else { self.slices as i32 },
                count: elements as i32,
                blocks: (elements.div_ceil(u64::from(REDUCE_THREADS)) as u32).clamp(1, device.sm_count * 8),
            }),
        })
    }
}

/// Stream-K's grid and workspace (the kernel's SPLIT 3) for `units` tiles of `blocks` blocks
/// of pixels each: CTAs of the tile shape, at most one per SM and one per block, each taking
/// an even share of all units x blocks, the first (total mod CTAs) one block more.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct StreamK {
    ctas: u64,
}

/// The flags' area of stream-K's workspace: a flag per CTA and consumer, in multiples of 64 (as
/// the kernel's STREAM_FLAG_FLOATS).
const STREAM_FLAG_WORDS: u64 = 64;

impl StreamK {
    fn new(units: u64, blocks: u64, sms: u32) -> StreamK {
        StreamK { ctas: (units * blocks).min(u64::from(sms)).max(1) }
    }

    /// The flags zeroed before the launch, in bytes: the start of the partial sums.
    fn flag_bytes(self, tile: Tile) -> u64 {
        (self.ctas * u64::from(tile.wg)).next_multiple_of(STREAM_FLAG_WORDS) * 4
    }

    /// The flags and every CTA's consumers' partial sums (64 rows x `bn` columns x taps, fp32).
    fn workspace_bytes(self, tile: Tile) -> u64 {
        self.flag_bytes(tile) + self.ctas * u64::from(tile.wg * ROWS_PER_CONSUMER * tile.bn * tile.taps) * 4
    }
}

/// Backward-weight's reduction in blocks of pixels (a tile row's worth each, see row_elements).
fn pixel_blocks(p: &ConvProblem) -> u64 {
    let geo = Geometry::new(p);
    ((geo.n * geo.output_volume()) as u64).div_ceil(u64::from(row_elements(p.dtype)))
}

/// Whether backward-weight's tiles are transposed in shared memory (the kernel's TRANSPOSE):
/// tf32 wgmma takes K-major operands only, and they land with a pixel per row.
fn transposes(p: &ConvProblem) -> bool {
    p.direction == Direction::BackwardWeight && p.dtype == DataType::Tf32
}

/// Whether the kernels read the source (x, or backward-data's dy) as a matrix of pixels x
/// channels by tiled loads (the kernel's SRC_TILED): a 1x1 filter at stride 1 without padding,
/// whose one product's window at a destination pixel is the source pixel of its index. A
/// compile-time choice, though it adds builds (ResNet-50's every direction: 28 -> 38 of this
/// solver): chosen at run time, even with a producer loop of each kind and no pixel cursor for
/// the tiled one, the 210 dense 1x1 layers ran 0.966x im2col's time on the H100 (forward
/// 0.973x), against 0.958x (0.952x) so.
fn reads_source_tiled(p: &ConvProblem) -> bool {
    applicability::plain_1x1(p).is_ok()
}

/// Whether forward's or backward-data's kernel stores its results by TMA, whole tiles from the
/// staged panels (the kernel's dst_tiled): the destination a matrix of pixels x channels (one
/// product), dense or its groups' channels whole column tiles, so that a tile's columns past
/// its group's are past the matrix's (TMA leaves them out), and each tile summed in one CTA.
/// On the H100 the 167 dense forward and backward-data layers it ran fastest on took 0.990x
/// the time of the threads' own stores (0.84-1.08x); stores by one thread of the warpgroup,
/// 0.997x.
fn stores_tiles(p: &ConvProblem, config: WgmmaConfig, product: &Product, one_product: bool) -> bool {
    let (_, columns) = product.channels();
    one_product
        && (p.g == 1 || columns.is_multiple_of(config.tile.bn))
        && config.split.cluster_slices() == 1
        && !config.tile.halo
}

/// The elements of the tensor a direction writes.
fn destination_elements(p: &ConvProblem) -> u64 {
    match p.direction {
        Direction::Forward => p.output_elements(),
        Direction::BackwardData => p.input_elements(),
        Direction::BackwardWeight => p.weight_elements(),
    }
}

/// How `p` runs as another layer, where its channels (per group) are too few for TMA rows:
/// its taps along W packed into the channels (see tap_packing), or its groups into blocks of a
/// row's channels (see group_packing).
enum Packed {
    Taps(Packing),
    Groups(GroupPacking),
}

impl Packed {
    fn of(p: &ConvProblem) -> Option<Packed> {
        let row = row_elements(p.dtype);
        Packing::of(p, row).map(Packed::Taps).or_else(|| GroupPacking::of(p, row).map(Packed::Groups))
    }

    /// The layer the products run.
    fn layer(&self) -> &ConvProblem {
        match self {
            Packed::Taps(packing) => &packing.packed,
            Packed::Groups(packing) => &packing.packed,
        }
    }

    /// Why the packed layer does not apply, in terms of `p`: a blocked layer's channel counts
    /// are not the user's.
    fn explain(&self, reason: NotApplicable) -> NotApplicable {
        match self {
            Packed::Taps(_) => reason,
            Packed::Groups(packing) => {
                let layer = &packing.packed;
                NotApplicable(format!(
                    "its groups blocked {} at a time (as {} groups of {} input channels): {reason}",
                    packing.blocked(),
                    layer.g,
                    layer.c_per_group()
                ))
            }
        }
    }

    /// Whether the products take the user's tensors themselves, with no kernel around them:
    /// a blocked layer's backward-weight keeps the diagonal blocks of its gradient as it
    /// stores them (see the kernel's group_kg), and its forward and backward-data where they
    /// read the blocked filter from w (see the kernel's FilterBlocks; `held`: the products'
    /// tile holds the filter's stages across units).
    fn in_place(&self, held: bool) -> bool {
        matches!(self, Packed::Groups(packing) if packing.packed.direction == Direction::BackwardWeight || packing.reads_user_filter(held))
    }

    fn workspace_bytes(&self, inner: u64) -> u64 {
        match self {
            Packed::Taps(packing) => packing.workspace_bytes(inner),
            Packed::Groups(packing) => packing.workspace_bytes(inner),
        }
    }

    fn source(&self, dtype: DataType) -> KernelSource {
        match self {
            Packed::Taps(_) => tap_packing::source(dtype),
            Packed::Groups(_) => group_packing::source(dtype),
        }
    }

    fn invoker(
        self,
        device: &CudaDevice,
        dtype: DataType,
        inner: Box<dyn Invoker<Cuda>>,
        inner_workspace: u64,
    ) -> Result<Box<dyn Invoker<Cuda>>> {
        Ok(match self {
            Packed::Taps(packing) => Box::new(packing.invoker(device, dtype, inner, inner_workspace)?),
            Packed::Groups(packing) => Box::new(packing.invoker(device, inner, inner_workspace)?),
        })
    }
}

/// A group's channels where `user`'s blocked filter is written by the helper warps of the
/// products' `tile` (the kernel's FILL_FILTER).
fn filled_filter(user: &ConvProblem, tile: Tile) -> Option<u32> {
    match Packed::of(user)? {
        Packed::Groups(packing) if packing.fills_filter(tile.writes_held_filter()) => Some(user.c_per_group()),
        _ => None,
    }
}

/// A group's channels where `user`'s blocked filter's MMAs skip its zeros (the kernel's
/// DIAGONAL, on 64-column tiles).
fn diagonal(user: &ConvProblem, tile: Tile) -> Option<u32> {
    match Packed::of(user)? {
        Packed::Groups(packing) if tile.bn == 64 => packing.diagonal(),
        _ => None,
    }
}

/// Whether `config` on `layer` may write a blocked filter held across units (see
/// Tile::writes_held_filter).
fn writes_held_filter(layer: &ConvProblem, config: &Config) -> bool {
    WgmmaConfig::from_config(layer, config).is_ok_and(|config| config.tile.writes_held_filter())
}

/// The layer the products run: `p`, or its packed layer.
fn lowered(p: &ConvProblem) -> Cow<'_, ConvProblem> {
    Packed::of(p).map_or(Cow::Borrowed(p), |packed| Cow::Owned(packed.layer().clone()))
}

/// Whether backward-data reads the filter straight from w as an MN-major B (16-bit types),
/// rather than a flipped and transposed copy (tf32, whose wgmma takes K-major operands only).
fn reads_filter_directly(p: &ConvProblem) -> bool {
    p.direction == Direction::BackwardData && p.dtype != DataType::Tf32
}

/// Backward-data's workspace: the split's fp32 part first (so that zeroing it leaves the
/// flipped filter alone), the flipped filter from this byte on, 256-byte aligned for TMA.
fn flipped_filter_start(p: &ConvProblem, split: Split) -> u64 {
    split.workspace_bytes(destination_elements(p)).next_multiple_of(256)
}

/// A config: the block tile (fields `bn`, `wg`, `st`, `cl`, `ps`) and the split (`ks` and
/// `red`, as cuda.igemm_tc has them): always written for backward-weight, for the other
/// directions only where it splits (so their unsplit configs read as before splits existed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct WgmmaConfig {
    tile: Tile,
    split: Split,
}

impl WgmmaConfig {
    fn from_config(p: &ConvProblem, config: &Config) -> Result<Self> {
        let bad = |reason: String| GconvError::BadConfig { text: config.to_string(), reason };
        let flag = |name: &str, value: u32| match value {
            0 | 1 => Ok(value == 1),
            _ => Err(bad(format!("{name} must be 0 or 1"))),
        };
        // tp or mr, then hl, come last, written only over 1 and where 1 (see to_config).
        let fields = config.fields();
        let (fields, halo) = match fields.split_last() {
            Some(((name, value), rest)) if name == "hl" => (rest, flag("hl", *value)?),
            _ => (fields, false),
        };
        let (fields, taps, mr) = match fields.split_last() {
            Some(((name, value), rest)) if name == "tp" => (rest, *value, 1),
            Some(((name, value), rest)) if name == "mr" => (rest, 1, *value),
            _ => (fields, 1, 1),
        };
        let leading = Config::new(fields.iter().map(|(name, value)| (name.as_str(), *value)));
        fn expect<const N: usize>(
            leading: &Config,
            names: [&str; N],
            bad: impl Fn(String) -> GconvError,
        ) -> Result<[u32; N]> {
            leading.expect_fields(names).map_err(|e| match e {
                GconvError::BadConfig { reason, .. } => {
                    bad(format!("{reason}, then tp or mr where over 1, then hl where 1"))
                }
                e => e,
            })
        }
        let parsed = if p.direction == Direction::BackwardWeight || leading.get("ks").is_some() {
            let [bn, wg, st, cl, ps, slices, red] = expect(&leading, ["bn", "wg", "st", "cl", "ps", "ks", "red"], bad)?;
            let tile = Tile { bn, wg, st, cl, persistent: flag("ps", ps)?, taps, mr, halo };
            let reduction = Reduction::from_code(red).ok_or_else(|| {
                bad("red must be 0 (atomics), 1 (two-stage), 2 (sums in the cluster) or 3 (stream-K)".into())
            })?;
            WgmmaConfig { tile, split: Split { slices, reduction } }
        } else {
            let [bn, wg, st, cl, ps] = expect(&leading, ["bn", "wg", "st", "cl", "ps"], bad)?;
            WgmmaConfig { tile: Tile { bn, wg, st, cl, persistent: flag("ps", ps)?, taps, mr, halo }, split: UNSPLIT }
        };
        parsed.check(p).map_err(bad)?;
        Ok(parsed)
    }

    fn to_config(self, direction: Direction) -> Config {
        let Tile { bn, wg, st, cl, persistent, taps, mr, halo } = self.tile;
        let mut fields = vec![("bn", bn), ("wg", wg), ("st", st), ("cl", cl), ("ps", u32::from(persistent))];
        if direction == Direction::BackwardWeight || self.split != UNSPLIT {
            fields.extend([("ks", self.split.slices), ("red", self.split.reduction.code())]);
        }
        // Written only where over 1, so that configs from before it read as they did.
        if taps > 1 {
            fields.push(("tp", taps));
        }
        if mr > 1 {
            fields.push(("mr", mr));
        }
        if halo {
            fields.push(("hl", 1));
        }
        Config::new(fields)
    }

    fn check(self, p: &ConvProblem) -> std::result::Result<(), String> {
        self.tile.check(p.dtype)?;
        self.split.check()?;
        if self.tile.halo {
            HaloTile::check(p, self)?;
        }
        let slices = self.split.slices;
        if self.split.reduction == Reduction::Cluster {
            self.tile.check_cluster_sums(p, slices)?;
        }
        if self.split.reduction == Reduction::StreamK {
            if p.direction != Direction::BackwardWeight {
                return Err("red 3 (stream-K) is backward-weight's".into());
            }
            if self.tile.cl > 1 || self.tile.persistent {
                return Err("red 3 (stream-K) runs lone CTAs on a grid of its own: cl 1, ps 0".into());
            }
        }
        if self.tile.mr > 1 && p.direction == Direction::BackwardWeight {
            return Err("mr over 1 is forward's and backward-data's".into());
        }
        let accumulators = self.tile.bn / 2 * self.tile.taps;
        if transposes(p) && self.tile.wg > 1 && accumulators > MAX_ACCUMULATORS_BESIDE_TRANSPOSER {
            return Err(format!("tf32 backward-weight's two consumers beside its transposing producer hold {MAX_ACCUMULATORS_BESIDE_TRANSPOSER} accumulators a thread, bn {} x tp {} needs {accumulators}", self.tile.bn, self.tile.taps));
        }
        let taps = self.tile.taps;
        if taps > 1 {
            if p.direction != Direction::BackwardWeight {
                return Err("tp over 1 is backward-weight's".into());
            }
            let filter_taps = Geometry::new(p).filter_volume() as u32;
            if !filter_taps.is_multiple_of(taps) {
                return Err(format!("tp {taps} does not divide the filter's {filter_taps} taps"));
            }
        }
        if p.direction != Direction::BackwardWeight {
            let blocks = Product::longest_reduction(&Product::all(p), p.dtype);
            if slices > MAX_PRODUCT_SPLITS || u64::from(slices) > blocks {
                return Err(format!("ks {slices} splits a reduction of {blocks} blocks (up to {MAX_PRODUCT_SPLITS} slices, each with a block)"));
            }
        }
        let (row_tiles, units) = self.work(p);
        if self.tile.cl > 1 && row_tiles < 2 {
            return Err(format!(
                "cl {} shares loads between row tiles, and this problem has one of {} rows",
                self.tile.cl,
                self.tile.rows()
            ));
        }
        if units * u64::from(self.tile.cl) > MAX_GRID_X {
            return Err(format!("{units} work units exceed the grid"));
        }
        if self.split.reduction == Reduction::StreamK {
            let blocks = pixel_blocks(p);
            if units * blocks > i32::MAX as u64 {
                return Err(format!("red 3 (stream-K) counts {units} tiles x {blocks} blocks of pixels in 32 bits"));
            }
        }
        let bytes = self.split.workspace_bytes(destination_elements(p));
        if bytes > MAX_WORKSPACE_BYTES {
            return Err(format!(
                "{slices} slices would need {} MiB of fp32 workspace, more than {}",
                bytes >> 20,
                MAX_WORKSPACE_BYTES >> 20
            ));
        }
        Ok(())
    }

    /// The row tiles and the work units (clusters' worth of row tiles, see the kernel) of the
    /// largest launch.
    fn work(self, p: &ConvProblem) -> (u64, u64) {
        if p.direction == Direction::BackwardWeight {
            let geo = Geometry::new(p);
            let row_tiles = (geo.kg as u64).div_ceil(u64::from(self.tile.rows()));
            let per_tap_group =
                row_tiles.div_ceil(u64::from(self.tile.cl)) * (geo.cg as u64).div_ceil(u64::from(self.tile.bn));
            let tap_groups = geo.filter_volume() as u64 / u64::from(self.tile.taps);
            return (row_tiles, per_tap_group * tap_groups * u64::from(self.split.slices) * u64::from(p.g));
        }
        let products = Product::all(p);
        let largest = products.iter().max_by_key(|product| product.rows);
        largest
            .map_or((0, 0), |product| (product.row_tiles(self.tile), product.units(self.tile, p.g, self.split.slices)))
    }

    /// Stream-K's grid and workspace for backward-weight's `p` on `sms` SMs.
    fn stream_k(self, p: &ConvProblem, sms: u32) -> StreamK {
        StreamK::new(self.work(p).1, pixel_blocks(p), sms)
    }

    /// The tile's kernels for `p`, run for `user` (see IgemmWgmma::products); they compile the
    /// epilogue of a split through the workspace only where they split so (it would slow every
    /// other build; backward-weight's builds compile only the epilogue of their own output
    /// mode: a third to half the NVRTC time of a build).
    fn source(self, p: &ConvProblem, user: &ConvProblem) -> KernelSource {
        let source =
            self.tile.source(p).define("KSPLIT", self.split.cluster_slices()).define("SPLIT", self.split.mode());
        // Defined only where set, so that other builds keep their keys.
        let filled = filled_filter(user, self.tile);
        let source = match filled {
            Some(channels) => source.define("FILL_FILTER", channels),
            None => source,
        };
        let source = match diagonal(user, self.tile) {
            Some(channels) => source.define("DIAGONAL", channels),
            None => source,
        };
        let reads_filter_groups = p.direction != Direction::BackwardWeight && user.g != p.g && filled.is_none();
        let source = if reads_filter_groups { source.define("FILTER_GROUPS", 1) } else { source };
        match p.direction {
            Direction::BackwardWeight => {
                source.define("TAPS", self.tile.taps).define("SRC_TILED", u32::from(reads_source_tiled(p)))
            }
            _ => {
                let products = if Product::all(p).len() == 1 { 1 } else { MAX_PRODUCTS };
                let source = source.define("FILTER_MN", u32::from(reads_filter_directly(p)));
                // Defined only where set, so that other builds keep their keys.
                let source = if p.direction == Direction::BackwardData && !reads_filter_directly(p) {
                    source.define("FLIP_FILTER", 1)
                } else {
                    source
                };
                source
                    .define("MAX_PRODUCTS", MAX_PRODUCTS)
                    .define("PRODUCTS", products)
                    .define("SRC_TILED", u32::from(reads_source_tiled(p)))
            }
        }
    }

    /// `p`'s kernels on this config of its products' layer (`p`, or `packed`'s layer): the
    /// products', as solution runs them (on `p`'s tensors in place, else on the layer's own),
    /// and the packing kernel around them where they do not take `p`'s in place.
    fn sources(self, p: &ConvProblem, packed: Option<&Packed>) -> (KernelSource, Option<KernelSource>) {
        let layer = packed.map_or(p, Packed::layer);
        let around = packed.filter(|packed| !packed.in_place(self.tile.writes_held_filter()));
        let user = if around.is_some() { layer } else { p };
        (self.source(layer, user), around.map(|packed| packed.source(p.dtype)))
    }

    /// Every config for `p`'s direction.
    fn all(p: &ConvProblem) -> Vec<WgmmaConfig> {
        let splits: Vec<Split> = Split::all().collect();
        let (unit_taps, row_slices): (&[u32], &[u32]) =
            if p.direction == Direction::BackwardWeight { (&UNIT_TAPS, &[1]) } else { (&[1], &ROW_SLICES) };
        let halos: &[bool] = if p.direction == Direction::BackwardWeight { &[false] } else { &[false, true] };
        // Each tile with and without the halo, and the first stage count's twin at HELD_STAGES.
        let variants = move |tile: Tile| {
            let held = (tile.st == STAGES[0]).then_some(Tile { st: HELD_STAGES, halo: true, ..tile });
            halos.iter().map(move |&halo| Tile { halo, ..tile }).chain(held.filter(|_| halos.contains(&true)))
        };
        let tiles = Tile::all(p.dtype).flat_map(|tile| {
            unit_taps
                .iter()
                .flat_map(move |&taps| row_slices.iter().flat_map(move |&mr| variants(Tile { taps, mr, ..tile })))
        });
        tiles
            .flat_map(|tile| splits.iter().map(move |&split| WgmmaConfig { tile, split }))
            .filter(|c| c.check(p).is_ok())
            .collect()
    }
}

/// Reduction elements in one 128-byte row: 64 of a 16-bit type, 32 of fp32 (tf32).
fn row_elements(dtype: DataType) -> u32 {
    ROW_BYTES / dtype.size_bytes() as u32
}

/// TMA im2col of a 1D, 2D or 3D source (a rank 3, 4 or 5 map): the bounding box's corners
/// are signed and its offsets (the tap times the dilation) unsigned numbers of this many bits
/// (PTX ISA, im2col mode).
const IM2COL_BITS: [u32; 3] = [16, 8, 5];

fn corner_range(spatial: usize) -> std::ops::RangeInclusive<i64> {
    let half = 1i64 << (IM2COL_BITS[spatial - 1] - 1);
    -half..=half - 1
}

fn max_offset(spatial: usize) -> i64 {
    (1i64 << IM2COL_BITS[spatial - 1]) - 1
}

/// Backward-data's taps of one dimension that reach destination positions h with
/// (h + pad) % stride == phase: those with f * dil % stride == phase.
#[derive(Debug, Clone, Copy)]
struct PhaseTaps {
    /// Taps of the phases before this one (the order flip_filter lays them out in).
    before: i64,
    count: i64,
    first: i64,
    /// Between one tap of the phase and the next: stride / gcd(stride, dil).
    step: i64,
}

impl PhaseTaps {
    fn new(taps: i64, dil: i64, stride: i64, phase: i64) -> Self {
        let of = |f: i64| f * dil % stride;
        let before = (0..taps).filter(|&f| of(f) < phase).count() as i64;
        let mut mine = (0..taps).filter(|&f| of(f) == phase);
        let first = mine.next();
        PhaseTaps {
            before,
            count: i64::from(first.is_some()) + mine.count() as i64,
            first: first.unwrap_or(0),
            step: stride / gcd(stride, dil),
        }
    }
}

/// One spatial dimension of a product: for backward-data's phase, the destination positions
/// origin, origin + stride, ... and the forward read that gives them.
#[derive(Debug, Clone, Copy)]
struct ProductDim {
    origin: i64,
    count: i64,
    taps: PhaseTaps,
    pad: i64,
    dil: i64,
}

impl ProductDim {
    /// Dimension `i` of backward-data's phase `phase`. dx[h] sums dy[(h + pad - f * dil) /
    /// stride] w[f] over the taps that divide; with h = origin + stride * j and the phase's
    /// taps f = first + step * t (step = stride / gcd), that is dy[j + base - t * dil'] with
    /// dil' = dil / gcd, and with the taps flipped (t' = count - 1 - t) a forward read of dy
    /// at unit stride, dilation dil' and padding (count - 1) * dil' - base.
    fn backward_data_phase(geo: &Geometry, i: usize, phase: i64) -> Self {
        let (extent, stride, pad, dil) =
            (geo.input[i] as i64, geo.stride[i] as i64, geo.pad[i] as i64, geo.dilation[i] as i64);
        let origin = (phase - pad).rem_euclid(stride);
        let count = if origin < extent { (extent - origin + stride - 1) / stride } else { 0 };
        let taps = PhaseTaps::new(geo.filter[i] as i64, dil, stride, phase);
        let reduced_dil = dil / gcd(stride, dil);
        let base = (origin + pad - taps.first * dil) / stride;
        ProductDim { origin, count, taps, pad: (taps.count - 1) * reduced_dil - base, dil: reduced_dil }
    }
}

fn gcd(a: i64, b: i64) -> i64 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

/// The kernel's HaloTile (HALO) for a product: the pitch (the source's padded width, the
/// destination's width plus the filter's reach), the source rows a unit loads (its
/// destination rows, as many whole ones as the tile holds, and the filter's reach), and units
/// per image.
#[derive(Debug, Clone, Copy)]
struct HaloTile {
    pitch: u32,
    loaded: u32,
    per_image: u32,
}

impl HaloTile {
    /// How far the filter reaches along dimension `i` past a destination pixel's first tap.
    fn reach(params: &ConvParams, i: usize) -> u32 {
        ((params.filter[i] - 1).max(0) * params.dilation[i]) as u32
    }

    fn of(params: &ConvParams, tile: Tile) -> Option<HaloTile> {
        let reach = |i: usize| HaloTile::reach(params, i);
        let (height, width) = (params.output[1] as u32, params.output[2] as u32);
        let pitch = width + reach(2);
        let rows = (tile.rows() / pitch).min(height);
        (rows > 0).then(|| HaloTile { pitch, loaded: rows + reach(1), per_image: height.div_ceil(rows) })
    }

    /// One halo buffer's bytes: the rows the tile's MMAs read at the furthest tap (past the
    /// loaded ones, for rows past the unit's), 1024-byte aligned.
    fn buffer_bytes(self, params: &ConvParams, tile: Tile) -> u32 {
        let reach = |i: usize| HaloTile::reach(params, i);
        ((tile.rows() + reach(1) * self.pitch + reach(2)) * ROW_BYTES).next_multiple_of(1024)
    }

    /// Why `config` cannot stage `p`'s source with its halo, if it cannot.
    fn check(p: &ConvProblem, config: WgmmaConfig) -> std::result::Result<(), String> {
        if p.direction == Direction::BackwardWeight || p.dtype == DataType::Tf32 || p.dims.len() != 2 {
            return Err("hl 1 takes 2D forward and backward-data in 16-bit types".into());
        }
        if config.split != UNSPLIT {
            return Err("hl 1 takes unsplit configs".into());
        }
        if reads_source_tiled(p) {
            return Err(
                "hl 1 is for filters wider than 1x1 or padded (1x1 layers read their source as a matrix)".into()
            );
        }
        let products = Product::all(p);
        let [product] = products.as_slice() else {
            return Err("hl 1 takes one product (backward-data at unit stride)".into());
        };
        if product.params.stride != [1; 3] {
            return Err("hl 1 takes unit strides".into());
        }
        let Some(halo) = HaloTile::of(&product.params, config.tile) else {
            let pitch = product.params.output[2] as u32 + HaloTile::reach(&product.params, 2);
            return Err(format!(
                "a destination row on a pitch of {pitch} pixels is longer than the tile's {} rows",
                config.tile.rows()
            ));
        };
        if halo.pitch > MAX_BOX || halo.loaded > MAX_BOX {
            return Err(format!(
                "the halo's box of {} x {} pixels passes TMA's {MAX_BOX} a side",
                halo.pitch, halo.loaded
            ));
        }
        let shared = config.tile.shared_bytes(p.dtype) + 2 * halo.buffer_bytes(&product.params, config.tile);
        if shared > MAX_SHARED_BYTES {
            return Err(format!("two halo buffers and the stages need {shared} bytes of shared memory, a block may have {MAX_SHARED_BYTES}"));
        }
        Ok(())
    }
}

/// One forward product the kernel computes: src (read by im2col) into dst. Forward is one;
/// backward-data is one per sub-pixel phase, one at unit stride.
#[derive(Debug, Clone)]
struct Product {
    params: ConvParams,
    /// Source extents, innermost first: channels, the spatial extents (W, H, D as the rank
    /// has them), images.
    src: Vec<u64>,
    /// Destination pixels (rows of the GEMM).
    rows: u64,
    /// The im2col window's corners, innermost dimension first.
    lower: Vec<i64>,
    upper: Vec<i64>,
    /// Where the destination's first pixel lies in its buffer, in elements.
    dst_offset: u64,
    /// Where the filter matrix starts in the buffer it is read from (w forward, the workspace
    /// flip_filter writes for tf32 backward-data), in elements.
    filter_offset: u64,
    /// Which tap of w the product's taps read (16-bit backward-data reads w itself).
    tap_map: TapMap,
}

impl Product {
    fn new(
        p: &ConvProblem,
        params: ConvParams,
        src_extent: [usize; 3],
        src_channels: u32,
        dst_offset: u64,
        filter_offset: u64,
        tap_map: TapMap,
    ) -> Self {
        let active = 3 - p.dims.len()..3;
        let (mut lower, mut upper) = (Vec::new(), Vec::new());
        for i in active.clone().rev() {
            let (src, dst, stride, pad) = (
                src_extent[i] as i64,
                i64::from(params.output[i]),
                i64::from(params.stride[i]),
                i64::from(params.pad[i]),
            );
            // At tap offset zero the window starts at -pad and ends at the last destination
            // position's first tap, (dst - 1) * stride - pad, written as an offset from the extent.
            lower.push(-pad);
            upper.push((dst - 1) * stride + 1 - src - pad);
        }
        let src = std::iter::once(u64::from(src_channels))
            .chain(active.rev().map(|i| src_extent[i] as u64))
            .chain([u64::from(p.n)])
            .collect();
        let rows = params.n as u64 * params.output.iter().map(|&o| o as u64).product::<u64>();
        Product { params, src, rows, lower, upper, dst_offset, filter_offset, tap_map }
    }

    /// The products `p` runs as, the longest reductions first (a persistent grid takes their
    /// units first; those without taps come last).
    fn all(p: &ConvProblem) -> Vec<Product> {
        let geo = Geometry::new(p);
        let params = ConvParams::new(p);
        if p.direction != Direction::BackwardData {
            let identity = TapMap { origin: [0; 3], step: [1; 3], filter: params.filter };
            return vec![Product::new(p, params, geo.input, p.c, 0, 0, identity)];
        }
        let phases: [Vec<ProductDim>; 3] = std::array::from_fn(|i| {
            (0..geo.stride[i] as i64).map(|r| ProductDim::backward_data_phase(&geo, i, r)).collect()
        });
        let filter = geo.filter.map(|f| f as i64);
        let group_filter = (geo.g * geo.cg * geo.kg) as i64;
        let mut products = Vec::new();
        for d in &phases[0] {
            for h in &phases[1] {
                for w in &phases[2] {
                    let dims = [d, h, w];
                    if dims.iter().any(|dim| dim.count == 0) {
                        continue;
                    }
                    let phase = ConvParams {
                        cg: params.kg,
                        kg: params.cg,
                        input: params.output,
                        output: dims.map(|dim| dim.count as i32),
                        filter: dims.map(|dim| dim.taps.count as i32),
                        stride: [1; 3],
                        pad: dims.map(|dim| dim.pad as i32),
                        dilation: dims.map(|dim| dim.dil as i32),
                        xs: params.ys,
                        ys: std::array::from_fn(
                            |j| if j < 2 { params.xs[j] } else { params.xs[j] * params.stride[j - 2] },
                        ),
                        ..params
                    };
                    let dst_offset = (0..3).map(|i| dims[i].origin * i64::from(params.xs[2 + i])).sum::<i64>() as u64;
                    let tap_offset = d.taps.before * filter[1] * filter[2]
                        + d.taps.count * (h.taps.before * filter[2] + h.taps.count * w.taps.before);
                    // The phase's taps f = first + step x t, walked flipped.
                    let tap_map = TapMap {
                        origin: dims.map(|dim| (dim.taps.first + dim.taps.step * (dim.taps.count - 1)) as i32),
                        step: dims.map(|dim| -dim.taps.step as i32),
                        filter: params.filter,
                    };
                    products.push(Product::new(
                        p,
                        phase,
                        geo.output,
                        p.k,
                        dst_offset,
                        (tap_offset * group_filter) as u64,
                        tap_map,
                    ));
                }
            }
        }
        products.sort_by_key(|product| std::cmp::Reverse(product.blocks(p.dtype)));
        products
    }

    fn taps(&self) -> u32 {
        self.params.filter.iter().map(|&f| f as u32).product()
    }

    /// A phase no tap reaches: the kernel stores zeros there.
    fn has_taps(&self) -> bool {
        self.taps() > 0
    }

    /// Source channels per group (the reduction's per tap) and destination channels per group.
    fn channels(&self) -> (u32, u32) {
        (self.params.cg as u32, self.params.kg as u32)
    }

    /// The filter's extents, innermost first: source channels per group, taps, a row per
    /// destination channel. A reduction block's channels past the group's are the map's
    /// zeros, never the next tap's.
    fn filter_extents(&self) -> [u64; 3] {
        let (src, dst) = self.channels();
        [u64::from(src), u64::from(self.taps()), u64::from(self.params.g as u32 * dst)]
    }

    fn row_tiles(&self, tile: Tile) -> u64 {
        match HaloTile::of(&self.params, tile).filter(|_| tile.halo) {
            Some(halo) => u64::from(halo.per_image) * self.params.n as u64,
            None => self.rows.div_ceil(u64::from(tile.rows())),
        }
    }

    /// The kernel's work units: clusters' worth of row tiles x column tiles x slices x groups.
    fn units(&self, tile: Tile, groups: u32, slices: u32) -> u64 {
        let (_, columns) = self.channels();
        self.row_tiles(tile).div_ceil(u64::from(tile.cl))
            * u64::from(columns.div_ceil(tile.bn))
            * u64::from(slices)
            * u64::from(groups)
    }

    /// The reduction's blocks: a 128-byte row of source channels per tap.
    fn blocks(&self, dtype: DataType) -> u64 {
        let (src, _) = self.channels();
        u64::from(self.taps() * src.div_ceil(row_elements(dtype)))
    }

    /// The most reduction blocks of any of `products` (those a split divides).
    fn longest_reduction(products: &[Product], dtype: DataType) -> u64 {
        products.iter().map(|product| product.blocks(dtype)).max().unwrap_or(0)
    }

    /// Why TMA cannot make this product's im2col loads, if it cannot.
    fn im2col_limits(&self, spatial: usize) -> Result<(), NotApplicable> {
        let reach =
            (0..3).map(|i| i64::from((self.params.filter[i] - 1).max(0) * self.params.dilation[i])).max().unwrap_or(0);
        let max = max_offset(spatial);
        require!(
            reach <= max,
            "taps reach {reach} positions, further than TMA's im2col offsets (up to {max} in {spatial}D)"
        );
        let (corners, lower, upper) = (corner_range(spatial), &self.lower, &self.upper);
        require!(
            lower.iter().chain(upper).all(|c| corners.contains(c)),
            "the im2col window's corners {lower:?} / {upper:?} leave TMA's {corners:?} in {spatial}D"
        );
        Ok(())
    }

    /// The source's map for loads of `pixels` pixels x `channels` channels: tiled where the
    /// kernels read it so (reads_source_tiled), else im2col.
    fn source_map(&self, p: &ConvProblem, channels: u32, pixels: u32) -> SourceMap {
        if reads_source_tiled(p) {
            SourceMap::Tiled([self.src[0], self.src[1..].iter().product(), 1], [channels, pixels, 1])
        } else {
            SourceMap::Im2col(self.im2col(channels, pixels))
        }
    }

    /// The source's im2col map, `channels` x `pixels` per load.
    fn im2col(&self, channels: u32, pixels: u32) -> Im2col {
        let active = 3 - self.lower.len()..3;
        Im2col {
            extents: self.src.clone(),
            lower: self.lower.iter().map(|&c| c as i32).collect(),
            upper: self.upper.iter().map(|&c| c as i32).collect(),
            strides: active.rev().map(|i| self.params.stride[i] as u32).collect(),
            channels,
            pixels,
        }
    }
}

impl WgmmaConfig {
    /// The config a problem starts from on a GPU of `sms` SMs. Forward and backward-data: the
    /// tile and split (of 1, 2 or 4 slices) a wave model of the kernel's time expects to finish
    /// first (see TILE_COSTS), in pairs of CTAs where the product is narrow on one side and has
    /// many rows. Backward-weight: 1x1 layers, and dense ones whose taps are not in threes, by a
    /// wave model of their own (quickest_weight_one_tap); others columns by input channels per
    /// group, rows by output channels, and the fewest slices of the pixels that fill the GPU
    /// while each keeps a few blocks of work; four stages where they fit.
    fn default_for(p: &ConvProblem, sms: u64) -> WgmmaConfig {
        let with_stages = |bn: u32, wg: u32| {
            let tile = |st: u32| Tile { bn, wg, st, cl: 1, persistent: false, taps: 1, mr: 1, halo: false };
            if tile(4).check(p.dtype).is_ok() {
                tile(4)
            } else {
                tile(3)
            }
        };
        let by_channels = |c: u32, wide: bool| match c {
            c if c <= 64 => 64,
            c if c >= 256 && wide => 256,
            _ => 128,
        };
        if p.direction == Direction::BackwardWeight {
            let geo = Geometry::new(p);
            let (kg, cg) = (geo.kg as u32, geo.cg as u32);
            let blocks = |tile: Tile| {
                u64::from(kg.div_ceil(tile.rows()) * cg.div_ceil(tile.bn)) * geo.filter_volume() as u64 * u64::from(p.g)
            };
            let pixel_blocks = (geo.n * geo.output_volume()) as u64 / u64::from(row_elements(p.dtype));
            // Dense filters whose taps do not come in threes have units of one tap, each a 1x1
            // layer's: c384 k768 14x14 2x2 s2 ran its rule's 256-column tiles in 22.1 us on 48
            // SMs (unsplit), the model's 128-column ones in 17.1 on 96 (H100, session 21 sweep).
            let one_tap_units = geo.filter_volume() == 1 || (p.g == 1 && !geo.filter_volume().is_multiple_of(3));
            if one_tap_units {
                if let Some(config) = quickest_weight_one_tap(p, sms) {
                    return config;
                }
            }
            let worth: Vec<u32> =
                SPLITS.into_iter().filter(|&s| s == 1 || u64::from(s) * MIN_BLOCKS_PER_SLICE <= pixel_blocks).collect();
            let most = u64::from(worth[worth.len() - 1]);
            // Where even split as far as is worth it the widest tile's blocks would leave more
            // than half the SMs idle (7x7 layers: 24 blocks of pixels, two slices, and 256-wide
            // tiles left 85% idle), the widest narrower one that fills the GPU, or 64 x 64. tf32's
            // small tiles pay more for their transposition: there the widest that fills half
            // the GPU (five 14x14 1x1 layers on the H100, session-28 sweep: 128 columns in 16
            // slices ran 0.80-0.93x the time of the narrower tiles in 8 the rule took).
            let widest = with_stages(by_channels(cg, true), if kg <= 64 { 1 } else { 2 });
            let narrower: Vec<Tile> = [(128, 2), (128, 1), (64, 1)]
                .map(|(bn, wg)| with_stages(bn, wg))
                .into_iter()
                .filter(|t| t.bn <= widest.bn && t.rows() <= widest.rows())
                .collect();
            let filled = if transposes(p) { sms.div_ceil(2) } else { sms };
            let tile = match narrower.last() {
                Some(&narrowest) if blocks(widest) * most * 2 <= sms => {
                    narrower.iter().copied().find(|&t| blocks(t) * most >= filled).unwrap_or(narrowest)
                }
                _ => widest,
            };
            // Units of three taps where the filter's taps come in threes and the accumulators fit
            // (64 and 128 columns): each block of dy loaded once for three taps, not three times.
            // A unit's block then counts as three in the split's model. tf32's two consumers
            // hold three taps at 64 columns only (see MAX_ACCUMULATORS_BESIDE_TRANSPOSER), and
            // there they ran 0.74-0.94x the time of one tap at 128 on the H100's four 3x3 layers
            // of 128 input channels (session-28 sweep).
            let narrower = if transposes(p) && tile.bn == 128 { 64 } else { tile.bn };
            let three_taps = [tile.bn, narrower]
                .into_iter()
                .flat_map(|bn| [4, 3].map(|st| Tile { bn, st, taps: 3, ..tile }))
                .find(|&tile| WgmmaConfig { tile, split: UNSPLIT }.check(p).is_ok());
            let tile = three_taps.filter(|_| geo.filter_volume().is_multiple_of(3)).unwrap_or(tile);
            let taps = u64::from(tile.taps);
            let slices = quickest_split(
                blocks(tile) / taps,
                u64::from(tile.rows() * tile.bn) * taps,
                pixel_blocks * taps,
                sms,
                &worth,
            );
            let config = WgmmaConfig { tile, split: Split { slices, reduction: Reduction::Atomic } };
            return if config.check(p).is_ok() { config } else { WgmmaConfig { tile, split: UNSPLIT } };
        }
        let products = Product::all(p);
        let Some(largest) = products.iter().max_by_key(|product| product.rows) else {
            return WgmmaConfig { tile: with_stages(128, 2), split: UNSPLIT };
        };
        // The tile and split the wave model (TILE_COSTS, TILE_COSTS_TF32) expects to finish first.
        let model = if p.dtype == DataType::Tf32 { &TILE_COSTS_TF32 } else { &TILE_COSTS };
        let modelled = model.costs.iter().filter_map(|cost| cost.tile(p.dtype).map(|tile| (tile, cost)));
        let candidates = modelled.flat_map(|(tile, cost)| {
            MODELLED_SPLITS
                .map(|slices| (WgmmaConfig { tile, split: Split { slices, reduction: Reduction::Atomic } }, cost))
        });
        let longest = Product::longest_reduction(&products, p.dtype);
        let quickest = candidates
            .filter(|(config, _)| {
                config.check(p).is_ok() && (config.tile.persistent || longest >= MIN_UNOVERLAPPED_BLOCKS)
            })
            .map(|(config, cost)| (modelled_us(&products, p, config, cost, model, sms), config))
            .min_by(|a, b| a.0.total_cmp(&b.0));
        let Some((_, config)) = quickest else {
            return WgmmaConfig { tile: with_stages(128, 2), split: UNSPLIT };
        };
        // Pairs of CTAs sharing the filter's tile where one side of the product has under 64
        // channels and its rows run eight waves or more (the model has no clusters). The H100's
        // 291 dense layers, every default run with and without the pair: these 18 took 0.88x
        // the time (0.58x to 1.04x; the 3D RGB stem 2.36 ms -> 1.71), the other 158 forward and
        // backward-data 1.13x.
        let (reduction, columns) = largest.channels();
        let narrow = reduction.min(columns) < 64 && largest.rows >= CLUSTER_MIN_WAVES * 64 * sms;
        let clustered = WgmmaConfig { tile: Tile { cl: 2, ..config.tile }, split: UNSPLIT };
        if narrow && clustered.check(p).is_ok() {
            clustered
        } else {
            config
        }
    }
}

/// A forward or backward-data tile's time on the GPU: microseconds per reduction block of each
/// wave of units, and per wave (its fill, drain and epilogue). Fitted by bench/wave_model.py to
/// the H100's config sweeps of 181 dense layers (bf16; data/bench/h100-s20-config-sweeps-bf16.csv
/// with session 19's): its picks ran 1.018x the fastest config swept, each layer left out of
/// the fit in turn, against 1.071x for the hand rules it replaced.
struct TileCost {
    bn: u32,
    wg: u32,
    mr: u32,
    persistent: bool,
    per_block_us: f64,
    per_wave_us: f64,
}

const fn cost(bn: u32, wg: u32, mr: u32, persistent: bool, per_block_us: f64, per_wave_us: f64) -> TileCost {
    TileCost { bn, wg, mr, persistent, per_block_us, per_wave_us }
}

impl TileCost {
    /// The costed tile shape at four stages, or three where four do not fit.
    fn tile(&self, dtype: DataType) -> Option<Tile> {
        let tile = |st: u32| Tile {
            bn: self.bn,
            wg: self.wg,
            st,
            cl: 1,
            persistent: self.persistent,
            taps: 1,
            mr: self.mr,
            halo: false,
        };
        [tile(4), tile(3)].into_iter().find(|t| t.check(dtype).is_ok())
    }
}

/// The forward and backward-data wave model of a data type: the tiles' costs, and a split's
/// (zeroing the fp32 workspace and the reduction's launch, and per million destination
/// elements their atomics and the reduction's pass).
struct WaveModel {
    costs: &'static [TileCost],
    split_us: f64,
    split_us_per_million_elements: f64,
}

/// 16-bit types. Persistent where the staging fits four stages (a unit's stores overlap the
/// next one's loads); 256 x 128 tiles not: persistent at three stages they ran 1.00-1.09x the
/// time of the tiles they replaced in the model's first A/B on the H100 (30 layers), which the
/// model did not foresee.
const TILE_COSTS: WaveModel = WaveModel {
    costs: &[
        cost(64, 1, 1, true, 0.324, 0.49),
        cost(64, 2, 1, true, 0.345, 0.85),
        cost(128, 1, 1, true, 0.359, 0.90),
        cost(128, 2, 1, true, 0.404, 1.56),
        cost(256, 1, 1, true, 0.439, 1.81),
        cost(256, 2, 1, true, 0.604, 2.66),
        cost(64, 2, 2, true, 0.458, 1.66),
        cost(128, 2, 2, false, 0.523, 3.77),
    ],
    split_us: 2.16,
    split_us_per_million_elements: 6.78,
};

/// tf32 (blocks of 32 channels; 128 x 256 tiles stage too much fp32 to be persistent):
/// fitted by `bench/wave_model.py --tf32` to the H100's session-28 sweep of these tiles and
/// splits on the 98 dense forward and backward-data layers they apply to
/// (data/bench/h100-s28-config-sweeps-tf32.csv, `s28-tf32-fwd-bwd-data-sweep`): picks 1.025x
/// the fastest config swept, where the 16-bit costs picked 1.053x (backward-data 1.067x).
const TILE_COSTS_TF32: WaveModel = WaveModel {
    costs: &[
        cost(64, 1, 1, true, 0.161, 0.59),
        cost(64, 2, 1, true, 0.220, 1.06),
        cost(128, 1, 1, true, 0.237, 0.93),
        cost(128, 2, 1, true, 0.300, 1.61),
        cost(256, 1, 1, true, 0.336, 1.62),
        cost(64, 2, 2, true, 0.335, 2.08),
        cost(128, 2, 2, false, 0.434, 3.98),
    ],
    split_us: 1.51,
    split_us_per_million_elements: 8.48,
};

/// The splits the model was fitted on.
const MODELLED_SPLITS: [u32; 3] = [1, 2, 4];

/// Reduction blocks from which a forward or backward-data product may run tiles that are not
/// persistent: with fewer, a unit's stores no longer overlapped by the next one's loads cost
/// more than the model says (session 19's A/B: 1x1 layers of 128 columns and 1-6 blocks ran
/// 1.09-1.35x slower in 256 x 128 tiles than in persistent 128 x 128).
const MIN_UNOVERLAPPED_BLOCKS: u64 = 8;

/// The wave model's time of `config` on `p`: per launch, ceil(units / SMs) waves of its
/// products with taps, each of their slices' reduction blocks (on average over the units) and
/// the wave's own cost; and the split's cost.
fn modelled_us(
    products: &[Product],
    p: &ConvProblem,
    config: WgmmaConfig,
    cost: &TileCost,
    model: &WaveModel,
    sms: u64,
) -> f64 {
    let slices = config.split.slices;
    let launches = products.chunks(MAX_PRODUCTS).map(|launch| {
        let with_taps = launch.iter().filter(|product| product.has_taps());
        let (units, blocks) = with_taps.fold((0, 0), |(units, blocks), product| {
            let mine = product.units(config.tile, p.g, slices);
            (units + mine, blocks + mine * product.blocks(p.dtype))
        });
        let mean_blocks = if units > 0 { blocks as f64 / units as f64 } else { 0.0 };
        units.div_ceil(sms) as f64 * (mean_blocks / f64::from(slices) * cost.per_block_us + cost.per_wave_us)
    });
    let split = if slices > 1 {
        model.split_us + model.split_us_per_million_elements * destination_elements(p) as f64 / 1e6
    } else {
        0.0
    };
    launches.sum::<f64>() + split
}

/// Waves of 64-row tiles from which a narrow forward or backward-data product runs in clusters
/// (see `default_for`).
const CLUSTER_MIN_WAVES: u64 = 8;

/// Backward-weight's epilogue per slice, in blocks of pixels' worth of the tile's MMAs: each
/// slice adds its tile of fp32 sums into the workspace.
const SLICE_EPILOGUE_BLOCKS: u64 = 8;

/// The atomics of split slices queue GPU-wide, whatever the waves: a block's time per this
/// many sums added. Fitted to the H100 on the 97 dense backward-weight layers with scalar
/// atomics (131072), then doubled as the kernel went to one float2 atomic a pair: of the ten
/// layers where the two choose differently, the doubled one's choice ran faster on nine (c64
/// k64 56x56 3x3 ks64 0.0584 ms against ks32 0.0628; 3D c128 8x28x28 ks32 0.371 against ks4
/// 0.390).
const SUMS_PER_ATOMIC_BLOCK: u64 = 262_144;

/// Of `candidates`, the slices of a `reduction`-block reduction that finish first when `tiles`
/// tiles of `tile_sums` sums split that far run on `sms` SMs a wave at a time: ceil(tiles x s /
/// sms) waves, each of reduction / s blocks and one epilogue, and split, the atomics of all
/// tiles x s slices; ties go to fewer slices. On the H100 a count just past a whole wave costs
/// a wave more (the c768 k3072 7x7 1x1 layer's 72 tiles took 0.0511 ms in two slices, 144
/// units on 132 SMs, and 0.0241 ms unsplit), and so do the atomics of 64 tiles of 128 x 256
/// in one wave (c1024 k2048 7x7: 0.0384 ms in two slices).
fn quickest_split(tiles: u64, tile_sums: u64, reduction: u64, sms: u64, candidates: &[u32]) -> u32 {
    let time = |s: u32| {
        let s = u64::from(s);
        let atomics = if s > 1 { (tiles * s * tile_sums).div_ceil(SUMS_PER_ATOMIC_BLOCK) } else { 0 };
        (tiles * s).div_ceil(sms) * (reduction.div_ceil(s) + SLICE_EPILOGUE_BLOCKS) + atomics
    };
    candidates.iter().copied().min_by_key(|&s| (time(s), s)).unwrap_or(1)
}

/// The backward-weight wave model of units of one tap (see quickest_weight_one_tap): the tiles'
/// times (as TILE_COSTS; not persistent), and a split's cost, a constant and per million fp32
/// sums of the slices' tiles: by atomics (the zeroing, the reduction's launch and the atomics),
/// and in the cluster.
struct WeightOneTapModel {
    costs: [TileCost; 6],
    split_us: f64,
    split_us_per_million_sums: f64,
    cluster_sums_us: f64,
    cluster_sums_us_per_million: f64,
}

/// 16-bit types: fitted by `bench/wave_model.py --weight` to the 40 layers of up to 100 blocks
/// of pixels, every one of the 30 configs it models timed on the H100 in session 24
/// (data/bench/h100-s24-*, `s24-small-1x1-bwd-weight`): picks 1.007x the fastest config swept
/// (the session-21 fit, on kernels before their division-free stepping, 1.049x; c192 k1152 7x7
/// took 9.2 us where 7.5 was there).
const WEIGHT_1X1: WeightOneTapModel = WeightOneTapModel {
    costs: [
        cost(64, 1, 1, false, 0.192, 1.60),
        cost(64, 2, 1, false, 0.275, 1.91),
        cost(128, 1, 1, false, 0.230, 1.95),
        cost(128, 2, 1, false, 0.319, 2.51),
        cost(256, 1, 1, false, 0.321, 2.91),
        cost(256, 2, 1, false, 0.604, 3.45),
    ],
    split_us: 2.44,
    split_us_per_million_sums: 1.74,
    cluster_sums_us: 2.30,
    cluster_sums_us_per_million: 2.32,
};

/// tf32 (transposed tiles, blocks of 32 pixels): fitted by `bench/wave_model.py --weight
/// --tf32` to the 10 such layers of the H100's session-28 sweep
/// (data/bench/h100-s28-config-sweeps-tf32.csv, `s28-tf32-bwd-weight-sweep`: the 6 tiles in
/// the splits below): picks 1.012x the fastest config swept (1.017x with each layer left out of
/// the fit), where the 16-bit costs took 1.2-1.3x on the wide 7x7 layers (c1024 k2048: 45.3 us
/// against 35.6 in two slices summed in the cluster).
const WEIGHT_1X1_TF32: WeightOneTapModel = WeightOneTapModel {
    costs: [
        cost(64, 1, 1, false, 0.443, 1.69),
        cost(64, 2, 1, false, 0.579, 2.14),
        cost(128, 1, 1, false, 0.550, 2.04),
        cost(128, 2, 1, false, 0.827, 2.66),
        cost(256, 1, 1, false, 0.899, 2.92),
        cost(256, 2, 1, false, 1.079, 3.78),
    ],
    split_us: 3.16,
    split_us_per_million_sums: 1.14,
    cluster_sums_us: 2.50,
    cluster_sums_us_per_million: 1.05,
};

/// The splits those sweeps took: by atomics, and two slices summed in the cluster (four wait
/// on GPCs with room for clusters of four: 1.2-1.6x the atomics' time there).
const WEIGHT_1X1_SPLITS: [Split; 5] = [
    UNSPLIT,
    Split { slices: 2, reduction: Reduction::Atomic },
    Split { slices: 4, reduction: Reduction::Atomic },
    Split { slices: 8, reduction: Reduction::Atomic },
    Split { slices: 2, reduction: Reduction::Cluster },
];

/// The most blocks of pixels the model decides for. In the H100 A/B over 97 backward-weight
/// layers (session 21) its picks ran 0.88x the rule's time on the 22 layers of 7x7 and 14x14
/// pixels it changed, but 1.0-2.4x on 28x28 and up to 11x on 112x112, where the rule's 16 to
/// 128 slices lie outside the splits it models.
const WEIGHT_1X1_MAX_PIXEL_BLOCKS: u64 = 100;

/// The backward-weight tile and split the 1x1 model expects to finish first where each unit
/// sums one tap: ceil(units / SMs) waves of tiles (of every tap) x slices, each of its slice's
/// blocks of pixels and the wave's own cost, and a split's cost. None past the pixels it
/// decides for.
fn quickest_weight_one_tap(p: &ConvProblem, sms: u64) -> Option<WgmmaConfig> {
    let geo = Geometry::new(p);
    let pixel_blocks = pixel_blocks(p);
    if pixel_blocks > WEIGHT_1X1_MAX_PIXEL_BLOCKS {
        return None;
    }
    let model = if transposes(p) { &WEIGHT_1X1_TF32 } else { &WEIGHT_1X1 };
    let modelled = |config: WgmmaConfig, cost: &TileCost| {
        let tiles = (geo.kg as u64).div_ceil(u64::from(config.tile.rows()))
            * (geo.cg as u64).div_ceil(u64::from(config.tile.bn))
            * geo.filter_volume() as u64
            * u64::from(p.g);
        let slices = u64::from(config.split.slices);
        let units = tiles * slices;
        let waves =
            units.div_ceil(sms) as f64 * (pixel_blocks as f64 / slices as f64 * cost.per_block_us + cost.per_wave_us);
        let sums = (units * u64::from(config.tile.rows() * config.tile.bn)) as f64;
        waves
            + match (slices, config.split.reduction) {
                (1, _) => 0.0,
                (_, Reduction::Cluster) => model.cluster_sums_us + model.cluster_sums_us_per_million * sums / 1e6,
                _ => model.split_us + model.split_us_per_million_sums * sums / 1e6,
            }
    };
    let tiles = model.costs.iter().filter_map(|cost| cost.tile(p.dtype).map(|tile| (tile, cost)));
    let candidates = tiles.flat_map(|(tile, cost)| WEIGHT_1X1_SPLITS.map(|split| (WgmmaConfig { tile, split }, cost)));
    candidates
        .filter(|(config, _)| config.check(p).is_ok())
        .map(|(config, cost)| (modelled(config, cost), config))
        .min_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, config)| config)
}

impl IgemmWgmma {
    fn default_config(&self, p: &ConvProblem) -> WgmmaConfig {
        WgmmaConfig::default_for_user(p, u64::from(self.device.sm_count))
    }
}

impl WgmmaConfig {
    /// A blocked layer's forward or backward-data staged with its halo, its filter's stages
    /// held (256 x 64 tiles at 9 stages), where that runs (2D, unit stride, a 3x3 filter of one
    /// chunk) and a unit's rows are mostly the layer's pixels (MIN_HALO_USE). On the H100,
    /// ResNeXt's layers at 56x56, 28x28 and 14x14 (4 to 16 channels a group) took 0.82x, 0.91x
    /// and 0.77x the time of the im2col default forward, 0.81x, 0.88x and 0.75x backward-data;
    /// at 7x7 (256 rows for 49 pixels) 2x.
    fn held_halo(layer: &ConvProblem) -> Option<WgmmaConfig> {
        let tile = Tile { bn: 64, wg: 2, st: HELD_STAGES, cl: 1, persistent: true, taps: 1, mr: 2, halo: true };
        let held = WgmmaConfig { tile, split: UNSPLIT };
        held.check(layer).ok()?;
        let product = Product::all(layer).swap_remove(0);
        let halo = HaloTile::of(&product.params, tile)?;
        let pixels = (product.params.output[1] * product.params.output[2]) as f64;
        let used = pixels / f64::from(halo.per_image * tile.rows());
        (product.blocks(layer.dtype) == u64::from(HELD_STAGES) && used >= MIN_HALO_USE).then_some(held)
    }

    /// A blocked layer's forward or backward-data default on im2col's loads (one product, the
    /// wave model's 256 x 64 tiles), fitted to its waves: where the units fit one wave, a CTA
    /// each (ps 0) at 5 stages (H100, ResNeXt's c1024 g32: 0.96x the time forward at 7x7 and
    /// 14x14 stride 2, 0.98x backward-data at 7x7); else forward takes 128-row tiles
    /// (bn64_wg1_st3_cl1_ps1_mr2) where their waves' rows cost less at HALF_TILE_COST (c512 g32
    /// 28x28 stride 2: 200 units in two waves of 256 rows against 392 in three of 128, 0.88x
    /// the time).
    fn blocked_waves(self, layer: &ConvProblem, sms: u64) -> WgmmaConfig {
        let wide = Tile { bn: 64, wg: 2, st: 4, cl: 1, persistent: true, taps: 1, mr: 2, halo: false };
        if self != (WgmmaConfig { tile: wide, split: UNSPLIT }) || Product::all(layer).len() != 1 {
            return self;
        }
        let (_, units) = self.work(layer);
        let lone = WgmmaConfig { tile: Tile { st: 5, persistent: false, ..wide }, split: UNSPLIT };
        if units <= sms {
            return if lone.check(layer).is_ok() { lone } else { self };
        }
        let narrow = WgmmaConfig { tile: Tile { wg: 1, st: 3, ..wide }, split: UNSPLIT };
        let rows = |config: WgmmaConfig| (config.work(layer).1.div_ceil(sms) * u64::from(config.tile.rows())) as f64;
        let narrower = layer.direction == Direction::Forward && rows(narrow) * HALF_TILE_COST < rows(self);
        if narrower && narrow.check(layer).is_ok() {
            narrow
        } else {
            self
        }
    }

    /// The default for the user's `p`: its lowered layer's, except that a blocked layer's
    /// backward-weight splits its pixels only as far as one wave of units fills the SMs. The
    /// H100's five ResNeXt layers blocked so (4 to 16 channels a group) ran fastest there, at
    /// ks 4 to 16, where the split's model (quickest_split) takes 32 to 64 and 1.27-1.36x as
    /// long (two and three waves; why more waves cost more here than on dense layers is open).
    fn default_for_user(p: &ConvProblem, sms: u64) -> WgmmaConfig {
        let packed = Packed::of(p);
        let layer = packed.as_ref().map_or(p, Packed::layer);
        if let Some(Packed::Groups(_)) = &packed {
            if p.direction != Direction::BackwardWeight {
                return WgmmaConfig::held_halo(layer)
                    .unwrap_or_else(|| WgmmaConfig::default_for(layer, sms).blocked_waves(layer, sms));
            }
        }
        let config = WgmmaConfig::default_for(layer, sms);
        if !packed.as_ref().is_some_and(|packed| packed.in_place(config.tile.writes_held_filter())) {
            return config;
        }
        let (_, units) = WgmmaConfig { split: UNSPLIT, ..config }.work(layer);
        let slices =
            SPLITS.into_iter().filter(|&s| s <= config.split.slices && units * u64::from(s) <= sms).max().unwrap_or(1);
        let one_wave = WgmmaConfig { split: Split { slices, ..config.split }, ..config };
        if one_wave.check(layer).is_ok() {
            one_wave
        } else {
            config
        }
    }
}

impl Solver for IgemmWgmma {
    fn id(&self) -> &'static str {
        "cuda.igemm_wgmma"
    }

    fn applicable(&self, p: &ConvProblem) -> Result<(), NotApplicable> {
        let (major, minor) = self.device.capability;
        require!(
            (major, minor) == (9, 0),
            "needs an sm_90 GPU (wgmma and TMA built for sm_90a), this is sm_{major}{minor}"
        );
        require!(p.layout == Layout::Nhwc, "needs a channels-last layout (NWC, NHWC, NDHWC)");
        require!(
            matches!(p.dtype, DataType::Bf16 | DataType::F16 | DataType::Tf32),
            "needs bf16, fp16 or tf32 operands (wgmma has no fp32 multiply)"
        );
        if let Some(packed) = Packed::of(p) {
            return self.applicable(packed.layer()).map_err(|reason| packed.explain(reason));
        }
        let g = Geometry::new(p);
        require!(
            g.stride.iter().all(|&s| s <= MAX_STRIDE),
            "strides over {MAX_STRIDE} are beyond TMA's element strides"
        );
        let products = Product::all(p);
        require!(products.first().is_some_and(Product::has_taps), "no destination pixel is reached by a filter tap");
        for product in products.iter().filter(|product| product.has_taps()) {
            product.im2col_limits(p.dims.len())?;
        }
        let narrowest = WgmmaConfig {
            tile: Tile {
                bn: COLUMNS[0],
                wg: CONSUMERS[0],
                st: STAGES[0],
                cl: 1,
                persistent: false,
                taps: 1,
                mr: 1,
                halo: false,
            },
            split: UNSPLIT,
        };
        let (_, units) = narrowest.work(p);
        require!(units <= MAX_GRID_X, "{units} work units at the smallest tile exceed the grid");
        // The kernels count pixels in 32 bits, a cluster's row tiles past the last included.
        let pixels = (g.n * g.output_volume().max(g.input_volume())) as u64;
        require!(pixels <= MAX_GRID_X - 512, "{pixels} pixels are too many for the kernels' 32-bit indices");
        if p.direction == Direction::BackwardWeight {
            let (cg, kg) = (g.cg as u32, g.kg as u32);
            require!(cg.is_multiple_of(8) && kg.is_multiple_of(8), "needs the input and output channels per group multiples of 8 (16-byte rows and paired stores), got {cg} and {kg}");
            return Ok(());
        }
        let (src, dst) = products[0].channels();
        let (row, aligned) = (row_elements(p.dtype), 16 / p.dtype.size_bytes() as u32);
        require!(src.is_multiple_of(aligned), "needs the channels it reduces per group a multiple of {aligned} (16-byte pixel and filter rows for TMA), got {src}");
        // A reduction block reads a 128-byte row of channels at each tap: past a dense layer's
        // last channel TMA reads zeros, but past a group's it would read the next group's.
        require!(p.g == 1 || src.is_multiple_of(row), "needs a grouped layer's channels it reduces per group a multiple of {row} (one 128-byte TMA row per tap), got {src}");
        require!(
            dst.is_multiple_of(8),
            "needs the channels it writes per group a multiple of 8 (16-byte filter rows and paired stores), got {dst}"
        );
        if p.direction == Direction::BackwardData {
            require!(
                (p.g as usize * g.filter_volume()) as u64 <= MAX_GRID_YZ,
                "too many groups x taps for the filter transpose's grid"
            );
        }
        Ok(())
    }

    fn workspace_bytes(&self, p: &ConvProblem, config: &Config) -> u64 {
        let sms = self.device.sm_count;
        match Packed::of(p) {
            None => products_workspace(p, config, p, sms),
            Some(packed) if packed.in_place(writes_held_filter(packed.layer(), config)) => {
                products_workspace(packed.layer(), config, p, sms)
            }
            Some(packed) => packed.workspace_bytes(products_workspace(packed.layer(), config, packed.layer(), sms)),
        }
    }

    fn default_config(&self, p: &ConvProblem) -> Config {
        self.default_config(p).to_config(p.direction)
    }

    fn configs<'a>(&'a self, p: &'a ConvProblem) -> Box<dyn Iterator<Item = Config> + 'a> {
        Box::new(WgmmaConfig::all(&lowered(p)).into_iter().map(|c| c.to_config(p.direction)))
    }

    fn check_config(&self, p: &ConvProblem, config: &Config) -> Result<()> {
        WgmmaConfig::from_config(&lowered(p), config).map(|_| ())
    }

    builds_from_kernel!();
}

impl BuiltFrom for IgemmWgmma {
    fn device(&self) -> &CudaDevice {
        &self.device
    }

    fn kernels(&self, p: &ConvProblem, config: &Config) -> Result<Vec<KernelSource>> {
        let packed = Packed::of(p);
        let layer = packed.as_ref().map_or(p, Packed::layer);
        let (products, around) = WgmmaConfig::from_config(layer, config)?.sources(p, packed.as_ref());
        Ok(std::iter::once(products).chain(around).collect())
    }
}

impl Solve<Cuda> for IgemmWgmma {
    fn solution(&self, p: &ConvProblem, config: &Config) -> Result<Box<dyn Invoker<Cuda>>> {
        match Packed::of(p) {
            None => self.products(p, config, p),
            Some(packed) if packed.in_place(writes_held_filter(packed.layer(), config)) => {
                self.products(packed.layer(), config, p)
            }
            Some(packed) => {
                let layer = packed.layer();
                let (inner, workspace) = (
                    self.products(layer, config, layer)?,
                    products_workspace(layer, config, layer, self.device.sm_count),
                );
                packed.invoker(&self.device, p.dtype, inner, workspace)
            }
        }
    }
}

/// The workspace of `p`'s products, which write `user`'s destination (see IgemmWgmma::products),
/// on `sms` SMs.
fn products_workspace(p: &ConvProblem, config: &Config, user: &ConvProblem, sms: u32) -> u64 {
    let Ok(config) = WgmmaConfig::from_config(p, config) else { return 0 };
    match p.direction {
        Direction::BackwardData if !reads_filter_directly(p) => {
            flipped_filter_start(p, config.split) + p.weight_elements() * p.dtype.size_bytes() as u64
        }
        _ if config.split.reduction == Reduction::StreamK => config.stream_k(p, sms).workspace_bytes(config.tile),
        _ => config.split.workspace_bytes(destination_elements(user)),
    }
}

impl IgemmWgmma {
    /// The products of `p` (a layer as it runs, not packed), on `user`'s tensors: `p`'s own,
    /// or where `p` is the blocked twin of `user`, its filter read from w as blocks
    /// (forward and backward-data) or its gradient's diagonal blocks stored into w
    /// (backward-weight).
    fn products(&self, p: &ConvProblem, config: &Config, user: &ConvProblem) -> Result<Box<dyn Invoker<Cuda>>> {
        let config = WgmmaConfig::from_config(p, config)?;
        let (WgmmaConfig { tile, split }, source) = (config, config.source(p, user));
        let shared = tile.shared_bytes(p.dtype);
        let block_dim = (128 * (tile.wg + 1), 1, 1);
        let sms = self.device.sm_count;
        if p.direction == Direction::BackwardWeight {
            let function = self.device.function(&source, "igemm_wgmma_weight")?;
            launch::allow_shared(&function, shared, self.id())?;
            let geo = Geometry::new(p);
            let (_, units) = config.work(p);
            let stream_k = (split.reduction == Reduction::StreamK).then(|| config.stream_k(p, sms));
            let ctas = stream_k.map_or_else(|| tile.grid(units, sms), |stream_k| stream_k.ctas as u32);
            let launch = LaunchConfig { grid_dim: (ctas, 1, 1), block_dim, shared_mem_bytes: shared };
            let reduce = split.reduce(destination_elements(user), &self.device, &source)?;
            let product = Product::all(p).swap_remove(0);
            // The filter stored into is the user's: its strides, and its groups' channels.
            let params = ConvParams { ws: ConvParams::new(user).ws, ..product.params };
            let invoker = WeightInvoker {
                function,
                launch,
                dy: ((geo.n * geo.output_volume()) as u64, u64::from(p.k)),
                // Each CTA of a cluster loads its share of x's pixels.
                x: product.source_map(p, row_elements(p.dtype), row_elements(p.dtype) / tile.cl),
                params,
                groups: ((user.k / user.g) as i32, user.c_per_group() as i32),
                dtype: p.dtype,
                splits: split.slices as i32,
                reduce,
                stream_flag_bytes: stream_k.map_or(0, |stream_k| stream_k.flag_bytes(tile)),
            };
            return Ok(Box::new(invoker));
        }
        let all = Product::all(p);
        let halo = all.first().and_then(|product| HaloTile::of(&product.params, tile)).filter(|_| tile.halo);
        let shared = shared + halo.map_or(0, |halo| 2 * halo.buffer_bytes(&all[0].params, tile));
        let function = self.device.function(&source, "igemm_wgmma")?;
        launch::allow_shared(&function, shared, self.id())?;
        let geo = Geometry::new(p);
        let direct = reads_filter_directly(p);
        // w itself in boxes of 64 channels c x the cluster's share of 64 output channels k; or
        // the filter matrix (w, or its flipped copy) in boxes of the cluster's share of the
        // column tile's rows x a 128-byte row of the reduction; a blocked layer (`user` its
        // grouped self) in boxes of a group's rows of w.
        let share = if direct { 64 / tile.cl } else { tile.bn / tile.cl };
        let blocked = (user.g != p.g).then(|| (user.k / user.g, user.c_per_group()));
        let filled = filled_filter(user, tile);
        let blocks = match blocked {
            Some((kg, cg)) => FilterBlocks {
                rows: gcd(i64::from(share), i64::from(kg)) as u32,
                group_rows: kg as i32,
                channels: cg as i32,
                w: 0,
            },
            None => FilterBlocks { rows: share, group_rows: 1, channels: 0, w: 0 },
        };
        let filter_box = [if direct { 64 } else { row_elements(p.dtype) }, 1, blocks.rows];
        let one_product = all.len() == 1;
        let destination = stores_tiles(p, config, &all[0], one_product).then(|| {
            let (_, columns) = all[0].channels();
            // A warp stores its 16 rows of each 64-row slice, a 128-byte row of columns at a time.
            ([u64::from(p.g * columns), all[0].rows, 1], [row_elements(p.dtype), 16, 1])
        });
        let launches = all
            .chunks(MAX_PRODUCTS)
            .map(|products| {
                let units = products.iter().map(|product| product.units(tile, p.g, split.slices)).sum();
                let launch =
                    LaunchConfig { grid_dim: (tile.grid(units, sms), 1, 1), block_dim, shared_mem_bytes: shared };
                let products = products
                    .iter()
                    .map(|product| {
                        let source = product.has_taps().then(|| match halo {
                            // A 2D source's channels, columns, rows and images.
                            Some(halo) => SourceMap::Halo(
                                std::array::from_fn(|i| product.src[i]),
                                [row_elements(p.dtype), halo.pitch, halo.loaded, 1],
                            ),
                            None => product.source_map(p, row_elements(p.dtype), tile.rows()),
                        });
                        let (offset, mut extents) = if direct {
                            (0, [geo.cg as u64, geo.filter_volume() as u64, u64::from(p.k)])
                        } else {
                            (product.filter_offset, product.filter_extents())
                        };
                        if let Some((_, cg)) = blocked {
                            extents[0] = u64::from(cg);
                        }
                        let filter = filled.is_none().then_some((offset, extents));
                        ProductLaunch {
                            params: product.params,
                            tap_map: product.tap_map,
                            source,
                            filter,
                            dst_offset: product.dst_offset,
                        }
                    })
                    .collect();
                ProductsLaunch { launch, products }
            })
            .collect();
        let flip = match p.direction {
            Direction::BackwardData if !direct => {
                let launch = LaunchConfig {
                    grid_dim: (
                        (geo.cg as u32).div_ceil(FLIP_TILE),
                        (geo.kg as u32).div_ceil(FLIP_TILE),
                        p.g * geo.filter_volume() as u32,
                    ),
                    block_dim: (FLIP_TILE, FLIP_ROWS, 1),
                    shared_mem_bytes: 0,
                };
                Some(Flip {
                    function: self.device.function(&source, "flip_filter")?,
                    launch,
                    params: ConvParams::new(p),
                })
            }
            _ => None,
        };
        let split = SplitLaunch {
            slices: split.slices as i32,
            mode: split.mode(),
            elements: destination_elements(p) as i32,
            reduce: split.reduce(destination_elements(p), &self.device, &source)?,
            filter_start: flipped_filter_start(p, split),
        };
        Ok(Box::new(WgmmaInvoker {
            function,
            launches,
            one_product,
            destination,
            direction: p.direction,
            dtype: p.dtype,
            filter_box,
            blocks,
            flip,
            split,
        }))
    }
}

/// Backward-data's filter transpose into the workspace, one phase after another.
struct Flip {
    function: CudaFunction,
    launch: LaunchConfig,
    /// The convolution's own parameters.
    params: ConvParams,
}

/// Up to MAX_PRODUCTS products in one grid.
struct ProductsLaunch {
    launch: LaunchConfig,
    products: Vec<ProductLaunch>,
}

/// How the kernels read the source: by im2col at each tap's offsets, or as a matrix (its
/// extents and box, see reads_source_tiled).
enum SourceMap {
    Im2col(Im2col),
    Tiled([u64; 3], [u32; 3]),
    /// HALO's rectangles: channels, columns, rows and images, and the box of one.
    Halo([u64; 4], [u32; 4]),
}

impl SourceMap {
    fn map(&self, src: Buffer, dtype: DataType) -> Result<TensorMap> {
        match self {
            SourceMap::Im2col(im2col) => TensorMap::im2col(src, dtype, im2col),
            SourceMap::Tiled(extents, boxes) => TensorMap::tiled(src, dtype, *extents, *boxes),
            SourceMap::Halo(extents, boxes) => TensorMap::tiled(src, dtype, *extents, *boxes),
        }
    }
}

/// One product's part of a launch.
struct ProductLaunch {
    params: ConvParams,
    tap_map: TapMap,
    /// The source's map; none where no tap reaches (the kernel reads nothing and stores
    /// zeros, handed the first product's maps).
    source: Option<SourceMap>,
    /// The filter: its offset in elements, and extents; none where the kernel's helper warps
    /// write it from w (FILL_FILTER: a group's channels may be too few for a map's rows).
    filter: Option<(u64, [u64; 3])>,
    dst_offset: u64,
}

/// Forward and backward-data.
struct WgmmaInvoker {
    function: CudaFunction,
    /// The products, the longest reductions first.
    launches: Vec<ProductsLaunch>,
    /// Whether the problem has one product (the kernel's PRODUCTS 1).
    one_product: bool,
    /// The destination as a matrix of pixels x channels that the kernel stores whole tiles
    /// into by TMA (its dst_tiled; see stores_tiles): extents and box.
    destination: Option<([u64; 3], [u32; 3])>,
    direction: Direction,
    dtype: DataType,
    /// The filter box a CTA loads, `blocks.rows` rows of it at a time (see `products`); w's
    /// address is the run's.
    filter_box: [u32; 3],
    blocks: FilterBlocks,
    flip: Option<Flip>,
    split: SplitLaunch,
}

/// How a forward or backward-data invoker splits its reductions.
struct SplitLaunch {
    slices: i32,
    /// The kernel's output mode (see Split::mode).
    mode: i32,
    /// The destination's elements: a slice's fp32 copy in the workspace.
    elements: i32,
    reduce: Option<Reduce>,
    /// Where backward-data's flipped filter starts in the workspace, in bytes.
    filter_start: u64,
}

impl Invoker<Cuda> for WgmmaInvoker {
    fn run(&self, b: &mut CudaBuffers<'_>) -> Result<()> {
        let split = &self.split;
        if let Some(reduce) = &split.reduce {
            reduce.zero(b)?;
        }
        let src = if self.direction == Direction::BackwardData { b.y } else { b.x };
        let filter = match &self.flip {
            Some(flip) => {
                let flipped = b.workspace.from_byte(split.filter_start);
                let args = [Arg::Buffer(b.w), Arg::Buffer(flipped), Arg::Params(&flip.params)];
                launch::kernel(b, &flip.function, flip.launch, &args, "launch cuda.igemm_wgmma's filter transpose")?;
                flipped
            }
            None => b.w,
        };
        let elem = self.dtype.size_bytes() as u64;
        let blocks = FilterBlocks { w: filter.ptr, ..self.blocks };
        let dst = b.output(self.direction);
        // Tensor maps hold the buffers' addresses, so they are made per run (a few microseconds
        // of host time; a captured graph keeps the ones it was captured with).
        let maps = |product: &ProductLaunch| -> Result<Option<(TensorMap, TensorMap)>> {
            let Some(source) = &product.source else { return Ok(None) };
            let source = source.map(src, self.dtype)?;
            let filter = match product.filter {
                Some((offset, extents)) => {
                    TensorMap::tiled(filter.from_byte(offset * elem), self.dtype, extents, self.filter_box)?
                }
                // A map the kernel does not read.
                None => source,
            };
            Ok(Some((source, filter)))
        };
        // Products without taps come after those with them: they take the first one's maps.
        let mut first = None;
        for launch in &self.launches {
            let products = launch
                .products
                .iter()
                .map(|product| {
                    let (src, filter) = match (maps(product)?, first) {
                        (Some(own), _) => {
                            first.get_or_insert(own);
                            own
                        }
                        (None, Some(first)) => first,
                        (None, None) => {
                            return Err(GconvError::Backend(
                                "cuda.igemm_wgmma: a product without taps came before any with them".into(),
                            ))
                        }
                    };
                    Ok(ProductArgs {
                        src,
                        filter,
                        params: product.params,
                        taps: product.tap_map,
                        dst_offset: product.dst_offset as i64,
                    })
                })
                .collect::<Result<Vec<_>>>()?;
            let Some(products) = Products::new(&products) else {
                return Err(GconvError::Backend(format!(
                    "cuda.igemm_wgmma: {} products for one launch",
                    products.len()
                )));
            };
            // A kernel built for one product takes it in parameters of their own (see the kernel),
            // and the destination's map where it stores tiles (else a map it does not read).
            let dst_map;
            let mut args = if self.one_product {
                dst_map = match self.destination {
                    Some((extents, boxes)) => TensorMap::tiled(dst, self.dtype, extents, boxes)?,
                    None => products.src[0],
                };
                let [src, filter] = [&products.src[0], &products.filter[0]].map(|map| Arg::Struct(map));
                vec![
                    src,
                    filter,
                    Arg::Struct(&dst_map),
                    Arg::Params(&products.params[0]),
                    Arg::Struct(&products.taps[0]),
                ]
            } else {
                vec![Arg::Struct(&products)]
            };
            let dst_tiled = i32::from(self.destination.is_some());
            args.extend([
                Arg::Buffer(dst),
                Arg::Buffer(b.workspace),
                Arg::Int(split.slices),
                Arg::Int(split.mode),
                Arg::Int(split.elements),
                Arg::Int(dst_tiled),
                Arg::Struct(&blocks),
            ]);
            launch::kernel(b, &self.function, launch.launch, &args, "launch cuda.igemm_wgmma")?;
        }
        match &split.reduce {
            Some(reduce) => reduce.run(b, dst),
            None => Ok(()),
        }
    }
}

/// Split backward-weight's workspace: zeroed before atomics add into it, summed into dw after.
struct Reduce {
    function: CudaFunction,
    zero_bytes: u64,
    slices: i32,
    count: i32,
    blocks: u32,
}

impl Reduce {
    /// Zeroes what the atomics add into, if they do.
    fn zero(&self, b: &CudaBuffers<'_>) -> Result<()> {
        if self.zero_bytes > 0 {
            b.zero_workspace(self.zero_bytes)?;
        }
        Ok(())
    }

    /// Sums the workspace's slices into `dst`.
    fn run(&self, b: &CudaBuffers<'_>, dst: Buffer) -> Result<()> {
        let args = [Arg::Buffer(b.workspace), Arg::Int(self.slices), Arg::Int(self.count), Arg::Buffer(dst)];
        launch::kernel(
            b,
            &self.function,
            launch::flat(self.blocks, REDUCE_THREADS),
            &args,
            "launch cuda.igemm_wgmma's split reduction",
        )
    }
}

struct WeightInvoker {
    function: CudaFunction,
    launch: LaunchConfig,
    /// dy as a matrix: a row per pixel, a column per output channel.
    dy: (u64, u64),
    /// x, a block of pixels per load.
    x: SourceMap,
    /// The forward convolution's, the filter's strides the user's.
    params: ConvParams,
    /// The user's groups' output and input channels (the kernel's group_kg and group_cg).
    groups: (i32, i32),
    dtype: DataType,
    splits: i32,
    reduce: Option<Reduce>,
    /// Stream-K's flags, zeroed before the launch (0: not stream-K).
    stream_flag_bytes: u64,
}

impl Invoker<Cuda> for WeightInvoker {
    fn run(&self, b: &mut CudaBuffers<'_>) -> Result<()> {
        if let Some(reduce) = &self.reduce {
            reduce.zero(b)?;
        }
        if self.stream_flag_bytes > 0 {
            b.zero_workspace(self.stream_flag_bytes)?;
        }
        let block = row_elements(self.dtype);
        let dy = TensorMap::tiled(b.y, self.dtype, [self.dy.1, self.dy.0, 1], [block, block, 1])?;
        let x = self.x.map(b.x, self.dtype)?;
        let args = [
            Arg::Struct(&dy),
            Arg::Struct(&x),
            Arg::Params(&self.params),
            Arg::Buffer(b.w),
            Arg::Buffer(b.workspace),
            Arg::Int(self.splits),
            Arg::Int(self.groups.0),
            Arg::Int(self.groups.1),
        ];
        // Stream-K's CTAs wait on later ones' partial sums: all must be resident at once.
        let residency = if self.stream_flag_bytes > 0 { Residency::AllAtOnce } else { Residency::Any };
        launch::kernel_with(b, &self.function, self.launch, residency, &args, "launch cuda.igemm_wgmma")?;
        match &self.reduce {
            Some(reduce) => reduce.run(b, b.w),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use gconv_core::reference::reference;
    use gconv_core::testing::small_problem;
    use gconv_core::ConvTensors;
    use proptest::prelude::*;

    use super::*;

    /// flip_filter's phase_tap, as the kernel computes it: the taps of the phases before tap
    /// f's, of f's phase, and f's place in it counted from the last.
    fn phase_tap(f: i64, taps: i64, dil: i64, stride: i64) -> (i64, i64, i64) {
        let phase = f * dil % stride;
        let of = |i: i64| i * dil % stride;
        let before = (0..taps).filter(|&i| of(i) < phase).count() as i64;
        let count = (0..taps).filter(|&i| of(i) == phase).count() as i64;
        let flipped = (0..taps).filter(|&i| of(i) == phase && i > f).count() as i64;
        (before, count, flipped)
    }

    /// The workspace flip_filter writes, element by element as the kernel places them.
    fn flip_filter(p: &ConvProblem, w: &[f32]) -> Vec<f64> {
        let geo = Geometry::new(p);
        let q = ConvParams::new(p);
        let (fil, dil, stride) = (q.filter.map(i64::from), q.dilation.map(i64::from), q.stride.map(i64::from));
        let (groups, cg, kg) = (geo.g as i64, geo.cg as i64, geo.kg as i64);
        let mut wt = vec![f64::NAN; w.len()];
        for tap in 0..fil.iter().product::<i64>() {
            let f = [tap / (fil[1] * fil[2]), tap / fil[2] % fil[1], tap % fil[2]];
            let t: [(i64, i64, i64); 3] = std::array::from_fn(|i| phase_tap(f[i], fil[i], dil[i], stride[i]));
            let phase_start =
                (t[0].0 * fil[1] * fil[2] + t[0].1 * (t[1].0 * fil[2] + t[1].1 * t[2].0)) * groups * cg * kg;
            let phase_taps = t[0].1 * t[1].1 * t[2].1;
            let flipped = (t[0].2 * t[1].1 + t[1].2) * t[2].1 + t[2].2;
            for g in 0..groups {
                for k in 0..kg {
                    for c in 0..cg {
                        let source = geo.w.offset((g * kg + k) as usize, c as usize, f.map(|x| x as usize));
                        wt[(phase_start + ((g * cg + c) * phase_taps + flipped) * kg + k) as usize] =
                            f64::from(w[source]);
                    }
                }
            }
        }
        wt
    }

    /// The kernel's products on the CPU, from the host's lowering: each destination pixel m
    /// and channel n of group g of a product sums, over taps and source channels, the source
    /// pixel the im2col load gives (m's window moved by the tap, zero outside) times the filter
    /// matrix's element as the kernel reads it (for 16-bit backward-data, from w at the tap the
    /// product's TapMap names; for tf32, from what flip_filter writes), and is stored where the
    /// epilogue stores it. The reduction runs in the kernel's
    /// blocks (a tap's 128-byte row of channels), `slices` slices of them as first_block
    /// divides them. What no product writes stays NaN.
    fn emulate(p: &ConvProblem, t: &ConvTensors, slices: u32) -> Vec<f64> {
        let w = t.w.to_f32();
        let (src, filter, dst_len) = match p.direction {
            Direction::BackwardData => (t.y.to_f32(), flip_filter(p, &w), t.x.len()),
            _ => (t.x.to_f32(), w.iter().map(|&v| f64::from(v)).collect(), t.y.len()),
        };
        let mut dst = vec![f64::NAN; dst_len];
        for product in Product::all(p) {
            let q = &product.params;
            let [fil, out, stride, pad, dil, input] =
                [q.filter, q.output, q.stride, q.pad, q.dilation, q.input].map(|a| a.map(i64::from));
            let (groups, cg, kg) = (i64::from(q.g), i64::from(q.cg), i64::from(q.kg));
            let taps = fil.iter().product::<i64>();
            let pixels = out.iter().product::<i64>();
            let extents = product.filter_extents().map(|e| e as i64);
            let (row_len, all_channels) = (i64::from(row_elements(p.dtype)), groups * cg);
            let geo = Geometry::new(p);
            let taps_of = &product.tap_map;
            // The filter element of destination channel `row` and source channel c at the
            // product's tap: w's own at the mapped tap (row k of w is the source channel), or
            // the filter matrix's; zero past the group's channels.
            let filter_at = |row: i64, tap: i64, f: [i64; 3], c: i64| -> f64 {
                if c >= extents[0] {
                    return 0.0;
                }
                if !reads_filter_directly(p) {
                    return filter[(product.filter_offset as i64 + (row * extents[1] + tap) * extents[0] + c) as usize];
                }
                let mapped: [usize; 3] =
                    std::array::from_fn(|i| (taps_of.origin[i] as i64 + taps_of.step[i] as i64 * f[i]) as usize);
                f64::from(w[geo.w.offset((row / kg * cg + c) as usize, (row % kg) as usize, mapped)])
            };
            let at = |s: &[i32; 5], outer: i64, c: i64, pos: [i64; 3]| {
                outer * i64::from(s[0])
                    + c * i64::from(s[1])
                    + (0..3).map(|i| pos[i] * i64::from(s[2 + i])).sum::<i64>()
            };
            for m in 0..product.rows as i64 {
                let (image, pixel) = (m / pixels, m % pixels);
                let o = [pixel / (out[1] * out[2]), pixel / out[2] % out[1], pixel % out[2]];
                for row in 0..groups * kg {
                    let g = row / kg;
                    let mut sum = 0.0;
                    let chunks = (cg + row_len - 1) / row_len;
                    let first_block = |slice: i64| taps * chunks * slice / i64::from(slices);
                    for block in (0..i64::from(slices)).flat_map(|slice| first_block(slice)..first_block(slice + 1)) {
                        let (tap, c0) = (block / chunks, block % chunks * row_len);
                        let f = [tap / (fil[1] * fil[2]), tap / fil[2] % fil[1], tap % fil[2]];
                        let pos: [i64; 3] = std::array::from_fn(|i| o[i] * stride[i] - pad[i] + f[i] * dil[i]);
                        if (0..3).any(|i| !(0..input[i]).contains(&pos[i])) {
                            continue;
                        }
                        // Both maps read zeros past their channels: x's past the last group's,
                        // the filter's past each group's.
                        for c in c0..c0 + row_len {
                            let s = if g * cg + c < all_channels {
                                f64::from(src[at(&q.xs, image, g * cg + c, pos) as usize])
                            } else {
                                0.0
                            };
                            sum += s * filter_at(row, tap, f, c);
                        }
                    }
                    dst[(product.dst_offset as i64 + at(&q.ys, image, row, o)) as usize] = sum;
                }
            }
        }
        dst
    }

    /// igemm_wgmma_weight on the CPU: each of `slices` slices takes its share of the blocks of
    /// pixels as the kernel divides them, and adds, per tap, dy's pixel times the source
    /// pixel the forward product's im2col window gives.
    fn emulate_weight(p: &ConvProblem, t: &ConvTensors, slices: u32) -> Vec<f64> {
        let product = Product::all(p).swap_remove(0);
        let q = &product.params;
        let [fil, out, stride, pad, dil, input] =
            [q.filter, q.output, q.stride, q.pad, q.dilation, q.input].map(|a| a.map(i64::from));
        let geo = Geometry::new(p);
        let (x, dy) = (t.x.to_f32(), t.y.to_f32());
        let pixels = out.iter().product::<i64>();
        let total = i64::from(q.n) * pixels;
        let block = i64::from(row_elements(p.dtype));
        let all_blocks = (total + block - 1) / block;
        let mut dw = vec![0.0; t.w.len()];
        for slice in 0..i64::from(slices) {
            let first = all_blocks * slice / i64::from(slices);
            let last = all_blocks * (slice + 1) / i64::from(slices);
            for pixel in (first * block..last * block).filter(|&m| m < total) {
                let (image, rest) = (pixel / pixels, pixel % pixels);
                let o = [rest / (out[1] * out[2]), rest / out[2] % out[1], rest % out[2]];
                for tap in 0..fil.iter().product::<i64>() {
                    let f = [tap / (fil[1] * fil[2]), tap / fil[2] % fil[1], tap % fil[2]];
                    let pos: [i64; 3] = std::array::from_fn(|i| o[i] * stride[i] - pad[i] + f[i] * dil[i]);
                    if (0..3).any(|i| !(0..input[i]).contains(&pos[i])) {
                        continue;
                    }
                    for k in 0..geo.k() {
                        let (g, dy_value) =
                            (k / geo.kg, f64::from(dy[geo.y.offset(image as usize, k, o.map(|v| v as usize))]));
                        for c in 0..geo.cg {
                            let x_value =
                                f64::from(x[geo.x.offset(image as usize, g * geo.cg + c, pos.map(|v| v as usize))]);
                            dw[geo.w.offset(k, c, f.map(|v| v as usize))] += dy_value * x_value;
                        }
                    }
                }
            }
        }
        dw
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]
        /// The lowering (channels, phases, padding, corners, flipped filter, backward-weight's
        /// slices of the pixels) computes the direction's result with every destination
        /// element written, and each im2col window walks exactly its product's destination
        /// positions.
        #[test]
        fn the_lowered_products_are_the_convolution(
            p in small_problem().prop_filter("channels-last", |p| p.layout == Layout::Nhwc),
            slices in prop::sample::select(SPLITS.to_vec()),
        ) {
            let t = ConvTensors::random(&p, 5);
            let got = match p.direction {
                Direction::BackwardWeight => emulate_weight(&p, &t, slices),
                _ => emulate(&p, &t, slices.min(MAX_PRODUCT_SPLITS)),
            };
            let exact = reference(&p, &t);
            prop_assert!(got.iter().all(|v| v.is_finite()), "{}: an element no product writes", p.key());
            let scale = exact.iter().fold(1.0f64, |m, r| m.max(r.abs()));
            let worst = got.iter().zip(&exact).map(|(g, r)| (g - r).abs() / scale).fold(0.0, f64::max);
            prop_assert!(worst < 1e-9, "{}: off by {worst:e}", p.key());
            for product in Product::all(&p).iter().filter(|product| product.has_taps()) {
                for (i, dim) in (3 - p.dims.len()..3).rev().enumerate() {
                    let (src, stride) = (product.src[1 + i] as i64, i64::from(product.params.stride[dim]));
                    let walked = (src + product.upper[i] - 1 - product.lower[i]) / stride + 1;
                    prop_assert_eq!(walked, i64::from(product.params.output[dim]));
                }
            }
        }
    }

    /// The tiles the kernel's CTAs visit on the grid the host launches for `units` units, as
    /// FOR_EACH_UNIT walks them and `decode(unit, rank)` (unit_at's twin) names them; None
    /// for a cluster's row tile past the last.
    fn visited(tile: Tile, units: u64, sms: u32, decode: impl Fn(u64, u64) -> Option<[u64; 5]>) -> Vec<[u64; 5]> {
        let grid = u64::from(tile.grid(units, sms));
        let cl = u64::from(tile.cl);
        assert_eq!(grid % cl, 0, "whole clusters");
        let mut seen = Vec::new();
        for cta in 0..grid {
            let walk = if tile.persistent {
                (cta / cl..units).step_by((grid / cl) as usize).collect()
            } else {
                vec![cta / cl]
            };
            seen.extend(walk.into_iter().filter_map(|u| decode(u, cta % cl)));
        }
        seen
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]
        /// Every config's grid, walked as the kernels walk their units, visits each tile (of
        /// every product, group, tap and slice) exactly once.
        #[test]
        fn the_grid_visits_every_tile_once(
            p in small_problem().prop_filter("channels-last", |p| p.layout == Layout::Nhwc),
            sms in 1u32..160,
        ) {
            // Stream-K's grid has a schedule of its own (stream_k_shares_every_block_once).
            for config in WgmmaConfig::all(&p).into_iter().filter(|c| c.split.reduction != Reduction::StreamK) {
                let tile = config.tile;
                let cl = u64::from(tile.cl);
                let (rows, bn) = (u64::from(tile.rows()), u64::from(tile.bn));
                if p.direction == Direction::BackwardWeight {
                    let geo = Geometry::new(&p);
                    // A unit's taps: the tile's count of consecutive ones.
                    let tap_groups = geo.filter_volume() as u64 / u64::from(tile.taps);
                    let (row_tiles, columns, slices) = ((geo.kg as u64).div_ceil(rows), (geo.cg as u64).div_ceil(bn), u64::from(config.split.slices));
                    let row_groups = row_tiles.div_ceil(cl);
                    let (_, units) = config.work(&p);
                    let mut seen = visited(tile, units, sms, |u, rank| {
                        let k = u % row_groups * cl + rank;
                        let rest = u / row_groups;
                        let (c, rest) = (rest % columns, rest / columns);
                        let (tap_group, rest) = (rest % tap_groups, rest / tap_groups);
                        (k < row_tiles).then_some([k, c, tap_group, rest % slices, rest / slices])
                    });
                    let all = seen.len();
                    seen.sort_unstable();
                    seen.dedup();
                    prop_assert_eq!(seen.len(), all, "{}: a tile visited twice", config.to_config(p.direction));
                    prop_assert_eq!(all as u64, row_tiles * columns * tap_groups * slices * u64::from(p.g));
                    continue;
                }
                for product in Product::all(&p) {
                    let (_, dst) = product.channels();
                    let (row_tiles, columns) = (product.row_tiles(tile), u64::from(dst).div_ceil(bn));
                    let row_groups = row_tiles.div_ceil(cl);
                    let slices = u64::from(config.split.slices);
                    let mut seen = visited(tile, product.units(tile, p.g, config.split.slices), sms, |u, rank| {
                        let (n, rest) = (u % columns, u / columns);
                        let m = rest % row_groups * cl + rank;
                        let rest = rest / row_groups;
                        (m < row_tiles).then_some([m, n, rest % slices, rest / slices, 0])
                    });
                    let all = seen.len();
                    seen.sort_unstable();
                    seen.dedup();
                    prop_assert_eq!(seen.len(), all, "{}: a tile visited twice", config.to_config(p.direction));
                    prop_assert_eq!(all as u64, row_tiles * columns * slices * u64::from(p.g));
                }
            }
        }
    }

    /// The first of `total` blocks in the share of stream-K's CTA `cta`, as the kernel's
    /// stream_start has it.
    fn stream_start(stream_k: StreamK, total: u64, cta: u64) -> u64 {
        let q = total / stream_k.ctas;
        cta * q + cta.min(total - q * stream_k.ctas)
    }

    proptest! {
        /// Stream-K's CTAs, walking their shares as the kernel does, take every block of every
        /// unit once; each unit cut between CTAs has one finisher, the CTA with its first
        /// blocks, which adds the partial sums of exactly the later CTAs that took the rest,
        /// each of which wrote one (its first segment) before waiting on anything.
        #[test]
        fn stream_k_shares_every_block_once(units in 1u64..400, blocks in 1u64..300, sms in 1u32..160) {
            let stream_k = StreamK::new(units, blocks, sms);
            let mut taken = vec![0u32; (units * blocks) as usize];
            let mut partials = vec![Vec::new(); units as usize];
            let mut added = vec![Vec::new(); units as usize];
            for cta in 0..stream_k.ctas {
                let (start, stop) = (stream_start(stream_k, units * blocks, cta), stream_start(stream_k, units * blocks, cta + 1));
                prop_assert!(stop > start, "CTA {} of {} has no block", cta, stream_k.ctas);
                let (mut u, mut first, mut at) = (start / blocks, start % blocks, start);
                let mut segments = 0;
                while at < stop {
                    let end = blocks.min(stop - u * blocks);
                    (first..end).for_each(|block| taken[(u * blocks + block) as usize] += 1);
                    if first > 0 {
                        prop_assert_eq!(segments, 0, "a partial past a CTA's first segment");
                        partials[u as usize].push(cta);
                    } else if end < blocks {
                        let unit_end = (u + 1) * blocks;
                        let last = (cta + 1..stream_k.ctas).find(|&c| stream_start(stream_k, units * blocks, c) >= unit_end).unwrap_or(stream_k.ctas);
                        added[u as usize].extend(cta + 1..last);
                    }
                    segments += 1;
                    at += end - first;
                    u += 1;
                    first = 0;
                }
            }
            prop_assert!(taken.iter().all(|&n| n == 1), "a block taken {:?} times", taken.iter().find(|&&n| n != 1));
            prop_assert_eq!(stream_start(stream_k, units * blocks, stream_k.ctas), units * blocks);
            prop_assert_eq!(partials, added);
        }
    }

    /// The default of a problem key on the H100's 132 SMs.
    fn default_of(key: &str) -> WgmmaConfig {
        WgmmaConfig::default_for(&ConvProblem::from_key(key).unwrap(), 132)
    }

    /// The default's config string, as `gconv conv --config` takes it.
    fn default_config(key: &str) -> String {
        default_of(key).to_config(ConvProblem::from_key(key).unwrap().direction).to_string()
    }

    #[test]
    fn defaults_take_what_the_wave_model_expects_to_finish_first() {
        // Each against the hand rules' default, in one lease on the H100: 7x7 1x1 layers
        // of few tiles run unsplit in narrow tiles (0.0095 ms in 64 x 256 tiles split in two,
        // 0.0058 so); squeeze-excite splits four ways (0.0078 -> 0.0058); 14x14 layers of 576
        // columns take 128 x 128 tiles (0.0092 in 128 x 256, 0.0064).
        assert_eq!(default_config("v1:fwd:bf16:NHWC:n32:c672:k192:i7x7:f1x1:s1x1:p0x0:d1x1"), "bn64_wg1_st4_cl1_ps1");
        assert_eq!(
            default_config("v1:fwd:bf16:NHWC:n32:c1152:k48:i1x1:f1x1:s1x1:p0x0:d1x1"),
            "bn64_wg1_st4_cl1_ps1_ks4_red0"
        );
        assert_eq!(default_config("v1:fwd:bf16:NHWC:n32:c96:k576:i14x14:f1x1:s1x1:p0x0:d1x1"), "bn128_wg2_st4_cl1_ps1");
        // 256-row tiles split where they are few (0.0280 -> 0.0260; 3D 0.110 -> 0.079).
        assert_eq!(
            default_config("v1:fwd:bf16:NHWC:n32:c512:k512:i7x7:f3x3:s1x1:p1x1:d1x1"),
            "bn128_wg2_st4_cl1_ps0_ks4_red0_mr2"
        );
        assert_eq!(
            default_config("v1:bwd-data:bf16:NDHWC:n32:c512:k512:i2x7x7:f3x3x3:s1x1x1:p1x1x1:d1x1x1"),
            "bn128_wg2_st4_cl1_ps0_ks2_red0_mr2"
        );
        // Many waves: unsplit, 256 rows where the columns fit 128.
        assert_eq!(
            default_config("v1:fwd:bf16:NHWC:n32:c64:k64:i56x56:f3x3:s1x1:p1x1:d1x1"),
            "bn64_wg2_st4_cl1_ps1_mr2"
        );
        assert_eq!(
            default_config("v1:bwd-data:bf16:NHWC:n32:c128:k128:i28x28:f3x3:s1x1:p1x1:d1x1"),
            "bn128_wg2_st4_cl1_ps0_mr2"
        );
    }

    #[test]
    fn defaults_keep_short_reductions_on_persistent_tiles() {
        // One and four blocks of 64 channels: tiles that are not persistent would wait on their
        // stores, which the model does not see.
        let persistent = |key: &str| default_of(key).tile.persistent;
        assert!(persistent("v1:fwd:bf16:NHWC:n32:c64:k128:i56x56:f1x1:s1x1:p0x0:d1x1"));
        assert!(persistent("v1:fwd:bf16:NHWC:n32:c256:k128:i56x56:f1x1:s1x1:p0x0:d1x1"));
    }

    #[test]
    fn defaults_pair_ctas_only_on_narrow_products_of_many_rows() {
        let cluster = |key: &str| default_of(key).tile.cl;
        // 24 source channels, 100352 rows: eight waves of 64-row tiles and more.
        assert_eq!(cluster("v1:fwd:bf16:NHWC:n32:c24:k144:i56x56:f1x1:s1x1:p0x0:d1x1"), 2);
        // Backward-data's destination of 24 channels is as narrow.
        assert_eq!(cluster("v1:bwd-data:bf16:NHWC:n32:c24:k144:i56x56:f1x1:s1x1:p0x0:d1x1"), 2);
        assert_eq!(cluster("v1:fwd:bf16:NHWC:n32:c3:k64:i224x224:f7x7:s2x2:p3x3:d1x1"), 2);
        // Narrow but 25088 rows: the pair ran 1.10x.
        assert_eq!(cluster("v1:fwd:bf16:NHWC:n32:c32:k192:i28x28:f1x1:s1x1:p0x0:d1x1"), 1);
        assert_eq!(cluster("v1:fwd:bf16:NHWC:n32:c64:k64:i56x56:f3x3:s1x1:p1x1:d1x1"), 1);
        assert_eq!(cluster("v1:bwd-weight:bf16:NHWC:n32:c3:k64:i224x224:f7x7:s2x2:p3x3:d1x1"), 1);
    }

    #[test]
    fn backward_weight_defaults_narrow_the_tile_where_few_pixels_leave_sms_idle() {
        // 1x1 layers by the model: 7x7 x 32 images, 25 blocks of pixels; 54 tiles of 64 x 64
        // unsplit (7.5 us in session 24's sweep, its fastest; 64 x 128 in four slices, 8.7).
        let few_pixels = default_of("v1:bwd-weight:bf16:NHWC:n32:c1152:k192:i7x7:f1x1:s1x1:p0x0:d1x1");
        assert_eq!((few_pixels.tile.bn, few_pixels.tile.wg, few_pixels.split.slices), (64, 1, 1));
        // 1024 x 2048 tiles of 128 x 128 unsplit (19.3 us; the rule's 128 x 256, 23.0).
        let wide = default_of("v1:bwd-weight:bf16:NHWC:n32:c1024:k2048:i7x7:f1x1:s1x1:p0x0:d1x1");
        assert_eq!((wide.tile.bn, wide.tile.wg, wide.split.slices), (128, 2, 1));
        let many_pixels = default_of("v1:bwd-weight:bf16:NHWC:n32:c256:k256:i56x56:f3x3:s1x1:p1x1:d1x1");
        assert_eq!((many_pixels.tile.bn, many_pixels.tile.wg), (256, 2));
        // c192 k1152, 1152 x 192 in tiles of 64 x 64 unsplit: 7.4 us, the sweep's fastest (the
        // session-21 model's 128 x 64 in four slices, 9.2; two slices summed in the cluster, 7.6).
        let tall = default_of("v1:bwd-weight:bf16:NHWC:n32:c192:k1152:i7x7:f1x1:s1x1:p0x0:d1x1");
        assert_eq!((tall.tile.bn, tall.tile.wg, tall.split), (64, 1, UNSPLIT));
        // 1x1 past the model's pixels: the rule's many slices (the model's eight took 6x the time).
        let many_pixels_1x1 = default_of("v1:bwd-weight:bf16:NHWC:n32:c64:k64:i56x56:f1x1:s1x1:p0x0:d1x1");
        assert!(many_pixels_1x1.split.slices > 8, "{many_pixels_1x1:?}");
        // 2x2 at stride 2, units of a tap by the model: 768 x 384 x 4 taps in 96 tiles of 128 x
        // 128 unsplit (17.1 us in session 21's sweep, its fastest; the rule's 128 x 256, 22.1).
        let patches = default_of("v1:bwd-weight:bf16:NHWC:n32:c384:k768:i14x14:f2x2:s2x2:p0x0:d1x1");
        assert_eq!((patches.tile.bn, patches.tile.wg, patches.tile.taps, patches.split), (128, 2, 1, UNSPLIT));
        // 14x14 of them: four slices of 128 x 128 (20.3 us, the sweep's fastest).
        let more_patches = default_of("v1:bwd-weight:bf16:NHWC:n32:c192:k384:i28x28:f2x2:s2x2:p0x0:d1x1");
        assert_eq!((more_patches.tile.bn, more_patches.tile.wg, more_patches.split.slices), (128, 2, 4));
    }

    #[test]
    fn blocked_backward_weight_splits_no_further_than_one_wave() {
        // ResNeXt's layers on the H100 (session 23's sweep of ks 2 to 64): fastest at these.
        let slices = |key: &str| WgmmaConfig::default_for_user(&ConvProblem::from_key(key).unwrap(), 132).split.slices;
        assert_eq!(slices("v1:bwd-weight:bf16:NHWC:n32:c128:k128:i56x56:f3x3:s1x1:p1x1:d1x1:g32"), 16);
        assert_eq!(slices("v1:bwd-weight:bf16:NHWC:n32:c256:k256:i28x28:f3x3:s1x1:p1x1:d1x1:g32"), 8);
        assert_eq!(slices("v1:bwd-weight:bf16:NHWC:n32:c512:k512:i14x14:f3x3:s1x1:p1x1:d1x1:g32"), 4);
        // Groups of 32 channels, two to a block: 48 units, two slices (11.9 us; unsplit 12.2).
        assert_eq!(slices("v1:bwd-weight:bf16:NHWC:n32:c1024:k1024:i14x14:f3x3:s2x2:p1x1:d1x1:g32"), 2);
    }

    #[test]
    fn blocked_layers_stage_their_source_with_its_halo_where_units_are_mostly_pixels_else_fit_their_waves() {
        let held = "bn64_wg2_st9_cl1_ps1_mr2_hl1";
        let default_config = |key: &str| {
            let p = ConvProblem::from_key(key).unwrap();
            WgmmaConfig::default_for_user(&p, 132).to_config(p.direction).to_string()
        };
        for key in [
            "v1:fwd:bf16:NHWC:n32:c512:k512:i14x14:f3x3:s1x1:p1x1:d1x1:g32",
            "v1:bwd-data:f16:NHWC:n32:c128:k128:i56x56:f3x3:s1x1:p1x1:d1x1:g32",
            "v1:bwd-data:bf16:NHWC:n32:c256:k256:i28x28:f3x3:s1x1:p1x1:d1x1:g32",
        ] {
            assert_eq!(default_config(key), held, "{key}");
        }
        // 49 pixels in 256 rows (112 units: a CTA each); 200 units of 256 rows in two waves,
        // 392 of 128 in three; 392 of 256 rows in three waves, 784 of 128 in six.
        for (key, expected) in [
            ("v1:fwd:bf16:NHWC:n32:c1024:k1024:i7x7:f3x3:s1x1:p1x1:d1x1:g32", "bn64_wg2_st5_cl1_ps0_mr2"),
            ("v1:bwd-data:bf16:NHWC:n32:c1024:k1024:i7x7:f3x3:s1x1:p1x1:d1x1:g32", "bn64_wg2_st5_cl1_ps0_mr2"),
            ("v1:fwd:bf16:NHWC:n32:c512:k512:i28x28:f3x3:s2x2:p1x1:d1x1:g32", "bn64_wg1_st3_cl1_ps1_mr2"),
            ("v1:fwd:bf16:NHWC:n32:c256:k256:i56x56:f3x3:s2x2:p1x1:d1x1:g32", "bn64_wg2_st4_cl1_ps1_mr2"),
        ] {
            assert_eq!(default_config(key), expected, "{key}");
        }
        assert_ne!(default_config("v1:fwd:bf16:NHWC:n32:c64:k64:i56x56:f3x3:s1x1:p1x1:d1x1"), held);
    }

    #[test]
    fn only_builds_reading_a_blocked_filter_from_w_loop_over_its_groups_boxes() {
        let reads_groups = |key: &str| {
            let p = ConvProblem::from_key(key).unwrap();
            let (products, _) = WgmmaConfig::default_for_user(&p, 132).sources(&p, Packed::of(&p).as_ref());
            products.defines.iter().any(|d| d == "FILTER_GROUPS=1")
        };
        // Two groups of 32 channels a block: the producer's boxes of a group's rows.
        assert!(reads_groups("v1:fwd:bf16:NHWC:n32:c1024:k1024:i7x7:f3x3:s1x1:p1x1:d1x1:g32"));
        assert!(reads_groups("v1:bwd-data:bf16:NHWC:n32:c1024:k1024:i7x7:f3x3:s1x1:p1x1:d1x1:g32"));
        // 16 groups a block: the helper warps write the filter; dense and backward-weight: none.
        assert!(!reads_groups("v1:fwd:bf16:NHWC:n32:c128:k128:i56x56:f3x3:s1x1:p1x1:d1x1:g32"));
        assert!(!reads_groups("v1:fwd:bf16:NHWC:n32:c64:k64:i56x56:f3x3:s1x1:p1x1:d1x1"));
        assert!(!reads_groups("v1:bwd-weight:bf16:NHWC:n32:c1024:k1024:i7x7:f3x3:s1x1:p1x1:d1x1:g32"));
    }

    #[test]
    fn tf32_defaults_take_the_swept_tiles() {
        // The H100's fastest in session 28's sweep: three taps on 64 columns where 128 cannot
        // hold them beside the transposition, ...
        assert_eq!(
            default_config("v1:bwd-weight:tf32:NHWC:n32:c128:k128:i28x28:f3x3:s1x1:p1x1:d1x1"),
            "bn64_wg2_st4_cl1_ps0_ks16_red0_tp3"
        );
        // ... 128 columns on 14x14 1x1 layers where the narrower tiles would fill the GPU, ...
        assert_eq!(
            default_config("v1:bwd-weight:tf32:NHWC:n32:c480:k112:i14x14:f1x1:s1x1:p0x0:d1x1"),
            "bn128_wg1_st4_cl1_ps0_ks16_red0"
        );
        // ... and the wide 7x7 1x1 layers' two slices summed in the cluster.
        assert_eq!(
            default_config("v1:bwd-weight:tf32:NHWC:n32:c1024:k2048:i7x7:f1x1:s1x1:p0x0:d1x1"),
            "bn256_wg2_st4_cl1_ps0_ks2_red2"
        );
        // Forward and backward-data by tf32's own wave model: persistent 128 x 128 tiles unsplit
        // on c3072 k768 7x7 1x1 forward (0.80x the time of the 16-bit costs' pick, 256 x 128
        // in two slices).
        assert_eq!(default_config("v1:fwd:tf32:NHWC:n32:c3072:k768:i7x7:f1x1:s1x1:p0x0:d1x1"), "bn128_wg2_st4_cl1_ps1");
        // Every default holds its accumulators beside the transposition.
        for key in [
            "v1:bwd-weight:tf32:NHWC:n32:c256:k256:i14x14:f3x3:s1x1:p1x1:d1x1",
            "v1:bwd-weight:tf32:NDHWC:n32:c128:k128:i8x28x28:f3x3x3:s1x1x1:p1x1x1:d1x1x1",
        ] {
            let p = ConvProblem::from_key(key).unwrap();
            assert!(default_of(key).check(&p).is_ok(), "{key}");
        }
    }

    #[test]
    fn backward_weight_defaults_split_no_further_than_whole_waves_pay() {
        let slices = |key: &str| default_of(key).split.slices;
        // Exhaustive tuning on the H100 chose unsplit here: two slices make a second wave of 12
        // tiles.
        assert_eq!(slices("v1:bwd-weight:bf16:NHWC:n32:c768:k3072:i7x7:f1x1:s1x1:p0x0:d1x1"), 1);
        // 64 tiles of 128 x 256 fit one wave in two slices, but their atomics cost more than
        // the halved reduction saves.
        assert_eq!(slices("v1:bwd-weight:bf16:NHWC:n32:c1024:k2048:i7x7:f1x1:s1x1:p0x0:d1x1"), 1);
        // A wave of slices where the tile's atomics are few: 14x14, 96 tiles of 128 x 128 in two
        // slices (0.0249 ms on the H100 in session 24's sweep; 48 of 128 x 256 in four, 0.0280).
        assert_eq!(slices("v1:bwd-weight:bf16:NHWC:n32:c384:k1536:i14x14:f1x1:s1x1:p0x0:d1x1"), 2);
        // 27 taps in units of three: nine 64 x 64 tiles, as many slices as the split takes.
        assert_eq!(slices("v1:bwd-weight:bf16:NDHWC:n32:c64:k64:i16x56x56:f3x3x3:s1x1x1:p1x1x1:d1x1x1"), 128);
        assert_eq!(quickest_split(72, 1 << 15, 24, 132, &[1, 2]), 1);
        assert_eq!(quickest_split(66, 1 << 12, 1000, 132, &[1, 2, 4]), 2);
    }

    #[test]
    fn every_config_fits_and_round_trips() {
        // Two row tiles at most, for backward-weight at 128 rows: every cluster size applies.
        let forward = ConvProblem::from_key("v1:fwd:bf16:NHWC:n2:c64:k256:i16x16:f3x3:s1x1:p1x1:d1x1").unwrap();
        let weight = ConvProblem { direction: Direction::BackwardWeight, ..forward.clone() };
        // Without a persistent grid all but 256 columns x 2 consumers x 5 stages fit; its
        // staging area leaves out 256 x 1 x 5 and 256 x 2 x 4 too.
        let tiles = 2 * (17 + 15);
        assert_eq!(Tile::all(DataType::Bf16).count(), tiles);
        // Two 64-row slices per consumer fit 40 tiles (64 and 128 columns; of 256 rows, 128 x 5
        // stages, and with a staging area 64 x 5 and 128 x 4, do not).
        let two_slice_tiles = 40;
        // Its reduction is 9 blocks (3x3 taps x 64 channels): ks 1, and 2, 4, 8 atomic or
        // two-stage; the 56 tiles without a persistent grid also sum 2 or 4 slices in the
        // cluster, but for 256 rows or columns of two consumers at three stages in 4 (4 tiles);
        // and 27 persistent tiles of lone CTAs, unsplit, also stage the source with its halo
        // (those where two halo buffers of 18-pixel rows fit beside the stages), 7 of them also
        // at the 9 stages that hold the filter's tiles.
        assert_eq!(WgmmaConfig::all(&forward).len(), (tiles + two_slice_tiles) * 7 + 2 * 56 - 4 + 27 + 7);
        // Backward-weight's units take one tap or three (3x3: 2 and 4 do not divide 9); three B
        // tiles fit 34 tiles (64 and 128 columns: 192 accumulators at most).
        let three_tap_tiles = 34;
        // The 52 without a persistent grid sum 2 or 4 slices in the cluster too, and the 26 of
        // those of lone CTAs (17 of one tap, 9 of three) run stream-K.
        assert_eq!(
            WgmmaConfig::all(&weight).len(),
            (tiles + three_tap_tiles) * (1 + 2 * (SPLITS.len() - 1)) + 2 * 52 + 26
        );
        let staged_in_fp32 = Tile { bn: 256, wg: 2, st: 3, cl: 1, persistent: true, taps: 1, mr: 1, halo: false };
        assert!(staged_in_fp32.check(DataType::Bf16).is_ok() && staged_in_fp32.check(DataType::Tf32).is_err());
        for p in [&forward, &weight] {
            for config in WgmmaConfig::all(p) {
                assert_eq!(WgmmaConfig::from_config(p, &config.to_config(p.direction)).unwrap(), config);
            }
        }
        let tile = |bn: u32, wg: u32, st: u32, cl: u32, ps: u32| {
            Config::new([("bn", bn), ("wg", wg), ("st", st), ("cl", cl), ("ps", ps)])
        };
        let error = |p: &ConvProblem, config: Config| WgmmaConfig::from_config(p, &config).unwrap_err().to_string();
        assert!(error(&forward, tile(256, 2, 5, 1, 0)).contains("shared memory"));
        assert!(error(&forward, tile(96, 2, 4, 1, 0)).contains("bn must be"));
        assert!(error(&forward, tile(64, 1, 4, 4, 0)).contains("cl must be"));
        assert!(error(&forward, tile(64, 1, 4, 1, 2)).contains("ps must be 0 or 1"));
        let split = |cl: u32, ks: u32, red: u32| {
            Config::new([("bn", 64), ("wg", 1), ("st", 4), ("cl", cl), ("ps", 0), ("ks", ks), ("red", red)])
        };
        let one_row_tile =
            ConvProblem::from_key("v1:bwd-weight:bf16:NHWC:n2:c64:k64:i8x8:f3x3:s1x1:p1x1:d1x1").unwrap();
        assert!(error(&one_row_tile, split(2, 1, 0)).contains("shares loads between row tiles"));
        assert!(error(&weight, split(1, 1, 1)).contains("needs ks over 1"));
        assert!(error(&weight, split(1, 8, 2)).contains("red 2 (sums in the cluster) takes ks [2, 4]"));
        assert!(error(&weight, split(1, 2, 4)).contains("red must be 0"));
        assert!(error(&weight, split(1, 2, 3)).contains("ks must be 1"));
        assert!(error(&weight, split(2, 1, 3)).contains("cl 1, ps 0"));
        assert!(error(&forward, split(1, 1, 3)).contains("backward-weight's"));
        let persistent_cluster_sums =
            Config::new([("bn", 64), ("wg", 1), ("st", 4), ("cl", 1), ("ps", 1), ("ks", 2), ("red", 2)]);
        assert!(error(&weight, persistent_cluster_sums).contains("not ps 1"));
        let big_cluster_sums =
            Config::new([("bn", 256), ("wg", 2), ("st", 3), ("cl", 1), ("ps", 0), ("ks", 4), ("red", 2)]);
        assert!(error(&forward, big_cluster_sums).contains("past 65536 of staged results"));
        let taps = |bn: u32, tp: u32| {
            Config::new([("bn", bn), ("wg", 1), ("st", 3), ("cl", 1), ("ps", 0), ("ks", 1), ("red", 0), ("tp", tp)])
        };
        assert_eq!(WgmmaConfig::from_config(&weight, &taps(64, 3)).unwrap().tile.taps, 3);
        assert!(error(&weight, taps(64, 2)).contains("does not divide the filter's 9 taps"));
        assert!(error(&weight, taps(256, 2)).contains("accumulators"));
        assert!(error(&weight, taps(64, 5)).contains("tp must be"));
        assert!(error(&forward, taps(64, 3)).contains("backward-weight's"));
        let slices = |bn: u32, wg: u32, mr: u32| {
            Config::new([("bn", bn), ("wg", wg), ("st", 3), ("cl", 1), ("ps", 1), ("mr", mr)])
        };
        assert_eq!(WgmmaConfig::from_config(&forward, &slices(128, 2, 2)).unwrap().tile.rows(), 256);
        assert!(error(&forward, slices(256, 1, 2)).contains("accumulators"));
        assert!(error(&forward, slices(64, 1, 3)).contains("mr must be"));
        let weight_slices =
            Config::new([("bn", 64), ("wg", 1), ("st", 3), ("cl", 1), ("ps", 0), ("ks", 1), ("red", 0), ("mr", 2)]);
        assert!(error(&weight, weight_slices).contains("forward's and backward-data's"));
        let misplaced = Config::new([("bn", 64), ("wg", 1), ("mr", 2), ("st", 3), ("cl", 1), ("ps", 1)]);
        assert!(error(&forward, misplaced).contains("then tp or mr"));
        assert!(WgmmaConfig::from_config(&weight, &tile(64, 1, 4, 1, 0)).is_err(), "backward-weight wants ks and red");
        // Forward reads its unsplit configs without ks and red, as they were written before splits.
        assert_eq!(WgmmaConfig::from_config(&forward, &tile(64, 1, 4, 1, 0)).unwrap().split, UNSPLIT);
        assert_eq!(
            WgmmaConfig::from_config(&forward, &split(1, 4, 1)).unwrap().to_config(Direction::Forward),
            split(1, 4, 1)
        );
        assert!(error(&forward, split(1, 16, 0)).contains("reduction of 9 blocks"));
    }
}
