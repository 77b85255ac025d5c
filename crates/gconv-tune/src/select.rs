//! Choosing the solution for a problem by find mode, from the databases or by measuring. A
//! selection carries the built solution, how it was chosen and where its config came from.

use std::fmt;
use std::str::FromStr;

use gconv_core::{ConvProblem, Runtime, Solution};

use crate::db::{Db, RecordKey, Table, Warning};
use crate::find::{find, lists, FindOptions, Ranked, TestBed};
use crate::heuristic::{Heuristic, Predicted};
use crate::known::{checked, known_config, origin_of, ConfigOrigin};
use crate::Result;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FindMode {
    /// Benchmark every candidate.
    Normal,
    /// The find-db, else the learned model's pick (the rule where no model covers the
    /// problem); never benchmark.
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
    /// The learned model's fastest predicted candidate that builds.
    Model,
    /// The first applicable solver in priority order whose workspace fits.
    Rule,
    /// Named by the caller (`-S`).
    Forced,
}

impl Source {
    pub fn label(self) -> &'static str {
        match self {
            Source::FindDb => "find-db",
            Source::Find => "find (benchmarked now)",
            Source::Model => "model",
            Source::Rule => "rule",
            Source::Forced => "forced (-S)",
        }
    }
}

pub struct Selection {
    pub solution: Solution,
    pub source: Source,
    pub origin: ConfigOrigin,
    /// The ranking when a find ran.
    pub find: Option<Vec<Ranked>>,
    /// Stored records selection could not use.
    pub warnings: Vec<Warning>,
}

/// The solution of solver `id` with its known config.
pub fn forced(rt: &dyn Runtime, db: &mut Db, p: &ConvProblem, id: &str) -> Result<Selection> {
    let known = known_config(db, rt.device_key(), rt.solver(id)?, p)?;
    let warnings = known.skipped.into_iter().collect();
    Ok(Selection {
        solution: rt.build(id, p, known.config)?,
        source: Source::Forced,
        origin: known.origin,
        find: None,
        warnings,
    })
}

/// The solution of solver `id` with `config` (its text), which the solver checks first.
pub fn forced_with_config(rt: &dyn Runtime, p: &ConvProblem, id: &str, config: &str) -> Result<Selection> {
    let config = checked(rt.solver(id)?, p, config)?;
    Ok(Selection {
        solution: rt.build(id, p, config)?,
        source: Source::Forced,
        origin: ConfigOrigin::Given,
        find: None,
        warnings: Vec::new(),
    })
}

/// Selects by `mode`; a find runs on `bed`, whose data the caller may reuse. Where nothing is
/// measured, `model` picks, else the rule.
pub fn select(
    rt: &dyn Runtime,
    db: &mut Db,
    bed: &mut TestBed<'_>,
    p: &ConvProblem,
    mode: FindMode,
    opts: &FindOptions,
    model: Option<&dyn Heuristic>,
) -> Result<Selection> {
    let mut warnings = Vec::new();
    if mode != FindMode::Normal {
        if let Some(selection) = from_find_db(rt, db, p, &mut warnings)? {
            return Ok(selection);
        }
    }
    if mode == FindMode::Fast {
        return unmeasured(rt, db, p, opts.workspace_limit, model, warnings);
    }
    let only_prebuilt = mode == FindMode::DynamicHybrid;
    let ranking = find(rt, db, bed, &FindOptions { only_prebuilt, ..*opts })?;
    warnings.extend(ranking.warnings);
    let Some(best) = ranking.rows.iter().find(|r| r.outcome.timed_ms().is_some()) else {
        if only_prebuilt {
            // Nothing is built yet: build only what the model (or the rule) picks.
            return unmeasured(rt, db, p, opts.workspace_limit, model, warnings);
        }
        return Err(gconv_core::GconvError::Backend(format!("no candidate ran successfully for {}", p.key())).into());
    };
    let origin = origin_of(db, rt.device_key(), rt.solver(best.solver)?, p, &best.config)?;
    let solution = rt.build(best.solver, p, best.config.clone())?;
    Ok(Selection { solution, source: Source::Find, origin, find: Some(ranking.rows), warnings })
}

/// The stored find result's choice, built; `None` when nothing usable is stored.
pub fn stored(rt: &dyn Runtime, db: &Db, p: &ConvProblem) -> Result<Option<Selection>> {
    from_find_db(rt, db, p, &mut Vec::new())
}

