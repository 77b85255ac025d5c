//! The trained trees in a flat form of our own: small to store, quick to walk. forust-ml grows
//! them; selection only walks them, tree by tree over all of a problem's candidates so that a
//! tree's nodes stay in cache, sixteen rows at a time, each walking as many steps as its tree is
//! deep without branching (1.5x to 1.8x faster than walks that stop at their leaf, on the H100
//! models' candidate lists), through each tree laid out complete (`Walk`: 15-20% faster than
//! following the trained nodes' child links, on the H200's 600-tree models). In ranking a
//! problem's candidates, only those that the first trees put ahead walk the rest (`Screen`).

use std::sync::OnceLock;

use forust_ml::GradientBooster;
use serde::{Deserialize, Serialize};

mod store;

/// 16 bytes, so a tree's nodes share few cache lines: a split sends a row left when its feature
/// (as f32) is below the threshold, and a NaN feature the way the `MISSING_LEFT` bit of the
/// feature says; a leaf (feature `LEAF`) holds its value in the threshold.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
struct Node(u32, f32, u32, u32);

/// The deepest tree a model may hold: the walk lays each tree out complete, 2^depth leaves.
pub const MAX_DEPTH: usize = 16;

const LEAF: u32 = u32::MAX;
const MISSING_LEFT: u32 = 1 << 31;

/// Stored level by level (`store.rs`); held with child links, which training and checks use.
#[derive(Debug, Clone)]
pub struct Forest {
    base: f64,
    /// Index of each tree's root in `nodes`.
    roots: Vec<u32>,
    nodes: Vec<Node>,
    /// The nodes laid out for walking, made on the first prediction.
    walk: OnceLock<Walk>,
}

impl PartialEq for Forest {
    fn eq(&self, other: &Self) -> bool {
        self.base == other.base && self.roots == other.roots && self.nodes == other.nodes
    }
}

impl Forest {
    /// The booster's trees. forust sends missing values to one of a split's two children
    /// unless asked to grow a third branch, which training never asks.
    pub fn from_booster(booster: &GradientBooster) -> Self {
        let mut forest = Forest::empty(booster.base_score);
        forest.push_trees(booster);
        forest
    }

    /// No tree yet: every prediction is `base`.
    pub fn empty(base: f64) -> Self {
        Forest { base, roots: Vec::new(), nodes: Vec::new(), walk: OnceLock::new() }
    }

    /// Adds the booster's trees (not its base score).
    pub fn push_trees(&mut self, booster: &GradientBooster) {
        self.walk = OnceLock::new();
        let forest = self;
        for tree in &booster.trees {
            let offset = forest.nodes.len() as u32;
            // forust numbers a tree's nodes by `num`; children name nodes by number.
            let mut by_num: Vec<usize> = (0..tree.nodes.len()).collect();
            by_num.sort_by_key(|&i| tree.nodes[i].num);
            let index_of = |num: usize| {
                offset + by_num.iter().position(|&i| tree.nodes[i].num == num).expect("a child is a node") as u32
            };
            forest.roots.push(index_of(0));
            for &i in &by_num {
                let n = &tree.nodes[i];
                forest.nodes.push(match n.is_leaf {
                    true => Node(LEAF, n.weight_value, 0, 0),
                    false => {
                        let missing_left = if n.missing_node == n.left_child { MISSING_LEFT } else { 0 };
                        Node(
                            n.split_feature as u32 | missing_left,
                            n.split_value as f32,
                            index_of(n.left_child),
                            index_of(n.right_child),
                        )
                    }
                });
            }
        }
    }

    pub fn trees(&self) -> usize {
        self.roots.len()
    }

    /// Predictions of the rows of `rows` (each `width` long), into `out`.
    pub fn predict(&self, rows: &[f64], width: usize, out: &mut Vec<f64>) {
        self.walked().predict(rows, width, out);
    }

    /// The forest laid out for walking.
    pub fn walked(&self) -> &Walk {
        self.walk.get_or_init(|| Walk::of(self))
    }

    /// Levels below node `i` to its deepest leaf.
    fn depth(&self, i: u32) -> u32 {
        match self.nodes[i as usize] {
            Node(LEAF, ..) => 0,
            Node(_, _, left, right) => 1 + self.depth(left).max(self.depth(right)),
        }
    }

