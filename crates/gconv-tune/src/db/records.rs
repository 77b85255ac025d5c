//! The records the databases hold, the key they are stored under, and what a lookup reports
//! about records it cannot use.

use std::fmt;
use std::path::PathBuf;

use gconv_core::ConvProblem;
use serde::{Deserialize, Serialize};

/// What records are stored under: one problem (its canonical key) on one device (its device
/// key, which names the backend, the device and the vendor library versions).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RecordKey {
    pub problem: String,
    pub device: String,
}

impl RecordKey {
    pub fn new(problem: &ConvProblem, device: &str) -> Self {
        RecordKey { problem: problem.key(), device: device.to_string() }
    }
}

/// The best known config of one solver for one problem on one device.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PerfRecord {
    pub problem: String,
    pub device: String,
    pub solver: String,
    pub config: String,
    pub time_ms: f64,
    pub verified: bool,
    pub gconv_version: String,
    pub format_version: i64,
}

/// One row of a find result: candidates ranked fastest first, failures last.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FindRecord {
    pub problem: String,
    pub device: String,
    pub rank: u32,
    pub solver: String,
    pub config: String,
    pub time_ms: Option<f64>,
    pub workspace_bytes: u64,
    pub verified: bool,
    /// `ok`, `time-boxed`, or why the candidate did not run or failed.
    pub status: String,
    pub gconv_version: String,
}

impl FindRecord {
    pub fn key(&self) -> RecordKey {
        RecordKey { problem: self.problem.clone(), device: self.device.clone() }
    }
}

/// One measured config during tuning; what makes a killed tuning run resumable.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TrialRecord {
    pub problem: String,
    pub device: String,
    pub solver: String,
    pub config: String,
    pub time_ms: Option<f64>,
    pub status: String,
}

/// A record as one line of an export.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "table", rename_all = "lowercase")]
pub enum Record {
    Perf(PerfRecord),
    Find(FindRecord),
}

/// Which database a skipped record came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Table {
    Perf,
    Find,
}

/// Something the user should know that did not stop the work, returned with the result it
/// concerns; the printers turn it into text.
#[derive(Debug, Clone, PartialEq)]
pub enum Warning {
    /// The user db was not usable; it was moved aside and a fresh one started.
    SetAside { path: PathBuf, aside: PathBuf, reason: String },
    /// A stored record that was not used: its solver is unknown or no longer applies, or
    /// rejects its config.
    Skipped { table: Table, problem: String, solver: String, config: String, reason: String },
}

impl fmt::Display for Warning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Warning::SetAside { path, aside, reason } => write!(
                f,
                "{} is not a usable gconv database ({reason}); moved it to {} and started a fresh one",
                path.display(),
                aside.display()
            ),
            Warning::Skipped { table: Table::Perf, problem, solver, config, reason } => {
                write!(f, "skipping config `{config}` of {solver} from the perf-db for {problem}: {reason}")
            }
            Warning::Skipped { table: Table::Find, problem, solver, config, reason } => {
                write!(f, "skipping find-db entry {solver} `{config}` for {problem}: {reason}")
            }
        }
    }
}
