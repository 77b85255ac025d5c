//! `cuda.pointwise`: 1x1 convolutions at stride 1 without padding in the channels-last
//! layouts, forward and backward-data, in 16-bit types, with at most MAX_NARROW channels on
//! one side (kernels/pointwise.cu): a GEMM of the pixel rows with the filter that is
//! memory-bound, so a block stages the filter once and streams tiles of pixel rows through
//! two buffers (contiguous 16-byte copies) while its warps multiply them by the filter on the
//! tensor cores and store their results as whole 16-byte runs; as many blocks as the SMs hold.
//! Tunable: `wp` (warps per block) and `mt` (16-pixel tiles per warp); the channel counts are
//! compile-time, the pixels run-time.

use std::sync::Arc;

use gconv_core::{
    require, Config, ConvProblem, DataType, Direction, Field, GconvError, Invoker, Layout, NotApplicable, Result,
    Schema, Solve, Solver, Values,
};

use super::direct::{DirectInvoker, Kernels};
use super::{builds_from_kernel, BuiltFrom};
use crate::device::{CudaDevice, SmLimits};
use crate::launch;
use crate::{ConvParams, Cuda, KernelSource};

const SOURCE: &str = include_str!("../kernels/pointwise.cu");
/// Warps a block (`wp`) and 16-pixel tiles a warp (`mt`).
const SCHEMA: Schema =
    Schema::new(&[Field::new("wp", Values::OneOf(&[4, 8])), Field::new("mt", Values::OneOf(&[1, 2, 4]))]);
/// The narrow side's channels: on the H100 the kernel kept pace with the implicit GEMMs
/// where one side had up to 32 (c32 k16 112x112 forward 10.8 us, igemm_wgmma 23.2, cuDNN
/// 12.8; c24 k144 forward 13.5, 23.7, 15.0) and fell behind from 40 up (c64 k64 56x56
/// forward 8.7 against 7.7).
const MAX_NARROW: u32 = 32;
/// The wide side's: the filter stays small beside the staged rows.
const MAX_WIDE: u32 = 256;
/// Shared memory a block may take (filter, staged rows and results): two blocks still fit an
/// SM.
const MAX_STAGED_BYTES: u64 = 96 << 10;

pub struct Pointwise {
    pub device: Arc<CudaDevice>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Tile {
    warps: u32,
    tiles_per_warp: u32,
}

/// (channels reduced, channels produced): forward C and K, backward-data K and C.
fn sides(p: &ConvProblem) -> (u32, u32) {
    if p.direction == Direction::BackwardData {
        (p.k, p.c)
    } else {
        (p.c, p.k)
    }
}

/// Why `p` is not a pointwise layer this solver takes, if it is not.
fn takes(p: &ConvProblem) -> Result<(), NotApplicable> {
    require!(
        p.direction != Direction::BackwardWeight,
        "forward and backward-data only (backward-weight reduces over the pixels)"
    );
    require!(matches!(p.dtype, DataType::Bf16 | DataType::F16), "16-bit types only (tensor-core MMAs of bf16 or fp16)");
    require!(
        p.layout == Layout::Nhwc,
        "needs a channels-last layout (NWC, NHWC, NDHWC): the pixel rows are contiguous"
    );
    require!(p.g == 1, "dense layers only (G=1), got G={}", p.g);
    gconv_core::applicability::plain_1x1(p)?;
    let (red, cols) = sides(p);
    require!(
        red.is_multiple_of(8) && cols.is_multiple_of(8),
        "needs channel counts in multiples of 8 (16-byte rows, 8-column MMA tiles), got C={} K={}",
        p.c,
        p.k
    );
    require!(
        red.min(cols) <= MAX_NARROW && red.max(cols) <= MAX_WIDE,
        "needs one side of at most {MAX_NARROW} channels and the other of at most {MAX_WIDE} (memory-bound GEMMs), got C={} K={}",
        p.c,
        p.k
    );
    Ok(())
}

impl Tile {
    fn pixels(self) -> u32 {
        self.warps * self.tiles_per_warp * 16
    }

    /// The filter and two tiles of rows, each row 16 bytes past the reduction padded to 16,
    /// and each warp's 16 rows of results of a column group (16 bytes past it).
    fn staged_bytes(self, p: &ConvProblem) -> u64 {
        let (red, cols) = sides(p);
        let element = p.dtype.size_bytes() as u64;
        let row = u64::from(red.next_multiple_of(16) + 8) * element;
        let results = u64::from(self.warps * 16 * (column_group(cols / 8) * 8 + 8)) * element;
        u64::from(2 * self.pixels() + cols) * row + results
    }

