//! Selection by the model: every candidate the runtime offers for a problem (a listed
//! solver's configs: those the library lists for the problem that the model saw in training,
//! with the library's own marks of them), its features, the trees' prediction, sorted;
//! remembered per problem for the process.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use gconv_core::{Config, ConvProblem, Runtime};
use gconv_tune::heuristic::{Heuristic, Predicted, Ranking};

use crate::features::ProblemRow;
use crate::measured::VendorMarks;
use crate::model::{Model, ModelSet};

/// A model with its listed and trained configs parsed once.
struct Loaded {
    model: Model,
    listed: HashMap<String, HashSet<Config>>,
    trained: HashMap<String, Vec<Config>>,
}

/// Where a first ranking's time goes: listing the candidates (applicability, configs),
/// their feature rows, the trees.
#[derive(Debug, Clone, Copy, Default)]
pub struct RankPhases {
    pub candidates: Duration,
    pub features: Duration,
    pub trees: Duration,
}

pub struct ModelHeuristic {
    origin: String,
    device: String,
    models: Vec<Loaded>,
    memo: Mutex<HashMap<ConvProblem, Option<Arc<Ranking>>>>,
}

impl ModelHeuristic {
    pub fn new(set: ModelSet) -> Self {
        let device = set.device().to_string();
        let models = set
            .models
            .into_iter()
            .map(|model| {
                let listed =
                    model.listed.keys().map(|s| (s.clone(), model.listed_configs(s).into_iter().collect())).collect();
                let trained =
                    model.trained.keys().filter_map(|s| Some((s.clone(), model.trained_configs(s)?))).collect();
                Loaded { model, listed, trained }
            })
            .collect();
        ModelHeuristic { origin: set.origin, device, models, memo: Mutex::new(HashMap::new()) }
    }

    /// Ranks without the memo: what a first selection of a problem costs.
    pub fn rank_now(&self, rt: &dyn Runtime, p: &ConvProblem) -> Option<Ranking> {
        self.rank_timed(rt, p).map(|(ranking, _)| ranking)
    }

    /// [`Self::rank_now`], with where its time went.
    pub fn rank_timed(&self, rt: &dyn Runtime, p: &ConvProblem) -> Option<(Ranking, RankPhases)> {
        let started = Instant::now();
        let loaded = self.models.iter().find(|l| l.model.covers(p))?;
        let model = &loaded.model;
        let mut candidates: Vec<(&'static str, Config)> = Vec::new();
        let mut workspaces = Vec::new();
        let mut marks = Vec::new();
        for solver in
            rt.solvers().into_iter().filter(|s| !s.is_oracle() && model.spec.solvers.iter().any(|id| id == s.id()))
        {
            if solver.find_times_every_config() {
                // The library's list for the problem, of the configs the model knows (as
                // cheaply as the library can list them: cuDNN's quick listing, and unconfirmed
                // the engines it would ask about one by one, which the pick asks about only if
                // it comes to them): a config it lists for other shapes only may not suit this
                // one. What find skips is skipped here too (and by the pick, for configs it
                // asks about): an engine cuDNN compiles at run time costs a first call
                // 0.15-0.6 s, and one such engine computed a wrong fp16 result on the H200 that
                // only find's verification would have caught.
                let Some(known) = loaded.listed.get(solver.id()) else { continue };
                let listed = solver.configs_to_rank(p, known);
                let yardstick = rt.yardstick(p).ok().flatten();
                for config in listed.into_iter().filter(|c| solver.find_skips(p, c).is_none()) {
                    marks.push(Some(VendorMarks::of(solver, &config, yardstick.as_ref())));
                    candidates.push((solver.id(), config));
                    workspaces.push(None);
                }
            } else if solver.applicable(p).is_ok() {
                let before = candidates.len();
                match loaded.trained.get(solver.id()) {
                    Some(trained) => {
                        let default = solver.default_config(p);
                        let valid = trained.iter().filter(|c| **c != default && solver.check_config(p, c).is_ok());
                        candidates
                            .extend(std::iter::once(default.clone()).chain(valid.cloned()).map(|c| (solver.id(), c)));
                    }
                    None => candidates.extend(solver.configs(p).map(|c| (solver.id(), c))),
                }
                if candidates.len() == before {
                    candidates.push((solver.id(), solver.default_config(p)));
                }
                workspaces.extend(candidates[before..].iter().map(|(_, c)| Some(solver.workspace_bytes(p, c))));
                marks.resize(candidates.len(), None);
            }
        }
        let listed = Instant::now();
        let problem = ProblemRow::new(p, rt.facts());
        let mut rows = Vec::with_capacity(candidates.len() * model.spec.width());
        for (((solver, config), workspace), vendor) in candidates.iter().zip(&workspaces).zip(&marks) {
            model.spec.push_row(&problem, solver, config, *workspace, *vendor, &mut rows);
        }
        let featured = Instant::now();
        let (log_ms, order) = model.rank(p, &problem, &rows, |i| (candidates[i].0, &candidates[i].1, marks[i]));
        let mut candidates: Vec<Option<(&str, Config)>> = candidates.into_iter().map(Some).collect();
        let ranked: Vec<Predicted> = order
            .into_iter()
            .map(|i| {
                let (solver, config) = candidates[i].take().expect("each candidate once");
                Predicted { solver: solver.to_string(), config, ms: log_ms[i].exp() }
            })
            .collect();
        let phases =
            RankPhases { candidates: listed - started, features: featured - listed, trees: featured.elapsed() };
        Some((Ranking { candidates: ranked }, phases))
    }
}

impl Heuristic for ModelHeuristic {
    fn rank(&self, rt: &dyn Runtime, p: &ConvProblem) -> Option<Arc<Ranking>> {
        if let Some(known) = self.memo.lock().unwrap_or_else(|e| e.into_inner()).get(p) {
            return known.clone();
        }
        let ranking = self.rank_now(rt, p).map(Arc::new);
        self.memo.lock().unwrap_or_else(|e| e.into_inner()).insert(p.clone(), ranking.clone());
        ranking
    }

