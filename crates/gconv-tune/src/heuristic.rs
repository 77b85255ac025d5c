//! What selection needs from a learned heuristic (gconv-heuristic's models): a problem's
//! candidates ranked by predicted time, with nothing run.

use std::sync::Arc;

use gconv_core::{Config, ConvProblem, Runtime};

/// One candidate and its predicted time.
#[derive(Debug, Clone, PartialEq)]
pub struct Predicted {
    pub solver: String,
    pub config: Config,
    pub ms: f64,
}

/// A problem's candidates, fastest predicted first.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Ranking {
    pub candidates: Vec<Predicted>,
}

pub trait Heuristic: Send + Sync {
    /// The ranking of `p`'s candidates on `rt`, or `None` when no model covers the problem's
    /// direction and data type.
    fn rank(&self, rt: &dyn Runtime, p: &ConvProblem) -> Option<Arc<Ranking>>;
    /// Names the model for reports.
    fn describe(&self) -> String;
}
