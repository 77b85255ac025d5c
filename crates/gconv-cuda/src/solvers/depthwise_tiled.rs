//! `cuda.depthwise_tiled`: depthwise (G = C = K) forward, backward-data and backward-weight
//! in the channels-last layouts, and the forward and backward-data of groups of 2 or 4
//! channels (C = K), from shared-memory tiles (kernels/depthwise_tiled.cu). A block stages the
//! source rectangle its (`th` x `rh`) x `tw` destination tile reads, halo included, for 32
//! lanes of channels (two per lane in 16-bit types), then each thread sums `rh` rows x `tw`
//! columns from it with its channels' weights in registers. Strided backward-data stages the
//! dy rectangle the tile of dx meets and visits, per destination phase, only the taps its
//! strides divide. Backward-weight tiles dy the same way; a block walks many tiles, reduces its
//! warps' per-tap sums in shared memory and adds them to an fp32 workspace once; or (`tr` 1)
//! its warps split the filter's rows, one each, over the whole `th` x `rh` rows of the tile,
//! so that a thread keeps a row of taps' sums rather than all of them (large filters'
//! registers); with `db` 1 it stages each tile while it multiplies the one before (two
//! buffers). Tunable: `th` (warps per block), `rh` (rows per thread), `tw` (columns per
//! thread), and for backward-weight `tr` and `db`; the filter height and width are
//! compile-time, the sizes run-time.

use std::sync::Arc;

use cudarc::driver::LaunchConfig;
use gconv_core::geometry::Geometry;
use gconv_core::{
    require, Config, ConvProblem, DataType, Direction, Field, GconvError, Invoker, Layout, NotApplicable, Result,
    Schema, Solve, Solver, Values,
};

use super::direct::{self, check_filter, filter_hw, DirectInvoker, Kernels, THREADS};
use super::{builds_from_kernel, BuiltFrom};
use crate::device::{CudaDevice, SmLimits};
use crate::launch;
use crate::{ConvParams, Cuda, KernelSource};

const SOURCE: &str =
    concat!(include_str!("../kernels/depthwise_tiled.cu"), include_str!("../kernels/depthwise_weight_store.cuh"));
/// Warps a block (`th`), rows a thread (`rh`), columns a block (`tw`); backward-weight's warp
/// per row of taps (`tr`) and two staging buffers (`db`), written only where 1 so that the
/// configs from before them read as they did.
const SCHEMA: Schema = Schema::new(&[
    Field::new("th", Values::OneOf(&[4, 8])),
    Field::new("rh", Values::OneOf(&[1, 2, 4])),
    Field::new("tw", Values::OneOf(&[4, 8])),
    Field::unless("tr", Values::OneOf(&[0, 1]), 0),
    Field::unless("db", Values::OneOf(&[0, 1]), 0),
]);
/// Shared memory a block may take: an opt-in above 48 KB, so that large filters (7 x 7
/// backward-weight) get tiles wide enough to amortize their halo, and two blocks still fit
/// an SM.
const MAX_STAGED_BYTES: u64 = 96 << 10;
const MAX_GRID_Z: u32 = 65_535;
/// Channels per group (in and out) the kernels take: 1 is depthwise.
const GROUP_CHANNELS: [u32; 3] = [1, 2, 4];
/// A thread's weights in registers where a group has more than one channel: FH x FW x its
/// CPT channels x the group's (3x3 bf16 groups of 4: 72, 182 registers; 7x7 spills).
const MAX_GROUP_WEIGHTS: u32 = 72;

