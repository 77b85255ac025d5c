//! The learned heuristic's commands: `gconv problems` (synthetic sets, split by shape),
//! `gconv train` (models from sweep CSVs) and `gconv validate` (the model against the oracle).

use std::collections::{BTreeMap, HashSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use gconv_core::{ConvProblem, Runtime};
use gconv_heuristic::measured::{self, Measured};
use gconv_heuristic::model::{closeness, user_models_dir, Family, ModelSet};
use gconv_heuristic::problems::{class_of, is_validation, shape_key, synthetic, Limits};
use gconv_heuristic::rank::ModelHeuristic;
use gconv_heuristic::train::{train, TrainOptions};
use gconv_heuristic::validate::{by_class, by_direction_and_dtype, evaluate, quantile, summarize, Outcome, Summary};

/// A problem as a driver line (all three directions: `-F 0`).
pub fn driver_line(p: &ConvProblem) -> String {
    let layout = p.layout.name(p.rank());
    let [n, c, k, g] = [p.n, p.c, p.k, p.g];
    let mut line = match p.rank() {
        3 => format!("conv --spatial_dim 3 -n {n} -c {c} -k {k} -g {g}"),
        1 => format!("conv --spatial_dim 1 -n {n} -c {c} -k {k} -g {g}"),
        _ => format!("conv -n {n} -c {c} -k {k} -g {g}"),
    };
    // Long option names, outermost dimension first; 1D problems use the width's.
    let names: &[[&str; 5]] = &[
        ["in_d", "fil_d", "conv_stride_d", "pad_d", "dilation_d"],
        ["in_h", "fil_h", "conv_stride_h", "pad_h", "dilation_h"],
        ["in_w", "fil_w", "conv_stride_w", "pad_w", "dilation_w"],
    ];
    for (d, names) in p.dims.iter().zip(&names[3 - p.rank()..]) {
        for (name, value) in names.iter().zip([d.input, d.filter, d.stride, d.pad, d.dilation]) {
            let _ = write!(line, " --{name} {value}");
        }
    }
    let _ = write!(line, " -I {layout}");
    line
}

pub struct ProblemsOptions {
    pub count: usize,
    pub seed: u64,
    pub limits: Limits,
    pub factorized_percent: u32,
    pub valid_percent: u32,
    pub train_out: PathBuf,
    pub valid_out: PathBuf,
}

/// Writes a synthetic set split by shape into a training and a validation file.
pub fn problems(opts: &ProblemsOptions) -> anyhow::Result<ExitCode> {
    anyhow::ensure!(opts.valid_percent <= 100, "--valid-percent is a share in percent, got {}", opts.valid_percent);
    anyhow::ensure!(
        opts.factorized_percent <= 100,
        "--factorized-percent is a share in percent, got {}",
        opts.factorized_percent
    );
    let all = synthetic(opts.count, opts.seed, opts.limits, opts.factorized_percent);
    if all.len() < opts.count {
        println!("drew {} distinct shapes within the limits, not the {} asked", all.len(), opts.count);
    }
    let factorized = match opts.factorized_percent {
        0 => String::new(),
        share => format!(" --factorized-percent {share}"),
    };
    let floor = match opts.limits.min_gflop {
        0.0 => String::new(),
        gflop => format!(" --min-gflop {gflop}"),
    };
    let header = |what: &str| {
        format!(
            "# gconv problems --count {} --seed {}{floor} --max-gflop {} --max-melements {}{factorized} --valid-percent {}: the {what} shapes (split by a hash of each shape,\n# whatever its direction or dtype). Every line runs all three directions.\n",
            opts.count,
            opts.seed,
            opts.limits.max_gflop,
            opts.limits.max_elements as f64 / 1e6,
            opts.valid_percent
        )
    };
    let (valid, train): (Vec<&ConvProblem>, Vec<&ConvProblem>) =
        all.iter().partition(|p| is_validation(p, opts.valid_percent));
    for (path, set, what) in [(&opts.train_out, &train, "training"), (&opts.valid_out, &valid, "validation")] {
        let body: String = set.iter().map(|p| driver_line(p) + "\n").collect();
        std::fs::write(path, header(what) + &body).with_context(|| format!("cannot write {}", path.display()))?;
        println!("{}: {} {what} shapes", path.display(), set.len());
    }
    Ok(ExitCode::SUCCESS)
}

pub struct TrainArgs {
    pub csv: Vec<PathBuf>,
    /// Rows to add to the sources of the models already in `out`.
    pub append: Vec<PathBuf>,
    pub out: Option<PathBuf>,
    pub device: Option<String>,
    pub choices: TrainChoices,
}

/// The training options a user named; the rest come from the models retrained (`--append`),
/// else from [`TrainOptions::default`].
#[derive(Debug, Clone, Copy, Default)]
pub struct TrainChoices {
    pub trees: Option<usize>,
    pub max_depth: Option<usize>,
    pub learning_rate: Option<f32>,
    pub ranking: Option<f64>,
    pub without_vendor_rank: bool,
    pub equal_problem_weight: bool,
    pub alignment: bool,
}

impl TrainChoices {
    fn over(&self, base: TrainOptions) -> TrainOptions {
        TrainOptions {
            trees: self.trees.unwrap_or(base.trees),
            max_depth: self.max_depth.unwrap_or(base.max_depth),
            learning_rate: self.learning_rate.unwrap_or(base.learning_rate),
            ranking: self.ranking.unwrap_or(base.ranking),
            seed: base.seed,
            vendor_rank: base.vendor_rank && !self.without_vendor_rank,
            equal_problem_weight: base.equal_problem_weight || self.equal_problem_weight,
            alignment: base.alignment || self.alignment,
        }
    }
}

pub fn train_models(rt: &dyn Runtime, args: &TrainArgs) -> anyhow::Result<ExitCode> {
    let mut sources: Vec<PathBuf> = args.csv.clone();
    // Each family's options where it is retrained: its earlier models'.
    let mut earlier_options: BTreeMap<Family, TrainOptions> = BTreeMap::new();
    if !args.append.is_empty() {
        let dir = args.out.as_deref().context("--append retrains the models of --out DIR: name it")?;
        let earlier = ModelSet::read_dir(dir)?;
        for m in &earlier.models {
            earlier_options.entry(m.family).or_insert(m.manifest.options);
        }
        let mut known: Vec<PathBuf> = Vec::new();
        for source in earlier.models.iter().flat_map(|m| &m.manifest.sources) {
            let path = PathBuf::from(source);
            anyhow::ensure!(
                path.exists(),
                "{} was trained on {source}, which is no longer there: retrain from the sweep CSVs instead",
                dir.display()
            );
            if !known.contains(&path) {
                known.push(path);
            }
        }
        sources.splice(0..0, known);
        sources.extend(args.append.iter().cloned());
    }
    anyhow::ensure!(!sources.is_empty(), "name the sweep CSVs to train on");
    let mut rows = measured::read(&sources)?;
    let devices: HashSet<String> = rows.iter().filter(|r| r.ms.is_some()).map(|r| r.device.clone()).collect();
    let device = match (&args.device, devices.len()) {
        (Some(d), _) => d.clone(),
        (None, 1) => devices.into_iter().next().expect("one device"),
        (None, 0) => anyhow::bail!("the CSVs hold no timed row"),
        (None, _) => anyhow::bail!(
            "the CSVs hold rows of {} devices; choose one with --device:\n  {}",
            devices.len(),
            devices.into_iter().collect::<Vec<_>>().join("\n  ")
        ),
    };
    rows.retain(|r| r.device == device);
    let out = args.out.clone().unwrap_or_else(|| user_models_dir(&device));
    let source_names: Vec<String> = sources.iter().map(|p| p.display().to_string()).collect();
    let started = std::time::Instant::now();
    let mut by_family: BTreeMap<Family, Vec<Measured>> = BTreeMap::new();
    for row in rows {
        by_family.entry(Family::of(row.problem.dtype)).or_default().push(row);
    }
    let mut models = Vec::new();
    for (family, of_family) in by_family {
        let options = args.choices.over(earlier_options.get(&family).copied().unwrap_or_default());
        if earlier_options.contains_key(&family) {
            println!(
                "options:   {}: {} trees, depth {}, rate {}, ranking {}{}{}{} (the earlier models' where not named)",
                family.token(),
                options.trees,
                options.max_depth,
                options.learning_rate,
                options.ranking,
                if options.vendor_rank { "" } else { ", without the find-list place" },
                if options.equal_problem_weight { ", each problem weighing the same" } else { "" },
                if options.alignment { ", alignment features" } else { "" }
            );
        }
        models.extend(train(&of_family, &source_names, &options)?);
    }
    let written = ModelSet::write_dir(&models, &out)?;
    println!("device:    {device}{}", if device == rt.device_key() { " (this one)" } else { "" });
    println!("trained:   {} models in {:.1} s", models.len(), started.elapsed().as_secs_f64());
    println!(
        "  {:<22} {:>8} {:>9} {:>7} {:>6} {:>10}  {:<28}",
        "model", "rows", "problems", "shapes", "trees", "rmse(ln)", "stage one (cross-validated)"
    );
    for (m, path) in models.iter().zip(&written) {
        let stage_one = match (&m.manifest.stage_one, m.solver_forest.is_some()) {
            (Some(c), kept) => {
                format!("{} {:.3}x -> {:.3}x", if kept { "kept" } else { "left" }, c.without, c.with)
            }
            (None, _) => "left (too few shapes)".to_string(),
        };
        println!(
            "  {:<22} {:>8} {:>9} {:>7} {:>6} {:>10.3}  {:<28} {}",
            m.file_name(),
            m.manifest.rows,
            m.manifest.problems,
            m.manifest.shapes,
            m.manifest.options.trees,
            m.manifest.train_rmse,
            stage_one,
            path.display()
        );
    }
    println!("  (stage one: the pick's solver first by each solver's predicted best time, kept where it cut the summed time of cross-validated picks by a tenth; the sums are over the oracles')");
    Ok(ExitCode::SUCCESS)
}

/// The model set selection uses on `rt` ([`gconv_heuristic::model::models_for`]).
pub fn models_for(rt: &dyn Runtime, dir: Option<&Path>) -> anyhow::Result<Option<ModelSet>> {
    Ok(gconv_heuristic::model::models_for(rt, dir)?)
}

/// The heuristic of [`models_for`], if any.
pub fn heuristic(rt: &dyn Runtime, dir: Option<&Path>) -> anyhow::Result<Option<ModelHeuristic>> {
    Ok(models_for(rt, dir)?.map(ModelHeuristic::new))
}

/// The heuristic of [`models_for`], read on its first ranking: most runs never rank (a find-db
/// entry, `-S`), and reading the built-in models costs about 30 ms. Models named by `--models`
/// are read at once, so a bad folder is an error before anything runs; a default model that
/// cannot be read is a warning, and the rule picks instead.
pub struct DeferredHeuristic<'r> {
    rt: &'r dyn Runtime,
    loaded: std::sync::OnceLock<Option<ModelHeuristic>>,
}

