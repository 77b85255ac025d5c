//! `cuda.igemm_wgmma`: implicit GEMM on Hopper's warpgroup MMA (`wgmma.mma_async`) fed by the
//! tensor memory accelerator (kernels/igemm_wgmma.cu), built for `sm_90a` and offered on sm_90
//! devices only. Channels-last 2D, bf16 and fp16, groups in the grid; forward, and
//! backward-data at unit stride as the forward product of dy with the filter flipped and
//! transposed (a small kernel writes that filter into the workspace) and the padding mirrored.
//! The source tile comes by TMA im2col (the filter tap as the load's offset, the padding
//! zero-filled by the TMA unit), the filter tile by a tiled TMA load; a producer warpgroup
//! issues both onto an mbarrier pipeline of `st` stages and `wg` consumer warpgroups multiply
//! 64 x `bn` each. Problem sizes are run-time (kernel parameters and tensor maps), so one build
//! serves every shape of a config.

use std::sync::Arc;

use cudarc::driver::{CudaFunction, LaunchConfig};
use gconv_core::geometry::Geometry;
use gconv_core::{require, Config, ConvProblem, DataType, Direction, GconvError, Invoker, Layout, NotApplicable, Result, Solve, Solver};

use super::direct::filter_hw;
use super::{builds_from_kernel, BuiltFrom};
use crate::device::CudaDevice;
use crate::launch::{self, Arg, Buffer, Im2col, TensorMap};
use crate::{ConvParams, Cuda, CudaBuffers, KernelSource};

const SOURCE: &str = include_str!("../kernels/igemm_wgmma.cu");
/// Source channels of one tap per reduction block: one 128-byte swizzled row of 16-bit values.
const BK: u32 = 64;
/// Rows of one consumer warpgroup's MMA.
const ROWS_PER_CONSUMER: u32 = 64;
const COLUMNS: [u32; 3] = [64, 128, 256];
const CONSUMERS: [u32; 2] = [1, 2];
const STAGES: [u32; 3] = [3, 4, 5];
/// What one block may opt in to on sm_90.
const MAX_SHARED_BYTES: u32 = 227 * 1024;
/// TMA im2col corners of a rank-4 tensor are signed 8-bit.
const CORNER: std::ops::RangeInclusive<i64> = -128..=127;
/// TMA element strides (the convolution stride) go up to 8.
const MAX_STRIDE: usize = 8;
/// Im2col offsets (the tap times the dilation) of a rank-4 tensor go up to 255 (PTX ISA,
/// im2col mode's bounding box).
const MAX_OFFSET: usize = 255;
const MAX_GRID_YZ: u64 = 65_535;
/// The filter transpose of backward-data: 32 x 32 tiles, 8 rows of threads.
const FLIP_TILE: u32 = 32;
const FLIP_ROWS: u32 = 8;

pub struct IgemmWgmma {
    pub device: Arc<CudaDevice>,
}

/// A config: columns per block tile, consumer warpgroups (64 rows each), pipeline stages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Tile {
    bn: u32,
    wg: u32,
    st: u32,
}

impl Tile {
    fn from_config(config: &Config) -> Result<Self> {
        let [bn, wg, st] = config.expect_fields(["bn", "wg", "st"])?;
        let tile = Tile { bn, wg, st };
        tile.check().map_err(|reason| GconvError::BadConfig { text: config.to_string(), reason })?;
        Ok(tile)
    }

    fn to_config(self) -> Config {
        Config::new([("bn", self.bn), ("wg", self.wg), ("st", self.st)])
    }

    fn check(self) -> std::result::Result<(), String> {
        if !COLUMNS.contains(&self.bn) {
            return Err(format!("bn must be one of {COLUMNS:?}"));
        }
        if !CONSUMERS.contains(&self.wg) {
            return Err(format!("wg must be one of {CONSUMERS:?}"));
        }
        if !STAGES.contains(&self.st) {
            return Err(format!("st must be one of {STAGES:?}"));
        }
        let shared = self.shared_bytes();
        if shared > MAX_SHARED_BYTES {
            return Err(format!("needs {shared} bytes of shared memory, a block may have {MAX_SHARED_BYTES}"));
        }
        Ok(())
    }

    fn rows(self) -> u32 {
        ROWS_PER_CONSUMER * self.wg
    }