    /// Checks that every split names a column below `width` and children after it, that each
    /// node has one parent or is a root, and that no tree is deeper than [`MAX_DEPTH`], so that
    /// a model file read from disk can neither index out of bounds, nor loop, nor lay out a
    /// walk of unbounded size.
    pub fn check(&self, width: usize) -> Result<(), String> {
        let count = self.nodes.len() as u32;
        if self.roots.iter().any(|&r| r >= count) {
            return Err("a tree's root is not a node".into());
        }
        let mut parents = vec![0u32; self.nodes.len()];
        self.roots.iter().for_each(|&r| parents[r as usize] += 1);
        for (i, node) in self.nodes.iter().enumerate() {
            if node.0 == LEAF {
                continue;
            }
            let children = [node.2, node.3];
            let feature = (node.0 & !MISSING_LEFT) as usize;
            if feature >= width || children.iter().any(|&c| c as usize <= i || c >= count) {
                return Err(format!("node {i} splits on column {feature} or names a child out of order"));
            }
            children.iter().for_each(|&c| parents[c as usize] += 1);
        }
        if let Some(i) = parents.iter().position(|&n| n != 1) {
            return Err(format!("node {i} is reached {} times, not once (from a root or a parent)", parents[i]));
        }
        match self.roots.iter().map(|&r| self.depth(r)).max() {
            Some(depth) if depth as usize > MAX_DEPTH => Err(format!("a tree {depth} deep, over {MAX_DEPTH}")),
            _ => Ok(()),
        }
    }
}

/// Rows walked through a tree together: their walks are independent, so the CPU overlaps them.
/// 16 walked the CPU models' trees in 74-85 us a problem where 8 took 86-90 and 4 150 (p50,
/// `gconv select --backend cpu --find-mode fast` on the CPU's validation shapes, a 2-core VM);
/// 32 no faster than 16.
const INTERLEAVED: usize = 16;

/// The trees laid out for walking without branches, each as a complete binary tree of its
/// depth: a split's children are at 2i + 1 and 2i + 2 of its tree's splits, so a row walks
/// exactly as many steps as the tree is deep, each next split computed rather than loaded, and
/// a leaf above the last level fills every leaf below it. 8 bytes a split and 4 a leaf, no
/// child links: the H200's 600-tree models take 54-64% of the bytes of their trained nodes, so
/// more of a model stays in cache.
#[derive(Debug, Clone)]
pub struct Walk {
    base: f64,
    trees: Vec<Complete>,
    /// Each split's column (with the `MISSING_LEFT` bit) and threshold, tree after tree.
    splits: Vec<(u32, f32)>,
    /// Each tree's 2^depth leaf values, tree after tree.
    leaves: Vec<f32>,
}

/// Where a complete tree's splits and leaves start, and its depth.
#[derive(Debug, Clone, Copy)]
struct Complete {
    splits: u32,
    leaves: u32,
    depth: u32,
}

/// How a ranking narrows its candidates: all walk the first `trees`; only the `keep` they put
/// fastest, and the `per_group` fastest of each group (a solver's candidates), walk the rest.
#[derive(Debug, Clone, Copy)]
pub struct Screen {
    pub trees: usize,
    pub keep: usize,
    pub per_group: usize,
}

impl Walk {
    fn of(forest: &Forest) -> Self {
        let mut walk = Walk { base: forest.base, trees: Vec::new(), splits: Vec::new(), leaves: Vec::new() };
        for &root in &forest.roots {
            let depth = forest.depth(root);
            let tree = Complete { splits: walk.splits.len() as u32, leaves: walk.leaves.len() as u32, depth };
            walk.splits.resize(walk.splits.len() + (1 << depth) - 1, (0, 0.0));
            walk.leaves.resize(walk.leaves.len() + (1 << depth), 0.0);
            walk.place(forest, root, tree, 0, 0);
            walk.trees.push(tree);
        }
        walk
    }

    /// Puts node `i` of the forest at place `at` of level `level` of `tree` (its subtree below).
    fn place(&mut self, forest: &Forest, i: u32, tree: Complete, level: u32, at: usize) {
        match forest.nodes[i as usize] {
            Node(LEAF, value, ..) => {
                // Every leaf under this place: a split left as (0, 0.0) above them sends a row
                // to one of them, all the same.
                let below = 1usize << (tree.depth - level);
                let first = tree.leaves as usize + (at << (tree.depth - level));
                self.leaves[first..first + below].fill(value);
            }
            Node(feature, threshold, left, right) => {
                self.splits[tree.splits as usize + (1 << level) - 1 + at] = (feature, threshold);
                self.place(forest, left, tree, level + 1, 2 * at);
                self.place(forest, right, tree, level + 1, 2 * at + 1);
            }
        }
    }