pub struct DepthwiseTiled {
    pub device: Arc<CudaDevice>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Tile {
    th: u32,
    rh: u32,
    tw: u32,
    /// Backward-weight: a warp per row of taps (TAP_ROWS).
    tap_rows: bool,
    /// Backward-weight: two staging buffers (BUFFERS 2), the next tile's copies landing while
    /// the block multiplies one, and as many blocks as the SMs hold at once.
    double: bool,
}

/// The extents (depth, rows, columns) the tiles cover, outer ones 1 below 3D: the destination
/// (the output forward, the input's gradient backward-data), or dy backward-weight.
fn tiled(p: &ConvProblem) -> [u32; 3] {
    let g = Geometry::new(p);
    (if p.direction == Direction::BackwardData { g.input } else { g.output }).map(|v| v as u32)
}

/// Channel blocks: 32 lanes of channels per block.
fn channel_blocks(p: &ConvProblem) -> u32 {
    (p.c / channels_per_thread(p)).div_ceil(32)
}

/// Channels per group, in and out (C = K: 1 depthwise).
fn group_channels(p: &ConvProblem) -> u32 {
    p.c / p.g
}

/// Whether `p`'s groups are the kernels': depthwise in every direction, or 2 or 4 channels in
/// and out forward and backward-data with few enough weights for a thread's registers.
fn takes_groups(p: &ConvProblem) -> Result<(), NotApplicable> {
    let gc = group_channels(p);
    require!(
        p.c == p.k && p.c.is_multiple_of(p.g) && GROUP_CHANNELS.contains(&gc),
        "needs C = K with {GROUP_CHANNELS:?} channels per group (depthwise or small groups), got G={} C={} K={}",
        p.g,
        p.c,
        p.k
    );
    if gc > 1 {
        require!(
            p.direction != Direction::BackwardWeight,
            "backward-weight only depthwise (G = C = K); groups of {gc} channels are cuda.grouped_direct's"
        );
        let (fh, fw) = filter_hw(p);
        let weights = fh * fw * channels_per_thread(p) * gc;
        require!(weights <= MAX_GROUP_WEIGHTS, "groups of {gc} channels with a {fh}x{fw} filter would hold {weights} weights a thread, over {MAX_GROUP_WEIGHTS}");
    }
    Ok(())
}

/// Channels per thread: a 4-byte pair of 16-bit values, or one fp32.
fn channels_per_thread(p: &ConvProblem) -> u32 {
    if p.dtype.size_bytes() == 2 {
        2
    } else {
        1
    }
}

/// Bytes per staging copy: a 16-byte vector where every pixel's channels start 16-byte aligned,
/// else one 4-byte chunk.
fn staging_copy_bytes(p: &ConvProblem) -> u32 {
    if (u64::from(p.c) * p.dtype.size_bytes() as u64).is_multiple_of(16) {
        16
    } else {
        4
    }
}

/// The problem's (stride, dilation) along H and W.
fn hw(p: &ConvProblem) -> [(u32, u32); 2] {
    let g = Geometry::new(p);
    [1, 2].map(|i| (g.stride[i] as u32, g.dilation[i] as u32))
}

/// Backward-data with a stride over 1: by destination phase (kernel define PHASED).
fn phased(p: &ConvProblem) -> bool {
    p.direction == Direction::BackwardData && p.dims.iter().any(|d| d.stride > 1)
}

/// Strided backward-data compiles each phase's taps: dilation 1 along H and W.
fn phases_compile(p: &ConvProblem) -> Result<(), NotApplicable> {
    require!(
        !phased(p) || hw(p).iter().all(|&(_, dilation)| dilation == 1),
        "strided backward-data needs dilation 1 along H and W (its taps are compiled in by phase), got {:?}",
        hw(p).map(|(_, dilation)| dilation)
    );
    Ok(())
}

/// Every tile for `p`, in config order: backward-weight's with the warps on dy's rows and,
/// where the filter has more than one row, on the taps' rows, each with one staging buffer
/// and with two.
fn tiles(p: &ConvProblem) -> impl Iterator<Item = Tile> {
    let weight = p.direction == Direction::BackwardWeight;
    let tap_rows = weight && filter_hw(p).0 > 1;
    SCHEMA
        .all()
        .map(|[th, rh, tw, tr, db]| Tile { th, rh, tw, tap_rows: tr == 1, double: db == 1 })
        .filter(move |t| (tap_rows || !t.tap_rows) && (weight || !t.double))
}

impl Tile {
    /// `tr` and `db` are written only where they are 1, so the other configs read as before
    /// they existed.
    fn to_config(self) -> Config {
        SCHEMA.print([self.th, self.rh, self.tw, u32::from(self.tap_rows), u32::from(self.double)])
    }

