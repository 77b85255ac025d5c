//! `gconv net`: a network's convolutions tuned over dtype and layout knobs into a tuning JSON,
//! run from that JSON, reported from it, and precompiled.

use std::collections::HashMap;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use anyhow::Context;
use clap::{Args, Subcommand};
use gconv_core::{ConvProblem, DataType, Direction, Runtime, TimingOptions};
use gconv_net::format::{self, NetworkFormat};
use gconv_net::knobs::parse_format;
use gconv_net::run::{mismatch_reason, Mismatch, Origin};
use gconv_net::tune::{Method, NetTuneOptions, Phases, Progress};
use gconv_net::tuning::Choice;
use gconv_net::{Knobs, Network, TuningFile};
use gconv_tune::heuristic::Heuristic;
use indicatif::{ProgressBar, ProgressStyle};
use serde::{Deserialize, Serialize};

use crate::driver::{default_run_args, jobs_from_file};

#[derive(Debug, Subcommand)]
pub enum NetCmd {
    /// List the built-in networks
    List,
    /// Tune a network over the knobs; write the tuning JSON
    Tune(NetTuneArgs),
    /// Run a network's convolutions with a tuning JSON: no tuning, no find
    Run(NetRunArgs),
    /// Print a tuning JSON's per-layer table; chart per-layer time by setting
    Report(NetReportArgs),
    /// Build the GPU kernels the network's layers need in every setting, ahead of time
    Precompile(NetPrecompileArgs),
}

/// Which network.
#[derive(Debug, Args)]
pub struct NetArgs {
    /// A built-in network (`gconv net list`), a network file (`NAME <- SOURCES : KEY` lines),
    /// a file of driver lines (a chain, each layer feeding the next) or an ONNX model (.onnx)
    #[arg(required_unless_present = "onnx")]
    net: Option<String>,
    /// An ONNX model: its convolutions, shapes inferred where the file records none
    #[arg(long, conflicts_with = "net")]
    onnx: Option<PathBuf>,
    /// The batch size of every layer [default: the network's own; an ONNX model with a
    /// symbolic batch needs it]
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    batch: Option<u32>,
}

#[derive(Debug, Args)]
pub struct NetTuneArgs {
    #[command(flatten)]
    net: NetArgs,
    /// `dtype=f32,tf32,bf16,f16` and `layout=NCHW,NHWC`; every combination is a setting
    /// [default: dtype=f32 layout=NCHW,NHWC]
    #[arg(long = "knobs")]
    knobs: Vec<String>,
    /// Choose each layer's setting (dynamic programming over the layer graph, with the
    /// conversions between settings) instead of one for the whole network
    #[arg(long = "per-layer")]
    per_layer: bool,
    /// Directions, comma-separated: fwd, bwd-data, bwd-weight
    #[arg(long = "dir", value_delimiter = ',', default_value = "fwd")]
    directions: Vec<String>,
    /// How each layer's solution is chosen: find (benchmark every candidate), tune (search
    /// configs with --strategy, then find) or model (the learned model's --top-k candidates
    /// over every solver measured, the fastest kept: the quick way)
    #[arg(long = "by", default_value = "find", value_parser = ["find", "tune", "model"])]
    by: String,
    /// With --by tune: exhaustive, or model (the model's --top-k configs per tunable solver)
    #[arg(long, default_value = "model", value_parser = ["exhaustive", "model"])]
    strategy: String,
    /// Candidates the model picks to measure: per problem with --by model, per tunable solver
    /// with --by tune --strategy model
    #[arg(long = "top-k", default_value_t = 4, value_parser = clap::value_parser!(u64).range(1..))]
    top_k: u64,
    /// The format the network's input arrives in and its output leaves in
    #[arg(long, default_value = "f32/NCHW")]
    io: String,
    /// Skip measuring low-precision layers' error against fp32
    #[arg(long = "no-errors")]
    no_errors: bool,
    /// Where to write the tuning JSON
    #[arg(long, short = 'o', default_value = "tuning.json")]
    out: PathBuf,
    /// CUDA_VISIBLE_DEVICES of each worker process, comma-separated (`0,1,2,3`): the problems
    /// are shared among them and one JSON is merged [default: one worker per GPU seen]
    #[arg(long, value_delimiter = ',')]
    devices: Vec<String>,
    /// A worker's share, I/W, for the process that started it
    #[arg(long = "worker-part", hide = true)]
    worker_part: Option<String>,
    #[command(flatten)]
    find: super::FindArgs,
    #[command(flatten)]
    db: super::DbArgs,
}

