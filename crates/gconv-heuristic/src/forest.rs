//! The trained trees in a flat form of our own: small to store, quick to walk. forust-ml grows
//! them; selection only walks them, tree by tree over all of a problem's candidates so that a
//! tree's nodes stay in cache.

use forust_ml::GradientBooster;
use serde::{Deserialize, Serialize};

/// A split sends a row left when its feature is below the threshold, to `missing` when the
/// feature is NaN; a leaf (feature `LEAF`) holds its value in `threshold`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
struct Node(u32, f64, u32, u32, u32);

const LEAF: u32 = u32::MAX;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Forest {
    base: f64,
    /// Index of each tree's root in `nodes`.
    roots: Vec<u32>,
    nodes: Vec<Node>,
}

impl Forest {
    pub fn from_booster(booster: &GradientBooster) -> Self {
        let mut forest = Forest { base: booster.base_score, roots: Vec::new(), nodes: Vec::new() };
        for tree in &booster.trees {
            let offset = forest.nodes.len() as u32;
            // forust numbers a tree's nodes by `num`; children name nodes by number.
            let mut by_num: Vec<usize> = (0..tree.nodes.len()).collect();
            by_num.sort_by_key(|&i| tree.nodes[i].num);
            let index_of = |num: usize| offset + by_num.iter().position(|&i| tree.nodes[i].num == num).expect("a child is a node") as u32;
            forest.roots.push(index_of(0));
            for &i in &by_num {
                let n = &tree.nodes[i];
                forest.nodes.push(match n.is_leaf {
                    true => Node(LEAF, f64::from(n.weight_value), 0, 0, 0),
                    false => Node(n.split_feature as u32, n.split_value, index_of(n.left_child), index_of(n.right_child), index_of(n.missing_node)),
                });
            }
        }
        forest
    }

    pub fn trees(&self) -> usize {
        self.roots.len()
    }

    /// Predictions of the rows of `rows` (each `width` long), into `out`.
    pub fn predict(&self, rows: &[f64], width: usize, out: &mut Vec<f64>) {
        out.clear();
        out.resize(rows.len() / width.max(1), self.base);
        for &root in &self.roots {
            for (value, row) in out.iter_mut().zip(rows.chunks_exact(width)) {
                let mut node = self.nodes[root as usize];
                while node.0 != LEAF {
                    let x = row[node.0 as usize];
                    let next = if x.is_nan() { node.4 } else if x < node.1 { node.2 } else { node.3 };
                    node = self.nodes[next as usize];
                }
                *value += node.1;
            }
        }
    }

    /// Checks that every split names a column below `width` and children after it, so that a
    /// model file read from disk can neither index out of bounds nor loop.
    pub fn check(&self, width: usize) -> Result<(), String> {
        let count = self.nodes.len() as u32;
        if self.roots.iter().any(|&r| r >= count) {
            return Err("a tree's root is not a node".into());
        }
        for (i, node) in self.nodes.iter().enumerate() {
            let children = [node.2, node.3, node.4];
            if node.0 != LEAF && (node.0 as usize >= width || children.iter().any(|&c| c as usize <= i || c >= count)) {
                return Err(format!("node {i} splits on column {} or names a child out of order", node.0));
            }
        }
        Ok(())
    }
}
