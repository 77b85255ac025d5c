//! `gconv explain`: every solver for a problem, applicable or why not.

use std::process::ExitCode;

use clap::Args;

use super::{for_each_problem, Context, ProblemArgs};
use crate::explain;

#[derive(Debug, Args)]
pub struct ExplainCmd {
    #[command(flatten)]
    pub problems: ProblemArgs,
    /// Also list every config of each applicable solver, with what the solver says of it
    #[arg(long)]
    pub configs: bool,
}

pub fn run(ctx: &Context<'_>, cmd: ExplainCmd) -> anyhow::Result<ExitCode> {
    let jobs = cmd.problems.jobs(ctx.tf32)?;
    println!("device:    {}\n", ctx.device_line);
    Ok(for_each_problem(jobs, |p, _| {
        explain::explain(ctx.rt, p, cmd.configs);
        Ok(true)
    }))
}
