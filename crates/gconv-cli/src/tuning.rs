//! `gconv find`, `tune`, `select` and `db`.

use std::io::Write;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use gconv_core::{ConvProblem, Direction, Runtime, Solver, SolverKind};
use gconv_heuristic::rank::{ModelGuided, ModelHeuristic};
use gconv_tune::db::{Db, ImportMode, Record, RecordKey};
use gconv_tune::find::{find as run_find, FindOptions, Ranked, TestBed};
use gconv_tune::heuristic::Heuristic;
use gconv_tune::known::{checked, known_config};
use gconv_tune::prebuild::{prepare_in_parallel, BuildJob};
use gconv_tune::search::{Exhaustive, Random, SearchStrategy};
use gconv_tune::select::{select, FindMode};
use gconv_tune::tune::{tune as run_tune, why_untunable, Progress, Searched};
use indicatif::{ProgressBar, ProgressStyle};

use crate::commands::db::DbAction;
use crate::commands::{for_each_problem, print_warnings};
use crate::driver::Job;

pub struct StrategyArgs<'a> {
    pub name: &'a str,
    pub count: Option<u64>,
    pub seconds: Option<f64>,
    pub seed: u64,
    pub top_k: Option<u64>,
}

pub fn strategy(
    rt: &dyn Runtime,
    a: &StrategyArgs<'_>,
    models: Option<&std::path::Path>,
) -> anyhow::Result<Box<dyn SearchStrategy>> {
    if let Some(s) = a.seconds {
        if !(s.is_finite() && s > 0.0) {
            bail!("--budget-seconds must be a positive number of seconds, got {s}");
        }
    }
    if a.top_k.is_some() && a.name != "model" {
        bail!("--top-k applies to --strategy model");
    }
    match a.name {
        "exhaustive" | "model" if a.count.is_some() || a.seconds.is_some() => {
            bail!("--budget-count and --budget-seconds apply to --strategy random")
        }
        "exhaustive" => Ok(Box::new(Exhaustive)),
        "model" => {
            let top_k =
                a.top_k.context("--strategy model times the model's best K configs of each solver: give --top-k K")?
                    as usize;
            let models = crate::learn::models_for(rt, models)?.context("--strategy model needs a model for this device: train one with `gconv train` or name one with --models")?;
            Ok(Box::new(ModelGuided { models, facts: rt.facts(), top_k }))
        }
        _ if a.count.is_none() && a.seconds.is_none() => {
            bail!("--strategy random needs a budget: --budget-count N and/or --budget-seconds S")
        }
        _ => Ok(Box::new(Random { count: a.count.map(|c| c as usize), seconds: a.seconds, seed: a.seed })),
    }
}

