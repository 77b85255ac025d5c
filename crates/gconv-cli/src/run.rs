//! `gconv conv`: select a solver (by find mode, or forced), run it, time it, verify it. A find
//! the selection runs and the run itself share one set of data and one reference.

use gconv_core::verify::Verification;
use gconv_core::{BuildStats, ConvProblem, Runtime};
use gconv_tune::db::{Db, Warning};
use gconv_tune::find::{FindOptions, TestBed};
use gconv_tune::heuristic::Heuristic;
use gconv_tune::measure::{evaluate, Sampling};
use gconv_tune::select::{forced, forced_with_config, select, FindMode};
use serde::Serialize;

use crate::driver::RunArgs;

#[derive(Debug, Serialize)]
pub struct Report {
    pub device: String,
    pub direction: String,
    pub key: String,
    pub problem: String,
    pub solver: String,
    /// `gconv kernel`, `vendor: cuDNN`, ...
    pub solver_kind: String,
    pub config: String,
    /// `default`, `tuned (perf-db)` or `found by find`.
    pub config_origin: &'static str,
    /// How the solver was chosen: `forced (-S)`, or the find mode and its source.
    pub selection: String,
    pub workspace_bytes: u64,
    /// GPU (or CPU) time per call, ms: the median of `samples` samples.
    pub time_ms: Option<f64>,
    pub samples: Option<u32>,
    /// Back-to-back calls in each sample.
    pub calls_per_sample: Option<u32>,
    /// `graph replay, warm L2` and the like.
    pub timing: Option<String>,
    pub tflops: Option<f64>,
    pub gbps: Option<f64>,
    pub verify: Option<Verification>,
    /// Kernel builds of the process so far (GPU only).
    pub build: Option<BuildStats>,
    /// Stored records selection could not use (printed to standard error).
    #[serde(skip)]
    pub warnings: Vec<Warning>,
}

pub fn run(
    rt: &dyn Runtime,
    db: &mut Db,
    p: &ConvProblem,
    args: &RunArgs,
    mode: FindMode,
    opts: &FindOptions,
    model: Option<&dyn Heuristic>,
) -> anyhow::Result<Report> {
    let mut bed = TestBed::new(rt, p);
    let (selection, how) = match (&args.solution, &args.config) {
        (Some(id), Some(config)) => (forced_with_config(rt, p, id, config)?, "forced (-S, --config)".to_string()),
        (Some(id), None) => (forced(rt, db, p, id)?, "forced (-S)".to_string()),
        (None, Some(config)) => anyhow::bail!("--config {config} needs -S, the solver whose config it is"),
        (None, None) => {
            let s = select(rt, db, &mut bed, p, mode, opts, model)?;
            let how = format!("{mode}: {}", s.source.label());
            (s, how)
        }
    };
    let solution = &selection.solution;
    let samples = if args.time == 1 { args.iter } else { 0 };
    let check = args.verify == 1;
    let e = evaluate(bed.workload(check)?, solution, check, Sampling { samples, best_ms: None, options: opts.timing })?;
    let ms = e.timing.map(|t| t.ms);
    Ok(Report {
        device: rt.device_key().to_string(),
        direction: p.direction.to_string(),
        key: p.key(),
        problem: p.summary(),
        solver: solution.solver_id.to_string(),
        solver_kind: rt.solver(solution.solver_id)?.kind().label(),
        config: solution.config.to_string(),
        config_origin: selection.origin.label(),
        selection: how,
        workspace_bytes: solution.workspace_bytes,
        time_ms: ms,
        samples: e.timing.map(|t| t.samples),
        calls_per_sample: e.timing.map(|t| t.calls),
        timing: e.timing.map(|t| format!("{}, {}", t.method.label(), opts.timing.label())),
        tflops: ms.map(|ms| p.flops() / (ms * 1e-3) / 1e12),
        gbps: ms.map(|ms| p.bytes() / (ms * 1e-3) / 1e9),
        verify: e.verification,
        build: rt.build_stats(),
        warnings: selection.warnings.clone(),
    })
}

impl Report {
    pub fn print_text(&self) {
        println!("problem:   {}", self.problem);
        println!("key:       {}", self.key);
        println!(
            "solver:    {} ({}; config {}, {}; workspace {} B; picked by {})",
            self.solver, self.solver_kind, self.config, self.config_origin, self.workspace_bytes, self.selection
        );
        if let (Some(ms), Some(samples), Some(calls), Some(timing), Some(tflops), Some(gbps)) =
            (self.time_ms, self.samples, self.calls_per_sample, &self.timing, self.tflops, self.gbps)
        {
            println!(
                "time:      {ms:.4} ms per call (median of {samples} samples of {calls} back-to-back calls; {timing}), {:.1} GFLOP/s, {gbps:.2} GB/s",
                tflops * 1e3
            );
        }
        if let Some(v) = &self.verify {
            let verdict = if v.passed { "OK" } else { "FAILED" };
            println!(
                "verify:    max error {:.3e} vs tolerance {:.3e} (relative to max |reference|): {verdict}",
                v.max_error, v.tolerance
            );
        }
        println!();
    }

    pub fn failed_verification(&self) -> bool {
        self.verify.is_some_and(|v| !v.passed)
    }
}
