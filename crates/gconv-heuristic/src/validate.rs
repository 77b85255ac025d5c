//! Oracle validation: on measured problems the model never saw, how close its pick comes to
//! the fastest candidate (the oracle), beside a vendor library's own heuristic and find.

use std::collections::BTreeMap;
use std::time::Instant;

use gconv_core::{Config, ConvProblem, DataType, Direction};

use crate::features::{rows_of, ProblemRow};
use crate::measured::Measured;
use crate::model::ModelSet;
use crate::problems::class_of;

/// One problem's outcome.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub problem: ConvProblem,
    pub oracle: (String, Config),
    pub oracle_ms: f64,
    /// The model's first-ranked candidate that ran, of those selection by the model can
    /// propose (a listed solver's configs that the library lists for the problem and the model saw).
    pub pick: (String, Config),
    pub pick_ms: f64,
    pub predicted_ms: f64,
    /// Position (0-based) of the oracle in the model's order of the candidates that ran.
    pub oracle_rank: usize,
    /// The vendor heuristic's pick and the vendor find's best, where measured.
    pub vendor_heuristic_ms: Option<f64>,
    pub vendor_find_ms: Option<f64>,
    /// Predicted and measured time of every candidate that ran.
    pub predictions: Vec<(f64, f64)>,
    /// Wall time of ranking the candidates (their features, the screened trees, the pick's
    /// rules: selection's ranking without listing the candidates), and how many there were.
    pub rank_us: f64,
    pub ranked: usize,
}

impl Outcome {
    pub fn efficiency(&self) -> f64 {
        self.oracle_ms / self.pick_ms
    }
}

/// Evaluates the model on every problem of `rows` it covers (at least one timed candidate).
pub fn evaluate(set: &ModelSet, rows: &[Measured]) -> Vec<Outcome> {
    let mut by_problem: BTreeMap<String, Vec<&Measured>> = BTreeMap::new();
    for row in rows {
        by_problem.entry(row.problem.key()).or_default().push(row);
    }
    let mut out = Vec::new();
    for rows in by_problem.values() {
        let p = &rows[0].problem;
        let Some(model) = set.model(p) else { continue };
        let timed: Vec<&Measured> = rows.iter().copied().filter(|r| r.ms.is_some()).collect();
        if timed.is_empty() {
            continue;
        }
        let ms = |i: usize| timed[i].ms.expect("timed");
        let oracle = (0..timed.len()).min_by(|&a, &b| ms(a).total_cmp(&ms(b))).expect("a timed row");
        // Ranked as selection ranks: among the candidates it would propose (all, where it
        // would propose none of these).
        let mut proposed: Vec<usize> =
            (0..timed.len()).filter(|&i| model.proposes(&timed[i].solver, &timed[i].config.to_string())).collect();
        if proposed.is_empty() {
            proposed = (0..timed.len()).collect();
        }
        let candidates: Vec<&Measured> = proposed.iter().map(|&i| timed[i]).collect();
        let started = Instant::now();
        let (rows, _) = rows_of(&model.spec, &candidates);
        let (ranked_ms, ranked) = model.rank(p, &ProblemRow::new(p, timed[0].facts), &rows, |i| {
            let c = candidates[i];
            (c.solver.as_str(), &c.config, c.vendor.listed.then_some(c.vendor))
        });
        let rank_us = started.elapsed().as_secs_f64() * 1e6;
        let order: Vec<usize> = ranked.iter().map(|&i| proposed[i]).collect();
        let pick = order[0];
        // Every candidate's whole prediction (not screened), for the predicted-against-measured chart.
        let log_ms = model.predict(&timed);
        let vendor_best = |marked: fn(&Measured) -> bool| {
            timed.iter().filter(|r| marked(r)).filter_map(|r| r.ms).min_by(f64::total_cmp)
        };
        out.push(Outcome {
            problem: p.clone(),
            oracle: (timed[oracle].solver.clone(), timed[oracle].config.clone()),
            oracle_ms: ms(oracle),
            pick: (timed[pick].solver.clone(), timed[pick].config.clone()),
            pick_ms: ms(pick),
            predicted_ms: ranked_ms[ranked[0]].exp(),
            oracle_rank: order.iter().position(|&i| ms(i) <= ms(oracle)).unwrap_or(order.len()),
            vendor_heuristic_ms: vendor_best(|r| r.vendor.heuristic),
            vendor_find_ms: vendor_best(|r| r.vendor.find),
            predictions: (0..timed.len()).map(|i| (log_ms[i].exp(), ms(i))).collect(),
            rank_us,
            ranked: candidates.len(),
        });
    }
    out
}