/// The ranking, with the find's own cost when `took` (the find's wall time and its test bed)
/// is given.
fn print_ranking(rows: &[Ranked], opts: &FindOptions, took: Option<(Duration, &TestBed<'_>)>) {
    println!("  times: per call, median of {} samples of back-to-back calls ({})", opts.samples, opts.timing.label());
    println!(
        "  {:<4} {:<16} {:<22} {:<26} {:>12} {:>14} {:>9}  status",
        "rank", "code", "solver", "config", "time ms", "workspace B", "find ms"
    );
    for (rank, r) in rows.iter().enumerate() {
        let time = r.outcome.any_ms().map_or("-".to_string(), |t| format!("{t:.4}"));
        let status = r.outcome.status();
        let spent = r.spent.as_secs_f64() * 1e3;
        println!(
            "  {rank:<4} {:<16} {:<22} {:<26} {time:>12} {:>14} {spent:>9.1}  {status}",
            r.kind.label(),
            r.solver,
            r.config.to_string(),
            r.workspace_bytes
        );
    }
    let Some((took, bed)) = took else { return };
    let measuring: Duration = rows.iter().map(|r| r.spent).sum();
    let setup = bed.setup_time();
    println!(
        "  find took {:.3} s: {:.3} s listing candidates and building kernels, {:.3} s making the data, {:.3} s the reference, {:.3} s measuring {} candidates",
        took.as_secs_f64(),
        took.saturating_sub(measuring + setup).as_secs_f64(),
        bed.data_time.as_secs_f64(),
        bed.reference_time.as_secs_f64(),
        measuring.as_secs_f64(),
        rows.iter().filter(|r| !r.spent.is_zero()).count()
    );
}

pub fn find(rt: &dyn Runtime, db: &mut Db, jobs: Vec<Job>, opts: &FindOptions, json: bool) -> anyhow::Result<ExitCode> {
    Ok(for_each_problem(jobs, |p, _| {
        let (started, mut bed) = (Instant::now(), TestBed::new(rt, p));
        let ranking = run_find(rt, db, &mut bed, opts)?;
        let took = started.elapsed();
        print_warnings(&ranking.warnings);
        let rows = ranking.rows;
        if json {
            let key = RecordKey::new(p, rt.device_key());
            let records: Vec<_> = rows.iter().enumerate().map(|(i, r)| r.record(&key, i)).collect();
            let line = serde_json::json!({ "key": p.key(), "device": rt.device_key(), "timing": opts.timing.label(), "ranking": records });
            println!("{line}");
        } else {
            println!("find:      {}", p.key());
            print_ranking(&rows, opts, Some((took, &bed)));
            println!();
        }
        Ok(rows.iter().any(|r| r.outcome.timed_ms().is_some()))
    }))
}

pub fn tune(
    rt: &dyn Runtime,
    db: &mut Db,
    jobs: Vec<Job>,
    strategy: &dyn SearchStrategy,
    named: &[String],
    opts: &FindOptions,
    show_bar: bool,
) -> anyhow::Result<ExitCode> {
    let named_solvers = named.iter().map(|id| rt.solver(id)).collect::<gconv_core::Result<Vec<_>>>()?;
    let searched = if named.is_empty() { Searched::All } else { Searched::Only(named) };
    println!("tune:      strategy {} on {}\n", strategy.describe(), rt.describe());
    let mut searched_problems = 0;
    let code = for_each_problem(jobs, |p, _| {
        println!("problem:   {}", p.key());
        let untunable: Vec<String> =
            named_solvers.iter().filter_map(|s| Some(format!("{}: {}", s.id(), why_untunable(*s, p)?))).collect();
        for line in &untunable {
            println!("  not searched, {line}");
        }
        // A named solver that does not apply here is no failure; one that applies nowhere is.
        if !named.is_empty() && untunable.len() == named.len() {
            println!();
            return Ok(true);
        }
        searched_problems += 1;
        let bar = show_bar.then(|| {
            let bar = ProgressBar::new(0);
            bar.set_style(
                ProgressStyle::with_template("{msg} [{bar:30}] {pos}/{len} configs, ETA {eta}")
                    .expect("valid template")
                    .progress_chars("=> "),
            );
            bar
        });
        let mut report_progress = |progress: Progress<'_>| match &bar {
            Some(bar) => {
                bar.set_message(progress.solver.to_string());
                bar.set_length(progress.total as u64);
                bar.set_position(progress.done as u64);
            }
            None if progress.done == 0 => println!("  {}: {} configs scheduled", progress.solver, progress.total),
            None => {}
        };
        let outcome = run_tune(rt, db, p, strategy, searched, opts, &mut report_progress);
        if let Some(bar) = bar {
            bar.finish_and_clear();
        }
        let outcome = outcome?;
        print_warnings(&outcome.warnings);
        if outcome.skipped {
            println!("  skipped: already tuned on this device by this gconv version\n");
            return Ok(true);
        }
        for s in &outcome.solvers {
            let winner = match (&s.winner, s.winner_ms) {
                (Some(c), Some(t)) => format!("best {c} at {t:.4} ms (verified, stored in the perf-db)"),
                _ => "no config ran successfully".into(),
            };
            println!(
                "  {}: {} scheduled, {} measured, {} resumed; {winner}",
                s.solver, s.scheduled, s.measured, s.resumed
            );
        }
        print_ranking(&outcome.find, opts, None);
        println!();
        Ok(outcome.solvers.iter().all(|s| s.winner.is_some()))
    });
    if !named.is_empty() && searched_problems == 0 {
        bail!("none of the problems has a space to search for {}", named.join(", "));
    }
    Ok(code)
}

