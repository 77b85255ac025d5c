//! `gconv train`: the heuristic's models from sweep CSVs.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;

use super::Context;
use crate::learn;

#[derive(Debug, Args)]
pub struct TrainCmd {
    /// Sweep CSVs (from `gconv sweep`, or rows exported by `gconv db export --rows`)
    pub csv: Vec<PathBuf>,
    /// Rows to add to what the models in --out were trained on; they are retrained on both
    #[arg(long, value_name = "CSV", num_args = 1..)]
    pub append: Vec<PathBuf>,
    /// Folder to write the models to (default: this device's folder in the user's cache)
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Train on this device key's rows when the CSVs hold several devices
    #[arg(long)]
    pub device: Option<String>,
    /// Trees [default: 300; with --append, the earlier models']
    #[arg(long)]
    pub trees: Option<usize>,
    /// Levels a tree [default: 6; with --append, the earlier models']
    #[arg(long = "max-depth")]
    pub max_depth: Option<usize>,
    /// [default: 0.1; with --append, the earlier models']
    #[arg(long = "learning-rate")]
    pub learning_rate: Option<f32>,
    /// Weight of a pairwise loss between each problem's candidates beside the squared error of
    /// log time (0: squared error alone) [default: 0; with --append, the earlier models']
    #[arg(long)]
    pub ranking: Option<f64>,
    /// Leave a cuDNN config's place on cuDNN's find list out of the features even where the
    /// training rows have it: for models validated on sweeps from before it was recorded,
    /// whose rows would read as off the list (with --append, also where the earlier models did)
    #[arg(long = "without-vendor-rank")]
    pub without_vendor_rank: bool,
    /// Let each training problem weigh the same, its candidates sharing one unit (by default
    /// each candidate weighs one, so problems with long cuDNN listings count for more; with
    /// --append, also where the earlier models did)
    #[arg(long = "equal-problem-weight")]
    pub equal_problem_weight: bool,
    /// Add how far the GEMM's sides are aligned (channels a group, pixels: the largest power of
    /// two up to 16 dividing each) to the features (with --append, also where the earlier
    /// models had them)
    #[arg(long = "alignment-features")]
    pub alignment_features: bool,
}

pub fn run(ctx: &Context<'_>, cmd: TrainCmd) -> anyhow::Result<ExitCode> {
    anyhow::ensure!(
        cmd.trees != Some(0) && cmd.max_depth != Some(0) && cmd.learning_rate.is_none_or(|r| r > 0.0),
        "--trees, --max-depth and --learning-rate must be positive"
    );
    anyhow::ensure!(cmd.ranking.is_none_or(|r| r >= 0.0 && r.is_finite()), "--ranking must be 0 or more");
    let choices = learn::TrainChoices {
        trees: cmd.trees,
        max_depth: cmd.max_depth,
        learning_rate: cmd.learning_rate,
        ranking: cmd.ranking,
        without_vendor_rank: cmd.without_vendor_rank,
        equal_problem_weight: cmd.equal_problem_weight,
        alignment: cmd.alignment_features,
    };
    learn::train_models(
        ctx.rt,
        &learn::TrainArgs { csv: cmd.csv, append: cmd.append, out: cmd.out, device: cmd.device, choices },
    )
}