    /// Predictions of the rows of `rows` (each `width` long), into `out`.
    pub fn predict(&self, rows: &[f64], width: usize, out: &mut Vec<f64>) {
        out.clear();
        out.resize(rows.len() / width.max(1), self.base);
        self.add_trees(&self.trees, &as_compared(rows), width, out);
    }

    /// [`Walk::predict`] where screens narrow the rows, one after another (`group[i]` is row
    /// i's group; each screen's `trees` counts from the forest's first): the rows the last
    /// screen passes get their whole prediction; a row a screen stops gets its trees' sum so
    /// far plus the largest rest of any row that screen passed, which orders it after them.
    pub fn predict_screened(&self, rows: &[f64], width: usize, group: &[u32], screens: &[Screen], out: &mut Vec<f64>) {
        out.clear();
        out.resize(rows.len() / width.max(1), self.base);
        self.add_screened(0, &as_compared(rows), width, group, screens, out);
    }

    /// Adds to `values` what the forest's trees from its `walked`-th on give the rows, as
    /// [`Walk::predict_screened`] narrows them.
    fn add_screened(
        &self,
        walked: usize,
        rows: &[f32],
        width: usize,
        group: &[u32],
        screens: &[Screen],
        values: &mut [f64],
    ) {
        let trees = &self.trees[walked..];
        let count = values.len();
        let Some((screen, later)) = screens.split_first() else { return self.add_trees(trees, rows, width, values) };
        let first_trees = screen.trees.saturating_sub(walked);
        if trees.len() <= first_trees {
            return self.add_trees(trees, rows, width, values);
        }
        if count <= screen.keep {
            // All pass this screen; a later, narrower one may still stop some.
            return self.add_screened(walked, rows, width, group, later, values);
        }
        let first = &trees[..first_trees];
        self.add_trees(first, rows, width, values);
        let mut order: Vec<usize> = (0..count).collect();
        order.sort_by(|&a, &b| values[a].total_cmp(&values[b]));
        let mut passed = vec![false; count];
        let mut taken_of = std::collections::HashMap::new();
        for (place, &i) in order.iter().enumerate() {
            let taken = taken_of.entry(group[i]).or_insert(0usize);
            if place < screen.keep || *taken < screen.per_group {
                passed[i] = true;
                *taken += 1;
            }
        }
        let chosen: Vec<usize> = (0..count).filter(|&i| passed[i]).collect();
        let mut narrowed = Vec::with_capacity(chosen.len() * width);
        for &i in &chosen {
            narrowed.extend_from_slice(&rows[i * width..(i + 1) * width]);
        }
        let groups: Vec<u32> = chosen.iter().map(|&i| group[i]).collect();
        let mut rests = vec![0.0; chosen.len()];
        self.add_screened(walked + first_trees, &narrowed, width, &groups, later, &mut rests);
        let largest_rest = rests.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        for (i, passed) in passed.iter().enumerate() {
            if !passed {
                values[i] += largest_rest;
            }
        }
        for (&i, rest) in chosen.iter().zip(&rests) {
            values[i] += rest;
        }
    }

    /// Adds the leaves `trees` give each row to `values`.
    fn add_trees(&self, trees: &[Complete], rows: &[f32], width: usize, values: &mut [f64]) {
        for &tree in trees {
            for (values, rows) in values.chunks_mut(INTERLEAVED).zip(rows.chunks(INTERLEAVED * width)) {
                self.add(tree, rows, width, values);
            }
        }
    }

    /// Adds the tree's leaf for each row of `rows` (at most [`INTERLEAVED`]) to `values`: a
    /// row's place on a level is `at`, its split `(1 << level) - 1 + at`.
    fn add(&self, tree: Complete, rows: &[f32], width: usize, values: &mut [f64]) {
        let mut at = [0usize; INTERLEAVED];
        let at = &mut at[..values.len()];
        let splits = &self.splits[tree.splits as usize..];
        for level in 0..tree.depth {
            let first = (1usize << level) - 1;
            for (r, at) in at.iter_mut().enumerate() {
                let (feature, threshold) = splits[first + *at];
                let x = rows[r * width + (feature & !MISSING_LEFT) as usize];
                let go_left = if x.is_nan() { feature & MISSING_LEFT != 0 } else { x < threshold };
                *at = 2 * *at + usize::from(!go_left);
            }
        }
        let leaves = &self.leaves[tree.leaves as usize..];
        for (value, at) in values.iter_mut().zip(at.iter()) {
            *value += f64::from(leaves[*at]);
        }
    }
}

