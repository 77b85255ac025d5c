//! gconv-heuristic: the learned heuristic. Synthetic problem sets and their split
//! ([`problems`]), features of a candidate ([`features`]), gradient-boosted regressors of log
//! time trained from sweep CSVs ([`train`], [`model`]), selection by the model
//! ([`rank::ModelHeuristic`], gconv-tune's [`gconv_tune::heuristic::Heuristic`]) and oracle
//! validation ([`validate`]).

mod boost;
pub mod features;
mod forest;
pub mod measured;
pub mod model;
mod model_files;
pub mod problems;
pub mod rank;
pub mod train;
pub mod validate;

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot use the model {origin}: {reason}")]
    BadModel { origin: String, reason: String },
    #[error("{}: {reason}", path.display())]
    BadData { path: PathBuf, reason: String },
    #[error("training failed: {0}")]
    Training(String),
    #[error("{}: {source}", path.display())]
    Io { path: PathBuf, source: std::io::Error },
}

pub type Result<T> = std::result::Result<T, Error>;