    fn fits(self, p: &ConvProblem) -> bool {
        self.staged_bytes(p) <= MAX_STAGED_BYTES
    }

    /// Blocks an SM holds at once, by shared memory and warps.
    fn blocks_per_sm(self, p: &ConvProblem, sm: &SmLimits) -> u32 {
        let shared = self.staged_bytes(p) as u32 + sm.reserved_shared_bytes;
        (sm.shared_bytes / shared).min(sm.warps / self.warps).clamp(1, sm.blocks)
    }

    fn to_config(self) -> Config {
        SCHEMA.print([self.warps, self.tiles_per_warp])
    }

    fn from_config(p: &ConvProblem, config: &Config) -> Result<Self> {
        let [warps, tiles_per_warp] = SCHEMA.parse(config)?;
        let bad = |reason: String| GconvError::BadConfig { text: config.to_string(), reason };
        let tile = Tile { warps, tiles_per_warp };
        if !tile.fits(p) {
            return Err(bad(format!("the block stages {} bytes, over {MAX_STAGED_BYTES}", tile.staged_bytes(p))));
        }
        Ok(tile)
    }

    fn source(self, p: &ConvProblem) -> KernelSource {
        let (red, cols) = sides(p);
        KernelSource::new("pointwise.cu", SOURCE, p.dtype)
            .define("RED", red)
            .define("COLS", cols)
            .define("WARPS", self.warps)
            .define("MT", self.tiles_per_warp)
            .define("BACKWARD_DATA", u32::from(p.direction == Direction::BackwardData))
    }
}

/// Column tiles of 8 channels a warp sums at once: the most, up to eight, that divide
/// `tiles` (the kernel's column_group).
fn column_group(tiles: u32) -> u32 {
    (1..=8).rev().find(|g| tiles.is_multiple_of(*g)).unwrap_or(1)
}

fn tiles() -> impl Iterator<Item = Tile> {
    SCHEMA.all().map(|[warps, tiles_per_warp]| Tile { warps, tiles_per_warp })
}

impl Solver for Pointwise {
    fn id(&self) -> &'static str {
        "cuda.pointwise"
    }

    fn applicable(&self, p: &ConvProblem) -> Result<(), NotApplicable> {
        takes(p)?;
        require!(
            self.configs(p).next().is_some(),
            "no tile's rows and filter fit in {MAX_STAGED_BYTES} bytes of shared memory"
        );
        Ok(())
    }

    fn workspace_bytes(&self, _p: &ConvProblem, _config: &Config) -> u64 {
        0
    }

    fn default_config(&self, p: &ConvProblem) -> Config {
        // Over the 36 1x1 layers of the real-layer set with a side of up to 64 channels (H100),
        // 1.04x the fastest of four configs per layer.
        let preferred = Tile { warps: 8, tiles_per_warp: 1 };
        std::iter::once(preferred).chain(tiles()).find(|t| t.fits(p)).unwrap_or(preferred).to_config()
    }

    fn configs<'a>(&'a self, p: &'a ConvProblem) -> Box<dyn Iterator<Item = Config> + 'a> {
        Box::new(tiles().filter(|t| t.fits(p)).map(Tile::to_config))
    }

    fn check_config(&self, p: &ConvProblem, config: &Config) -> Result<()> {
        Tile::from_config(p, config).map(|_| ())
    }

    builds_from_kernel!();
}

impl BuiltFrom for Pointwise {
    fn device(&self) -> &CudaDevice {
        &self.device
    }

    fn kernels(&self, p: &ConvProblem, config: &Config) -> Result<Vec<KernelSource>> {
        Ok(vec![Tile::from_config(p, config)?.source(p)])
    }
}

