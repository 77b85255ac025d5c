//! The default config: wave models of the kernel's time, fitted to H100 config sweeps
//! (`bench/wave_model.py`), and the choices they make.

use super::geometry::*;
use super::space::*;
use super::tile::*;
use std::sync::LazyLock;

use serde::Deserialize;

use super::*;

impl WgmmaConfig {
    /// The config a problem starts from on a GPU of `sms` SMs. Forward and backward-data: the
    /// tile and split (of 1, 2 or 4 slices) a wave model of the kernel's time expects to finish
    /// first (see `wave_model`), in pairs of CTAs where the product is narrow on one side and has
    /// many rows. Backward-weight: 1x1 layers, and dense ones whose taps are not in threes, by a
    /// wave model of their own (quickest_weight_one_tap); others columns by input channels per
    /// group, rows by output channels, and the fewest slices of the pixels that fill the GPU
    /// while each keeps a few blocks of work; four stages where they fit.
    pub(super) fn default_for(p: &ConvProblem, sms: u64) -> WgmmaConfig {
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
            // SMs (unsplit), the model's 128-column ones in 17.1 on 96 (H100, the sweep of 771bbaf, 2026-11-23).
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
            // the GPU (five 14x14 1x1 layers on the H100, the sweep of 5f7e743, 2026-11-24: 128 columns in 16
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
            // of 128 input channels (the sweep of 5f7e743, 2026-11-24).
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
        // The tile and split the wave model (`wave_model`) expects to finish first.
        let model = wave_model(p.dtype);
        let modelled = model.tiles.iter().filter_map(|cost| cost.tile(p.dtype).map(|tile| (tile, cost)));
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

/// A tile's time on the GPU: microseconds per reduction block of each wave of units, and per
/// wave (its fill, drain and epilogue).
#[derive(Debug, Deserialize)]
pub(super) struct TileCost {
    pub(super) bn: u32,
    pub(super) wg: u32,
    pub(super) mr: u32,
    pub(super) persistent: bool,
    pub(super) per_block_us: f64,
    pub(super) per_wave_us: f64,
}

/// The fitted wave models (wave-models.json, beside this file, says where each was fitted).
#[derive(Debug, Deserialize)]
pub(super) struct WaveModels {
    forward_and_backward_data_16bit: WaveModel,
    forward_and_backward_data_tf32: WaveModel,
    backward_weight_one_tap_16bit: WeightOneTapModel,
    backward_weight_one_tap_tf32: WeightOneTapModel,
}

static WAVE_MODELS: LazyLock<WaveModels> = LazyLock::new(|| {
    // Data of the build, checked by a test: never a user's input.
    serde_json::from_str(include_str!("wave-models.json")).expect("wave-models.json parses")
});

/// The forward and backward-data model of `dtype` (tf32 has costs of its own).
pub(super) fn wave_model(dtype: DataType) -> &'static WaveModel {
    match dtype {
        DataType::Tf32 => &WAVE_MODELS.forward_and_backward_data_tf32,
        _ => &WAVE_MODELS.forward_and_backward_data_16bit,
    }
}

/// The backward-weight model of one-tap units, for transposed (tf32) tiles or not.
pub(super) fn weight_one_tap_model(transposed: bool) -> &'static WeightOneTapModel {
    if transposed {
        &WAVE_MODELS.backward_weight_one_tap_tf32
    } else {
        &WAVE_MODELS.backward_weight_one_tap_16bit
    }
}

