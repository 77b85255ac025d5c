//! The geometry of the products a layer runs as: which tensor each reads how, taps per phase,
//! halo tiles, and the products themselves.

use super::invoke::*;
use super::space::*;
use super::tile::*;
use super::*;

/// Backward-weight's reduction in blocks of pixels (a tile row's worth each, see row_elements).
pub(super) fn pixel_blocks(p: &ConvProblem) -> u64 {
    let geo = Geometry::new(p);
    ((geo.n * geo.output_volume()) as u64).div_ceil(u64::from(row_elements(p.dtype)))
}

/// Whether backward-weight's tiles are transposed in shared memory (the kernel's TRANSPOSE):
/// tf32 wgmma takes K-major operands only, and they land with a pixel per row.
pub(super) fn transposes(p: &ConvProblem) -> bool {
    p.direction == Direction::BackwardWeight && p.dtype == DataType::Tf32
}

/// Whether the kernels read the source (x, or backward-data's dy) as a matrix of pixels x
/// channels by tiled loads (the kernel's SRC_TILED): a 1x1 filter at stride 1 without padding,
/// whose one product's window at a destination pixel is the source pixel of its index. A
/// compile-time choice, though it adds builds (ResNet-50's every direction: 28 -> 38 of this
/// solver): chosen at run time, even with a producer loop of each kind and no pixel cursor for
/// the tiled one, the 210 dense 1x1 layers ran 0.966x im2col's time on the H100 (forward
/// 0.973x), against 0.958x (0.952x) so.
pub(super) fn reads_source_tiled(p: &ConvProblem) -> bool {
    applicability::plain_1x1(p).is_ok()
}

/// Whether forward's or backward-data's kernel stores its results by TMA, whole tiles from the
/// staged panels (the kernel's dst_tiled): the destination a matrix of pixels x channels (one
/// product), dense or its groups' channels whole column tiles, so that a tile's columns past
/// its group's are past the matrix's (TMA leaves them out), and each tile summed in one CTA.
/// On the H100 the 167 dense forward and backward-data layers it ran fastest on took 0.990x
/// the time of the threads' own stores (0.84-1.08x); stores by one thread of the warpgroup,
/// 0.997x.
pub(super) fn stores_tiles(p: &ConvProblem, config: WgmmaConfig, product: &Product, one_product: bool) -> bool {
    let (_, columns) = product.channels();
    one_product
        && (p.g == 1 || columns.is_multiple_of(config.tile.bn))
        && config.split.cluster_slices() == 1
        && !config.tile.halo
}

/// The elements of the tensor a direction writes.
pub(super) fn destination_elements(p: &ConvProblem) -> u64 {
    match p.direction {
        Direction::Forward => p.output_elements(),
        Direction::BackwardData => p.input_elements(),
        Direction::BackwardWeight => p.weight_elements(),
    }
}

/// Reduction elements in one 128-byte row: 64 of a 16-bit type, 32 of fp32 (tf32).
pub(super) fn row_elements(dtype: DataType) -> u32 {
    ROW_BYTES / dtype.size_bytes() as u32
}

/// TMA im2col of a 1D, 2D or 3D source (a rank 3, 4 or 5 map): the bounding box's corners
/// are signed and its offsets (the tap times the dilation) unsigned numbers of this many bits
/// (PTX ISA, im2col mode).
pub(super) const IM2COL_BITS: [u32; 3] = [16, 8, 5];

pub(super) fn corner_range(spatial: usize) -> std::ops::RangeInclusive<i64> {
    let half = 1i64 << (IM2COL_BITS[spatial - 1] - 1);
    -half..=half - 1
}

pub(super) fn max_offset(spatial: usize) -> i64 {
    (1i64 << IM2COL_BITS[spatial - 1]) - 1
}

/// Backward-data's taps of one dimension that reach destination positions h with
/// (h + pad) % stride == phase: those with f * dil % stride == phase.
#[derive(Debug, Clone, Copy)]
pub(super) struct PhaseTaps {
    /// Taps of the phases before this one (the order flip_filter lays them out in).
    pub(super) before: i64,
    pub(super) count: i64,
    pub(super) first: i64,
    /// Between one tap of the phase and the next: stride / gcd(stride, dil).
    pub(super) step: i64,
}

impl PhaseTaps {
    pub(super) fn new(taps: i64, dil: i64, stride: i64, phase: i64) -> Self {
        let of = |f: i64| f * dil % stride;
        let before = (0..taps).filter(|&f| of(f) < phase).count() as i64;
        let mut mine = (0..taps).filter(|&f| of(f) == phase);
        let first = mine.next();
        PhaseTaps {
            before,
            count: i64::from(first.is_some()) + mine.count() as i64,
            first: first.unwrap_or(0),
            step: stride / gcd(stride, dil),
        }
    }
}

