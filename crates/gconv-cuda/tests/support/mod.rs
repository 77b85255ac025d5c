//! What the GPU tests share: one runtime for the process (its kernels built once for every test
//! that uses them, and cached on disk for the next process), the run's seed, the regressions
//! file of problems that once failed, and the check of a solver's configs on medium problems.

use std::collections::HashSet;
use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{OnceLock, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::Instant;

use gconv_core::reference::reference;
use gconv_core::testing::{channels_last_variants, configs_to_check, watch_for, BUILD_LIMIT, RUN_LIMIT};
use gconv_core::verify::{error_scale_floor, verify};
use gconv_core::{Config, ConvProblem, ConvTensors, Direction, Runtime, Solver};
use gconv_cuda::CudaRuntime;

/// The seed of every random choice the suite makes (problems, sampled configs): fixed, so that
/// a run is replayed by running it again. `gconv check --seeds` draws problems from others.
pub const SEED: u64 = 0x6763_6f6e_7631;

/// One runtime for the whole test process, as an application has one per device, used by every
/// test at once from the test harness's threads.
pub fn runtime() -> &'static CudaRuntime {
    static RUNTIME: OnceLock<CudaRuntime> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        CudaRuntime::probe(Some(std::env::temp_dir().join("gconv-test-kernels"))).expect("a usable CUDA GPU")
    })
}

/// Tests that compare timings take the GPU alone; the others share it.
static QUIET: RwLock<()> = RwLock::new(());

pub fn shared_gpu() -> RwLockReadGuard<'static, ()> {
    QUIET.read().unwrap_or_else(|p| p.into_inner())
}

pub fn quiet_gpu() -> RwLockWriteGuard<'static, ()> {
    QUIET.write().unwrap_or_else(|p| p.into_inner())
}

/// Problems that once failed a GPU test, one key a line: every run checks them first, and a
/// failing random problem is added. Found from the crate (cargo test) or the repository root
/// (a packed test executable).
fn regressions_file() -> PathBuf {
    let from_crate = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/gpu-regressions.txt"));
    if from_crate.exists() {
        return from_crate;
    }
    PathBuf::from("crates/gconv-cuda/tests/gpu-regressions.txt")
}

pub fn regressions(direction: Direction) -> Vec<ConvProblem> {
    let text = std::fs::read_to_string(regressions_file()).unwrap_or_default();
    let keys = text.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with('#'));
    keys.map(|k| ConvProblem::from_key(k).unwrap_or_else(|e| panic!("{}: {k}: {e}", regressions_file().display())))
        .filter(|p| p.direction == direction)
        .collect()
}

/// Adds a failing problem to the regressions file (best effort: the failure is reported either
/// way) and says where.
pub fn persist_regression(key: &str) -> String {
    let path = regressions_file();
    let known = std::fs::read_to_string(&path).unwrap_or_default();
    if known.lines().any(|l| l.trim() == key) {
        return format!("{key} is in {} already", path.display());
    }
    match std::fs::OpenOptions::new().create(true).append(true).open(&path).and_then(|mut f| writeln!(f, "{key}")) {
        Ok(()) => format!("{key} added to {}", path.display()),
        Err(e) => format!("{key} could not be added to {}: {e}", path.display()),
    }
}