    /// Every stage's source and filter tiles, their full and empty barriers, and room to align
    /// the tiles to 1024 bytes as the 128-byte swizzle wants.
    fn shared_bytes(self) -> u32 {
        1024 + self.st * (self.rows() + self.bn) * BK * 2 + self.st * 2 * 8
    }

    fn all() -> impl Iterator<Item = Tile> {
        COLUMNS
            .into_iter()
            .flat_map(|bn| CONSUMERS.into_iter().flat_map(move |wg| STAGES.into_iter().map(move |st| Tile { bn, wg, st })))
            .filter(|t| t.check().is_ok())
    }

    fn source(self, p: &ConvProblem) -> KernelSource {
        KernelSource::new("igemm_wgmma.cu", SOURCE, p.dtype)
            .define("BN", self.bn)
            .define("CONSUMERS", self.wg)
            .define("STAGES", self.st)
            .define("IN_F16", u32::from(p.dtype == DataType::F16))
            .arch_specific()
    }
}

/// The problem as the forward product the kernel computes: src (read by im2col) into dst.
struct Product {
    params: ConvParams,
    /// Source extents: channels, width, height, images.
    src: [u64; 4],
    /// Destination pixels (rows of the GEMM).
    rows: u64,
    /// The im2col window's corners (W then H).
    lower: [i64; 2],
    upper: [i64; 2],
}

impl Product {
    fn new(p: &ConvProblem) -> Self {
        let g = Geometry::new(p);
        let params = ConvParams::new(p);
        let params = match p.direction {
            // dx[h] sums dy[h + pad - f * dil] w[f]: with the taps flipped (f' = F - 1 - f) it
            // reads dy[h - ((F - 1) * dil - pad) + f' * dil], a forward read with that padding.
            Direction::BackwardData => ConvParams {
                cg: params.kg,
                kg: params.cg,
                input: params.output,
                output: params.input,
                pad: std::array::from_fn(|i| (params.filter[i] - 1) * params.dilation[i] - params.pad[i]),
                xs: params.ys,
                ys: params.xs,
                ..params
            },
            _ => params,
        };
        let (channels, src) = match p.direction {
            Direction::BackwardData => (p.k, g.output),
            _ => (p.c, g.input),
        };
        let corner = |i: usize| {
            let (src, dst, stride, pad) = (src[i] as i64, params.output[i] as i64, params.stride[i] as i64, params.pad[i] as i64);
            // At tap offset zero the window starts at -pad and ends at the last destination
            // position's first tap, (dst - 1) * stride - pad, written as an offset from the extent.
            (-pad, (dst - 1) * stride + 1 - src - pad)
        };
        let (w, h) = (corner(2), corner(1));
        let rows = params.n as u64 * params.output[1] as u64 * params.output[2] as u64;
        Product { params, src: [u64::from(channels), src[2] as u64, src[1] as u64, u64::from(p.n)], rows, lower: [w.0, h.0], upper: [w.1, h.1] }
    }

    /// Source channels per group (the reduction's per tap) and destination channels per group.
    fn channels(&self) -> (u32, u32) {
        (self.params.cg as u32, self.params.kg as u32)
    }

    fn row_tiles(&self, tile: Tile) -> u64 {
        self.rows.div_ceil(u64::from(tile.rows()))
    }
}

impl IgemmWgmma {
    /// The tile a problem starts from: 256 columns where the groups have that many channels
    /// and the grid still fills the GPU, 64 where they have no more; two consumers (128 rows)
    /// unless one fills the GPU better; four stages where they fit.
    fn default_tile(&self, p: &ConvProblem) -> Tile {
        let product = Product::new(p);
        let (_, columns) = product.channels();
        let sms = u64::from(self.device.sm_count);
        let blocks = |t: Tile| product.row_tiles(t) * u64::from(columns.div_ceil(t.bn)) * u64::from(p.g);
        let wide = Tile { bn: 256, wg: 2, st: 4 };
        let bn = match columns {
            c if c <= 64 => 64,
            c if c >= 256 && blocks(wide) >= sms => 256,
            _ => 128,
        };
        let wg = if blocks(Tile { bn, wg: 2, st: 4 }) >= sms { 2 } else { 1 };
        let st = if (Tile { bn, wg, st: 4 }).check().is_ok() { 4 } else { 3 };
        Tile { bn, wg, st }
    }
}

