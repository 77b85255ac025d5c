//! Search strategies: which configs of a solver's space tuning measures, in what order, and
//! for how long. Strategies are apart from solvers; a model-guided strategy (the heuristic
//! ranks the space, only the top few are timed) is one more implementation of the trait.

use std::time::Duration;

use gconv_core::{Config, ConvProblem, Solver};
use rand::rngs::SmallRng;
use rand::seq::SliceRandom;
use rand::SeedableRng;

pub trait SearchStrategy {
    /// Text for reports, e.g. `random(count=20)`.
    fn describe(&self) -> String;
    /// The configs to measure, in order, drawn from `space` (every valid config).
    fn schedule(&self, p: &ConvProblem, solver: &dyn Solver, space: Vec<Config>) -> Vec<Config>;
    /// Wall-clock budget per solver; measuring stops when it is spent.
    fn time_budget(&self) -> Option<Duration> {
        None
    }
}

/// Every config, in the solver's order.
pub struct Exhaustive;

impl SearchStrategy for Exhaustive {
    fn describe(&self) -> String {
        "exhaustive".into()
    }

    fn schedule(&self, _p: &ConvProblem, _solver: &dyn Solver, space: Vec<Config>) -> Vec<Config> {
        space
    }
}

/// A seeded random sample, limited by count and/or time.
pub struct Random {
    pub count: Option<usize>,
    pub seconds: Option<f64>,
    pub seed: u64,
}

impl SearchStrategy for Random {
    fn describe(&self) -> String {
        let mut parts = vec![format!("seed={}", self.seed)];
        if let Some(c) = self.count {
            parts.push(format!("count={c}"));
        }
        if let Some(s) = self.seconds {
            parts.push(format!("seconds={s}"));
        }
        format!("random({})", parts.join(", "))
    }

    fn schedule(&self, p: &ConvProblem, solver: &dyn Solver, mut space: Vec<Config>) -> Vec<Config> {
        // The same problem and solver draw the same sample, so a resumed run continues it.
        let seed = self.seed ^ u64::from_le_bytes(fnv1a(&format!("{}|{}", p.key(), solver.id())));
        space.shuffle(&mut SmallRng::seed_from_u64(seed));
        space.truncate(self.count.unwrap_or(usize::MAX));
        space
    }

    fn time_budget(&self) -> Option<Duration> {
        self.seconds.map(Duration::from_secs_f64)
    }
}

/// A fixed 64-bit FNV-1a hash: stable across runs and platforms, unlike `DefaultHasher`.
pub(crate) fn fnv1a(text: &str) -> [u8; 8] {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in text.bytes() {
        h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    h.to_le_bytes()
}