    fn describe(&self) -> String {
        format!("{} (trained on {})", self.origin, self.device)
    }
}

/// Model-guided tuning: of a solver's space, only the model's `top_k` fastest predicted
/// configs are timed. A problem no model covers keeps the whole space.
pub struct ModelGuided {
    pub models: ModelSet,
    pub facts: gconv_core::DeviceFacts,
    pub top_k: usize,
}

impl gconv_tune::search::SearchStrategy for ModelGuided {
    fn describe(&self) -> String {
        format!("model(top_k={}, {})", self.top_k, self.models.origin)
    }

    fn schedule(&self, p: &ConvProblem, solver: &dyn gconv_core::Solver, space: Vec<Config>) -> Vec<Config> {
        let Some(model) = self.models.model(p) else { return space };
        let problem = ProblemRow::new(p, self.facts);
        let mut rows = Vec::with_capacity(space.len() * model.spec.width());
        for config in &space {
            model.spec.push_row(
                &problem,
                solver.id(),
                config,
                Some(solver.workspace_bytes(p, config)),
                None,
                &mut rows,
            );
        }
        let mut log_ms = Vec::new();
        model.forest.predict(&rows, model.spec.width(), &mut log_ms);
        let mut ranked: Vec<(f64, Config)> = log_ms.into_iter().zip(space).collect();
        ranked.sort_by(|a, b| a.0.total_cmp(&b.0));
        ranked.into_iter().take(self.top_k).map(|(_, c)| c).collect()
    }
}

#[cfg(test)]
mod tests {
    use gconv_core::testing::ListingDevice;
    use gconv_core::{DeviceFacts, NotApplicable, Solver, Yardstick};

    use super::*;
    use crate::measured::Measured;
    use crate::train::{train, TrainOptions};

    /// A vendor library listing engines `listed` (config `e<n>`) for every problem, of which
    /// find skips `skipped`, and which would be asked about engines `unasked` one by one.
    struct Library {
        listed: Vec<u32>,
        skipped: Vec<u32>,
        unasked: Vec<u32>,
    }

    impl Solver for Library {
        fn id(&self) -> &'static str {
            "lib"
        }

        fn applicable(&self, _p: &ConvProblem) -> std::result::Result<(), NotApplicable> {
            Ok(())
        }

        fn configs<'a>(&'a self, _p: &'a ConvProblem) -> Box<dyn Iterator<Item = Config> + 'a> {
            Box::new(self.listed.iter().map(|&e| engine(e)))
        }

