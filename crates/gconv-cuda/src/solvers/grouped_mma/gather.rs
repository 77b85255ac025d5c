//! cuda.grouped_mma's forward and backward-data (kernels/grouped_mma.cu), at any stride.
//!
//! A block stages the source window of a `th` x `tw` tile of destination pixels (halo and
//! zero padding included) for `gb` groups in shared memory, with those groups' filters; its
//! warps multiply 16-pixel rows of the tile by each group's filter, the im2col gather done by
//! ldmatrix's per-lane row addresses from a table of tap offsets. Backward-data gathers dy
//! directly (no phase split): a pixel's taps the stride does not divide read a zero row, which
//! costs tensor-core work the memory-bound small groups have to spare.

use cudarc::driver::LaunchConfig;
use gconv_core::geometry::Geometry;
use gconv_core::{require, Config, ConvProblem, Direction, NotApplicable, Result, Schema};

use super::{check_block, check_fit, preferred_shapes, BlockTile, GROUPS_PER_BLOCK, TILES, TILE_FIELDS, WARPS};
use crate::device::{CudaDevice, SmLimits};
use crate::launch;
use crate::solvers::direct::Kernels;
use crate::KernelSource;

const SCHEMA: Schema = Schema::new(&TILE_FIELDS);
const SOURCE: &str =
    concat!(include_str!("../../kernels/grouped_mma_tiles.cuh"), include_str!("../../kernels/grouped_mma.cu"));
/// Channels per group the product reduces: ldmatrix rows of 8, a tap's channels per step of 16.
const REDUCED: [u32; 4] = [8, 16, 32, 64];
const MAX_WRITTEN: u32 = 64;
/// A warp's items (two 16-pixel rows x one group) and their accumulators per thread: the
/// kernel's register budget (four blocks of 128 threads per SM) holds no more without spills.
const MAX_ITEMS_PER_WARP: u32 = 4;
const MAX_ACCUMULATORS: u32 = 64;

/// Channels per group the product reduces and writes: forward C/G and K/G, backward-data
/// the other way round.
fn channels(p: &ConvProblem) -> (u32, u32) {
    let geo = Geometry::new(p);
    let (cg, kg) = (geo.cg as u32, geo.kg as u32);
    if p.direction == Direction::BackwardData {
        (kg, cg)
    } else {
        (cg, kg)
    }
}

/// The destination's extents (depth, rows, columns).
fn destination(p: &ConvProblem) -> [u32; 3] {
    let geo = Geometry::new(p);
    (if p.direction == Direction::BackwardData { geo.input } else { geo.output }).map(|v| v as u32)
}

