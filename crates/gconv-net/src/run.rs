//! Running a network's convolutions with a tuning file's choices: no tuning, no find. Every
//! layer's data is uploaded first (not timed); the first iteration builds each solution (from
//! the kernel caches where they hold it) and runs it; warm iterations only run.

use std::collections::HashMap;
use std::time::Instant;

use gconv_core::{BuildStats, Config, ConvProblem, ConvTensors, Direction, Runtime, Solution, Workload};
use gconv_tune::db::Db;
use gconv_tune::find::{FindOptions, TestBed, DATA_SEED};
use gconv_tune::heuristic::Heuristic;
use gconv_tune::select::{select, FindMode};

use crate::knobs::parse_format;
use crate::network::Network;
use crate::tuning::TuningFile;
use crate::{Error, Result};

/// What to do with a tuning file made for another network or device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mismatch {
    Refuse,
    /// Use its choices for the layers whose problems it holds (on a device where they apply);
    /// the rest are picked in fast mode (the find-db, else the model), still with no find.
    LayerByLayer,
}

/// How one layer problem got its solution.
#[derive(Debug, Clone, PartialEq)]
pub enum Origin {
    Tuned,
    /// Picked in fast mode, and why the file's choice was not used.
    Fast(String),
}

pub struct Planned {
    pub layer: usize,
    pub problem: ConvProblem,
    pub solver: String,
    pub config: Config,
    pub origin: Origin,
}

pub struct RunReport {
    pub planned: Vec<Planned>,
    /// Wall time of making ready what the solutions need (builds, plans, workspaces, a first
    /// run of each), in ms.
    pub prepare_ms: f64,
    /// Wall time of the first iteration, in ms.
    pub first_ms: f64,
    /// Median wall time of the warm iterations, in ms.
    pub warm_ms: f64,
    /// Kernel builds while preparing, where the backend builds kernels.
    pub builds: Option<BuildStats>,
    /// The file's measured GPU time of the same choices (sum of per-layer times x counts).
    pub tuned_ms: f64,
}

/// Whether `file` was made for `net` on this device; the reason where not.
pub fn mismatch_reason(file: &TuningFile, net: &Network, device: &str) -> Option<String> {
    if file.network.fingerprint != net.fingerprint() {
        return Some(format!(
            "it was made for network `{}` ({} layers, batch {}, fingerprint {}), not `{}` ({} layers, batch {}, fingerprint {})",
            file.network.name,
            file.network.layers.len(),
            file.network.batch,
            file.network.fingerprint,
            net.name,
            net.layers.len(),
            net.batch(),
            net.fingerprint()
        ));
    }
    (file.device != device).then(|| format!("it was made on device `{}`, this is `{device}`", file.device))
}

/// Each layer problem's solver and config, from the file or (layer by layer) fast selection.
pub fn plan(
    rt: &dyn Runtime,
    db: &mut Db,
    net: &Network,
    file: &TuningFile,
    mismatch: Mismatch,
    heuristic: Option<&dyn Heuristic>,
) -> Result<Vec<Planned>> {
    let bad = |reason: String| Error::BadTuning { path: format!("for {}", net.name), reason };
    let reason = mismatch_reason(file, net, rt.device_key());
    if let (Some(reason), Mismatch::Refuse) = (&reason, mismatch) {
        return Err(bad(format!("{reason}; pass --layer-by-layer to use its choices where the layer problems match")));
    }
    let directions: Vec<Direction> =
        file.directions.iter().map(|d| d.parse().map_err(|e: String| bad(e))).collect::<Result<_>>()?;
    // The file's choices by problem key.
    let mut chosen: HashMap<&str, (&str, &str)> = HashMap::new();
    for layer in &file.winner.layers {
        for c in &layer.choices {
            if let (Some(solver), Some(config)) = (&c.solver, &c.config) {
                chosen.insert(c.problem.as_str(), (solver.as_str(), config.as_str()));
            }
        }
    }
    let same = reason.is_none();
    let mut planned = Vec::new();
    for (i, layer) in net.layers.iter().enumerate() {
        // The layer's setting: the file's for this layer where it is the same network, else
        // the setting of a layer with the same shape, else the network's one setting, else the
        // setting with the least total.
        let setting = match same {
            true => file.winner.layers.get(i).map(|l| l.setting.as_str()),
            false => file
                .network
                .layers
                .iter()
                .position(|l| l.key == layer.shape.key())
                .and_then(|j| file.winner.layers.get(j))
                .map(|l| l.setting.as_str()),
        }
        .or(file.winner.setting.as_deref())
        .or_else(|| fastest_setting(file))
        .and_then(parse_format)
        .ok_or_else(|| bad(format!("no setting for layer `{}`", layer.name)))?;
        for &direction in &directions {
            let p = net.problem(i, setting, direction);
            let from_file = chosen
                .get(p.key().as_str())
                .ok_or_else(|| "the file has no choice for this problem".to_string())
                .and_then(|&(solver, config)| {
                    let s = rt.solver(solver).map_err(|e| e.to_string())?;
                    s.applicable(&p).map_err(|e| e.to_string())?;
                    let config: Config = config.parse().map_err(|e: gconv_core::GconvError| e.to_string())?;
                    s.check_config(&p, &config).map_err(|e| e.to_string())?;
                    Ok((s.id().to_string(), config))
                });
            let (solver, config, origin) = match from_file {
                Ok((solver, config)) => (solver, config, Origin::Tuned),
                Err(reason) if mismatch == Mismatch::LayerByLayer => {
                    let s = select(
                        rt,
                        db,
                        &mut TestBed::new(rt, &p),
                        &p,
                        FindMode::Fast,
                        &FindOptions::default(),
                        heuristic,
                    )?;
                    (s.solution.solver_id.to_string(), s.solution.config, Origin::Fast(reason))
                }
                Err(reason) => return Err(bad(format!("layer `{}` ({}): {reason}", layer.name, p.key()))),
            };
            planned.push(Planned { layer: i, problem: p, solver, config, origin });
        }
    }
    Ok(planned)
}

