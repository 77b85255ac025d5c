//! The tile space (one table per math), a tile's resources, its config text, why it cannot run a
//! problem, and the kernel it builds.

use gconv_core::{Config, ConvProblem, DataType, Direction, Field, GconvError, Result, Schema, Values};

use super::{Math, Planner, MAX_FILTER_TAPS, SOURCE};
use crate::KernelSource;

/// Slices the backward-weight pixel reduction may be split into.
pub(super) const SPLITS: [u32; 9] = [1, 2, 4, 8, 16, 32, 64, 128, 256];
/// The largest grid.y and grid.z.
const MAX_GRID_YZ: u64 = 65535;
/// Copies per operand, thread and stage: copy loops unroll, and gathered rows keep their pixel
/// coordinates in registers (a local NVRTC sweep of the space showed spills beyond 8).
const MAX_CHUNKS_PER_THREAD: u32 = 8;
/// Two-stage backward-weight keeps one fp32 copy of the weights per slice.
const MAX_WORKSPACE_BYTES: u64 = 1 << 30;

/// Every value each config field may take, for one math. The config space, the checks and the
/// default's candidates all read it.
pub(super) struct Space {
    pub bm: &'static [u32],
    pub bn: &'static [u32],
    pub bk: &'static [u32],
    /// Warp grids (wm, wn); empty where the tile sets the threads (SIMT: `Math::simt_outputs`).
    pub warps: &'static [(u32, u32)],
    pub stages: &'static [u32],
}

const TENSOR_CORE_SPACE: Space = Space {
    bm: &[32, 64, 128, 256],
    bn: &[16, 32, 64, 128, 256],
    bk: &[16, 32, 64],
    warps: &[(1, 1), (2, 1), (1, 2), (2, 2), (4, 1), (1, 4), (4, 2), (2, 4)],
    stages: &[2, 3, 4],
};

const SIMT_SPACE: Space =
    Space { bm: &[32, 64, 128], bn: &[32, 64, 128], bk: &[8, 16, 32], warps: &[], stages: &[2, 3] };

/// A tile's text, per math and direction: `bm`, `bn`, `bk`, the warp grid (`wm`, `wn`) where
/// tensor cores set it, pipeline stages (`st`), then backward-weight's split: slices (`ks`) and
/// two-stage reduction (`red`, 0 for atomics). The warp grid's pairs (`Space::warps`) are
/// checked as pairs.
const TENSOR_CORE_FIELDS: [Field; 8] = [
    Field::new("bm", Values::OneOf(TENSOR_CORE_SPACE.bm)),
    Field::new("bn", Values::OneOf(TENSOR_CORE_SPACE.bn)),
    Field::new("bk", Values::OneOf(TENSOR_CORE_SPACE.bk)),
    Field::new("wm", Values::OneOf(&[1, 2, 4])),
    Field::new("wn", Values::OneOf(&[1, 2, 4])),
    Field::new("st", Values::OneOf(TENSOR_CORE_SPACE.stages)),
    SLICES,
    REDUCTION,
];
const SIMT_FIELDS: [Field; 6] = [
    Field::new("bm", Values::OneOf(SIMT_SPACE.bm)),
    Field::new("bn", Values::OneOf(SIMT_SPACE.bn)),
    Field::new("bk", Values::OneOf(SIMT_SPACE.bk)),
    Field::new("st", Values::OneOf(SIMT_SPACE.stages)),
    SLICES,
    REDUCTION,
];
const SLICES: Field = Field::new("ks", Values::OneOf(&SPLITS));
const REDUCTION: Field = Field::new("red", Values::OneOf(&[0, 1]));
/// Backward-weight's schemas are the whole lists, the other directions' all but the split.
const TENSOR_CORE_WEIGHT_SCHEMA: Schema = Schema::new(&TENSOR_CORE_FIELDS);
const TENSOR_CORE_SCHEMA: Schema = Schema::new(TENSOR_CORE_FIELDS.split_at(6).0);
const SIMT_WEIGHT_SCHEMA: Schema = Schema::new(&SIMT_FIELDS);
const SIMT_SCHEMA: Schema = Schema::new(SIMT_FIELDS.split_at(4).0);

