//! `gconv bench`: gconv against cuDNN on the same GPU, in one process, on the same buffers and
//! with the same timing (CUDA events, a warm-up, the median), beside the roofline bound.

use std::collections::BTreeMap;
use std::io::Write;
use std::process::ExitCode;

use anyhow::Context;
use gconv_core::{ConvProblem, ConvTensors, DataType, Direction, Solution};
use gconv_cuda::cudnn_peer::{Algo, CudnnPeer};
use gconv_cuda::roofline::{measure_peaks, Peaks};
use gconv_cuda::DeviceTensors;
use gconv_tune::db::Db;
use gconv_tune::find::{find, FindOptions, DATA_SEED, STATUS_OK};
use gconv_tune::select::{select, FindMode};
use gconv_tune::target::{CudaTarget, Target};

pub struct BenchOptions {
    pub mode: FindMode,
    pub iterations: u32,
    pub find: FindOptions,
    pub csv: Option<std::path::PathBuf>,
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

/// Median of a warm-up run and then `iterations` timed runs, in ms.
fn median_ms(iterations: u32, mut run: impl FnMut() -> gconv_core::Result<f64>) -> anyhow::Result<f64> {
    run()?;
    let mut samples = (0..iterations.max(1)).map(|_| run().map(|s| s * 1e3)).collect::<Result<Vec<_>, _>>()?;
    samples.sort_by(f64::total_cmp);
    Ok(samples[samples.len() / 2])
}

struct Row {
    key: String,
    class: &'static str,
    direction: Direction,
    dtype: DataType,
    pick: (String, f64),
    best: (String, f64),
    cudnn_heuristic: Result<(String, f64), String>,
    cudnn_find: Result<(String, f64), String>,
    bound_ms: f64,
}

fn geomean(values: &[f64]) -> Option<f64> {
    (!values.is_empty()).then(|| (values.iter().map(|v| v.ln()).sum::<f64>() / values.len() as f64).exp())
}

pub fn bench(target: &CudaTarget, db: &mut Db, problems: Vec<ConvProblem>, opts: &BenchOptions) -> anyhow::Result<ExitCode> {
    let device = &target.device;
    let mut peaks: BTreeMap<DataType, Peaks> = BTreeMap::new();
    let mut rows = Vec::new();
    let mut failures = 0;
    let mut csv = opts.csv.as_deref().map(CsvOut::create).transpose()?;
    println!("device:    {}\n", target.describe());
    for p in &problems {
        if !peaks.contains_key(&p.dtype) {
            let measured = measure_peaks(device, p.dtype)?;
            println!(
                "peaks:     {}: {:.1} TFLOP/s (cuBLAS GEMM), {:.0} GB/s (copy)",
                p.dtype,
                measured.flops_per_s / 1e12,
                measured.bytes_per_s / 1e9
            );
            peaks.insert(p.dtype, measured);
        }
        match bench_one(target, db, p, opts, &peaks[&p.dtype]) {
            Ok(row) => {
                print_row(&row);
                if let Some(out) = &mut csv {
                    out.row(&row)?;
                }
                rows.push(row);
            }
            Err(e) => {
                failures += 1;
                eprintln!("error: {}: {e:#}", p.key());
            }
        }
        for w in db.warnings.drain(..) {
            eprintln!("warning: {w}");
        }
    }
    summarize(&rows, device.build_stats());
    Ok(if failures == 0 { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

fn bench_one(target: &CudaTarget, db: &mut Db, p: &ConvProblem, opts: &BenchOptions, peaks: &Peaks) -> anyhow::Result<Row> {
    let device = &target.device;
    let tensors = ConvTensors::try_random(p, DATA_SEED)?;
    let mut gpu = DeviceTensors::upload(device, &tensors)?;

    let selection = select(target, db, p, opts.mode, &opts.find)?;
    let solver = target.registry().get(selection.solver)?;
    let solution = Solution::build(solver, p, selection.config.clone())?;
    let pick_ms = median_ms(opts.iterations, || gpu.run_timed(device, &solution))?;

    // A full find already run by the pick (normal and hybrid modes without a find-db record)
    // is the ranking; dynamic-hybrid's skipped unbuilt candidates, so it does not count.
    let ranking = match selection.find {
        Some(rows) if opts.mode != FindMode::DynamicHybrid => rows,
        _ => find(target, db, p, &opts.find)?,
    };
    let best = ranking.iter().find(|r| r.status == STATUS_OK).context("no gconv candidate ran")?;
    let best = (format!("{} {}", best.solver, best.config), best.time_ms.unwrap_or(f64::NAN));

    let peer = CudnnPeer::new(device, p)?;
    let time_algo = |gpu: &mut DeviceTensors, algo: gconv_core::Result<Algo>| -> Result<(String, f64), String> {
        let algo = algo.map_err(|e| e.to_string())?;
        let ms = median_ms(opts.iterations, || peer.run_timed(gpu, &algo)).map_err(|e| e.to_string())?;
        Ok((algo.name(), ms))
    };
    let cudnn_heuristic = time_algo(&mut gpu, peer.heuristic());
    let found = peer.find(&mut gpu, opts.find.workspace_limit);
    let cudnn_find = time_algo(&mut gpu, found);

    Ok(Row {
        key: p.key(),
        class: class(p),
        direction: p.direction,
        dtype: p.dtype,
        pick: (format!("{} {}", solution.solver_id, solution.config), pick_ms),
        best,
        cudnn_heuristic,
        cudnn_find,
        bound_ms: peaks.bound_s(p.flops(), p.bytes()) * 1e3,
    })
}

fn print_row(r: &Row) {
    let cudnn = |c: &Result<(String, f64), String>| match c {
        Ok((a, t)) => format!("{t:.4} ms ({})", a.trim_start_matches("CUDNN_CONVOLUTION_")),
        Err(e) => format!("failed ({e})"),
    };
    println!("{}", r.key);
    println!("  gconv pick {:.4} ms ({}); gconv best {:.4} ms ({})", r.pick.1, r.pick.0, r.best.1, r.best.0);
    println!("  cuDNN heuristic {}; cuDNN find {}", cudnn(&r.cudnn_heuristic), cudnn(&r.cudnn_find));
    let vs_find = r.cudnn_find.as_ref().map_or("no cuDNN find to compare with".into(), |(_, t)| format!("{:.2}x cuDNN find", t / r.best.1));
    println!("  roofline {:.4} ms; gconv best at {:.1}% of it; {vs_find}", r.bound_ms, 100.0 * r.bound_ms / r.best.1);
}

/// The `--csv` file, written a row at a time so that an interrupted bench keeps what it measured.
struct CsvOut {
    path: std::path::PathBuf,
    file: std::io::BufWriter<std::fs::File>,
}

impl CsvOut {
    fn create(path: &std::path::Path) -> anyhow::Result<Self> {
        let file = std::fs::File::create(path).with_context(|| format!("cannot create {}", path.display()))?;
        let mut out = CsvOut { path: path.to_path_buf(), file: std::io::BufWriter::new(file) };
        out.line("key,class,direction,dtype,gconv_pick,gconv_pick_ms,gconv_best,gconv_best_ms,cudnn_heuristic,cudnn_heuristic_ms,cudnn_find,cudnn_find_ms,roofline_ms,speedup_vs_cudnn_find,gconv_roofline_fraction,cudnn_roofline_fraction")?;
        Ok(out)
    }

    fn row(&mut self, r: &Row) -> anyhow::Result<()> {
        let (ha, ht) = r.cudnn_heuristic.clone().unwrap_or(("failed".into(), f64::NAN));
        let (fa, ft) = r.cudnn_find.clone().unwrap_or(("failed".into(), f64::NAN));
        self.line(&format!(
            "{},{},{},{},{},{:.5},{},{:.5},{},{:.5},{},{:.5},{:.5},{:.4},{:.4},{:.4}",
            r.key, r.class, r.direction, r.dtype, r.pick.0, r.pick.1, r.best.0, r.best.1, ha, ht, fa, ft, r.bound_ms,
            ft / r.best.1, r.bound_ms / r.best.1, r.bound_ms / ft
        ))
    }

    fn line(&mut self, text: &str) -> anyhow::Result<()> {
        writeln!(self.file, "{text}")
            .and_then(|_| self.file.flush())
            .with_context(|| format!("cannot write {}", self.path.display()))
    }
}

/// Speed against cuDNN find below which the summary counts a layer as slow.
const SLOW_RATIO: f64 = 0.5;

fn summarize(rows: &[Row], builds: gconv_core::BuildStats) {
    println!("\nsummary: geomean speed of gconv's best against cuDNN find (>1 is faster), and fractions of roofline");
    let mut groups: BTreeMap<String, Vec<&Row>> = BTreeMap::new();
    for r in rows {
        groups.entry(format!("{} {}", r.dtype, r.direction)).or_default().push(r);
        groups.entry(format!("{} {}", r.dtype, r.class)).or_default().push(r);
        groups.entry(format!("{} all", r.dtype)).or_default().push(r);
    }
    for (name, members) in groups {
        let with_find: Vec<&&Row> = members.iter().filter(|r| r.cudnn_find.is_ok()).collect();
        let ratios: Vec<f64> = with_find.iter().map(|r| r.cudnn_find.as_ref().unwrap().1 / r.best.1).collect();
        let ours: Vec<f64> = members.iter().map(|r| r.bound_ms / r.best.1).collect();
        let theirs: Vec<f64> = with_find.iter().map(|r| r.bound_ms / r.cudnn_find.as_ref().unwrap().1).collect();
        let worst = ratios.iter().cloned().fold(f64::INFINITY, f64::min);
        let slow = ratios.iter().filter(|&&r| r < SLOW_RATIO).count();
        let unmatched = match members.len() - with_find.len() {
            0 => String::new(),
            n => format!(", {n} without a cuDNN find"),
        };
        println!(
            "  {name:<22} {:>3} layers: {:.2}x cuDNN find (worst {:.2}x, {slow} below {SLOW_RATIO}x{unmatched}); roofline: gconv {:.1}%, cuDNN {:.1}%",
            members.len(),
            geomean(&ratios).unwrap_or(f64::NAN),
            worst,
            100.0 * geomean(&ours).unwrap_or(f64::NAN),
            100.0 * geomean(&theirs).unwrap_or(f64::NAN)
        );
    }
    println!(
        "  kernel builds: {} ({:.0} ms of NVRTC), {} from the disk cache, {} reused in process",
        builds.builds, builds.build_ms, builds.disk_hits, builds.memory_hits
    );
}
