//! `gconv bench`: gconv against the runtime's yardstick, a vendor library (cuDNN on the CUDA
//! backend), on the same device, in one process, on the same buffers, every figure by the one
//! measurement path (GPU time per call of back-to-back calls). Columns: gconv's pick (in the
//! find mode given), gconv's best (all solvers), gconv's best own kernel (no vendor library), the
//! library's heuristic pick and its find's pick; the roofline bound; PyTorch's time when its CSV
//! is given.

use std::collections::{BTreeMap, HashMap};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use gconv_core::{ConvProblem, DataType, Direction, Runtime, SolverKind};
use gconv_heuristic::validate::{stats, summed_ratio};
use gconv_tune::db::{Db, Warning};
use gconv_tune::find::{find_reusing, measure, FindOptions, Ranked, TestBed};
use gconv_tune::heuristic::Heuristic;
use gconv_tune::measure::{evaluate, Sampling};
use gconv_tune::outcome::Outcome;
use gconv_tune::select::{select, FindMode};

pub struct BenchOptions<'m> {
    pub mode: FindMode,
    /// Picks where nothing is measured or built yet.
    pub model: Option<&'m dyn Heuristic>,
    pub find: FindOptions,
    pub csv: Option<PathBuf>,
    /// PyTorch's ms per problem key.
    pub torch: Option<HashMap<String, f64>>,
}

/// The layer's family, for the summary.
fn class(p: &ConvProblem) -> &'static str {
    if p.is_depthwise() {
        "depthwise"
    } else if p.g > 1 {
        "grouped"
    } else {
        "dense"
    }
}

/// A measured candidate: what ran, and its ms per call.
type Measured = (String, f64);

struct Row {
    key: String,
    class: &'static str,
    direction: Direction,
    dtype: DataType,
    pick: Measured,
    best: Option<Measured>,
    own: Option<Measured>,
    /// The yardstick library's name (the runtime's: cuDNN on the CUDA backend).
    vendor: String,
    vendor_heuristic: Result<Measured, String>,
    vendor_find: Result<Measured, String>,
    torch_ms: Option<f64>,
    bound_ms: Option<f64>,
}

impl Row {
    fn find_ms(&self) -> Option<f64> {
        self.vendor_find.as_ref().ok().map(|m| m.1)
    }
}

fn geomean(values: &[f64]) -> Option<f64> {
    (!values.is_empty()).then(|| (values.iter().map(|v| v.ln()).sum::<f64>() / values.len() as f64).exp())
}