/// The best usable row of a stored find result. Rows naming unknown solvers, solvers that no
/// longer apply, or configs their solver rejects are skipped, each with a warning; the
/// warnings go with the selection made here or with the one made after.
fn from_find_db(rt: &dyn Runtime, db: &Db, p: &ConvProblem, warnings: &mut Vec<Warning>) -> Result<Option<Selection>> {
    let key = RecordKey::new(p, rt.device_key());
    let Some(rows) = db.find_ranked_ok(&key)? else { return Ok(None) };
    for (solver_id, config_text) in rows {
        let usable = rt.solver(&solver_id).map_err(|e| e.to_string()).and_then(|solver| {
            solver.applicable(p).map_err(|r| r.0)?;
            Ok((solver, checked(solver, p, &config_text).map_err(|e| e.to_string())?))
        });
        match usable {
            Ok((solver, config)) => {
                let origin = origin_of(db, rt.device_key(), solver, p, &config)?;
                let solution = rt.build(solver.id(), p, config)?;
                let warnings = std::mem::take(warnings);
                return Ok(Some(Selection { solution, source: Source::FindDb, origin, find: None, warnings }));
            }
            Err(reason) => warnings.push(Warning::Skipped {
                table: Table::Find,
                problem: key.problem.clone(),
                solver: solver_id,
                config: config_text,
                reason,
            }),
        }
    }
    Ok(None)
}

/// The model's pick where a model covers the problem and one of its candidates builds, else
/// the rule's.
fn unmeasured(
    rt: &dyn Runtime,
    db: &Db,
    p: &ConvProblem,
    workspace_limit: u64,
    model: Option<&dyn Heuristic>,
    warnings: Vec<Warning>,
) -> Result<Selection> {
    if let Some(ranking) = model.and_then(|m| m.rank(rt, p)) {
        if let Some(selection) = by_model(rt, db, p, &ranking.candidates, workspace_limit, &warnings) {
            return Ok(selection);
        }
    }
    by_rule(rt, db, p, workspace_limit, warnings)
}

/// Builds the candidates in predicted order until one builds within the workspace limit.
/// A solver tuned for the problem runs its tuned config: measured beats predicted. A vendor
/// library's config runs only where the library lists it for this problem, as every config a
/// find or a sweep times is: the model proposes configs listed for other shapes, whose knobs
/// may not suit this one, and a plan that builds is no proof that it computes this problem
/// right (asking costs a listing per problem, kept by the library; the configs a ranking
/// leaves unconfirmed, [`gconv_core::Solver::configs_to_rank`], are asked about when
/// reached), and a predicted one only where find would time it. `None` when none builds.
fn by_model(
    rt: &dyn Runtime,
    db: &Db,
    p: &ConvProblem,
    ranked: &[Predicted],
    workspace_limit: u64,
    warnings: &[Warning],
) -> Option<Selection> {
    for candidate in ranked {
        let Ok(solver) = rt.solver(&candidate.solver) else { continue };
        let (config, origin) = match known_config(db, rt.device_key(), solver, p) {
            Ok(known) if known.origin == ConfigOrigin::Tuned => (known.config, known.origin),
            _ => (candidate.config.clone(), ConfigOrigin::Predicted),
        };
        if solver.find_times_every_config()
            && (!lists(solver, p, &config, origin == ConfigOrigin::Tuned)
                || (origin == ConfigOrigin::Predicted && solver.find_skips(p, &config).is_some()))
        {
            continue;
        }
        if let Ok(solution) = rt.build(&candidate.solver, p, config) {
            if solution.workspace_bytes <= workspace_limit {
                return Some(Selection {
                    solution,
                    source: Source::Model,
                    origin,
                    find: None,
                    warnings: warnings.to_vec(),
                });
            }
        }
    }
    None
}

fn by_rule(
    rt: &dyn Runtime,
    db: &Db,
    p: &ConvProblem,
    workspace_limit: u64,
    mut warnings: Vec<Warning>,
) -> Result<Selection> {
    let mut candidates: Vec<_> = rt.solvers().into_iter().filter(|s| s.applicable(p).is_ok()).collect();
    // Oracles and fallbacks run only when nothing else can.
    candidates.sort_by_key(|s| (s.is_oracle(), s.is_fallback()));
    let mut reasons = Vec::new();
    for solver in candidates {
        let known = known_config(db, rt.device_key(), solver, p)?;
        warnings.extend(known.skipped);
        if solver.workspace_bytes(p, &known.config) > workspace_limit {
            continue;
        }
        // A vendor library that lists no engine for the problem has no config to build.
        match rt.build(solver.id(), p, known.config) {
            Ok(solution) => {
                return Ok(Selection { solution, source: Source::Rule, origin: known.origin, find: None, warnings })
            }
            Err(e) => reasons.push(format!("{}: {e}", solver.id())),
        }
    }
    let why = if reasons.is_empty() { String::new() } else { format!(" ({})", reasons.join("; ")) };
    Err(gconv_core::GconvError::Backend(format!(
        "no solver can run {} within the workspace limit of {workspace_limit} bytes{why}",
        p.key()
    ))
    .into())
}
