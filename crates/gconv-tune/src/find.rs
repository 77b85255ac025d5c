//! Find: run every applicable candidate (each solver with its best known config, or every
//! config of a vendor library whose own find times them all), verify it, rank by measured
//! time, and keep the ranking in the find-db.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use gconv_core::{
    Config, ConvProblem, ConvTensors, Result as CoreResult, Runtime, Solver, SolverKind, TimingOptions, Workload,
};

use crate::db::{Db, FindRecord, RecordKey, Warning, GCONV_VERSION};
use crate::heuristic::Predicted;
use crate::known::{known_config, ConfigOrigin};
use crate::measure::{evaluate, Sampling};
use crate::outcome::{Outcome, Skip};
use crate::prebuild::{build_threads, prepare_in_parallel, unbuilt};
use crate::Result;

/// Seed of the data find and tuning measure on.
pub const DATA_SEED: u64 = 0x5eed;

#[derive(Debug, Clone, Copy)]
pub struct FindOptions {
    /// Candidates needing more workspace are listed, not run.
    pub workspace_limit: u64,
    /// Samples per candidate.
    pub samples: u32,
    /// Only candidates that need no new build (`dynamic-hybrid`).
    pub only_prebuilt: bool,
    /// Stop sampling a candidate whose first sample is far over the best so far.
    pub time_box: bool,
    pub timing: TimingOptions,
}

impl Default for FindOptions {
    fn default() -> Self {
        FindOptions {
            workspace_limit: 4 << 30,
            samples: 5,
            only_prebuilt: false,
            time_box: true,
            timing: TimingOptions::default(),
        }
    }
}

/// A problem's data on the runtime's device, with its exact result when asked for, made when
/// first needed and reused by everything measured on the problem (find, tuning, the run that
/// follows).
pub struct TestBed<'r> {
    rt: &'r dyn Runtime,
    p: ConvProblem,
    workload: Option<Box<dyn Workload>>,
    /// Wall time spent making and uploading the data.
    pub data_time: Duration,
    /// Wall time spent computing the reference.
    pub reference_time: Duration,
}

impl<'r> TestBed<'r> {
    pub fn new(rt: &'r dyn Runtime, p: &ConvProblem) -> Self {
        TestBed { rt, p: p.clone(), workload: None, data_time: Duration::ZERO, reference_time: Duration::ZERO }
    }

    /// The data, uploaded, with its reference prepared when `check`.
    pub fn workload(&mut self, check: bool) -> CoreResult<&mut dyn Workload> {
        if self.workload.is_none() {
            let started = Instant::now();
            self.p.validate()?;
            let tensors = ConvTensors::try_random(&self.p, DATA_SEED)?;
            self.workload = Some(self.rt.upload(&self.p, &tensors)?);
            self.data_time += started.elapsed();
        }
        let workload = self.workload.as_deref_mut().expect("set above");
        if check {
            let started = Instant::now();
            workload.prepare_reference()?;
            self.reference_time += started.elapsed();
        }
        Ok(workload)
    }

    /// Wall time spent on the data and the reference.
    pub fn setup_time(&self) -> Duration {
        self.data_time + self.reference_time
    }
}

/// One row of a find: a candidate and what happened to it.
#[derive(Debug, Clone)]
pub struct Ranked {
    pub solver: &'static str,
    pub kind: SolverKind,
    pub config: Config,
    pub workspace_bytes: u64,
    pub outcome: Outcome,
    /// Wall time this find spent on the candidate: its plan or kernel fetched, runs,
    /// verification and samples (zero when an earlier measurement was reused); the test data
    /// and the reference are the test bed's.
    pub spent: Duration,
}

impl Ranked {
    /// The find-db's row.
    pub fn record(&self, key: &RecordKey, rank: usize) -> FindRecord {
        FindRecord {
            problem: key.problem.clone(),
            device: key.device.clone(),
            rank: rank as u32,
            solver: self.solver.to_string(),
            config: self.config.to_string(),
            time_ms: self.outcome.any_ms(),
            workspace_bytes: self.workspace_bytes,
            verified: self.outcome.verified(),
            status: self.outcome.status(),
            gconv_version: GCONV_VERSION.to_string(),
        }
    }
}

/// A find's ranking, and the stored records it could not use.
pub struct Ranking {
    /// Fastest verified first, then time-boxed ones, then candidates that did not run or
    /// failed, each with its reason.
    pub rows: Vec<Ranked>,
    pub warnings: Vec<Warning>,
}

