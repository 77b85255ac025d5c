//! `gconv`: select, run, time, verify, find and tune grouped convolutions.

mod bench;
mod check;
mod driver;
mod explain;
mod learn;
mod net;
mod plots;
mod run;
mod runtimes;
mod sweep;
mod tuning;

use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Args, Parser, Subcommand};
use gconv_core::{ConvProblem, DataType, Runtime, TimingOptions};
use gconv_tune::db::{default_user_path, Db, Warning};
use gconv_tune::find::FindOptions;
use gconv_tune::select::FindMode;

use driver::{allowing_tf32, default_run_args, first_line, jobs_from_file, DriverArgs, Job, ProblemChoice, RunArgs};

#[derive(Debug, Parser)]
#[command(name = "gconv", version, about = "Grouped convolutions: pick, run, time, verify, find and tune solvers")]
struct Cli {
    #[command(subcommand)]
    command: Command,
    /// Where to run: auto (the GPU when one is usable, else the CPU), cpu, or cuda
    #[arg(long, global = true, default_value = "auto", value_parser = clap::builder::PossibleValuesParser::new(runtimes::choices()))]
    backend: String,
    /// Let fp32 problems use TF32 tensor cores, as cuDNN and PyTorch allow by flag: they run
    /// as tf32 problems (keys with `tf32`, their own database records, looser verification)
    #[arg(long = "allow-tf32", global = true)]
    allow_tf32: bool,
    /// Time with a cold L2 cache: flush it before every sample, one call per sample (by
    /// default the cache is warm, as PyTorch's benchmark and cuDNN's find see it)
    #[arg(long = "cold-l2", global = true)]
    cold_l2: bool,
    /// The models that pick where nothing is measured (a folder written by `gconv train`);
    /// default: this device's trained models in the user's cache, else the built-in ones
    #[arg(long, value_name = "DIR", global = true)]
    models: Option<PathBuf>,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run fp32 convolutions; flags as MIOpenDriver's `conv`
    #[command(allow_negative_numbers = true, args_override_self = true)]
    Conv(ConvCmd),
    /// Run fp16 convolutions; flags as MIOpenDriver's `convfp16`
    #[command(allow_negative_numbers = true, args_override_self = true)]
    Convfp16(ConvCmd),
    /// Run bf16 convolutions; flags as MIOpenDriver's `convbfp16`
    #[command(allow_negative_numbers = true, args_override_self = true)]
    Convbfp16(ConvCmd),
    /// List every solver for a problem: applicable or why not, workspace, number of configs
    #[command(allow_negative_numbers = true, args_override_self = true)]
    Explain(ExplainCmd),
    /// Benchmark every applicable solver, rank them, keep the ranking in the find-db
    #[command(allow_negative_numbers = true, args_override_self = true)]
    Find(FindCmd),
    /// Search tunable solvers' configs; keep winners in the perf-db (resumable)
    #[command(allow_negative_numbers = true, args_override_self = true)]
    Tune(TuneCmd),
    /// Show the pick for each problem and how long selecting took (benchmark of selection)
    #[command(allow_negative_numbers = true, args_override_self = true)]
    Select(SelectCmd),
    /// gconv against the vendor library (cuDNN) on the GPU, layer by layer, beside the roofline
    /// bound and optionally PyTorch's times
    Bench(BenchCmd),
    /// Build the GPU kernels of problems ahead of time, in parallel, without using the GPU
    #[command(allow_negative_numbers = true, args_override_self = true)]
    Precompile(PrecompileCmd),
    /// Measure every applicable solver x every config x every problem into a CSV (the learned
    /// heuristic's training data); resumable, each candidate isolated in a worker process
    Sweep(SweepCmd),
    /// Write a synthetic problem set covering real networks' layers, split by shape into
    /// training and validation files
    Problems(ProblemsCmd),
    /// Train the heuristic's models (one per direction and dtype family) from sweep CSVs
    Train(TrainCmd),
    /// Measure the models' picks against the oracle on problems they never saw
    Validate(ValidateCmd),
    /// Networks: tune a network's convolutions over dtype and layout knobs into a tuning JSON,
    /// run from it, report it
    #[command(subcommand)]
    Net(net::NetCmd),
    /// Check every solver against the reference on random problems from seeds (a stress run
    /// of the tests' check) or on given keys; failures print the seed and the problem's key
    Check(check::CheckCmd),
    /// Inspect and maintain the user database
    Db(DbCmd),
}

