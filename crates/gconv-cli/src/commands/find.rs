//! `gconv find`: benchmark every applicable solver and keep the ranking.

use std::process::ExitCode;

use clap::Args;

use super::{open_db, Context, DbArgs, FindArgs, ProblemArgs};
use crate::tuning;

#[derive(Debug, Args)]
pub struct FindCmd {
    #[command(flatten)]
    pub problems: ProblemArgs,
    #[command(flatten)]
    pub find: FindArgs,
    #[command(flatten)]
    pub db: DbArgs,
    /// Print one JSON object per problem
    #[arg(long)]
    pub json: bool,
}

pub fn run(ctx: &Context<'_>, cmd: FindCmd) -> anyhow::Result<ExitCode> {
    let mut db = open_db(&cmd.db)?;
    tuning::find(ctx.rt, &mut db, cmd.problems.jobs(ctx.tf32)?, &cmd.find.options(ctx.timing), cmd.json)
}