/// Efficiency statistics of a set of outcomes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Summary {
    pub problems: usize,
    pub mean: f64,
    pub median: f64,
    /// The efficiency 90% of problems reach or beat.
    pub p10: f64,
    pub top1: f64,
    pub top5: f64,
    /// Geomean of vendor heuristic time over the pick's, on problems with both (> 1: the
    /// model's pick is faster), and how many.
    pub vs_vendor_heuristic: Option<(f64, usize)>,
    pub vs_vendor_find: Option<(f64, usize)>,
    /// The vendor heuristic's own efficiency against the oracle (mean, median, P10).
    pub vendor_heuristic_efficiency: Option<(f64, f64, f64)>,
    /// The picks' summed time over the oracles' (>= 1): what a network of these layers pays.
    pub summed_pick: f64,
    /// The vendor heuristic's summed time over the oracles', on the problems it ran, and how many.
    pub summed_vendor_heuristic: Option<(f64, usize)>,
    /// The slowest pick, as a multiple of its oracle's time.
    pub slowest: f64,
}

/// The value at quantile `q` of ascending `sorted` (the nearest rank).
pub fn quantile(sorted: &[f64], q: f64) -> f64 {
    let at = ((sorted.len() - 1) as f64 * q).round() as usize;
    sorted[at]
}

/// Mean, median and P10 (the value 90% reach or beat) of efficiencies.
pub fn stats(mut values: Vec<f64>) -> (f64, f64, f64) {
    values.sort_by(f64::total_cmp);
    (values.iter().sum::<f64>() / values.len() as f64, quantile(&values, 0.5), quantile(&values, 0.1))
}

/// Summed first times over summed second times, and how many pairs.
pub fn summed_ratio(pairs: impl Iterator<Item = (f64, f64)>) -> Option<(f64, usize)> {
    let (mut a, mut b, mut n) = (0.0, 0.0, 0);
    for (x, y) in pairs {
        (a, b, n) = (a + x, b + y, n + 1);
    }
    (n > 0).then(|| (a / b, n))
}

fn geomean_ratio(pairs: impl Iterator<Item = (f64, f64)>) -> Option<(f64, usize)> {
    let logs: Vec<f64> = pairs.map(|(a, b)| (a / b).ln()).collect();
    (!logs.is_empty()).then(|| ((logs.iter().sum::<f64>() / logs.len() as f64).exp(), logs.len()))
}

pub fn summarize(outcomes: &[&Outcome]) -> Option<Summary> {
    if outcomes.is_empty() {
        return None;
    }
    let (mean, median, p10) = stats(outcomes.iter().map(|o| o.efficiency()).collect());
    let share =
        |hit: &dyn Fn(&Outcome) -> bool| outcomes.iter().filter(|o| hit(o)).count() as f64 / outcomes.len() as f64;
    let heuristic: Vec<f64> = outcomes.iter().filter_map(|o| o.vendor_heuristic_ms.map(|h| o.oracle_ms / h)).collect();
    Some(Summary {
        problems: outcomes.len(),
        mean,
        median,
        p10,
        top1: share(&|o| o.oracle_rank == 0),
        top5: share(&|o| o.oracle_rank < 5),
        vs_vendor_heuristic: geomean_ratio(
            outcomes.iter().filter_map(|o| o.vendor_heuristic_ms.map(|h| (h, o.pick_ms))),
        ),
        vs_vendor_find: geomean_ratio(outcomes.iter().filter_map(|o| o.vendor_find_ms.map(|f| (f, o.pick_ms)))),
        vendor_heuristic_efficiency: (!heuristic.is_empty()).then(|| stats(heuristic)),
        summed_pick: summed_ratio(outcomes.iter().map(|o| (o.pick_ms, o.oracle_ms))).map_or(1.0, |(r, _)| r),
        summed_vendor_heuristic: summed_ratio(
            outcomes.iter().filter_map(|o| o.vendor_heuristic_ms.map(|h| (h, o.oracle_ms))),
        ),
        slowest: outcomes.iter().map(|o| o.pick_ms / o.oracle_ms).fold(1.0, f64::max),
    })
}

/// Outcomes grouped by (direction, dtype), in order.
pub fn by_direction_and_dtype(outcomes: &[Outcome]) -> BTreeMap<(Direction, DataType), Vec<&Outcome>> {
    let mut groups: BTreeMap<(Direction, DataType), Vec<&Outcome>> = BTreeMap::new();
    for o in outcomes {
        groups.entry((o.problem.direction, o.problem.dtype)).or_default().push(o);
    }
    groups
}

/// Outcomes grouped by problem class (dense 1x1, dense, grouped, depthwise, 3D, 1D).
pub fn by_class(outcomes: &[Outcome]) -> BTreeMap<&'static str, Vec<&Outcome>> {
    let mut groups: BTreeMap<&'static str, Vec<&Outcome>> = BTreeMap::new();
    for o in outcomes {
        groups.entry(class_of(&o.problem)).or_default().push(o);
    }
    groups
}
