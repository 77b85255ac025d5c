//! The config space, geometry and packing, checked without a GPU.

use gconv_core::reference::reference;
use gconv_core::testing::small_problem;
use gconv_core::ConvTensors;
use proptest::prelude::*;

use super::cost::*;
use super::geometry::*;
use super::packing::*;
use super::space::*;
use super::tile::*;
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
        let phase_start = (t[0].0 * fil[1] * fil[2] + t[0].1 * (t[1].0 * fil[2] + t[1].1 * t[2].0)) * groups * cg * kg;
        let phase_taps = t[0].1 * t[1].1 * t[2].1;
        let flipped = (t[0].2 * t[1].1 + t[1].2) * t[2].1 + t[2].2;
        for g in 0..groups {
            for k in 0..kg {
                for c in 0..cg {
                    let source = geo.w.offset((g * kg + k) as usize, c as usize, f.map(|x| x as usize));
                    wt[(phase_start + ((g * cg + c) * phase_taps + flipped) * kg + k) as usize] = f64::from(w[source]);
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
            outer * i64::from(s[0]) + c * i64::from(s[1]) + (0..3).map(|i| pos[i] * i64::from(s[2 + i])).sum::<i64>()
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
        let walk =
            if tile.persistent { (cta / cl..units).step_by((grid / cl) as usize).collect() } else { vec![cta / cl] };
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
    assert_eq!(default_config("v1:fwd:bf16:NHWC:n32:c64:k64:i56x56:f3x3:s1x1:p1x1:d1x1"), "bn64_wg2_st4_cl1_ps1_mr2");
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
    // unsplit (7.5 us in the sweep of cda7f63, 2026-11-24, its fastest; 64 x 128 in four slices, 8.7).
    let few_pixels = default_of("v1:bwd-weight:bf16:NHWC:n32:c1152:k192:i7x7:f1x1:s1x1:p0x0:d1x1");
    assert_eq!((few_pixels.tile.bn, few_pixels.tile.wg, few_pixels.split.slices), (64, 1, 1));
    // 1024 x 2048 tiles of 128 x 128 unsplit (19.3 us; the rule's 128 x 256, 23.0).
    let wide = default_of("v1:bwd-weight:bf16:NHWC:n32:c1024:k2048:i7x7:f1x1:s1x1:p0x0:d1x1");
    assert_eq!((wide.tile.bn, wide.tile.wg, wide.split.slices), (128, 2, 1));
    let many_pixels = default_of("v1:bwd-weight:bf16:NHWC:n32:c256:k256:i56x56:f3x3:s1x1:p1x1:d1x1");
    assert_eq!((many_pixels.tile.bn, many_pixels.tile.wg), (256, 2));
    // c192 k1152, 1152 x 192 in tiles of 64 x 64 unsplit: 7.4 us, the sweep's fastest (the
    // model of 771bbaf, 2026-11-23: 128 x 64 in four slices, 9.2; two slices summed in the cluster, 7.6).
    let tall = default_of("v1:bwd-weight:bf16:NHWC:n32:c192:k1152:i7x7:f1x1:s1x1:p0x0:d1x1");
    assert_eq!((tall.tile.bn, tall.tile.wg, tall.split), (64, 1, UNSPLIT));
    // 1x1 past the model's pixels: the rule's many slices (the model's eight took 6x the time).
    let many_pixels_1x1 = default_of("v1:bwd-weight:bf16:NHWC:n32:c64:k64:i56x56:f1x1:s1x1:p0x0:d1x1");
    assert!(many_pixels_1x1.split.slices > 8, "{many_pixels_1x1:?}");
    // 2x2 at stride 2, units of a tap by the model: 768 x 384 x 4 taps in 96 tiles of 128 x
    // 128 unsplit (17.1 us in the sweep of 771bbaf, 2026-11-23, its fastest; the rule's 128 x 256, 22.1).
    let patches = default_of("v1:bwd-weight:bf16:NHWC:n32:c384:k768:i14x14:f2x2:s2x2:p0x0:d1x1");
    assert_eq!((patches.tile.bn, patches.tile.wg, patches.tile.taps, patches.split), (128, 2, 1, UNSPLIT));
    // 14x14 of them: four slices of 128 x 128 (20.3 us, the sweep's fastest).
    let more_patches = default_of("v1:bwd-weight:bf16:NHWC:n32:c192:k384:i28x28:f2x2:s2x2:p0x0:d1x1");
    assert_eq!((more_patches.tile.bn, more_patches.tile.wg, more_patches.split.slices), (128, 2, 4));
}

#[test]
fn blocked_backward_weight_splits_no_further_than_one_wave() {
    // ResNeXt's layers on the H100 (the sweep of ks 2 to 64 of a208f34, 2026-11-23): fastest at these.
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
    // The H100's fastest in the sweep of 5f7e743, 2026-11-24: three taps on 64 columns where 128 cannot
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
    // slices (0.0249 ms on the H100 in the sweep of cda7f63, 2026-11-24; 48 of 128 x 256 in four, 0.0280).
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
    assert_eq!(WgmmaConfig::all(&weight).len(), (tiles + three_tap_tiles) * (1 + 2 * (SPLITS.len() - 1)) + 2 * 52 + 26);
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
    assert!(error(&forward, tile(64, 1, 4, 1, 2)).contains("ps must be one of 0, 1"));
    let split = |cl: u32, ks: u32, red: u32| {
        Config::new([("bn", 64), ("wg", 1), ("st", 4), ("cl", cl), ("ps", 0), ("ks", ks), ("red", red)])
    };
    let one_row_tile = ConvProblem::from_key("v1:bwd-weight:bf16:NHWC:n2:c64:k64:i8x8:f3x3:s1x1:p1x1:d1x1").unwrap();
    assert!(error(&one_row_tile, split(2, 1, 0)).contains("shares loads between row tiles"));
    assert!(error(&weight, split(1, 1, 1)).contains("needs ks over 1"));
    assert!(error(&weight, split(1, 8, 2)).contains("red 2 (sums in the cluster) takes ks [2, 4]"));
    assert!(error(&weight, split(1, 2, 4)).contains("red must be one of 0, 1, 2, 3"));
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
    let slices =
        |bn: u32, wg: u32, mr: u32| Config::new([("bn", bn), ("wg", wg), ("st", 3), ("cl", 1), ("ps", 1), ("mr", mr)]);
    assert_eq!(WgmmaConfig::from_config(&forward, &slices(128, 2, 2)).unwrap().tile.rows(), 256);
    assert!(error(&forward, slices(256, 1, 2)).contains("accumulators"));
    assert!(error(&forward, slices(64, 1, 3)).contains("mr must be"));
    let weight_slices =
        Config::new([("bn", 64), ("wg", 1), ("st", 3), ("cl", 1), ("ps", 0), ("ks", 1), ("red", 0), ("mr", 2)]);
    assert!(error(&weight, weight_slices).contains("forward's and backward-data's"));
    let misplaced = Config::new([("bn", 64), ("wg", 1), ("mr", 2), ("st", 3), ("cl", 1), ("ps", 1)]);
    assert!(error(&forward, misplaced)
        .contains("expected bn<64|128|256>_wg<1|2>_st<3|4|5|9>_cl<1|2>_ps<0|1>_tp<1|2|3|4>?_mr<1|2>?_hl<0|1>?"));
    assert!(WgmmaConfig::from_config(&weight, &tile(64, 1, 4, 1, 0)).is_err(), "backward-weight wants ks and red");
    // Forward reads its unsplit configs without ks and red, as they were written before splits.
    assert_eq!(WgmmaConfig::from_config(&forward, &tile(64, 1, 4, 1, 0)).unwrap().split, UNSPLIT);
    assert_eq!(
        WgmmaConfig::from_config(&forward, &split(1, 4, 1)).unwrap().to_config(Direction::Forward),
        split(1, 4, 1)
    );
    assert!(error(&forward, split(1, 16, 0)).contains("reduction of 9 blocks"));
}
