//! Boosting toward a pick rather than a time: the squared error of log time (which keeps the
//! output a time, for screening, stage one and the printers) plus a pairwise logistic loss
//! between the candidates of each problem, weighted by how much slower the slower of the two is
//! (a swap of two near-equal candidates costs nothing, one with a 5x slower candidate a lot).
//! forust has no custom objectives, so each round fits one of its trees to the round's Newton
//! step: targets -gradient / hessian, weighted by the hessian, under squared error. Plain
//! boosting of the squared error ([`grow`]) and the rows' weights are here too.

use forust_ml::objective::ObjectiveType;
use forust_ml::{GradientBooster, Matrix};

use crate::forest::Forest;
use crate::train::TrainOptions;

/// Pairs closer than this in log time (2%) are ties.
const TIE: f64 = 0.02;
/// A pair's weight stops growing at this gap in log time (about 7x).
const MOST: f64 = 2.0;

/// Trees fitted to `targets` (log times) from the feature rows of `columns` (forust's
/// column-major layout), where `problem[i]` numbers row i's problem, `row_weight[i]` scales
/// row i's share of the loss and `ranking` weighs the pairwise loss against the squared error.
pub fn grow_ranked(
    columns: &[f64],
    width: usize,
    targets: &[f64],
    row_weight: &[f64],
    problem: &[usize],
    ranking: f64,
    opts: &TrainOptions,
) -> Result<Forest, String> {
    let rows = targets.len();
    let matrix = Matrix::new(columns, rows, width);
    let pairs = pairs(targets, problem);
    let base = targets.iter().sum::<f64>() / rows as f64;
    let mut forest = Forest::empty(base);
    let mut predicted = vec![base; rows];
    let (mut step, mut weight) = (vec![0.0; rows], vec![0.0; rows]);
    for round in 0..opts.trees {
        newton_step(targets, &predicted, &pairs, ranking, &mut step, &mut weight);
        // A row's weight scales its gradient and hessian alike: the step stays, its pull grows.
        for (w, r) in weight.iter_mut().zip(row_weight) {
            *w *= r;
        }
        let mut booster = GradientBooster::default()
            .set_objective_type(ObjectiveType::SquaredLoss)
            .set_iterations(1)
            .set_learning_rate(opts.learning_rate)
            .set_max_depth(opts.max_depth)
            .set_base_score(0.0)
            .set_initialize_base_score(false)
            .set_seed(opts.seed.wrapping_add(round as u64))
            .set_parallel(true);
        booster.fit(&matrix, &step, &weight, None).map_err(|e| e.to_string())?;
        for (p, d) in predicted.iter_mut().zip(booster.predict(&matrix, true)) {
            *p += d;
        }
        forest.push_trees(&booster);
    }
    Ok(forest)
}

/// A pair of rows of one problem: the faster, the slower, and the pair's weight.
type Pair = (usize, usize, f64);

/// Every pair of one problem's rows apart by more than a tie, weighted by their gap (capped)
/// over the problem's row count, so that each problem weighs about as much as its rows.
fn pairs(targets: &[f64], problem: &[usize]) -> Vec<Pair> {
    let mut by_problem: std::collections::BTreeMap<usize, Vec<usize>> = Default::default();
    for (i, &p) in problem.iter().enumerate() {
        by_problem.entry(p).or_default().push(i);
    }
    let mut out = Vec::new();
    for rows in by_problem.values() {
        let n = rows.len() as f64;
        for (a, &i) in rows.iter().enumerate() {
            for &j in &rows[a + 1..] {
                let gap = targets[j] - targets[i];
                if gap.abs() > TIE {
                    let (fast, slow) = if gap > 0.0 { (i, j) } else { (j, i) };
                    out.push((fast, slow, gap.abs().min(MOST) / n));
                }
            }
        }
    }
    out
}

