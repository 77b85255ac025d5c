//! The one place that decides a candidate's config: the perf-db's tuned config when its solver
//! still accepts it, else the solver's default.

use gconv_core::{Config, ConvProblem, Solver};

use crate::db::{Db, RecordKey, Table, Warning};
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
    /// The learned model's fastest predicted config.
    Predicted,
    /// Named by the user (`--config`).
    Given,
}

impl ConfigOrigin {
    pub fn label(self) -> &'static str {
        match self {
            ConfigOrigin::Default => "default",
            ConfigOrigin::Tuned => "tuned (perf-db)",
            ConfigOrigin::Found => "found by find",
            ConfigOrigin::Predicted => "predicted by the model",
            ConfigOrigin::Given => "given (--config)",
        }
    }
}

/// A candidate's config, where it came from, and the perf-db record it could not use (its
/// solver now rejects the config, so it never runs).
#[derive(Debug, Clone)]
pub struct Known {
    pub config: Config,
    pub origin: ConfigOrigin,
    pub skipped: Option<Warning>,
}

/// The config a candidate runs with when nothing else says which: the perf-db's, when its
/// solver still accepts it, else the default.
pub fn known_config(db: &Db, device: &str, solver: &dyn Solver, p: &ConvProblem) -> Result<Known> {
    let default = || solver.default_config(p);
    let Some(record) = db.perf(&RecordKey::new(p, device), solver.id())? else {
        return Ok(Known { config: default(), origin: ConfigOrigin::Default, skipped: None });
    };
    Ok(match checked(solver, p, &record.config) {
        Ok(config) => Known { config, origin: ConfigOrigin::Tuned, skipped: None },
        Err(e) => {
            let skipped = Warning::Skipped {
                table: Table::Perf,
                problem: record.problem,
                solver: record.solver,
                config: record.config,
                reason: e.to_string(),
            };
            Known { config: default(), origin: ConfigOrigin::Default, skipped: Some(skipped) }
        }
    })
}

/// Where `config`, chosen by a find, came from.
pub fn origin_of(db: &Db, device: &str, solver: &dyn Solver, p: &ConvProblem, config: &Config) -> Result<ConfigOrigin> {
    let known = known_config(db, device, solver, p)?;
    Ok(if known.config == *config { known.origin } else { ConfigOrigin::Found })
}

/// Parses a config text (stored, or given by the user) and checks it against the solver and
/// problem.
pub fn checked(solver: &dyn Solver, p: &ConvProblem, text: &str) -> gconv_core::Result<Config> {
    let config: Config = text.parse()?;
    solver.check_config(p, &config)?;
    Ok(config)
}
