//! Find, selection and tuning against a runtime whose solvers' times, results and failures are
//! scripted: the behaviour of gconv-tune's logic, apart from any device.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use gconv_core::verify::Verification;
use gconv_core::{
    Backend, Config, ConvProblem, ConvTensors, DeviceFacts, GconvError, Invoker, NotApplicable, Registry, Result,
    Runtime, Solution, Solve, Solver, Tensor, Timer, TimingMethod, TimingOptions, Workload,
};
use gconv_tune::db::Db;
use gconv_tune::find::{find, FindOptions, TestBed};
use gconv_tune::heuristic::{Heuristic, Predicted, Ranking};
use gconv_tune::outcome::Outcome;
use gconv_tune::search::Exhaustive;
use gconv_tune::select::{select, stored, FindMode, Source};
use gconv_tune::tune::{tune, Searched};

/// What a scripted candidate does when run.
#[derive(Debug, Clone, Copy)]
enum Act {
    /// Verifies and takes this many ms per call.
    Takes(f64),
    /// Runs in this many ms and gets the result wrong.
    Wrong(f64),
    /// Fails to run (an error that is the candidate's, not the device's).
    Fails,
}

/// Acts by (solver id, config text); `runs` counts every timed or checked run.
#[derive(Default)]
struct Script {
    acts: HashMap<(&'static str, String), Act>,
    runs: AtomicU32,
}

impl Script {
    fn act(&self, s: &Solution) -> Act {
        self.acts[&(s.solver_id, s.config.to_string())]
    }
}

struct Scripted;

impl Backend for Scripted {
    const NAME: &'static str = "scripted";
    type Buffers<'a> = ();
}

/// A solver with nothing to tune (configs empty) or with the configs `tiles` as its space. A
/// `vendor` one is a library whose find times every config it lists (`tiles`) but tile 64,
/// which it leaves to tuning (as cuDNN's engines compiled at run time), and which builds any
/// tile it is given, listed or not (as cuDNN plans an engine config listed for other shapes).
struct FakeSolver {
    id: &'static str,
    tiles: Vec<u32>,
    applies: bool,
    vendor: bool,
}

impl Solver for FakeSolver {
    fn id(&self) -> &'static str {
        self.id
    }

    fn applicable(&self, _p: &ConvProblem) -> std::result::Result<(), NotApplicable> {
        if self.applies {
            Ok(())
        } else {
            Err(NotApplicable::because("scripted not to apply"))
        }
    }

    fn default_config(&self, _p: &ConvProblem) -> Config {
        self.tiles.first().map_or_else(Config::empty, |&t| Config::new([("t", t)]))
    }

    fn configs<'a>(&'a self, _p: &'a ConvProblem) -> Box<dyn Iterator<Item = Config> + 'a> {
        Box::new(self.tiles.iter().map(|&t| Config::new([("t", t)])))
    }

    fn find_times_every_config(&self) -> bool {
        self.vendor
    }

    fn find_skips(&self, _p: &ConvProblem, config: &Config) -> Option<String> {
        (self.vendor && config.get("t") == Some(64)).then(|| "left to tuning".into())
    }

    fn check_config(&self, _p: &ConvProblem, config: &Config) -> Result<()> {
        let valid = if self.tiles.is_empty() {
            config.is_empty()
        } else {
            config.get("t").is_some_and(|t| self.vendor || self.tiles.contains(&t))
        };
        valid
            .then_some(())
            .ok_or_else(|| GconvError::BadConfig { text: config.to_string(), reason: "not scripted".into() })
    }
}

struct Nothing;

impl Invoker<Scripted> for Nothing {
    fn run(&self, _buffers: &mut ()) -> Result<()> {
        Ok(())
    }
}

impl Solve<Scripted> for FakeSolver {
    fn solution(&self, _p: &ConvProblem, _config: &Config) -> Result<Box<dyn Invoker<Scripted>>> {
        Ok(Box::new(Nothing))
    }
}

