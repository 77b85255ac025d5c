//! cuda.grouped_mma's backward-weight (kernels/grouped_mma_weight.cu): per group, the GEMM
//! of the filter's (tap, input channel) rows by the group's output channels, reduced over
//! output pixels.
//!
//! A block owns `gb` groups x `mb` tiles of 16 filter rows (a chunk of the group's rows, for
//! one depth tap) and walks a slice of the `th` x `tw` tiles of output pixels, staging each
//! tile's dy and the x window it reads in shared memory (double buffered); it adds its sums
//! into an fp32 workspace once at the end, and a second kernel rounds that into dw. A slice
//! is `ub` tiles, more of them fewer slices to add up and fewer blocks to run.

use cudarc::driver::LaunchConfig;
use gconv_core::geometry::Geometry;
use gconv_core::{require, Config, ConvProblem, Field, NotApplicable, Result, Schema, Values};

use super::{check_block, check_fit, preferred_shapes, BlockTile, GROUPS_PER_BLOCK, TILES, TILE_FIELDS, WARPS};
use crate::device::{CudaDevice, SmLimits};
use crate::launch;
use crate::solvers::direct::{self, Kernels};
use crate::KernelSource;

const SOURCE: &str = concat!(
    include_str!("../../kernels/grouped_mma_tiles.cuh"),
    include_str!("../../kernels/grouped_mma_weight.cu"),
    include_str!("../../kernels/weight_store.cuh"),
);
/// Tiles of 16 filter rows a block owns per group.
const ROW_TILES: [u32; 11] = [1, 2, 3, 4, 5, 6, 8, 9, 12, 16, 18];
const MAX_CHANNELS: u32 = 64;
/// A warp's accumulator tiles (16 rows x 8 output channels): 64 fp32 registers per thread,
/// what the kernel's register budget (four blocks of 128 threads per SM) holds without spills.
const MAX_WARP_TILES: u32 = 16;
/// A warp's items (row tiles), each holding a column offset besides its accumulators: 16
/// items of one tile each spill (NVRTC 13.0, sm_90).
const MAX_ITEMS_PER_WARP: u32 = 12;
/// Output tiles a block walks: its share of the reduction.
const UNITS_PER_BLOCK: [u32; 7] = [1, 2, 4, 8, 16, 32, 64];
/// The tile's fields, then rows of filter taps a block (`mb`) and reduction units a block (`ub`).
const SCHEMA: Schema = Schema::new(&[
    TILE_FIELDS[0],
    TILE_FIELDS[1],
    TILE_FIELDS[2],
    Field::new("mb", Values::OneOf(&ROW_TILES)),
    Field::new("ub", Values::OneOf(&UNITS_PER_BLOCK)),
]);
/// The blocks an SM runs at a time at most (the kernel's launch bounds): the preferred slices
/// of the reduction aim at one wave of the blocks that fit.
const BLOCKS_PER_SM: u32 = 4;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Tile {
    th: u32,
    tw: u32,
    gb: u32,
    mb: u32,
    ub: u32,
}

/// Tiles of 16 rows in a group's filter per depth tap: 2D taps x input channels per group.
fn row_tiles(p: &ConvProblem) -> u32 {
    let geo = Geometry::new(p);
    ((geo.filter[1] * geo.filter[2] * geo.cg) as u32).div_ceil(16)
}

impl Tile {
    fn items_per_warp(self) -> u32 {
        self.gb * self.mb / WARPS
    }

    /// Two stages, each the x window a tile of output pixels reads (a row of gb x input
    /// channels and 16 bytes per pixel) and the tile's dy (gb x output channels and 16 bytes).
    fn shared_bytes(self, p: &ConvProblem) -> u64 {
        let geo = Geometry::new(p);
        let window = |i: usize, tile: u32| {
            (u64::from(tile) - 1) * geo.stride[i] as u64 + ((geo.filter[i] - 1) * geo.dilation[i]) as u64 + 1
        };
        let row = |channels: usize| u64::from(self.gb) * channels as u64 * 2 + 16;
        2 * (window(1, self.th) * window(2, self.tw) * row(geo.cg) + u64::from(self.th * self.tw) * row(geo.kg))
    }

    /// Output-pixel tiles of the reduction: images x depth planes x tiles of the plane.
    fn units(self, p: &ConvProblem) -> u64 {
        let [depth, rows, cols] = Geometry::new(p).output.map(|v| v as u64);
        u64::from(p.n) * depth * rows.div_ceil(u64::from(self.th)) * cols.div_ceil(u64::from(self.tw))
    }

    /// Blocks of one slice of the reduction: chunks of filter rows x depth taps, and groups.
    fn slice_blocks(self, p: &ConvProblem) -> (u64, u64) {
        (
            u64::from(row_tiles(p).div_ceil(self.mb)) * Geometry::new(p).filter[0] as u64,
            u64::from(p.g.div_ceil(self.gb)),
        )
    }
}

