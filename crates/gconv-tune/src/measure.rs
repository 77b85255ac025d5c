//! Measuring one solution: a warm-up run that is also verified, then samples from the
//! runtime's timer, stopped early once the candidate is clearly slower than the best so far.
//! How a sample is taken is the backend's; how many, the time box and the median are here.

use gconv_core::verify::{verify, Verification};
use gconv_core::{ConvProblem, Result, Solution, TimingOptions, Workload};

use crate::outcome::{Outcome, Timing};

/// A candidate whose first sample exceeds this multiple of the best time so far is not
/// sampled further.
pub const TIME_BOX_FACTOR: f64 = 2.0;

#[derive(Debug, Clone, Copy)]
pub struct Sampling {
    /// Samples after the warm-up; 0 runs and verifies only.
    pub samples: u32,
    /// Best time so far, in ms, for time-boxing.
    pub best_ms: Option<f64>,
    pub options: TimingOptions,
}

#[derive(Debug, Clone)]
pub struct Evaluation {
    pub verification: Option<Verification>,
    pub timing: Option<Timing>,
    /// Stopped after one sample: over TIME_BOX_FACTOR x the best so far.
    pub time_boxed: bool,
}

impl Evaluation {
    pub fn outcome(self) -> Outcome {
        match (self.verification, self.timing) {
            (Some(v), _) if !v.passed => Outcome::WrongResult(v),
            (_, Some(t)) if self.time_boxed => Outcome::TimeBoxed(t),
            (_, Some(t)) => Outcome::Timed(t),
            (_, None) => Outcome::Failed(gconv_core::GconvError::Backend("not timed".into())),
        }
    }
}

/// A run (verified against `exact` when given), then up to `sampling.samples` samples. A
/// failed verification ends the evaluation untimed.
pub fn evaluate(
    workload: &mut dyn Workload,
    p: &ConvProblem,
    solution: &Solution,
    exact: Option<&[f64]>,
    sampling: Sampling,
) -> Result<Evaluation> {
    workload.run(solution)?;
    let verification = match exact {
        Some(exact) => Some(verify(p, &workload.output()?, exact)),
        None => None,
    };
    if verification.is_some_and(|v| !v.passed) || sampling.samples == 0 {
        return Ok(Evaluation { verification, timing: None, time_boxed: false });
    }
    let mut timer = workload.timer(solution, sampling.options)?;
    let mut samples = Vec::with_capacity(sampling.samples as usize);
    let mut time_boxed = false;
    for _ in 0..sampling.samples {
        samples.push(timer.sample()? * 1e3);
        if samples.len() == 1 && sampling.best_ms.is_some_and(|best| samples[0] > TIME_BOX_FACTOR * best) {
            time_boxed = true;
            break;
        }
    }
    samples.sort_by(f64::total_cmp);
    let timing = Timing { ms: samples[samples.len() / 2], samples: samples.len() as u32, calls: timer.calls(), method: timer.method() };
    Ok(Evaluation { verification, timing: Some(timing), time_boxed })
}