impl TileCost {
    /// The costed tile shape at four stages, or three where four do not fit.
    pub(super) fn tile(&self, dtype: DataType) -> Option<Tile> {
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
#[derive(Debug, Deserialize)]
pub(super) struct WaveModel {
    pub(super) tiles: Vec<TileCost>,
    pub(super) split_us: f64,
    pub(super) split_us_per_million_elements: f64,
}

/// The splits the model was fitted on.
pub(super) const MODELLED_SPLITS: [u32; 3] = [1, 2, 4];

/// Reduction blocks from which a forward or backward-data product may run tiles that are not
/// persistent: with fewer, a unit's stores no longer overlapped by the next one's loads cost
/// more than the model says (the A/B of 13d912f, 2026-11-23: 1x1 layers of 128 columns and 1-6 blocks ran
/// 1.09-1.35x slower in 256 x 128 tiles than in persistent 128 x 128).
pub(super) const MIN_UNOVERLAPPED_BLOCKS: u64 = 8;

/// The wave model's time of `config` on `p`: per launch, ceil(units / SMs) waves of its
/// products with taps, each of their slices' reduction blocks (on average over the units) and
/// the wave's own cost; and the split's cost.
pub(super) fn modelled_us(
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
pub(super) const CLUSTER_MIN_WAVES: u64 = 8;

/// Backward-weight's epilogue per slice, in blocks of pixels' worth of the tile's MMAs: each
/// slice adds its tile of fp32 sums into the workspace.
pub(super) const SLICE_EPILOGUE_BLOCKS: u64 = 8;

/// The atomics of split slices queue GPU-wide, whatever the waves: a block's time per this
/// many sums added. Fitted to the H100 on the 97 dense backward-weight layers with scalar
/// atomics (131072), then doubled as the kernel went to one float2 atomic a pair: of the ten
/// layers where the two choose differently, the doubled one's choice ran faster on nine (c64
/// k64 56x56 3x3 ks64 0.0584 ms against ks32 0.0628; 3D c128 8x28x28 ks32 0.371 against ks4
/// 0.390).
pub(super) const SUMS_PER_ATOMIC_BLOCK: u64 = 262_144;

/// Of `candidates`, the slices of a `reduction`-block reduction that finish first when `tiles`
/// tiles of `tile_sums` sums split that far run on `sms` SMs a wave at a time: ceil(tiles x s /
/// sms) waves, each of reduction / s blocks and one epilogue, and split, the atomics of all
/// tiles x s slices; ties go to fewer slices. On the H100 a count just past a whole wave costs
/// a wave more (the c768 k3072 7x7 1x1 layer's 72 tiles took 0.0511 ms in two slices, 144
/// units on 132 SMs, and 0.0241 ms unsplit), and so do the atomics of 64 tiles of 128 x 256
/// in one wave (c1024 k2048 7x7: 0.0384 ms in two slices).
pub(super) fn quickest_split(tiles: u64, tile_sums: u64, reduction: u64, sms: u64, candidates: &[u32]) -> u32 {
    let time = |s: u32| {
        let s = u64::from(s);
        let atomics = if s > 1 { (tiles * s * tile_sums).div_ceil(SUMS_PER_ATOMIC_BLOCK) } else { 0 };
        (tiles * s).div_ceil(sms) * (reduction.div_ceil(s) + SLICE_EPILOGUE_BLOCKS) + atomics
    };
    candidates.iter().copied().min_by_key(|&s| (time(s), s)).unwrap_or(1)
}

/// The backward-weight wave model of units of one tap (see quickest_weight_one_tap): the tiles'
/// times (as the forward model's; not persistent), and a split's cost, a constant and per million fp32
/// sums of the slices' tiles: by atomics (the zeroing, the reduction's launch and the atomics),
/// and in the cluster.
#[derive(Debug, Deserialize)]
pub(super) struct WeightOneTapModel {
    pub(super) tiles: Vec<TileCost>,
    pub(super) split_us: f64,
    pub(super) split_us_per_million_sums: f64,
    pub(super) cluster_sums_us: f64,
    pub(super) cluster_sums_us_per_million: f64,
}

/// The splits those sweeps took: by atomics, and two slices summed in the cluster (four wait
/// on GPCs with room for clusters of four: 1.2-1.6x the atomics' time there).
pub(super) const WEIGHT_1X1_SPLITS: [Split; 5] = [
    UNSPLIT,
    Split { slices: 2, reduction: Reduction::Atomic },
    Split { slices: 4, reduction: Reduction::Atomic },
    Split { slices: 8, reduction: Reduction::Atomic },
    Split { slices: 2, reduction: Reduction::Cluster },
];

/// The most blocks of pixels the model decides for. In the H100 A/B over 97 backward-weight
/// layers (771bbaf, 2026-11-23) its picks ran 0.88x the rule's time on the 22 layers of 7x7 and 14x14
/// pixels it changed, but 1.0-2.4x on 28x28 and up to 11x on 112x112, where the rule's 16 to
/// 128 slices lie outside the splits it models.
pub(super) const WEIGHT_1X1_MAX_PIXEL_BLOCKS: u64 = 100;

/// The backward-weight tile and split the 1x1 model expects to finish first where each unit
/// sums one tap: ceil(units / SMs) waves of tiles (of every tap) x slices, each of its slice's
/// blocks of pixels and the wave's own cost, and a split's cost. None past the pixels it
/// decides for.
pub(super) fn quickest_weight_one_tap(p: &ConvProblem, sms: u64) -> Option<WgmmaConfig> {
    let geo = Geometry::new(p);
    let pixel_blocks = pixel_blocks(p);
    if pixel_blocks > WEIGHT_1X1_MAX_PIXEL_BLOCKS {
        return None;
    }
    let model = weight_one_tap_model(transposes(p));
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
    let tiles = model.tiles.iter().filter_map(|cost| cost.tile(p.dtype).map(|tile| (tile, cost)));
    let candidates = tiles.flat_map(|(tile, cost)| WEIGHT_1X1_SPLITS.map(|split| (WgmmaConfig { tile, split }, cost)));
    candidates
        .filter(|(config, _)| config.check(p).is_ok())
        .map(|(config, cost)| (modelled(config, cost), config))
        .min_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, config)| config)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_wave_models_parse_with_every_tile_they_were_fitted_on() {
        assert_eq!(wave_model(DataType::Bf16).tiles.len(), 8);
        assert_eq!(wave_model(DataType::Tf32).tiles.len(), 7);
        for transposed in [false, true] {
            let model = weight_one_tap_model(transposed);
            assert_eq!(model.tiles.len(), 6);
            assert!(model.tiles.iter().all(|t| t.per_block_us > 0.0 && t.per_wave_us > 0.0 && !t.persistent));
        }
    }
}
