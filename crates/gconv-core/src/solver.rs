//! The solver contract (MIOpen's Solver / Solution / Invoker) and the registry.

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

/// One way to compute convolutions. A solver is built for one device (its registry's), so
/// device facts it needs are fields of the solver rather than arguments.
pub trait Solver<B: Backend>: Send + Sync {
    /// Stable id stored in databases: never derived from a type name or a list position.
    fn id(&self) -> &'static str;

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

    /// The part of `solution` that needs no device, such as building kernels, so that it can
    /// run ahead of time in parallel (`gconv precompile`).
    fn prepare(&self, _p: &ConvProblem, _config: &Config) -> Result<()> {
        Ok(())
    }

    /// The oracle: always applicable and slow, there to check others, never a find candidate.
    fn is_oracle(&self) -> bool {
        false
    }

    /// Prepares the computation for an applicable problem and a valid config.
    fn solution(&self, p: &ConvProblem, config: &Config) -> Result<Box<dyn Invoker<B>>>;
}

/// Runs a prepared solution on buffers; built once, invoked many times.
pub trait Invoker<B: Backend>: Send + Sync {
    fn run(&self, buffers: &mut B::Buffers<'_>) -> Result<()>;
}

/// Kernel builds since the process started: NVRTC compilations, binaries found in the disk
/// cache and in the process, and milliseconds spent compiling.
#[derive(Debug, Default, Clone, Copy, PartialEq, serde::Serialize)]
pub struct BuildStats {
    pub builds: u32,
    pub disk_hits: u32,
    pub memory_hits: u32,
    pub build_ms: f64,
}

/// A solver and config made ready to run: what `Solver::solution` builds plus what it needs.
pub struct Solution<B: Backend> {
    pub solver_id: &'static str,
    pub config: Config,
    pub workspace_bytes: u64,
    pub invoker: Box<dyn Invoker<B>>,
}

impl<B: Backend> Solution<B> {
    /// Checks applicability and the config, then builds the solution.
    pub fn build(solver: &dyn Solver<B>, p: &ConvProblem, config: Config) -> Result<Self> {
        p.validate()?;
        solver
            .applicable(p)
            .map_err(|r| GconvError::NotApplicable { solver: solver.id().into(), reason: r.0 })?;
        solver.check_config(p, &config)?;
        Ok(Solution {
            solver_id: solver.id(),
            workspace_bytes: solver.workspace_bytes(p, &config),
            invoker: solver.solution(p, &config)?,
            config,
        })
    }
}

/// All solvers of one backend, one entry each, in priority order: without measurements or a
/// model, the first applicable solver is the pick.
pub struct Registry<B: Backend> {
    solvers: Vec<Box<dyn Solver<B>>>,
}

impl<B: Backend> Registry<B> {
    pub fn new(solvers: Vec<Box<dyn Solver<B>>>) -> Self {
        for (i, s) in solvers.iter().enumerate() {
            assert!(
                solvers[..i].iter().all(|t| t.id() != s.id()),
                "solver id `{}` registered twice",
                s.id()
            );
        }
        Registry { solvers }
    }

    pub fn iter(&self) -> impl Iterator<Item = &dyn Solver<B>> {
        self.solvers.iter().map(|s| s.as_ref())
    }

    pub fn get(&self, id: &str) -> Result<&dyn Solver<B>> {
        self.iter().find(|s| s.id() == id).ok_or_else(|| GconvError::UnknownSolver(id.to_string()))
    }

    pub fn applicable<'a>(&'a self, p: &'a ConvProblem) -> impl Iterator<Item = &'a dyn Solver<B>> {
        self.iter().filter(move |s| s.applicable(p).is_ok())
    }
}