/// One spatial dimension of a product: for backward-data's phase, the destination positions
/// origin, origin + stride, ... and the forward read that gives them.
#[derive(Debug, Clone, Copy)]
pub(super) struct ProductDim {
    pub(super) origin: i64,
    pub(super) count: i64,
    pub(super) taps: PhaseTaps,
    pub(super) pad: i64,
    pub(super) dil: i64,
}

impl ProductDim {
    /// Dimension `i` of backward-data's phase `phase`. dx[h] sums dy[(h + pad - f * dil) /
    /// stride] w[f] over the taps that divide; with h = origin + stride * j and the phase's
    /// taps f = first + step * t (step = stride / gcd), that is dy[j + base - t * dil'] with
    /// dil' = dil / gcd, and with the taps flipped (t' = count - 1 - t) a forward read of dy
    /// at unit stride, dilation dil' and padding (count - 1) * dil' - base.
    pub(super) fn backward_data_phase(geo: &Geometry, i: usize, phase: i64) -> Self {
        let (extent, stride, pad, dil) =
            (geo.input[i] as i64, geo.stride[i] as i64, geo.pad[i] as i64, geo.dilation[i] as i64);
        let origin = (phase - pad).rem_euclid(stride);
        let count = if origin < extent { (extent - origin + stride - 1) / stride } else { 0 };
        let taps = PhaseTaps::new(geo.filter[i] as i64, dil, stride, phase);
        let reduced_dil = dil / gcd(stride, dil);
        let base = (origin + pad - taps.first * dil) / stride;
        ProductDim { origin, count, taps, pad: (taps.count - 1) * reduced_dil - base, dil: reduced_dil }
    }
}

pub(super) fn gcd(a: i64, b: i64) -> i64 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

/// The kernel's HaloTile (HALO) for a product: the pitch (the source's padded width, the
/// destination's width plus the filter's reach), the source rows a unit loads (its
/// destination rows, as many whole ones as the tile holds, and the filter's reach), and units
/// per image.
#[derive(Debug, Clone, Copy)]
pub(super) struct HaloTile {
    pub(super) pitch: u32,
    pub(super) loaded: u32,
    pub(super) per_image: u32,
}

impl HaloTile {
    /// How far the filter reaches along dimension `i` past a destination pixel's first tap.
    pub(super) fn reach(params: &ConvParams, i: usize) -> u32 {
        ((params.filter[i] - 1).max(0) * params.dilation[i]) as u32
    }

    pub(super) fn of(params: &ConvParams, tile: Tile) -> Option<HaloTile> {
        let reach = |i: usize| HaloTile::reach(params, i);
        let (height, width) = (params.output[1] as u32, params.output[2] as u32);
        let pitch = width + reach(2);
        let rows = (tile.rows() / pitch).min(height);
        (rows > 0).then(|| HaloTile { pitch, loaded: rows + reach(1), per_image: height.div_ceil(rows) })
    }

    /// One halo buffer's bytes: the rows the tile's MMAs read at the furthest tap (past the
    /// loaded ones, for rows past the unit's), 1024-byte aligned.
    pub(super) fn buffer_bytes(self, params: &ConvParams, tile: Tile) -> u32 {
        let reach = |i: usize| HaloTile::reach(params, i);
        ((tile.rows() + reach(1) * self.pitch + reach(2)) * ROW_BYTES).next_multiple_of(1024)
    }

    /// Why `config` cannot stage `p`'s source with its halo, if it cannot.
    pub(super) fn check(p: &ConvProblem, config: WgmmaConfig) -> std::result::Result<(), String> {
        if p.direction == Direction::BackwardWeight || p.dtype == DataType::Tf32 || p.dims.len() != 2 {
            return Err("hl 1 takes 2D forward and backward-data in 16-bit types".into());
        }
        if config.split != UNSPLIT {
            return Err("hl 1 takes unsplit configs".into());
        }
        if reads_source_tiled(p) {
            return Err(
                "hl 1 is for filters wider than 1x1 or padded (1x1 layers read their source as a matrix)".into()
            );
        }
        let products = Product::all(p);
        let [product] = products.as_slice() else {
            return Err("hl 1 takes one product (backward-data at unit stride)".into());
        };
        if product.params.stride != [1; 3] {
            return Err("hl 1 takes unit strides".into());
        }
        let Some(halo) = HaloTile::of(&product.params, config.tile) else {
            let pitch = product.params.output[2] as u32 + HaloTile::reach(&product.params, 2);
            return Err(format!(
                "a destination row on a pitch of {pitch} pixels is longer than the tile's {} rows",
                config.tile.rows()
            ));
        };
        if halo.pitch > MAX_BOX || halo.loaded > MAX_BOX {
            return Err(format!(
                "the halo's box of {} x {} pixels passes TMA's {MAX_BOX} a side",
                halo.pitch, halo.loaded
            ));
        }
        let shared = config.tile.shared_bytes(p.dtype) + 2 * halo.buffer_bytes(&product.params, config.tile);
        if shared > MAX_SHARED_BYTES {
            return Err(format!("two halo buffers and the stages need {shared} bytes of shared memory, a block may have {MAX_SHARED_BYTES}"));
        }
        Ok(())
    }
}