#[derive(Debug, Args)]
struct ProblemsCmd {
    /// Distinct shapes to draw
    #[arg(long, default_value_t = 1000)]
    count: usize,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Largest problem in GFLOP (batch, then spatial sizes shrink to fit)
    #[arg(long = "max-gflop", default_value_t = 20.0)]
    max_gflop: f64,
    /// Largest tensor in millions of elements
    #[arg(long = "max-melements", default_value_t = 64.0)]
    max_melements: f64,
    /// Share of shapes, in percent, that go to validation
    #[arg(long = "valid-percent", default_value_t = 20)]
    valid_percent: u32,
    #[arg(long = "train-out", value_name = "FILE")]
    train_out: PathBuf,
    #[arg(long = "valid-out", value_name = "FILE")]
    valid_out: PathBuf,
}

#[derive(Debug, Args)]
struct TrainCmd {
    /// Sweep CSVs (from `gconv sweep`, or rows exported by `gconv db export --rows`)
    csv: Vec<PathBuf>,
    /// Rows to add to what the models in --out were trained on; they are retrained on both
    #[arg(long, value_name = "CSV", num_args = 1..)]
    append: Vec<PathBuf>,
    /// Folder to write the models to (default: this device's folder in the user's cache)
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
    /// Train on this device key's rows when the CSVs hold several devices
    #[arg(long)]
    device: Option<String>,
    #[arg(long, default_value_t = 300)]
    trees: usize,
    #[arg(long = "max-depth", default_value_t = 6)]
    max_depth: usize,
    #[arg(long = "learning-rate", default_value_t = 0.1)]
    learning_rate: f32,
}

#[derive(Debug, Args)]
struct ValidateCmd {
    /// The models to validate (default: as selection chooses them, see --models)
    #[arg(long = "model", value_name = "DIR")]
    model: Option<PathBuf>,
    /// Problems the models never saw: driver lines or keys, one per line
    #[arg(long, value_name = "FILE")]
    problems: PathBuf,
    #[command(flatten)]
    select: ProblemChoice,
    /// The sweep CSV of these problems: every candidate's time (the oracle's too); rows
    /// missing from it are measured now, by the sweep
    #[arg(long, value_name = "FILE")]
    measured: PathBuf,
    /// Sweep CSVs the models were trained on: validation refuses a problem whose shape is in them
    #[arg(long, value_name = "CSV", num_args = 1..)]
    training: Vec<PathBuf>,
    /// Write the charts (PNG and SVG) into this folder
    #[arg(long, value_name = "DIR")]
    plots: Option<PathBuf>,
    /// Measure nothing: evaluate only the rows already in --measured
    #[arg(long = "no-measure")]
    no_measure: bool,
    /// As sweep's: the oracle is then the best of the configs measured
    #[arg(long = "configs-per-solver", value_parser = clap::value_parser!(u64).range(1..))]
    configs_per_solver: Option<u64>,
    #[arg(long = "timeout-s", default_value_t = 60.0)]
    timeout_s: f64,
    #[command(flatten)]
    find: FindArgs,
}

