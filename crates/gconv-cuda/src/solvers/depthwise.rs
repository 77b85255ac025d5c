//! `cuda.depthwise`: direct kernels for G = C = K (kernels/depthwise.cu). The filter height
//! and width are compile-time parameters (1 to 7 each), so tap loops unroll. Tunable: `vec`,
//! channels per thread in NHWC (one 4- to 16-byte load per tap), and for forward and
//! backward-data `tw`, output columns per thread sharing the weights held in registers.
//! Backward-weight sums into an fp32 workspace with atomics, then rounds once into dw.

use std::sync::Arc;

use cudarc::driver::LaunchConfig;
use gconv_core::{
    Config, ConvProblem, Direction, Field, GconvError, Invoker, Layout, NotApplicable, Result, Schema, Solve, Solver,
    Values,
};

use super::direct::{self, check_filter, filter_hw, DirectInvoker, Kernels, THREADS};
use super::{builds_from_kernel, BuiltFrom};
use crate::device::CudaDevice;
use crate::launch::flat;
use crate::{ConvParams, Cuda, KernelSource};

const SOURCE: &str =
    concat!(include_str!("../kernels/depthwise.cu"), include_str!("../kernels/depthwise_weight_store.cuh"));
/// Per-thread fp32 sums of backward-weight (vec x FH x FW) kept in registers.
const MAX_WEIGHT_ACCUMULATORS: u32 = 64;
/// Channels a thread loads at once (`vec`, bounded per problem by `vec_widths`) and, but for
/// backward-weight, output columns a thread (`tw`).
const VEC: Field = Field::new("vec", Values::OneOf(&[1, 2, 4, 8]));
const SCHEMA: Schema = Schema::new(&[VEC, Field::new("tw", Values::OneOf(&[1, 2, 4]))]);
const WEIGHT_SCHEMA: Schema = Schema::new(&[VEC]);

pub struct Depthwise {
    pub device: Arc<CudaDevice>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Tile {
    vec: u32,
    /// Output columns per thread; 1 for backward-weight.
    tw: u32,
}

fn vec_widths(p: &ConvProblem) -> Vec<u32> {
    if p.layout == Layout::Nchw {
        return vec![1];
    }
    let (fh, fw) = filter_hw(p);
    let max_bytes = 16;
    [1u32, 2, 4, 8]
        .into_iter()
        .filter(|&v| p.c.is_multiple_of(v) && v as usize * p.dtype.size_bytes() <= max_bytes)
        .filter(|&v| p.direction != Direction::BackwardWeight || v * fh * fw <= MAX_WEIGHT_ACCUMULATORS)
        .collect()
}

impl Tile {
    fn to_config(self, direction: Direction) -> Config {
        match direction {
            Direction::BackwardWeight => WEIGHT_SCHEMA.print([self.vec]),
            _ => SCHEMA.print([self.vec, self.tw]),
        }
    }

    /// Every tile of the schema, the problem's vector widths only.
    fn all(p: &ConvProblem) -> impl Iterator<Item = Tile> {
        let tiles: Vec<Tile> = match p.direction {
            Direction::BackwardWeight => WEIGHT_SCHEMA.all().map(|[vec]| Tile { vec, tw: 1 }).collect(),
            _ => SCHEMA.all().map(|[vec, tw]| Tile { vec, tw }).collect(),
        };
        let widths = vec_widths(p);
        tiles.into_iter().filter(move |t| widths.contains(&t.vec))
    }

    fn from_config(p: &ConvProblem, config: &Config) -> Result<Self> {
        let tile = match p.direction {
            Direction::BackwardWeight => {
                let [vec] = WEIGHT_SCHEMA.parse(config)?;
                Tile { vec, tw: 1 }
            }
            _ => {
                let [vec, tw] = SCHEMA.parse(config)?;
                Tile { vec, tw }
            }
        };
        if !vec_widths(p).contains(&tile.vec) {
            return Err(GconvError::BadConfig {
                text: config.to_string(),
                reason: format!("vec must be one of {:?} for this problem", vec_widths(p)),
            });
        }
        Ok(tile)
    }