    /// Warps per block.
    fn warps(self, p: &ConvProblem) -> u32 {
        if self.tap_rows {
            filter_hw(p).0
        } else {
            self.th
        }
    }

    /// Shared memory a block takes: the source rectangle it stages, 128 bytes per pixel, and
    /// backward-weight's dy tile (both twice with two buffers) and fp32 per-tap sums.
    fn staged_bytes(self, p: &ConvProblem) -> u64 {
        const PIXEL: u64 = 128;
        let (fh, fw) = filter_hw(p);
        let [(sh, dh), (sw, dw)] = hw(p);
        let (rows, cols) = if phased(p) {
            // dy pixels a dx span of `outputs` meets through `taps` taps at `stride`: at most
            // this many, whatever the span's phase.
            let span = |outputs: u32, taps: u32, stride: u32| u64::from((outputs + taps - 2) / stride + 2);
            (span(self.th * self.rh, fh, sh), span(self.tw, fw, sw))
        } else {
            (
                u64::from((self.th * self.rh - 1) * sh + (fh - 1) * dh + 1),
                u64::from((self.tw - 1) * sw + (fw - 1) * dw + 1),
            )
        };
        let source = rows * cols * PIXEL;
        if p.direction != Direction::BackwardWeight {
            return source;
        }
        let dy = u64::from(self.th * self.rh * self.tw) * PIXEL;
        let sums = if self.tap_rows { 0 } else { u64::from(fh * fw * 32 * channels_per_thread(p)) * 4 };
        let buffers = if self.double { 2 } else { 1 };
        buffers * (source + dy) + sums
    }

    /// What a sweep of 46 real depthwise layers (H100, bf16) found fastest most often: four
    /// warps, eight columns, four rows per thread where the tiled extent has room for them,
    /// fewer where the staging would not fit. Forward groups of several channels, whose weights
    /// take a thread's registers, two rows first (the H100's c128 g32 56x56 3x3, three passes
    /// of each in one lease: 66.8 -> 61.7 us; its backward-data ran 60.5 -> 63.7, so keeps four). Backward-weight with 5x5 filters and larger: a
    /// warp per row of taps, since the all-taps sums take 168-250 registers a thread there
    /// (two or three blocks an SM). Backward-weight with all taps in a thread streams its tiles
    /// through two buffers where one-buffer blocks would run in 2.5 waves or more, two or fewer
    /// to an SM (H100: 0.74x and 0.86x the time on the two such layers of 23): there a block
    /// waiting on its copies idles half the SM. With more blocks an SM their copies overlap
    /// each other's work already (c32 112x112: 1.18x the time), and with fewer waves the
    /// blocks the SMs no longer hold cost more (up to 1.42x).
    fn default_for(p: &ConvProblem, sm: &SmLimits, sms: u32) -> Tile {
        let [_, rows, _] = tiled(p);
        let (fh, fw) = filter_hw(p);
        let tap_rows = p.direction == Direction::BackwardWeight && fh > 1 && fh * fw >= 25;
        let fits = |t: &Tile| t.staged_bytes(p) <= MAX_STAGED_BYTES;
        let row_order = if group_channels(p) > 1 && p.direction == Direction::Forward { [2, 4, 1] } else { [4, 2, 1] };
        let preferred = |double: bool| {
            row_order.into_iter().filter(|&rh| rows >= 14 || rh <= 2).map(move |rh| Tile {
                th: 4,
                rh,
                tw: 8,
                tap_rows,
                double,
            })
        };
        let single = preferred(false).find(fits).or_else(|| tiles(p).find(fits)).unwrap_or(Tile {
            th: 4,
            rh: 1,
            tw: 8,
            tap_rows,
            double: false,
        });
        let per_sm = single.blocks_per_sm(p, sm);
        let waves = (single.blocks(p) as f64) / f64::from(sms * per_sm);
        if p.direction != Direction::BackwardWeight || tap_rows || waves < 2.5 || per_sm > 2 {
            return single;
        }
        preferred(true).find(fits).unwrap_or(single)
    }

