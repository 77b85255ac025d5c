//! `gconv`: run, time, verify and explain grouped convolutions.

mod driver;
mod explain;
mod run;

use std::io::Write;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Args, Parser, Subcommand};
use gconv_core::{ConvProblem, DataType};
use gconv_cpu::{registry, CpuDevice};

use driver::{first_line, parse_line, DriverArgs, RunArgs};
use run::{Report, Session};

#[derive(Debug, Parser)]
#[command(name = "gconv", version, about = "Grouped convolutions: pick, run, time and verify the fastest solver")]
struct Cli {
    #[command(subcommand)]
    command: Command,
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
    /// Run a batch: one driver line per line (`#` starts a comment); each line's own flags apply
    #[arg(long, value_name = "FILE")]
    file: Option<std::path::PathBuf>,
    /// Largest workspace a picked solver may use, in MiB
    #[arg(long = "workspace-limit-mib", default_value_t = 4096)]
    workspace_limit_mib: u64,
}

#[derive(Debug, Args)]
struct ExplainCmd {
    /// A problem key (`v1:...`, as printed by `gconv conv`); otherwise the driver flags apply
    key: Option<String>,
    /// Data type when the problem is given by driver flags
    #[arg(long, default_value = "f32", value_parser = ["f32", "f16", "bf16"])]
    dtype: String,
    #[command(flatten)]
    driver: DriverArgs,
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

fn session(workspace_limit_mib: u64) -> Session {
    let device = CpuDevice::detect();
    Session { registry: registry(&device), device, workspace_limit: workspace_limit_mib.saturating_mul(1 << 20) }
}

fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Conv(cmd) => conv(cmd, DataType::F32),
        Command::Convfp16(cmd) => conv(cmd, DataType::F16),
        Command::Convbfp16(cmd) => conv(cmd, DataType::Bf16),
        Command::Explain(cmd) => {
            let problems = match &cmd.key {
                Some(key) => vec![ConvProblem::from_key(key)?],
                None => cmd.driver.problems(cmd.dtype.parse().map_err(anyhow::Error::msg)?).map_err(anyhow::Error::msg)?,
            };
            explain::explain(&session(0).registry, &problems);
            Ok(ExitCode::SUCCESS)
        }
    }
}

fn conv(cmd: ConvCmd, dtype: DataType) -> anyhow::Result<ExitCode> {
    let session = session(cmd.workspace_limit_mib);
    let jobs: Vec<(String, anyhow::Result<(Vec<ConvProblem>, RunArgs)>)> = match &cmd.file {
        None => vec![("command line".into(), cmd.driver.problems(dtype).map(|p| (p, cmd.run.clone())).map_err(anyhow::Error::msg))],
        Some(path) => {
            let text = std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
            text.lines()
                .enumerate()
                .map(|(i, line)| (i + 1, line.split('#').next().unwrap_or_default().trim()))
                .filter(|(_, line)| !line.is_empty())
                .map(|(number, line)| {
                    let job = parse_line(line, dtype).and_then(|(dtype, parsed)| {
                        parsed.driver.problems(dtype).map(|p| (p, parsed.run))
                    });
                    (format!("{}:{number}", path.display()), job.map_err(anyhow::Error::msg))
                })
                .collect()
        }
    };
    if !cmd.json {
        println!("device:    {} ({}, {} threads)\n", session.device.model, session.device.simd, session.device.threads);
    }
    let mut failures = 0;
    for (origin, job) in jobs {
        let outcome = job.and_then(|(problems, run_args)| {
            problems.iter().try_for_each(|p| {
                let report = session.run(p, &run_args).with_context(|| p.key())?;
                emit(&report, cmd.json)?;
                if report.failed_verification() {
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
    Ok(if failures == 0 { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

fn emit(report: &Report, json: bool) -> anyhow::Result<()> {
    if json {
        let mut out = std::io::stdout().lock();
        serde_json::to_writer(&mut out, report)?;
        writeln!(out)?;
    } else {
        report.print_text();
    }
    Ok(())
}