impl Math {
    fn schema(self, direction: Direction) -> &'static Schema {
        match (self, direction == Direction::BackwardWeight) {
            (Math::TensorCores, false) => &TENSOR_CORE_SCHEMA,
            (Math::TensorCores, true) => &TENSOR_CORE_WEIGHT_SCHEMA,
            (Math::Simt, false) => &SIMT_SCHEMA,
            (Math::Simt, true) => &SIMT_WEIGHT_SCHEMA,
        }
    }

    pub(super) fn space(self) -> &'static Space {
        match self {
            Math::TensorCores => &TENSOR_CORE_SPACE,
            Math::Simt => &SIMT_SPACE,
        }
    }

    /// Outputs a SIMT thread owns along a tile side: 8, or 4 along a 32-wide side (8 would
    /// leave a 32 x 32 tile half a warp). The kernel's TM and TN defines.
    pub(super) fn simt_outputs(side: u32) -> u32 {
        if side >= 64 {
            8
        } else {
            4
        }
    }

    /// Warps of a SIMT tile.
    pub(super) fn simt_warps(bm: u32, bn: u32) -> u32 {
        (bm / Self::simt_outputs(bm) * (bn / Self::simt_outputs(bn))).div_ceil(32)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Tile {
    pub bm: u32,
    pub bn: u32,
    pub bk: u32,
    /// Warp grid (tensor cores); for SIMT each thread owns a block of the tile (`simt_outputs`).
    pub warps_m: u32,
    pub warps_n: u32,
    pub stages: u32,
    /// Backward-weight: slices of the pixel reduction, and whether they are summed by a
    /// separate kernel (two-stage) rather than by atomics.
    pub splits: u32,
    pub two_stage: bool,
}

/// The problem as the kernel's GEMM sees it, per group.
pub(super) struct Shape {
    /// GEMM rows (of the largest phase for bwd-data).
    pub m: u64,
    /// GEMM columns (taps x Cg for bwd-weight).
    pub n: u64,
    /// Filter taps.
    pub taps: u64,
    /// Channels reduced per tap (fwd/bwd-data) or pixels reduced (bwd-weight).
    pub reduce: u64,
    /// Sub-pixel phases of bwd-data; 1 otherwise.
    pub phases: u64,
    pub groups: u64,
}

impl Shape {
    pub fn new(p: &ConvProblem) -> Self {
        let (cg, kg) = (u64::from(p.c / p.g), u64::from(p.k / p.g));
        let taps: u64 = p.dims.iter().map(|d| u64::from(d.filter)).product();
        let n = u64::from(p.n);
        let output: u64 = p.output_dims().iter().map(|&o| u64::from(o)).product();
        let groups = u64::from(p.g);
        match p.direction {
            Direction::Forward => Shape { m: n * output, n: kg, taps, reduce: cg, phases: 1, groups },
            Direction::BackwardData => {
                let per_phase: u64 = p.dims.iter().map(|d| u64::from(d.input.div_ceil(d.stride))).product();
                let phases = p.dims.iter().map(|d| u64::from(d.stride)).product();
                Shape { m: n * per_phase, n: cg, taps, reduce: kg, phases, groups }
            }
            Direction::BackwardWeight => Shape { m: kg, n: taps * cg, taps, reduce: n * output, phases: 1, groups },
        }
    }

    /// The launch grid of a tile: row tiles, column tiles, groups x phases x slices.
    pub fn grid(&self, t: &Tile) -> (u64, u64, u64) {
        (
            self.m.div_ceil(u64::from(t.bm)),
            self.n.div_ceil(u64::from(t.bn)),
            self.groups * self.phases * u64::from(t.splits),
        )
    }
}

pub(super) fn elem_bytes(dtype: DataType) -> u32 {
    dtype.size_bytes() as u32
}

/// Elements per global->shared copy of each operand (A, B): the widest power of two up to 16
/// bytes that divides the operand's contiguous channel count, so a copy never straddles a
/// group or a pixel.
pub(super) fn copy_widths(p: &ConvProblem) -> (u32, u32) {
    let (cg, kg) = (p.c / p.g, p.k / p.g);
    let max = 16 / elem_bytes(p.dtype);
    let width =
        |channels: u32| [8u32, 4, 2, 1].into_iter().find(|&w| w <= max && channels.is_multiple_of(w)).unwrap_or(1);
    let a = if p.direction == Direction::Forward { cg } else { kg };
    (width(a), width(cg))
}

fn direction_code(d: Direction) -> u32 {
    match d {
        Direction::Forward => 0,
        Direction::BackwardData => 1,
        Direction::BackwardWeight => 2,
    }
}

impl Tile {
    pub fn threads(&self) -> u32 {
        self.warps_m * self.warps_n * 32
    }

    /// Copies per thread and stage of each operand.
    pub fn chunks_per_thread(&self, p: &ConvProblem) -> (u32, u32) {
        let (width_a, width_b) = copy_widths(p);
        let chunks = |rows: u32, width: u32| (rows * self.bk / width).div_ceil(self.threads());
        (chunks(self.bm, width_a), chunks(self.bn, width_b))
    }

    pub fn shared_bytes(&self, p: &ConvProblem) -> u32 {
        let pad = 16 / elem_bytes(p.dtype);
        let (a_kmajor, b_kmajor) = match p.direction {
            Direction::Forward => (true, true),
            Direction::BackwardData => (true, false),
            Direction::BackwardWeight => (false, false),
        };
        let a = if a_kmajor { self.bm * (self.bk + pad) } else { self.bk * (self.bm + pad) };
        let b = if b_kmajor { self.bn * (self.bk + pad) } else { self.bk * (self.bn + pad) };
        self.stages * (a + b) * elem_bytes(p.dtype)
    }

    /// How the kernel writes results: 0 into the output; split backward-weight 1 by atomics
    /// into the fp32 workspace, 2 into its slice of the workspace.
    fn out_mode(&self, p: &ConvProblem) -> u32 {
        match (p.direction, self.splits, self.two_stage) {
            (Direction::BackwardWeight, 2.., false) => 1,
            (Direction::BackwardWeight, 2.., true) => 2,
            _ => 0,
        }
    }

    pub fn workspace_bytes(&self, p: &ConvProblem) -> u64 {
        match (p.direction, self.splits, self.two_stage) {
            (Direction::BackwardWeight, 2.., false) => p.weight_elements() * 4,
            (Direction::BackwardWeight, 2.., true) => p.weight_elements() * 4 * u64::from(self.splits),
            _ => 0,
        }
    }

    pub fn to_config(self, math: Math, direction: Direction) -> Config {
        let (bm, bn, bk, st) = (self.bm, self.bn, self.bk, self.stages);
        let (wm, wn, ks, red) = (self.warps_m, self.warps_n, self.splits, u32::from(self.two_stage));
        let schema = math.schema(direction);
        match (math, direction == Direction::BackwardWeight) {
            (Math::TensorCores, false) => schema.print([bm, bn, bk, wm, wn, st]),
            (Math::TensorCores, true) => schema.print([bm, bn, bk, wm, wn, st, ks, red]),
            (Math::Simt, false) => schema.print([bm, bn, bk, st]),
            (Math::Simt, true) => schema.print([bm, bn, bk, st, ks, red]),
        }
    }

    pub fn from_config(plan: &Planner, p: &ConvProblem, config: &Config) -> Result<Self> {
        let bad = |reason: String| GconvError::BadConfig { text: config.to_string(), reason };
        let schema = plan.math.schema(p.direction);
        let simt_warps = |bm, bn| (Math::simt_warps(bm, bn), 1);
        let (bm, bn, bk, (warps_m, warps_n), stages, (splits, two_stage)) =
            match (plan.math, p.direction == Direction::BackwardWeight) {
                (Math::TensorCores, false) => {
                    let [bm, bn, bk, wm, wn, st] = schema.parse(config)?;
                    (bm, bn, bk, (wm, wn), st, (1, false))
                }
                (Math::TensorCores, true) => {
                    let [bm, bn, bk, wm, wn, st, ks, red] = schema.parse(config)?;
                    (bm, bn, bk, (wm, wn), st, (ks, red == 1))
                }
                (Math::Simt, false) => {
                    let [bm, bn, bk, st] = schema.parse(config)?;
                    (bm, bn, bk, simt_warps(bm, bn), st, (1, false))
                }
                (Math::Simt, true) => {
                    let [bm, bn, bk, st, ks, red] = schema.parse(config)?;
                    (bm, bn, bk, simt_warps(bm, bn), st, (ks, red == 1))
                }
            };
        let tile = Tile { bm, bn, bk, warps_m, warps_n, stages, splits, two_stage };
        tile.check(plan, p).map_err(bad)?;
        Ok(tile)
    }

    /// Why the tile cannot run the problem, if it cannot.
    pub fn check(&self, plan: &Planner, p: &ConvProblem) -> std::result::Result<(), String> {
        let space = plan.math.space();
        if !space.bm.contains(&self.bm) || !space.bn.contains(&self.bn) {
            return Err(format!("bm must be one of {:?} and bn one of {:?}", space.bm, space.bn));
        }
        if !space.bk.contains(&self.bk) {
            return Err(format!("bk must be one of {:?}", space.bk));
        }
        if plan.math == Math::TensorCores {
            if !space.warps.contains(&(self.warps_m, self.warps_n)) {
                return Err(format!("(wm, wn) must be one of {:?}", space.warps));
            }
            let (wm, wn) = (self.bm / self.warps_m, self.bn / self.warps_n);
            if wm % 16 != 0 || wn % 16 != 0 || wm * wn > 64 * 64 {
                return Err(format!("warp tile {wm}x{wn} must be multiples of 16, at most 64x64"));
            }
        }
        let (chunks_a, chunks_b) = self.chunks_per_thread(p);
        if chunks_a.max(chunks_b) > MAX_CHUNKS_PER_THREAD {
            return Err(format!(
                "each thread would copy {chunks_a} chunks of A and {chunks_b} of B, {MAX_CHUNKS_PER_THREAD} at most: use a smaller tile"
            ));
        }
        if !space.stages.contains(&self.stages) {
            return Err(format!("st (pipeline stages) must be one of {:?}", space.stages));
        }
        let (shared, limit) = (self.shared_bytes(p), plan.sm.block_shared_bytes);
        if shared > limit {
            return Err(format!("needs {shared} bytes of shared memory, the GPU has {limit}"));
        }
        if !SPLITS.contains(&self.splits) {
            return Err(format!("ks must be one of {SPLITS:?}"));
        }
        let (_, y, z) = Shape::new(p).grid(self);
        if z > MAX_GRID_YZ || y > MAX_GRID_YZ {
            return Err("the grid would exceed 65535 blocks in y or z".into());
        }
        if self.workspace_bytes(p) > MAX_WORKSPACE_BYTES {
            return Err(format!(
                "{} slices of fp32 weights would need more than {} MiB of workspace",
                self.splits,
                MAX_WORKSPACE_BYTES >> 20
            ));
        }
        Ok(())
    }

    pub fn source(&self, plan: &Planner, p: &ConvProblem) -> KernelSource {
        let src = KernelSource::new("igemm/kernel.cu", SOURCE, p.dtype)
            .define("DIR", direction_code(p.direction))
            .define("BM", self.bm)
            .define("BN", self.bn)
            .define("BK", self.bk)
            .define("THREADS", self.threads())
            .define("STAGES", self.stages)
            .define("CPW_A", copy_widths(p).0)
            .define("CPW_B", copy_widths(p).1)
            .define("OUT_MODE", self.out_mode(p))
            .define("TAP_BITS", if p.dims.iter().all(|d| d.filter <= 10) { 10 } else { MAX_FILTER_TAPS })
            // Only backward-data reads it: the other directions' builds stay shared by strides.
            .define("STRIDED", u32::from(p.direction == Direction::BackwardData && p.dims.iter().any(|d| d.stride > 1)))
            .define("MIN_BLOCKS", self.min_blocks(plan, p));
        match plan.math {
            Math::TensorCores => src.define("TC", 1).define("WARPS_M", self.warps_m).define("WARPS_N", self.warps_n),
            Math::Simt => {
                src.define("TC", 0).define("TM", Math::simt_outputs(self.bm)).define("TN", Math::simt_outputs(self.bn))
            }
        }
    }
}

impl Planner {
    /// Every tile of the config space, before the problem's own checks.
    pub(super) fn candidate_tiles(&self) -> Vec<Tile> {
        let space = self.math.space();
        let mut tiles = Vec::new();
        for &bm in space.bm {
            for &bn in space.bn {
                let warps: Vec<(u32, u32)> = match self.math {
                    Math::TensorCores => space.warps.to_vec(),
                    Math::Simt => vec![(Math::simt_warps(bm, bn), 1)],
                };
                for &bk in space.bk {
                    for &(warps_m, warps_n) in &warps {
                        for &stages in space.stages {
                            tiles.push(Tile { bm, bn, bk, warps_m, warps_n, stages, splits: 1, two_stage: false });
                        }
                    }
                }
            }
        }
        tiles
    }
}