impl BlockTile for Tile {
    fn takes(p: &ConvProblem) -> Result<(), NotApplicable> {
        let geo = Geometry::new(p);
        for (what, channels) in [("x", geo.cg), ("dy", geo.kg)] {
            require!(
                channels % 8 == 0 && channels as u32 <= MAX_CHANNELS,
                "{what} has {channels} channels per group; takes multiples of 8 up to {MAX_CHANNELS}"
            );
        }
        Ok(())
    }

    fn all() -> Vec<Tile> {
        let shapes = TILES.into_iter().flat_map(|(th, tw)| GROUPS_PER_BLOCK.into_iter().map(move |gb| (th, tw, gb)));
        let blocks = shapes.flat_map(|(th, tw, gb)| ROW_TILES.into_iter().map(move |mb| (th, tw, gb, mb)));
        blocks
            .flat_map(|(th, tw, gb, mb)| UNITS_PER_BLOCK.into_iter().map(move |ub| Tile { th, tw, gb, mb, ub }))
            .collect()
    }

    fn check(self, p: &ConvProblem) -> std::result::Result<(), String> {
        check_block(self.th, self.tw, self.gb)?;
        if !ROW_TILES.contains(&self.mb) {
            return Err(format!("mb must be one of {ROW_TILES:?}"));
        }
        if !UNITS_PER_BLOCK.contains(&self.ub) {
            return Err(format!("ub must be one of {UNITS_PER_BLOCK:?}"));
        }
        let units = self.units(p);
        if self.ub > 1 && u64::from(self.ub / 2) >= units {
            return Err(format!(
                "{} output tiles per block where the problem has {units}: half as many walks them all",
                self.ub
            ));
        }
        if !(self.gb * self.mb).is_multiple_of(WARPS) {
            return Err(format!("{} groups x {} row tiles do not split over {WARPS} warps", self.gb, self.mb));
        }
        let rows = row_tiles(p);
        if self.mb > rows {
            return Err(format!("{} row tiles per group, more than the filter's {rows}", self.mb));
        }
        let (items, tiles) = (self.items_per_warp(), self.items_per_warp() * p.k / p.g / 8);
        if items > MAX_ITEMS_PER_WARP || tiles > MAX_WARP_TILES {
            return Err(format!("{items} row tiles per warp of {tiles} accumulator tiles exceed the registers ({MAX_ITEMS_PER_WARP} row tiles, {MAX_WARP_TILES} accumulator tiles)"));
        }
        check_fit(p, self.th, self.shared_bytes(p))
    }

    /// The fewest chunks of each group's filter rows (each chunk reads x and dy again), then
    /// the fewest rows computed and not stored, then the preferred shapes over the output,
    /// then the most groups up to a 64-channel x slab (the widest reads). Then as many output tiles
    /// per block as leave one wave of the blocks the SMs hold at a time.
    fn preferred(p: &ConvProblem, sms: u32, sm: &SmLimits) -> Option<Tile> {
        let geo = Geometry::new(p);
        let shapes = preferred_shapes(p, geo.output[2] as u32, false);
        let rows = row_tiles(p);
        let widest = (64 / geo.cg as u32).max(1);
        let blocks = shapes.iter().enumerate().flat_map(|(rank, &(th, tw))| {
            GROUPS_PER_BLOCK
                .into_iter()
                .filter(|&gb| gb <= widest)
                .flat_map(move |gb| ROW_TILES.into_iter().map(move |mb| (rank, Tile { th, tw, gb, mb, ub: 1 })))
        });
        let best = blocks
            .filter(|(_, t)| t.check(p).is_ok())
            .min_by_key(|&(rank, t)| (rows.div_ceil(t.mb), rows.div_ceil(t.mb) * t.mb, rank, std::cmp::Reverse(t.gb)));
        best.map(|(_, tile)| {
            let (y, z) = tile.slice_blocks(p);
            let resident = (u64::from(sm.shared_bytes) / (tile.shared_bytes(p) + u64::from(sm.reserved_shared_bytes)))
                .clamp(1, u64::from(BLOCKS_PER_SM));
            let wave = (u64::from(sms) * resident).div_ceil(y * z);
            let ub = UNITS_PER_BLOCK.into_iter().rev().find(|&ub| u64::from(ub) * wave <= tile.units(p)).unwrap_or(1);
            Tile { ub, ..tile }
        })
        .or_else(|| Tile::fitting(p).next())
    }

    fn to_config(self) -> Config {
        SCHEMA.print([self.th, self.tw, self.gb, self.mb, self.ub])
    }

    fn from_fields(config: &Config) -> Result<Tile> {
        let [th, tw, gb, mb, ub] = SCHEMA.parse(config)?;
        Ok(Tile { th, tw, gb, mb, ub })
    }