/// Runs the find and stores its ranking. A lost device ends the find with that error; nothing
/// is stored.
pub fn find(rt: &dyn Runtime, db: &mut Db, bed: &mut TestBed<'_>, opts: &FindOptions) -> Result<Ranking> {
    find_reusing(rt, db, bed, opts, &[])
}

/// [`find`], taking the fully timed rows of an `earlier` find on the same test bed as they are
/// instead of measuring those candidates again.
pub fn find_reusing(
    rt: &dyn Runtime,
    db: &mut Db,
    bed: &mut TestBed<'_>,
    opts: &FindOptions,
    earlier: &[Ranked],
) -> Result<Ranking> {
    let p = bed.p.clone();
    let key = RecordKey::new(&p, rt.device_key());
    let mut candidates = Vec::new();
    let mut warnings = Vec::new();
    for solver in rt.solvers().into_iter().filter(|s| !s.is_oracle() && s.applicable(&p).is_ok()) {
        if solver.find_times_every_config() {
            candidates.extend(solver.configs(&p).map(|c| (solver, c)));
        } else {
            let known = known_config(db, &key.device, solver, &p)?;
            warnings.extend(known.skipped);
            candidates.push((solver, known.config));
        }
    }
    if !opts.only_prebuilt {
        let runnable = candidates.iter().filter(|(s, c)| skip(*s, &p, c, opts).is_none());
        let jobs: Vec<_> = runnable.flat_map(|(s, c)| unbuilt(*s, &p, [c.clone()])).collect();
        prepare_in_parallel(&jobs, build_threads());
    }
    let mut rows = Vec::new();
    let mut best: Option<f64> = None;
    for (solver, config) in candidates {
        let workspace_bytes = solver.workspace_bytes(&p, &config);
        let measured =
            earlier.iter().find(|r| r.solver == solver.id() && r.config == config && r.outcome.timed_ms().is_some());
        let (outcome, spent) = if let Some(row) = measured {
            (row.outcome.clone(), Duration::ZERO)
        } else if let Some(skip) = skip(solver, &p, &config, opts) {
            (Outcome::NotRun(skip), Duration::ZERO)
        } else {
            measure(rt, bed, solver, &config, opts, best, true)?
        };
        if let Some(t) = outcome.timed_ms() {
            best = Some(best.map_or(t, |b| b.min(t)));
        }
        rows.push(Ranked { solver: solver.id(), kind: solver.kind(), config, workspace_bytes, outcome, spent });
    }
    // A fallback runs only when nothing else could.
    if best.is_none() {
        for row in rows.iter_mut().filter(|r| matches!(r.outcome, Outcome::NotRun(Skip::Fallback))) {
            (row.outcome, row.spent) = measure(rt, bed, rt.solver(row.solver)?, &row.config, opts, None, true)?;
        }
    }
    rank(&mut rows);
    let records: Vec<FindRecord> = rows.iter().enumerate().map(|(i, r)| r.record(&key, i)).collect();
    db.put_find(&key, &records)?;
    Ok(Ranking { rows, warnings })
}

/// What a model-guided find measures: the first `k` candidates of a model's ranking (`ranked`,
/// fastest predicted first; looked for among its first 4k) that apply to `p` and that find
/// would run, and the vendor library's own heuristic pick where the runtime has one (cheap to
/// ask, and it covers shapes the model ranks badly). Where tuning stored a config for a
/// solver, that config stands in for the predicted one: measured beats predicted.
pub fn guided_candidates<'r>(
    rt: &'r dyn Runtime,
    db: &Db,
    p: &ConvProblem,
    ranked: &[Predicted],
    k: usize,
    opts: &FindOptions,
) -> Result<Vec<(&'r dyn Solver, Config)>> {
    let mut chosen: Vec<(&dyn Solver, Config)> = Vec::new();
    // Checking a vendor config plans it, which may compile; a shape the model's first picks do
    // not fit stops after a few times k, not at the end of the ranking.
    for candidate in ranked.iter().take(4 * k) {
        if chosen.len() >= k {
            break;
        }
        let Ok(solver) = rt.solver(&candidate.solver) else { continue };
        if solver.is_oracle() || solver.applicable(p).is_err() {
            continue;
        }
        let known = known_config(db, rt.device_key(), solver, p)?;
        let tuned = known.origin == ConfigOrigin::Tuned;
        let config = if tuned { known.config } else { candidate.config.clone() };
        // A library's config the ranking left unconfirmed is asked about before find's skips
        // are read and its plan is checked (which may compile it).
        if !tuned && solver.find_times_every_config() && !lists(solver, p, &config, false) {
            continue;
        }
        if skip(solver, p, &config, opts).is_some() || solver.check_config(p, &config).is_err() {
            continue;
        }
        if !chosen.iter().any(|(s, c)| s.id() == solver.id() && *c == config) {
            chosen.push((solver, config));
        }
    }
    if let Some((id, config)) = rt.vendor_pick(p)? {
        let solver = rt.solver(id)?;
        if skip(solver, p, &config, opts).is_none() && !chosen.iter().any(|(s, c)| s.id() == id && *c == config) {
            chosen.push((solver, config));
        }
    }
    Ok(chosen)
}

