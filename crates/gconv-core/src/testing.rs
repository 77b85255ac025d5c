//! Random problems for property tests of every crate: small enough for the reference to be
//! quick, wide enough to reach every rank, group shape, stride, padding and dilation.

use std::time::Duration;

use proptest::prelude::*;

use crate::problem::{ConvProblem, DataType, Direction, Layout, SpatialDim};
use crate::reference::reference;
use crate::verify::{error_scale_floor, verify};
use crate::{Config, ConvTensors, Runtime, Solver, Tensor};

mod listing;
mod watchdog;
pub use listing::ListingDevice;
pub use watchdog::{watch_for, Watched};

/// The longest a kernel build (many in parallel threads) may take before the watchdog
/// names it.
pub const BUILD_LIMIT: Duration = Duration::from_secs(180);
/// The longest one run of a solution, with its upload, reference and verification, may take.
pub const RUN_LIMIT: Duration = Duration::from_secs(60);

fn spatial_dim(max_input: u32) -> impl Strategy<Value = SpatialDim> {
    (1..=max_input, 1..=3u32, 1..=3u32, 0..=2u32, 1..=2u32)
        .prop_map(|(input, filter, stride, pad, dilation)| SpatialDim { input, filter, stride, pad, dilation })
}

/// (G, C/G, K/G): dense, grouped and depthwise shapes.
fn group_shape() -> impl Strategy<Value = (u32, u32, u32)> {
    prop_oneof![(Just(1u32), 1..=6u32, 1..=6u32), (2..=4u32, 1..=3u32, 1..=3u32), (2..=6u32).prop_map(|g| (g, 1, 1)),]
}

/// A valid problem of any direction, data type and layout.
pub fn small_problem() -> impl Strategy<Value = ConvProblem> {
    (1..=3usize)
        .prop_flat_map(|rank| {
            let max_input = [9, 7, 5][rank - 1];
            (
                prop::collection::vec(spatial_dim(max_input), rank),
                group_shape(),
                1..=3u32,
                prop::sample::select(Direction::ALL.to_vec()),
                prop::sample::select(DataType::ALL.to_vec()),
                prop::sample::select(Layout::ALL.to_vec()),
            )
        })
        .prop_map(|(dims, (g, cg, kg), n, direction, dtype, layout)| ConvProblem {
            direction,
            dtype,
            layout,
            n,
            c: g * cg,
            k: g * kg,
            g,
            dims,
        })
        .prop_filter("output size must be positive", |p| p.validate().is_ok())
}

/// Shrinking a failing case re-runs every solver on each smaller problem: a few steps find a
/// smaller one, and a bound keeps a failure from running for many minutes.
const SHRINK_STEPS: u32 = 32;

/// The every-solver check on `cases` random problems drawn from `seed` (of one direction, or
/// any): the same seed draws the same problems, so a run can be replayed. A failure names the
/// seed and the (shrunk) failing problem's key, which replays it alone.
pub fn check_random_problems(
    rt: &dyn Runtime,
    direction: Option<Direction>,
    seed: u64,
    cases: u32,
    sample: usize,
) -> Result<(), RandomFailure> {
    use proptest::test_runner::{Config as RunnerConfig, RngAlgorithm, TestError, TestRng, TestRunner};
    let mut bytes = [0u8; 32];
    bytes[..8].copy_from_slice(&seed.to_le_bytes());
    let config =
        RunnerConfig { cases, max_shrink_iters: SHRINK_STEPS, failure_persistence: None, ..RunnerConfig::default() };
    let mut runner = TestRunner::new_with_rng(config, TestRng::from_seed(RngAlgorithm::ChaCha, &bytes));
    let problems = small_problem().prop_map(move |p| ConvProblem { direction: direction.unwrap_or(p.direction), ..p });
    runner.run(&problems, |p| check_every_solver(rt, &p, sample).map_err(TestCaseError::fail)).map_err(|e| match e {
        TestError::Fail(reason, problem) => {
            RandomFailure { seed, key: Some(problem.key()), reason: reason.to_string() }
        }
        TestError::Abort(reason) => RandomFailure { seed, key: None, reason: reason.to_string() },
    })
}

/// A failed random check: its seed, the failing problem's key, and why.
#[derive(Debug, Clone)]
pub struct RandomFailure {
    pub seed: u64,
    pub key: Option<String>,
    pub reason: String,
}

