//! `gconv sweep`: every applicable solver x config x problem into a CSV, each candidate in a
//! worker process.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use gconv_tune::find::FindOptions;

use super::{sweep_options, Context, FindArgs};
use crate::driver::ProblemChoice;
use crate::sweep;

#[derive(Debug, Args)]
pub struct SweepCmd {
    /// Problems: driver lines or keys, one per line (`#` comments)
    #[arg(long, value_name = "FILE", required_unless_present = "worker")]
    pub problems: Option<PathBuf>,
    /// The CSV to write; rows already in it for this device are not measured again
    #[arg(long, value_name = "FILE", required_unless_present = "worker")]
    pub out: Option<PathBuf>,
    #[command(flatten)]
    pub select: ProblemChoice,
    /// Seconds a candidate may take (with its verification and samples) before its worker is
    /// stopped and the row recorded as failed; building a problem's kernels may take ten times
    /// as long
    #[arg(long = "timeout-s", default_value_t = 60.0)]
    pub timeout_s: f64,
    /// One worker per device, each seeing only its own (CUDA_VISIBLE_DEVICES), e.g. `0,1,2,3`;
    /// default: one worker per GPU this process sees
    #[arg(long, value_delimiter = ',')]
    pub devices: Vec<String>,
    /// Measure only this many configs of each solver's own space (the same ones on every
    /// problem where they are valid) and its default; a vendor library's list stays whole.
    /// For breadth over shapes where a space is too large to sweep whole
    #[arg(long = "configs-per-solver", value_parser = clap::value_parser!(u64).range(1..))]
    pub configs_per_solver: Option<u64>,
    /// Stop a candidate over twice the fastest so far after one call: it is recorded
    /// `time-boxed`, at that call's time and unverified. Sweeps of large spaces go faster;
    /// every row is verified and fully timed without it
    #[arg(long = "early-stop")]
    pub early_stop: bool,
    /// Measure these solvers' candidates again though the CSV has rows of them for this device
    /// (comma-separated ids; after a change to their code): the new rows are appended, and
    /// training and validation read the last row of a candidate. Each run with the flag
    /// measures all of them again: a stopped one, run again, repeats what it measured
    #[arg(long, value_delimiter = ',', value_name = "SOLVERS")]
    pub remeasure: Vec<String>,
    /// Hand out no problem after this many seconds: the problems being measured finish, the
    /// summary prints, and a later run with the same --out goes on from there
    #[arg(long = "time-limit-s")]
    pub time_limit_s: Option<f64>,
    #[command(flatten)]
    pub find: FindArgs,
    /// Run as a worker: measure the JSON batches read from standard input (the sweep starts
    /// its workers so)
    #[arg(long, hide = true)]
    pub worker: bool,
}

pub fn run(ctx: &Context<'_>, cmd: SweepCmd) -> anyhow::Result<ExitCode> {
    let find = FindOptions { time_box: cmd.early_stop, ..cmd.find.options(ctx.timing) };
    if cmd.worker {
        return sweep::worker(ctx.rt, &find);
    }
    let (file, out) = (cmd.problems.as_deref().expect("required"), cmd.out.clone().expect("required"));
    let (problems, parsed) = cmd.select.problems(file, ctx.tf32)?;
    let mut opts = sweep_options(ctx, out, find, cmd.timeout_s, cmd.devices)?;
    opts.configs_per_solver = cmd.configs_per_solver.map(|n| n as usize);
    for id in &cmd.remeasure {
        ctx.rt.solver(id).map_err(|e| anyhow::anyhow!("--remeasure {id}: {e}"))?;
    }
    opts.remeasure = cmd.remeasure;
    if let Some(seconds) = cmd.time_limit_s {
        anyhow::ensure!(
            seconds.is_finite() && seconds > 0.0,
            "--time-limit-s must be a positive number of seconds, got {seconds}"
        );
        opts.time_limit = Some(std::time::Duration::from_secs_f64(seconds));
    }
    let code = sweep::sweep(ctx.rt, ctx.device_line, &problems, &opts)?;
    Ok(if parsed == ExitCode::SUCCESS { code } else { parsed })
}