    /// Slices of the reduction x (chunks of filter rows, depth taps) x blocks of groups.
    fn grid(self, p: &ConvProblem) -> (u64, u64, u64) {
        let (y, z) = self.slice_blocks(p);
        (self.units(p).div_ceil(u64::from(self.ub)), y, z)
    }

    fn source(self, p: &ConvProblem) -> KernelSource {
        KernelSource::new("grouped_mma_weight.cu", SOURCE, p.dtype)
            .define("CG", p.c / p.g)
            .define("KG", p.k / p.g)
            .define("GB", self.gb)
            .define("MB", self.mb)
            .define("TH", self.th)
            .define("TW", self.tw)
    }

    fn kernels(self, p: &ConvProblem, device: &CudaDevice, solver: &str) -> Result<Kernels> {
        let source = self.source(p);
        let partial = device.function(&source, "grouped_mma_weight")?;
        let shared_mem_bytes = self.shared_bytes(p) as u32;
        launch::allow_shared(&partial, shared_mem_bytes, solver)?;
        let (x, y, z) = self.grid(p);
        let partial_launch =
            LaunchConfig { grid_dim: (x as u32, y as u32, z as u32), block_dim: (WARPS * 32, 1, 1), shared_mem_bytes };
        let sums = p.weight_elements();
        let blocks = (sums.div_ceil(u64::from(direct::THREADS)) as u32).clamp(1, device.sm_count * 8);
        Ok(Kernels::Weight { partial, partial_launch, store: device.function(&source, "weight_store")?, sums, blocks })
    }
}

#[cfg(test)]
mod tests {
    use gconv_core::reference::reference;
    use gconv_core::{ConvTensors, Direction};
    use proptest::prelude::*;

    use super::super::drawn_problem;
    use super::*;
    use crate::ConvParams;

    /// The kernel on the CPU, indexing as it does: the grid's blocks, each walking its slice
    /// of output tiles; per tile the x window and dy tile (zeros outside the tensors and past
    /// the last group) at the layout shared_bytes allots, each item's filter rows read from the
    /// window at a lane's pixel plus its row's tap offset; the sums added into a workspace laid
    /// out as dw. An index outside the window or tile fails; what no block adds to stays NaN.
    fn emulate(p: &ConvProblem, t: &ConvTensors, tile: Tile) -> Vec<f64> {
        let q = ConvParams::new(p);
        let (x, dy) = (t.x.to_f32(), t.y.to_f32());
        let [input, output, fil, stride, pad, dil] =
            [q.input, q.output, q.filter, q.stride, q.pad, q.dilation].map(|a| a.map(i64::from));
        let (groups, cg, kg) = (i64::from(q.g), i64::from(q.cg), i64::from(q.kg));
        let (th, tw, gb, mb) = (i64::from(tile.th), i64::from(tile.tw), i64::from(tile.gb), i64::from(tile.mb));
        let at = |s: &[i32; 5], outer: i64, c: i64, pos: [i64; 3]| {
            (outer * i64::from(s[0]) + c * i64::from(s[1]) + (0..3).map(|i| pos[i] * i64::from(s[2 + i])).sum::<i64>())
                as usize
        };
        let taps = fil[1] * fil[2];
        let (tiles_w, tiles) = ((output[2] + tw - 1) / tw, (output[1] + th - 1) / th * ((output[2] + tw - 1) / tw));
        let units = i64::from(q.n) * output[0] * tiles;
        let window_size = |i: usize, tile: i64| (tile - 1) * stride[i] + (fil[i] - 1) * dil[i] + 1;
        let (wy_size, wx_size) = (window_size(1, th), window_size(2, tw));
        let layout = 2 * (wy_size * wx_size * (gb * cg * 2 + 16) + th * tw * (gb * kg * 2 + 16));
        assert_eq!(layout as u64, tile.shared_bytes(p), "shared_bytes and the kernel's layout differ");

        let mut dw = vec![f64::NAN; p.weight_elements() as usize];
        let (slices, chunks_planes, group_blocks) = tile.grid(p);
        for (bx, by, bz) in (0..slices as i64)
            .flat_map(|x| (0..chunks_planes as i64).flat_map(move |y| (0..group_blocks as i64).map(move |z| (x, y, z))))
        {
            let (fd, chunk, g0) = (by % fil[0], by / fil[0], bz * gb);
            let mut acc = vec![0.0f64; (gb * mb * 16 * kg) as usize];
            for u in (bx..units).step_by(slices as usize) {
                let (tile_index, od, n) = (u % tiles, u / tiles % output[0], u / tiles / output[0]);
                let Some(sd) = Some(od * stride[0] - pad[0] + fd * dil[0]).filter(|d| (0..input[0]).contains(d)) else {
                    continue;
                };
                let (oy0, ox0) = (tile_index / tiles_w * th, tile_index % tiles_w * tw);
                let window = |pixel: i64, channel: i64| -> f64 {
                    assert!(
                        (0..wy_size * wx_size).contains(&pixel),
                        "window pixel {pixel} outside its {wy_size} x {wx_size}"
                    );
                    let (sy, sx) =
                        (oy0 * stride[1] - pad[1] + pixel / wx_size, ox0 * stride[2] - pad[2] + pixel % wx_size);
                    let c = g0 * cg + channel;
                    let inside = (0..input[1]).contains(&sy) && (0..input[2]).contains(&sx) && c < groups * cg;
                    if inside {
                        f64::from(x[at(&q.xs, n, c, [sd, sy, sx])])
                    } else {
                        0.0
                    }
                };
                let dy_tile = |pixel: i64, channel: i64| -> f64 {
                    let (oy, ox, c) = (oy0 + pixel / tw, ox0 + pixel % tw, g0 * kg + channel);
                    if oy < output[1] && ox < output[2] && c < groups * kg {
                        f64::from(dy[at(&q.ys, n, c, [od, oy, ox])])
                    } else {
                        0.0
                    }
                };
                for item in 0..gb * mb {
                    let (gi, mt) = (item / mb, chunk * mb + item % mb);
                    for r in 0..16 {
                        // The lane's ldmatrix row: 8 filter rows from the first's tap and channel.
                        let first = mt * 16 + r / 8 * 8;
                        let tap = if first / cg < taps { first / cg } else { 0 };
                        let tap_offset = tap / fil[2] * dil[1] * wx_size + tap % fil[2] * dil[2];
                        let channel = gi * cg + first % cg + r % 8;
                        for pixel in 0..th * tw {
                            let base = pixel / tw * stride[1] * wx_size + pixel % tw * stride[2];
                            let value = window(base + tap_offset, channel);
                            for k in 0..kg {
                                acc[((item * 16 + r) * kg + k) as usize] += value * dy_tile(pixel, gi * kg + k);
                            }
                        }
                    }
                }
            }
            for item in 0..gb * mb {
                let (g, mt) = (g0 + item / mb, chunk * mb + item % mb);
                for r in 0..16 {
                    let (tap, c) = ((mt * 16 + r) / cg, (mt * 16 + r) % cg);
                    if g >= groups || tap >= taps {
                        continue;
                    }
                    for k in 0..kg {
                        let sum = &mut dw[at(&q.ws, g * kg + k, c, [fd, tap / fil[2], tap % fil[2]])];
                        *sum = if sum.is_nan() { 0.0 } else { *sum } + acc[((item * 16 + r) * kg + k) as usize];
                    }
                }
            }
        }
        dw
    }

