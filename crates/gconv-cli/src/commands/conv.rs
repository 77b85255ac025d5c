//! `gconv conv`, `convfp16`, `convbfp16`: select, run, time and verify, with MIOpenDriver's flags.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use gconv_core::DataType;
use gconv_tune::select::FindMode;

use super::{for_each_problem, open_db, print_warnings, Context, DbArgs, FindArgs};
use crate::driver::{allowing_tf32, jobs_from_file, DriverArgs, RunArgs};
use crate::learn;

#[derive(Debug, Args)]
pub struct ConvCmd {
    #[command(flatten)]
    pub driver: DriverArgs,
    #[command(flatten)]
    pub run: RunArgs,
    /// Print one JSON object per direction instead of text
    #[arg(long)]
    pub json: bool,
    /// Run a batch: one driver line (or key) per line (`#` comments); -V, -t, -i and -S given
    /// here apply to every line that does not set its own
    #[arg(long, value_name = "FILE")]
    pub file: Option<PathBuf>,
    /// How the solver is chosen when -S is not given: normal, fast, hybrid, dynamic-hybrid
    #[arg(long = "find-mode", default_value = "dynamic-hybrid")]
    pub find_mode: FindMode,
    #[command(flatten)]
    pub find: FindArgs,
    #[command(flatten)]
    pub db: DbArgs,
}

/// Runs the command's problems in `dtype` (`conv`, `convfp16` and `convbfp16` differ only there).
pub fn run(ctx: &Context<'_>, cmd: ConvCmd, dtype: DataType) -> anyhow::Result<ExitCode> {
    let mut db = open_db(&cmd.db)?;
    let model = learn::DeferredHeuristic::new(ctx.rt, ctx.models)?;
    let jobs = allowing_tf32(
        match &cmd.file {
            Some(path) => jobs_from_file(path, dtype, &cmd.run).map_err(anyhow::Error::msg)?,
            None => vec![("command line".into(), cmd.driver.problems(dtype).map(|p| (p, cmd.run.clone())))],
        },
        ctx.tf32,
    );
    if !cmd.json {
        println!("device:    {}\n", ctx.device_line);
    }
    let opts = cmd.find.options(ctx.timing);
    Ok(for_each_problem(jobs, |p, run_args| {
        let report = crate::run::run(ctx.rt, &mut db, p, run_args, cmd.find_mode, &opts, Some(&model))?;
        print_warnings(&report.warnings);
        if cmd.json {
            let mut out = std::io::stdout().lock();
            serde_json::to_writer(&mut out, &report)?;
            writeln!(out)?;
        } else {
            report.print_text();
        }
        Ok(!report.failed_verification())
    }))
}
