//! The config (`WgmmaConfig`): its fields and text form, the space of valid configs, and the
//! halo choice.

use super::geometry::*;
use super::packing::*;
use super::tile::*;
use super::*;

/// The config's text: the block tile (`bn` columns, `wg` consumer warpgroups, `st` stages, `cl`
/// CTAs a cluster, `ps` a persistent grid), the split (`ks` slices, `red` how they are summed: 0
/// atomics, 1 two-stage, 2 in the cluster, 3 stream-K), then taps a unit (`tp`), row slices a
/// consumer (`mr`) and the source staged with its halo (`hl`), each written only where not 1,
/// 1 and 0, so that configs from before them read as they did.
const TILE_FIELDS: [Field; 5] = [
    Field::new("bn", Values::OneOf(&COLUMNS)),
    Field::new("wg", Values::OneOf(&CONSUMERS)),
    Field::new("st", Values::OneOf(&[STAGES[0], STAGES[1], STAGES[2], HELD_STAGES])),
    Field::new("cl", Values::OneOf(&CLUSTERS)),
    Field::new("ps", Values::OneOf(&[0, 1])),
];
const LATER_FIELDS: [Field; 3] = [
    Field::unless("tp", Values::OneOf(&UNIT_TAPS), 1),
    Field::unless("mr", Values::OneOf(&ROW_SLICES), 1),
    Field::unless("hl", Values::OneOf(&[0, 1]), 0),
];
/// Forward's and backward-data's unsplit configs.
const UNSPLIT_SCHEMA: Schema = Schema::new(&[
    TILE_FIELDS[0],
    TILE_FIELDS[1],
    TILE_FIELDS[2],
    TILE_FIELDS[3],
    TILE_FIELDS[4],
    LATER_FIELDS[0],
    LATER_FIELDS[1],
    LATER_FIELDS[2],
]);
/// Backward-weight's configs, and the other directions' where they split.
const SPLIT_SCHEMA: Schema = Schema::new(&[
    TILE_FIELDS[0],
    TILE_FIELDS[1],
    TILE_FIELDS[2],
    TILE_FIELDS[3],
    TILE_FIELDS[4],
    Field::new("ks", Values::OneOf(&SPLITS)),
    Field::new("red", Values::OneOf(&[0, 1, 2, 3])),
    LATER_FIELDS[0],
    LATER_FIELDS[1],
    LATER_FIELDS[2],
]);

/// A config: the block tile and the split (as cuda.igemm_tc has them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct WgmmaConfig {
    pub(super) tile: Tile,
    pub(super) split: Split,
}

impl WgmmaConfig {
    pub(super) fn from_config(p: &ConvProblem, config: &Config) -> Result<Self> {
        let bad = |reason: String| GconvError::BadConfig { text: config.to_string(), reason };
        let parsed = if p.direction == Direction::BackwardWeight || config.get("ks").is_some() {
            let [bn, wg, st, cl, ps, slices, red, taps, mr, hl] = SPLIT_SCHEMA.parse(config)?;
            let tile = Tile { bn, wg, st, cl, persistent: ps == 1, taps, mr, halo: hl == 1 };
            let reduction = Reduction::from_code(red).ok_or_else(|| bad(format!("no reduction {red}")))?;
            WgmmaConfig { tile, split: Split { slices, reduction } }
        } else {
            let [bn, wg, st, cl, ps, taps, mr, hl] = UNSPLIT_SCHEMA.parse(config)?;
            let tile = Tile { bn, wg, st, cl, persistent: ps == 1, taps, mr, halo: hl == 1 };
            WgmmaConfig { tile, split: UNSPLIT }
        };
        parsed.check(p).map_err(bad)?;
        Ok(parsed)
    }

    pub(super) fn to_config(self, direction: Direction) -> Config {
        let Tile { bn, wg, st, cl, persistent, taps, mr, halo } = self.tile;
        let (ps, hl) = (u32::from(persistent), u32::from(halo));
        if direction == Direction::BackwardWeight || self.split != UNSPLIT {
            let (ks, red) = (self.split.slices, self.split.reduction.code());
            SPLIT_SCHEMA.print([bn, wg, st, cl, ps, ks, red, taps, mr, hl])
        } else {
            UNSPLIT_SCHEMA.print([bn, wg, st, cl, ps, taps, mr, hl])
        }
    }

