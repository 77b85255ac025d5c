//! The default tile: the valid tile with the least estimated time. SMs run `ceil(blocks /
//! SMs)` tiles each, each of its reduction steps plus a fixed pipeline fill and epilogue, at a
//! speed set by the warp tile's operand reuse and by how many warps they keep busy. Padding
//! waste shows in `bm x bn` against the problem's rows and columns.

use gconv_core::{ConvProblem, Direction};

use super::tile::{copy_widths, Shape, Tile, SPLITS};
use super::{Math, Planner};

/// Reduction steps' worth of pipeline fill and epilogue a block pays besides its steps (short
/// reductions, and many slices, pay for it).
const FILL_STEPS: f64 = 6.0;
/// Warps per SM that keep the tensor cores or FMA pipes busy; fewer leave them idle.
const BUSY_WARPS: f64 = 8.0;
/// A backward-weight slice keeps at least this many reduction tiles, or its fill dominates.
const MIN_TILES_PER_SLICE: u64 = 8;
/// fp32 FMAs an SM issues a clock, and the bytes L2 feeds it meanwhile (H100: about 5.5 TB/s
/// over 132 SMs at 1.75 GHz).
const SIMT_FMAS_PER_CLOCK: f64 = 128.0;
const SIMT_L2_BYTES: f64 = 24.0;
/// Operand reuse of the 64x64 warp tile (rows x columns over their sum), the reference.
const REFERENCE_REUSE: f64 = 32.0;

impl Planner {
    pub(super) fn default_tile(&self, p: &ConvProblem) -> Tile {
        let shape = Shape::new(p);
        let sms = u64::from(self.sm_count);
        let weight = p.direction == Direction::BackwardWeight;
        let bk = match self.math {
            Math::TensorCores if shape.reduce <= 16 => 16,
            // Backward-weight gathers both operands through per-chunk pixel cursors: shallow
            // tiles keep a thread's chunks, and its registers, few (tuning on the GPU agrees),
            // except where one 32-deep tile holds every pixel (squeeze-excite layers of one
            // pixel: 0.84x the time of 16-deep tiles over the 14 the H100 swept).
            Math::TensorCores if weight && shape.reduce > 32 => 16,
            Math::TensorCores => 32,
            // Narrow copies mean more gathered rows per thread: a shallower tile. Backward-weight
            // takes 8-deep tiles, which hold twice the warps (`Tile::simt_pinned`): on the
            // H100 0.84-0.85x the time of 16-deep ones (128 x 128, four large layers).
            Math::Simt if copy_widths(p).0 < 4 || weight => 8,
            Math::Simt => 16,
        };
        let base = Tile { bm: 0, bn: 0, bk, warps_m: 1, warps_n: 1, stages: 3, splits: 1, two_stage: false };
        let space = self.math.space();
        let mut candidates = Vec::new();
        for &bm in space.bm.iter().rev() {
            // The model was fitted on tiles up to 128 columns; wider ones are left to tuning.
            for &bn in space.bn.iter().rev().filter(|&&bn| bn <= 128) {
                let (warps_m, warps_n) = match self.math {
                    // Four warps (eight for the tallest tile), warp tiles 16 to 64 wide.
                    Math::TensorCores => {
                        let warps_n = (bn / 16).min(2);
                        (((if bm == 256 { 8 } else { 4 }) / warps_n).min(bm / 16), warps_n)
                    }
                    Math::Simt => (Math::simt_warps(bm, bn), 1),
                };
                candidates.push(Tile { bm, bn, warps_m, warps_n, ..base });
            }
        }
        let k_tiles = shape.reduce.div_ceil(u64::from(bk));
        let splits: Vec<u32> = if weight {
            SPLITS.into_iter().filter(|&s| s == 1 || u64::from(s) * MIN_TILES_PER_SLICE <= k_tiles).collect()
        } else {
            vec![1]
        };
        let cost = |t: &Tile| {
            let (x, y, z) = shape.grid(t);
            let per_sm = (x * y * z).div_ceil(sms) as f64;
            let (warp_m, warp_n, resident) = match self.math {
                Math::TensorCores => {
                    let (wm, wn) = (f64::from(t.bm / t.warps_m), f64::from(t.bn / t.warps_n));
                    // Blocks resident per SM, as the accumulators' registers allow.
                    (
                        wm,
                        wn,
                        if wm * wn >= 4096.0 {
                            2.0
                        } else if wm * wn >= 2048.0 {
                            3.0
                        } else {
                            4.0
                        },
                    )
                }
                // A thread's outputs set the reuse: 8 x 8 of them count as the 64 x 64 reference.
                Math::Simt => {
                    let (outputs_m, outputs_n) = (Math::simt_outputs(t.bm), Math::simt_outputs(t.bn));
                    (f64::from(outputs_m * 8), f64::from(outputs_n * 8), f64::from(t.simt_resident(p)))
                }
            };
            // Shared-memory traffic per multiply falls with the warp tile's reuse.
            let reuse = warp_m * warp_n / (warp_m + warp_n) / REFERENCE_REUSE;
            let busy = (per_sm.min(resident) * f64::from(t.threads() / 32) / BUSY_WARPS).min(1.0);
            let steps = if weight {
                k_tiles.div_ceil(u64::from(t.splits))
            } else {
                (shape.taps / shape.phases).max(1) * shape.reduce.div_ceil(u64::from(t.bk))
            };
            // SIMT tiles also wait for their operands: fp32 reaches an SM from L2 at about
            // SIMT_L2_BYTES a clock against 128 FMAs, which starves small tiles (on the H100
            // 64 x 64 backward-weight tiles took 1.19x the time of 128 x 128 ones). Tensor-core
            // tiles' loads overlap their multiplies.
            let loads = match self.math {
                Math::Simt => f64::from((t.bm + t.bn) * 4) * SIMT_FMAS_PER_CLOCK / SIMT_L2_BYTES,
                Math::TensorCores => 0.0,
            };
            per_sm * (f64::from(t.bm * t.bn) / (reuse * busy) + loads) * (steps as f64 + FILL_STEPS)
        };
        // Equal costs go to the larger tile, then, between tiles of one area (and warp tile),
        // to the one that covers the least padding: c144 k6 backward-weight ran 2.76 us in
        // 32 x 32 tiles against 3.95 in 64 x 16.
        let area = |t: &Tile| t.bm * t.bn;
        let covered = |t: &Tile| shape.m.next_multiple_of(u64::from(t.bm)) * shape.n.next_multiple_of(u64::from(t.bn));
        candidates
            .into_iter()
            .flat_map(|t| splits.iter().map(move |&splits| Tile { splits, ..t }))
            .filter(|t| t.check(self, p).is_ok())
            .min_by(|a, b| cost(a).total_cmp(&cost(b)).then(area(b).cmp(&area(a))).then(covered(a).cmp(&covered(b))))
            .unwrap_or(Tile { bm: 64, bn: 64, warps_m: 2, warps_n: 2, ..base })
    }
}
