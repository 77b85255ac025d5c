//! Find: run every applicable candidate (each solver with its best known config), verify it,
//! rank by measured time, and keep the ranking in the find-db.

use gconv_core::{ConvProblem, ConvTensors, Solution};

use crate::db::{Db, FindRecord, GCONV_VERSION};
use crate::known::known_config;
use crate::measure::{evaluate, TimingPlan};
use crate::prebuild::{build_threads, prepare_in_parallel, unbuilt};
use crate::target::Target;
use crate::Result;

/// Seed of the data find and tuning measure on.
pub const DATA_SEED: u64 = 0x5eed;

#[derive(Debug, Clone, Copy)]
pub struct FindOptions {
    /// Candidates needing more workspace are listed, not run.
    pub workspace_limit: u64,
    /// Timed runs per candidate.
    pub iterations: u32,
    /// Only candidates that need no new build (`dynamic-hybrid`).
    pub only_prebuilt: bool,
}

impl Default for FindOptions {
    fn default() -> Self {
        FindOptions { workspace_limit: 4 << 30, iterations: 5, only_prebuilt: false }
    }
}

pub const STATUS_OK: &str = "ok";
pub const STATUS_TIME_BOXED: &str = "time-boxed";

/// A problem's data, its exact result, and the backend's copy of the data.
pub struct Bench<T: Target> {
    pub exact: Vec<f64>,
    pub workload: T::Workload,
}

impl<T: Target> Bench<T> {
    pub fn new(target: &T, p: &ConvProblem) -> Result<Self> {
        p.validate()?;
        let tensors = ConvTensors::try_random(p, DATA_SEED)?;
        let exact = target.reference(p, &tensors)?;
        Ok(Bench { workload: target.workload(p, &tensors)?, exact })
    }
}

/// Runs the find and stores its ranking. Rows: fastest verified first, then time-boxed ones,
/// then candidates that did not run or failed, each with its reason.
pub fn find<T: Target>(target: &T, db: &mut Db, p: &ConvProblem, opts: &FindOptions) -> Result<Vec<FindRecord>> {
    let mut bench = Bench::new(target, p)?;
    let device = target.device_key().to_string();
    let mut rows = Vec::new();
    let mut best: Option<f64> = None;
    let mut candidates = Vec::new();
    for solver in target.registry().applicable(p).filter(|s| !s.is_oracle()) {
        candidates.push((solver, known_config(db, &device, solver, p)?.0));
    }
    if !opts.only_prebuilt {
        let runnable = candidates.iter().filter(|(s, c)| s.workspace_bytes(p, c) <= opts.workspace_limit);
        let jobs: Vec<_> = runnable.flat_map(|(s, c)| unbuilt(*s, p, [c.clone()])).collect();
        prepare_in_parallel(&jobs, build_threads());
    }
    for (solver, config) in candidates {
        let workspace_bytes = solver.workspace_bytes(p, &config);
        let mut row = FindRecord {
            problem: p.key(),
            device: device.clone(),
            rank: 0,
            solver: solver.id().to_string(),
            config: config.to_string(),
            time_ms: None,
            workspace_bytes,
            verified: false,
            status: String::new(),
            gconv_version: GCONV_VERSION.to_string(),
        };
        if opts.only_prebuilt && solver.needs_build(p, &config) {
            row.status = "not run: needs a new kernel build".into();
        } else if workspace_bytes > opts.workspace_limit {
            row.status = format!("not run: workspace {workspace_bytes} B over the limit of {} B", opts.workspace_limit);
        } else {
            let plan = TimingPlan { iterations: opts.iterations, best_ms: best };
            let outcome = Solution::build(solver, p, config)
                .map_err(Into::into)
                .and_then(|s| evaluate(target, &mut bench.workload, p, &s, Some(&bench.exact), plan));
            match outcome {
                Ok(e) if !e.verified_ok() => {
                    let v = e.verification.expect("find always verifies");
                    row.status = format!("failed verification: error {:.3e} > tolerance {:.3e}", v.max_error, v.tolerance);
                }
                Ok(e) => {
                    row.verified = true;
                    row.time_ms = e.time_ms;
                    row.status = if e.time_boxed { STATUS_TIME_BOXED } else { STATUS_OK }.into();
                    if !e.time_boxed {
                        best = e.time_ms.map(|t| best.map_or(t, |b: f64| b.min(t)));
                    }
                }
                Err(e) => row.status = format!("failed: {e}"),
            }
        }
        rows.push(row);
    }
    rank(&mut rows);
    db.put_find(&p.key(), &device, &rows)?;
    Ok(rows)
}

/// Sorts rows: ok by time, then time-boxed by time, then the rest in registry order.
fn rank(rows: &mut [FindRecord]) {
    let class = |r: &FindRecord| match r.status.as_str() {
        STATUS_OK => 0,
        STATUS_TIME_BOXED => 1,
        _ => 2,
    };
    rows.sort_by(|a, b| {
        class(a).cmp(&class(b)).then_with(|| match (a.time_ms, b.time_ms) {
            (Some(x), Some(y)) => x.total_cmp(&y),
            _ => std::cmp::Ordering::Equal,
        })
    });
    for (i, r) in rows.iter_mut().enumerate() {
        r.rank = i as u32;
    }
}