    pub(super) fn check(self, p: &ConvProblem) -> std::result::Result<(), String> {
        self.tile.check(p.dtype)?;
        self.split.check()?;
        if self.tile.halo {
            HaloTile::check(p, self)?;
        }
        let slices = self.split.slices;
        if self.split.reduction == Reduction::Cluster {
            self.tile.check_cluster_sums(p, slices)?;
        }
        if self.split.reduction == Reduction::StreamK {
            if p.direction != Direction::BackwardWeight {
                return Err("red 3 (stream-K) is backward-weight's".into());
            }
            if self.tile.cl > 1 || self.tile.persistent {
                return Err("red 3 (stream-K) runs lone CTAs on a grid of its own: cl 1, ps 0".into());
            }
        }
        if self.tile.mr > 1 && p.direction == Direction::BackwardWeight {
            return Err("mr over 1 is forward's and backward-data's".into());
        }
        let accumulators = self.tile.bn / 2 * self.tile.taps;
        if transposes(p) && self.tile.wg > 1 && accumulators > MAX_ACCUMULATORS_BESIDE_TRANSPOSER {
            return Err(format!("tf32 backward-weight's two consumers beside its transposing producer hold {MAX_ACCUMULATORS_BESIDE_TRANSPOSER} accumulators a thread, bn {} x tp {} needs {accumulators}", self.tile.bn, self.tile.taps));
        }
        let taps = self.tile.taps;
        if taps > 1 {
            if p.direction != Direction::BackwardWeight {
                return Err("tp over 1 is backward-weight's".into());
            }
            let filter_taps = Geometry::new(p).filter_volume() as u32;
            if !filter_taps.is_multiple_of(taps) {
                return Err(format!("tp {taps} does not divide the filter's {filter_taps} taps"));
            }
        }
        if p.direction != Direction::BackwardWeight {
            let blocks = Product::longest_reduction(&Product::all(p), p.dtype);
            if slices > MAX_PRODUCT_SPLITS || u64::from(slices) > blocks {
                return Err(format!("ks {slices} splits a reduction of {blocks} blocks (up to {MAX_PRODUCT_SPLITS} slices, each with a block)"));
            }
        }
        let (row_tiles, units) = self.work(p);
        if self.tile.cl > 1 && row_tiles < 2 {
            return Err(format!(
                "cl {} shares loads between row tiles, and this problem has one of {} rows",
                self.tile.cl,
                self.tile.rows()
            ));
        }
        if units * u64::from(self.tile.cl) > MAX_GRID_X {
            return Err(format!("{units} work units exceed the grid"));
        }
        if self.split.reduction == Reduction::StreamK {
            let blocks = pixel_blocks(p);
            if units * blocks > i32::MAX as u64 {
                return Err(format!("red 3 (stream-K) counts {units} tiles x {blocks} blocks of pixels in 32 bits"));
            }
        }
        let bytes = self.split.workspace_bytes(destination_elements(p));
        if bytes > MAX_WORKSPACE_BYTES {
            return Err(format!(
                "{slices} slices would need {} MiB of fp32 workspace, more than {}",
                bytes >> 20,
                MAX_WORKSPACE_BYTES >> 20
            ));
        }
        Ok(())
    }

    /// The row tiles and the work units (clusters' worth of row tiles, see the kernel) of the
    /// largest launch.
    pub(super) fn work(self, p: &ConvProblem) -> (u64, u64) {
        if p.direction == Direction::BackwardWeight {
            let geo = Geometry::new(p);
            let row_tiles = (geo.kg as u64).div_ceil(u64::from(self.tile.rows()));
            let per_tap_group =
                row_tiles.div_ceil(u64::from(self.tile.cl)) * (geo.cg as u64).div_ceil(u64::from(self.tile.bn));
            let tap_groups = geo.filter_volume() as u64 / u64::from(self.tile.taps);
            return (row_tiles, per_tap_group * tap_groups * u64::from(self.split.slices) * u64::from(p.g));
        }
        let products = Product::all(p);
        let largest = products.iter().max_by_key(|product| product.rows);
        largest
            .map_or((0, 0), |product| (product.row_tiles(self.tile), product.units(self.tile, p.g, self.split.slices)))
    }

    /// Stream-K's grid and workspace for backward-weight's `p` on `sms` SMs.
    pub(super) fn stream_k(self, p: &ConvProblem, sms: u32) -> StreamK {
        StreamK::new(self.work(p).1, pixel_blocks(p), sms)
    }

