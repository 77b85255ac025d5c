//! The solver contract (MIOpen's Solver / Solution / Invoker) and the registry.
//!
//! A solver's facts (id, applicability, configs, workspace) are backend-free, so find, tuning
//! and `explain` see every backend's solvers through one trait; only producing an invoker
//! ([`Solve`]) names the backend whose buffers it runs on.

use std::any::Any;
use std::collections::HashSet;
use std::fmt;

use crate::config::Config;
use crate::error::{GconvError, Result};
use crate::problem::ConvProblem;

/// A place solvers run: it names the buffers an invoker is handed.
pub trait Backend: 'static {
    const NAME: &'static str;
    type Buffers<'a>;
}

/// Why a solver cannot run a problem, in words for `gconv explain`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotApplicable(pub String);

impl NotApplicable {
    pub fn because(reason: impl Into<String>) -> Self {
        NotApplicable(reason.into())
    }
}

impl fmt::Display for NotApplicable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Returns `Err(NotApplicable)` with the formatted reason unless the condition holds.
#[macro_export]
macro_rules! require {
    ($cond:expr, $($reason:tt)+) => {
        if !$cond {
            return Err($crate::NotApplicable(format!($($reason)+)));
        }
    };
}

/// Whose code a solver runs: reports keep gconv's own kernels apart from vendor libraries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SolverKind {
    /// gconv's own kernels.
    Own,
    /// Calls a vendor library, named here (e.g. `cuBLAS`, `cuDNN`).
    Vendor(&'static str),
    /// The reference: always applicable and slow, there to check others, never a find
    /// candidate.
    Oracle,
}

impl SolverKind {
    pub fn label(self) -> String {
        match self {
            SolverKind::Own => "gconv kernel".into(),
            SolverKind::Vendor(library) => format!("vendor: {library}"),
            SolverKind::Oracle => "oracle".into(),
        }
    }
}

/// One way to compute convolutions, as facts that need no device. A solver is built for one
/// device (its registry's), so device facts it needs are fields of the solver.
pub trait Solver: Send + Sync {
    /// Stable id stored in databases: never derived from a type name or a list position.
    fn id(&self) -> &'static str;

    fn kind(&self) -> SolverKind {
        SolverKind::Own
    }

    /// `Ok` when this solver can compute the (validated) problem, else the reason it cannot.
    fn applicable(&self, p: &ConvProblem) -> Result<(), NotApplicable>;

    /// Scratch memory the solution needs with this config.
    fn workspace_bytes(&self, _p: &ConvProblem, _config: &Config) -> u64 {
        0
    }

    /// The config used when nothing better is known; empty for a solver with nothing to tune.
    fn default_config(&self, _p: &ConvProblem) -> Config {
        Config::empty()
    }

    /// Every valid config for the problem, lazily: the search space of tuning. Empty when the
    /// solver is not tunable.
    fn configs<'a>(&'a self, _p: &'a ConvProblem) -> Box<dyn Iterator<Item = Config> + 'a> {
        Box::new(std::iter::empty())
    }

    /// The configs of [`Solver::configs`] that are among `wanted`, in its order, as cheaply as
    /// the solver can tell: a library listing its configs may list fewer sources for it (the
    /// model's pick asks for the configs it was trained on).
    fn configs_among(&self, p: &ConvProblem, wanted: &HashSet<Config>) -> Vec<Config> {
        self.configs(p).filter(|c| wanted.contains(c)).collect()
    }

    /// What a ranking may weigh of `wanted` before the library is asked about each config
    /// alone: [`Solver::configs_among`]'s, and the configs of `wanted` it would ask about one
    /// by one, unconfirmed (whoever takes one asks [`Solver::configs_among`] first). A
    /// ranking weighs many configs and a pick takes one, so only the configs tried are asked.
    fn configs_to_rank(&self, p: &ConvProblem, wanted: &HashSet<Config>) -> Vec<Config> {
        self.configs_among(p, wanted)
    }

    /// Whether find times every config of [`Solver::configs`] rather than only the best known
    /// one: for vendor libraries whose own find times a list of candidates.
    fn find_times_every_config(&self) -> bool {
        false
    }

    /// Whether a config (e.g. read back from a database) is valid for the problem.
    fn check_config(&self, _p: &ConvProblem, config: &Config) -> Result<()> {
        if config.is_empty() {
            Ok(())
        } else {
            Err(GconvError::BadConfig {
                text: config.to_string(),
                reason: format!("solver `{}` has nothing to tune", self.id()),
            })
        }
    }

    /// Whether running this config would first have to build (compile) something that is not
    /// cached yet: `dynamic-hybrid` find skips such candidates.
    fn needs_build(&self, _p: &ConvProblem, _config: &Config) -> bool {
        false
    }

    /// The part of building a solution that needs no device, such as compiling kernels, so
    /// that it can run ahead of time in parallel (`gconv precompile`).
    fn prepare(&self, _p: &ConvProblem, _config: &Config) -> Result<()> {
        Ok(())
    }

    fn is_oracle(&self) -> bool {
        self.kind() == SolverKind::Oracle
    }

