//! What happened to a candidate in find or tuning, typed; text only at the database and the
//! printers.

use std::fmt;

use gconv_core::verify::Verification;
use gconv_core::{GconvError, TimingMethod};
use serde::Serialize;

/// A measured time: the median of `samples` samples of `calls` back-to-back calls each.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Timing {
    pub ms: f64,
    pub samples: u32,
    pub calls: u32,
    pub method: TimingMethod,
}

/// Why a candidate was not run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Skip {
    /// `dynamic-hybrid` runs only what is built already.
    NeedsBuild,
    Workspace {
        bytes: u64,
        limit: u64,
    },
    /// A fallback solver, and another candidate was timed.
    Fallback,
    /// The solver's reason to leave the config to tuning.
    LeftToTuning(String),
}

impl fmt::Display for Skip {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Skip::NeedsBuild => f.write_str("needs a new kernel build"),
            Skip::Workspace { bytes, limit } => write!(f, "workspace {bytes} B over the limit of {limit} B"),
            Skip::Fallback => f.write_str("a fallback, and another candidate ran"),
            Skip::LeftToTuning(reason) => write!(f, "left to tuning: {reason}"),
        }
    }
}

#[derive(Debug, Clone)]
pub enum Outcome {
    /// Verified and fully timed.
    Timed(Timing),
    /// One call over the time box: neither verified nor sampled further.
    TimeBoxed(Timing),
    NotRun(Skip),
    WrongResult(Verification),
    Failed(GconvError),
}

/// Status text of a verified, fully timed candidate in the database.
pub const STATUS_OK: &str = "ok";
pub const STATUS_TIME_BOXED: &str = "time-boxed";

impl Outcome {
    /// The time of a fully timed candidate.
    pub fn timed_ms(&self) -> Option<f64> {
        match self {
            Outcome::Timed(t) => Some(t.ms),
            _ => None,
        }
    }

    /// The time of any timed candidate, time-boxed ones included.
    pub fn any_ms(&self) -> Option<f64> {
        match self {
            Outcome::Timed(t) | Outcome::TimeBoxed(t) => Some(t.ms),
            _ => None,
        }
    }

    pub fn verified(&self) -> bool {
        matches!(self, Outcome::Timed(_))
    }

    /// Ranking class: fully timed, then time-boxed, then the rest.
    pub fn class(&self) -> u8 {
        match self {
            Outcome::Timed(_) => 0,
            Outcome::TimeBoxed(_) => 1,
            _ => 2,
        }
    }

    /// The database's and printers' text.
    pub fn status(&self) -> String {
        match self {
            Outcome::Timed(_) => STATUS_OK.into(),
            Outcome::TimeBoxed(_) => STATUS_TIME_BOXED.into(),
            Outcome::NotRun(skip) => format!("not run: {skip}"),
            Outcome::WrongResult(v) => {
                format!("failed verification: error {:.3e} > tolerance {:.3e}", v.max_error, v.tolerance)
            }
            Outcome::Failed(e) => format!("failed: {e}"),
        }
    }
}
