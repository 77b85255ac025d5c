//! Tuning: walk each tunable solver's config space with a search strategy, keep every
//! measurement as a trial (so a killed run resumes where it stopped), store each solver's
//! verified winner in the perf-db, then rank all candidates with a find.

use std::time::Instant;

use gconv_core::{Config, ConvProblem, NotApplicable, Runtime, Solver};
use serde::Serialize;

use crate::db::{Db, PerfRecord, RecordKey, TrialRecord, Warning, FORMAT_VERSION, GCONV_VERSION};
use crate::find::{find, measure, FindOptions, Ranked, TestBed};
use crate::known::checked;
use crate::outcome::{Outcome, Skip, STATUS_OK};
use crate::prebuild::{build_threads, prepare_in_parallel, unbuilt};
use crate::search::SearchStrategy;
use crate::Result;

#[derive(Debug, Clone, Serialize)]
pub struct SolverTuning {
    pub solver: String,
    /// Configs the strategy scheduled.
    pub scheduled: usize,
    /// Measured in this run.
    pub measured: usize,
    /// Measured by an earlier, interrupted run and reused.
    pub resumed: usize,
    pub winner: Option<String>,
    pub winner_ms: Option<f64>,
}

pub struct TuneOutcome {
    pub problem: String,
    /// Already tuned on this device by this gconv version: nothing was run.
    pub skipped: bool,
    pub solvers: Vec<SolverTuning>,
    pub find: Vec<Ranked>,
    /// Stored records the closing find could not use.
    pub warnings: Vec<Warning>,
}

/// Progress of one solver's search, for a progress bar.
pub struct Progress<'a> {
    pub problem: &'a str,
    pub solver: &'a str,
    pub done: usize,
    pub total: usize,
}

/// The solvers a tuning run searches: every tunable one, or only those named.
#[derive(Debug, Clone, Copy)]
pub enum Searched<'a> {
    All,
    Only(&'a [String]),
}

impl Searched<'_> {
    fn admits(&self, id: &str) -> bool {
        match self {
            Searched::All => true,
            Searched::Only(ids) => ids.iter().any(|i| i == id),
        }
    }
}

/// Whether every searched tunable solver has a perf-db record from this gconv version and the
/// problem has a find result: then tuning it again would redo finished work.
pub fn is_tuned(rt: &dyn Runtime, db: &Db, p: &ConvProblem, searched: Searched<'_>) -> Result<bool> {
    let key = RecordKey::new(p, rt.device_key());
    for solver in tunable(rt, p, searched) {
        match db.perf(&key, solver.id())? {
            Some(r) if r.gconv_version == GCONV_VERSION => {}
            _ => return Ok(false),
        }
    }
    Ok(db.find(&key)?.is_some())
}

/// Searched solvers with a space to search. Those whose every config find times already (a
/// vendor library's list) gain nothing from tuning.
fn tunable<'a>(
    rt: &'a dyn Runtime,
    p: &'a ConvProblem,
    searched: Searched<'a>,
) -> impl Iterator<Item = &'a dyn Solver> + 'a {
    rt.solvers().into_iter().filter(move |s| searched.admits(s.id()) && why_untunable(*s, p).is_none())
}

/// Why a solver has nothing to tune on a problem.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Untunable {
    Oracle,
    /// Find times every config it offers (a vendor library's list).
    ListTimedByFind,
    NotApplicable(NotApplicable),
    NoConfigs,
}

impl std::fmt::Display for Untunable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Untunable::Oracle => write!(f, "it is the reference, timed only when nothing else runs"),
            Untunable::ListTimedByFind => write!(f, "find already times every config it offers"),
            Untunable::NotApplicable(reason) => write!(f, "not applicable: {reason}"),
            Untunable::NoConfigs => write!(f, "it has no configs to search"),
        }
    }
}

/// Why a solver has nothing to tune on the problem, if so.
pub fn why_untunable(solver: &dyn Solver, p: &ConvProblem) -> Option<Untunable> {
    if solver.is_oracle() {
        return Some(Untunable::Oracle);
    }
    if solver.find_times_every_config() {
        return Some(Untunable::ListTimedByFind);
    }
    if let Err(reason) = solver.applicable(p) {
        return Some(Untunable::NotApplicable(reason));
    }
    if solver.configs(p).next().is_none() {
        return Some(Untunable::NoConfigs);
    }
    None
}