pub fn bench(
    rt: &dyn Runtime,
    device_line: &str,
    db: &mut Db,
    problems: Vec<ConvProblem>,
    opts: &BenchOptions<'_>,
) -> anyhow::Result<ExitCode> {
    if let Some(p) = problems.first() {
        if rt.yardstick(p)?.is_none() {
            anyhow::bail!("bench compares gconv with a vendor library, and the device ({device_line}) has none");
        }
    }
    let mut rows = Vec::new();
    let mut failures = 0;
    let mut csv = opts.csv.as_deref().map(CsvOut::create).transpose()?;
    println!("device:    {device_line}");
    println!(
        "timing:    GPU time per call, median of {} samples of back-to-back calls, {}\n",
        opts.find.samples,
        opts.find.timing.label()
    );
    let mut peaks_shown = Vec::new();
    for p in &problems {
        if let (false, Some(peaks)) = (peaks_shown.contains(&p.dtype), rt.peaks(p.dtype)?) {
            println!(
                "peaks:     {}: {:.1} TFLOP/s (cuBLAS GEMM), {:.0} GB/s (copy)\n",
                p.dtype,
                peaks.flops_per_s / 1e12,
                peaks.bytes_per_s / 1e9
            );
            peaks_shown.push(p.dtype);
        }
        match bench_one(rt, db, p, opts) {
            Ok((row, warnings)) => {
                crate::commands::print_warnings(&warnings);
                print_row(&row);
                if let Some(out) = &mut csv {
                    out.row(&row, opts.find.timing.label())?;
                }
                rows.push(row);
            }
            Err(e) => {
                failures += 1;
                eprintln!("error: {}: {e:#}", p.key());
            }
        }
    }
    summarize(&rows, opts.torch.is_some());
    if let Some(builds) = rt.build_stats() {
        println!(
            "  kernel builds: {} ({:.0} ms of NVRTC), {} from the disk cache, {} reused in process",
            builds.builds, builds.build_ms, builds.disk_hits, builds.memory_hits
        );
    }
    Ok(if failures == 0 { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

fn label(r: &Ranked) -> String {
    format!("{} {}", r.solver, r.config)
}

/// One problem's row, and the stored records its pick and find could not use.
fn bench_one(
    rt: &dyn Runtime,
    db: &mut Db,
    p: &ConvProblem,
    opts: &BenchOptions<'_>,
) -> anyhow::Result<(Row, Vec<Warning>)> {
    let mut bed = TestBed::new(rt, p);
    let selection = select(rt, db, &mut bed, p, opts.mode, &opts.find, opts.model)?;
    // Every candidate, what the pick's find measured already taken as it is.
    let earlier = selection.find.as_deref().unwrap_or_default();
    let mut ranking = find_reusing(rt, db, &mut bed, &FindOptions { only_prebuilt: false, ..opts.find }, earlier)?;
    let mut warnings = selection.warnings.clone();
    warnings.append(&mut ranking.warnings);
    let ranking = ranking.rows;
    let timed = |r: &&Ranked| r.outcome.timed_ms().is_some();
    let row_of =
        |solver: &str, config: &gconv_core::Config| ranking.iter().find(|r| r.solver == solver && r.config == *config);
    let measured = |r: &Ranked| r.outcome.timed_ms().map(|ms| (label(r), ms));

    let chosen = &selection.solution;
    let pick_ms = match row_of(chosen.solver_id, &chosen.config).and_then(|r| r.outcome.timed_ms()) {
        Some(ms) => ms,
        None => {
            let sampling = Sampling { samples: opts.find.samples, best_ms: None, options: opts.find.timing };
            evaluate(bed.workload(false)?, chosen, false, sampling)?.timing.context("the pick was not timed")?.ms
        }
    };
    let yardstick = rt.yardstick(p)?;
    let vendor = yardstick.as_ref().map_or("the vendor library", |y| y.library).to_string();
    let (vendor_heuristic, vendor_find) = match &yardstick {
        None => (Err(format!("no {vendor} configs")), Err(format!("no {vendor} configs"))),
        Some(y) => {
            // The library's own lists as it runs them: the library does not verify, so a
            // config gconv's verification rejects is timed too, and says so.
            let rows =
                |configs: &[gconv_core::Config]| configs.iter().filter_map(|c| row_of(y.solver, c)).collect::<Vec<_>>();
            let heuristic = fastest_in_full(rt, &mut bed, &rows(std::slice::from_ref(&y.heuristic)), false, opts)?;
            let found = fastest_in_full(rt, &mut bed, &rows(&y.find), false, opts)?;
            let why_not =
                row_of(y.solver, &y.heuristic).map_or("not listed by find".to_string(), |r| r.outcome.status());
            (heuristic.ok_or(why_not), found.ok_or_else(|| "none of its configs ran".to_string()))
        }
    };
    let own_rows: Vec<&Ranked> = ranking.iter().filter(|r| r.kind == SolverKind::Own).collect();
    let own = fastest_in_full(rt, &mut bed, &own_rows, true, opts)?;
    let row = Row {
        key: p.key(),
        class: class(p),
        direction: p.direction,
        dtype: p.dtype,
        pick: (format!("{} {}", chosen.solver_id, chosen.config), pick_ms),
        best: ranking.iter().find(timed).and_then(measured),
        own,
        vendor,
        vendor_heuristic,
        vendor_find,
        torch_ms: opts.torch.as_ref().and_then(|t| t.get(&p.key()).copied()),
        bound_ms: rt.peaks(p.dtype)?.map(|peaks| peaks.bound_s(p.flops(), p.bytes()) * 1e3),
    };
    Ok((row, warnings))
}

/// The fastest of a find's `rows`, each timed in full: a row find timed fully is taken as it
/// is; one find time-boxed is timed here, fastest first by find's one-call figure, under a time
/// box relative to the best of these rows so far. `verified`: a config that fails gconv's
/// verification is left out (own kernels); otherwise it is timed and labelled (a vendor's
/// list, which the vendor does not verify). Rows not run or failed are left out.
fn fastest_in_full(
    rt: &dyn Runtime,
    bed: &mut TestBed<'_>,
    rows: &[&Ranked],
    verified: bool,
    opts: &BenchOptions<'_>,
) -> anyhow::Result<Option<Measured>> {
    let mut order: Vec<&Ranked> = rows.to_vec();
    order.sort_by(|a, b| {
        a.outcome.any_ms().unwrap_or(f64::INFINITY).total_cmp(&b.outcome.any_ms().unwrap_or(f64::INFINITY))
    });
    let mut fastest: Option<Measured> = None;
    for r in order {
        let measured = match &r.outcome {
            Outcome::Timed(t) => Some((label(r), t.ms)),
            Outcome::TimeBoxed(_) => {
                time_in_full(rt, bed, r, verified, fastest.as_ref().map(|f| f.1), opts)?.map(|ms| (label(r), ms))
            }
            Outcome::WrongResult(_) if !verified => {
                time_in_full(rt, bed, r, false, fastest.as_ref().map(|f| f.1), opts)?
                    .map(|ms| (format!("{} (fails gconv's verification)", label(r)), ms))
            }
            _ => None,
        };
        if let Some(m) = measured.filter(|m| fastest.as_ref().is_none_or(|f| m.1 < f.1)) {
            fastest = Some(m);
        }
    }
    Ok(fastest)
}

/// A find row's time per call in full (verified when `verified`), or None where it fails, is
/// over the time box or fails verification; only a lost device is an error.
fn time_in_full(
    rt: &dyn Runtime,
    bed: &mut TestBed<'_>,
    r: &Ranked,
    verified: bool,
    best_ms: Option<f64>,
    opts: &BenchOptions<'_>,
) -> anyhow::Result<Option<f64>> {
    let (outcome, _) = measure(rt, bed, rt.solver(r.solver)?, &r.config, &opts.find, best_ms, verified)?;
    Ok(outcome.timed_ms())
}

fn print_row(r: &Row) {
    let show = |m: &Option<Measured>| m.as_ref().map_or("none ran".into(), |(what, ms)| format!("{ms:.4} ms ({what})"));
    let shown = |m: &Result<Measured, String>| {
        m.as_ref().map_or_else(|e| format!("failed ({e})"), |(what, ms)| format!("{ms:.4} ms ({what})"))
    };
    println!("{}", r.key);
    println!("  gconv pick {:.4} ms ({}); best {}; own {}", r.pick.1, r.pick.0, show(&r.best), show(&r.own));
    let torch = r.torch_ms.map_or(String::new(), |t| format!("; PyTorch {t:.4} ms"));
    let v = &r.vendor;
    println!("  {v} heuristic {}; {v} find {}{torch}", shown(&r.vendor_heuristic), shown(&r.vendor_find));
    if let Some(find) = r.find_ms() {
        let vs = |m: &Option<Measured>| m.as_ref().map_or("-".into(), |m| format!("{:.2}x", find / m.1));
        let bound = r.bound_ms.map_or(String::new(), |b| format!("; roofline {b:.4} ms"));
        println!("  against {v} find: pick {:.2}x, best {}, own {}{bound}", find / r.pick.1, vs(&r.best), vs(&r.own));
    }
}

/// `key` and `torch_ms` columns of bench/torch_conv.py's CSV.
pub fn read_torch_csv(path: &Path) -> anyhow::Result<HashMap<String, f64>> {
    let text = std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().context("empty PyTorch CSV")?.split(',').collect();
    let column = |name: &str| {
        header.iter().position(|h| *h == name).with_context(|| format!("{}: no `{name}` column", path.display()))
    };
    let (key, ms) = (column("key")?, column("torch_ms")?);
    let mut times = HashMap::new();
    for (i, line) in lines.enumerate().filter(|(_, l)| !l.trim().is_empty()) {
        let fields: Vec<&str> = line.split(',').collect();
        let value = fields.get(ms).and_then(|v| v.parse::<f64>().ok()).filter(|v| v.is_finite() && *v > 0.0);
        match (fields.get(key), value) {
            (Some(k), Some(v)) => {
                times.insert(k.to_string(), v);
            }
            _ => eprintln!("warning: {}:{}: no usable time, skipped", path.display(), i + 2),
        }
    }
    Ok(times)
}

/// The `--csv` file, written a row at a time so that an interrupted bench keeps what it measured.
struct CsvOut {
    path: PathBuf,
    file: std::io::BufWriter<std::fs::File>,
}

impl CsvOut {
    fn create(path: &Path) -> anyhow::Result<Self> {
        let file = std::fs::File::create(path).with_context(|| format!("cannot create {}", path.display()))?;
        let mut out = CsvOut { path: path.to_path_buf(), file: std::io::BufWriter::new(file) };
        out.line(
            "key,class,direction,dtype,timing,gconv_pick,gconv_pick_ms,gconv_best,gconv_best_ms,gconv_own,gconv_own_ms,\
             vendor_heuristic,vendor_heuristic_ms,vendor_find,vendor_find_ms,torch_ms,roofline_ms,\
             pick_vs_vendor_find,best_vs_vendor_find,own_vs_vendor_find,vendor_find_vs_torch,vendor",
        )?;
        Ok(out)
    }

    fn row(&mut self, r: &Row, timing: &str) -> anyhow::Result<()> {
        let part = |m: Option<&Measured>| m.map_or(("none".to_string(), f64::NAN), |(w, ms)| (w.clone(), *ms));
        let (best, own) = (part(r.best.as_ref()), part(r.own.as_ref()));
        let (heuristic, found) = (part(r.vendor_heuristic.as_ref().ok()), part(r.vendor_find.as_ref().ok()));
        let (torch, bound) = (r.torch_ms.unwrap_or(f64::NAN), r.bound_ms.unwrap_or(f64::NAN));
        self.line(&format!(
            "{},{},{},{},{timing},{},{:.5},{},{:.5},{},{:.5},{},{:.5},{},{:.5},{torch:.5},{bound:.4e},{:.4},{:.4},{:.4},{:.4},{}",
            r.key, r.class, r.direction, r.dtype, r.pick.0, r.pick.1, best.0, best.1, own.0, own.1, heuristic.0, heuristic.1, found.0, found.1,
            found.1 / r.pick.1, found.1 / best.1, found.1 / own.1, found.1 / torch, r.vendor
        ))
    }

    fn line(&mut self, text: &str) -> anyhow::Result<()> {
        writeln!(self.file, "{text}")
            .and_then(|_| self.file.flush())
            .with_context(|| format!("cannot write {}", self.path.display()))
    }
}

/// The summary of earlier runs, read back from their `--csv` files.
pub fn summarize_csv(paths: &[PathBuf]) -> anyhow::Result<ExitCode> {
    let mut rows = Vec::new();
    let mut torch = false;
    for path in paths {
        let text = std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
        let mut lines = text.lines();
        let header: Vec<&str> =
            lines.next().with_context(|| format!("{}: empty", path.display()))?.split(',').collect();
        for (i, line) in lines.enumerate().filter(|(_, l)| !l.trim().is_empty()) {
            let row = row_from_csv(&header, line).with_context(|| format!("{}:{}", path.display(), i + 2))?;
            torch |= row.torch_ms.is_some();
            rows.push(row);
        }
    }
    println!("{} rows from {} files", rows.len(), paths.len());
    summarize(&rows, torch);
    Ok(ExitCode::SUCCESS)
}

fn row_from_csv(header: &[&str], line: &str) -> anyhow::Result<Row> {
    let fields: Vec<&str> = line.split(',').collect();
    anyhow::ensure!(fields.len() == header.len(), "{} fields where the header has {}", fields.len(), header.len());
    // Files written before the yardstick was named by its runtime call its columns `cudnn_*`.
    let get = |name: &str| {
        let older = name.replace("vendor", "cudnn");
        let at = header.iter().position(|h| *h == name).or_else(|| header.iter().position(|h| *h == older));
        at.map(|i| fields[i]).with_context(|| format!("no `{name}` column"))
    };
    let ms =
        |name: &str| -> anyhow::Result<Option<f64>> { Ok(get(name)?.parse::<f64>().ok().filter(|v| v.is_finite())) };
    let measured = |what: &str, time: &str| -> anyhow::Result<Option<Measured>> {
        Ok(ms(time)?.map(|t| (get(what).unwrap_or_default().to_string(), t)))
    };
    let class = match get("class")? {
        "dense" => "dense",
        "grouped" => "grouped",
        "depthwise" => "depthwise",
        other => anyhow::bail!("unknown class `{other}`"),
    };
    Ok(Row {
        key: get("key")?.to_string(),
        class,
        direction: get("direction")?.parse().map_err(anyhow::Error::msg)?,
        dtype: get("dtype")?.parse().map_err(anyhow::Error::msg)?,
        pick: measured("gconv_pick", "gconv_pick_ms")?.context("no pick time")?,
        best: measured("gconv_best", "gconv_best_ms")?,
        own: measured("gconv_own", "gconv_own_ms")?,
        vendor: get("vendor").unwrap_or("cuDNN").to_string(),
        vendor_heuristic: measured("vendor_heuristic", "vendor_heuristic_ms")?.ok_or_else(|| "failed".to_string()),
        vendor_find: measured("vendor_find", "vendor_find_ms")?.ok_or_else(|| "failed".to_string()),
        torch_ms: ms("torch_ms")?,
        bound_ms: ms("roofline_ms")?,
    })
}

/// Layers of the vendor find's time above this (ms) must agree with PyTorch within AGREEMENT.
const AGREEMENT_MIN_MS: f64 = 0.02;
const AGREEMENT: (f64, f64) = (0.75, 1.33);

/// One summary figure: geomean of the vendor find's time over gconv's, the worst, and how many layers
/// fall below 0.5x and 0.9x.
fn ratios(name: &str, ratios: &[f64]) -> String {
    let worst = ratios.iter().cloned().fold(f64::INFINITY, f64::min);
    let below = |t: f64| ratios.iter().filter(|&&r| r < t).count();
    format!(
        "{name} {:.2}x (worst {worst:.2}x, {} <0.5x, {} <0.9x)",
        geomean(ratios).unwrap_or(f64::NAN),
        below(0.5),
        below(0.9)
    )
}

/// How well the pick selects, against gconv's best: its efficiency (best time over the pick's:
/// mean, median, P10), the slowest pick, and the picks' summed time over the best's, beside the
/// vendor heuristic's.
fn selection(members: &[&Row], v: &str) -> String {
    let with_best: Vec<(&Row, f64)> = members.iter().filter_map(|r| Some((*r, r.best.as_ref()?.1))).collect();
    if with_best.is_empty() {
        return "selection: no best measured".into();
    }
    let (mean, median, p10) = stats(with_best.iter().map(|(r, best)| best / r.pick.1).collect());
    let slowest = with_best.iter().map(|(r, best)| r.pick.1 / best).fold(1.0, f64::max);
    let summed = |ms: &dyn Fn(&Row) -> Option<f64>| {
        summed_ratio(with_best.iter().filter_map(|(r, best)| Some((ms(r)?, *best))))
            .map_or("-".to_string(), |(ratio, n)| format!("{ratio:.3}x ({n})"))
    };
    format!(
        "selection: pick efficiency mean {:.1}% median {:.1}% P10 {:.1}%, slowest {slowest:.2}x the best; summed time over the best's: pick {}, {v} heuristic {}",
        100.0 * mean,
        100.0 * median,
        100.0 * p10,
        summed(&|r| Some(r.pick.1)),
        summed(&|r| r.vendor_heuristic.as_ref().ok().map(|m| m.1))
    )
}

fn summarize(rows: &[Row], torch: bool) {
    let v = rows.first().map_or("the vendor library", |r| r.vendor.as_str());
    println!(
        "\nsummary: geomean speed against {v} find (>1: faster than {v}), per dtype and group; roofline fractions"
    );
    let mut groups: BTreeMap<String, Vec<&Row>> = BTreeMap::new();
    for r in rows {
        groups.entry(format!("{} {}", r.dtype, r.direction)).or_default().push(r);
        groups.entry(format!("{} {}", r.dtype, r.class)).or_default().push(r);
        groups.entry(format!("{} all", r.dtype)).or_default().push(r);
    }
    for (name, members) in groups {
        let with_find: Vec<&&Row> = members.iter().filter(|r| r.find_ms().is_some()).collect();
        let against = |ms: &dyn Fn(&Row) -> Option<f64>| -> Vec<f64> {
            with_find.iter().filter_map(|r| Some(r.find_ms()? / ms(r)?)).collect()
        };
        let pick = against(&|r| Some(r.pick.1));
        let best = against(&|r| r.best.as_ref().map(|m| m.1));
        let own = against(&|r| r.own.as_ref().map(|m| m.1));
        let roofline = |ms: &dyn Fn(&Row) -> Option<f64>| -> String {
            let fractions: Vec<f64> = members.iter().filter_map(|r| Some(r.bound_ms? / ms(r)?)).collect();
            geomean(&fractions).map_or("-".into(), |f| format!("{:.1}%", 100.0 * f))
        };
        let missing = match members.len() - with_find.len() {
            0 => String::new(),
            n => format!(" ({n} without a {v} find)"),
        };
        println!("  {name:<22} {:>3} layers{missing}", members.len());
        println!("      {}; {}; {}", ratios("pick", &pick), ratios("best", &best), ratios("own", &own));
        println!("      {}", selection(&members, v));
        println!(
            "      roofline: best {}, own {}, {v} find {}",
            roofline(&|r| r.best.as_ref().map(|m| m.1)),
            roofline(&|r| r.own.as_ref().map(|m| m.1)),
            roofline(&|r| r.find_ms())
        );
        if torch {
            let agree: Vec<(f64, f64)> = members.iter().filter_map(|r| Some((r.find_ms()?, r.torch_ms?))).collect();
            let ratio: Vec<f64> = agree.iter().map(|(f, t)| f / t).collect();
            let large = agree.iter().filter(|(f, _)| *f > AGREEMENT_MIN_MS);
            let outside = large.clone().filter(|(f, t)| !(AGREEMENT.0..=AGREEMENT.1).contains(&(f / t))).count();
            let best_vs_torch: Vec<f64> =
                members.iter().filter_map(|r| Some(r.torch_ms? / r.best.as_ref()?.1)).collect();
            println!(
                "      PyTorch ({} layers): {v} find / PyTorch {:.3} geomean, {outside} of {} layers over {} us outside {}-{}; gconv best {:.2}x PyTorch",
                agree.len(),
                geomean(&ratio).unwrap_or(f64::NAN),
                large.count(),
                AGREEMENT_MIN_MS * 1e3,
                AGREEMENT.0,
                AGREEMENT.1,
                geomean(&best_vs_torch).unwrap_or(f64::NAN)
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(pick_ms: f64, best_ms: f64, heuristic_ms: f64) -> Row {
        let measured = |ms: f64| ("cuda.x default".to_string(), ms);
        Row {
            key: String::new(),
            class: "dense",
            direction: Direction::Forward,
            dtype: DataType::Bf16,
            pick: measured(pick_ms),
            best: Some(measured(best_ms)),
            own: None,
            vendor: "cuDNN".into(),
            vendor_heuristic: Ok(measured(heuristic_ms)),
            vendor_find: Err("not run".into()),
            torch_ms: None,
            bound_ms: None,
        }
    }

    #[test]
    fn selection_sums_the_picks_and_the_vendor_heuristics_against_the_best() {
        let rows = [row(1.0, 1.0, 2.0), row(3.0, 1.0, 1.0)];
        let line = selection(&rows.iter().collect::<Vec<_>>(), "cuDNN");
        assert!(line.contains("mean 66.7%") && line.contains("slowest 3.00x"), "{line}");
        assert!(line.contains("pick 2.000x (2), cuDNN heuristic 1.500x (2)"), "{line}");
    }
}
