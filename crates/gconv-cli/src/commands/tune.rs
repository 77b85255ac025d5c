//! `gconv tune`: search tunable solvers' configs into the perf-db.

use std::io::IsTerminal;
use std::process::ExitCode;

use clap::Args;

use super::{open_db, Context, DbArgs, FindArgs, ProblemArgs};
use crate::tuning;

#[derive(Debug, Args)]
pub struct TuneCmd {
    #[command(flatten)]
    pub problems: ProblemArgs,
    /// exhaustive: every config; random: a seeded sample limited by --budget-count/--budget-seconds;
    /// model: the learned model's --top-k fastest predicted configs of each solver
    #[arg(long, default_value = "exhaustive", value_parser = ["exhaustive", "random", "model"])]
    pub strategy: String,
    /// Configs per solver the model strategy times
    #[arg(long = "top-k", value_parser = clap::value_parser!(u64).range(1..))]
    pub top_k: Option<u64>,
    /// Configs per solver (random)
    #[arg(long = "budget-count", value_parser = clap::value_parser!(u64).range(1..))]
    pub budget_count: Option<u64>,
    /// Seconds per solver (random)
    #[arg(long = "budget-seconds")]
    pub budget_seconds: Option<f64>,
    /// Seed of the random strategy
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Search only this solver's space (repeatable; default: every tunable solver)
    #[arg(long = "solver", value_name = "ID")]
    pub solvers: Vec<String>,
    #[command(flatten)]
    pub find: FindArgs,
    #[command(flatten)]
    pub db: DbArgs,
}

pub fn run(ctx: &Context<'_>, cmd: TuneCmd) -> anyhow::Result<ExitCode> {
    let args = tuning::StrategyArgs {
        name: &cmd.strategy,
        count: cmd.budget_count,
        seconds: cmd.budget_seconds,
        seed: cmd.seed,
        top_k: cmd.top_k,
    };
    let strategy = tuning::strategy(ctx.rt, &args, ctx.models)?;
    let mut db = open_db(&cmd.db)?;
    let progress = std::io::stderr().is_terminal();
    let jobs = cmd.problems.jobs(ctx.tf32)?;
    tuning::tune(ctx.rt, &mut db, jobs, strategy.as_ref(), &cmd.solvers, &cmd.find.options(ctx.timing), progress)
}