#[derive(Debug, Args)]
pub struct NetRunArgs {
    #[command(flatten)]
    net: NetArgs,
    /// The tuning JSON `gconv net tune` wrote
    #[arg(long)]
    tuning: PathBuf,
    /// Use a file made for another network or device where its layer problems match (the
    /// rest picked in fast mode, with no find) instead of refusing it
    #[arg(long = "layer-by-layer")]
    layer_by_layer: bool,
    /// Warm iterations after the first
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..))]
    iter: u32,
    #[command(flatten)]
    db: super::DbArgs,
}

#[derive(Debug, Args)]
pub struct NetReportArgs {
    tuning: PathBuf,
    /// Write the chart (PNG and SVG) into this folder
    #[arg(long)]
    plots: Option<PathBuf>,
    /// Print only the problem keys the file timed and their channels-last twins, one per
    /// line (the input of bench/torch_conv.py)
    #[arg(long, conflicts_with_all = ["plots", "torch_csv"])]
    keys: bool,
    /// PyTorch's times of those keys (bench/torch_conv.py's CSV): each setting's total and the
    /// winner's layers against PyTorch's channels-last run of the same layers in the same dtype
    #[arg(long = "torch-csv")]
    torch_csv: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct NetPrecompileArgs {
    #[command(flatten)]
    net: NetArgs,
    #[arg(long = "knobs")]
    knobs: Vec<String>,
    #[arg(long = "dir", value_delimiter = ',', default_value = "fwd")]
    directions: Vec<String>,
    #[command(flatten)]
    only: crate::tuning::OwnSolvers,
    #[command(flatten)]
    db: super::DbArgs,
}

impl NetArgs {
    fn network(&self) -> anyhow::Result<Network> {
        Ok(match (&self.onnx, &self.net) {
            (Some(path), _) => format::read(&[onnx_format()], &path.to_string_lossy(), self.batch)?,
            (None, Some(spec)) => format::read(&formats(), spec, self.batch)?,
            (None, None) => anyhow::bail!("name a network: a built-in one, a file, or --onnx FILE"),
        })
    }
}

/// Every format `gconv net` reads, in the order they are tried.
fn formats() -> [&'static dyn NetworkFormat; 4] {
    [&format::Builtin, onnx_format(), &format::NetworkFile, &DriverLines]
}

#[cfg(feature = "onnx")]
fn onnx_format() -> &'static dyn NetworkFormat {
    &gconv_onnx::Onnx
}

#[cfg(not(feature = "onnx"))]
fn onnx_format() -> &'static dyn NetworkFormat {
    &NoOnnx
}

/// `.onnx` files in a gconv built without ONNX import: claimed, to say so.
#[cfg(not(feature = "onnx"))]
struct NoOnnx;

#[cfg(not(feature = "onnx"))]
impl NetworkFormat for NoOnnx {
    fn name(&self) -> &'static str {
        "an ONNX model (.onnx)"
    }

    fn claims(&self, spec: &str) -> bool {
        Path::new(spec).extension().is_some_and(|e| e.eq_ignore_ascii_case("onnx"))
    }

    fn read(&self, spec: &str, _batch: Option<u32>) -> gconv_net::Result<Network> {
        let reason =
            "this gconv was built without ONNX import (cargo feature `onnx`); give a network file or driver lines";
        Err(gconv_net::Error::BadNetwork { origin: spec.to_string(), line: 0, reason: reason.into() })
    }
}

/// A file of driver lines (or keys): a chain, each line's forward shape feeding the next.
struct DriverLines;