    /// Blocks of one buffer, a tile each (backward-weight: of every channel block and depth tap).
    fn blocks(self, p: &ConvProblem) -> u64 {
        let [depth, rows, cols] = tiled(p);
        let plane_tiles = u64::from(rows.div_ceil(self.th * self.rh) * cols.div_ceil(self.tw));
        let taps = if p.direction == Direction::BackwardWeight { Geometry::new(p).filter[0] as u64 } else { 1 };
        u64::from(p.n) * u64::from(depth) * plane_tiles * u64::from(channel_blocks(p)) * taps
    }

    /// Blocks an SM holds at once, by shared memory and warps.
    fn blocks_per_sm(self, p: &ConvProblem, sm: &SmLimits) -> u32 {
        let shared = self.staged_bytes(p) as u32 + sm.reserved_shared_bytes;
        (sm.shared_bytes / shared).min(sm.warps / self.warps(p)).clamp(1, sm.blocks)
    }

    fn from_config(p: &ConvProblem, config: &Config) -> Result<Self> {
        let bad = |reason: String| GconvError::BadConfig { text: config.to_string(), reason };
        let [th, rh, tw, tr, db] = SCHEMA.parse(config)?;
        if tr == 1 && !tiles(p).any(|t| t.tap_rows) {
            return Err(bad(
                "tr (a warp per row of taps) is for backward-weight with filters of more than one row".into()
            ));
        }
        if db == 1 && p.direction != Direction::BackwardWeight {
            return Err(bad("db (two staging buffers) is for backward-weight".into()));
        }
        let tile = Tile { th, rh, tw, tap_rows: tr == 1, double: db == 1 };
        if tile.staged_bytes(p) > MAX_STAGED_BYTES {
            return Err(bad(format!("the tile stages {} bytes, over {MAX_STAGED_BYTES}", tile.staged_bytes(p))));
        }
        Ok(tile)
    }

    fn source(self, p: &ConvProblem) -> KernelSource {
        let (fh, fw) = filter_hw(p);
        // Dilation 1: each staged value loaded once per thread, the strides compiled in.
        let [(sh, dh), (sw, dw)] = hw(p);
        let unit = dh == 1 && dw == 1;
        let source = KernelSource::new("depthwise_tiled.cu", SOURCE, p.dtype)
            .define("FH", fh)
            .define("FW", fw)
            .define("CPT", channels_per_thread(p))
            .define("TH", self.th)
            .define("RH", self.rh)
            .define("TW", self.tw)
            .define("COPY", staging_copy_bytes(p))
            .define("UNIT", u32::from(unit))
            .define("BACKWARD_DATA", u32::from(p.direction == Direction::BackwardData))
            .define("PHASED", u32::from(phased(p)))
            .define("TAP_ROWS", u32::from(self.tap_rows))
            .define("BUFFERS", if self.double { 2 } else { 1 })
            .define("GC", group_channels(p));
        if unit {
            source.define("SH", sh).define("SW", sw)
        } else {
            source
        }
    }
}

impl Solver for DepthwiseTiled {
    fn id(&self) -> &'static str {
        "cuda.depthwise_tiled"
    }