impl std::fmt::Display for RandomFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.key {
            Some(key) => write!(f, "seed {}: {key} fails: {}", self.seed, self.reason),
            None => write!(f, "seed {}: {}", self.seed, self.reason),
        }
    }
}

/// One shape (a problem key's fields after the layout, such as `n2:c8:k8:i9x9:f3x3:s1x1:p1x1:d1x1`)
/// in every direction and data type, channels-last (NHWC, or NDHWC for a 3D shape).
pub fn channels_last_variants(shape: &str) -> Vec<ConvProblem> {
    variants(shape, ["NWC", "NHWC", "NDHWC"])
}

/// [`channels_last_variants`] channels-first (NCHW, or NCDHW for a 3D shape).
pub fn channels_first_variants(shape: &str) -> Vec<ConvProblem> {
    variants(shape, ["NCW", "NCHW", "NCDHW"])
}

/// The shape in every direction and data type, in the layout of its rank among `layouts` (1D,
/// 2D, 3D).
fn variants(shape: &str, layouts: [&str; 3]) -> Vec<ConvProblem> {
    let layout = match shape.matches('x').count() {
        0 => layouts[0],
        x if x > 6 => layouts[2],
        _ => layouts[1],
    };
    let mut problems = Vec::new();
    for direction in Direction::ALL {
        for dtype in DataType::ALL {
            let key = format!("v1:{direction}:{dtype}:{layout}:{shape}");
            problems.push(ConvProblem::from_key(&key).unwrap_or_else(|e| panic!("{key}: {e}")));
        }
    }
    problems
}

/// The every-solver check, one body for every backend: each applicable solver (the oracle
/// too), with its default config and up to `sample` configs spread over its space, run through
/// the runtime and compared with the CPU reference. Builds run in parallel threads first.
pub fn check_every_solver(rt: &dyn Runtime, p: &ConvProblem, sample: usize) -> Result<(), String> {
    check_solvers(rt, p, sample, |_| true)
}

/// The every-solver check restricted to the solvers `chosen` accepts. A vendor library's list
/// (`find_times_every_config`) may hold inexact configs that find's verification rejects: for
/// those solvers at least one config must match the reference, and the runtime's own
/// verification must agree with the reference on every config tried, so none that is wrong
/// can be picked.
pub fn check_solvers(
    rt: &dyn Runtime,
    p: &ConvProblem,
    sample: usize,
    chosen: impl Fn(&dyn Solver) -> bool,
) -> Result<(), String> {
    let inputs = ConvTensors::random(p, 11);
    let exact = reference(p, &inputs);
    let floor = error_scale_floor(p, &inputs);
    let runs = configs_to_check(rt, p, sample, chosen);
    std::thread::scope(|scope| {
        for (solver, config) in &runs {
            // A failed build shows again, in its own words, when the run builds it.
            scope.spawn(move || {
                let _watched = watch_for(BUILD_LIMIT, format!("building {} {config} for {}", solver.id(), p.key()));
                solver.prepare(p, config)
            });
        }
    });
    let mut list_passes: std::collections::HashMap<&str, bool> = std::collections::HashMap::new();
    for (solver, config) in runs {
        let what = || format!("{} {config} on {}", solver.id(), p.key());
        let _watched = watch_for(RUN_LIMIT, what());
        let solution = match rt.build(solver.id(), p, config.clone()) {
            Ok(solution) => solution,
            // A vendor library may list a config it then fails to plan (cuDNN: "compilation
            // failed"); find records it as failed, and another config must pass.
            Err(_) if solver.find_times_every_config() => {
                list_passes.entry(solver.id()).or_default();
                continue;
            }
            Err(e) => return Err(format!("{}: {e}", what())),
        };
        let mut data = rt.upload(p, &inputs).map_err(|e| format!("{}: {e}", what()))?;
        // Both judge the same output: a nondeterministic engine's two runs can fall on either
        // side of the tolerance.
        let own = data.run_checked(&solution).map_err(|e| format!("{}: {e}", what()))?;
        let truth = verify(p, &data.output().map_err(|e| format!("{}: {e}", what()))?, &exact, floor);
        if own.passed != truth.passed {
            return Err(format!(
                "{}: the reference says {}, the runtime's verification {} (errors {:e}, {:e})",
                what(),
                truth.passed,
                own.passed,
                truth.max_error,
                own.max_error
            ));
        }
        if solver.find_times_every_config() {
            *list_passes.entry(solver.id()).or_default() |= truth.passed;
        } else if !truth.passed {
            return Err(format!(
                "{}: error {:e} > tolerance {:e} at element {}",
                what(),
                truth.max_error,
                truth.tolerance,
                truth.worst_index
            ));
        }
    }
    match list_passes.into_iter().find(|(_, passed)| !passed) {
        Some((id, _)) => Err(format!("no config of {id} tried on {} matches the reference", p.key())),
        None => Ok(()),
    }
}