impl NetworkFormat for DriverLines {
    fn name(&self) -> &'static str {
        "a file of driver lines"
    }

    fn claims(&self, spec: &str) -> bool {
        Path::new(spec).is_file()
    }

    fn read(&self, spec: &str, _batch: Option<u32>) -> gconv_net::Result<Network> {
        let bad = |reason: String| gconv_net::Error::BadNetwork { origin: spec.to_string(), line: 0, reason };
        let mut shapes: Vec<ConvProblem> = Vec::new();
        for (origin, job) in jobs_from_file(Path::new(spec), DataType::F32, &default_run_args()).map_err(bad)? {
            let (problems, _) = job.map_err(|e| bad(format!("{origin}: {e}")))?;
            shapes.push(problems.first().ok_or_else(|| bad(format!("{origin}: no problem")))?.clone());
        }
        Network::chain(&format::stem(spec), &shapes)
    }
}

fn directions(tokens: &[String]) -> anyhow::Result<Vec<Direction>> {
    let mut out: Vec<Direction> = Vec::new();
    for t in tokens {
        let d: Direction = t.parse().map_err(|e: String| anyhow::anyhow!("--dir: {e}"))?;
        if !out.contains(&d) {
            out.push(d);
        }
    }
    anyhow::ensure!(!out.is_empty(), "--dir names no direction");
    Ok(out)
}

pub struct NetContext<'a> {
    pub rt: &'a dyn Runtime,
    pub device_line: &'a str,
    pub timing: TimingOptions,
    pub models: Option<&'a Path>,
}

pub fn net(ctx: NetContext<'_>, cmd: NetCmd) -> anyhow::Result<ExitCode> {
    match cmd {
        NetCmd::List => {
            for name in Network::builtin_names() {
                let net = Network::builtin(name).expect("listed")?;
                println!("{name:18} {:3} convolutions, {:2} distinct shapes", net.layers.len(), net.distinct().len());
            }
            Ok(ExitCode::SUCCESS)
        }
        NetCmd::Report(args) => {
            let file = TuningFile::read(&args.tuning)?;
            if args.keys {
                file.comparison_keys().iter().for_each(|k| println!("{k}"));
                return Ok(ExitCode::SUCCESS);
            }
            let torch = args.torch_csv.as_deref().map(crate::bench::read_torch_csv).transpose()?;
            report(&file, args.plots.as_deref(), torch.as_ref())
        }
        NetCmd::Tune(args) => tune(&ctx, args),
        NetCmd::Run(args) => run(&ctx, args),
        NetCmd::Precompile(args) => {
            anyhow::ensure!(
                ctx.rt.build_stats().is_some(),
                "precompile builds GPU kernels, and the device is {}",
                ctx.device_line
            );
            let net = args.net.network()?;
            let settings = Knobs::parse(&args.knobs)?.settings();
            let (distinct, mut problems) = (net.distinct(), Vec::new());
            for direction in directions(&args.directions)? {
                for &format in &settings {
                    problems.extend(distinct.iter().map(|(shape, _)| ConvProblem {
                        direction,
                        dtype: format.dtype,
                        layout: format.layout,
                        ..shape.clone()
                    }));
                }
            }
            println!("device:    {}", ctx.device_line);
            println!(
                "network:   {} ({} layers, {} problems in {} settings)",
                net.name,
                net.layers.len(),
                problems.len(),
                settings.len()
            );
            let jobs = vec![(net.name.clone(), Ok((problems, default_run_args())))];
            crate::tuning::precompile(
                ctx.rt,
                &mut super::open_db(&args.db)?,
                jobs,
                &args.only,
                gconv_tune::prebuild::build_threads(),
            )
        }
    }
}