    /// The tile's kernels for `p`, run for `user` (see IgemmWgmma::products); they compile the
    /// epilogue of a split through the workspace only where they split so (it would slow every
    /// other build; backward-weight's builds compile only the epilogue of their own output
    /// mode: a third to half the NVRTC time of a build).
    pub(super) fn source(self, p: &ConvProblem, user: &ConvProblem) -> KernelSource {
        let source =
            self.tile.source(p).define("KSPLIT", self.split.cluster_slices()).define("SPLIT", self.split.mode());
        // Defined only where set, so that other builds keep their keys.
        let filled = filled_filter(user, self.tile);
        let source = match filled {
            Some(channels) => source.define("FILL_FILTER", channels),
            None => source,
        };
        let source = match diagonal(user, self.tile) {
            Some(channels) => source.define("DIAGONAL", channels),
            None => source,
        };
        let reads_filter_groups = p.direction != Direction::BackwardWeight && user.g != p.g && filled.is_none();
        let source = if reads_filter_groups { source.define("FILTER_GROUPS", 1) } else { source };
        match p.direction {
            Direction::BackwardWeight => {
                source.define("TAPS", self.tile.taps).define("SRC_TILED", u32::from(reads_source_tiled(p)))
            }
            _ => {
                let products = if Product::all(p).len() == 1 { 1 } else { MAX_PRODUCTS };
                let source = source.define("FILTER_MN", u32::from(reads_filter_directly(p)));
                // Defined only where set, so that other builds keep their keys.
                let source = if p.direction == Direction::BackwardData && !reads_filter_directly(p) {
                    source.define("FLIP_FILTER", 1)
                } else {
                    source
                };
                source
                    .define("MAX_PRODUCTS", MAX_PRODUCTS)
                    .define("PRODUCTS", products)
                    .define("SRC_TILED", u32::from(reads_source_tiled(p)))
            }
        }
    }

    /// `p`'s kernels on this config of its products' layer (`p`, or `packed`'s layer): the
    /// products', as solution runs them (on `p`'s tensors in place, else on the layer's own),
    /// and the packing kernel around them where they do not take `p`'s in place.
    pub(super) fn sources(self, p: &ConvProblem, packed: Option<&Packed>) -> (KernelSource, Option<KernelSource>) {
        let layer = packed.map_or(p, Packed::layer);
        let around = packed.filter(|packed| !packed.in_place(self.tile.writes_held_filter()));
        let user = if around.is_some() { layer } else { p };
        (self.source(layer, user), around.map(|packed| packed.source(p.dtype)))
    }

    /// Every config for `p`'s direction.
    pub(super) fn all(p: &ConvProblem) -> Vec<WgmmaConfig> {
        let splits: Vec<Split> = Split::all().collect();
        let (unit_taps, row_slices): (&[u32], &[u32]) =
            if p.direction == Direction::BackwardWeight { (&UNIT_TAPS, &[1]) } else { (&[1], &ROW_SLICES) };
        let halos: &[bool] = if p.direction == Direction::BackwardWeight { &[false] } else { &[false, true] };
        // Each tile with and without the halo, and the first stage count's twin at HELD_STAGES.
        let variants = move |tile: Tile| {
            let held = (tile.st == STAGES[0]).then_some(Tile { st: HELD_STAGES, halo: true, ..tile });
            halos.iter().map(move |&halo| Tile { halo, ..tile }).chain(held.filter(|_| halos.contains(&true)))
        };
        let tiles = Tile::all(p.dtype).flat_map(|tile| {
            unit_taps
                .iter()
                .flat_map(move |&taps| row_slices.iter().flat_map(move |&mr| variants(Tile { taps, mr, ..tile })))
        });
        tiles
            .flat_map(|tile| splits.iter().map(move |&split| WgmmaConfig { tile, split }))
            .filter(|c| c.check(p).is_ok())
            .collect()
    }
}