/// What [`check_solvers`] runs: each chosen solver that applies, with its default config and
/// up to `sample` configs spread over its space.
pub fn configs_to_check<'r>(
    rt: &'r dyn Runtime,
    p: &ConvProblem,
    sample: usize,
    chosen: impl Fn(&dyn Solver) -> bool,
) -> Vec<(&'r dyn Solver, Config)> {
    let mut runs = Vec::new();
    for solver in rt.solvers().into_iter().filter(|s| chosen(*s) && s.applicable(p).is_ok()) {
        let space: Vec<Config> = solver.configs(p).collect();
        let taken = sample.min(space.len());
        let spread = (0..taken).map(|i| space[(2 * i + 1) * space.len() / (2 * taken)].clone());
        let default = solver.default_config(p);
        let others: Vec<Config> = spread.filter(|c| *c != default).collect();
        runs.extend(std::iter::once(default).chain(others).map(|config| (solver, config)));
    }
    runs
}

/// Runs the every-solver check on each problem and fails unless every registered solver was
/// applicable to at least one of them.
pub fn check_every_solver_is_reached(rt: &dyn Runtime, keys: &[&str], sample: usize) -> Result<(), String> {
    let mut reached = std::collections::HashSet::new();
    for key in keys {
        let p = ConvProblem::from_key(key).map_err(|e| e.to_string())?;
        check_every_solver(rt, &p, sample)?;
        reached.extend(rt.solvers().into_iter().filter(|s| s.applicable(&p).is_ok()).map(|s| s.id()));
    }
    let missed: Vec<&str> = rt.solvers().into_iter().map(|s| s.id()).filter(|id| !reached.contains(id)).collect();
    if missed.is_empty() {
        Ok(())
    } else {
        Err(format!("never ran: {}", missed.join(", ")))
    }
}

/// Every conversion between fp32, fp16 and bf16 in either layout, on odd sizes (partial tiles,
/// one channel, 3D), against the host conversion; and each can be timed.
pub fn check_conversions(rt: &dyn Runtime) -> Result<(), String> {
    use crate::conversion::{convert_on_host, Conversion, Format};
    let formats: Vec<Format> = [DataType::F32, DataType::F16, DataType::Bf16]
        .into_iter()
        .flat_map(|dtype| Layout::ALL.map(|layout| Format { dtype, layout }))
        .collect();
    let shapes: [(u32, u32, &[u32]); 3] = [(3, 37, &[9, 11]), (2, 1, &[33]), (1, 70, &[3, 5, 7])];
    for (n, c, spatial) in shapes {
        for &from in &formats {
            for &to in &formats {
                let conversion = Conversion { n, c, spatial: spatial.to_vec(), from, to };
                let input =
                    Tensor::try_random(from.dtype, conversion.elements() as usize, 7).map_err(|e| e.to_string())?;
                let got = rt.convert(&conversion, &input).map_err(|e| format!("{from} -> {to}: {e}"))?;
                let want = convert_on_host(&conversion, &input).map_err(|e| e.to_string())?;
                if got.to_f32() != want.to_f32() {
                    return Err(format!("{from} -> {to} of {n}x{c}x{spatial:?} differs from the host conversion"));
                }
            }
        }
    }
    let conversion = Conversion { n: 4, c: 64, spatial: vec![28, 28], from: formats[0], to: formats[5] };
    let mut timer = rt.conversion_timer(&conversion, crate::TimingOptions::default()).map_err(|e| e.to_string())?;
    let ms = timer.sample().map_err(|e| e.to_string())? * 1e3;
    if !(ms.is_finite() && ms > 0.0) {
        return Err(format!("timing a conversion gave {ms} ms"));
    }
    Ok(())
}