    fn applicable(&self, p: &ConvProblem) -> Result<(), NotApplicable> {
        takes_groups(p)?;
        check_filter(p)?;
        require!(p.layout == Layout::Nhwc, "needs a channels-last layout (NWC, NHWC, NDHWC)");
        require!(
            p.dtype != DataType::Tf32,
            "tf32 has nothing to multiply on tensor cores here; the fp32 problem runs it"
        );
        require!(
            p.c.is_multiple_of(channels_per_thread(p)),
            "needs an even channel count in 16-bit types (two channels per 4-byte load), got C={}",
            p.c
        );
        phases_compile(p)?;
        // One block row per image and destination depth (backward-weight: per depth tap).
        let rows = if p.direction == Direction::BackwardWeight {
            Geometry::new(p).filter[0] as u64
        } else {
            u64::from(p.n) * u64::from(tiled(p)[0])
        };
        require!(
            rows <= u64::from(MAX_GRID_Z),
            "{rows} block rows (N x depth, or depth taps) are over the grid's {MAX_GRID_Z}"
        );
        require!(self.configs(p).next().is_some(), "no tile's halo fits in {MAX_STAGED_BYTES} bytes of shared memory");
        Ok(())
    }

    fn workspace_bytes(&self, p: &ConvProblem, _config: &Config) -> u64 {
        direct::workspace_bytes(p)
    }

    fn default_config(&self, p: &ConvProblem) -> Config {
        Tile::default_for(p, &self.device.sm, self.device.sm_count).to_config()
    }

    fn configs<'a>(&'a self, p: &'a ConvProblem) -> Box<dyn Iterator<Item = Config> + 'a> {
        Box::new(tiles(p).filter(|t| t.staged_bytes(p) <= MAX_STAGED_BYTES).map(Tile::to_config))
    }

    fn check_config(&self, p: &ConvProblem, config: &Config) -> Result<()> {
        Tile::from_config(p, config).map(|_| ())
    }

    builds_from_kernel!();
}

impl BuiltFrom for DepthwiseTiled {
    fn device(&self) -> &CudaDevice {
        &self.device
    }

    fn kernels(&self, p: &ConvProblem, config: &Config) -> Result<Vec<KernelSource>> {
        Ok(vec![Tile::from_config(p, config)?.source(p)])
    }
}