/// Keeps the fastest fully timed config.
fn consider(config: &Config, time: Option<f64>, status: &str, best: &mut Option<(Config, f64)>) {
    if let (STATUS_OK, Some(t)) = (status, time) {
        if best.as_ref().is_none_or(|(_, b)| t < *b) {
            *best = Some((config.clone(), t));
        }
    }
}

pub fn tune(
    rt: &dyn Runtime,
    db: &mut Db,
    p: &ConvProblem,
    strategy: &dyn SearchStrategy,
    searched: Searched<'_>,
    opts: &FindOptions,
    progress: &mut dyn FnMut(Progress<'_>),
) -> Result<TuneOutcome> {
    let key = p.key();
    if is_tuned(rt, db, p, searched)? {
        return Ok(TuneOutcome { problem: key, skipped: true, solvers: vec![], find: vec![], warnings: vec![] });
    }
    let record_key = RecordKey::new(p, rt.device_key());
    let mut bed = TestBed::new(rt, p);
    let mut solvers = Vec::new();
    for solver in tunable(rt, p, searched) {
        let id = solver.id();
        let space: Vec<Config> = solver.configs(p).collect();
        let schedule = strategy.schedule(p, solver, space);
        let earlier = db.trials(&record_key, id)?;
        let mut report = SolverTuning {
            solver: id.to_string(),
            scheduled: schedule.len(),
            measured: 0,
            resumed: 0,
            winner: None,
            winner_ms: None,
        };
        let mut best: Option<(Config, f64)> = None;
        let started = Instant::now();
        let threads = build_threads();
        for (done, config) in schedule.iter().enumerate() {
            progress(Progress { problem: &key, solver: id, done, total: schedule.len() });
            let over_budget = || strategy.time_budget().is_some_and(|b| started.elapsed() >= b);
            if done % threads == 0 && !over_budget() {
                // Build the next batch of untried configs together, one per core.
                let untried = schedule[done..(done + threads).min(schedule.len())]
                    .iter()
                    .filter(|c| {
                        !earlier.iter().any(|t| t.config == c.to_string())
                            && solver.workspace_bytes(p, c) <= opts.workspace_limit
                    })
                    .cloned();
                prepare_in_parallel(&unbuilt(solver, p, untried), threads);
            }
            let text = config.to_string();
            if let Some(trial) = earlier.iter().find(|t| t.config == text) {
                report.resumed += 1;
                consider(config, trial.time_ms, &trial.status, &mut best);
                continue;
            }
            if over_budget() {
                break;
            }
            let workspace = solver.workspace_bytes(p, config);
            let outcome = if workspace > opts.workspace_limit {
                Outcome::NotRun(Skip::Workspace { bytes: workspace, limit: opts.workspace_limit })
            } else {
                measure(rt, &mut bed, solver, config, opts, best.as_ref().map(|b| b.1), true)?.0
            };
            let status = outcome.status();
            db.put_trial(&TrialRecord {
                problem: key.clone(),
                device: record_key.device.clone(),
                solver: id.to_string(),
                config: text,
                time_ms: outcome.any_ms(),
                status: status.clone(),
            })?;
            report.measured += 1;
            consider(config, outcome.any_ms(), &status, &mut best);
        }
        progress(Progress { problem: &key, solver: id, done: schedule.len(), total: schedule.len() });
        if let Some((config, time_ms)) = best {
            // Trials were verified when measured; the stored winner must also still be valid.
            checked(solver, p, &config.to_string())?;
            db.put_perf(&PerfRecord {
                problem: key.clone(),
                device: record_key.device.clone(),
                solver: id.to_string(),
                config: config.to_string(),
                time_ms,
                verified: true,
                gconv_version: GCONV_VERSION.to_string(),
                format_version: FORMAT_VERSION,
            })?;
            report.winner = Some(config.to_string());
            report.winner_ms = Some(time_ms);
        }
        solvers.push(report);
    }
    let ranking = find(rt, db, &mut bed, opts)?;
    Ok(TuneOutcome { problem: key, skipped: false, solvers, find: ranking.rows, warnings: ranking.warnings })
}