fn fastest_setting(file: &TuningFile) -> Option<&str> {
    let timed = file.settings.iter().filter_map(|s| Some((s.setting.as_str(), s.total_ms?)));
    timed.min_by(|a, b| a.1.total_cmp(&b.1)).map(|(setting, _)| setting)
}

/// Runs the planned problems in order, as a network would: everything the solutions need made
/// ready first (kernels built or loaded, vendor plans made, workspaces allocated, and one run of
/// each, which is when the driver and the vendor libraries load what they load on first use),
/// then a first iteration and `warm` more, each enqueued back to back and waited for once.
pub fn run(rt: &dyn Runtime, file: &TuningFile, planned: Vec<Planned>, warm: u32) -> Result<RunReport> {
    let mut workloads: HashMap<String, Box<dyn Workload>> = HashMap::new();
    for p in planned.iter().map(|p| &p.problem) {
        if let std::collections::hash_map::Entry::Vacant(slot) = workloads.entry(p.key()) {
            slot.insert(rt.upload(p, &ConvTensors::try_random(p, DATA_SEED)?)?);
        }
    }
    let before = rt.build_stats();
    let started = Instant::now();
    let mut solutions: Vec<Solution> = Vec::with_capacity(planned.len());
    for plan in &planned {
        let solution = rt.build(&plan.solver, &plan.problem, plan.config.clone())?;
        workloads.get_mut(&plan.problem.key()).expect("uploaded").run(&solution)?;
        solutions.push(solution);
    }
    rt.synchronize()?;
    let prepare_ms = started.elapsed().as_secs_f64() * 1e3;
    let builds = rt.build_stats().zip(before).map(|(after, before)| after.since(&before));
    let mut iteration = || -> Result<f64> {
        let started = Instant::now();
        for (plan, solution) in planned.iter().zip(&solutions) {
            workloads.get_mut(&plan.problem.key()).expect("uploaded").enqueue(solution)?;
        }
        rt.synchronize()?;
        Ok(started.elapsed().as_secs_f64() * 1e3)
    };
    let first_ms = iteration()?;
    let mut warm_ms = (0..warm.max(1)).map(|_| iteration()).collect::<Result<Vec<f64>>>()?;
    warm_ms.sort_by(f64::total_cmp);
    let tuned: HashMap<&str, f64> = file
        .winner
        .layers
        .iter()
        .flat_map(|l| l.choices.iter())
        .filter_map(|c| Some((c.problem.as_str(), c.ms?)))
        .collect();
    let tuned_ms = planned.iter().filter_map(|p| tuned.get(p.problem.key().as_str())).sum();
    Ok(RunReport { planned, prepare_ms, first_ms, warm_ms: warm_ms[warm_ms.len() / 2], builds, tuned_ms })
}