impl<'r> DeferredHeuristic<'r> {
    pub fn new(rt: &'r dyn Runtime, dir: Option<&Path>) -> anyhow::Result<Self> {
        let loaded = std::sync::OnceLock::new();
        if dir.is_some() {
            let _ = loaded.set(heuristic(rt, dir)?);
        }
        Ok(DeferredHeuristic { rt, loaded })
    }

    fn get(&self) -> Option<&ModelHeuristic> {
        self.loaded
            .get_or_init(|| {
                heuristic(self.rt, None).unwrap_or_else(|e| {
                    eprintln!("warning: {e:#}; selecting by the rule");
                    None
                })
            })
            .as_ref()
    }
}

impl gconv_tune::heuristic::Heuristic for DeferredHeuristic<'_> {
    fn rank(&self, rt: &dyn Runtime, p: &ConvProblem) -> Option<std::sync::Arc<gconv_tune::heuristic::Ranking>> {
        self.get()?.rank(rt, p)
    }

    fn describe(&self) -> String {
        self.get().map_or_else(|| "no model".to_string(), |m| m.describe())
    }
}

pub struct ValidateArgs {
    pub models: ModelSet,
    pub problems: Vec<ConvProblem>,
    /// The sweep CSV of the problems (measured where rows are missing).
    pub measured: PathBuf,
    pub training: Vec<PathBuf>,
    pub plots: Option<PathBuf>,
    pub picks: Option<PathBuf>,
}