/// Prints how long a test took (seen with --nocapture): where the suite's time goes.
pub struct Stopwatch(&'static str, Instant);

impl Stopwatch {
    pub fn start(test: &'static str) -> Self {
        Stopwatch(test, Instant::now())
    }
}

impl Drop for Stopwatch {
    fn drop(&mut self) {
        eprintln!("time: {} {:.1} s", self.0, self.1.elapsed().as_secs_f64());
    }
}

/// A small deterministic generator for sampling configs from the run's seed.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// From `candidates` of problem `p`: the default, every config that brings a field value not
/// yet run for the problem's direction and type (`covered` keeps them across the test's
/// problems), and `extra` more drawn from the seed. Every config value the test lists is run
/// each time, on some problem; which problem meets which config varies with the seed.
pub fn sample_configs(
    solver: &dyn Solver,
    p: &ConvProblem,
    candidates: Vec<Config>,
    covered: &mut HashSet<String>,
    extra: usize,
) -> Vec<Config> {
    let class = format!("{}:{}", p.direction, p.dtype);
    let feature = |(name, value): &(String, u32)| format!("{class}:{name}={value}");
    let default = solver.default_config(p);
    let mut taken: Vec<Config> = vec![default.clone()];
    covered.extend(default.fields().iter().map(feature));
    let mut rest = Vec::new();
    for c in candidates.into_iter().filter(|c| *c != default) {
        let new: Vec<String> = c.fields().iter().map(feature).filter(|f| !covered.contains(f)).collect();
        if new.is_empty() {
            rest.push(c);
        } else {
            covered.extend(new);
            taken.push(c);
        }
    }
    let mut state = mix(SEED ^ mix(p.key().bytes().fold(0u64, |h, b| h.wrapping_mul(31).wrapping_add(u64::from(b)))));
    for _ in 0..extra.min(rest.len()) {
        state = mix(state);
        taken.push(rest.swap_remove((state % rest.len() as u64) as usize));
    }
    taken
}

/// Builds the kernels of `runs` ahead, from as many threads as the machine has cores, each
/// build watched on its own (gconv-tune's `prepare_in_parallel` would watch only the batch). A
/// failed build shows again, in its own words, when the run builds it.
fn build_ahead(runs: &[(&ConvProblem, &dyn Solver, Config)]) {
    let next = AtomicUsize::new(0);
    let threads = std::thread::available_parallelism().map_or(4, |n| n.get());
    std::thread::scope(|scope| {
        for _ in 0..threads.min(runs.len()) {
            scope.spawn(|| {
                while let Some((p, solver, config)) = runs.get(next.fetch_add(1, Ordering::Relaxed)) {
                    let _watched = watch_for(BUILD_LIMIT, format!("building {} {config} for {}", solver.id(), p.key()));
                    let _ = solver.prepare(p, config);
                }
            });
        }
    });
}

/// Builds ahead every kernel [`check_solvers`] will run on `problems`, so that the builds of
/// all of them share the machine's cores.
pub fn prebuild_checks(
    rt: &dyn Runtime,
    problems: &[ConvProblem],
    sample: usize,
    chosen: impl Fn(&dyn Solver) -> bool,
) {
    let runs: Vec<(&ConvProblem, &dyn Solver, Config)> = problems
        .iter()
        .flat_map(|p| configs_to_check(rt, p, sample, &chosen).into_iter().map(move |(s, c)| (p, s, c)))
        .collect();
    build_ahead(&runs);
}

/// Where a solution's output misses the reference, by destination channel and pixel
/// (channels-last): whole pixels wrong point at the source tile, whole channels at the filter
/// tile or the epilogue, everything at the MMA's operand layout. `None` when it matches.
fn misses(
    rt: &dyn Runtime,
    p: &ConvProblem,
    (inputs, exact): (&ConvTensors, &[f64]),
    config: &Config,
    solver: &str,
) -> Result<Option<String>, String> {
    let solution = rt.build(solver, p, config.clone()).map_err(|e| e.to_string())?;
    let mut data = rt.upload(p, inputs).map_err(|e| e.to_string())?;
    data.run(&solution).map_err(|e| e.to_string())?;
    let got = data.output().map_err(|e| e.to_string())?;
    let check = verify(p, &got, exact, error_scale_floor(p, inputs));
    if check.passed {
        return Ok(None);
    }
    let channels = match p.direction {
        Direction::Forward => p.k,
        Direction::BackwardData => p.c,
        Direction::BackwardWeight => p.c / p.g,
    } as usize;
    let scale = exact.iter().fold(error_scale_floor(p, inputs), |m, r| m.max(r.abs()));
    let error = |g: f32, r: f64| if g.is_finite() { (f64::from(g) - r).abs() / scale } else { f64::INFINITY };
    let wrong: Vec<usize> = got
        .to_f32()
        .iter()
        .zip(exact)
        .enumerate()
        .filter(|(_, (&g, &r))| error(g, r) > check.tolerance)
        .map(|(i, _)| i)
        .collect();
    let ranges = |mut v: Vec<usize>| {
        v.sort_unstable();
        v.dedup();
        let mut text = Vec::new();
        let mut i = 0;
        while i < v.len() && text.len() < 12 {
            let start = v[i];
            while i + 1 < v.len() && v[i + 1] == v[i] + 1 {
                i += 1;
            }
            text.push(if v[i] == start { start.to_string() } else { format!("{start}-{}", v[i]) });
            i += 1;
        }
        text.join(",")
    };
    Ok(Some(format!(
        "{} of {} wrong (error {:e} > {:e}); channels {}; pixels {}",
        wrong.len(),
        exact.len(),
        check.max_error,
        check.tolerance,
        ranges(wrong.iter().map(|i| i % channels).collect()),
        ranges(wrong.iter().map(|i| i / channels).collect())
    )))
}

/// Runs `solver` with the `configs` it lists for each variant of `shapes` it applies to and
/// fails listing every run that misses the reference, with where it misses. Every problem's
/// kernels are built in parallel first, all of them before any runs.
pub fn list_misses(
    rt: &dyn Runtime,
    solver: &str,
    shapes: &[&str],
    configs: impl FnMut(&dyn Solver, &ConvProblem) -> Vec<Config>,
) {
    let problems: Vec<ConvProblem> = shapes.iter().flat_map(|shape| channels_last_variants(shape)).collect();
    list_misses_of(rt, solver, &problems, configs);
}

/// [`list_misses`] on the problems given, whatever their layout.
pub fn list_misses_of(
    rt: &dyn Runtime,
    solver: &str,
    problems: &[ConvProblem],
    mut configs: impl FnMut(&dyn Solver, &ConvProblem) -> Vec<Config>,
) {
    let solver = rt.solver(solver).unwrap();
    let problems: Vec<ConvProblem> = problems.iter().filter(|p| solver.applicable(p).is_ok()).cloned().collect();
    let runs: Vec<(&ConvProblem, &dyn Solver, Config)> =
        problems.iter().flat_map(|p| configs(solver, p).into_iter().map(move |c| (p, solver, c))).collect();
    assert!(!runs.is_empty(), "{} applied to none of the problems", solver.id());
    build_ahead(&runs);
    let mut failures = Vec::new();
    for p in &problems {
        let inputs = ConvTensors::random(p, 11);
        let exact = reference(p, &inputs);
        for (_, _, config) in runs.iter().filter(|(q, _, _)| *q == p) {
            let _watched = watch_for(RUN_LIMIT, format!("{} {config} on {}", solver.id(), p.key()));
            match misses(rt, p, (&inputs, &exact), config, solver.id()) {
                Ok(None) => {}
                Ok(Some(miss)) => failures.push(format!("{config} on {}: {miss}", p.key())),
                Err(e) => failures.push(format!("{config} on {}: {e}", p.key())),
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} runs failed (seed {SEED:#x}):\n{}",
        failures.len(),
        runs.len(),
        failures.join("\n")
    );
}
