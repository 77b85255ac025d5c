use thiserror::Error;

/// Every failure gconv reports. Messages are written for the person at the terminal.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum GconvError {
    #[error("invalid problem: {0}")]
    InvalidProblem(String),
    #[error("invalid problem key `{key}`: {reason}")]
    BadKey { key: String, reason: String },
    #[error("invalid config `{text}`: {reason}")]
    BadConfig { text: String, reason: String },
    #[error("solver `{solver}` cannot run this problem: {reason}")]
    NotApplicable { solver: String, reason: String },
    #[error("unknown solver `{0}` (run `gconv explain` to list the solvers)")]
    UnknownSolver(String),
    #[error("tensor mismatch: {0}")]
    TensorMismatch(String),
    #[error("{0}")]
    Backend(String),
}

pub type Result<T, E = GconvError> = std::result::Result<T, E>;
