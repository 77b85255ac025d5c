//! Training: one gradient-boosted regressor of log time per direction and data-type family,
//! from the timed rows of sweep CSVs (and rows exported from finds and tuning).

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use gconv_core::{Config, ConvProblem, Direction};
use serde::{Deserialize, Serialize};

use crate::boost::{columns, grow, grow_ranked, row_weights};
use crate::features::{bound_ln_ms, rows_of, FeatureSpec, ProblemRow};
use crate::forest::MAX_DEPTH;
use crate::measured::Measured;
use crate::model::{by_time, coverage_class, Family, Model, Target, MODEL_FORMAT};
use crate::problems::{shape_hash, shape_key};
use crate::{Error, Result};

/// How models are trained; a model's manifest keeps them (a field absent from an older file
/// takes its default, what training did before the field existed).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct TrainOptions {
    pub trees: usize,
    pub max_depth: usize,
    pub learning_rate: f32,
    /// Weight of a pairwise loss between each problem's candidates beside the squared error of
    /// log time (`boost.rs`); 0: squared error alone.
    pub ranking: f64,
    #[serde(skip)]
    pub seed: u64,
    /// A vendor config's place on the library's find list as a feature, where most training
    /// rows on the list have it ([`FeatureSpec::ranking_where_known`]); off for models to be
    /// validated on sweeps that lack it, whose rows would read as off the list.
    pub vendor_rank: bool,
    /// Each problem weighs the same in the loss, its rows sharing one unit; otherwise each row
    /// weighs one, so a problem with a long candidate list (cuDNN's configs) counts for more.
    pub equal_problem_weight: bool,
    /// The alignment columns ([`crate::features::ALIGNMENT_FEATURES`]) among the features.
    pub alignment: bool,
}

impl Default for TrainOptions {
    fn default() -> Self {
        TrainOptions {
            trees: 300,
            max_depth: 6,
            learning_rate: 0.1,
            ranking: 0.0,
            seed: 0,
            vendor_rank: true,
            equal_problem_weight: false,
            alignment: false,
        }
    }
}

/// What a model was trained on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    /// Timed candidates it learned from.
    pub rows: usize,
    /// Problems (a shape in one direction and dtype) and distinct shapes among them.
    pub problems: usize,
    pub shapes: usize,
    /// The sweep CSVs read, in order.
    pub sources: Vec<String>,
    /// The options it was trained with (`trees` the trees grown), as fields of the manifest.
    #[serde(flatten)]
    pub options: TrainOptions,
    /// Root-mean-square error of log time on the training rows.
    pub train_rmse: f64,
    /// Whether the pick's stage one earned its place (see [`StageOneCheck`]); absent where the
    /// training shapes were too few to hold some out.
    #[serde(default)]
    pub stage_one: Option<StageOneCheck>,
}

/// The check that keeps stage one: a model trained on the other training shapes picks among
/// the measured candidates of held-out shapes with stage one and without, and stage one stays
/// when its picks' summed time is no longer. Both sums are over the held-out oracles' sum.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct StageOneCheck {
    pub problems: usize,
    pub without: f64,
    pub with: f64,
}

/// Trains the models of every (direction, family) the timed rows cover. All rows must come
/// from one device; `sources` goes into each model's manifest.
pub fn train(rows: &[Measured], sources: &[String], opts: &TrainOptions) -> Result<Vec<Model>> {
    if !(1..=MAX_DEPTH).contains(&opts.max_depth) {
        return Err(Error::Training(format!("a tree's depth must be 1 to {MAX_DEPTH}, not {}", opts.max_depth)));
    }
    let timed: Vec<&Measured> = rows.iter().filter(|r| r.ms.is_some()).collect();
    let devices: BTreeSet<&str> = timed.iter().map(|r| r.device.as_str()).collect();
    if devices.len() > 1 {
        return Err(Error::Training(format!(
            "the rows come from {} devices ({}); train one device's rows at a time",
            devices.len(),
            devices.into_iter().collect::<Vec<_>>().join(", ")
        )));
    }
    let mut groups: BTreeMap<(Direction, Family), Vec<&Measured>> = BTreeMap::new();
    for row in timed {
        groups.entry((row.problem.direction, Family::of(row.problem.dtype))).or_default().push(row);
    }
    if groups.is_empty() {
        return Err(Error::Training("no timed row to learn from".into()));
    }
    groups
        .into_iter()
        .map(|((direction, family), timed)| {
            let mut model = fit(direction, family, &timed, sources, opts)?;
            let ours = |r: &&Measured| r.problem.direction == direction && Family::of(r.problem.dtype) == family;
            model.wrong = problems_by_class(rows.iter().filter(|r| r.wrong).filter(ours));
            Ok(model)
        })
        .collect()
}

