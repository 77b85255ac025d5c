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
    /// The device can run nothing more in this process (on CUDA: a sticky error such as an
    /// illegal address poisoned the context). Find and tuning stop rather than record every
    /// later candidate as failed.
    #[error("the device is unusable for the rest of this process: {0}")]
    DeviceLost(String),
}

impl GconvError {
    pub fn is_device_lost(&self) -> bool {
        matches!(self, GconvError::DeviceLost(_))
    }
}

pub type Result<T, E = GconvError> = std::result::Result<T, E>;