/// One forward product the kernel computes: src (read by im2col) into dst. Forward is one;
/// backward-data is one per sub-pixel phase, one at unit stride.
#[derive(Debug, Clone)]
pub(super) struct Product {
    pub(super) params: ConvParams,
    /// Source extents, innermost first: channels, the spatial extents (W, H, D as the rank
    /// has them), images.
    pub(super) src: Vec<u64>,
    /// Destination pixels (rows of the GEMM).
    pub(super) rows: u64,
    /// The im2col window's corners, innermost dimension first.
    pub(super) lower: Vec<i64>,
    pub(super) upper: Vec<i64>,
    /// Where the destination's first pixel lies in its buffer, in elements.
    pub(super) dst_offset: u64,
    /// Where the filter matrix starts in the buffer it is read from (w forward, the workspace
    /// flip_filter writes for tf32 backward-data), in elements.
    pub(super) filter_offset: u64,
    /// Which tap of w the product's taps read (16-bit backward-data reads w itself).
    pub(super) tap_map: TapMap,
}

impl Product {
    pub(super) fn new(
        p: &ConvProblem,
        params: ConvParams,
        src_extent: [usize; 3],
        src_channels: u32,
        dst_offset: u64,
        filter_offset: u64,
        tap_map: TapMap,
    ) -> Self {
        let active = 3 - p.dims.len()..3;
        let (mut lower, mut upper) = (Vec::new(), Vec::new());
        for i in active.clone().rev() {
            let (src, dst, stride, pad) = (
                src_extent[i] as i64,
                i64::from(params.output[i]),
                i64::from(params.stride[i]),
                i64::from(params.pad[i]),
            );
            // At tap offset zero the window starts at -pad and ends at the last destination
            // position's first tap, (dst - 1) * stride - pad, written as an offset from the extent.
            lower.push(-pad);
            upper.push((dst - 1) * stride + 1 - src - pad);
        }
        let src = std::iter::once(u64::from(src_channels))
            .chain(active.rev().map(|i| src_extent[i] as u64))
            .chain([u64::from(p.n)])
            .collect();
        let rows = params.n as u64 * params.output.iter().map(|&o| o as u64).product::<u64>();
        Product { params, src, rows, lower, upper, dst_offset, filter_offset, tap_map }
    }

    /// The products `p` runs as, the longest reductions first (a persistent grid takes their
    /// units first; those without taps come last).
    pub(super) fn all(p: &ConvProblem) -> Vec<Product> {
        let geo = Geometry::new(p);
        let params = ConvParams::new(p);
        if p.direction != Direction::BackwardData {
            let identity = TapMap { origin: [0; 3], step: [1; 3], filter: params.filter };
            return vec![Product::new(p, params, geo.input, p.c, 0, 0, identity)];
        }
        let phases: [Vec<ProductDim>; 3] = std::array::from_fn(|i| {
            (0..geo.stride[i] as i64).map(|r| ProductDim::backward_data_phase(&geo, i, r)).collect()
        });
        let filter = geo.filter.map(|f| f as i64);
        let group_filter = (geo.g * geo.cg * geo.kg) as i64;
        let mut products = Vec::new();
        for d in &phases[0] {
            for h in &phases[1] {
                for w in &phases[2] {
                    let dims = [d, h, w];
                    if dims.iter().any(|dim| dim.count == 0) {
                        continue;
                    }
                    let phase = ConvParams {
                        cg: params.kg,
                        kg: params.cg,
                        input: params.output,
                        output: dims.map(|dim| dim.count as i32),
                        filter: dims.map(|dim| dim.taps.count as i32),
                        stride: [1; 3],
                        pad: dims.map(|dim| dim.pad as i32),
                        dilation: dims.map(|dim| dim.dil as i32),
                        xs: params.ys,
                        ys: std::array::from_fn(
                            |j| if j < 2 { params.xs[j] } else { params.xs[j] * params.stride[j - 2] },
                        ),
                        ..params
                    };
                    let dst_offset = (0..3).map(|i| dims[i].origin * i64::from(params.xs[2 + i])).sum::<i64>() as u64;
                    let tap_offset = d.taps.before * filter[1] * filter[2]
                        + d.taps.count * (h.taps.before * filter[2] + h.taps.count * w.taps.before);
                    // The phase's taps f = first + step x t, walked flipped.
                    let tap_map = TapMap {
                        origin: dims.map(|dim| (dim.taps.first + dim.taps.step * (dim.taps.count - 1)) as i32),
                        step: dims.map(|dim| -dim.taps.step as i32),
                        filter: params.filter,
                    };
                    products.push(Product::new(
                        p,
                        phase,
                        geo.output,
                        p.k,
                        dst_offset,
                        (tap_offset * group_filter) as u64,
                        tap_map,
                    ));
                }
            }
        }
        products.sort_by_key(|product| std::cmp::Reverse(product.blocks(p.dtype)));
        products
    }