/// Each coverage class of `rows` ([`coverage_class`]) and on how many problems it has a row.
fn problems_by_class<'a>(rows: impl IntoIterator<Item = &'a Measured>) -> BTreeMap<String, usize> {
    let mut by_class: BTreeMap<String, HashSet<&ConvProblem>> = BTreeMap::new();
    for row in rows {
        let class = coverage_class(row.vendor.listed, &row.problem, &row.solver, &row.config);
        by_class.entry(class).or_default().insert(&row.problem);
    }
    by_class.into_iter().map(|(class, problems)| (class, problems.len())).collect()
}

/// Folds of the training shapes for the stage-one check, and the fewest problems it needs.
const FOLDS: u32 = 5;
const CHECKED_PROBLEMS: usize = 10;
/// The share of the cross-validated summed pick time stage one must leave to be kept: on a
/// few dozen shapes a sum moves by several percent with one problem's pick, so a smaller
/// gain is not told from noise.
const STAGE_ONE_GAIN: f64 = 0.9;

/// The model of one direction and family, with stage one where it earns its place.
fn fit(
    direction: Direction,
    family: Family,
    rows: &[&Measured],
    sources: &[String],
    opts: &TrainOptions,
) -> Result<Model> {
    let check = stage_one_check(direction, family, rows, opts)?;
    let mut model = fit_stages(direction, family, rows, sources, opts)?;
    if !check.is_some_and(|c| c.with <= STAGE_ONE_GAIN * c.without) {
        model.solver_forest = None;
    }
    model.manifest.stage_one = check;
    Ok(model)
}

/// Cross-validated picks: the training shapes in [`FOLDS`] folds (by a hash of the shape), and
/// each fold's problems picked by a model trained on the other folds, with stage one and
/// without; `None` where the rows hold too few problems.
fn stage_one_check(
    direction: Direction,
    family: Family,
    rows: &[&Measured],
    opts: &TrainOptions,
) -> Result<Option<StageOneCheck>> {
    let problems: HashSet<&ConvProblem> = rows.iter().map(|r| &r.problem).collect();
    if problems.len() < CHECKED_PROBLEMS {
        return Ok(None);
    }
    let (mut oracle, mut without, mut with) = (0.0, 0.0, 0.0);
    for fold in 0..FOLDS {
        let (held, kept): (Vec<&Measured>, Vec<&Measured>) = rows.iter().partition(|r| fold_of(&r.problem) == fold);
        if held.is_empty() || kept.is_empty() {
            continue;
        }
        let trial = fit_stages(direction, family, &kept, &[], opts)?;
        let mut by_problem: BTreeMap<String, Vec<&Measured>> = BTreeMap::new();
        for row in held {
            by_problem.entry(row.problem.key()).or_default().push(row);
        }
        for candidates in by_problem.values() {
            let [best, one_stage, two_stage] = picks(&trial, candidates);
            (oracle, without, with) = (oracle + best, without + one_stage, with + two_stage);
        }
    }
    Ok(Some(StageOneCheck { problems: problems.len(), without: without / oracle, with: with / oracle }))
}

