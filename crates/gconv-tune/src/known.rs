//! Configs read back from the perf-db, checked before use.

use gconv_core::{Backend, Config, ConvProblem, Solver};

use crate::db::Db;
use crate::Result;

/// Where a candidate's config came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConfigOrigin {
    /// The solver's default (nothing tuned, or nothing to tune).
    Default,
    /// The perf-db's tuned config.
    Tuned,
}

impl ConfigOrigin {
    pub fn label(self) -> &'static str {
        match self {
            ConfigOrigin::Default => "default",
            ConfigOrigin::Tuned => "tuned (perf-db)",
        }
    }
}

/// The perf-db's config for `solver` if its solver still accepts it, else the default. A
/// rejected config is never run: it is skipped with a warning in `db.warnings`.
pub fn known_config<B: Backend>(
    db: &mut Db,
    device: &str,
    solver: &dyn Solver<B>,
    p: &ConvProblem,
) -> Result<(Config, ConfigOrigin)> {
    if let Some(record) = db.perf(&p.key(), device, solver.id())? {
        match checked(solver, p, &record.config) {
            Ok(config) => return Ok((config, ConfigOrigin::Tuned)),
            Err(reason) => db.warnings.push(format!(
                "skipping config `{}` of {} from the perf-db for {}: {reason}",
                record.config,
                solver.id(),
                p.key()
            )),
        }
    }
    Ok((solver.default_config(p), ConfigOrigin::Default))
}

/// Parses a stored config text and checks it against the solver and problem.
pub fn checked<B: Backend>(solver: &dyn Solver<B>, p: &ConvProblem, text: &str) -> std::result::Result<Config, String> {
    let config: Config = text.parse().map_err(|e: gconv_core::GconvError| e.to_string())?;
    solver.check_config(p, &config).map_err(|e| e.to_string())?;
    Ok(config)
}

/// Whether a config from the db carries the tuned config of the perf-db.
pub fn origin_of<B: Backend>(db: &Db, device: &str, solver: &dyn Solver<B>, p: &ConvProblem, config: &Config) -> Result<ConfigOrigin> {
    let tuned = db.perf(&p.key(), device, solver.id())?.is_some_and(|r| r.config == config.to_string());
    Ok(if tuned { ConfigOrigin::Tuned } else { ConfigOrigin::Default })
}
