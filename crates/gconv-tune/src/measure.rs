//! Running one solution: a warm-up run that is also verified, then timed runs, stopped early
//! once the candidate is clearly slower than the best so far.

use gconv_core::verify::{verify, Verification};
use gconv_core::{ConvProblem, Solution};
use serde::Serialize;

use crate::target::Target;
use crate::Result;

/// A candidate whose first timed run exceeds this multiple of the best time so far is not
/// timed further.
pub const TIME_BOX_FACTOR: f64 = 2.0;

#[derive(Debug, Clone, Copy)]
pub struct TimingPlan {
    /// Timed runs after the warm-up.
    pub iterations: u32,
    /// Best time so far, in ms, for time-boxing.
    pub best_ms: Option<f64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Evaluation {
    /// Median of the timed runs, ms; None when not timed.
    pub time_ms: Option<f64>,
    pub samples: u32,
    /// Stopped after one sample because it was over TIME_BOX_FACTOR x the best so far.
    pub time_boxed: bool,
    pub verification: Option<Verification>,
}

impl Evaluation {
    pub fn verified_ok(&self) -> bool {
        self.verification.is_some_and(|v| v.passed)
    }
}

/// Warm-up (verified when `exact` is given), then up to `plan.iterations` timed runs.
/// A failed verification ends the evaluation untimed.
pub fn evaluate<T: Target>(
    target: &T,
    workload: &mut T::Workload,
    p: &ConvProblem,
    solution: &Solution<T::B>,
    exact: Option<&[f64]>,
    plan: TimingPlan,
) -> Result<Evaluation> {
    target.run(workload, solution)?;
    let verification = match exact {
        Some(exact) => Some(verify(p, &target.output(workload, p)?, exact)),
        None => None,
    };
    if verification.is_some_and(|v| !v.passed) || plan.iterations == 0 {
        return Ok(Evaluation { time_ms: None, samples: 0, time_boxed: false, verification });
    }
    let mut samples = Vec::with_capacity(plan.iterations as usize);
    let mut time_boxed = false;
    for _ in 0..plan.iterations {
        samples.push(target.run(workload, solution)? * 1e3);
        if samples.len() == 1 && plan.best_ms.is_some_and(|best| samples[0] > TIME_BOX_FACTOR * best) {
            time_boxed = true;
            break;
        }
    }
    samples.sort_by(f64::total_cmp);
    Ok(Evaluation { time_ms: Some(samples[samples.len() / 2]), samples: samples.len() as u32, time_boxed, verification })
}
