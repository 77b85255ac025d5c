//! `gconv conv`: pick a solver, run it, time it, verify it, report it.

use std::time::Instant;

use anyhow::{bail, Context};
use gconv_core::reference::reference;
use gconv_core::verify::{verify, Verification};
use gconv_core::{ConvProblem, ConvTensors, Registry, Solution};
use gconv_cpu::{CpuDevice, Host, HostBuffers};
use serde::Serialize;

use crate::driver::RunArgs;

/// Seed of the random input tensors: runs are reproducible.
const DATA_SEED: u64 = 0x5eed;

/// Where problems run, and the solvers it has.
pub struct Session {
    pub device: CpuDevice,
    pub registry: Registry<Host>,
    pub workspace_limit: u64,
}

#[derive(Debug, Serialize)]
pub struct Report {
    pub device: String,
    pub direction: String,
    pub key: String,
    pub problem: String,
    pub solver: String,
    pub config: String,
    /// `forced` (-S) or `rule` (first applicable solver in priority order within the limit).
    pub selection: &'static str,
    pub workspace_bytes: u64,
    pub time_ms: Option<f64>,
    pub iterations: Option<u32>,
    pub tflops: Option<f64>,
    pub gbps: Option<f64>,
    pub verify: Option<Verification>,
}

impl Session {
    /// The first applicable solver, in the registry's priority order, whose workspace fits.
    /// The learned heuristic and the find-db replace this rule.
    fn pick_by_rule(&self, p: &ConvProblem) -> anyhow::Result<Solution<Host>> {
        for solver in self.registry.applicable(p) {
            let config = solver.default_config(p);
            if solver.workspace_bytes(p, &config) <= self.workspace_limit {
                return Ok(Solution::build(solver, p, config)?);
            }
        }
        bail!("no solver can run {} within the workspace limit of {} bytes", p.key(), self.workspace_limit)
    }

    pub fn run(&self, p: &ConvProblem, args: &RunArgs) -> anyhow::Result<Report> {
        let (solution, selection) = match &args.solution {
            Some(id) => {
                let solver = self.registry.get(id)?;
                (Solution::build(solver, p, solver.default_config(p))?, "forced")
            }
            None => (self.pick_by_rule(p)?, "rule"),
        };
        let mut tensors = ConvTensors::try_random(p, DATA_SEED)?;
        let exact = (args.verify == 1).then(|| reference(p, &tensors));
        let workspace_len = usize::try_from(solution.workspace_bytes.div_ceil(4)).context("workspace too large")?;
        let mut workspace = Vec::new();
        workspace
            .try_reserve_exact(workspace_len)
            .with_context(|| format!("cannot allocate a workspace of {} bytes", solution.workspace_bytes))?;
        workspace.resize(workspace_len, 0.0f32);
        let mut run_once = |tensors: &mut ConvTensors| -> anyhow::Result<f64> {
            let start = Instant::now();
            solution.invoker.run(&mut HostBuffers { tensors, workspace: &mut workspace })?;
            Ok(start.elapsed().as_secs_f64())
        };
        // The first run warms up caches and thread pools and is the one verified.
        run_once(&mut tensors)?;
        let verification = exact.map(|exact| verify(p, tensors.output(p.direction), &exact));
        let time_ms = if args.time == 1 {
            let mut samples = (0..args.iter).map(|_| run_once(&mut tensors)).collect::<anyhow::Result<Vec<f64>>>()?;
            samples.sort_by(f64::total_cmp);
            Some(samples[samples.len() / 2] * 1e3)
        } else {
            None
        };
        Ok(Report {
            device: self.device.key(),
            direction: p.direction.to_string(),
            key: p.key(),
            problem: p.summary(),
            solver: solution.solver_id.to_string(),
            config: solution.config.to_string(),
            selection,
            workspace_bytes: solution.workspace_bytes,
            time_ms,
            iterations: time_ms.map(|_| args.iter),
            tflops: time_ms.map(|ms| p.flops() / (ms * 1e-3) / 1e12),
            gbps: time_ms.map(|ms| p.bytes() / (ms * 1e-3) / 1e9),
            verify: verification,
        })
    }
}

impl Report {
    pub fn print_text(&self) {
        println!("problem:   {}", self.problem);
        println!("key:       {}", self.key);
        println!(
            "solver:    {} (config {}, workspace {} B, picked by {})",
            self.solver, self.config, self.workspace_bytes, self.selection
        );
        if let (Some(ms), Some(iters), Some(tflops), Some(gbps)) = (self.time_ms, self.iterations, self.tflops, self.gbps) {
            println!(
                "time:      {ms:.4} ms (median of {iters}), {:.1} GFLOP/s, {gbps:.2} GB/s",
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