fn tune(ctx: &NetContext<'_>, args: NetTuneArgs) -> anyhow::Result<ExitCode> {
    let net = args.net.network()?;
    let mut db = super::open_db(&args.db)?;
    let model = crate::learn::heuristic(ctx.rt, ctx.models)?;
    let strategy = match args.by.as_str() {
        "tune" => {
            let top_k = (args.strategy == "model").then_some(args.top_k);
            let a = crate::tuning::StrategyArgs { name: &args.strategy, count: None, seconds: None, seed: 0, top_k };
            Some(crate::tuning::strategy(ctx.rt, &a, ctx.models)?)
        }
        _ => None,
    };
    let settings = Knobs::parse(&args.knobs)?.settings();
    let io = parse_format(&args.io)
        .with_context(|| format!("--io `{}`: expected DTYPE/LAYOUT such as f32/NCHW", args.io))?;
    let method = match args.by.as_str() {
        "tune" => Method::Tune(strategy.as_deref().expect("made above for --by tune")),
        "model" => Method::Model { top_k: args.top_k as usize },
        _ => Method::Find,
    };
    let opts = NetTuneOptions {
        settings,
        directions: directions(&args.directions)?,
        io,
        per_layer: args.per_layer,
        method,
        find: args.find.options(ctx.timing),
        heuristic: model.as_ref().map(|m| m as &dyn Heuristic),
        errors: !args.no_errors,
    };
    let started = Instant::now();
    let problems = gconv_net::tune::problems(&net, &opts);
    if let Some(part) = &args.worker_part {
        return tune_worker(ctx.rt, &mut db, &problems, &opts, part);
    }
    println!("device:    {}", ctx.device_line);
    println!(
        "network:   {} ({} layers, {} distinct shapes, batch {})",
        net.name,
        net.layers.len(),
        net.distinct().len(),
        net.batch()
    );
    let settings: Vec<String> = opts.settings.iter().map(|s| s.to_string()).collect();
    println!("tuning:    by {} over {}, directions {:?}", opts.method.label(), settings.join(", "), args.directions);
    let devices = if args.devices.is_empty() { ctx.rt.worker_devices() } else { args.devices.clone() };
    anyhow::ensure!(
        args.devices.is_empty() || !ctx.rt.worker_devices().is_empty(),
        "--devices shares the tuning among GPUs, and the device is {}",
        ctx.device_line
    );
    let distinct: std::collections::HashSet<&String> = devices.iter().collect();
    anyhow::ensure!(
        distinct.len() == devices.len(),
        "--devices names a GPU twice; each worker needs one of its own for honest timings"
    );
    let (choices, phases) = if devices.len() > 1 {
        println!("workers:   one per device, CUDA_VISIBLE_DEVICES {}", devices.join(" / "));
        tune_on_workers(&devices, problems.len())?
    } else {
        let bar = ProgressBar::new(0);
        match std::io::stderr().is_terminal() {
            true => bar.set_style(
                ProgressStyle::with_template("[{bar:30}] {pos}/{len} problems, {elapsed}, ETA {eta}  {msg}")
                    .expect("valid template")
                    .progress_chars("=> "),
            ),
            false => bar.set_draw_target(indicatif::ProgressDrawTarget::hidden()),
        }
        let measured = gconv_net::tune::measure_problems(ctx.rt, &mut db, &problems, &opts, &mut |p: Progress<'_>| {
            bar.set_length(p.total as u64);
            bar.set_position(p.done as u64);
            bar.set_message(p.problem.key());
        })?;
        bar.finish_and_clear();
        measured
    };
    let file = gconv_net::tune::assemble(ctx.rt, &net, &opts, choices, phases, started)?;
    file.write(&args.out)?;
    report(&file, None, None)?;
    let phases: Vec<String> = file.phases.iter().map(|(phase, s)| format!("{phase} {s:.1} s")).collect();
    println!("written:   {} (tuned in {:.1} s: {})", args.out.display(), file.tuning_s, phases.join(", "));
    Ok(ExitCode::SUCCESS)
}

/// What a worker prints: its share's choices by problem index, and its phases.
#[derive(Serialize, Deserialize)]
struct WorkerShare {
    choices: Vec<(usize, Choice)>,
    phases: Phases,
}

/// `net tune --worker-part I/W`: the problems whose index is I modulo W, measured here, the
/// choices printed as one JSON line for the process that started this one.
fn tune_worker(
    rt: &dyn Runtime,
    db: &mut gconv_tune::db::Db,
    problems: &[ConvProblem],
    opts: &NetTuneOptions<'_>,
    part: &str,
) -> anyhow::Result<ExitCode> {
    let parsed = part.split_once('/').and_then(|(i, w)| Some((i.parse::<usize>().ok()?, w.parse::<usize>().ok()?)));
    let (index, workers) =
        parsed.filter(|(i, w)| i < w).with_context(|| format!("--worker-part `{part}`: expected I/W with I < W"))?;
    let mine: Vec<usize> = (index..problems.len()).step_by(workers).collect();
    let share: Vec<ConvProblem> = mine.iter().map(|&i| problems[i].clone()).collect();
    let (choices, phases) = gconv_net::tune::measure_problems(rt, db, &share, opts, &mut |_| {})?;
    let line = serde_json::to_string(&WorkerShare { choices: mine.into_iter().zip(choices).collect(), phases })?;
    println!("{line}");
    Ok(ExitCode::SUCCESS)
}

