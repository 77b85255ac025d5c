//! `gconv select`: the pick for each problem and how long selecting took.

use std::process::ExitCode;

use clap::Args;
use gconv_tune::select::FindMode;

use super::{open_db, Context, DbArgs, FindArgs, ProblemArgs};
use crate::{learn, tuning};

#[derive(Debug, Args)]
pub struct SelectCmd {
    #[command(flatten)]
    pub problems: ProblemArgs,
    #[arg(long = "find-mode", default_value = "fast")]
    pub find_mode: FindMode,
    /// Timed selections per problem after one warm-up pass
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u32).range(1..))]
    pub repeat: u32,
    #[command(flatten)]
    pub find: FindArgs,
    #[command(flatten)]
    pub db: DbArgs,
}

pub fn run(ctx: &Context<'_>, cmd: SelectCmd) -> anyhow::Result<ExitCode> {
    let mut db = open_db(&cmd.db)?;
    let jobs = cmd.problems.jobs(ctx.tf32)?;
    let model = learn::heuristic(ctx.rt, ctx.models)?;
    tuning::select_bench(
        ctx.rt,
        &mut db,
        jobs,
        cmd.find_mode,
        &cmd.find.options(ctx.timing),
        cmd.repeat,
        model.as_ref(),
    )
}
