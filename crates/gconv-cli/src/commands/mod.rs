//! The commands of `gconv`, one file each: its arguments and what it does with them. What
//! several share (the problems, database and find arguments, opening the database, running
//! over problems) is here; the work itself lives in the crate's other modules.

pub mod bench;
pub mod check;
pub mod conv;
pub mod db;
pub mod explain;
pub mod find;
pub mod net;
pub mod precompile;
pub mod problems;
pub mod select;
pub mod sweep;
pub mod train;
pub mod tune;
pub mod validate;

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context as _;
use clap::Args;
use gconv_core::{ConvProblem, DataType, Runtime, TimingOptions};
use gconv_tune::db::{default_user_path, Db, Warning};
use gconv_tune::find::FindOptions;

use crate::driver::{allowing_tf32, default_run_args, jobs_from_file, DriverArgs, Job, RunArgs};
use crate::sweep::SweepOptions;

/// What every command runs with: the runtime and the global flags.
pub struct Context<'a> {
    pub rt: &'a dyn Runtime,
    /// The device line of reports (which says why `--backend auto` passed over a backend).
    pub device_line: &'a str,
    pub backend: &'a str,
    pub tf32: bool,
    pub cold_l2: bool,
    pub timing: TimingOptions,
    pub models: Option<&'a Path>,
}

/// Problems by key, by driver flags, or from a file.
#[derive(Debug, Args)]
pub struct ProblemArgs {
    /// A problem key (`v1:...`, as printed by `gconv conv`); otherwise the driver flags apply
    pub key: Option<String>,
    /// A file of driver lines or keys, one per line (`#` comments)
    #[arg(long, value_name = "FILE")]
    pub file: Option<PathBuf>,
    /// Data type of every problem, a file's command words (`conv` is fp32) and keys
    /// included; when not given, driver flags are fp32 and a file's command words decide
    #[arg(long, value_parser = ["f32", "f16", "bf16", "tf32"])]
    pub dtype: Option<String>,
    #[command(flatten)]
    pub driver: DriverArgs,
}

#[derive(Debug, Args)]
pub struct DbArgs {
    /// The user database (default: gconv/user.db under the user's cache directory)
    #[arg(long, value_name = "PATH", global = true)]
    pub db: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct FindArgs {
    /// Largest workspace a candidate may use, in MiB
    #[arg(long = "workspace-limit-mib", default_value_t = 4096)]
    pub workspace_limit_mib: u64,
    /// Samples per candidate
    #[arg(long = "find-iter", default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..))]
    pub find_iter: u32,
}

impl FindArgs {
    pub fn options(&self, timing: TimingOptions) -> FindOptions {
        FindOptions {
            workspace_limit: self.workspace_limit_mib.saturating_mul(1 << 20),
            samples: self.find_iter,
            timing,
            ..FindOptions::default()
        }
    }
}

/// The jobs with every problem in `dtype`, when one is given.
fn with_dtype(jobs: Vec<Job>, dtype: Option<DataType>) -> Vec<Job> {
    let Some(dtype) = dtype else { return jobs };
    let convert = |problems: Vec<ConvProblem>| problems.into_iter().map(|p| ConvProblem { dtype, ..p }).collect();
    jobs.into_iter().map(|(origin, job)| (origin, job.map(|(problems, run)| (convert(problems), run)))).collect()
}

/// Opens the user db, reporting what opening it had to repair.
pub fn open_db(args: &DbArgs) -> anyhow::Result<Db> {
    let path = args.db.clone().unwrap_or_else(default_user_path);
    let (db, warning) = Db::open(&path).with_context(|| format!("cannot open the database {}", path.display()))?;
    print_warnings(warning.as_slice());
    Ok(db)
}

pub fn print_warnings(warnings: &[Warning]) {
    for w in warnings {
        eprintln!("warning: {w}");
    }
}

impl ProblemArgs {
    pub fn jobs(&self, tf32: bool) -> anyhow::Result<Vec<Job>> {
        let given = self.dtype.as_deref().map(str::parse::<DataType>).transpose().map_err(anyhow::Error::msg)?;
        let dtype = given.unwrap_or(DataType::F32);
        let jobs = match (&self.file, &self.key) {
            (Some(path), _) => jobs_from_file(path, dtype, &default_run_args()).map_err(anyhow::Error::msg)?,
            (None, Some(key)) => vec![(
                "command line".into(),
                ConvProblem::from_key(key).map(|p| (vec![p], default_run_args())).map_err(|e| e.to_string()),
            )],
            (None, None) => vec![("command line".into(), self.driver.problems(dtype).map(|p| (p, default_run_args())))],
        };
        Ok(allowing_tf32(with_dtype(jobs, given), tf32))
    }
}

/// Runs `body` on every problem of every job; bad jobs and failing problems are reported by
/// origin and make the exit code non-zero, the rest still run.
pub fn for_each_problem(
    jobs: Vec<Job>,
    mut body: impl FnMut(&ConvProblem, &RunArgs) -> anyhow::Result<bool>,
) -> ExitCode {
    let mut failures = 0;
    for (origin, job) in jobs {
        let outcome = job.map_err(anyhow::Error::msg).and_then(|(problems, run_args)| {
            problems.iter().try_for_each(|p| {
                if !body(p, &run_args).with_context(|| p.key())? {
                    failures += 1;
                }
                Ok(())
            })
        });
        if let Err(e) = outcome {
            failures += 1;
            eprintln!("error: {origin}: {e:#}");
        }
    }
    if failures == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// A sweep's options: its workers start with this process's backend and timing flags.
pub fn sweep_options(
    ctx: &Context<'_>,
    out: PathBuf,
    find: FindOptions,
    timeout_s: f64,
    devices: Vec<String>,
) -> anyhow::Result<SweepOptions> {
    anyhow::ensure!(
        timeout_s.is_finite() && timeout_s > 0.0,
        "--timeout-s must be a positive number of seconds, got {timeout_s}"
    );
    let mut worker_flags = vec!["--backend".to_string(), ctx.backend.to_string()];
    if ctx.cold_l2 {
        worker_flags.push("--cold-l2".into());
    }
    Ok(SweepOptions {
        out,
        find,
        timeout: std::time::Duration::from_secs_f64(timeout_s),
        devices,
        configs_per_solver: None,
        remeasure: Vec::new(),
        time_limit: None,
        worker_flags,
        progress: std::io::stderr().is_terminal(),
    })
}