fn percent(v: f64) -> String {
    format!("{:.1}", 100.0 * v)
}

fn print_summary(label: &str, s: &Summary) {
    let vs = |v: Option<(f64, usize)>| v.map_or("-".to_string(), |(x, n)| format!("{x:.3}x ({n})"));
    let heuristic = s
        .vendor_heuristic_efficiency
        .map_or("-".to_string(), |(m, med, p10)| format!("{} / {} / {}", percent(m), percent(med), percent(p10)));
    let summed_heuristic = s.summed_vendor_heuristic.map_or("-".to_string(), |(r, _)| format!("{r:.3}x"));
    println!(
        "  {label:<20} {:>5}  {:>6} {:>6} {:>6}  {:>6} {:>6}  {:>7} {:>8}  {:>8}  {:>15} {:>15}  {heuristic}",
        s.problems,
        percent(s.mean),
        percent(s.median),
        percent(s.p10),
        percent(s.top1),
        percent(s.top5),
        format!("{:.2}x", s.slowest),
        format!("{:.3}x", s.summed_pick),
        summed_heuristic,
        vs(s.vs_vendor_heuristic),
        vs(s.vs_vendor_find)
    );
}

/// Keeps the rows measured on the models' device; where there are none and the rows are all of
/// one other device whose selection would fall back to these models (the same GPU or CPU, or
/// its kind), keeps them and returns that device. Errs with what the rows' devices are
/// otherwise.
fn rows_of_the_models_device(rows: &mut Vec<Measured>, models: &ModelSet) -> Result<Option<String>, String> {
    if rows.iter().any(|r| models.models.iter().any(|m| m.device == r.device)) {
        rows.retain(|r| models.models.iter().any(|m| m.device == r.device));
        return Ok(None);
    }
    let devices: HashSet<&str> = rows.iter().map(|r| r.device.as_str()).collect();
    match devices.into_iter().collect::<Vec<_>>()[..] {
        [] => Ok(None),
        [device] if closeness(models.device(), device) > 0 => Ok(Some(device.to_string())),
        [device] => Err(format!("rows of {device}, whose selection would not use these models")),
        ref several => Err(format!("rows of {} other devices: validate one device's rows at a time", several.len())),
    }
}

