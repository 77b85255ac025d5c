//! The one place that decides a candidate's config: the perf-db's tuned config when its solver
//! still accepts it, else the solver's default.

use gconv_core::{Config, ConvProblem, Solver};

use crate::db::Db;
use crate::Result;

/// Where a candidate's config came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConfigOrigin {
    /// The solver's default (nothing tuned, or nothing to tune).
    Default,
    /// The perf-db's tuned config.
    Tuned,
    /// Found by find among a vendor library's configs (find times every one of them).
    Found,
}

impl ConfigOrigin {
    pub fn label(self) -> &'static str {
        match self {
            ConfigOrigin::Default => "default",
            ConfigOrigin::Tuned => "tuned (perf-db)",
            ConfigOrigin::Found => "found by find",
        }
    }
}

/// The perf-db's config for `solver`, if its solver still accepts it. A rejected config is
/// never run: it is skipped with a warning in `db.warnings`.
pub fn tuned_config(db: &mut Db, device: &str, solver: &dyn Solver, p: &ConvProblem) -> Result<Option<Config>> {
    let Some(record) = db.perf(&p.key(), device, solver.id())? else { return Ok(None) };
    match checked(solver, p, &record.config) {
        Ok(config) => Ok(Some(config)),
        Err(reason) => {
            db.warnings.push(format!("skipping config `{}` of {} from the perf-db for {}: {reason}", record.config, solver.id(), p.key()));
            Ok(None)
        }
    }
}

/// The config a candidate runs with when nothing else says which, and where it came from.
pub fn known_config(db: &mut Db, device: &str, solver: &dyn Solver, p: &ConvProblem) -> Result<(Config, ConfigOrigin)> {
    Ok(match tuned_config(db, device, solver, p)? {
        Some(config) => (config, ConfigOrigin::Tuned),
        None => (solver.default_config(p), ConfigOrigin::Default),
    })
}

/// Where `config`, chosen by a find, came from.
pub fn origin_of(db: &mut Db, device: &str, solver: &dyn Solver, p: &ConvProblem, config: &Config) -> Result<ConfigOrigin> {
    Ok(match known_config(db, device, solver, p)? {
        (known, origin) if known == *config => origin,
        _ => ConfigOrigin::Found,
    })
}

/// Parses a stored config text and checks it against the solver and problem.
pub fn checked(solver: &dyn Solver, p: &ConvProblem, text: &str) -> std::result::Result<Config, String> {
    let config: Config = text.parse().map_err(|e: gconv_core::GconvError| e.to_string())?;
    solver.check_config(p, &config).map_err(|e| e.to_string())?;
    Ok(config)
}
