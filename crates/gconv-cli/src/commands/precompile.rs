//! `gconv precompile`: build the GPU kernels of problems ahead of time.

use std::process::ExitCode;

use clap::Args;

use super::{open_db, Context, DbArgs, ProblemArgs};
use crate::tuning;

#[derive(Debug, Args)]
pub struct PrecompileCmd {
    #[command(flatten)]
    pub problems: ProblemArgs,
    /// Parallel builds [default: one per core]
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    pub threads: Option<u32>,
    #[command(flatten)]
    pub only: tuning::OwnSolvers,
    #[command(flatten)]
    pub db: DbArgs,
}

pub fn run(ctx: &Context<'_>, cmd: PrecompileCmd) -> anyhow::Result<ExitCode> {
    if ctx.rt.build_stats().is_none() {
        anyhow::bail!("precompile builds GPU kernels, and the device is {}", ctx.device_line);
    }
    let mut db = open_db(&cmd.db)?;
    let threads = cmd.threads.map_or_else(gconv_tune::prebuild::build_threads, |n| n as usize);
    tuning::precompile(ctx.rt, &mut db, cmd.problems.jobs(ctx.tf32)?, &cmd.only, threads)
}