/// This command again, once per device, each process seeing only its own GPU and measuring
/// every W-th problem; their choices merged in the problems' order, their phases summed.
fn tune_on_workers(devices: &[String], problems: usize) -> anyhow::Result<(Vec<Choice>, Phases)> {
    let exe = std::env::current_exe().context("cannot find the gconv binary to start tuning workers")?;
    let mut children = Vec::new();
    for (i, device) in devices.iter().enumerate() {
        let child = std::process::Command::new(&exe)
            .args(std::env::args_os().skip(1))
            .args(["--worker-part", &format!("{i}/{}", devices.len())])
            .env("CUDA_VISIBLE_DEVICES", device)
            .stdout(std::process::Stdio::piped())
            .spawn()
            .with_context(|| format!("cannot start the tuning worker for device {device}"))?;
        children.push((device, child));
    }
    let mut merged: Vec<Option<Choice>> = vec![None; problems];
    let mut phases = Phases::default();
    let mut failures = Vec::new();
    for (device, child) in children {
        let output =
            child.wait_with_output().with_context(|| format!("the tuning worker for device {device} was lost"))?;
        // The share is the worker's last line; anything a library printed before it is not.
        let last =
            String::from_utf8_lossy(&output.stdout).lines().rev().find(|l| !l.trim().is_empty()).map(str::to_string);
        let share =
            last.filter(|_| output.status.success()).and_then(|line| serde_json::from_str::<WorkerShare>(&line).ok());
        match share {
            Some(share) => {
                phases.add(&share.phases);
                share.choices.into_iter().filter(|(i, _)| *i < problems).for_each(|(i, c)| merged[i] = Some(c));
            }
            None => failures.push(format!("device {device}: {}", output.status)),
        }
    }
    anyhow::ensure!(failures.is_empty(), "tuning workers failed ({}); their errors are above", failures.join("; "));
    let choices: Option<Vec<Choice>> = merged.into_iter().collect();
    Ok((choices.context("the workers left problems unmeasured")?, phases))
}

fn run(ctx: &NetContext<'_>, args: NetRunArgs) -> anyhow::Result<ExitCode> {
    let net = args.net.network()?;
    let mut db = super::open_db(&args.db)?;
    let model = crate::learn::heuristic(ctx.rt, ctx.models)?;
    let file = TuningFile::read(&args.tuning)?;
    let mismatch = if args.layer_by_layer { Mismatch::LayerByLayer } else { Mismatch::Refuse };
    println!("device:    {}", ctx.device_line);
    let planned =
        gconv_net::run::plan(ctx.rt, &mut db, &net, &file, mismatch, model.as_ref().map(|m| m as &dyn Heuristic))
            .with_context(|| args.tuning.display().to_string())?;
    if let Some(reason) = mismatch_reason(&file, &net, ctx.rt.device_key()) {
        println!("note:      {reason}; using its choices layer by layer");
    }
    let report = gconv_net::run::run(ctx.rt, &file, planned, args.iter)?;
    let fast: Vec<_> = report
        .planned
        .iter()
        .filter_map(|p| match &p.origin {
            Origin::Fast(reason) => Some((p, reason)),
            Origin::Tuned => None,
        })
        .collect();
    println!(
        "network:   {} ({} layer problems, {} from the tuning file, {} picked in fast mode; no tuning, no find)",
        net.name,
        report.planned.len(),
        report.planned.len() - fast.len(),
        fast.len()
    );
    for (p, reason) in fast.iter().take(10) {
        println!("  fast:    {} -> {} ({reason})", p.problem.key(), p.solver);
    }
    println!("prepare:         {:.2} ms wall (kernels built or loaded, vendor plans made, workspaces allocated, one run of each layer)", report.prepare_ms);
    if let Some(b) = report.builds {
        println!(
            "builds:          {} compiled ({:.0} ms of NVRTC), {} from the disk cache, {} shared",
            b.builds, b.build_ms, b.disk_hits, b.memory_hits
        );
    }
    println!("first iteration: {:.3} ms wall (every layer enqueued back to back, one wait)", report.first_ms);
    println!("warm iteration:  {:.3} ms wall, median of {}", report.warm_ms, args.iter);
    println!(
        "first / warm:    {:.2}x (prepare and first iteration together: {:.2}x of warm)",
        report.first_ms / report.warm_ms,
        (report.prepare_ms + report.first_ms) / report.warm_ms
    );
    println!(
        "tuned time:      {:.3} ms (the file's measured per-layer times of these choices, summed; conversions apart)",
        report.tuned_ms
    );
    Ok(ExitCode::SUCCESS)
}