pub fn select_bench(
    rt: &dyn Runtime,
    db: &mut Db,
    jobs: Vec<Job>,
    mode: FindMode,
    opts: &FindOptions,
    repeat: u32,
    model: Option<&ModelHeuristic>,
) -> anyhow::Result<ExitCode> {
    let mut problems: Vec<ConvProblem> = Vec::new();
    let code = for_each_problem(jobs, |p, _| {
        problems.push(p.clone());
        Ok(true)
    });
    let heuristic = model.map(|m| m as &dyn Heuristic);
    if let Some(m) = heuristic {
        println!("model:     {}", m.describe());
    }
    // The warm-up pass prints each pick; it may benchmark (in modes other than fast) and fills
    // statement caches, so the timed passes measure selection from a warm db. Its own time is
    // first sight's: the model's ranking (the vendor's listing included, then memoized) apart
    // from the rest of the selection and the building of the pick.
    let mut first_ranking = Vec::with_capacity(problems.len());
    let mut first_sight = Vec::with_capacity(problems.len());
    let before = rt.build_stats();
    for p in &problems {
        if let Some(m) = model {
            let start = Instant::now();
            m.rank(rt, p);
            first_ranking.push(start.elapsed().as_secs_f64() * 1e6);
        }
        let start = Instant::now();
        let s = select(rt, db, &mut TestBed::new(rt, p), p, mode, opts, heuristic)?;
        first_sight.push(start.elapsed().as_secs_f64() * 1e6);
        print_warnings(&s.warnings);
        println!(
            "{}  ->  {} {} ({}, config {})",
            p.key(),
            s.solution.solver_id,
            s.solution.config,
            s.source.label(),
            s.origin.label()
        );
    }
    if problems.is_empty() {
        return Ok(code);
    }
    let percentiles = |mut us: Vec<f64>| {
        us.sort_by(f64::total_cmp);
        let at = |q: f64| us[((us.len() - 1) as f64 * q).round() as usize];
        format!("p50 {:.2} us, p99 {:.2} us", at(0.5), at(0.99))
    };
    let timed = |f: &mut dyn FnMut(&ConvProblem) -> anyhow::Result<()>| -> anyhow::Result<Vec<f64>> {
        let mut us = Vec::with_capacity(problems.len() * repeat as usize);
        for _ in 0..repeat {
            for p in &problems {
                let start = Instant::now();
                f(p)?;
                us.push(start.elapsed().as_secs_f64() * 1e6);
            }
        }
        Ok(us)
    };
    println!(
        "
selection ({} problems x {repeat} repeats, warm db):",
        problems.len()
    );
    if !first_ranking.is_empty() {
        let listed = match rt.build_stats().zip(before).map(|(after, before)| after.since(&before)) {
            Some(s) if s.listings + s.listings_from_disk > 0 => {
                format!(
                    ", {} asked of the vendor library, {} read from the build cache",
                    s.listings, s.listings_from_disk
                )
            }
            _ => String::new(),
        };
        println!(
            "  first sight, model ranking (the vendor's listing included{listed}): {}",
            percentiles(first_ranking)
        );
    }
    println!("  first sight, {mode} selection and building the pick: {}", percentiles(first_sight));
    if let Some(m) = model {
        let mut candidates = 0;
        let mut phases: [Vec<f64>; 3] = Default::default();
        let ranking = timed(&mut |p| {
            if let Some((r, spent)) = m.rank_timed(rt, p) {
                candidates += r.candidates.len();
                for (all, d) in phases.iter_mut().zip([spent.candidates, spent.features, spent.trees]) {
                    all.push(d.as_secs_f64() * 1e6);
                }
            }
            Ok(())
        })?;
        let per_problem = candidates as f64 / (problems.len() as f64 * f64::from(repeat));
        println!("  model ranking, no memo:   {} ({per_problem:.0} candidates per problem)", percentiles(ranking));
        if !phases[0].is_empty() {
            let [listing, features, trees] = phases.map(percentiles);
            println!("    listing candidates {listing}; features {features}; trees {trees}");
        }
        let memo = timed(&mut |p| {
            m.rank(rt, p);
            Ok(())
        })?;
        println!("  model ranking, memo hit:  {}", percentiles(memo));
    }
    let full = timed(&mut |p| {
        select(rt, db, &mut TestBed::new(rt, p), p, mode, opts, heuristic).map(|_| ()).map_err(Into::into)
    })?;
    println!("  {mode} selection (built solutions cached): {}", percentiles(full));
    Ok(code)
}