impl Solver for IgemmWgmma {
    fn id(&self) -> &'static str {
        "cuda.igemm_wgmma"
    }

    fn applicable(&self, p: &ConvProblem) -> Result<(), NotApplicable> {
        let (major, minor) = self.device.capability;
        require!((major, minor) == (9, 0), "needs an sm_90 GPU (wgmma and TMA built for sm_90a), this is sm_{major}{minor}");
        require!(p.layout == Layout::Nhwc && p.dims.len() == 2, "needs a 2D channels-last layout (NHWC)");
        require!(matches!(p.dtype, DataType::Bf16 | DataType::F16), "needs bf16 or fp16 operands (tf32 would need K-major fp32 tiles)");
        let g = Geometry::new(p);
        match p.direction {
            Direction::Forward => {}
            Direction::BackwardData => require!(g.stride[1..].iter().all(|&s| s == 1), "backward-data at unit stride only (sub-pixel phases are to come)"),
            Direction::BackwardWeight => return Err(NotApplicable::because("forward and backward-data only (backward-weight is to come)")),
        }
        let product = Product::new(p);
        let (src, dst) = product.channels();
        require!(src.is_multiple_of(BK), "needs the channels it reduces per group a multiple of {BK} (one 128-byte TMA row per tap), got {src}");
        require!(dst.is_multiple_of(8), "needs the channels it writes per group a multiple of 8 (16-byte filter rows and paired stores), got {dst}");
        require!(g.stride[1..].iter().all(|&s| s <= MAX_STRIDE), "strides over {MAX_STRIDE} are beyond TMA's element strides");
        require!(
            (1..3).all(|i| (g.filter[i] - 1) * g.dilation[i] <= MAX_OFFSET),
            "taps reach further than TMA's im2col offsets (up to {MAX_OFFSET} for 2D)"
        );
        let (lower, upper) = (product.lower, product.upper);
        require!(lower.iter().chain(&upper).all(|c| CORNER.contains(c)), "the im2col window's corners {lower:?} / {upper:?} leave TMA's {CORNER:?}");
        let narrowest = Tile { bn: COLUMNS[0], wg: CONSUMERS[0], st: STAGES[0] };
        require!(u64::from(dst.div_ceil(narrowest.bn)) <= MAX_GRID_YZ && u64::from(p.g) <= MAX_GRID_YZ, "too many column tiles or groups for the grid");
        require!(product.row_tiles(narrowest) <= i32::MAX as u64, "{} destination pixels are too many row tiles for the grid", product.rows);
        if p.direction == Direction::BackwardData {
            let taps = g.filter[1] * g.filter[2];
            require!((p.g as usize * taps) as u64 <= MAX_GRID_YZ, "too many groups x taps for the filter transpose's grid");
        }
        Ok(())
    }

    fn workspace_bytes(&self, p: &ConvProblem, _config: &Config) -> u64 {
        match p.direction {
            Direction::BackwardData => p.weight_elements() * p.dtype.size_bytes() as u64,
            _ => 0,
        }
    }

    fn default_config(&self, p: &ConvProblem) -> Config {
        self.default_tile(p).to_config()
    }

    fn configs<'a>(&'a self, _p: &'a ConvProblem) -> Box<dyn Iterator<Item = Config> + 'a> {
        Box::new(Tile::all().map(Tile::to_config))
    }

    fn check_config(&self, _p: &ConvProblem, config: &Config) -> Result<()> {
        Tile::from_config(config).map(|_| ())
    }

    builds_from_kernel!();
}

impl BuiltFrom for IgemmWgmma {
    fn device(&self) -> &CudaDevice {
        &self.device
    }

    fn kernel(&self, p: &ConvProblem, config: &Config) -> Result<Option<KernelSource>> {
        Ok(Some(Tile::from_config(config)?.source(p)))
    }
}

