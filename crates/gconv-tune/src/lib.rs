//! gconv-tune: find, tuning, find modes and the SQLite perf-db / find-db.

pub mod db;
mod error;
pub mod find;
pub mod known;
pub mod measure;
pub mod prebuild;
pub mod search;
pub mod select;
pub mod target;
pub mod tune;

pub use error::{Result, TuneError};