/// Whether a stored (problem, solver, config) can still run on `rt`.
pub fn usable(rt: &dyn Runtime, problem: &str, solver: &str, config: &str) -> bool {
    let Ok(p) = ConvProblem::from_key(problem) else { return false };
    let Ok(solver) = rt.solver(solver) else { return false };
    solver.applicable(&p).is_ok() && checked(solver, &p, config).is_ok()
}

/// `keep(problem, device, solver, config)` decides what `db prune` keeps.
pub fn db(db: &mut Db, action: DbAction, keep: &dyn Fn(&str, &str, &str, &str) -> bool) -> anyhow::Result<ExitCode> {
    match action {
        DbAction::Stats => {
            let s = db.stats()?;
            println!("database:  {}", db.path().display());
            println!("perf records:       {}", s.perf);
            println!("find results:       {}", s.find_problems);
            println!("tuning trials:      {}", s.trials);
            println!("devices:            {}", if s.devices.is_empty() { "-".into() } else { s.devices.join(", ") });
        }
        DbAction::Dump => {
            for record in db.records()? {
                match record {
                    Record::Perf(p) => println!(
                        "perf  {}  {}  {} {}  {:.4} ms  verified={}  gconv {}",
                        p.problem, p.device, p.solver, p.config, p.time_ms, p.verified, p.gconv_version
                    ),
                    Record::Find(f) => println!(
                        "find  {}  {}  #{} {} {}  {}  {}",
                        f.problem,
                        f.device,
                        f.rank,
                        f.solver,
                        f.config,
                        f.time_ms.map_or("-".into(), |t| format!("{t:.4} ms")),
                        f.status
                    ),
                }
            }
        }
        DbAction::Export { output, .. } => {
            let count = match output {
                Some(path) => {
                    let file =
                        std::fs::File::create(&path).with_context(|| format!("cannot create {}", path.display()))?;
                    let mut out = std::io::BufWriter::new(file);
                    let n = db.export_jsonl(&mut out)?;
                    out.flush()?;
                    n
                }
                None => db.export_jsonl(std::io::stdout().lock())?,
            };
            eprintln!("exported {count} records");
        }
        action @ (DbAction::Import { .. } | DbAction::Merge { .. }) => {
            let (file, mode, verb, note) = match action {
                DbAction::Import { file } => (file, ImportMode::Replace, "imported", ""),
                DbAction::Merge { file } => (file, ImportMode::KeepFaster, "merged", " (faster records won)"),
                _ => unreachable!("matched above"),
            };
            let reader = std::io::BufReader::new(
                std::fs::File::open(&file).with_context(|| format!("cannot read {}", file.display()))?,
            );
            let n = db.import_jsonl(reader, mode).with_context(|| format!("nothing taken from {}", file.display()))?;
            println!("{verb} {n} records from {}{note}", file.display());
        }
        DbAction::Prune => {
            let removed = db.prune(keep)?;
            println!("pruned {removed} records");
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Which own solvers precompile builds.
#[derive(Debug, clap::Args)]
pub struct OwnSolvers {
    /// Build only this own solver's kernels (repeatable; default: every own solver that
    /// applies, the candidates a later find chooses among)
    #[arg(long = "solver", value_name = "ID")]
    ids: Vec<String>,
}

impl OwnSolvers {
    /// The own solvers named, or all of them; a vendor's or unknown id is an error.
    fn select<'r>(&self, rt: &'r dyn Runtime) -> anyhow::Result<Vec<&'r dyn Solver>> {
        let own = |s: &&dyn Solver| !matches!(s.kind(), SolverKind::Vendor(_));
        if self.ids.is_empty() {
            return Ok(rt.solvers().into_iter().filter(own).collect());
        }
        self.ids
            .iter()
            .map(|id| {
                let solver = rt.solver(id)?;
                anyhow::ensure!(own(&solver), "--solver {id}: a vendor library's solver, which builds on the device when it runs; precompile builds gconv's own kernels");
                Ok(solver)
            })
            .collect()
    }
}

/// Builds the kernels of every applicable own solver (or of those `only` names), with its known
/// config, of every problem, `threads` at a time, without a GPU context. Vendor libraries build
/// on the device, so they are left out.
pub fn precompile(
    rt: &dyn Runtime,
    db: &mut Db,
    jobs: Vec<Job>,
    only: &OwnSolvers,
    threads: usize,
) -> anyhow::Result<ExitCode> {
    let solvers = only.select(rt)?;
    let (mut work, mut warnings) = (Vec::new(), Vec::new());
    let code = for_each_problem(jobs, |p, _| {
        for &solver in solvers.iter().filter(|s| s.applicable(p).is_ok()) {
            let known = known_config(db, rt.device_key(), solver, p)?;
            warnings.extend(known.skipped);
            work.push(BuildJob { solver, problem: p.clone(), config: known.config });
        }
        Ok(true)
    });
    print_warnings(&warnings);
    // Longest builds first, so that none starts last and runs alone: backward-weight's kernels
    // take the longest (igemm_wgmma's: 0.6-1.1 s of NVRTC, the others' 0.3-0.5 s), then
    // backward-data's.
    work.sort_by_key(|job| match job.problem.direction {
        Direction::BackwardWeight => 0,
        Direction::BackwardData => 1,
        Direction::Forward => 2,
    });
    let start = Instant::now();
    let failures = prepare_in_parallel(&work, threads);
    let stats = rt.build_stats().unwrap_or_default();
    println!(
        "precompile: {} solutions in {:.0} ms wall: {} builds ({:.0} ms of NVRTC), {} from the disk cache, {} shared",
        work.len(),
        start.elapsed().as_secs_f64() * 1e3,
        stats.builds,
        stats.build_ms,
        stats.disk_hits,
        stats.memory_hits
    );
    for f in &failures {
        eprintln!("error: {f}");
    }
    Ok(if failures.is_empty() { code } else { ExitCode::FAILURE })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn precompile_builds_the_own_solvers_named_or_all_and_names_an_unknown_one() {
        let rt = gconv_cpu::CpuRuntime::detect();
        let every = OwnSolvers { ids: vec![] }.select(&rt).unwrap();
        assert_eq!(every.len(), rt.solvers().len());
        let id = every[0].id();
        let named = OwnSolvers { ids: vec![id.to_string()] }.select(&rt).unwrap();
        assert_eq!(named.iter().map(|s| s.id()).collect::<Vec<_>>(), [id]);
        let error = OwnSolvers { ids: vec!["cpu.no_such".into()] }.select(&rt).err().unwrap().to_string();
        assert!(error.contains("cpu.no_such"), "{error}");
    }
}
