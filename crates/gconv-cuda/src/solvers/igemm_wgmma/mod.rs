//! `cuda.igemm_wgmma`: implicit GEMM on Hopper's warpgroup MMA (`wgmma.mma_async`) fed by the
//! tensor memory accelerator (kernels/igemm_wgmma/), built for `sm_90a` and offered on sm_90
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

mod cost;
mod geometry;
mod invoke;
mod packing;
mod space;
#[cfg(test)]
mod tests;
mod tile;

use std::borrow::Cow;
use std::sync::Arc;

use cudarc::driver::{CudaFunction, LaunchConfig};
use gconv_core::geometry::Geometry;
use gconv_core::{
    applicability, require, Config, ConvProblem, DataType, Direction, Field, GconvError, Invoker, Layout,
    NotApplicable, Result, Schema, Solve, Solver, Values,
};

use super::group_packing::{self, GroupPacking};
use super::tap_packing::{self, Packing};
use super::{builds_from_kernel, BuiltFrom};
use crate::device::CudaDevice;
use crate::launch::{self, Arg, Buffer, Residency};
use crate::params::{FilterBlocks, ProductArgs, Products, TapMap, MAX_PRODUCTS};
use crate::tma::{Im2col, TensorMap};
use crate::{ConvParams, Cuda, CudaBuffers, KernelSource};

use self::geometry::*;
use self::packing::*;
use self::space::*;
use self::tile::*;

/// The kernel in pieces by role (kernels/igemm_wgmma/), joined into the one source NVRTC builds:
/// compile-time configuration, TMA and wgmma primitives, the pipeline, geometry, the epilogue,
/// then backward-weight's kernel or the other directions'.
const SOURCE: &str = concat!(
    include_str!("../../kernels/igemm_wgmma/config.cuh"),
    include_str!("../../kernels/igemm_wgmma/tma.cuh"),
    include_str!("../../kernels/igemm_wgmma/pipeline.cuh"),
    include_str!("../../kernels/igemm_wgmma/geometry.cuh"),
    include_str!("../../kernels/igemm_wgmma/epilogue.cuh"),
    "#if WEIGHT\n",
    include_str!("../../kernels/igemm_wgmma/weight.cuh"),
    "#else\n",
    include_str!("../../kernels/igemm_wgmma/products.cuh"),
    "#endif\n",
    // split_reduce only in the builds whose split launches it (the kernel's SPLIT 1 and 2).
    "#if SPLIT == 1 || SPLIT == 2\n",
    include_str!("../../kernels/split_reduce.cuh"),
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

impl IgemmWgmma {
    fn default_config(&self, p: &ConvProblem) -> WgmmaConfig {
        WgmmaConfig::default_for_user(p, u64::from(self.device.sm_count))
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
