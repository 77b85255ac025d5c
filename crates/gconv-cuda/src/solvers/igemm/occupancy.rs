//! How many blocks of a tile an SM holds, from the SM's limits read at probe time: what the
//! kernel is built for (`__launch_bounds__`) and how much of L1 it asks to be shared memory.

use gconv_core::{ConvProblem, Direction};

use super::tile::{copy_widths, elem_bytes, Tile};
use super::{Math, Planner};

/// Registers a thread of a light tile is built for: two 256-thread blocks per SM on 64K
/// registers.
const LIGHT_TILE_REGISTERS: u32 = 128;
/// Warps per SM of a pinned SIMT tile (`Tile::simt_pinned`): 128 registers a thread.
const SIMT_PINNED_WARPS: u32 = 16;

impl Tile {
    /// Blocks per SM the kernel is built for (`__launch_bounds__`). Left to itself the compiler
    /// takes a few registers over 128 and so holds a 256-thread tile to one block per SM. Where
    /// the loader is light (16-byte copies, few of them: a local NVRTC sweep of the space
    /// found no spills there), threads get 128 registers when their accumulators fit, and
    /// shared memory sets the count; elsewhere the compiler is left free. SIMT tiles are built
    /// for 16 warps where `simt_pinned`, else left free.
    pub(super) fn min_blocks(&self, plan: &Planner, p: &ConvProblem) -> u32 {
        if plan.math == Math::Simt {
            return if self.simt_pinned(p) { self.simt_resident(p) } else { 1 };
        }
        let (chunks_a, chunks_b) = self.chunks_per_thread(p);
        let widest = 16 / elem_bytes(p.dtype);
        let max_chunks = if p.direction == Direction::BackwardWeight { 4 } else { 6 };
        let accumulators = self.bm / self.warps_m * (self.bn / self.warps_n) / 32;
        let light = plan.math == Math::TensorCores
            && copy_widths(p) == (widest, widest)
            && chunks_a + chunks_b <= max_chunks
            && accumulators <= 64;
        if !light {
            return 1;
        }
        let by_registers = plan.sm.registers / (self.threads() * LIGHT_TILE_REGISTERS);
        let by_shared = plan.sm.shared_bytes / (self.shared_bytes(p) + plan.sm.reserved_shared_bytes);
        by_registers.min(by_shared).max(1)
    }

    /// Whether a SIMT tile is built for 16 warps per SM. Backward-weight's 8-deep tiles read
    /// both operands one reduction step at a time and fit 128 registers without spilling (an
    /// NVRTC sweep of the eight tile shapes), where the compiler left alone takes more and
    /// runs fewer warps (on the H100 3-5% slower at 128 x 128, up to 19% at 64 x 64); forward
    /// and backward-data hold four steps of K-major fragments and spill there.
    pub(super) fn simt_pinned(&self, p: &ConvProblem) -> bool {
        p.direction == Direction::BackwardWeight && self.bk == 8
    }

    /// Blocks of a SIMT tile an SM holds, as the cost model sees it: pinned tiles as built,
    /// the others by 8 warps.
    pub(super) fn simt_resident(&self, p: &ConvProblem) -> u32 {
        let warps = if self.simt_pinned(p) { SIMT_PINNED_WARPS } else { 8 };
        (warps * 32 / self.threads()).max(1)
    }
}

impl Planner {
    /// The share of L1 to give shared memory: enough for as many blocks as registers and
    /// warp slots allow, and no more, as the rest caches the loads that bypass shared memory.
    pub(super) fn carveout_percent(&self, threads: u32, registers: u32, shared: u32) -> u32 {
        let sm = &self.sm;
        let warps = threads.div_ceil(32);
        // Registers are allocated per warp in units of 8 per thread.
        let by_registers = sm.registers / (warps * 32 * registers.next_multiple_of(8)).max(1);
        let per_block = shared + sm.reserved_shared_bytes;
        let by_shared = sm.shared_bytes / per_block;
        let blocks = by_registers.min(by_shared).min(sm.warps / warps).clamp(1, sm.blocks);
        (blocks * per_block * 100).div_ceil(sm.shared_bytes).min(100)
    }
}