/// Evaluates the models on measured problems, refusing problems whose shape they trained on.
pub fn validate(args: &ValidateArgs) -> anyhow::Result<ExitCode> {
    let wanted: HashSet<String> = args.problems.iter().map(|p| p.key()).collect();
    let mut rows: Vec<Measured> = measured::read(std::slice::from_ref(&args.measured))?;
    rows.retain(|r| wanted.contains(&r.problem.key()));
    let fallback = rows_of_the_models_device(&mut rows, &args.models).map_err(|why| {
        anyhow::anyhow!(
            "{} holds no row of these problems measured on the models' device ({}), and {why}",
            args.measured.display(),
            args.models.device()
        )
    })?;
    anyhow::ensure!(!rows.is_empty(), "{} holds no row of these problems", args.measured.display());
    if !args.training.is_empty() {
        let trained: HashSet<String> = measured::read(&args.training)?.iter().map(|r| shape_key(&r.problem)).collect();
        let seen: Vec<&ConvProblem> = args.problems.iter().filter(|p| trained.contains(&shape_key(p))).collect();
        anyhow::ensure!(
            seen.is_empty(),
            "{} of the validation problems have a training shape, e.g. {}",
            seen.len(),
            seen[0].summary()
        );
    }
    let outcomes = evaluate(&args.models, &rows);
    anyhow::ensure!(
        !outcomes.is_empty(),
        "no measured problem is covered by the models (directions and dtypes differ)"
    );
    println!("models:    {} (trained on {})", args.models.origin, args.models.device());
    if let Some(device) = fallback {
        println!("measured:  on {device}, another device: the models picking as this device's fallback");
    }
    println!("problems:  {} measured of {} asked; efficiency = oracle time / pick time; the pick is the model's first-ranked candidate that ran", outcomes.len(), args.problems.len());
    println!(
        "\n  {:<20} {:>5}  {:>6} {:>6} {:>6}  {:>6} {:>6}  {:>7} {:>8}  {:>8}  {:>15} {:>15}  vendor heuristic mean/median/P10 %",
        "", "n", "mean%", "med%", "P10%", "top1%", "top5%", "slowest", "sum pick", "sum heur", "vs vendor heur", "vs vendor find"
    );
    for ((direction, dtype), group) in by_direction_and_dtype(&outcomes) {
        print_summary(&format!("{direction} {dtype}"), &summarize(&group).expect("a non-empty group"));
    }
    println!();
    for (class, group) in by_class(&outcomes) {
        print_summary(class, &summarize(&group).expect("a non-empty group"));
    }
    let all: Vec<&Outcome> = outcomes.iter().collect();
    print_summary("all", &summarize(&all).expect("outcomes"));
    println!("\n  (slowest: the slowest pick over its oracle; sum pick, sum heur: the picks' and the vendor heuristic's summed time over the oracles'; vs vendor: geomean of the vendor's time over the pick's, > 1 where the pick is faster; in brackets the problems with both)");
    let mut rank_us: Vec<f64> = outcomes.iter().map(|o| o.rank_us).collect();
    rank_us.sort_by(f64::total_cmp);
    let mut ranked: Vec<f64> = outcomes.iter().map(|o| o.ranked as f64).collect();
    ranked.sort_by(f64::total_cmp);
    println!(
        "\nranking:   p50 {:.0} us, p99 {:.0} us a problem on this machine, {} candidates at the median (features, trees and the pick's rules; selection also lists the candidates)",
        quantile(&rank_us, 0.5),
        quantile(&rank_us, 0.99),
        quantile(&ranked, 0.5)
    );
    let mut worst: Vec<&Outcome> = outcomes.iter().collect();
    worst.sort_by(|a, b| a.efficiency().total_cmp(&b.efficiency()));
    println!("\nworst 10:");
    for o in worst.iter().take(10) {
        println!(
            "  {:>5}%  pick {} {} {:.4} ms, oracle {} {} {:.4} ms  {}",
            percent(o.efficiency()),
            o.pick.0,
            o.pick.1,
            o.pick_ms,
            o.oracle.0,
            o.oracle.1,
            o.oracle_ms,
            o.problem.summary()
        );
    }
    if let Some(path) = &args.picks {
        write_picks(&outcomes, path).with_context(|| format!("writing {}", path.display()))?;
        println!("picks:     {}", path.display());
    }
    if let Some(dir) = &args.plots {
        for path in crate::plots::validation(&outcomes, dir)? {
            println!("plot:      {}", path.display());
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Every outcome as a CSV row: the pick, the oracle and the vendor's times, to study the misses.
fn write_picks(outcomes: &[Outcome], path: &Path) -> anyhow::Result<()> {
    let mut out = csv::Writer::from_path(path)?;
    out.write_record([
        "key",
        "class",
        "efficiency",
        "pick_solver",
        "pick_config",
        "pick_ms",
        "predicted_ms",
        "oracle_solver",
        "oracle_config",
        "oracle_ms",
        "oracle_rank",
        "vendor_heuristic_ms",
        "vendor_find_ms",
    ])?;
    let ms = |v: Option<f64>| v.map_or(String::new(), |v| format!("{v:.6}"));
    for o in outcomes {
        out.write_record([
            o.problem.key(),
            class_of(&o.problem).to_string(),
            format!("{:.4}", o.efficiency()),
            o.pick.0.clone(),
            o.pick.1.to_string(),
            ms(Some(o.pick_ms)),
            ms(Some(o.predicted_ms)),
            o.oracle.0.clone(),
            o.oracle.1.to_string(),
            ms(Some(o.oracle_ms)),
            o.oracle_rank.to_string(),
            ms(o.vendor_heuristic_ms),
            ms(o.vendor_find_ms),
        ])?;
    }
    out.flush()?;
    Ok(())
}

/// `gconv db export --rows FILE`: this device's timed candidates from finds and tuning, as
/// sweep CSV rows that `gconv train --append` learns from. Records of solvers or problems this
/// gconv no longer knows are left out.
pub fn export_rows(rt: &dyn Runtime, db: &gconv_tune::db::Db, path: &Path) -> anyhow::Result<ExitCode> {
    anyhow::ensure!(!path.exists(), "{} exists; name a new file", path.display());
    let records = db.timed_candidates(rt.device_key())?;
    let mut sink = crate::sweep::CsvSink::open(path)?;
    let mut problems: Vec<String> = Vec::new();
    let mut written = 0;
    for r in &records {
        let (Ok(p), Ok(solver)) = (ConvProblem::from_key(&r.problem), rt.solver(&r.solver)) else { continue };
        let Ok(config) = r.config.parse::<gconv_core::Config>() else { continue };
        let problem_idx = problems.iter().position(|k| *k == r.problem).unwrap_or_else(|| {
            problems.push(r.problem.clone());
            problems.len() - 1
        });
        let vendor =
            gconv_heuristic::measured::VendorMarks { listed: solver.find_times_every_config(), ..Default::default() };
        let row = crate::sweep::Row {
            problem_idx,
            problem: &p,
            solver: solver.id(),
            config: &r.config,
            device: rt.device_key(),
            facts: rt.facts(),
            vendor,
        };
        let reply = crate::sweep::RowReply {
            status: r.status.clone(),
            ms: r.time_ms,
            workspace_bytes: solver.workspace_bytes(&p, &config),
        };
        sink.write(&row, &reply)?;
        written += 1;
    }
    println!("exported {written} timed candidates of {} problems to {}", problems.len(), path.display());
    Ok(ExitCode::SUCCESS)
}