    /// Why find lists this config without running it, when it should (tuning still runs it):
    /// for a config too costly to prepare for the chance it has.
    fn find_skips(&self, _p: &ConvProblem, _config: &Config) -> Option<String> {
        None
    }

    /// A fallback (a naive kernel): find runs it only when no other candidate could be timed,
    /// and the rule takes it last.
    fn is_fallback(&self) -> bool {
        false
    }

    /// What the solver can say of a config beyond its text (`gconv explain --configs`).
    fn describe_config(&self, _p: &ConvProblem, _config: &Config) -> Option<String> {
        None
    }

    /// What listing the problem's configs took, where that is worth saying (a vendor library
    /// asked per problem; `gconv explain --configs`).
    fn describe_listing(&self, _p: &ConvProblem) -> Option<String> {
        None
    }
}

/// A solver of backend `B`: it turns an applicable problem and a valid config into an invoker.
pub trait Solve<B: Backend>: Solver {
    fn solution(&self, p: &ConvProblem, config: &Config) -> Result<Box<dyn Invoker<B>>>;
}

/// Runs a prepared solution on buffers; built once, invoked many times.
pub trait Invoker<B: Backend>: Send + Sync {
    fn run(&self, buffers: &mut B::Buffers<'_>) -> Result<()>;
}

/// Kernel builds since the process started: NVRTC compilations, binaries found in the disk
/// cache and in the process, and milliseconds spent compiling; and a vendor library's listings
/// of a problem's configs, made or read from the disk cache.
#[derive(Debug, Default, Clone, Copy, PartialEq, serde::Serialize)]
pub struct BuildStats {
    pub builds: u32,
    pub disk_hits: u32,
    pub memory_hits: u32,
    pub build_ms: f64,
    pub listings: u32,
    pub listings_from_disk: u32,
}

impl BuildStats {
    /// What happened between `before` and these.
    pub fn since(&self, before: &BuildStats) -> BuildStats {
        BuildStats {
            builds: self.builds - before.builds,
            disk_hits: self.disk_hits - before.disk_hits,
            memory_hits: self.memory_hits - before.memory_hits,
            build_ms: self.build_ms - before.build_ms,
            listings: self.listings - before.listings,
            listings_from_disk: self.listings_from_disk - before.listings_from_disk,
        }
    }
}

/// A solver and config made ready to run one problem on its backend.
pub struct Solution {
    pub solver_id: &'static str,
    pub config: Config,
    /// The problem it was built for: a backend runs it only on that problem's data.
    pub problem: ConvProblem,
    pub workspace_bytes: u64,
    /// The backend's `Box<dyn Invoker<B>>`; [`Solution::invoker`] gives it back typed.
    invoker: Box<dyn Any + Send + Sync>,
}

impl Solution {
    /// Checks applicability and the config, then builds the solution.
    pub fn build<B: Backend>(solver: &dyn Solve<B>, p: &ConvProblem, config: Config) -> Result<Self> {
        p.validate()?;
        solver.applicable(p).map_err(|r| GconvError::NotApplicable { solver: solver.id().into(), reason: r.0 })?;
        solver.check_config(p, &config)?;
        let invoker: Box<dyn Invoker<B>> = solver.solution(p, &config)?;
        Ok(Solution {
            solver_id: solver.id(),
            workspace_bytes: solver.workspace_bytes(p, &config),
            problem: p.clone(),
            invoker: Box::new(invoker),
            config,
        })
    }

    /// The invoker, when the solution was built for backend `B`.
    pub fn invoker<B: Backend>(&self) -> Result<&dyn Invoker<B>> {
        self.invoker.downcast_ref::<Box<dyn Invoker<B>>>().map(|i| i.as_ref()).ok_or_else(|| {
            GconvError::Backend(format!("{} was built for another backend than {}", self.solver_id, B::NAME))
        })
    }
}

/// All solvers of one backend, one entry each, in priority order: without measurements or a
/// model, the first applicable solver is the pick.
pub struct Registry<B: Backend> {
    solvers: Vec<Box<dyn Solve<B>>>,
}

impl<B: Backend> Registry<B> {
    pub fn new(solvers: Vec<Box<dyn Solve<B>>>) -> Self {
        for (i, s) in solvers.iter().enumerate() {
            assert!(solvers[..i].iter().all(|t| t.id() != s.id()), "solver id `{}` registered twice", s.id());
        }
        Registry { solvers }
    }

    pub fn iter(&self) -> impl Iterator<Item = &dyn Solve<B>> {
        self.solvers.iter().map(|s| s.as_ref())
    }

    pub fn get(&self, id: &str) -> Result<&dyn Solve<B>> {
        self.iter().find(|s| s.id() == id).ok_or_else(|| GconvError::UnknownSolver(id.to_string()))
    }

    /// The backend-free view of every solver, in priority order.
    pub fn solvers(&self) -> Vec<&dyn Solver> {
        self.iter().map(|s| s as &dyn Solver).collect()
    }

    /// Builds solver `id`'s solution.
    pub fn build(&self, id: &str, p: &ConvProblem, config: Config) -> Result<Solution> {
        Solution::build(self.get(id)?, p, config)
    }
}
