//! Choosing settings over a layer graph. A node's cost per setting (its layers' times, plus
//! conversions at the network's input and output), an edge's cost per pair of settings (the
//! conversion between them); a choice's total is the sum. One setting for every node is the
//! global choice; per node, a dynamic program over the graph in order chooses, then passes of
//! local improvement settle what the program approximates where a layer feeds several others
//! (exact on chains and trees).

/// Costs in ms; `f64::INFINITY` where a setting cannot run a node.
#[derive(Debug, Clone)]
pub struct Graph {
    pub settings: usize,
    /// node[i][s]
    pub nodes: Vec<Vec<f64>>,
    pub edges: Vec<Edge>,
}

/// `from` feeds `to`; cost[s_from][s_to].
#[derive(Debug, Clone)]
pub struct Edge {
    pub from: usize,
    pub to: usize,
    pub cost: Vec<Vec<f64>>,
}

impl Graph {
    pub fn total(&self, choice: &[usize]) -> f64 {
        let nodes: f64 = self.nodes.iter().zip(choice).map(|(costs, &s)| costs[s]).sum();
        nodes + self.edges.iter().map(|e| e.cost[choice[e.from]][choice[e.to]]).sum::<f64>()
    }

    /// The setting for every node with the least total (infinite where none runs everywhere).
    pub fn best_global(&self) -> (usize, f64) {
        (0..self.settings)
            .map(|s| (s, self.total(&vec![s; self.nodes.len()])))
            .min_by(|a, b| a.1.total_cmp(&b.1))
            .expect("at least one setting")
    }

    /// A setting per node, and its total.
    pub fn best_per_node(&self) -> (Vec<usize>, f64) {
        let (n, m) = (self.nodes.len(), self.settings);
        // best[v][s]: v in s with the best choices above it, each feeding edge charged once.
        let mut best = self.nodes.clone();
        for e in sorted_by_target(&self.edges) {
            for s in 0..m {
                let above = (0..m).map(|t| best[e.from][t] + e.cost[t][s]).fold(f64::INFINITY, f64::min);
                best[e.to][s] += above;
            }
        }
        // Back from the last node: each takes the setting best for it and what it feeds.
        let mut choice: Vec<Option<usize>> = vec![None; n];
        for v in (0..n).rev() {
            let cost = |s: usize| {
                let below: f64 =
                    self.edges.iter().filter(|e| e.from == v).filter_map(|e| choice[e.to].map(|t| e.cost[s][t])).sum();
                best[v][s] + below
            };
            choice[v] = (0..m).min_by(|&a, &b| cost(a).total_cmp(&cost(b)));
        }
        let mut choice: Vec<usize> = choice.into_iter().map(|c| c.expect("every node chosen")).collect();
        // Start from the better of that and the best global setting, then improve node by node.
        let (global, global_total) = self.best_global();
        if global_total < self.total(&choice) {
            choice = vec![global; n];
        }
        for _ in 0..50 {
            let mut changed = false;
            for v in 0..n {
                let local = |s: usize| {
                    let edges = self.edges.iter().filter(|e| e.from == v || e.to == v);
                    self.nodes[v][s]
                        + edges
                            .map(|e| if e.from == v { e.cost[s][choice[e.to]] } else { e.cost[choice[e.from]][s] })
                            .sum::<f64>()
                };
                let better = (0..m).min_by(|&a, &b| local(a).total_cmp(&local(b))).expect("a setting");
                if local(better) < local(choice[v]) {
                    choice[v] = better;
                    changed = true;
                }
            }
            if !changed {
                break;
            }
        }
        let total = self.total(&choice);
        (choice, total)
    }
}

/// Edges in the order of the nodes they feed (nodes are numbered so that feeders come first).
fn sorted_by_target(edges: &[Edge]) -> Vec<&Edge> {
    let mut sorted: Vec<&Edge> = edges.iter().collect();
    sorted.sort_by_key(|e| (e.to, e.from));
    sorted
}

#[cfg(test)]
mod tests {
    use super::*;

    fn switch(cost: f64) -> Vec<Vec<f64>> {
        vec![vec![0.0, cost], vec![cost, 0.0]]
    }

    #[test]
    fn a_chain_switches_setting_only_where_it_pays() {
        // Setting 1 is much faster for the middle node; switching costs 1 each way.
        let graph = Graph {
            settings: 2,
            nodes: vec![vec![1.0, 1.5], vec![10.0, 2.0], vec![1.0, 1.5]],
            edges: vec![Edge { from: 0, to: 1, cost: switch(1.0) }, Edge { from: 1, to: 2, cost: switch(1.0) }],
        };
        assert_eq!(graph.best_global(), (1, 5.0));
        let (choice, total) = graph.best_per_node();
        assert_eq!((choice, total), (vec![1, 1, 1], 5.0));
        // Dearer switching for the ends, cheap middle: per node beats global.
        let graph =
            Graph { nodes: vec![vec![1.0, 4.0], vec![10.0, 2.0], vec![1.0, 4.0]], edges: graph.edges, settings: 2 };
        let (choice, total) = graph.best_per_node();
        assert_eq!((choice, total), (vec![0, 1, 0], 6.0));
        assert!(total < graph.best_global().1);
    }

    #[test]
    fn a_node_no_setting_runs_rules_that_setting_out() {
        let graph = Graph {
            settings: 2,
            nodes: vec![vec![1.0, 0.5], vec![f64::INFINITY, 0.5]],
            edges: vec![Edge { from: 0, to: 1, cost: switch(0.1) }],
        };
        assert_eq!(graph.best_global(), (1, 1.0));
        assert_eq!(graph.best_per_node().0, vec![1, 1]);
    }
}