/// Whether a library lists `config` for the problem: where its quick listing (what a model's
/// ranking asked for) names it, or it names it when asked alone, without listing every
/// source; with `any_source` (a tuned config may come from any), else where its full listing
/// does. A predicted config never needs the full listing: a ranking weighs only configs the
/// quick listing names or the library is asked about alone.
pub(crate) fn lists(solver: &dyn Solver, p: &ConvProblem, config: &Config, any_source: bool) -> bool {
    let wanted = HashSet::from([config.clone()]);
    !solver.configs_among(p, &wanted).is_empty() || (any_source && solver.configs(p).any(|c| c == *config))
}

/// Measures `candidates` (verified) and ranks them like find; nothing is stored, since a
/// ranking of a few candidates is not a find's.
pub fn find_among(
    rt: &dyn Runtime,
    bed: &mut TestBed<'_>,
    candidates: &[(&dyn Solver, Config)],
    opts: &FindOptions,
) -> Result<Vec<Ranked>> {
    let mut rows = Vec::new();
    let mut best: Option<f64> = None;
    for (solver, config) in candidates {
        let (outcome, spent) = measure(rt, bed, *solver, config, opts, best, true)?;
        if let Some(t) = outcome.timed_ms() {
            best = Some(best.map_or(t, |b| b.min(t)));
        }
        rows.push(Ranked {
            solver: solver.id(),
            kind: solver.kind(),
            config: config.clone(),
            workspace_bytes: solver.workspace_bytes(&bed.p, config),
            outcome,
            spent,
        });
    }
    rank(&mut rows);
    Ok(rows)
}

/// Why find lists a candidate without running it, if it does.
fn skip(solver: &dyn Solver, p: &ConvProblem, config: &Config, opts: &FindOptions) -> Option<Skip> {
    if solver.is_fallback() {
        return Some(Skip::Fallback);
    }
    if let Some(reason) = solver.find_skips(p, config) {
        return Some(Skip::LeftToTuning(reason));
    }
    if opts.only_prebuilt && solver.needs_build(p, config) {
        return Some(Skip::NeedsBuild);
    }
    let bytes = solver.workspace_bytes(p, config);
    (bytes > opts.workspace_limit).then_some(Skip::Workspace { bytes, limit: opts.workspace_limit })
}

/// Builds and times one candidate, verified when `check`; the wall time it took leaves out the
/// test bed's data and reference (made on first need). A lost device is an error; every other
/// failure is the candidate's outcome.
pub fn measure(
    rt: &dyn Runtime,
    bed: &mut TestBed<'_>,
    solver: &dyn Solver,
    config: &Config,
    opts: &FindOptions,
    best: Option<f64>,
    check: bool,
) -> Result<(Outcome, Duration)> {
    let (started, setup_before) = (Instant::now(), bed.setup_time());
    let sampling = Sampling { samples: opts.samples, best_ms: best.filter(|_| opts.time_box), options: opts.timing };
    let evaluated =
        rt.build(solver.id(), &bed.p, config.clone()).and_then(|s| evaluate(bed.workload(check)?, &s, check, sampling));
    let outcome = match evaluated {
        Err(e) if e.is_device_lost() => return Err(e.into()),
        Err(e) => Outcome::Failed(e),
        Ok(e) => e.outcome(),
    };
    Ok((outcome, started.elapsed().saturating_sub(bed.setup_time() - setup_before)))
}

/// Sorts rows: fully timed by time, then time-boxed by time, then the rest in registry order.
fn rank(rows: &mut [Ranked]) {
    rows.sort_by(|a, b| {
        a.outcome.class().cmp(&b.outcome.class()).then_with(|| match (a.outcome.any_ms(), b.outcome.any_ms()) {
            (Some(x), Some(y)) => x.total_cmp(&y),
            _ => std::cmp::Ordering::Equal,
        })
    });
}
