//! Measuring one solution: a timed warm-up call, a verified run, then samples from the
//! runtime's timer, stopped after the first call when the candidate is clearly slower than the
//! best so far.
//! How a sample is taken is the backend's; how many, the time box and the median are here.

use gconv_core::verify::Verification;
use gconv_core::{Result, Solution, Timer, TimingOptions, Workload};

use crate::outcome::{Outcome, Timing};

/// A candidate whose first call takes over this multiple of the best time so far is neither
/// verified nor sampled.
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
    /// Over TIME_BOX_FACTOR x the best so far on one call: not verified, not sampled.
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

/// A first call, timed by the runtime's timer as a one-call estimate (the warm-up); a candidate
/// over the time box stops there, so a slow one costs a single call. Otherwise a run verified
/// against the workload's reference (when `check`) and up to `sampling.samples` samples; a
/// failed verification ends the evaluation untimed.
pub fn evaluate(
    workload: &mut dyn Workload,
    solution: &Solution,
    check: bool,
    sampling: Sampling,
) -> Result<Evaluation> {
    if sampling.samples == 0 {
        workload.run(solution)?;
    } else {
        let estimate_ms = workload.timer(solution, sampling.options)?.estimate() * 1e3;
        if sampling.best_ms.is_some_and(|best| estimate_ms > TIME_BOX_FACTOR * best) {
            let timing = Timing { ms: estimate_ms, samples: 1, calls: 1, method: gconv_core::TimingMethod::SpinQueued };
            return Ok(Evaluation { verification: None, timing: Some(timing), time_boxed: true });
        }
    }
    let verification = if check { Some(workload.run_checked(solution)?) } else { None };
    if verification.is_some_and(|v| !v.passed) || sampling.samples == 0 {
        return Ok(Evaluation { verification, timing: None, time_boxed: false });
    }
    let mut timer = workload.timer(solution, sampling.options)?;
    let timing = Timing {
        ms: median_ms(timer.as_mut(), sampling.samples)?,
        samples: sampling.samples,
        calls: timer.calls(),
        method: timer.method(),
    };
    Ok(Evaluation { verification, timing: Some(timing), time_boxed: false })
}

/// The median of `samples` (at least one) samples of a timer, in ms.
pub fn median_ms(timer: &mut dyn Timer, samples: u32) -> Result<f64> {
    let mut samples = (0..samples.max(1)).map(|_| timer.sample().map(|s| s * 1e3)).collect::<Result<Vec<_>>>()?;
    samples.sort_by(f64::total_cmp);
    Ok(samples[samples.len() / 2])
}
