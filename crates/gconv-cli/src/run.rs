//! `gconv conv`: select a solver (by find mode, or forced), run it, time it, verify it.

use gconv_core::verify::Verification;
use gconv_core::{ConvProblem, ConvTensors, Solution};
use gconv_tune::db::Db;
use gconv_tune::find::{FindOptions, DATA_SEED};
use gconv_tune::measure::{evaluate, TimingPlan};
use gconv_tune::select::{select, FindMode};
use gconv_core::BuildStats;
use gconv_tune::target::Target;
use serde::Serialize;

use crate::driver::RunArgs;

#[derive(Debug, Serialize)]
pub struct Report {
    pub device: String,
    pub direction: String,
    pub key: String,
    pub problem: String,
    pub solver: String,
    pub config: String,
    /// `default` or `tuned (perf-db)`.
    pub config_origin: &'static str,
    /// How the solver was chosen: `forced (-S)`, or the find mode and its source.
    pub selection: String,
    pub workspace_bytes: u64,
    pub time_ms: Option<f64>,
    pub iterations: Option<u32>,
    pub tflops: Option<f64>,
    pub gbps: Option<f64>,
    pub verify: Option<Verification>,
    /// Kernel builds of the process so far (GPU only).
    pub build: Option<BuildStats>,
}

pub fn run<T: Target>(
    target: &T,
    db: &mut Db,
    p: &ConvProblem,
    args: &RunArgs,
    mode: FindMode,
    opts: &FindOptions,
) -> anyhow::Result<Report> {
    let (solution, config_origin, selection) = match &args.solution {
        Some(id) => {
            let solver = target.registry().get(id)?;
            let (config, origin) = gconv_tune::known::known_config(db, target.device_key(), solver, p)?;
            (Solution::build(solver, p, config)?, origin, "forced (-S)".to_string())
        }
        None => {
            let s = select(target, db, p, mode, opts)?;
            let solver = target.registry().get(s.solver)?;
            let origin = s.origin(target, db, p)?;
            (Solution::build(solver, p, s.config)?, origin, format!("{mode}: {}", s.source.label()))
        }
    };
    let tensors = ConvTensors::try_random(p, DATA_SEED)?;
    let exact = if args.verify == 1 { Some(target.reference(p, &tensors)?) } else { None };
    let mut workload = target.workload(p, &tensors)?;
    let iterations = if args.time == 1 { args.iter } else { 0 };
    let plan = TimingPlan { iterations, best_ms: None };
    let e = evaluate(target, &mut workload, p, &solution, exact.as_deref(), plan)?;
    Ok(Report {
        device: target.device_key().to_string(),
        direction: p.direction.to_string(),
        key: p.key(),
        problem: p.summary(),
        solver: solution.solver_id.to_string(),
        config: solution.config.to_string(),
        config_origin: config_origin.label(),
        selection,
        workspace_bytes: solution.workspace_bytes,
        time_ms: e.time_ms,
        iterations: e.time_ms.map(|_| e.samples),
        tflops: e.time_ms.map(|ms| p.flops() / (ms * 1e-3) / 1e12),
        gbps: e.time_ms.map(|ms| p.bytes() / (ms * 1e-3) / 1e9),
        verify: e.verification,
        build: target.build_stats(),
    })
}

impl Report {
    pub fn print_text(&self) {
        println!("problem:   {}", self.problem);
        println!("key:       {}", self.key);
        println!(
            "solver:    {} (config {}, {}; workspace {} B; picked by {})",
            self.solver, self.config, self.config_origin, self.workspace_bytes, self.selection
        );
        if let (Some(ms), Some(iters), Some(tflops), Some(gbps)) = (self.time_ms, self.iterations, self.tflops, self.gbps) {
            println!("time:      {ms:.4} ms (median of {iters}), {:.1} GFLOP/s, {gbps:.2} GB/s", tflops * 1e3);
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
