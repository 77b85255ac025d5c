//! gconv-tune: find, tuning, find modes and the SQLite perf-db / find-db. It sees backends only
//! through gconv-core's `Runtime` trait.

pub mod db;
mod error;
pub mod find;
pub mod heuristic;
pub mod known;
pub mod measure;
pub mod outcome;
pub mod prebuild;
pub mod search;
pub mod select;
pub mod sweep;
pub mod tune;

pub use error::{Result, TuneError};