/// The measured times of a problem's best candidate, of `model`'s pick without stage one and
/// of its pick with it.
fn picks(model: &Model, candidates: &[&Measured]) -> [f64; 3] {
    let ms = |i: usize| candidates[i].ms.expect("timed rows");
    let log_ms = model.predict(candidates);
    let solvers: Vec<&str> = candidates.iter().map(|r| r.solver.as_str()).collect();
    let problem = ProblemRow::new(&candidates[0].problem, candidates[0].facts);
    let two_stage = model.pick_order(&problem, &solvers, &log_ms);
    [
        (0..candidates.len()).map(ms).fold(f64::INFINITY, f64::min),
        ms(model.first_proposed(candidates, &by_time(&log_ms))),
        ms(model.first_proposed(candidates, &two_stage)),
    ]
}

/// A training shape's fold for the stage-one check: a hash of the shape salted apart from
/// `is_validation`'s, whose share the training files already leave out.
fn fold_of(p: &ConvProblem) -> u32 {
    shape_hash(p, "stage one ") % FOLDS
}

/// The model of `rows` with both stages.
fn fit_stages(
    direction: Direction,
    family: Family,
    rows: &[&Measured],
    sources: &[String],
    opts: &TrainOptions,
) -> Result<Model> {
    let solvers: BTreeSet<String> = rows.iter().map(|r| r.solver.clone()).collect();
    let fields: BTreeSet<String> = rows.iter().flat_map(|r| r.config.fields().iter().map(|(n, _)| n.clone())).collect();
    let spec = FeatureSpec::new(solvers.into_iter().collect(), fields.into_iter().collect());
    let spec = if opts.vendor_rank { spec.ranking_where_known(rows) } else { spec };
    let spec = FeatureSpec { alignment: opts.alignment, ..spec };
    // Solver -> config -> the shapes it was measured on.
    type SeenOn = BTreeMap<String, BTreeMap<String, HashSet<String>>>;
    let (mut listed, mut trained): (SeenOn, SeenOn) = Default::default();
    let fastest = fastest_by_problem(rows);
    let mut near_best: HashSet<(&str, String)> = HashSet::new();
    for row in rows {
        let configs = if row.vendor.listed { &mut listed } else { &mut trained };
        let shapes = configs.entry(row.solver.clone()).or_default().entry(row.config.to_string()).or_default();
        shapes.insert(shape_key(&row.problem));
        if row.ms.is_some_and(|ms| !row.wrong && ms <= NEAR_BEST * fastest[&row.problem]) {
            near_best.insert((&row.solver, row.config.to_string()));
        }
    }
    let coverage = problems_by_class(rows.iter().copied());
    let near = |(solver, configs): (String, Vec<String>)| {
        let near: Vec<String> =
            configs.iter().filter(|c| near_best.contains(&(solver.as_str(), c.to_string()))).cloned().collect();
        (solver, if near.is_empty() { configs } else { near })
    };
    let widely = |seen: SeenOn| seen.into_iter().map(|(solver, configs)| (solver, widely_seen(configs)));
    let listed = widely(listed).map(near).collect();
    let trained = widely(trained).map(near).collect();
    let facts = rows[0].facts;
    let (matrix, width) = rows_of(&spec, rows);
    let targets: Vec<f64> = rows.iter().map(|r| target_of(r)).collect();
    let mut numbered: HashMap<&ConvProblem, usize> = HashMap::new();
    let problem: Vec<usize> = rows
        .iter()
        .map(|r| {
            let next = numbered.len();
            *numbered.entry(&r.problem).or_insert(next)
        })
        .collect();
    let row_weight = row_weights(&problem, opts.equal_problem_weight);
    let forest = match opts.ranking > 0.0 {
        true => grow_ranked(&columns(&matrix, width), width, &targets, &row_weight, &problem, opts.ranking, opts),
        false => grow(&matrix, width, &targets, &row_weight, opts),
    }
    .map_err(|e| Error::Training(format!("{direction} {}: {e}", family.token())))?;
    let mut predicted = Vec::new();
    forest.predict(&matrix, width, &mut predicted);
    let train_rmse =
        (predicted.iter().zip(&targets).map(|(p, t)| (p - t).powi(2)).sum::<f64>() / targets.len() as f64).sqrt();
    let (best_matrix, best_targets) = solver_bests(&spec, rows);
    // Stage one learns from a row per problem and solver, a few hundred: a third of the trees
    // at three times the rate fit them as well (H100 validation) in a smaller file.
    let stage_one = TrainOptions {
        trees: opts.trees.div_ceil(3),
        learning_rate: (opts.learning_rate * 3.0).min(1.0),
        ranking: 0.0,
        ..*opts
    };
    let solver_forest = grow(&best_matrix, width, &best_targets, &vec![1.0; best_targets.len()], &stage_one)
        .map_err(|e| Error::Training(format!("{direction} {} (stage one): {e}", family.token())))?;
    let problems: HashSet<&ConvProblem> = rows.iter().map(|r| &r.problem).collect();
    let shapes: HashSet<String> = problems.iter().map(|p| shape_key(p)).collect();
    Ok(Model {
        format: MODEL_FORMAT,
        gconv_version: env!("CARGO_PKG_VERSION").to_string(),
        device: rows[0].device.clone(),
        device_facts: facts,
        direction,
        family,
        listed,
        trained,
        coverage,
        wrong: BTreeMap::new(),
        manifest: Manifest {
            rows: rows.len(),
            problems: problems.len(),
            shapes: shapes.len(),
            sources: sources.to_vec(),
            options: TrainOptions { trees: forest.trees(), ..*opts },
            train_rmse,
            stage_one: None,
        },
        spec,
        target: Target::OverBound,
        forest,
        solver_forest: Some(solver_forest),
    })
}