/// The rows as the splits compare them: once per prediction, not at every level of every tree.
fn as_compared(rows: &[f64]) -> Vec<f32> {
    rows.iter().map(|&x| x as f32).collect()
}

#[cfg(test)]
mod tests {
    use forust_ml::objective::ObjectiveType;
    use forust_ml::Matrix;

    use super::*;

    /// A prediction by walking the nodes one by one: what the level walk must match exactly.
    fn walked(forest: &Forest, row: &[f64]) -> f64 {
        let mut sum = forest.base;
        for &root in &forest.roots {
            let mut node = forest.nodes[root as usize];
            while node.0 != LEAF {
                let x = row[(node.0 & !MISSING_LEFT) as usize] as f32;
                let left = if x.is_nan() { node.0 & MISSING_LEFT != 0 } else { x < node.1 };
                node = forest.nodes[if left { node.2 } else { node.3 } as usize];
            }
            sum += f64::from(node.1);
        }
        sum
    }

    /// A lone leaf, and a split whose right side splits again (depth 2, a leaf at level 1).
    pub(super) fn lopsided() -> Forest {
        Forest {
            base: 0.5,
            roots: vec![0, 1],
            nodes: vec![
                Node(LEAF, 2.0, 0, 0),
                Node(1 | MISSING_LEFT, 0.5, 2, 3),
                Node(LEAF, -1.0, 0, 0),
                Node(0, 3.0, 4, 5),
                Node(LEAF, 7.0, 0, 0),
                Node(LEAF, 11.0, 0, 0),
            ],
            walk: OnceLock::new(),
        }
    }

    #[test]
    fn the_level_walk_adds_the_leaves_a_walk_of_the_nodes_reaches() {
        let lopsided = lopsided();
        lopsided.check(2).unwrap();
        let mut rows = Vec::new();
        for i in 0..21 {
            let x0 = (i % 7) as f64;
            let x1 = if i % 5 == 0 { f64::NAN } else { (i % 3) as f64 * 0.4 };
            rows.extend([x0, x1]);
        }
        let mut predicted = Vec::new();
        lopsided.predict(&rows, 2, &mut predicted);
        assert_eq!(predicted.len(), 21);
        for (p, row) in predicted.iter().zip(rows.chunks_exact(2)) {
            assert_eq!(p.to_bits(), walked(&lopsided, row).to_bits(), "row {row:?}");
        }
    }

    #[test]
    fn a_forest_whose_nodes_are_shared_or_too_deep_is_refused() {
        let forest = |roots: Vec<u32>, nodes: Vec<Node>| Forest { base: 0.0, roots, nodes, walk: OnceLock::new() };
        // Both children of each split the same node: a walk of 2^n paths from n nodes.
        let shared = forest(vec![0], vec![Node(0, 0.5, 1, 1), Node(LEAF, 1.0, 0, 0)]);
        assert!(shared.check(1).unwrap_err().contains("reached 2 times"));
        let orphan = forest(vec![0], vec![Node(LEAF, 1.0, 0, 0), Node(LEAF, 2.0, 0, 0)]);
        assert!(orphan.check(1).unwrap_err().contains("reached 0 times"));
        // A chain of splits one deeper than allowed, each with a leaf on its left.
        let mut nodes = Vec::new();
        for level in 0..=MAX_DEPTH as u32 {
            nodes.push(Node(0, 0.5, 2 * level + 1, 2 * level + 2));
            nodes.push(Node(LEAF, 1.0, 0, 0));
        }
        nodes.push(Node(LEAF, 2.0, 0, 0));
        let deep = forest(vec![0], nodes);
        assert!(deep.check(1).unwrap_err().contains("deep"));
    }