#[derive(Debug, Args)]
struct SweepCmd {
    /// Problems: driver lines or keys, one per line (`#` comments)
    #[arg(long, value_name = "FILE", required_unless_present = "worker")]
    problems: Option<PathBuf>,
    /// The CSV to write; rows already in it for this device are not measured again
    #[arg(long, value_name = "FILE", required_unless_present = "worker")]
    out: Option<PathBuf>,
    #[command(flatten)]
    select: ProblemChoice,
    /// Seconds a candidate may take (with its verification and samples) before its worker is
    /// stopped and the row recorded as failed; building a problem's kernels may take ten times
    /// as long
    #[arg(long = "timeout-s", default_value_t = 60.0)]
    timeout_s: f64,
    /// One worker per device, each seeing only its own (CUDA_VISIBLE_DEVICES), e.g. `0,1,2,3`;
    /// default: one worker per GPU this process sees
    #[arg(long, value_delimiter = ',')]
    devices: Vec<String>,
    /// Measure only this many configs of each solver's own space (the same ones on every
    /// problem where they are valid) and its default; a vendor library's list stays whole.
    /// For breadth over shapes where a space is too large to sweep whole
    #[arg(long = "configs-per-solver", value_parser = clap::value_parser!(u64).range(1..))]
    configs_per_solver: Option<u64>,
    #[command(flatten)]
    find: FindArgs,
    /// Run as a worker: measure the JSON batches read from standard input (the sweep starts
    /// its workers so)
    #[arg(long, hide = true)]
    worker: bool,
}

#[derive(Debug, Args)]
struct BenchCmd {
    /// Problems: driver lines or keys, one per line (`#` comments)
    #[arg(long, value_name = "FILE", required_unless_present = "summarize")]
    file: Option<PathBuf>,
    /// Print the summary of earlier runs from their --csv files instead of measuring
    #[arg(long, value_name = "CSV", num_args = 1.., conflicts_with = "file")]
    summarize: Vec<PathBuf>,
    #[command(flatten)]
    select: ProblemChoice,
    /// How gconv's pick is made
    #[arg(long = "find-mode", default_value = "dynamic-hybrid")]
    find_mode: FindMode,
    /// Samples per measurement (after one warm-up)
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..))]
    iter: u32,
    /// Also write one CSV row per problem to this file
    #[arg(long, value_name = "FILE")]
    csv: Option<PathBuf>,
    /// PyTorch's times of the same problems (bench/torch_conv.py's CSV): adds a column and a
    /// summary line
    #[arg(long = "torch-csv", value_name = "FILE")]
    torch_csv: Option<PathBuf>,
    /// Print the problem keys the bench would run, one per line, and stop (the input of
    /// bench/torch_conv.py)
    #[arg(long)]
    list: bool,
    #[command(flatten)]
    find: FindArgs,
    #[command(flatten)]
    db: DbArgs,
}

#[derive(Debug, Args)]
struct PrecompileCmd {
    #[command(flatten)]
    problems: ProblemArgs,
    /// Parallel builds [default: one per core]
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    threads: Option<u32>,
    #[command(flatten)]
    only: tuning::OwnSolvers,
    #[command(flatten)]
    db: DbArgs,
}

#[derive(Debug, Args)]
struct ExplainCmd {
    #[command(flatten)]
    problems: ProblemArgs,
    /// Also list every config of each applicable solver, with what the solver says of it
    #[arg(long)]
    configs: bool,
}

/// Problems by key, by driver flags, or from a file.
#[derive(Debug, Args)]
struct ProblemArgs {
    /// A problem key (`v1:...`, as printed by `gconv conv`); otherwise the driver flags apply
    key: Option<String>,
    /// A file of driver lines or keys, one per line (`#` comments)
    #[arg(long, value_name = "FILE")]
    file: Option<PathBuf>,
    /// Data type of problems given by driver flags (a file's command words override it)
    #[arg(long, default_value = "f32", value_parser = ["f32", "f16", "bf16", "tf32"])]
    dtype: String,
    #[command(flatten)]
    driver: DriverArgs,
}

#[derive(Debug, Args)]
struct DbArgs {
    /// The user database (default: gconv/user.db under the user's cache directory)
    #[arg(long, value_name = "PATH", global = true)]
    db: Option<PathBuf>,
}