    fn source(self, p: &ConvProblem) -> KernelSource {
        let (fh, fw) = filter_hw(p);
        let mut src = KernelSource::new("depthwise.cu", SOURCE, p.dtype)
            .define("FH", fh)
            .define("FW", fw)
            .define("VEC", self.vec)
            .define("TW", self.tw);
        if p.layout == Layout::Nhwc {
            src.defines.push("GCONV_NHWC".into());
        }
        src
    }
}

impl Solver for Depthwise {
    fn id(&self) -> &'static str {
        "cuda.depthwise"
    }

    fn applicable(&self, p: &ConvProblem) -> Result<(), NotApplicable> {
        gconv_core::applicability::depthwise(p)?;
        check_filter(p)
    }

    fn workspace_bytes(&self, p: &ConvProblem, _config: &Config) -> u64 {
        direct::workspace_bytes(p)
    }

    fn default_config(&self, p: &ConvProblem) -> Config {
        let vec = vec_widths(p).into_iter().max().unwrap_or(1);
        Tile { vec, tw: 2 }.to_config(p.direction)
    }

    fn configs<'a>(&'a self, p: &'a ConvProblem) -> Box<dyn Iterator<Item = Config> + 'a> {
        Box::new(Tile::all(p).map(|t| t.to_config(p.direction)))
    }

    fn check_config(&self, p: &ConvProblem, config: &Config) -> Result<()> {
        Tile::from_config(p, config).map(|_| ())
    }

    builds_from_kernel!();
}

impl BuiltFrom for Depthwise {
    fn device(&self) -> &CudaDevice {
        &self.device
    }

    fn kernels(&self, p: &ConvProblem, config: &Config) -> Result<Vec<KernelSource>> {
        Ok(vec![Tile::from_config(p, config)?.source(p)])
    }
}

impl Solve<Cuda> for Depthwise {
    fn solution(&self, p: &ConvProblem, config: &Config) -> Result<Box<dyn Invoker<Cuda>>> {
        let tile = Tile::from_config(p, config)?;
        let src = tile.source(p);
        let function = |name: &str| self.device.function(&src, name);
        let params = ConvParams::new(p);
        let sms = self.device.sm_count;
        let kernels = match p.direction {
            Direction::Forward | Direction::BackwardData => {
                let name = if p.direction == Direction::Forward { "dw_fwd" } else { "dw_bwd_data" };
                let dst: [i32; 3] = if p.direction == Direction::Forward { params.output } else { params.input };
                let lanes = if p.layout == Layout::Nhwc { p.c / tile.vec } else { p.c };
                let threads = u64::from(p.n)
                    * dst[0] as u64
                    * dst[1] as u64
                    * (dst[2] as u64).div_ceil(u64::from(tile.tw))
                    * u64::from(lanes);
                let blocks = threads.div_ceil(u64::from(THREADS)).clamp(1, u64::from(sms) * 32) as u32;
                Kernels::Gather { function: function(name)?, launch: flat(blocks, THREADS) }
            }
            Direction::BackwardWeight => {
                let lanes = if p.layout == Layout::Nhwc { p.c / tile.vec } else { p.c };
                // Few channels leave lanes idle in a 32-wide block: give the spare threads rows.
                let block_x = lanes.next_power_of_two().min(32);
                let block_y = THREADS / block_x;
                let lane_blocks = lanes.div_ceil(block_x);
                let rows = (params.n * params.output[0] * params.output[1]) as u32;
                let row_blocks = (rows.div_ceil(block_y)).clamp(1, (sms * 4).div_ceil(lane_blocks).max(1));
                Kernels::Weight {
                    partial: function("dw_bwd_weight_partial")?,
                    store: function("dw_bwd_weight_store")?,
                    partial_launch: LaunchConfig {
                        grid_dim: (lane_blocks * row_blocks, params.filter[0] as u32, 1),
                        block_dim: (block_x, block_y, 1),
                        shared_mem_bytes: 0,
                    },
                    sums: p.weight_elements(),
                    blocks: (p.weight_elements() as u32).div_ceil(THREADS).clamp(1, sms * 8),
                }
            }
        };
        Ok(Box::new(DirectInvoker { solver: self.id(), params, direction: p.direction, kernels }))
    }
}