impl Solve<Cuda> for Pointwise {
    fn solution(&self, p: &ConvProblem, config: &Config) -> Result<Box<dyn Invoker<Cuda>>> {
        let tile = Tile::from_config(p, config)?;
        let function = self.device.function(&tile.source(p), "pointwise")?;
        let shared_mem_bytes = tile.staged_bytes(p) as u32;
        launch::allow_shared(&function, shared_mem_bytes, self.id())?;
        let params = ConvParams::new(p);
        let pixels = u64::from(p.n) * params.output.iter().map(|&v| v as u64).product::<u64>();
        // Each block walks tiles a grid apart, after staging the filter once.
        let resident = u64::from(self.device.sm_count * tile.blocks_per_sm(p, &self.device.sm));
        let blocks = pixels.div_ceil(u64::from(tile.pixels())).min(resident) as u32;
        let launch = cudarc::driver::LaunchConfig {
            grid_dim: (blocks, 1, 1),
            block_dim: (32 * tile.warps, 1, 1),
            shared_mem_bytes,
        };
        Ok(Box::new(DirectInvoker {
            solver: self.id(),
            params,
            direction: p.direction,
            kernels: Kernels::Gather { function, launch },
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reason(key: &str) -> Option<String> {
        takes(&ConvProblem::from_key(key).unwrap()).err().map(|r| r.0)
    }

    #[test]
    fn takes_narrow_pointwise_layers_and_says_why_not_others() {
        assert_eq!(reason("v1:fwd:bf16:NHWC:n32:c32:k16:i112x112:f1x1:s1x1:p0x0:d1x1"), None);
        assert_eq!(reason("v1:fwd:f16:NDHWC:n2:c144:k24:i4x9x9:f1x1x1:s1x1x1:p0x0x0:d1x1x1"), None);
        assert!(reason("v1:bwd-weight:bf16:NHWC:n32:c32:k16:i112x112:f1x1:s1x1:p0x0:d1x1")
            .unwrap()
            .contains("backward-weight"));
        assert!(reason("v1:fwd:f32:NHWC:n32:c32:k16:i112x112:f1x1:s1x1:p0x0:d1x1").unwrap().contains("16-bit"));
        assert!(reason("v1:fwd:bf16:NCHW:n32:c32:k16:i112x112:f1x1:s1x1:p0x0:d1x1").unwrap().contains("channels-last"));
        assert!(reason("v1:fwd:bf16:NHWC:n32:c32:k16:i112x112:f1x1:s2x2:p0x0:d1x1")
            .unwrap()
            .contains("needs stride 1"));
        assert!(reason("v1:fwd:bf16:NHWC:n32:c32:k16:i112x112:f3x3:s1x1:p1x1:d1x1")
            .unwrap()
            .contains("needs a 1x1 filter"));
        assert!(reason("v1:fwd:bf16:NHWC:n32:c36:k16:i56x56:f1x1:s1x1:p0x0:d1x1")
            .unwrap()
            .contains("multiples of 8 (16-byte rows, 8-column MMA tiles), got C=36 K=16"));
        assert_eq!(reason("v1:fwd:bf16:NHWC:n32:c24:k144:i56x56:f1x1:s1x1:p0x0:d1x1"), None);
        assert!(reason("v1:fwd:bf16:NHWC:n32:c64:k64:i56x56:f1x1:s1x1:p0x0:d1x1")
            .unwrap()
            .contains("one side of at most 32 channels"));
        assert!(reason("v1:bwd-data:bf16:NHWC:n32:c32:k512:i56x56:f1x1:s1x1:p0x0:d1x1")
            .unwrap()
            .contains("the other of at most 256"));
    }

    #[test]
    fn configs_round_trip_and_the_largest_tiles_stage_what_they_say() {
        let p = ConvProblem::from_key("v1:fwd:bf16:NHWC:n32:c40:k24:i28x28:f1x1:s1x1:p0x0:d1x1").unwrap();
        // x's 40 channels padded to 48, 8 more a row: 56 elements; two tiles of 8 x 4 x 16
        // pixels and 24 filter rows; 8 warps' 16 results rows of 3 column tiles and 8 more.
        assert_eq!(Tile { warps: 8, tiles_per_warp: 4 }.staged_bytes(&p), (2 * 512 + 24) * 56 * 2 + 8 * 16 * 32 * 2);
        let h100 = SmLimits::HOPPER;
        // 4 warps, 128 pixels: 35 KB a block (and the driver's 1 KB), six an SM.
        assert_eq!(Tile { warps: 4, tiles_per_warp: 2 }.blocks_per_sm(&p, &h100), 6);
        assert_eq!((column_group(3), column_group(18), column_group(32), column_group(7)), (3, 6, 8, 7));
        for tile in tiles().filter(|t| t.fits(&p)) {
            assert_eq!(Tile::from_config(&p, &tile.to_config()).unwrap(), tile);
        }
        let large = Tile::from_config(&p, &Config::new([("wp", 8), ("mt", 4)])).unwrap_err().to_string();
        assert!(large.contains("stages 125568 bytes"), "{large}");
        let bad = Tile::from_config(&p, &Config::new([("wp", 3), ("mt", 2)])).unwrap_err().to_string();
        assert!(bad.contains("wp must be one of"), "{bad}");
    }
}
