//! Choosing the solver for a problem by find mode, from the databases or by measuring.

use std::fmt;
use std::str::FromStr;

use gconv_core::{Config, ConvProblem};

use crate::db::{Db, FindRecord};
use crate::find::{find, FindOptions, STATUS_OK};
use crate::known::{checked, known_config, origin_of, ConfigOrigin};
use crate::target::Target;
use crate::Result;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FindMode {
    /// Benchmark every candidate.
    Normal,
    /// The find-db, else the rule; never benchmark.
    Fast,
    /// The find-db, else a normal find.
    Hybrid,
    /// The find-db, else a find over candidates that need no new kernel build.
    DynamicHybrid,
}

impl FindMode {
    pub const ALL: [FindMode; 4] = [Self::Normal, Self::Fast, Self::Hybrid, Self::DynamicHybrid];

    pub fn token(self) -> &'static str {
        match self {
            Self::Normal => "normal",
            Self::Fast => "fast",
            Self::Hybrid => "hybrid",
            Self::DynamicHybrid => "dynamic-hybrid",
        }
    }
}

impl fmt::Display for FindMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.token())
    }
}

impl FromStr for FindMode {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        Self::ALL
            .into_iter()
            .find(|m| m.token() == s)
            .ok_or_else(|| format!("unknown find mode `{s}` (expected normal, fast, hybrid or dynamic-hybrid)"))
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// A stored find result.
    FindDb,
    /// A find run now.
    Find,
    /// The first applicable solver in priority order whose workspace fits.
    Rule,
}

impl Source {
    pub fn label(self) -> &'static str {
        match self {
            Source::FindDb => "find-db",
            Source::Find => "find (benchmarked now)",
            Source::Rule => "rule",
        }
    }
}

#[derive(Debug, Clone)]
pub struct Selection {
    pub solver: &'static str,
    pub config: Config,
    pub source: Source,
    /// Known when the rule read the perf-db; otherwise ask [`crate::known::origin_of`].
    pub config_origin: Option<ConfigOrigin>,
    /// The ranking when a find ran.
    pub find: Option<Vec<FindRecord>>,
}

impl Selection {
    /// Whether the chosen config is the perf-db's tuned one.
    pub fn origin<T: Target>(&self, target: &T, db: &Db, p: &ConvProblem) -> Result<ConfigOrigin> {
        match self.config_origin {
            Some(origin) => Ok(origin),
            None => origin_of(db, target.device_key(), target.registry().get(self.solver)?, p, &self.config),
        }
    }
}

pub fn select<T: Target>(target: &T, db: &mut Db, p: &ConvProblem, mode: FindMode, opts: &FindOptions) -> Result<Selection> {
    if mode != FindMode::Normal {
        if let Some(selection) = from_find_db(target, db, p)? {
            return Ok(selection);
        }
    }
    match mode {
        FindMode::Fast => by_rule(target, db, p, opts.workspace_limit),
        _ => {
            let only_prebuilt = mode == FindMode::DynamicHybrid;
            let rows = find(target, db, p, &FindOptions { only_prebuilt, ..*opts })?;
            let Some(best) = rows.iter().find(|r| r.status == STATUS_OK) else {
                if only_prebuilt {
                    // Nothing is built yet: build only what the rule picks.
                    return by_rule(target, db, p, opts.workspace_limit);
                }
                return Err(gconv_core::GconvError::Backend(format!("no candidate ran successfully for {}", p.key())).into());
            };
            let solver = target.registry().get(&best.solver)?;
            let config: Config = best.config.parse()?;
            Ok(Selection { solver: solver.id(), config, source: Source::Find, config_origin: None, find: Some(rows) })
        }
    }
}

/// The best usable row of a stored find result. Rows naming unknown solvers, solvers that no
/// longer apply, or configs their solver rejects are skipped with a warning.
fn from_find_db<T: Target>(target: &T, db: &mut Db, p: &ConvProblem) -> Result<Option<Selection>> {
    let key = p.key();
    let Some(rows) = db.find_ranked_ok(&key, target.device_key())? else { return Ok(None) };
    for (solver_id, config_text) in &rows {
        let usable = target.registry().get(solver_id).map_err(|e| e.to_string()).and_then(|solver| {
            solver.applicable(p).map_err(|r| r.0)?;
            Ok((solver, checked(solver, p, config_text)?))
        });
        match usable {
            Ok((solver, config)) => {
                return Ok(Some(Selection { solver: solver.id(), config, source: Source::FindDb, config_origin: None, find: None }));
            }
            Err(reason) => db.warnings.push(format!(
                "skipping find-db entry {solver_id} `{config_text}` for {key}: {reason}"
            )),
        }
    }
    Ok(None)
}

fn by_rule<T: Target>(target: &T, db: &mut Db, p: &ConvProblem, workspace_limit: u64) -> Result<Selection> {
    let mut candidates: Vec<_> = target.registry().applicable(p).collect();
    // Oracles run only when nothing else can.
    candidates.sort_by_key(|s| s.is_oracle());
    for solver in candidates {
        let (config, config_origin) = known_config(db, target.device_key(), solver, p)?;
        if solver.workspace_bytes(p, &config) <= workspace_limit {
            return Ok(Selection { solver: solver.id(), config, source: Source::Rule, config_origin: Some(config_origin), find: None });
        }
    }
    Err(gconv_core::GconvError::Backend(format!(
        "no solver can run {} within the workspace limit of {workspace_limit} bytes",
        p.key()
    ))
    .into())
}
