//! `gconv`: select, run, time, verify, find and tune grouped convolutions. This file is the
//! list of commands and the dispatch; each command is a file under `commands/`.

mod bench;
mod commands;
mod driver;
mod explain;
mod learn;
mod plots;
mod run;
mod runtimes;
mod sweep;
mod tuning;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use gconv_core::{DataType, TimingOptions};

use commands::{
    bench as bench_cmd, check, conv, db, explain as explain_cmd, find, net, precompile, problems, select,
    sweep as sweep_cmd, train, tune, validate, Context,
};
use driver::first_line;

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
    Conv(conv::ConvCmd),
    /// Run fp16 convolutions; flags as MIOpenDriver's `convfp16`
    #[command(allow_negative_numbers = true, args_override_self = true)]
    Convfp16(conv::ConvCmd),
    /// Run bf16 convolutions; flags as MIOpenDriver's `convbfp16`
    #[command(allow_negative_numbers = true, args_override_self = true)]
    Convbfp16(conv::ConvCmd),
    /// List every solver for a problem: applicable or why not, workspace, number of configs
    #[command(allow_negative_numbers = true, args_override_self = true)]
    Explain(explain_cmd::ExplainCmd),
    /// Benchmark every applicable solver, rank them, keep the ranking in the find-db
    #[command(allow_negative_numbers = true, args_override_self = true)]
    Find(find::FindCmd),
    /// Search tunable solvers' configs; keep winners in the perf-db (resumable)
    #[command(allow_negative_numbers = true, args_override_self = true)]
    Tune(tune::TuneCmd),
    /// Show the pick for each problem and how long selecting took (benchmark of selection)
    #[command(allow_negative_numbers = true, args_override_self = true)]
    Select(select::SelectCmd),
    /// gconv against the vendor library (cuDNN) on the GPU, layer by layer, beside the roofline
    /// bound and optionally PyTorch's times
    Bench(bench_cmd::BenchCmd),
    /// Build the GPU kernels of problems ahead of time, in parallel, without using the GPU
    #[command(allow_negative_numbers = true, args_override_self = true)]
    Precompile(precompile::PrecompileCmd),
    /// Measure every applicable solver x every config x every problem into a CSV (the learned
    /// heuristic's training data); resumable, each candidate isolated in a worker process
    Sweep(sweep_cmd::SweepCmd),
    /// Write a synthetic problem set covering real networks' layers, split by shape into
    /// training and validation files
    Problems(problems::ProblemsCmd),
    /// Train the heuristic's models (one per direction and dtype family) from sweep CSVs
    Train(train::TrainCmd),
    /// Measure the models' picks against the oracle on problems they never saw
    Validate(validate::ValidateCmd),
    /// Networks: tune a network's convolutions over dtype and layout knobs into a tuning JSON,
    /// run from it, report it
    #[command(subcommand)]
    Net(net::NetCmd),
    /// Check every solver against the reference on random problems from seeds (a stress run
    /// of the tests' check) or on given keys; failures print the seed and the problem's key
    Check(check::CheckCmd),
    /// Inspect and maintain the user database
    Db(db::DbCmd),
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

fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    let (rt, device_line) = runtimes::open(&cli.backend)?;
    let ctx = Context {
        rt: rt.as_ref(),
        device_line: &device_line,
        backend: &cli.backend,
        tf32: cli.allow_tf32,
        cold_l2: cli.cold_l2,
        timing: TimingOptions { cold_cache: cli.cold_l2 },
        models: cli.models.as_deref(),
    };
    match cli.command {
        Command::Conv(cmd) => conv::run(&ctx, cmd, DataType::F32),
        Command::Convfp16(cmd) => conv::run(&ctx, cmd, DataType::F16),
        Command::Convbfp16(cmd) => conv::run(&ctx, cmd, DataType::Bf16),
        Command::Explain(cmd) => explain_cmd::run(&ctx, cmd),
        Command::Find(cmd) => find::run(&ctx, cmd),
        Command::Tune(cmd) => tune::run(&ctx, cmd),
        Command::Select(cmd) => select::run(&ctx, cmd),
        Command::Bench(cmd) => bench_cmd::run(&ctx, cmd),
        Command::Precompile(cmd) => precompile::run(&ctx, cmd),
        Command::Sweep(cmd) => sweep_cmd::run(&ctx, cmd),
        Command::Problems(cmd) => problems::run(cmd),
        Command::Train(cmd) => train::run(&ctx, cmd),
        Command::Validate(cmd) => validate::run(&ctx, cmd),
        Command::Check(cmd) => check::check(ctx.rt, ctx.device_line, &cmd),
        Command::Net(cmd) => net::net(
            net::NetContext { rt: ctx.rt, device_line: ctx.device_line, timing: ctx.timing, models: ctx.models },
            cmd,
        ),
        Command::Db(cmd) => db::run(&ctx, cmd),
    }
}