/// What the trees learn of a timed row: its log time over its problem's bound ([`Target::OverBound`]).
fn target_of(row: &Measured) -> f64 {
    row.ms.expect("timed rows").ln() - Target::OverBound.offset(bound_ln_ms(&row.problem))
}

/// Stage one's training rows: for each problem and solver, the solver alone (no config, no
/// workspace) and the log of its fastest config's time.
fn solver_bests(spec: &FeatureSpec, rows: &[&Measured]) -> (Vec<f64>, Vec<f64>) {
    let mut best: BTreeMap<(String, &str), &Measured> = BTreeMap::new();
    for row in rows {
        let fastest = best.entry((row.problem.key(), row.solver.as_str())).or_insert(row);
        if row.ms < fastest.ms {
            *fastest = row;
        }
    }
    let (mut matrix, mut targets) = (Vec::new(), Vec::new());
    for row in best.into_values() {
        spec.push_row(
            &ProblemRow::new(&row.problem, row.facts),
            &row.solver,
            &Config::empty(),
            None,
            None,
            &mut matrix,
        );
        targets.push(target_of(row));
    }
    (matrix, targets)
}

/// Training shapes a config must have been measured on to become a candidate.
const MIN_SHAPES: usize = 2;

/// How near the fastest candidate of some training problem a config must have run to stay a
/// candidate: one that never came within it ranks for nothing. On the H200's validation sets
/// 1.2 cut the half models' cuDNN configs by 35-64% (bwd-weight 783 -> 278), picking as well
/// (held-out bf16 1.140x -> 1.125x summed, the others within 0.2%; 1.1 and 1.5 the same), and
/// their own solvers' trained configs by half (bwd-weight 297 -> 104), picks within 0.2 points
/// of mean (data/models/README.md).
const NEAR_BEST: f64 = 1.2;

/// Each problem's fastest verified time.
fn fastest_by_problem<'r>(rows: &[&'r Measured]) -> HashMap<&'r ConvProblem, f64> {
    let mut fastest: HashMap<&ConvProblem, f64> = HashMap::new();
    for row in rows {
        let time = row.ms.filter(|_| !row.wrong).unwrap_or(f64::INFINITY);
        let best = fastest.entry(&row.problem).or_insert(f64::INFINITY);
        *best = best.min(time);
    }
    fastest
}

/// The configs measured on at least [`MIN_SHAPES`] training shapes (all of them where none
/// was): those selection ranks, beside an own solver's default for the problem. A config seen
/// on one shape carries knobs sized for it (a vendor library's split factor, the tile of a
/// space swept whole on one shape), which the trees would carry over to every other shape by
/// extrapolation; its rows still train them.
fn widely_seen(configs: BTreeMap<String, HashSet<String>>) -> Vec<String> {
    let wide: Vec<String> =
        configs.iter().filter(|(_, shapes)| shapes.len() >= MIN_SHAPES).map(|(c, _)| c.clone()).collect();
    if wide.is_empty() {
        configs.into_keys().collect()
    } else {
        wide
    }
}