struct ScriptedRuntime {
    registry: Registry<Scripted>,
    script: Arc<Script>,
}

impl ScriptedRuntime {
    fn new(solvers: Vec<FakeSolver>, acts: &[(&'static str, &str, Act)]) -> Self {
        let script = Script {
            acts: acts.iter().map(|(id, config, act)| ((*id, config.to_string()), *act)).collect(),
            runs: AtomicU32::new(0),
        };
        let solvers = solvers.into_iter().map(|s| Box::new(s) as Box<dyn Solve<Scripted>>).collect();
        ScriptedRuntime { registry: Registry::new(solvers), script: Arc::new(script) }
    }

    fn runs(&self) -> u32 {
        self.script.runs.load(Ordering::Relaxed)
    }
}

impl Runtime for ScriptedRuntime {
    fn backend(&self) -> &'static str {
        "scripted"
    }

    fn device_key(&self) -> &str {
        "scripted:0"
    }

    fn describe(&self) -> String {
        "a scripted device".into()
    }

    fn facts(&self) -> DeviceFacts {
        DeviceFacts::default()
    }

    fn owns_device_key(&self, key: &str) -> bool {
        key.starts_with("scripted:")
    }

    fn solvers(&self) -> Vec<&dyn Solver> {
        self.registry.solvers()
    }

    fn build(&self, id: &str, p: &ConvProblem, config: Config) -> Result<Solution> {
        self.registry.build(id, p, config)
    }

    fn upload(&self, p: &ConvProblem, _tensors: &ConvTensors) -> Result<Box<dyn Workload>> {
        Ok(Box::new(ScriptedWorkload { script: self.script.clone(), outputs: p.output_elements() as usize }))
    }
}

struct ScriptedWorkload {
    script: Arc<Script>,
    outputs: usize,
}

struct ScriptedTimer(f64);

impl Timer for ScriptedTimer {
    fn estimate(&self) -> f64 {
        self.0
    }

    fn sample(&mut self) -> Result<f64> {
        Ok(self.0)
    }

    fn calls(&self) -> u32 {
        1
    }

    fn method(&self) -> TimingMethod {
        TimingMethod::WallClock
    }
}

impl Workload for ScriptedWorkload {
    fn run(&mut self, s: &Solution) -> Result<()> {
        self.script.runs.fetch_add(1, Ordering::Relaxed);
        match self.script.act(s) {
            Act::Fails => Err(GconvError::Backend(format!("{} scripted to fail", s.solver_id))),
            _ => Ok(()),
        }
    }

    fn timer<'a>(&'a mut self, s: &'a Solution, _options: TimingOptions) -> Result<Box<dyn Timer + 'a>> {
        self.run(s)?;
        match self.script.act(s) {
            Act::Takes(ms) | Act::Wrong(ms) => Ok(Box::new(ScriptedTimer(ms * 1e-3))),
            Act::Fails => unreachable!("failed in run"),
        }
    }

    fn output(&self) -> Result<Tensor> {
        Ok(Tensor::zeros(gconv_core::DataType::F32, self.outputs))
    }

    fn prepare_reference(&mut self) -> Result<()> {
        Ok(())
    }