fn report(file: &TuningFile, plots: Option<&Path>, torch: Option<&HashMap<String, f64>>) -> anyhow::Result<ExitCode> {
    println!(
        "network:   {} (batch {}, {} layers), device {}, gconv {}",
        file.network.name,
        file.network.batch,
        file.network.layers.len(),
        file.device,
        file.gconv_version
    );
    println!(
        "tuned:     by {}, directions {}, io {}, {:.1} s",
        file.method,
        file.directions.join(","),
        file.io,
        file.tuning_s
    );
    println!();
    let ms = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.3}"));
    let torch_ms = |key: &str| torch.and_then(|t| t.get(key).copied());
    let torch_settings = file.settings_by(torch_ms);
    let torch_column =
        if torch.is_some() { format!(" {:>12} {:>8}", "PyTorch ms", "vs PyTorch") } else { String::new() };
    println!("  {:12} {:>12} {:>14} {:>12}{torch_column}", "setting", "layers ms", "conversions ms", "total ms");
    for (s, torch_layers) in file.settings.iter().zip(&torch_settings) {
        let versus = match (torch, s.layers_ms, torch_layers) {
            (None, ..) => String::new(),
            (Some(_), Some(own), Some(t)) => format!(" {t:>12.3} {:>7.2}x", own / t),
            (Some(_), ..) => format!(" {:>12} {:>8}", ms(*torch_layers), "-"),
        };
        println!(
            "  {:12} {:>12} {:>14.3} {:>12}{versus}",
            s.setting,
            ms(s.layers_ms),
            s.conversions_ms,
            ms(s.total_ms)
        );
    }
    let winner = &file.winner;
    match (&winner.setting, winner.per_layer) {
        (Some(s), _) => println!("\nwinner:    {s} for the whole network, {:.3} ms", winner.total_ms),
        (None, _) => println!("\nwinner:    per layer, {:.3} ms", winner.total_ms),
    }
    if torch.is_some() {
        match (file.winner_layers_ms(), file.winner_channels_last_by(torch_ms)) {
            (Some(own), Some(t)) => println!(
                "vs PyTorch: winner's layers {own:.3} ms (with conversions {:.3} ms), PyTorch channels-last in the same dtypes {t:.3} ms: {:.2}x ({:.2}x with conversions)",
                winner.total_ms,
                own / t,
                winner.total_ms / t
            ),
            _ => println!("vs PyTorch: not every winner layer has both times (see the table)"),
        }
    }
    println!();
    println!("  {:28} {:10} {:11} {:>10} {:>10}  solver config", "layer", "setting", "direction", "ms", "error");
    for layer in &winner.layers {
        for c in &layer.choices {
            let ms = c.ms.map_or("-".into(), |v| format!("{v:.4}"));
            let error = c.error.map_or("-".into(), |e| format!("{e:.1e}"));
            let pick = match (&c.solver, &c.config) {
                (Some(s), Some(cfg)) => format!("{s} {cfg}"),
                _ => c.failure.clone().unwrap_or_default(),
            };
            println!("  {:28} {:10} {:11} {ms:>10} {error:>10}  {pick}", layer.name, layer.setting, c.direction);
        }
    }
    if let Some(dir) = plots {
        for path in crate::plots::network(file, dir)? {
            println!("plot:      {}", path.display());
        }
    }
    Ok(ExitCode::SUCCESS)
}