#[cfg(test)]
mod tests {
    use gconv_core::DeviceFacts;

    use super::*;
    use crate::measured::VendorMarks;

    #[test]
    fn equal_problem_weight_gives_each_problem_one_share_and_keeps_the_mean_at_one() {
        assert_eq!(row_weights(&[0, 0, 0, 1], false), vec![1.0; 4]);
        let weights = row_weights(&[0, 0, 0, 1], true);
        assert!((weights[0] * 3.0 - weights[3]).abs() < 1e-12);
        assert!((weights.iter().sum::<f64>() - 4.0).abs() < 1e-12);
    }

    #[test]
    fn the_pick_takes_solvers_in_stage_one_order_and_configs_in_stage_two_order() {
        // Solver `a` has one fast config among slow ones, `b` one middling config: `a` is
        // the better solver on every problem, whatever its average config.
        let mut rows = Vec::new();
        for c in [16, 32, 48, 64, 80, 96] {
            let problem =
                ConvProblem::from_key(&format!("v1:fwd:f32:NHWC:n8:c{c}:k64:i14x14:f3x3:s1x1:p1x1:d1x1")).unwrap();
            let scale = f64::from(c) / 16.0;
            for (solver, config, ms) in [("a", 1, 1.0), ("a", 2, 9.0), ("a", 3, 10.0), ("a", 4, 11.0), ("b", 1, 3.0)] {
                rows.push(Measured {
                    problem: problem.clone(),
                    solver: solver.into(),
                    config: Config::new([("x", config)]),
                    ms: Some(ms * scale),
                    workspace_bytes: 0,
                    device: "test".into(),
                    facts: DeviceFacts { units: 8, clock_mhz: 1000 },
                    vendor: VendorMarks::default(),
                    wrong: false,
                });
            }
        }
        let opts = TrainOptions { trees: 40, max_depth: 3, learning_rate: 0.3, ..TrainOptions::default() };
        let timed: Vec<&Measured> = rows.iter().collect();
        let model = fit_stages(Direction::Forward, Family::Fp32, &timed, &[], &opts).unwrap();
        assert!(model.solver_forest.is_some());
        let p = &rows[10].problem;
        let candidates: Vec<&Measured> = rows.iter().filter(|r| r.problem == *p).collect();
        let (matrix, width) = rows_of(&model.spec, &candidates);
        let mut log_ms = Vec::new();
        model.forest.predict(&matrix, width, &mut log_ms);
        let solvers: Vec<&str> = candidates.iter().map(|r| r.solver.as_str()).collect();
        let order = model.pick_order(&ProblemRow::new(p, rows[0].facts), &solvers, &log_ms);
        let picked: Vec<(&str, u32)> =
            order.iter().map(|&i| (solvers[i], candidates[i].config.get("x").unwrap())).collect();
        assert_eq!(picked[0], ("a", 1), "the fast config of the better solver first: {picked:?}");
        assert_eq!(picked[4].0, "b", "all of the better solver's configs before the other's: {picked:?}");
    }

