//! The sweep: every applicable solver x every config of its space x every problem, each
//! verified and fully timed by the one measurement path (no time box), as training and
//! validation data for the learned heuristic. The process isolation, resumption and CSV are the
//! CLI's; this is what one worker does for one problem.

use gconv_core::{Config, ConvProblem, Runtime, Solver};

use crate::find::{measure, FindOptions, TestBed};
use crate::outcome::{Outcome, Skip};
use crate::prebuild::{build_threads, prepare_in_parallel, unbuilt};
use crate::Result;

/// Every candidate the sweep measures on `p`: each applicable solver but the oracle, with
/// every config of its space (a vendor library's: every engine config it lists), or its
/// default where it has nothing to tune (a vendor library listing nothing has no candidate).
/// With `per_solver`, a solver's own space is cut to that many configs plus its default.
/// First come the likely fastest, each solver's first choice (its default config; a vendor
/// library's first listed, its heuristic's pick), so that an early-stopping sweep has a good
/// best to stop the others against from the start. The configs find leaves to tuning (cuDNN
/// engines it compiles at run time) are left out: no pick without tuning takes them, and each
/// cost the sweep a compile of up to 0.6 s a problem. Only the solvers `wanted` accepts are
/// asked (a resumed sweep need not list again a vendor library it has every row of).
pub fn candidates<'r>(
    rt: &'r dyn Runtime,
    p: &ConvProblem,
    per_solver: Option<usize>,
    wanted: &dyn Fn(&dyn Solver) -> bool,
) -> Vec<(&'r dyn Solver, Config)> {
    let (mut first, mut rest) = (Vec::new(), Vec::new());
    for s in rt.solvers().into_iter().filter(|s| !s.is_oracle() && wanted(*s) && s.applicable(p).is_ok()) {
        let mut configs: Vec<Config> = s.configs(p).filter(|c| s.find_skips(p, c).is_none()).collect();
        if let Some(n) = per_solver.filter(|&n| !s.find_times_every_config() && configs.len() > n) {
            configs = sample(configs, n, s.default_config(p));
        }
        if configs.is_empty() && !s.find_times_every_config() {
            configs.push(s.default_config(p));
        }
        let choice = match s.find_times_every_config() {
            true => configs.first().cloned(),
            false => Some(s.default_config(p)),
        };
        for c in configs {
            match Some(&c) == choice.as_ref() {
                true => first.push((s, c)),
                false => rest.push((s, c)),
            }
        }
    }
    first.extend(rest);
    first
}

/// `n` configs and the default. The sample is the configs of least hash of their text: the
/// same ones on every problem where they are valid, so kernels built for one problem serve
/// the next (one build per tile serves every shape).
fn sample(mut configs: Vec<Config>, n: usize, default: Config) -> Vec<Config> {
    configs.sort_by_key(|c| crate::search::fnv1a(&c.to_string()));
    configs.truncate(n);
    if !configs.contains(&default) {
        configs.push(default);
    }
    configs
}

/// What a problem's sweep has done so far.
pub enum SweepEvent {
    /// The kernels of every candidate are built (or failed to build: running says how).
    Built,
    /// Candidate `item` measured, with its workspace size.
    Measured { item: usize, outcome: Outcome, workspace_bytes: u64 },
}

/// Builds the kernels of `items` ahead in parallel threads, then measures each on one test
/// bed, telling `on` as it goes. With `opts.time_box`, a candidate over TIME_BOX_FACTOR times
/// the fastest so far on one call is left at that call's time, unverified (a sweep of a large
/// space spends most of its time on such candidates); without it every candidate is verified
/// and fully timed. A lost device ends the problem with that error.
pub fn sweep_problem(
    rt: &dyn Runtime,
    p: &ConvProblem,
    items: &[(&dyn Solver, Config)],
    opts: &FindOptions,
    mut on: impl FnMut(SweepEvent),
) -> Result<()> {
    let jobs: Vec<_> = items.iter().flat_map(|(s, c)| unbuilt(*s, p, [c.clone()])).collect();
    prepare_in_parallel(&jobs, build_threads());
    on(SweepEvent::Built);
    let mut bed = TestBed::new(rt, p);
    let mut best: Option<f64> = None;
    for (item, (solver, config)) in items.iter().enumerate() {
        let workspace_bytes = solver.workspace_bytes(p, config);
        let outcome = match workspace_bytes > opts.workspace_limit {
            true => Outcome::NotRun(Skip::Workspace { bytes: workspace_bytes, limit: opts.workspace_limit }),
            false => measure(rt, &mut bed, *solver, config, opts, best, true)?.0,
        };
        if let Some(ms) = outcome.timed_ms() {
            best = Some(best.map_or(ms, |b| b.min(ms)));
        }
        on(SweepEvent::Measured { item, outcome, workspace_bytes });
    }
    Ok(())
}