    /// Grouped backward-weight problems with the channels this kernel takes, 1D to 3D,
    /// strides, dilations and pads over the filter's span.
    fn grouped_problem() -> impl Strategy<Value = ConvProblem> {
        let shape =
            (1usize..=3, prop::sample::select(vec![8u32, 16, 24]), prop::sample::select(vec![8u32, 16]), 2u32..=3);
        let geometry = (prop::collection::vec((3u32..=9, 1u32..=3, 1u32..=3, 0u32..=2, 1u32..=2), 3), 1u32..=2);
        (shape, geometry).prop_filter_map("a valid problem", |((dims, cg, kg, g), (dims_geometry, n))| {
            drawn_problem(Direction::BackwardWeight, n, [cg * g, kg * g, g], &dims_geometry[..dims])
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]
        /// A spread of configs (the preferred one too), indexing as the kernel does over grids
        /// of one or several slices, computes the filter gradient and adds to every element.
        #[test]
        fn the_kernels_indexing_is_the_gradient(p in grouped_problem(), sms in 1u32..=3) {
            let t = ConvTensors::random(&p, 5);
            let exact = reference(&p, &t);
            let scale = exact.iter().fold(1.0f64, |m, r| m.max(r.abs()));
            let space: Vec<Tile> = Tile::fitting(&p).collect();
            let taken = space.len().min(8);
            let spread = (0..taken).map(|i| space[(2 * i + 1) * space.len() / (2 * taken)]);
            let sm = SmLimits::HOPPER;
            for tile in Tile::preferred(&p, sms, &sm).into_iter().chain(spread) {
                let got = emulate(&p, &t, tile);
                prop_assert!(got.iter().all(|v| v.is_finite()), "{} {tile:?}: an element no block adds to", p.key());
                let worst = got.iter().zip(&exact).map(|(g, r)| (g - r).abs() / scale).fold(0.0, f64::max);
                prop_assert!(worst < 1e-9, "{} {tile:?}: off by {worst:e}", p.key());
            }
        }
    }
}
