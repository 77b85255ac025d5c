//! `cuda.grouped_direct`: direct kernels for channels-last convolutions with at most 8 input
//! and 8 output channels per group (kernels/grouped.cu), such as ResNeXt's 32x4d blocks, where
//! implicit-GEMM tiles would be mostly padding. Channels per group and the filter height and
//! width are compile-time parameters. Tunable for forward and backward-data: `tw`, output
//! columns per thread sharing the group's weights held in registers. Backward-weight sums into
//! an fp32 workspace with atomics, then rounds once into dw.

use std::sync::Arc;

use cudarc::driver::LaunchConfig;
use gconv_core::{
    require, Config, ConvProblem, Direction, Field, GconvError, Invoker, Layout, NotApplicable, Result, Schema, Solve,
    Solver, Values,
};

use super::direct::{self, check_filter, filter_hw, DirectInvoker, Kernels, THREADS};
use super::{builds_from_kernel, BuiltFrom};
use crate::device::CudaDevice;
use crate::launch::flat;
use crate::{ConvParams, Cuda, KernelSource};

const SOURCE: &str = concat!(include_str!("../kernels/grouped.cu"), include_str!("../kernels/weight_store.cuh"));
const MAX_CHANNELS: u32 = 8;
/// Forward's and backward-data's: output columns a thread (`tw`).
const SCHEMA: Schema = Schema::new(&[Field::new("tw", Values::OneOf(&[1, 2, 4]))]);

pub struct GroupedDirect {
    pub device: Arc<CudaDevice>,
}

fn channels(p: &ConvProblem) -> (u32, u32) {
    (p.c / p.g, p.k / p.g)
}

fn column_tile(p: &ConvProblem, config: &Config) -> Result<u32> {
    if p.direction == Direction::BackwardWeight {
        return if config.is_empty() {
            Ok(1)
        } else {
            Err(GconvError::BadConfig {
                text: config.to_string(),
                reason: "backward-weight has nothing to tune".into(),
            })
        };
    }
    let [tw] = SCHEMA.parse(config)?;
    Ok(tw)
}

fn source(p: &ConvProblem, tw: u32) -> KernelSource {
    let (fh, fw) = filter_hw(p);
    let (cg, kg) = channels(p);
    KernelSource::new("grouped.cu", SOURCE, p.dtype)
        .define("FH", fh)
        .define("FW", fw)
        .define("CG", cg)
        .define("KG", kg)
        .define("TW", tw)
}

impl Solver for GroupedDirect {
    fn id(&self) -> &'static str {
        "cuda.grouped_direct"
    }

    fn applicable(&self, p: &ConvProblem) -> Result<(), NotApplicable> {
        require!(p.layout == Layout::Nhwc, "reads channels-last (NHWC) tensors only");
        let (cg, kg) = channels(p);
        require!(p.g > 1 && !(cg == 1 && kg == 1), "for grouped, not dense or depthwise, convolutions");
        require!(
            cg.is_power_of_two() && kg.is_power_of_two() && cg <= MAX_CHANNELS && kg <= MAX_CHANNELS,
            "{cg} input and {kg} output channels per group: compiled for powers of two up to {MAX_CHANNELS}"
        );
        check_filter(p)
    }

    fn workspace_bytes(&self, p: &ConvProblem, _config: &Config) -> u64 {
        direct::workspace_bytes(p)
    }

    fn default_config(&self, p: &ConvProblem) -> Config {
        match p.direction {
            Direction::BackwardWeight => Config::empty(),
            _ => SCHEMA.print([2]),
        }
    }

    fn configs<'a>(&'a self, p: &'a ConvProblem) -> Box<dyn Iterator<Item = Config> + 'a> {
        match p.direction {
            Direction::BackwardWeight => Box::new(std::iter::empty()),
            _ => Box::new(SCHEMA.all::<1>().map(|tw| SCHEMA.print(tw))),
        }
    }

    fn check_config(&self, p: &ConvProblem, config: &Config) -> Result<()> {
        column_tile(p, config).map(|_| ())
    }

    builds_from_kernel!();
}

impl BuiltFrom for GroupedDirect {
    fn device(&self) -> &CudaDevice {
        &self.device
    }

    fn kernels(&self, p: &ConvProblem, config: &Config) -> Result<Vec<KernelSource>> {
        Ok(vec![source(p, column_tile(p, config)?)])
    }
}

impl Solve<Cuda> for GroupedDirect {
    fn solution(&self, p: &ConvProblem, config: &Config) -> Result<Box<dyn Invoker<Cuda>>> {
        let tw = column_tile(p, config)?;
        let src = source(p, tw);
        let function = |name: &str| self.device.function(&src, name);
        let params = ConvParams::new(p);
        let sms = self.device.sm_count;
        let groups = p.g;
        let kernels = match p.direction {
            Direction::Forward | Direction::BackwardData => {
                let (name, dst) = match p.direction {
                    Direction::Forward => ("gd_fwd", params.output),
                    _ => ("gd_bwd_data", params.input),
                };
                let threads = u64::from(p.n)
                    * dst[0] as u64
                    * dst[1] as u64
                    * (dst[2] as u64).div_ceil(u64::from(tw))
                    * u64::from(groups);
                let blocks = threads.div_ceil(u64::from(THREADS)).clamp(1, u64::from(sms) * 32) as u32;
                Kernels::Gather { function: function(name)?, launch: flat(blocks, THREADS) }
            }
            Direction::BackwardWeight => {
                // Lanes are groups; with few groups the spare threads of a block take rows.
                let block_x = groups.next_power_of_two().min(32);
                let block_y = THREADS / block_x;
                let group_blocks = groups.div_ceil(block_x);
                let taps = params.filter[0] as u32 * params.filter[1] as u32 * params.filter[2] as u32;
                let rows = (params.n * params.output[0] * params.output[1]) as u32;
                // About four blocks per SM in all, over the taps.
                let row_blocks = rows.div_ceil(block_y).clamp(1, (sms * 4).div_ceil(group_blocks * taps).max(1));
                let weights = p.weight_elements() as u32;
                Kernels::Weight {
                    partial: function("gd_bwd_weight_partial")?,
                    store: function("weight_store")?,
                    partial_launch: LaunchConfig {
                        grid_dim: (group_blocks * row_blocks, taps, 1),
                        block_dim: (block_x, block_y, 1),
                        shared_mem_bytes: 0,
                    },
                    sums: p.weight_elements(),
                    blocks: weights.div_ceil(THREADS).clamp(1, sms * 8),
                }
            }
        };
        Ok(Box::new(DirectInvoker { solver: self.id(), params, direction: p.direction, kernels }))
    }
}