    pub(super) fn taps(&self) -> u32 {
        self.params.filter.iter().map(|&f| f as u32).product()
    }

    /// A phase no tap reaches: the kernel stores zeros there.
    pub(super) fn has_taps(&self) -> bool {
        self.taps() > 0
    }

    /// Source channels per group (the reduction's per tap) and destination channels per group.
    pub(super) fn channels(&self) -> (u32, u32) {
        (self.params.cg as u32, self.params.kg as u32)
    }

    /// The filter's extents, innermost first: source channels per group, taps, a row per
    /// destination channel. A reduction block's channels past the group's are the map's
    /// zeros, never the next tap's.
    pub(super) fn filter_extents(&self) -> [u64; 3] {
        let (src, dst) = self.channels();
        [u64::from(src), u64::from(self.taps()), u64::from(self.params.g as u32 * dst)]
    }

    pub(super) fn row_tiles(&self, tile: Tile) -> u64 {
        match HaloTile::of(&self.params, tile).filter(|_| tile.halo) {
            Some(halo) => u64::from(halo.per_image) * self.params.n as u64,
            None => self.rows.div_ceil(u64::from(tile.rows())),
        }
    }

    /// The kernel's work units: clusters' worth of row tiles x column tiles x slices x groups.
    pub(super) fn units(&self, tile: Tile, groups: u32, slices: u32) -> u64 {
        let (_, columns) = self.channels();
        self.row_tiles(tile).div_ceil(u64::from(tile.cl))
            * u64::from(columns.div_ceil(tile.bn))
            * u64::from(slices)
            * u64::from(groups)
    }

    /// The reduction's blocks: a 128-byte row of source channels per tap.
    pub(super) fn blocks(&self, dtype: DataType) -> u64 {
        let (src, _) = self.channels();
        u64::from(self.taps() * src.div_ceil(row_elements(dtype)))
    }

    /// The most reduction blocks of any of `products` (those a split divides).
    pub(super) fn longest_reduction(products: &[Product], dtype: DataType) -> u64 {
        products.iter().map(|product| product.blocks(dtype)).max().unwrap_or(0)
    }

    /// Why TMA cannot make this product's im2col loads, if it cannot.
    pub(super) fn im2col_limits(&self, spatial: usize) -> Result<(), NotApplicable> {
        let reach =
            (0..3).map(|i| i64::from((self.params.filter[i] - 1).max(0) * self.params.dilation[i])).max().unwrap_or(0);
        let max = max_offset(spatial);
        require!(
            reach <= max,
            "taps reach {reach} positions, further than TMA's im2col offsets (up to {max} in {spatial}D)"
        );
        let (corners, lower, upper) = (corner_range(spatial), &self.lower, &self.upper);
        require!(
            lower.iter().chain(upper).all(|c| corners.contains(c)),
            "the im2col window's corners {lower:?} / {upper:?} leave TMA's {corners:?} in {spatial}D"
        );
        Ok(())
    }

    /// The source's map for loads of `pixels` pixels x `channels` channels: tiled where the
    /// kernels read it so (reads_source_tiled), else im2col.
    pub(super) fn source_map(&self, p: &ConvProblem, channels: u32, pixels: u32) -> SourceMap {
        if reads_source_tiled(p) {
            SourceMap::Tiled([self.src[0], self.src[1..].iter().product(), 1], [channels, pixels, 1])
        } else {
            SourceMap::Im2col(self.im2col(channels, pixels))
        }
    }

    /// The source's im2col map, `channels` x `pixels` per load.
    pub(super) fn im2col(&self, channels: u32, pixels: u32) -> Im2col {
        let active = 3 - self.lower.len()..3;
        Im2col {
            extents: self.src.clone(),
            lower: self.lower.iter().map(|&c| c as i32).collect(),
            upper: self.upper.iter().map(|&c| c as i32).collect(),
            strides: active.rev().map(|i| self.params.stride[i] as u32).collect(),
            channels,
            pixels,
        }
    }
}