impl WgmmaConfig {
    /// A blocked layer's forward or backward-data staged with its halo, its filter's stages
    /// held (256 x 64 tiles at 9 stages), where that runs (2D, unit stride, a 3x3 filter of one
    /// chunk) and a unit's rows are mostly the layer's pixels (MIN_HALO_USE). On the H100,
    /// ResNeXt's layers at 56x56, 28x28 and 14x14 (4 to 16 channels a group) took 0.82x, 0.91x
    /// and 0.77x the time of the im2col default forward, 0.81x, 0.88x and 0.75x backward-data;
    /// at 7x7 (256 rows for 49 pixels) 2x.
    pub(super) fn held_halo(layer: &ConvProblem) -> Option<WgmmaConfig> {
        let tile = Tile { bn: 64, wg: 2, st: HELD_STAGES, cl: 1, persistent: true, taps: 1, mr: 2, halo: true };
        let held = WgmmaConfig { tile, split: UNSPLIT };
        held.check(layer).ok()?;
        let product = Product::all(layer).swap_remove(0);
        let halo = HaloTile::of(&product.params, tile)?;
        let pixels = (product.params.output[1] * product.params.output[2]) as f64;
        let used = pixels / f64::from(halo.per_image * tile.rows());
        (product.blocks(layer.dtype) == u64::from(HELD_STAGES) && used >= MIN_HALO_USE).then_some(held)
    }

    /// A blocked layer's forward or backward-data default on im2col's loads (one product, the
    /// wave model's 256 x 64 tiles), fitted to its waves: where the units fit one wave, a CTA
    /// each (ps 0) at 5 stages (H100, ResNeXt's c1024 g32: 0.96x the time forward at 7x7 and
    /// 14x14 stride 2, 0.98x backward-data at 7x7); else forward takes 128-row tiles
    /// (bn64_wg1_st3_cl1_ps1_mr2) where their waves' rows cost less at HALF_TILE_COST (c512 g32
    /// 28x28 stride 2: 200 units in two waves of 256 rows against 392 in three of 128, 0.88x
    /// the time).
    pub(super) fn blocked_waves(self, layer: &ConvProblem, sms: u64) -> WgmmaConfig {
        let wide = Tile { bn: 64, wg: 2, st: 4, cl: 1, persistent: true, taps: 1, mr: 2, halo: false };
        if self != (WgmmaConfig { tile: wide, split: UNSPLIT }) || Product::all(layer).len() != 1 {
            return self;
        }
        let (_, units) = self.work(layer);
        let lone = WgmmaConfig { tile: Tile { st: 5, persistent: false, ..wide }, split: UNSPLIT };
        if units <= sms {
            return if lone.check(layer).is_ok() { lone } else { self };
        }
        let narrow = WgmmaConfig { tile: Tile { wg: 1, st: 3, ..wide }, split: UNSPLIT };
        let rows = |config: WgmmaConfig| (config.work(layer).1.div_ceil(sms) * u64::from(config.tile.rows())) as f64;
        let narrower = layer.direction == Direction::Forward && rows(narrow) * HALF_TILE_COST < rows(self);
        if narrower && narrow.check(layer).is_ok() {
            narrow
        } else {
            self
        }
    }

    /// The default for the user's `p`: its lowered layer's, except that a blocked layer's
    /// backward-weight splits its pixels only as far as one wave of units fills the SMs. The
    /// H100's five ResNeXt layers blocked so (4 to 16 channels a group) ran fastest there, at
    /// ks 4 to 16, where the split's model (quickest_split) takes 32 to 64 and 1.27-1.36x as
    /// long (two and three waves; why more waves cost more here than on dense layers is open).
    pub(super) fn default_for_user(p: &ConvProblem, sms: u64) -> WgmmaConfig {
        let packed = Packed::of(p);
        let layer = packed.as_ref().map_or(p, Packed::layer);
        if let Some(Packed::Groups(_)) = &packed {
            if p.direction != Direction::BackwardWeight {
                return WgmmaConfig::held_halo(layer)
                    .unwrap_or_else(|| WgmmaConfig::default_for(layer, sms).blocked_waves(layer, sms));
            }
        }
        let config = WgmmaConfig::default_for(layer, sms);
        if !packed.as_ref().is_some_and(|packed| packed.in_place(config.tile.writes_held_filter())) {
            return config;
        }
        let (_, units) = WgmmaConfig { split: UNSPLIT, ..config }.work(layer);
        let slices =
            SPLITS.into_iter().filter(|&s| s <= config.split.slices && units * u64::from(s) <= sms).max().unwrap_or(1);
        let one_wave = WgmmaConfig { split: Split { slices, ..config.split }, ..config };
        if one_wave.check(layer).is_ok() {
            one_wave
        } else {
            config
        }
    }
}