impl Solve<Cuda> for IgemmWgmma {
    fn solution(&self, p: &ConvProblem, config: &Config) -> Result<Box<dyn Invoker<Cuda>>> {
        let tile = Tile::from_config(config)?;
        let source = tile.source(p);
        let function = self.device.function(&source, "igemm_wgmma")?;
        let shared = tile.shared_bytes();
        launch::allow_shared(&function, shared, self.id())?;
        let product = Product::new(p);
        let (src_channels, dst_channels) = product.channels();
        let launch = LaunchConfig {
            grid_dim: (product.row_tiles(tile) as u32, dst_channels.div_ceil(tile.bn), p.g),
            block_dim: (128 * (tile.wg + 1), 1, 1),
            shared_mem_bytes: shared,
        };
        let im2col = Im2col {
            extents: product.src,
            lower: product.lower.map(|c| c as i32),
            upper: product.upper.map(|c| c as i32),
            strides: [product.params.stride[2] as u32, product.params.stride[1] as u32],
            channels: BK,
            pixels: tile.rows(),
        };
        let (fh, fw) = filter_hw(p);
        let filter = (u64::from(p.g * dst_channels), u64::from(fh * fw * src_channels));
        let flip = match p.direction {
            Direction::BackwardData => {
                let taps = fh * fw;
                let launch = LaunchConfig {
                    grid_dim: ((p.c / p.g).div_ceil(FLIP_TILE), (p.k / p.g).div_ceil(FLIP_TILE), p.g * taps),
                    block_dim: (FLIP_TILE, FLIP_ROWS, 1),
                    shared_mem_bytes: 0,
                };
                Some(Flip { function: self.device.function(&source, "flip_filter")?, launch, sizes: [(p.k / p.g) as i32, (p.c / p.g) as i32, taps as i32] })
            }
            _ => None,
        };
        let invoker = WgmmaInvoker { function, launch, params: product.params, direction: p.direction, dtype: p.dtype, im2col, filter, bn: tile.bn, flip };
        Ok(Box::new(invoker))
    }
}

/// Backward-data's filter transpose into the workspace.
struct Flip {
    function: CudaFunction,
    launch: LaunchConfig,
    /// K/G, C/G, taps.
    sizes: [i32; 3],
}

struct WgmmaInvoker {
    function: CudaFunction,
    launch: LaunchConfig,
    params: ConvParams,
    direction: Direction,
    dtype: DataType,
    im2col: Im2col,
    /// The filter as a matrix: a row per destination channel, FH x FW x source channels per
    /// group wide.
    filter: (u64, u64),
    bn: u32,
    flip: Option<Flip>,
}

impl Invoker<Cuda> for WgmmaInvoker {
    fn run(&self, b: &mut CudaBuffers<'_>) -> Result<()> {
        let (src, filter): (Buffer, Buffer) = match &self.flip {
            Some(flip) => {
                let [kg, cg, taps] = flip.sizes;
                let args = [Arg::Buffer(b.w), Arg::Buffer(b.workspace), Arg::Int(kg), Arg::Int(cg), Arg::Int(taps)];
                launch::kernel(b, &flip.function, flip.launch, &args, "launch cuda.igemm_wgmma's filter transpose")?;
                (b.y, b.workspace)
            }
            None => (b.x, b.w),
        };
        // Tensor maps hold the buffers' addresses, so they are made per run (a few
        // microseconds of host time; a captured graph keeps the ones it was captured with).
        let src = TensorMap::im2col(src, self.dtype, &self.im2col)?;
        let filter = TensorMap::tiled(filter, self.dtype, self.filter.0, self.filter.1, self.bn, BK)?;
        let args = [Arg::TensorMap(&src), Arg::TensorMap(&filter), Arg::Params(&self.params), Arg::Buffer(b.output(self.direction))];
        launch::kernel(b, &self.function, self.launch, &args, "launch cuda.igemm_wgmma")
    }
}

#[cfg(test)]
mod tests {
    use gconv_core::reference::reference;
    use gconv_core::testing::small_problem;
    use gconv_core::ConvTensors;
    use proptest::prelude::*;

    use super::*;

