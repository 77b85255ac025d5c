//! Kernel builds ahead of measuring: NVRTC takes hundreds of milliseconds a kernel, so find,
//! tuning and `gconv precompile` build in parallel threads what they are about to run.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use gconv_core::{Config, ConvProblem, Solver};

/// A solver and config to build for a problem.
pub struct BuildJob<'a> {
    pub solver: &'a dyn Solver,
    pub problem: ConvProblem,
    pub config: Config,
}

/// The threads builds use: one per core.
pub fn build_threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// Runs `Solver::prepare` for every job, `threads` at a time, and returns the failures as
/// messages (running the solution later reports them again, in its own words).
pub fn prepare_in_parallel(jobs: &[BuildJob<'_>], threads: usize) -> Vec<String> {
    let next = AtomicUsize::new(0);
    let failures = Mutex::new(Vec::new());
    std::thread::scope(|scope| {
        for _ in 0..threads.min(jobs.len()) {
            scope.spawn(|| {
                while let Some(job) = jobs.get(next.fetch_add(1, Ordering::Relaxed)) {
                    if let Err(e) = job.solver.prepare(&job.problem, &job.config) {
                        let message = format!("{} {} for {}: {e}", job.solver.id(), job.config, job.problem.key());
                        failures.lock().unwrap().push(message);
                    }
                }
            });
        }
    });
    failures.into_inner().unwrap()
}

/// The jobs among `configs` of one solver that still need a build.
pub fn unbuilt<'a>(
    solver: &'a dyn Solver,
    p: &ConvProblem,
    configs: impl IntoIterator<Item = Config>,
) -> Vec<BuildJob<'a>> {
    configs
        .into_iter()
        .filter(|c| solver.needs_build(p, c))
        .map(|config| BuildJob { solver, problem: p.clone(), config })
        .collect()
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicU32;

    use gconv_core::{GconvError, NotApplicable, Result};

    use super::*;

    /// Counts builds; configs with `bad` fail to build, configs with `built` need none.
    struct Counting(AtomicU32);
    impl Solver for Counting {
        fn id(&self) -> &'static str {
            "test.counting"
        }
        fn applicable(&self, _p: &ConvProblem) -> Result<(), NotApplicable> {
            Ok(())
        }
        fn needs_build(&self, _p: &ConvProblem, config: &Config) -> bool {
            config.get("built").is_none()
        }
        fn prepare(&self, _p: &ConvProblem, config: &Config) -> Result<()> {
            self.0.fetch_add(1, Ordering::Relaxed);
            match config.get("bad") {
                Some(_) => Err(GconvError::Backend("no such kernel".into())),
                None => Ok(()),
            }
        }
    }

    #[test]
    fn builds_each_unbuilt_config_once_and_reports_failures() {
        let solver = Counting(AtomicU32::new(0));
        let p = ConvProblem::from_key("v1:fwd:f32:NCHW:n1:c4:k4:i5x5:f3x3:s1x1:p1x1:d1x1").unwrap();
        let configs = (1..=20)
            .map(|i| Config::new([("tile", i)]))
            .chain([Config::new([("built", 1)]), Config::new([("bad", 1)])]);
        let jobs = unbuilt(&solver, &p, configs);
        assert_eq!(jobs.len(), 21);
        let failures = prepare_in_parallel(&jobs, 4);
        assert_eq!(solver.0.load(Ordering::Relaxed), 21);
        assert_eq!(failures.len(), 1);
        assert!(failures[0].contains("bad1") && failures[0].contains("no such kernel"), "{failures:?}");
    }
}
