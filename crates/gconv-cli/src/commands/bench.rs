//! `gconv bench`: gconv against the vendor library, layer by layer.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use clap::Args;
use gconv_tune::find::FindOptions;
use gconv_tune::select::FindMode;

use super::{open_db, Context, DbArgs, FindArgs};
use crate::driver::ProblemChoice;
use crate::{bench, learn};

#[derive(Debug, Args)]
pub struct BenchCmd {
    /// Problems: driver lines or keys, one per line (`#` comments)
    #[arg(long, value_name = "FILE", required_unless_present = "summarize")]
    pub file: Option<PathBuf>,
    /// Print the summary of earlier runs from their --csv files instead of measuring
    #[arg(long, value_name = "CSV", num_args = 1.., conflicts_with = "file")]
    pub summarize: Vec<PathBuf>,
    #[command(flatten)]
    pub select: ProblemChoice,
    /// How gconv's pick is made
    #[arg(long = "find-mode", default_value = "dynamic-hybrid")]
    pub find_mode: FindMode,
    /// Samples per measurement (after one warm-up)
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..))]
    pub iter: u32,
    /// Also write one CSV row per problem to this file
    #[arg(long, value_name = "FILE")]
    pub csv: Option<PathBuf>,
    /// PyTorch's times of the same problems (bench/torch_conv.py's CSV): adds a column and a
    /// summary line
    #[arg(long = "torch-csv", value_name = "FILE")]
    pub torch_csv: Option<PathBuf>,
    /// Print the problem keys the bench would run, one per line, and stop (the input of
    /// bench/torch_conv.py)
    #[arg(long)]
    pub list: bool,
    #[command(flatten)]
    pub find: FindArgs,
    #[command(flatten)]
    pub db: DbArgs,
}

pub fn run(ctx: &Context<'_>, cmd: BenchCmd) -> anyhow::Result<ExitCode> {
    if !cmd.summarize.is_empty() {
        return bench::summarize_csv(&cmd.summarize);
    }
    let (problems, parsed) =
        cmd.select.problems(cmd.file.as_deref().context("--file names the problems")?, ctx.tf32)?;
    if cmd.list {
        problems.iter().for_each(|p| println!("{}", p.key()));
        return Ok(parsed);
    }
    let model = learn::DeferredHeuristic::new(ctx.rt, ctx.models)?;
    let opts = bench::BenchOptions {
        mode: cmd.find_mode,
        model: Some(&model),
        find: FindOptions { samples: cmd.iter, ..cmd.find.options(ctx.timing) },
        csv: cmd.csv.clone(),
        torch: cmd.torch_csv.as_deref().map(bench::read_torch_csv).transpose()?,
    };
    let code = bench::bench(ctx.rt, ctx.device_line, &mut open_db(&cmd.db)?, problems, &opts)?;
    Ok(if parsed == ExitCode::SUCCESS { code } else { parsed })
}