impl Solve<Cuda> for DepthwiseTiled {
    fn solution(&self, p: &ConvProblem, config: &Config) -> Result<Box<dyn Invoker<Cuda>>> {
        let tile = Tile::from_config(p, config)?;
        let source = tile.source(p);
        let function = |name: &str| self.device.function(&source, name);
        let params = ConvParams::new(p);
        let [depth, rows, cols] = tiled(p);
        let plane_tiles = rows.div_ceil(tile.th * tile.rh) * cols.div_ceil(tile.tw);
        let block_dim = (32, tile.warps(p), 1);
        let shared_mem_bytes = tile.staged_bytes(p) as u32;
        let main = function(if p.direction == Direction::BackwardWeight { "dw_tiled_bwd_weight" } else { "dw_tiled" })?;
        launch::allow_shared(&main, shared_mem_bytes, self.id())?;
        let kernels = if p.direction == Direction::BackwardWeight {
            // Blocks walk the tiles, each reducing over several before its one round of atomics:
            // with one buffer enough of them to fill the GPU about eight deep, with two (which
            // stream their tiles) as many as the SMs hold at once.
            let taps = Geometry::new(p).filter[0] as u32;
            let tiles = u64::from(p.n) * u64::from(depth) * u64::from(plane_tiles);
            let sms = self.device.sm_count;
            let per_sm = if tile.double { tile.blocks_per_sm(p, &self.device.sm) } else { 8 };
            let workers =
                (sms * per_sm).div_ceil(channel_blocks(p) * taps).clamp(1, tiles.min(u64::from(u32::MAX)) as u32);
            Kernels::Weight {
                partial: main,
                partial_launch: LaunchConfig {
                    grid_dim: (workers, channel_blocks(p), taps),
                    block_dim,
                    shared_mem_bytes,
                },
                store: function("dw_bwd_weight_store")?,
                sums: p.weight_elements(),
                blocks: (p.weight_elements() as u32).div_ceil(THREADS).clamp(1, sms * 8),
            }
        } else {
            let launch =
                LaunchConfig { grid_dim: (plane_tiles, channel_blocks(p), p.n * depth), block_dim, shared_mem_bytes };
            Kernels::Gather { function: main, launch }
        };
        Ok(Box::new(DirectInvoker { solver: self.id(), params, direction: p.direction, kernels }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn takes_depthwise_and_groups_of_two_or_four_channels_forward_and_backward_data() {
        let reason = |key: &str| takes_groups(&ConvProblem::from_key(key).unwrap()).err().map(|r| r.0);
        assert_eq!(reason("v1:fwd:bf16:NHWC:n32:c128:k128:i56x56:f3x3:s1x1:p1x1:d1x1:g32"), None);
        assert_eq!(reason("v1:bwd-data:f32:NHWC:n2:c36:k36:i9x9:f3x3:s1x1:p1x1:d1x1:g18"), None);
        assert_eq!(reason("v1:bwd-weight:bf16:NHWC:n2:c64:k64:i9x9:f7x7:s1x1:p3x3:d1x1:g64"), None);
        let weight = reason("v1:bwd-weight:bf16:NHWC:n32:c128:k128:i56x56:f3x3:s1x1:p1x1:d1x1:g32").unwrap();
        assert!(weight.contains("backward-weight only depthwise"), "{weight}");
        let eight = reason("v1:fwd:bf16:NHWC:n32:c256:k256:i56x56:f3x3:s1x1:p1x1:d1x1:g32").unwrap();
        assert!(eight.contains("channels per group"), "{eight}");
        assert!(reason("v1:fwd:bf16:NHWC:n2:c64:k32:i9x9:f3x3:s1x1:p1x1:d1x1:g16")
            .unwrap()
            .contains("got G=16 C=64 K=32"));
        // 5x5 x 2 channels x groups of 4: 200 weights a thread.
        assert!(reason("v1:fwd:bf16:NHWC:n2:c64:k64:i9x9:f5x5:s1x1:p2x2:d1x1:g16").unwrap().contains("200 weights"));
    }

    #[test]
    fn strided_backward_data_stages_the_dy_its_phases_meet() {
        let p = ConvProblem::from_key("v1:bwd-data:bf16:NHWC:n32:c144:k144:i56x56:f5x5:s2x2:p2x2:d1x1:g144").unwrap();
        assert!(phased(&p) && phases_compile(&p).is_ok());
        // 16 x 8 pixels of dx meet at most (16 + 3) / 2 + 2 = 11 rows and (8 + 3) / 2 + 2 = 7
        // columns of dy.
        assert_eq!(Tile { th: 4, rh: 4, tw: 8, tap_rows: false, double: false }.staged_bytes(&p), 11 * 7 * 128);
        assert!(!phased(&ConvProblem { direction: Direction::Forward, ..p.clone() }));
        let dilated = ConvProblem::from_key("v1:bwd-data:bf16:NHWC:n2:c64:k64:i19x19:f3x3:s2x2:p2x2:d2x2:g64").unwrap();
        assert!(phases_compile(&dilated).unwrap_err().0.contains("dilation 1 along H and W"));
    }

    #[test]
    fn forward_groups_of_several_channels_default_to_two_rows_a_thread() {
        let h100 = SmLimits::HOPPER;
        let rows = |key: &str| Tile::default_for(&ConvProblem::from_key(key).unwrap(), &h100, 132).rh;
        assert_eq!(rows("v1:fwd:bf16:NHWC:n32:c128:k128:i56x56:f3x3:s1x1:p1x1:d1x1:g32"), 2);
        assert_eq!(rows("v1:bwd-data:bf16:NHWC:n32:c128:k128:i56x56:f3x3:s1x1:p1x1:d1x1:g32"), 4);
        assert_eq!(rows("v1:fwd:bf16:NHWC:n32:c128:k128:i56x56:f3x3:s1x1:p1x1:d1x1:g128"), 4);
    }

    #[test]
    fn tap_row_configs_round_trip_and_belong_to_backward_weight() {
        let weight =
            ConvProblem::from_key("v1:bwd-weight:bf16:NHWC:n2:c64:k64:i14x14:f7x7:s1x1:p3x3:d1x1:g64").unwrap();
        let forward = ConvProblem { direction: Direction::Forward, ..weight.clone() };
        let all: Vec<Tile> = tiles(&weight).collect();
        assert_eq!(all.iter().filter(|t| t.tap_rows).count() * 2, all.len());
        for tile in all.iter().filter(|t| t.staged_bytes(&weight) <= MAX_STAGED_BYTES) {
            assert_eq!(Tile::from_config(&weight, &tile.to_config()).unwrap(), *tile);
        }
        assert!(tiles(&forward).all(|t| !t.tap_rows));
        let tap_rows = Config::new([("th", 4), ("rh", 4), ("tw", 8), ("tr", 1)]);
        assert!(Tile::from_config(&forward, &tap_rows)
            .unwrap_err()
            .to_string()
            .contains("tr (a warp per row of taps)"));
        assert_eq!(Tile::from_config(&weight, &tap_rows).unwrap().warps(&weight), 7);
        // Configs written before tr existed read as the all-taps kernel.
        assert!(!Tile::from_config(&weight, &Config::new([("th", 4), ("rh", 4), ("tw", 8)])).unwrap().tap_rows);
    }

    #[test]
    fn backward_weight_streams_through_two_buffers_where_few_blocks_an_sm_run_many_waves() {
        let h100 = SmLimits::HOPPER;
        let key = |direction: &str, c: u32, size: u32, stride: u32| {
            ConvProblem::from_key(&format!(
                "v1:{direction}:bf16:NHWC:n32:c{c}:k{c}:i{size}x{size}:f3x3:s{stride}x{stride}:p1x1:d1x1:g{c}"
            ))
            .unwrap()
        };
        let weight = key("bwd-weight", 144, 56, 2);
        let single = Tile { th: 4, rh: 4, tw: 8, tap_rows: false, double: false };
        let double = Tile { rh: 2, double: true, ..single };
        // 33 x 17 source pixels and 16 x 8 of dy, 128 bytes each; 3 x 3 taps x 64 fp32 sums.
        assert_eq!(single.staged_bytes(&weight), (33 * 17 + 16 * 8) * 128 + 9 * 64 * 4);
        // Two rows a thread: 17 x 17 and 8 x 8, twice.
        assert_eq!(double.staged_bytes(&weight), 2 * (17 * 17 + 8 * 8) * 128 + 9 * 64 * 4);
        // 256 tiles x 3 channel blocks at two blocks an SM: 2.9 waves.
        assert_eq!((single.blocks(&weight), single.blocks_per_sm(&weight, &h100)), (768, 2));
        assert_eq!(Tile::default_for(&weight, &h100, 132), double);
        // 14 x 14 dy: 64 tiles x 9 channel blocks at five an SM, under one wave.
        let small = key("bwd-weight", 576, 14, 1);
        assert_eq!(Tile::default_for(&small, &h100, 132), single);
        // 3136 tiles at five an SM (23 KB of source pixels): 4.8 waves whose copies overlap.
        let narrow = key("bwd-weight", 32, 112, 1);
        assert_eq!((single.blocks(&narrow), single.blocks_per_sm(&narrow, &h100)), (3136, 5));
        assert_eq!(Tile::default_for(&narrow, &h100, 132), single);
        assert_eq!(Tile::default_for(&key("fwd", 144, 56, 2), &h100, 132), single);
        for tile in [single, double] {
            assert_eq!(Tile::from_config(&weight, &tile.to_config()).unwrap(), tile);
        }
        let forward = ConvProblem { direction: Direction::Forward, ..weight.clone() };
        assert!(Tile::from_config(&forward, &double.to_config())
            .unwrap_err()
            .to_string()
            .contains("db (two staging buffers)"));
        let unordered = Config::new([("th", 4), ("rh", 2), ("tw", 8), ("db", 1), ("tr", 1)]);
        assert!(Tile::from_config(&weight, &unordered)
            .unwrap_err()
            .to_string()
            .contains("expected th<4|8>_rh<1|2|4>_tw<4|8>_tr<0|1>?_db<0|1>?"));
    }
}
