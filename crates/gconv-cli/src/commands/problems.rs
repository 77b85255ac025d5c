//! `gconv problems`: a synthetic problem set split by shape.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;

use crate::learn;

#[derive(Debug, Args)]
pub struct ProblemsCmd {
    /// Distinct shapes to draw
    #[arg(long, default_value_t = 1000)]
    pub count: usize,
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Smallest problem in GFLOP, after fitting under --max-gflop: smaller draws are redrawn
    /// (a set of large layers)
    #[arg(long = "min-gflop", default_value_t = 0.0)]
    pub min_gflop: f64,
    /// Largest problem in GFLOP (batch, then spatial sizes shrink to fit)
    #[arg(long = "max-gflop", default_value_t = 20.0)]
    pub max_gflop: f64,
    /// Largest tensor in millions of elements
    #[arg(long = "max-melements", default_value_t = 64.0)]
    pub max_melements: f64,
    /// Share, in percent, of dense 2D draws with a filter over 1x1 that get a factorized 1 x k or
    /// k x 1 filter (Inception's); 0 draws square filters only, as seeds drew before the option
    #[arg(long = "factorized-percent", default_value_t = 0)]
    pub factorized_percent: u32,
    /// Share of shapes, in percent, that go to validation
    #[arg(long = "valid-percent", default_value_t = 20)]
    pub valid_percent: u32,
    #[arg(long = "train-out", value_name = "FILE")]
    pub train_out: PathBuf,
    #[arg(long = "valid-out", value_name = "FILE")]
    pub valid_out: PathBuf,
}

pub fn run(cmd: ProblemsCmd) -> anyhow::Result<ExitCode> {
    anyhow::ensure!(cmd.max_gflop > 0.0 && cmd.max_melements > 0.0, "--max-gflop and --max-melements must be positive");
    anyhow::ensure!(
        (0.0..cmd.max_gflop).contains(&cmd.min_gflop),
        "--min-gflop must be at least 0 and below --max-gflop ({}), got {}",
        cmd.max_gflop,
        cmd.min_gflop
    );
    let limits = gconv_heuristic::problems::Limits {
        min_gflop: cmd.min_gflop,
        max_gflop: cmd.max_gflop,
        max_elements: (cmd.max_melements * 1e6) as u64,
    };
    learn::problems(&learn::ProblemsOptions {
        count: cmd.count,
        seed: cmd.seed,
        limits,
        factorized_percent: cmd.factorized_percent,
        valid_percent: cmd.valid_percent,
        train_out: cmd.train_out,
        valid_out: cmd.valid_out,
    })
}