    fn run_checked(&mut self, s: &Solution) -> Result<Verification> {
        self.run(s)?;
        let passed = !matches!(self.script.act(s), Act::Wrong(_));
        Ok(Verification { max_error: if passed { 0.0 } else { 1.0 }, tolerance: 1e-6, worst_index: 0, passed })
    }
}

fn problem() -> ConvProblem {
    ConvProblem::from_key("v1:fwd:f32:NCHW:n2:c8:k8:i6x6:f3x3:s1x1:p1x1:d1x1").unwrap()
}

fn db(name: &str) -> (Db, std::path::PathBuf) {
    let dir = std::env::temp_dir().join(format!("gconv-tune-scripted-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("user.db");
    (Db::open(&path).unwrap().0, dir)
}

fn plain(id: &'static str) -> FakeSolver {
    FakeSolver { id, tiles: Vec::new(), applies: true, vendor: false }
}

fn opts() -> FindOptions {
    FindOptions { samples: 3, ..FindOptions::default() }
}

#[test]
fn find_ranks_verified_candidates_by_time_and_keeps_failures_apart() {
    let rt = ScriptedRuntime::new(
        vec![
            plain("slow"),
            plain("wrong"),
            plain("broken"),
            plain("fast"),
            FakeSolver { applies: false, ..plain("absent") },
        ],
        &[
            ("slow", "default", Act::Takes(2.0)),
            ("wrong", "default", Act::Wrong(0.1)),
            ("broken", "default", Act::Fails),
            ("fast", "default", Act::Takes(1.0)),
        ],
    );
    let (mut db, dir) = db("rank");
    let p = problem();
    let ranking = find(&rt, &mut db, &mut TestBed::new(&rt, &p), &opts()).unwrap();
    let order: Vec<&str> = ranking.rows.iter().map(|r| r.solver).collect();
    assert_eq!(&order[..2], ["fast", "slow"], "timed candidates first, fastest first");
    assert!(!order.contains(&"absent"), "a solver that does not apply is no candidate");
    let outcome = |id| &ranking.rows.iter().find(|r| r.solver == id).unwrap().outcome;
    assert!(matches!(outcome("wrong"), Outcome::WrongResult(_)), "a fast wrong result never wins");
    assert!(matches!(outcome("broken"), Outcome::Failed(_)));
    let chosen = stored(&rt, &db, &p).unwrap().expect("the ranking is stored");
    assert_eq!((chosen.solution.solver_id, chosen.source), ("fast", Source::FindDb));
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn a_candidate_far_slower_than_the_best_is_time_boxed() {
    let rt = ScriptedRuntime::new(
        vec![plain("fast"), plain("glacial")],
        &[("fast", "default", Act::Takes(1.0)), ("glacial", "default", Act::Takes(1000.0))],
    );
    let (mut db, dir) = db("box");
    let p = problem();
    let ranking = find(&rt, &mut db, &mut TestBed::new(&rt, &p), &opts()).unwrap();
    assert!(matches!(ranking.rows[1].outcome, Outcome::TimeBoxed(_)), "{:?}", ranking.rows[1].outcome);
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn modes_measure_only_when_they_should() {
    let rt = ScriptedRuntime::new(
        vec![plain("first"), plain("second")],
        &[("first", "default", Act::Takes(3.0)), ("second", "default", Act::Takes(1.0))],
    );
    let (mut db, dir) = db("modes");
    let p = problem();
    let fast = select(&rt, &mut db, &mut TestBed::new(&rt, &p), &p, FindMode::Fast, &opts(), None).unwrap();
    assert_eq!((fast.solution.solver_id, fast.source), ("first", Source::Rule), "no model: the first in priority");
    assert_eq!(rt.runs(), 0, "fast mode never runs a candidate");
    let hybrid = select(&rt, &mut db, &mut TestBed::new(&rt, &p), &p, FindMode::Hybrid, &opts(), None).unwrap();
    assert_eq!((hybrid.solution.solver_id, hybrid.source), ("second", Source::Find));
    let runs = rt.runs();
    assert!(runs > 0);
    for mode in [FindMode::Hybrid, FindMode::Fast, FindMode::DynamicHybrid] {
        let again = select(&rt, &mut db, &mut TestBed::new(&rt, &p), &p, mode, &opts(), None).unwrap();
        assert_eq!((again.solution.solver_id, again.source), ("second", Source::FindDb), "{mode}");
    }
    assert_eq!(rt.runs(), runs, "a stored find is not measured again");
    let normal = select(&rt, &mut db, &mut TestBed::new(&rt, &p), &p, FindMode::Normal, &opts(), None).unwrap();
    assert_eq!(normal.source, Source::Find, "normal mode always measures");
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn tuning_keeps_the_fastest_verified_config_and_find_then_runs_it() {
    let tiles = FakeSolver { id: "tiled", tiles: vec![16, 32, 64], applies: true, vendor: false };
    let rt = ScriptedRuntime::new(
        vec![tiles, plain("plain")],
        &[
            ("tiled", "t16", Act::Takes(4.0)),
            ("tiled", "t32", Act::Wrong(0.5)),
            ("tiled", "t64", Act::Takes(1.5)),
            ("plain", "default", Act::Takes(2.0)),
        ],
    );
    let (mut db, dir) = db("tune");
    let p = problem();
    let outcome = tune(&rt, &mut db, &p, &Exhaustive, Searched::All, &opts(), &mut |_| {}).unwrap();
    let tiled = outcome.solvers.iter().find(|s| s.solver == "tiled").unwrap();
    assert_eq!((tiled.measured, tiled.winner.as_deref()), (3, Some("t64")), "the wrong, faster t32 never wins");
    assert_eq!(outcome.find[0].solver, "tiled", "the closing find runs the tuned config");
    assert_eq!(outcome.find[0].config.to_string(), "t64");
    let again = tune(&rt, &mut db, &p, &Exhaustive, Searched::All, &opts(), &mut |_| {}).unwrap();
    assert!(again.skipped, "a tuned problem is not tuned again");
    std::fs::remove_dir_all(dir).unwrap();
}

/// A model whose ranking is given.
struct Ranked(Vec<(&'static str, Config)>);

impl Heuristic for Ranked {
    fn rank(&self, _rt: &dyn Runtime, _p: &ConvProblem) -> Option<Arc<Ranking>> {
        let candidates = self.0.iter().map(|(solver, config)| Predicted {
            solver: solver.to_string(),
            config: config.clone(),
            ms: 1.0,
        });
        Some(Arc::new(Ranking { candidates: candidates.collect() }))
    }

    fn describe(&self) -> String {
        "a given ranking".into()
    }
}

#[test]
fn the_models_pick_of_a_vendor_config_is_one_the_vendor_lists_for_the_problem() {
    let library = FakeSolver { id: "library", tiles: vec![16, 32, 64], applies: true, vendor: true };
    let rt = ScriptedRuntime::new(vec![library, plain("own")], &[]);
    let (mut db, dir) = db("listed");
    let p = problem();
    let tile = |t: u32| Config::new([("t", t)]);
    let model = Ranked(vec![("library", tile(99)), ("library", tile(32)), ("own", Config::empty())]);
    let s = select(&rt, &mut db, &mut TestBed::new(&rt, &p), &p, FindMode::Fast, &opts(), Some(&model)).unwrap();
    assert_eq!(
        (s.solution.solver_id, s.solution.config.to_string().as_str(), s.source),
        ("library", "t32", Source::Model),
        "a config the library builds but does not list for the problem is passed over"
    );
    let model = Ranked(vec![("library", tile(99)), ("own", Config::empty())]);
    let s = select(&rt, &mut db, &mut TestBed::new(&rt, &p), &p, FindMode::Fast, &opts(), Some(&model)).unwrap();
    assert_eq!((s.solution.solver_id, s.source), ("own", Source::Model));
    // A ranking may hold configs it did not confirm (a library's engines asked about alone):
    // one listed but left to tuning by find is passed over like one not listed.
    let model = Ranked(vec![("library", tile(64)), ("library", tile(16))]);
    let s = select(&rt, &mut db, &mut TestBed::new(&rt, &p), &p, FindMode::Fast, &opts(), Some(&model)).unwrap();
    assert_eq!(s.solution.config.to_string(), "t16", "a config find skips is not the model's pick");
    assert_eq!(rt.runs(), 0, "fast mode never runs a candidate");
    std::fs::remove_dir_all(dir).unwrap();
}
