//! The tile and split of a config: the block's shape, its pipeline, and how a reduction is cut
//! and summed.

use super::invoke::*;
use super::*;

/// A block tile: columns, consumer warpgroups (`mr` slices of 64 rows each), pipeline stages,
/// CTAs per cluster, whether the grid is persistent, and (backward-weight) the taps a unit sums
/// at once, a B tile each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Tile {
    pub(super) bn: u32,
    pub(super) wg: u32,
    pub(super) st: u32,
    pub(super) cl: u32,
    pub(super) persistent: bool,
    pub(super) taps: u32,
    pub(super) mr: u32,
    /// Forward and backward-data: the source staged as a rectangle with its halo (the kernel's
    /// HALO), not loaded per tap by im2col. The default only for blocked grouped layers, at
    /// HELD_STAGES (see WgmmaConfig::held_halo); elsewhere tunable: on the H100 it took 0.89x
    /// im2col's time on ResNeXt's c512 g32 14x14 3x3 with the filter reloaded per unit,
    /// 0.98-1.09x on other 3x3 layers of 14x14 to 56x56, and 2.5x at 7x7 on 256-row tiles (7 of
    /// 64 rows a slice in use).
    pub(super) halo: bool,
}

impl Tile {
    pub(super) fn check(self, dtype: DataType) -> std::result::Result<(), String> {
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

    pub(super) fn rows(self) -> u32 {
        ROWS_PER_CONSUMER * self.wg * self.mr
    }

    /// Whether a stage per block of a unit holds the filter's tiles across a CTA's units of one
    /// group (HELD_STAGES with hl 1; the kernel's HeldFilter), on 64-column tiles: where
    /// backward-data's helper warps may write a blocked filter, then once per run of units.
    pub(super) fn writes_held_filter(self) -> bool {
        self.halo && self.st == HELD_STAGES && self.bn == 64
    }

    /// Every stage's A tile (none with `halo`: see HaloTile) and B tiles, their full and empty
    /// barriers, room to align the tiles to 1024 bytes as the 128-byte swizzle wants, and a
    /// persistent grid's staging of the results (as the stages, 1024-byte aligned).
    pub(super) fn shared_bytes(self, dtype: DataType) -> u32 {
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
    pub(super) fn check_cluster_sums(self, p: &ConvProblem, slices: u32) -> std::result::Result<(), String> {
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

    pub(super) fn all(dtype: DataType) -> impl Iterator<Item = Tile> {
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
    pub(super) fn grid(self, units: u64, sms: u32) -> u32 {
        let clusters = if self.persistent { units.min(u64::from(sms / self.cl).max(1)) } else { units };
        (clusters * u64::from(self.cl)) as u32
    }

    pub(super) fn source(self, p: &ConvProblem) -> KernelSource {
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
pub(super) struct Split {
    pub(super) slices: u32,
    pub(super) reduction: Reduction,
}

/// How a split's slices are summed (the config's `red`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Reduction {
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
    pub(super) const ALL: [Reduction; 4] =
        [Reduction::Atomic, Reduction::TwoStage, Reduction::Cluster, Reduction::StreamK];

    pub(super) fn code(self) -> u32 {
        match self {
            Reduction::Atomic => 0,
            Reduction::TwoStage => 1,
            Reduction::Cluster => 2,
            Reduction::StreamK => 3,
        }
    }

    pub(super) fn from_code(code: u32) -> Option<Reduction> {
        Reduction::ALL.into_iter().find(|r| r.code() == code)
    }
}

pub(super) const UNSPLIT: Split = Split { slices: 1, reduction: Reduction::Atomic };

/// The slices a cluster's sums take.
pub(super) const CLUSTER_SPLITS: [u32; 2] = [2, 4];

impl Split {
    pub(super) fn all() -> impl Iterator<Item = Split> {
        SPLITS
            .into_iter()
            .flat_map(|slices| Reduction::ALL.map(|reduction| Split { slices, reduction }))
            .filter(|s| s.check().is_ok())
    }

    pub(super) fn check(self) -> std::result::Result<(), String> {
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
    pub(super) fn cluster_slices(self) -> u32 {
        if self.reduction == Reduction::Cluster {
            self.slices
        } else {
            1
        }
    }

    /// The kernel's output mode: 0 the destination, 1 atomics into the workspace, 2 a slice of
    /// it, 3 stream-K.
    pub(super) fn mode(self) -> i32 {
        match (self.slices, self.reduction) {
            (_, Reduction::StreamK) => 3,
            (1, _) | (_, Reduction::Cluster) => 0,
            (_, Reduction::Atomic) => 1,
            (_, Reduction::TwoStage) => 2,
        }
    }

    /// The fp32 copies of the destination of `elements` it needs in the workspace: none, one or
    /// one per slice (stream-K's partial sums are per CTA: see StreamK).
    pub(super) fn workspace_bytes(self, elements: u64) -> u64 {
        let copies = match self.mode() {
            1 => 1,
            2 => u64::from(self.slices),
            _ => 0,
        };
        elements * 4 * copies
    }

    /// The second kernel, if the split needs one, and how much of the workspace to zero before
    /// the atomics, for a destination of `elements`.
    pub(super) fn reduce(self, elements: u64, device: &CudaDevice, source: &KernelSource) -> Result<Option<Reduce>> {
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
pub(super) struct StreamK {
    pub(super) ctas: u64,
}

/// The flags' area of stream-K's workspace: a flag per CTA and consumer, in multiples of 64 (as
/// the kernel's STREAM_FLAG_FLOATS).
pub(super) const STREAM_FLAG_WORDS: u64 = 64;

impl StreamK {
    pub(super) fn new(units: u64, blocks: u64, sms: u32) -> StreamK {
        StreamK { ctas: (units * blocks).min(u64::from(sms)).max(1) }
    }

    /// The flags zeroed before the launch, in bytes: the start of the partial sums.
    pub(super) fn flag_bytes(self, tile: Tile) -> u64 {
        (self.ctas * u64::from(tile.wg)).next_multiple_of(STREAM_FLAG_WORDS) * 4
    }

    /// The flags and every CTA's consumers' partial sums (64 rows x `bn` columns x taps, fp32).
    pub(super) fn workspace_bytes(self, tile: Tile) -> u64 {
        self.flag_bytes(tile) + self.ctas * u64::from(tile.wg * ROWS_PER_CONSUMER * tile.bn * tile.taps) * 4
    }
}