/// Each row's Newton step and weight: gradient g and hessian h of the squared error plus
/// `ranking` times the pairs' logistic loss log(1 + exp(-(F_slow - F_fast))).
fn newton_step(targets: &[f64], predicted: &[f64], pairs: &[Pair], ranking: f64, step: &mut [f64], weight: &mut [f64]) {
    let mut g: Vec<f64> = predicted.iter().zip(targets).map(|(f, y)| f - y).collect();
    let mut h = vec![1.0; targets.len()];
    for &(fast, slow, w) in pairs {
        // rho: the loss's slope, large where the slower row is predicted no slower.
        let rho = 1.0 / (1.0 + (predicted[slow] - predicted[fast]).exp());
        let (dg, dh) = (ranking * w * rho, ranking * w * rho * (1.0 - rho));
        g[fast] += dg;
        g[slow] -= dg;
        h[fast] += dh;
        h[slow] += dh;
    }
    for i in 0..targets.len() {
        step[i] = -g[i] / h[i];
        weight[i] = h[i];
    }
}

/// Each row's weight in the loss, `problem[i]` numbering row i's problem: one, or with
/// `equal_problem` one over its problem's rows, scaled so that the weights average one (the
/// trees' regularization keeps its meaning).
pub(crate) fn row_weights(problem: &[usize], equal_problem: bool) -> Vec<f64> {
    if !equal_problem {
        return vec![1.0; problem.len()];
    }
    let mut count = vec![0usize; problem.iter().max().map_or(0, |&p| p + 1)];
    for &p in problem {
        count[p] += 1;
    }
    let scale = problem.len() as f64 / count.len() as f64;
    problem.iter().map(|&p| scale / count[p] as f64).collect()
}

/// Gradient-boosted trees fitted to `targets` from the feature rows of `matrix`, row i weighing
/// `weights[i]`.
pub(crate) fn grow(
    matrix: &[f64],
    width: usize,
    targets: &[f64],
    weights: &[f64],
    opts: &TrainOptions,
) -> std::result::Result<Forest, String> {
    let rows = targets.len();
    let columns = columns(matrix, width);
    let mut booster = GradientBooster::default()
        .set_objective_type(ObjectiveType::SquaredLoss)
        .set_iterations(opts.trees)
        .set_learning_rate(opts.learning_rate)
        .set_max_depth(opts.max_depth)
        .set_seed(opts.seed)
        .set_parallel(true);
    booster.fit(&Matrix::new(&columns, rows, width), targets, weights, None).map_err(|e| e.to_string())?;
    Ok(Forest::from_booster(&booster))
}

/// The rows of `matrix` (each `width` long) as forust reads them: column j of row i at
/// j * rows + i.
pub(crate) fn columns(matrix: &[f64], width: usize) -> Vec<f64> {
    let rows = matrix.len() / width;
    let mut columns = vec![0.0; matrix.len()];
    for (i, row) in matrix.chunks_exact(width).enumerate() {
        for (j, &v) in row.iter().enumerate() {
            columns[j * rows + i] = v;
        }
    }
    columns
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pairs_loss_moves_the_faster_row_down_and_the_slower_up() {
        // Two rows of one problem predicted equal, one measured faster.
        let (targets, predicted) = ([0.0, 1.0], [0.5, 0.5]);
        let pairs = pairs(&targets, &[0, 0]);
        assert_eq!(pairs.len(), 1);
        let (mut step, mut weight) = ([0.0; 2], [0.0; 2]);
        newton_step(&targets, &predicted, &pairs, 0.0, &mut step, &mut weight);
        let squared = step;
        newton_step(&targets, &predicted, &pairs, 4.0, &mut step, &mut weight);
        assert!(step[0] < squared[0] && step[1] > squared[1], "{step:?} against {squared:?}");
        assert!(weight.iter().all(|&w| w > 1.0));
    }

    #[test]
    fn ties_and_rows_of_other_problems_make_no_pair() {
        let pairs = pairs(&[0.0, 0.01, 3.0], &[0, 0, 1]);
        assert!(pairs.is_empty(), "{pairs:?}");
    }
}