/// The kernel's FILTER_PITCH: backward-data's filter row, in bytes.
fn filter_pitch(written: u64) -> u64 {
    ((written / 8) | 1) * 16
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Tile {
    th: u32,
    tw: u32,
    gb: u32,
}

impl Tile {
    fn items_per_warp(self) -> u32 {
        self.th * self.tw / 32 * self.gb / WARPS
    }

    /// The kernel's layout: the source window (a row of gb x reduced channels and 16 bytes
    /// per pixel), the filters, a zero row, the tap table (an int per phase and half step),
    /// and forward's filter columns' offsets (an int per step element). Forward's filters are
    /// a row per group and written channel (depth taps x the steps of 16 over taps x reduced
    /// channels, and 8 elements); backward-data's a row per group, depth tap and step element,
    /// of the written channels padded to an odd number of 16 bytes.
    fn shared_bytes(self, p: &ConvProblem) -> u64 {
        let geo = Geometry::new(p);
        let (reduced, written) = (u64::from(channels(p).0), u64::from(channels(p).1));
        let backward = p.direction == Direction::BackwardData;
        let window = |i: usize, tile: u32| {
            let (stride, reach) = (geo.stride[i] as u64, ((geo.filter[i] - 1) * geo.dilation[i]) as u64);
            let tile = u64::from(tile);
            if backward {
                (tile - 1 + reach).div_ceil(stride) + 1
            } else {
                (tile - 1) * stride + reach + 1
            }
        };
        let pixels = window(1, self.th) * window(2, self.tw);
        let gb = u64::from(self.gb);
        let taps = (geo.filter[1] * geo.filter[2]) as u64;
        let steps = (taps * reduced).div_ceil(16);
        let depth_taps = geo.filter[0] as u64;
        let tables = if backward {
            gb * depth_taps * steps * 16 * filter_pitch(written)
                + (geo.stride[1] * geo.stride[2]) as u64 * steps * 2 * 4
        } else {
            gb * written * (depth_taps * steps * 16 + 8) * 2 + steps * 2 * 4 + steps * 16 * 4
        };
        pixels * (gb * reduced * 2 + 16) + 16 + tables
    }
}

impl BlockTile for Tile {
    fn takes(p: &ConvProblem) -> Result<(), NotApplicable> {
        let (reduced, written) = channels(p);
        require!(REDUCED.contains(&reduced), "reduces {reduced} channels per group; takes {REDUCED:?}");
        require!(
            written.is_multiple_of(8) && written <= MAX_WRITTEN,
            "writes {written} channels per group; takes multiples of 8 up to {MAX_WRITTEN}"
        );
        Ok(())
    }

    fn all() -> Vec<Tile> {
        TILES.into_iter().flat_map(|(th, tw)| GROUPS_PER_BLOCK.into_iter().map(move |gb| Tile { th, tw, gb })).collect()
    }

    fn check(self, p: &ConvProblem) -> std::result::Result<(), String> {
        check_block(self.th, self.tw, self.gb)?;
        let pairs = self.th * self.tw / 32;
        if !(pairs * self.gb).is_multiple_of(WARPS) {
            return Err(format!("{pairs} pairs of pixel rows x {} groups do not split over {WARPS} warps", self.gb));
        }
        let (_, written) = channels(p);
        let items = self.items_per_warp();
        if items > MAX_ITEMS_PER_WARP || items * written > MAX_ACCUMULATORS {
            return Err(format!("{items} items per warp x {written} channels exceed the registers ({MAX_ITEMS_PER_WARP} items, {MAX_ACCUMULATORS} accumulators)"));
        }
        check_fit(p, self.th, self.shared_bytes(p))
    }

    /// The preferred shapes over the destination (a forward stride widens the window); as
    /// many groups as make a 64-channel source slab, fewer where the tile must shrink to fit.
    fn preferred(p: &ConvProblem, _sms: u32, _sm: &SmLimits) -> Option<Tile> {
        let [_, _, cols] = destination(p);
        let strided = p.direction == Direction::Forward && Geometry::new(p).stride.iter().any(|&s| s > 1);
        let shapes = preferred_shapes(p, cols, strided);
        let (reduced, _) = channels(p);
        let widest = (64 / reduced).max(1);
        let candidates = shapes.iter().flat_map(|&(th, tw)| {
            GROUPS_PER_BLOCK.into_iter().rev().filter(move |&gb| gb <= widest).map(move |gb| Tile { th, tw, gb })
        });
        candidates.into_iter().find(|t| t.check(p).is_ok()).or_else(|| Tile::fitting(p).next())
    }

    fn to_config(self) -> Config {
        SCHEMA.print([self.th, self.tw, self.gb])
    }

    fn from_fields(config: &Config) -> Result<Tile> {
        let [th, tw, gb] = SCHEMA.parse(config)?;
        Ok(Tile { th, tw, gb })
    }

    fn grid(self, p: &ConvProblem) -> (u64, u64, u64) {
        let [depth, rows, cols] = destination(p).map(u64::from);
        (
            rows.div_ceil(u64::from(self.th)) * cols.div_ceil(u64::from(self.tw)),
            u64::from(p.n) * depth,
            u64::from(p.g.div_ceil(self.gb)),
        )
    }

    fn source(self, p: &ConvProblem) -> KernelSource {
        let (reduced, written) = channels(p);
        KernelSource::new("grouped_mma.cu", SOURCE, p.dtype)
            .define("BACKWARD_DATA", u32::from(p.direction == Direction::BackwardData))
            .define("RC", reduced)
            .define("WC", written)
            .define("GB", self.gb)
            .define("TH", self.th)
            .define("TW", self.tw)
    }

    fn kernels(self, p: &ConvProblem, device: &CudaDevice, solver: &str) -> Result<Kernels> {
        let function = device.function(&self.source(p), "grouped_mma")?;
        let shared_mem_bytes = self.shared_bytes(p) as u32;
        launch::allow_shared(&function, shared_mem_bytes, solver)?;
        let (x, y, z) = self.grid(p);
        let launch =
            LaunchConfig { grid_dim: (x as u32, y as u32, z as u32), block_dim: (WARPS * 32, 1, 1), shared_mem_bytes };
        Ok(Kernels::Gather { function, launch })
    }
}

#[cfg(test)]
mod tests {
    use gconv_core::reference::reference;
    use gconv_core::ConvTensors;
    use proptest::prelude::*;

    use super::super::drawn_problem;
    use super::*;
    use crate::ConvParams;

    /// The kernel on the CPU, indexing as it does: each block's source window (zeros outside
    /// the tensor and past the last group), the tap table, the filter rows, each ldmatrix
    /// row's base pixel and phase, the reduction in steps of 16 over taps x channels; an index
    /// outside the window shared_bytes allots fails the test. What no block writes stays NaN.
    fn emulate(p: &ConvProblem, t: &ConvTensors, tile: Tile) -> Vec<f64> {
        let q = ConvParams::new(p);
        let backward = p.direction == Direction::BackwardData;
        let (rc, wc) = (i64::from(channels(p).0), i64::from(channels(p).1));
        let (src, dst_len, src_ext, dst_ext, ss, ds) = match backward {
            true => (t.y.to_f32(), t.x.len(), q.output, q.input, q.ys, q.xs),
            false => (t.x.to_f32(), t.y.len(), q.input, q.output, q.xs, q.ys),
        };
        let (src_ext, dst_ext) = (src_ext.map(i64::from), dst_ext.map(i64::from));
        let w = t.w.to_f32();
        let [fil, stride, pad, dil] = [q.filter, q.stride, q.pad, q.dilation].map(|a| a.map(i64::from));
        let at = |s: &[i32; 5], outer: i64, c: i64, pos: [i64; 3]| {
            (outer * i64::from(s[0]) + c * i64::from(s[1]) + (0..3).map(|i| pos[i] * i64::from(s[2 + i])).sum::<i64>())
                as usize
        };
        let window_dim = |o0: i64, tile: i64, i: usize| {
            let reach = (fil[i] - 1) * dil[i];
            match backward {
                true => {
                    ((o0 + pad[i] - reach).div_euclid(stride[i]), (tile - 1 + reach + stride[i] - 1) / stride[i] + 1)
                }
                false => (o0 * stride[i] - pad[i], (tile - 1) * stride[i] + reach + 1),
            }
        };
        let (th, tw, gb, groups) = (i64::from(tile.th), i64::from(tile.tw), i64::from(tile.gb), i64::from(p.g));
        let taps = fil[1] * fil[2];
        let steps = (taps * rc + 15) / 16;
        let (half_steps, pixel_bytes) = (steps * 2, gb * rc * 2 + 16);
        let phases_x = if backward { stride[2] } else { 1 };
        let (_, wx_size) = window_dim(0, tw, 2);
        let phases = if backward { stride[1] * stride[2] } else { 1 };
        // The kernel's table: per phase and half step (a tap's channels c0 .. c0 + 7) the byte
        // offset from a lane's base pixel row, NO_TAP where it reads nothing.
        let table: Vec<i64> = (0..phases * half_steps)
            .map(|i| {
                let (phase, tap, c0) = (i / half_steps, i % half_steps * 8 / rc, i % half_steps * 8 % rc);
                if tap >= taps {
                    return NO_TAP;
                }
                let (fh, fw) = (tap / fil[2], tap % fil[2]);
                if !backward {
                    return (fh * dil[1] * wx_size + fw * dil[2]) * pixel_bytes + c0 * 2;
                }
                let (ry, rx) = (phase / phases_x - fh * dil[1], phase % phases_x - fw * dil[2]);
                if ry % stride[1] == 0 && rx % stride[2] == 0 {
                    (ry / stride[1] * wx_size + rx / stride[2]) * pixel_bytes + c0 * 2
                } else {
                    NO_TAP
                }
            })
            .collect();
        // The filter element of row (g, n) at depth tap fd and column kk: w at the row's offset
        // (`across`) plus the column's (`along`, none past the taps); w[k][c] has forward's k
        // the row's channel, backward-data's the column's.
        let ws = q.ws.map(i64::from);
        let filter = |g: i64, n: i64, fd: i64, kk: i64| -> f64 {
            let (tap, c) = (kk / rc, kk % rc);
            if g >= groups || tap >= taps {
                return 0.0;
            }
            let tap_part = tap / fil[2] * ws[3] + tap % fil[2] * ws[4];
            let (across, along) = match backward {
                true => (g * rc * ws[0] + n * ws[1] + fd * ws[2], c * ws[0] + tap_part),
                false => ((g * wc + n) * ws[0] + fd * ws[2], c * ws[1] + tap_part),
            };
            f64::from(w[(across + along) as usize])
        };
        // The kernel's layout: window, filter rows, zero row, tap table, forward's column offsets.
        let (_, y_size) = window_dim(0, th, 1);
        let filters = match backward {
            true => gb * fil[0] * steps * 16 * filter_pitch(wc as u64) as i64,
            false => gb * wc * (fil[0] * steps * 16 + 8) * 2 + steps * 16 * 4,
        };
        let layout = y_size * wx_size * (gb * rc * 2 + 16) + filters + 16 + phases * half_steps * 4;
        assert_eq!(layout as u64, tile.shared_bytes(p), "shared_bytes and the kernel's layout differ");
        let mut dst = vec![f64::NAN; dst_len];
        let (tiles_h, tiles_w) = ((dst_ext[1] + th - 1) / th, (dst_ext[2] + tw - 1) / tw);
        for (block, n, od, g0) in grid_blocks(tiles_h * tiles_w, i64::from(p.n), dst_ext[0], (groups + gb - 1) / gb) {
            let (oy0, ox0) = (block / tiles_w * th, block % tiles_w * tw);
            let ((y_start, y_size), (x_start, x_size)) = (window_dim(oy0, th, 1), window_dim(ox0, tw, 2));
            // The element at a byte address of the window: its pixel row, and its channel of the
            // block's groups (never the row's 16 bytes of padding).
            let window = |byte: i64, sd: i64| -> f64 {
                assert!(
                    (0..y_size * x_size * pixel_bytes).contains(&byte),
                    "byte {byte} outside the {y_size} x {x_size} window"
                );
                let (pixel, slab_c) = (byte / pixel_bytes, byte % pixel_bytes / 2);
                assert!(slab_c < gb * rc, "channel {slab_c} in a pixel row's padding");
                let (sy, sx, g) = (y_start + pixel / x_size, x_start + pixel % x_size, g0 * gb + slab_c / rc);
                if sy < 0 || sy >= src_ext[1] || sx < 0 || sx >= src_ext[2] || g >= groups {
                    return 0.0;
                }
                f64::from(src[at(&ss, n, g * rc + slab_c % rc, [sd, sy, sx])])
            };
            for pixel in 0..th * tw {
                let (oy, ox) = (oy0 + pixel / tw, ox0 + pixel % tw);
                let (base, phase) = match backward {
                    true => (
                        ((oy + pad[1]) / stride[1] - y_start) * x_size + (ox + pad[2]) / stride[2] - x_start,
                        ((oy + pad[1]) % stride[1] * phases_x + (ox + pad[2]) % stride[2]) * half_steps,
                    ),
                    false => ((oy - oy0) * stride[1] * x_size + (ox - ox0) * stride[2], 0),
                };
                for g in g0 * gb..(g0 + 1) * gb {
                    for n_out in 0..wc {
                        let mut sum = 0.0;
                        for fd in 0..fil[0] {
                            let sd = src_coord(od, fd, stride[0], pad[0], dil[0], src_ext[0], backward);
                            let Some(sd) = sd else { continue };
                            // A lane's row: its base pixel row's group channels, plus the table's
                            // offset for its half step; ldmatrix reads 8 elements from there.
                            let row_base = base * pixel_bytes + (g - g0 * gb) * rc * 2;
                            for kk in 0..steps * 16 {
                                let offset = table[(phase + kk / 8) as usize];
                                if offset != NO_TAP {
                                    sum += window(row_base + offset + kk % 8 * 2, sd) * filter(g, n_out, fd, kk);
                                }
                            }
                        }
                        if g < groups && oy < dst_ext[1] && ox < dst_ext[2] {
                            dst[at(&ds, n, g * wc + n_out, [od, oy, ox])] = sum;
                        }
                    }
                }
            }
        }
        dst
    }

    /// The kernel's NO_TAP.
    const NO_TAP: i64 = i32::MIN as i64;

    /// Every block of the grid: tile, image, depth plane, block of groups.
    fn grid_blocks(
        tiles: i64,
        images: i64,
        depth: i64,
        group_blocks: i64,
    ) -> impl Iterator<Item = (i64, i64, i64, i64)> {
        (0..tiles).flat_map(move |b| {
            (0..images).flat_map(move |n| (0..depth).flat_map(move |d| (0..group_blocks).map(move |g| (b, n, d, g))))
        })
    }

    /// common.cuh's src_coord.
    fn src_coord(dst: i64, f: i64, stride: i64, pad: i64, dil: i64, extent: i64, backward: bool) -> Option<i64> {
        if !backward {
            let i = dst * stride + f * dil - pad;
            return (0..extent).contains(&i).then_some(i);
        }
        let t = dst + pad - f * dil;
        (t >= 0 && t % stride == 0 && t / stride < extent).then(|| t / stride)
    }

    /// Grouped problems with the channels this solver takes, 1D to 3D, forward and
    /// backward-data, strides, dilations and pads over the filter's span.
    fn grouped_problem() -> impl Strategy<Value = ConvProblem> {
        let shape = (
            1usize..=3,
            prop::sample::select(vec![8u32, 16, 32]),
            prop::sample::select(vec![8u32, 16, 24]),
            2u32..=3,
            any::<bool>(),
        );
        let geometry = (prop::collection::vec((3u32..=9, 1u32..=3, 1u32..=3, 0u32..=2, 1u32..=2), 3), 1u32..=2);
        (shape, geometry).prop_filter_map(
            "a valid problem",
            |((dims, reduced, written, g, backward), (dims_geometry, n))| {
                let (c, k) = if backward { (written * g, reduced * g) } else { (reduced * g, written * g) };
                let direction = if backward { Direction::BackwardData } else { Direction::Forward };
                drawn_problem(direction, n, [c, k, g], &dims_geometry[..dims])
            },
        )
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]
        /// Every config's blocks, indexing as the kernel does, compute the convolution and
        /// write every destination element.
        #[test]
        fn the_kernels_indexing_is_the_convolution(p in grouped_problem()) {
            let t = ConvTensors::random(&p, 5);
            let exact = reference(&p, &t);
            let scale = exact.iter().fold(1.0f64, |m, r| m.max(r.abs()));
            for tile in Tile::fitting(&p) {
                let got = emulate(&p, &t, tile);
                prop_assert!(got.iter().all(|v| v.is_finite()), "{} {tile:?}: an element no block writes", p.key());
                let worst = got.iter().zip(&exact).map(|(g, r)| (g - r).abs() / scale).fold(0.0, f64::max);
                prop_assert!(worst < 1e-9, "{} {tile:?}: off by {worst:e}", p.key());
            }
        }
    }
}