#[derive(Debug, Args)]
struct FindArgs {
    /// Largest workspace a candidate may use, in MiB
    #[arg(long = "workspace-limit-mib", default_value_t = 4096)]
    workspace_limit_mib: u64,
    /// Samples per candidate
    #[arg(long = "find-iter", default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..))]
    find_iter: u32,
}

impl FindArgs {
    fn options(&self, timing: TimingOptions) -> FindOptions {
        FindOptions {
            workspace_limit: self.workspace_limit_mib.saturating_mul(1 << 20),
            samples: self.find_iter,
            timing,
            ..FindOptions::default()
        }
    }
}

#[derive(Debug, Args)]
struct ConvCmd {
    #[command(flatten)]
    driver: DriverArgs,
    #[command(flatten)]
    run: RunArgs,
    /// Print one JSON object per direction instead of text
    #[arg(long)]
    json: bool,
    /// Run a batch: one driver line (or key) per line (`#` comments); -V, -t, -i and -S given
    /// here apply to every line that does not set its own
    #[arg(long, value_name = "FILE")]
    file: Option<PathBuf>,
    /// How the solver is chosen when -S is not given: normal, fast, hybrid, dynamic-hybrid
    #[arg(long = "find-mode", default_value = "dynamic-hybrid")]
    find_mode: FindMode,
    #[command(flatten)]
    find: FindArgs,
    #[command(flatten)]
    db: DbArgs,
}

#[derive(Debug, Args)]
struct FindCmd {
    #[command(flatten)]
    problems: ProblemArgs,
    #[command(flatten)]
    find: FindArgs,
    #[command(flatten)]
    db: DbArgs,
    /// Print one JSON object per problem
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
struct TuneCmd {
    #[command(flatten)]
    problems: ProblemArgs,
    /// exhaustive: every config; random: a seeded sample limited by --budget-count/--budget-seconds;
    /// model: the learned model's --top-k fastest predicted configs of each solver
    #[arg(long, default_value = "exhaustive", value_parser = ["exhaustive", "random", "model"])]
    strategy: String,
    /// Configs per solver the model strategy times
    #[arg(long = "top-k", value_parser = clap::value_parser!(u64).range(1..))]
    top_k: Option<u64>,
    /// Configs per solver (random)
    #[arg(long = "budget-count", value_parser = clap::value_parser!(u64).range(1..))]
    budget_count: Option<u64>,
    /// Seconds per solver (random)
    #[arg(long = "budget-seconds")]
    budget_seconds: Option<f64>,
    /// Seed of the random strategy
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Search only this solver's space (repeatable; default: every tunable solver)
    #[arg(long = "solver", value_name = "ID")]
    solvers: Vec<String>,
    #[command(flatten)]
    find: FindArgs,
    #[command(flatten)]
    db: DbArgs,
}

#[derive(Debug, Args)]
struct SelectCmd {
    #[command(flatten)]
    problems: ProblemArgs,
    #[arg(long = "find-mode", default_value = "fast")]
    find_mode: FindMode,
    /// Timed selections per problem after one warm-up pass
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u32).range(1..))]
    repeat: u32,
    #[command(flatten)]
    find: FindArgs,
    #[command(flatten)]
    db: DbArgs,
}

#[derive(Debug, Args)]
struct DbCmd {
    #[command(subcommand)]
    action: DbAction,
    #[command(flatten)]
    db: DbArgs,
}