    #[test]
    fn a_layer_larger_than_any_in_training_is_predicted_slower_than_them() {
        // One solver at a steady 80% of the bound on layers of 1-8 images; then 64 images.
        let problem = |n: u32| {
            ConvProblem::from_key(&format!("v1:fwd:f32:NHWC:n{n}:c256:k256:i28x28:f3x3:s1x1:p1x1:d1x1")).unwrap()
        };
        let rows: Vec<Measured> = (1..=8)
            .map(|n| Measured {
                problem: problem(n),
                solver: "a".into(),
                config: Config::new([("x", 1)]),
                ms: Some(bound_ln_ms(&problem(n)).exp() / 0.8),
                workspace_bytes: 0,
                device: "test".into(),
                facts: DeviceFacts { units: 8, clock_mhz: 1000 },
                vendor: VendorMarks::default(),
                wrong: false,
            })
            .collect();
        let opts = TrainOptions { trees: 40, max_depth: 3, learning_rate: 0.3, ..TrainOptions::default() };
        let model = train(&rows, &[], &opts).unwrap().remove(0);
        assert_eq!(model.target, Target::OverBound);
        let large = Measured { problem: problem(64), ..rows[0].clone() };
        let predicted = model.predict(&[&large])[0].exp();
        let slowest_trained = rows.iter().filter_map(|r| r.ms).fold(0.0, f64::max);
        let expected = bound_ln_ms(&large.problem).exp() / 0.8;
        assert!(predicted > 4.0 * slowest_trained, "{predicted} ms, the slowest trained {slowest_trained} ms");
        assert!((predicted / expected - 1.0).abs() < 0.1, "{predicted} ms for {expected} ms");
    }

    #[test]
    fn the_vendor_rank_is_a_feature_where_known_unless_left_out() {
        let rows: Vec<Measured> = (1..=4)
            .map(|i| Measured {
                problem: ConvProblem::from_key(&format!("v1:fwd:f32:NHWC:n{i}:c16:k16:i8x8:f3x3:s1x1:p1x1:d1x1"))
                    .unwrap(),
                solver: "lib".into(),
                config: Config::new([("eng", i)]),
                ms: Some(f64::from(i)),
                workspace_bytes: 0,
                device: "test".into(),
                facts: DeviceFacts { units: 8, clock_mhz: 1000 },
                vendor: VendorMarks { listed: true, heuristic: i == 1, find: true, find_rank: Some(i as u16 - 1) },
                wrong: false,
            })
            .collect();
        let opts = TrainOptions { trees: 5, max_depth: 2, ..TrainOptions::default() };
        let spec = |opts: &TrainOptions| train(&rows, &[], opts).unwrap().remove(0).spec;
        assert!(spec(&opts).vendor_rank);
        assert!(!spec(&TrainOptions { vendor_rank: false, ..opts }).vendor_rank);
    }

    #[test]
    fn a_config_never_near_a_problems_best_is_no_candidate() {
        // e1 the fastest everywhere, e2 within 1.2x of it on one problem, e3 at 2x, e4 at 5x.
        let times = |c: u32, engine: u32| match engine {
            1 => 1.0,
            2 if c == 32 => 1.15,
            2 => 3.0,
            3 => 2.0,
            _ => 5.0,
        };
        // A library's configs (listed) and an own solver's (trained) alike.
        for listed in [true, false] {
            let rows: Vec<Measured> = (1..=4u32)
                .flat_map(|i| (1..=4u32).map(move |e| (16 * i, e)))
                .map(|(c, e)| Measured {
                    problem: ConvProblem::from_key(&format!("v1:fwd:f16:NHWC:n4:c{c}:k16:i8x8:f3x3:s1x1:p1x1:d1x1"))
                        .unwrap(),
                    solver: "lib".into(),
                    config: Config::new([("eng", e)]),
                    ms: Some(times(c, e)),
                    workspace_bytes: 0,
                    device: "test".into(),
                    facts: DeviceFacts { units: 8, clock_mhz: 1000 },
                    vendor: VendorMarks { listed, heuristic: listed && e == 1, find: listed, find_rank: None },
                    wrong: false,
                })
                .collect();
            let opts = TrainOptions { trees: 5, max_depth: 2, ..TrainOptions::default() };
            let model = train(&rows, &[], &opts).unwrap().remove(0);
            let kept = match listed {
                true => model.listed_configs("lib"),
                false => model.trained_configs("lib").unwrap(),
            };
            let kept: Vec<String> = kept.iter().map(|c| c.to_string()).collect();
            assert_eq!(kept, ["eng1", "eng2"], "listed: {listed}");
            assert!(model.proposes("lib", "eng2") && !model.proposes("lib", "eng3"), "listed: {listed}");
        }
    }