        fn find_times_every_config(&self) -> bool {
            true
        }

        fn configs_to_rank(&self, p: &ConvProblem, wanted: &HashSet<Config>) -> Vec<Config> {
            let unasked = self.unasked.iter().map(|&e| engine(e)).filter(|c| wanted.contains(c));
            self.configs_among(p, wanted).into_iter().chain(unasked).collect()
        }

        fn find_skips(&self, _p: &ConvProblem, config: &Config) -> Option<String> {
            self.skipped.iter().any(|&e| engine(e) == *config).then(|| "compiled at run time".into())
        }
    }

    fn engine(e: u32) -> Config {
        Config::new([("e", e)])
    }

    /// A model of engines 1 to 4 measured on twelve shapes, engine 4 the fastest but on the
    /// first, where all tie (so each was near a problem's best, and a candidate).
    fn model() -> ModelSet {
        let mut rows = Vec::new();
        for c in 1..=12u32 {
            let problem =
                ConvProblem::from_key(&format!("v1:fwd:f16:NHWC:n1:c{}:k8:i8x8:f3x3:s1x1:p1x1:d1x1", 8 * c)).unwrap();
            for e in 1..=4u32 {
                rows.push(Measured {
                    problem: problem.clone(),
                    solver: "lib".into(),
                    config: engine(e),
                    ms: Some(if c == 1 { 1.0 } else { f64::from(c) * f64::from(5 - e) }),
                    workspace_bytes: 0,
                    device: "fake:0".into(),
                    facts: DeviceFacts { units: 8, clock_mhz: 1000 },
                    vendor: VendorMarks { listed: true, heuristic: e == 1, find: true, find_rank: Some(e as u16 - 1) },
                    wrong: false,
                });
            }
        }
        let models = train(&rows, &[], &TrainOptions { trees: 20, ..TrainOptions::default() }).unwrap();
        assert!(models[0].spec.vendor_rank, "rows that know their place on the library's list make it a column");
        ModelSet { origin: "a test".into(), models }
    }

    #[test]
    fn a_vendor_config_is_ranked_only_where_the_library_lists_it_and_the_model_knows_it() {
        // Engine 4, the fastest the model knows, is not listed for this problem; engine 9 is,
        // but the model never saw it.
        let ranking = rank(Library { listed: vec![2, 3, 9], skipped: vec![], unasked: vec![] });
        let mut ranked: Vec<String> = ranking.candidates.iter().map(|c| c.config.to_string()).collect();
        ranked.sort();
        assert_eq!(ranked, ["e2", "e3"]);
        assert_eq!(ranking.candidates[0].config, engine(3), "the faster of the two");
    }

    #[test]
    fn a_vendor_config_find_skips_is_not_ranked() {
        let ranking = rank(Library { listed: vec![2, 3, 4], skipped: vec![4], unasked: vec![] });
        assert!(ranking.candidates.iter().all(|c| c.config != engine(4)), "{:?}", ranking.candidates);
        assert_eq!(ranking.candidates[0].config, engine(3));
    }

    #[test]
    fn engines_the_library_would_be_asked_about_alone_are_ranked_unconfirmed() {
        // Engine 4, the fastest the model knows, is not on the library's lists but it may
        // serve the problem: it is ranked (the pick asks about it); engine 9 the model never saw.
        let ranking = rank(Library { listed: vec![2, 3], skipped: vec![], unasked: vec![4, 9] });
        let ranked: Vec<String> = ranking.candidates.iter().map(|c| c.config.to_string()).collect();
        assert_eq!(ranked[0], "e4", "{ranked:?}");
        assert_eq!(ranked.len(), 3);
    }

    /// Ranks a problem on a device with the library alone, whose heuristic picks engine 3.
    fn rank(library: Library) -> Ranking {
        let find = library.listed.iter().map(|&e| engine(e)).collect();
        let yardstick = Yardstick { library: "lib", solver: "lib", heuristic: engine(3), find };
        let device = ListingDevice { solvers: vec![&library], yardstick: Some(yardstick) };
        let p = ConvProblem::from_key("v1:fwd:f16:NHWC:n1:c40:k8:i8x8:f3x3:s1x1:p1x1:d1x1").unwrap();
        ModelHeuristic::new(model()).rank_now(&device, &p).expect("a model covers it")
    }
}