    /// The kernel's product on the CPU, from the host's lowering: destination pixel m and
    /// channel n of group g sum, over taps and source channels, the source pixel the im2col
    /// load gives (m's window moved by the tap, zero outside) times the filter matrix's
    /// element, the matrix as the kernel reads it (for backward-data, as flip_filter writes it).
    fn emulate(p: &ConvProblem, t: &ConvTensors) -> Vec<f64> {
        let product = Product::new(p);
        let q = &product.params;
        let geo = Geometry::new(p);
        let w = t.w.to_f32();
        let src = match p.direction {
            Direction::BackwardData => t.y.to_f32(),
            _ => t.x.to_f32(),
        };
        let [src_c, src_w, src_h, _] = product.src.map(|e| e as i64);
        let (fh, fw) = (q.filter[1] as i64, q.filter[2] as i64);
        let (cg, kg, groups) = (q.cg as i64, q.kg as i64, q.g as i64);
        let weight = |k: i64, c: i64, tap: i64| f64::from(w[k as usize * geo.w.outer + c as usize * geo.w.c + (tap / fw) as usize * geo.w.spatial[1] + (tap % fw) as usize * geo.w.spatial[2]]);
        // Row: destination channel of the whole tensor; column: tap x source channel.
        let filter = |row: i64, tap: i64, c: i64| match p.direction {
            Direction::BackwardData => weight(row / kg * cg + c, row % kg, fh * fw - 1 - tap),
            _ => weight(row, c, tap),
        };
        let (out_h, out_w) = (q.output[1] as i64, q.output[2] as i64);
        let mut dst = vec![0.0; (q.n as i64 * out_h * out_w * groups * kg) as usize];
        for (m, pixel) in dst.chunks_mut((groups * kg) as usize).enumerate() {
            let m = m as i64;
            let (image, oh, ow) = (m / (out_h * out_w), m / out_w % out_h, m % out_w);
            for (column, out) in pixel.iter_mut().enumerate() {
                let (row, g) = (column as i64, column as i64 / kg);
                for tap in 0..fh * fw {
                    let h = oh * i64::from(q.stride[1]) - i64::from(q.pad[1]) + tap / fw * i64::from(q.dilation[1]);
                    let x = ow * i64::from(q.stride[2]) - i64::from(q.pad[2]) + tap % fw * i64::from(q.dilation[2]);
                    if !(0..src_h).contains(&h) || !(0..src_w).contains(&x) {
                        continue;
                    }
                    for c in 0..cg {
                        let s = f64::from(src[(((image * src_h + h) * src_w + x) * src_c + g * cg + c) as usize]);
                        *out += s * filter(row, tap, c);
                    }
                }
            }
        }
        dst
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]
        /// The lowering (channels, padding, corners, flipped filter) computes the direction's
        /// result, and the im2col window walks exactly the destination's positions.
        #[test]
        fn the_lowered_product_is_the_convolution(
            p in small_problem().prop_filter("2D NHWC, forward or unit-stride backward-data", |p| {
                p.layout == Layout::Nhwc
                    && p.dims.len() == 2
                    && match p.direction {
                        Direction::Forward => true,
                        Direction::BackwardData => p.dims.iter().all(|d| d.stride == 1),
                        Direction::BackwardWeight => false,
                    }
            })
        ) {
            let t = ConvTensors::random(&p, 5);
            let (got, exact) = (emulate(&p, &t), reference(&p, &t));
            let scale = exact.iter().fold(1.0f64, |m, r| m.max(r.abs()));
            let worst = got.iter().zip(&exact).map(|(g, r)| (g - r).abs() / scale).fold(0.0, f64::max);
            prop_assert!(worst < 1e-9, "{}: off by {worst:e}", p.key());
            let product = Product::new(&p);
            for i in 0..2 {
                let (src, stride) = (product.src[1 + i] as i64, i64::from(product.params.stride[2 - i]));
                let walked = (src + product.upper[i] - 1 - product.lower[i]) / stride + 1;
                prop_assert_eq!(walked, i64::from(product.params.output[2 - i]));
            }
        }
    }

    #[test]
    fn every_tile_fits_and_round_trips() {
        let tiles: Vec<Tile> = Tile::all().collect();
        assert_eq!(tiles.len(), 17, "all but 256 columns x 2 consumers x 5 stages fit");
        for tile in tiles {
            assert_eq!(Tile::from_config(&tile.to_config()).unwrap(), tile);
        }
        let too_big = Config::new([("bn", 256), ("wg", 2), ("st", 5)]);
        assert!(Tile::from_config(&too_big).unwrap_err().to_string().contains("shared memory"));
        assert!(Tile::from_config(&Config::new([("bn", 96), ("wg", 2), ("st", 4)])).unwrap_err().to_string().contains("bn must be"));
    }
}