    #[test]
    fn the_guard_puts_barely_covered_classes_after_the_rest_and_wrong_ones_last() {
        let problem =
            |c: u32| ConvProblem::from_key(&format!("v1:fwd:f32:NHWC:n8:c{c}:k64:i14x14:f3x3:s1x1:p1x1:d1x1")).unwrap();
        let row = |p: &ConvProblem, solver: &str, ms: Option<f64>| Measured {
            problem: p.clone(),
            solver: solver.into(),
            config: Config::new([("x", 1)]),
            ms,
            workspace_bytes: 0,
            device: "test".into(),
            facts: DeviceFacts { units: 8, clock_mhz: 1000 },
            vendor: VendorMarks::default(),
            wrong: ms.is_none(),
        };
        // `a`, `b` and `w` timed on eight problems, `w` wrong on one more; `c` timed on one.
        let mut rows = Vec::new();
        for c in (1..=8).map(|i| i * 16) {
            rows.extend(["a", "b", "w"].map(|solver| row(&problem(c), solver, Some(2.0))));
        }
        rows.extend([row(&problem(16), "c", Some(1.0)), row(&problem(144), "w", None)]);
        let opts = TrainOptions { trees: 10, max_depth: 3, learning_rate: 0.3, ..TrainOptions::default() };
        let model = train(&rows, &[], &opts).unwrap().remove(0);
        assert_eq!(model.coverage.get("a NHWC dense"), Some(&8));
        assert_eq!(model.coverage.get("c NHWC dense"), Some(&1));
        assert_eq!(model.wrong.keys().collect::<Vec<_>>(), ["w NHWC dense"]);
        let config = Config::new([("x", 1)]);
        let candidates = ["w", "c", "a", "b"];
        let mut order = vec![0, 1, 3, 2];
        model.guard(&problem(200), |i| (candidates[i], &config), &mut order);
        assert_eq!(order, [3, 2, 1, 0], "the covered in their order, then c, then w");
        let mut alone = vec![0];
        model.guard(&problem(200), |_| ("c", &config), &mut alone);
        assert_eq!(alone, [0], "a barely covered class among its like stays");

        // Library configs 0-2 (2 the library's heuristic pick), 3 another solver's.
        let marks =
            |i: usize| (i < 3).then_some(VendorMarks { listed: true, heuristic: i == 2, find: true, find_rank: None });
        let deferred = |log_ms: [f64; 4], mut order: Vec<usize>| {
            model.defer_to_vendor(&log_ms, marks, &mut order);
            order
        };
        assert_eq!(
            deferred([0.0, 0.01, 0.05, 0.5], vec![0, 1, 2, 3]),
            [2, 0, 1, 3],
            "within a tenth: the library's pick"
        );
        assert_eq!(deferred([0.0, 0.01, 0.2, 0.5], vec![0, 1, 2, 3]), [0, 1, 2, 3], "a fifth slower: the model's");
        assert_eq!(
            deferred([0.1, 0.01, 0.05, 0.0], vec![3, 1, 2, 0]),
            [3, 1, 2, 0],
            "the pick not the library's: kept"
        );
    }

    #[test]
    fn a_config_seen_on_one_shape_is_no_candidate_unless_none_is_seen_wider() {
        let shape = |c: u32, dtype: &str| {
            let p =
                ConvProblem::from_key(&format!("v1:bwd-weight:{dtype}:NHWC:n8:c{c}:k64:i14x14:f3x3:s1x1:p1x1:d1x1"));
            shape_key(&p.unwrap())
        };
        let (a, b, a_in_f16) = (shape(32, "bf16"), shape(64, "bf16"), shape(32, "f16"));
        let seen = |entries: &[(&str, &[&String])]| -> BTreeMap<String, HashSet<String>> {
            entries.iter().map(|(c, shapes)| (c.to_string(), shapes.iter().map(|s| s.to_string()).collect())).collect()
        };
        let split_for_one_shape = seen(&[("eng1", &[&a, &b]), ("eng49_k0=131", &[&a, &a_in_f16])]);
        assert_eq!(widely_seen(split_for_one_shape), ["eng1"]);
        let each_once = seen(&[("eng1", &[&a]), ("eng2", &[&b])]);
        assert_eq!(widely_seen(each_once), ["eng1", "eng2"]);
    }
}