    #[test]
    fn the_flat_forest_predicts_as_forust_does() {
        // y = 3 x0 - 2 x1, with some x1 missing.
        let rows = 200;
        let x0: Vec<f64> = (0..rows).map(|i| (i % 17) as f64).collect();
        let x1: Vec<f64> = (0..rows).map(|i| if i % 11 == 0 { f64::NAN } else { (i % 7) as f64 }).collect();
        let y: Vec<f64> = x0.iter().zip(&x1).map(|(a, b)| 3.0 * a - 2.0 * if b.is_nan() { 0.0 } else { *b }).collect();
        let columns: Vec<f64> = x0.iter().chain(&x1).copied().collect();
        let matrix = Matrix::new(&columns, rows, 2);
        let mut booster = GradientBooster::default()
            .set_objective_type(ObjectiveType::SquaredLoss)
            .set_iterations(50)
            .set_max_depth(4);
        booster.fit(&matrix, &y, &vec![1.0; rows], None).unwrap();
        let forest = Forest::from_booster(&booster);
        forest.check(2).unwrap();
        let stored = serde_json::to_string(&forest).unwrap();
        assert_eq!(serde_json::from_str::<Forest>(&stored).unwrap(), forest, "trained trees are held level by level");
        let by_rows: Vec<f64> = (0..rows).flat_map(|i| [x0[i], x1[i]]).collect();
        let mut ours = Vec::new();
        forest.predict(&by_rows, 2, &mut ours);
        for ((a, b), row) in ours.iter().zip(booster.predict(&matrix, false)).zip(by_rows.chunks_exact(2)) {
            assert!((a - b).abs() < 1e-3 * (1.0 + b.abs()), "{a} against forust's {b}");
            assert_eq!(a.to_bits(), walked(&forest, row).to_bits());
        }
        assert!(forest.check(1).is_err(), "a split past the row is refused");
    }

    #[test]
    fn a_screen_gives_the_rows_it_passes_their_whole_prediction_and_orders_the_rest_after() {
        // y = x0 + x1 / 10 over 60 rows in three groups.
        let rows = 60;
        let x0: Vec<f64> = (0..rows).map(|i| ((i * 7) % 23) as f64).collect();
        let x1: Vec<f64> = (0..rows).map(|i| ((i * 5) % 13) as f64).collect();
        let y: Vec<f64> = x0.iter().zip(&x1).map(|(a, b)| a + b / 10.0).collect();
        let columns: Vec<f64> = x0.iter().chain(&x1).copied().collect();
        let mut booster = GradientBooster::default()
            .set_objective_type(ObjectiveType::SquaredLoss)
            .set_iterations(40)
            .set_max_depth(3);
        booster.fit(&Matrix::new(&columns, rows, 2), &y, &vec![1.0; rows], None).unwrap();
        let forest = Forest::from_booster(&booster);
        let walk = forest.walked();
        let by_rows: Vec<f64> = (0..rows).flat_map(|i| [x0[i], x1[i]]).collect();
        let group: Vec<u32> = (0..rows as u32).map(|i| i % 3).collect();
        let (mut whole, mut screened) = (Vec::new(), Vec::new());
        walk.predict(&by_rows, 2, &mut whole);
        let screen = Screen { trees: 10, keep: 8, per_group: 2 };
        walk.predict_screened(&by_rows, 2, &group, &[screen], &mut screened);
        let exact: Vec<bool> =
            whole.iter().zip(&screened).map(|(a, b)| (a - b).abs() < 1e-9 * (1.0 + a.abs())).collect();
        let passed = exact.iter().filter(|&&e| e).count();
        assert!((8..=8 + 3 * 2).contains(&passed), "{passed} rows passed");
        for g in 0..3 {
            assert!((0..rows).filter(|&i| group[i] == g && exact[i]).count() >= 2, "group {g} keeps its two best");
        }
        let slowest_passed = (0..rows).filter(|&i| exact[i]).map(|i| screened[i]).fold(f64::MIN, f64::max);
        assert!((0..rows).filter(|&i| !exact[i]).all(|i| screened[i] >= slowest_passed));
        // The fastest row passes: the screen's first trees already order rows by x0.
        let fastest = (0..rows).min_by(|&a, &b| whole[a].total_cmp(&whole[b])).unwrap();
        assert!(exact[fastest]);
        // A second screen narrows the passed rows again: fewer get their whole prediction, and
        // the first-ranked row is the fastest, whole. (A row a screen stops ranks after every
        // row it passed for being among its `keep` fastest, not always after those it passed
        // as one of a group's best.)
        let screens = [screen, Screen { trees: 25, keep: 4, per_group: 1 }];
        walk.predict_screened(&by_rows, 2, &group, &screens, &mut screened);
        let exact: Vec<bool> =
            whole.iter().zip(&screened).map(|(a, b)| (a - b).abs() < 1e-9 * (1.0 + a.abs())).collect();
        let passed = exact.iter().filter(|&&e| e).count();
        assert!((4..=4 + 3).contains(&passed), "{passed} rows passed both screens");
        let first = (0..rows).min_by(|&a, &b| screened[a].total_cmp(&screened[b])).unwrap();
        assert_eq!(first, fastest);
        assert!(exact[first]);
        // A screen wider than the rows is the whole prediction.
        walk.predict_screened(&by_rows, 2, &group, &[Screen { trees: 10, keep: rows, per_group: 0 }], &mut screened);
        assert_eq!(screened, whole);
    }
}
