//! `cuda.cudnn`: cuDNN's engines as one solver. Each config is an engine config named by its
//! stable tag (`eng22_k2=5_k13=1`), valid for the cuDNN version and GPU in the device key.
//! Find times every config, as cuDNN's own find times its list, so gconv's find cannot lose
//! to cuDNN's, and engines outside cuDNN's heuristic lists get their chance too.

use std::collections::HashSet;
use std::sync::Arc;

use gconv_core::{require, Config, ConvProblem, GconvError, Invoker, NotApplicable, Result, Solve, Solver, SolverKind};

use crate::cudnn::Cudnn;
use crate::{Cuda, CudaBuffers};

pub struct CudnnSolver {
    pub library: Arc<Cudnn>,
}

impl Solver for CudnnSolver {
    fn id(&self) -> &'static str {
        "cuda.cudnn"
    }

    fn kind(&self) -> SolverKind {
        SolverKind::Vendor("cuDNN")
    }

    /// Whether cuDNN takes the problem's operation graph. Which engines support it is the
    /// config list's business (asked once per problem, by find or by a model's pick of a cuDNN
    /// config): an empty list only means no config.
    fn applicable(&self, p: &ConvProblem) -> Result<(), NotApplicable> {
        require!(self.library.version().is_some(), "cuDNN (libcudnn) not found");
        self.library.supports(p).map_err(|e| NotApplicable::because(e.to_string()))
    }

    /// The plan's figure once it is built; before, the engine config's (so that a config
    /// over the workspace limit is never planned).
    fn workspace_bytes(&self, p: &ConvProblem, config: &Config) -> u64 {
        let listed = || self.library.known_candidates(p)?.get(config)?.workspace_bytes;
        match listed().filter(|_| !self.library.is_planned(p, config)) {
            Some(bytes) => bytes,
            // A config cuDNN cannot plan needs more than any limit: it is listed, never run.
            None => self.library.plan(p, config).map_or(u64::MAX, |plan| plan.workspace_bytes),
        }
    }

    fn default_config(&self, p: &ConvProblem) -> Config {
        let listed = self.library.quick_candidates(p).ok();
        listed.and_then(|c| c.heuristic.clone().or_else(|| c.all.first().map(|c| c.config.clone()))).unwrap_or_default()
    }

    fn configs<'a>(&'a self, p: &'a ConvProblem) -> Box<dyn Iterator<Item = Config> + 'a> {
        let listed = self.library.candidates(p).map(|c| c.all.iter().map(|c| c.config.clone()).collect::<Vec<_>>());
        Box::new(listed.unwrap_or_default().into_iter())
    }

    /// Without listing every source: heuristics A and FALLBACK, then only the default-knob
    /// engines of `wanted` (cudnn/listing.rs).
    fn configs_among(&self, p: &ConvProblem, wanted: &HashSet<Config>) -> Vec<Config> {
        self.library.configs_among(p, wanted).unwrap_or_default()
    }

    /// Heuristics A and FALLBACK's configs of `wanted`, then its default-knob engines not asked
    /// about yet, unconfirmed.
    fn configs_to_rank(&self, p: &ConvProblem, wanted: &HashSet<Config>) -> Vec<Config> {
        self.library.configs_to_rank(p, wanted).unwrap_or_default()
    }

    fn find_times_every_config(&self) -> bool {
        true
    }

    /// An engine cuDNN compiles when its plan is built (0.15-0.6 s each, every process) is
    /// left to tuning unless cuDNN's own find would time it.
    fn find_skips(&self, p: &ConvProblem, config: &Config) -> Option<String> {
        let listed = self.library.known_candidates(p)?;
        let candidate = listed.get(config)?;
        (candidate.compiles_at_run_time && !candidate.on_find_list && !self.library.is_planned(p, config)).then(|| {
            "cuDNN compiles this engine at run time, and neither heuristic A nor FALLBACK names it".to_string()
        })
    }

    fn describe_listing(&self, p: &ConvProblem) -> Option<String> {
        let listed = self.library.known_candidates(p)?;
        if listed.from_disk {
            return Some("listing read from the disk cache".into());
        }
        let spent = listed.spent;
        let ms = |d: std::time::Duration| d.as_secs_f64() * 1e3;
        let total = ms(spent.graph + spent.heuristics.iter().sum::<std::time::Duration>() + spent.engines);
        if listed.quick {
            return Some(format!(
                "quick listing in {total:.2} ms: operation graph {:.2}, heuristic A {:.2}, FALLBACK {:.2}, {} engines with default knobs asked alone {:.2}",
                ms(spent.graph),
                ms(spent.heuristics[0]),
                ms(spent.heuristics[2]),
                listed.engines_asked.len(),
                ms(spent.engines)
            ));
        }
        Some(format!(
            "listed in {total:.2} ms: operation graph {:.2}, heuristic A {:.2}, B {:.2}, FALLBACK {:.2}, every engine {:.2}",
            ms(spent.graph),
            ms(spent.heuristics[0]),
            ms(spent.heuristics[1]),
            ms(spent.heuristics[2]),
            ms(spent.engines)
        ))
    }

    fn describe_config(&self, p: &ConvProblem, config: &Config) -> Option<String> {
        let listed = self.library.known_candidates(p)?;
        listed.get(config).map(|c| c.notes.clone())
    }

    fn check_config(&self, p: &ConvProblem, config: &Config) -> Result<()> {
        if config.is_empty() {
            let why = self
                .library
                .candidates(p)?
                .none_because
                .clone()
                .unwrap_or_else(|| "an empty config names no engine".into());
            return Err(GconvError::BadConfig { text: config.to_string(), reason: why });
        }
        self.library.plan(p, config).map(|_| ())
    }

    /// From the quick listing where it names the config, else the full one.
    fn needs_build(&self, p: &ConvProblem, config: &Config) -> bool {
        let compiles = |listed: Result<Arc<crate::cudnn::Candidates>>| {
            listed.ok().and_then(|c| c.get(config).map(|c| c.compiles_at_run_time))
        };
        let compiles = compiles(self.library.quick_candidates(p)).or_else(|| compiles(self.library.candidates(p)));
        compiles.unwrap_or(true) && !self.library.is_planned(p, config)
    }

    /// Builds the plan: for engines cuDNN compiles at run time, that is the expensive part.
    fn prepare(&self, p: &ConvProblem, config: &Config) -> Result<()> {
        self.library.plan(p, config).map(|_| ())
    }
}

impl Solve<Cuda> for CudnnSolver {
    fn solution(&self, p: &ConvProblem, config: &Config) -> Result<Box<dyn Invoker<Cuda>>> {
        // Planned here to fail early; each stream that runs it plans it for itself.
        self.library.plan(p, config)?;
        Ok(Box::new(CudnnInvoker { problem: p.clone(), config: config.clone(), library: self.library.clone() }))
    }
}

struct CudnnInvoker {
    problem: ConvProblem,
    config: Config,
    library: Arc<Cudnn>,
}

impl Invoker<Cuda> for CudnnInvoker {
    fn run(&self, b: &mut CudaBuffers<'_>) -> Result<()> {
        self.library.execute(&self.problem, &self.config, b.stream(), [b.x.ptr, b.w.ptr, b.y.ptr, b.workspace.ptr])
    }
}
