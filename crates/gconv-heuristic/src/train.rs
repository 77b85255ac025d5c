//! Training: one gradient-boosted regressor of log time per direction and data-type family,
//! from the timed rows of sweep CSVs (and rows exported from finds and tuning).

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use forust_ml::objective::ObjectiveType;
use forust_ml::{GradientBooster, Matrix};
use gconv_core::{ConvProblem, Direction};

use crate::features::{FeatureSpec, ProblemRow};
use crate::forest::Forest;
use crate::measured::Measured;
use crate::model::{Family, Manifest, Model, MODEL_FORMAT};
use crate::problems::shape_key;
use crate::{Error, Result};

#[derive(Debug, Clone, Copy)]
pub struct TrainOptions {
    pub trees: usize,
    pub max_depth: usize,
    pub learning_rate: f32,
    pub seed: u64,
}

impl Default for TrainOptions {
    fn default() -> Self {
        TrainOptions { trees: 300, max_depth: 6, learning_rate: 0.1, seed: 0 }
    }
}

/// Trains the models of every (direction, family) the timed rows cover. All rows must come
/// from one device; `sources` goes into each model's manifest.
pub fn train(rows: &[Measured], sources: &[String], opts: &TrainOptions) -> Result<Vec<Model>> {
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
    groups.into_iter().map(|((direction, family), rows)| fit(direction, family, &rows, sources, opts)).collect()
}

fn fit(
    direction: Direction,
    family: Family,
    rows: &[&Measured],
    sources: &[String],
    opts: &TrainOptions,
) -> Result<Model> {
    let solvers: BTreeSet<String> = rows.iter().map(|r| r.solver.clone()).collect();
    let fields: BTreeSet<String> = rows.iter().flat_map(|r| r.config.fields().iter().map(|(n, _)| n.clone())).collect();
    let spec = FeatureSpec::new(solvers.into_iter().collect(), fields.into_iter().collect());
    // Solver -> config -> the shapes it was measured on.
    type SeenOn = BTreeMap<String, BTreeMap<String, HashSet<String>>>;
    let (mut listed, mut trained): (SeenOn, SeenOn) = Default::default();
    for row in rows {
        let configs = if row.vendor.listed { &mut listed } else { &mut trained };
        let shapes = configs.entry(row.solver.clone()).or_default().entry(row.config.to_string()).or_default();
        shapes.insert(shape_key(&row.problem));
    }
    let widely = |seen: SeenOn| seen.into_iter().map(|(solver, configs)| (solver, widely_seen(configs))).collect();
    let (listed, trained) = (widely(listed), widely(trained));
    let facts = rows[0].facts;
    let (matrix, width) = rows_of(&spec, rows);
    let targets: Vec<f64> = rows.iter().map(|r| r.ms.expect("timed rows").ln()).collect();
    // forust reads columns: column j of row i at j * rows + i.
    let mut columns = vec![0.0; matrix.len()];
    for (i, row) in matrix.chunks_exact(width).enumerate() {
        for (j, &v) in row.iter().enumerate() {
            columns[j * rows.len() + i] = v;
        }
    }
    let mut booster = GradientBooster::default()
        .set_objective_type(ObjectiveType::SquaredLoss)
        .set_iterations(opts.trees)
        .set_learning_rate(opts.learning_rate)
        .set_max_depth(opts.max_depth)
        .set_seed(opts.seed)
        .set_parallel(true);
    let weights = vec![1.0; rows.len()];
    booster
        .fit(&Matrix::new(&columns, rows.len(), width), &targets, &weights, None)
        .map_err(|e| Error::Training(format!("{direction} {}: {e}", family.token())))?;
    let forest = Forest::from_booster(&booster);
    let mut predicted = Vec::new();
    forest.predict(&matrix, width, &mut predicted);
    let train_rmse =
        (predicted.iter().zip(&targets).map(|(p, t)| (p - t).powi(2)).sum::<f64>() / targets.len() as f64).sqrt();
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
        manifest: Manifest {
            rows: rows.len(),
            problems: problems.len(),
            shapes: shapes.len(),
            sources: sources.to_vec(),
            trees: forest.trees(),
            max_depth: opts.max_depth,
            learning_rate: opts.learning_rate,
            train_rmse,
        },
        spec,
        forest,
    })
}

/// Training shapes a config must have been measured on to become a candidate.
const MIN_SHAPES: usize = 2;

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

/// The feature rows of measured candidates, row after row, and their width. A listed
/// solver's workspace is left out: selection knows it only once the library plans the config.
pub fn rows_of(spec: &FeatureSpec, rows: &[&Measured]) -> (Vec<f64>, usize) {
    let mut problem_rows: HashMap<&ConvProblem, ProblemRow> = HashMap::new();
    let mut out = Vec::with_capacity(rows.len() * spec.width());
    for r in rows {
        let problem = problem_rows.entry(&r.problem).or_insert_with(|| ProblemRow::new(&r.problem, r.facts));
        let workspace = (!r.vendor.listed).then_some(r.workspace_bytes);
        spec.push_row(problem, &r.solver, &r.config, workspace, &mut out);
    }
    (out, spec.width())
}

#[cfg(test)]
mod tests {
    use super::*;

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