#[derive(Debug, Subcommand)]
enum DbAction {
    /// Record counts and devices
    Stats,
    /// Every record, readable
    Dump,
    /// Every perf and find record as JSON lines, or this device's timed candidates as
    /// training rows
    Export {
        /// JSON lines of perf and find records (the default)
        #[arg(long, conflicts_with = "rows")]
        jsonl: bool,
        /// Instead, a sweep CSV of every timed candidate of this device from finds and tuning,
        /// for `gconv train --append`
        #[arg(long, value_name = "CSV")]
        rows: Option<PathBuf>,
        /// Write to this file instead of standard output
        #[arg(short, long)]
        output: Option<PathBuf>,
    },
    /// Read JSON lines; imported records replace existing ones
    Import { file: PathBuf },
    /// Read JSON lines; on conflict the faster record wins
    Merge { file: PathBuf },
    /// Remove records whose solver, config or problem key this gconv no longer accepts
    Prune,
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) if !e.use_stderr() => {
            let _ = e.print();
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("error: {}", first_line(&e.to_string()));
            return ExitCode::from(2);
        }
    };
    match run(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// Opens the user db, reporting what opening it had to repair.
fn open_db(args: &DbArgs) -> anyhow::Result<Db> {
    let path = args.db.clone().unwrap_or_else(default_user_path);
    let (db, warning) = Db::open(&path).with_context(|| format!("cannot open the database {}", path.display()))?;
    print_warnings(warning.as_slice());
    Ok(db)
}

pub(crate) fn print_warnings(warnings: &[Warning]) {
    for w in warnings {
        eprintln!("warning: {w}");
    }
}

impl ProblemArgs {
    fn jobs(&self, tf32: bool) -> anyhow::Result<Vec<Job>> {
        let dtype: DataType = self.dtype.parse().map_err(anyhow::Error::msg)?;
        let jobs = match (&self.file, &self.key) {
            (Some(path), _) => jobs_from_file(path, dtype, &default_run_args()).map_err(anyhow::Error::msg)?,
            (None, Some(key)) => vec![(
                "command line".into(),
                ConvProblem::from_key(key).map(|p| (vec![p], default_run_args())).map_err(|e| e.to_string()),
            )],
            (None, None) => vec![("command line".into(), self.driver.problems(dtype).map(|p| (p, default_run_args())))],
        };
        Ok(allowing_tf32(jobs, tf32))
    }
}

/// Runs `body` on every problem of every job; bad jobs and failing problems are reported by
/// origin and make the exit code non-zero, the rest still run.
fn for_each_problem(jobs: Vec<Job>, mut body: impl FnMut(&ConvProblem, &RunArgs) -> anyhow::Result<bool>) -> ExitCode {
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

fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    let (rt, device_line) = runtimes::open(&cli.backend)?;
    let rt = rt.as_ref();
    let tf32 = cli.allow_tf32;
    let timing = TimingOptions { cold_cache: cli.cold_l2 };
    let models = cli.models.as_deref();
    match cli.command {
        Command::Conv(cmd) => conv(rt, &device_line, cmd, DataType::F32, tf32, timing, models),
        Command::Convfp16(cmd) => conv(rt, &device_line, cmd, DataType::F16, tf32, timing, models),
        Command::Convbfp16(cmd) => conv(rt, &device_line, cmd, DataType::Bf16, tf32, timing, models),
        Command::Explain(cmd) => {
            let jobs = cmd.problems.jobs(tf32)?;
            println!("device:    {device_line}\n");
            Ok(for_each_problem(jobs, |p, _| {
                explain::explain(rt, p, cmd.configs);
                Ok(true)
            }))
        }
        Command::Find(cmd) => {
            let mut db = open_db(&cmd.db)?;
            tuning::find(rt, &mut db, cmd.problems.jobs(tf32)?, &cmd.find.options(timing), cmd.json)
        }
        Command::Tune(cmd) => {
            let args = tuning::StrategyArgs {
                name: &cmd.strategy,
                count: cmd.budget_count,
                seconds: cmd.budget_seconds,
                seed: cmd.seed,
                top_k: cmd.top_k,
            };
            let strategy = tuning::strategy(rt, &args, models)?;
            let mut db = open_db(&cmd.db)?;
            let progress = std::io::stderr().is_terminal();
            let jobs = cmd.problems.jobs(tf32)?;
            tuning::tune(rt, &mut db, jobs, strategy.as_ref(), &cmd.solvers, &cmd.find.options(timing), progress)
        }
        Command::Select(cmd) => {
            let mut db = open_db(&cmd.db)?;
            let jobs = cmd.problems.jobs(tf32)?;
            let model = learn::heuristic(rt, models)?;
            tuning::select_bench(
                rt,
                &mut db,
                jobs,
                cmd.find_mode,
                &cmd.find.options(timing),
                cmd.repeat,
                model.as_ref(),
            )
        }
        Command::Bench(cmd) if !cmd.summarize.is_empty() => bench::summarize_csv(&cmd.summarize),
        Command::Bench(cmd) => {
            let (problems, parsed) =
                cmd.select.problems(cmd.file.as_deref().context("--file names the problems")?, tf32)?;
            if cmd.list {
                problems.iter().for_each(|p| println!("{}", p.key()));
                return Ok(parsed);
            }
            let model = learn::DeferredHeuristic::new(rt, models)?;
            let opts = bench::BenchOptions {
                mode: cmd.find_mode,
                model: Some(&model),
                find: FindOptions { samples: cmd.iter, ..cmd.find.options(timing) },
                csv: cmd.csv.clone(),
                torch: cmd.torch_csv.as_deref().map(bench::read_torch_csv).transpose()?,
            };
            let code = bench::bench(rt, &device_line, &mut open_db(&cmd.db)?, problems, &opts)?;
            Ok(if parsed == ExitCode::SUCCESS { code } else { parsed })
        }
        Command::Precompile(cmd) => {
            if rt.build_stats().is_none() {
                anyhow::bail!("precompile builds GPU kernels, and the device is {device_line}");
            }
            let mut db = open_db(&cmd.db)?;
            let threads = cmd.threads.map_or_else(gconv_tune::prebuild::build_threads, |n| n as usize);
            tuning::precompile(rt, &mut db, cmd.problems.jobs(tf32)?, &cmd.only, threads)
        }
        Command::Sweep(cmd) if cmd.worker => sweep::worker(rt, &cmd.find.options(timing)),
        Command::Sweep(cmd) => {
            let (file, out) = (cmd.problems.as_deref().expect("required"), cmd.out.clone().expect("required"));
            let (problems, parsed) = cmd.select.problems(file, tf32)?;
            let mut opts =
                sweep_options(&cli.backend, cli.cold_l2, out, cmd.find.options(timing), cmd.timeout_s, cmd.devices)?;
            opts.configs_per_solver = cmd.configs_per_solver.map(|n| n as usize);
            let code = sweep::sweep(rt, &device_line, &problems, &opts)?;
            Ok(if parsed == ExitCode::SUCCESS { code } else { parsed })
        }
        Command::Problems(cmd) => {
            anyhow::ensure!(
                cmd.max_gflop > 0.0 && cmd.max_melements > 0.0,
                "--max-gflop and --max-melements must be positive"
            );
            let limits = gconv_heuristic::problems::Limits {
                max_gflop: cmd.max_gflop,
                max_elements: (cmd.max_melements * 1e6) as u64,
            };
            learn::problems(&learn::ProblemsOptions {
                count: cmd.count,
                seed: cmd.seed,
                limits,
                valid_percent: cmd.valid_percent,
                train_out: cmd.train_out,
                valid_out: cmd.valid_out,
            })
        }
        Command::Train(cmd) => {
            anyhow::ensure!(
                cmd.trees > 0 && cmd.max_depth > 0 && cmd.learning_rate > 0.0,
                "--trees, --max-depth and --learning-rate must be positive"
            );
            let options = gconv_heuristic::train::TrainOptions {
                trees: cmd.trees,
                max_depth: cmd.max_depth,
                learning_rate: cmd.learning_rate,
                seed: 0,
            };
            learn::train_models(
                rt,
                &learn::TrainArgs { csv: cmd.csv, append: cmd.append, out: cmd.out, device: cmd.device, options },
            )
        }
        Command::Validate(cmd) => {
            let set = learn::models_for(rt, cmd.model.as_deref().or(models))?
                .context("no model for this device: name one with --model DIR")?;
            let (problems, parsed) = cmd.select.problems(&cmd.problems, tf32)?;
            if !cmd.no_measure {
                let mut opts = sweep_options(
                    &cli.backend,
                    cli.cold_l2,
                    cmd.measured.clone(),
                    cmd.find.options(timing),
                    cmd.timeout_s,
                    Vec::new(),
                )?;
                opts.configs_per_solver = cmd.configs_per_solver.map(|n| n as usize);
                sweep::sweep(rt, &device_line, &problems, &opts)?;
            }
            let args = learn::ValidateArgs {
                models: set,
                problems,
                measured: cmd.measured,
                training: cmd.training,
                plots: cmd.plots,
            };
            let code = learn::validate(&args)?;
            Ok(if parsed == ExitCode::SUCCESS { code } else { parsed })
        }
        Command::Check(cmd) => check::check(rt, &device_line, &cmd),
        Command::Net(cmd) => net::net(net::NetContext { rt, device_line: &device_line, timing, models }, cmd),
        Command::Db(DbCmd { action: DbAction::Export { rows: Some(path), .. }, db }) => {
            learn::export_rows(rt, &open_db(&db)?, &path)
        }
        Command::Db(cmd) => {
            let mut db = open_db(&cmd.db)?;
            // Each record is judged by the solvers of the runtime that owns its device key;
            // records of devices no runtime here owns are kept.
            let available = runtimes::all_available();
            let keep = |problem: &str, device: &str, solver: &str, config: &str| match available
                .iter()
                .find(|r| r.owns_device_key(device))
            {
                Some(owner) => tuning::usable(owner.as_ref(), problem, solver, config),
                None => true,
            };
            tuning::db(&mut db, cmd.action, &keep)
        }
    }
}

/// A sweep's options: its workers start with this process's backend and timing flags.
fn sweep_options(
    backend: &str,
    cold_l2: bool,
    out: PathBuf,
    find: FindOptions,
    timeout_s: f64,
    devices: Vec<String>,
) -> anyhow::Result<sweep::SweepOptions> {
    anyhow::ensure!(
        timeout_s.is_finite() && timeout_s > 0.0,
        "--timeout-s must be a positive number of seconds, got {timeout_s}"
    );
    let mut worker_flags = vec!["--backend".to_string(), backend.to_string()];
    if cold_l2 {
        worker_flags.push("--cold-l2".into());
    }
    Ok(sweep::SweepOptions {
        out,
        find,
        timeout: std::time::Duration::from_secs_f64(timeout_s),
        devices,
        configs_per_solver: None,
        worker_flags,
        progress: std::io::stderr().is_terminal(),
    })
}

fn conv(
    rt: &dyn Runtime,
    device_line: &str,
    cmd: ConvCmd,
    dtype: DataType,
    tf32: bool,
    timing: TimingOptions,
    models: Option<&std::path::Path>,
) -> anyhow::Result<ExitCode> {
    let mut db = open_db(&cmd.db)?;
    let model = learn::DeferredHeuristic::new(rt, models)?;
    let jobs = allowing_tf32(
        match &cmd.file {
            Some(path) => jobs_from_file(path, dtype, &cmd.run).map_err(anyhow::Error::msg)?,
            None => vec![("command line".into(), cmd.driver.problems(dtype).map(|p| (p, cmd.run.clone())))],
        },
        tf32,
    );
    if !cmd.json {
        println!("device:    {device_line}\n");
    }
    let opts = cmd.find.options(timing);
    Ok(for_each_problem(jobs, |p, run_args| {
        let report = run::run(rt, &mut db, p, run_args, cmd.find_mode, &opts, Some(&model))?;
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
