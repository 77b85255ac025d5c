//! cuDNN through its graph (backend) API, as PyTorch uses it: per problem an operation graph,
//! engine configs from heuristic modes A, B and FALLBACK plus every engine with its default
//! knobs (deduplicated by tag), plans built before anything is timed and cached in the process.
//! `cuda.cudnn` (solvers/cudnn.rs) is the solver over these configs; `gconv bench` reads
//! cuDNN's own heuristic and find lists from here.

mod descriptor;
mod graph;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use cudarc::cudnn::sys::cudnnBackendHeurMode_t as Mode;
use gconv_core::{Config, ConvProblem, DataType, GconvError, Result};

use crate::device::CudaDevice;
pub use descriptor::library_version;
use descriptor::Handle;
use graph::{EngineConfig, OpGraph, Tag};
pub use graph::Plan;

/// One usable engine config of a problem.
#[derive(Debug, Clone)]
pub struct Candidate {
    pub config: Config,
    /// Read from the engine config before any plan is built.
    pub workspace_bytes: Option<u64>,
    pub compiles_at_run_time: bool,
    /// Named by heuristic mode A or FALLBACK, the lists cuDNN's own find times.
    pub on_find_list: bool,
    /// Which heuristic lists named it, and the engine's numerical and behaviour notes.
    pub notes: String,
}

/// A problem's engine configs, and the lists cuDNN's own heuristic and find would use.
#[derive(Debug, Clone, Default)]
pub struct Candidates {
    /// Every usable config: heuristics A, B, FALLBACK, then each engine with default knobs.
    pub all: Vec<Candidate>,
    /// Mode A's first usable config: cuDNN's heuristic pick.
    pub heuristic: Option<Config>,
    /// Modes A and FALLBACK: what PyTorch's benchmark (cuDNN's find) times.
    pub find: Vec<Config>,
    /// Why there is none, when `all` is empty.
    pub none_because: Option<String>,
}

/// A problem's operation graph, and its engine configs once listed: a plan needs only the
/// graph, so a config named by a model is planned without asking cuDNN's heuristics.
struct Problem {
    graph: Arc<OpGraph>,
    candidates: Option<Arc<Candidates>>,
    /// Heuristic mode A's first usable config, asked alone (`None` until asked).
    heuristic: Option<Option<Config>>,
}

struct State {
    handle: Handle,
    problems: HashMap<ConvProblem, Problem>,
    plans: HashMap<(ConvProblem, Config), Arc<Plan>>,
}

/// The library on one device: a handle on gconv's stream and the per-process caches. A
/// handle must not be used by two threads at once, so everything goes through one lock.
pub struct Cudnn {
    device: Arc<CudaDevice>,
    state: Mutex<Option<std::result::Result<State, String>>>,
}

impl Cudnn {
    pub fn new(device: Arc<CudaDevice>) -> Arc<Self> {
        Arc::new(Cudnn { device, state: Mutex::new(None) })
    }

    pub fn version(&self) -> Option<usize> {
        self.device.cudnn_version
    }

    /// The state, created on first use, with the device's context current on this thread.
    fn lock(&self) -> Result<MutexGuard<'_, Option<std::result::Result<State, String>>>> {
        let ctx = self.device.context()?;
        ctx.bind_to_thread().map_err(|e| crate::device::driver_error("bind the CUDA context", e))?;
        let mut guard = self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if guard.is_none() {
            let made = match self.version() {
                None => Err("cuDNN (libcudnn) not found".to_string()),
                Some(_) => self
                    .device
                    .stream()
                    .and_then(|s| Handle::new(s.cu_stream() as _))
                    .map(|handle| State { handle, problems: HashMap::new(), plans: HashMap::new() })
                    .map_err(|e| e.to_string()),
            };
            *guard = Some(made);
        }
        Ok(guard)
    }

    fn with_state<R>(&self, f: impl FnOnce(&mut State) -> Result<R>) -> Result<R> {
        // Separate handles in separate threads are not enough: with several runtimes of one
        // process calling cuDNN at once (the GPU tests' threads) it raised SIGFPE, and each
        // passed alone. So every call into cuDNN in the process takes turns.
        static CALLS: Mutex<()> = Mutex::new(());
        let _turn = CALLS.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let mut guard = self.lock()?;
        match guard.as_mut().expect("set by lock") {
            Ok(state) => f(state),
            Err(reason) => Err(GconvError::Backend(reason.clone())),
        }
    }

    /// Whether cuDNN accepts the problem's operation graph (without listing its engines).
    pub fn supports(&self, p: &ConvProblem) -> Result<()> {
        self.with_state(|state| problem(state, p).map(|_| ()))
    }

    /// The problem's engine configs, listed once per process.
    pub fn candidates(&self, p: &ConvProblem) -> Result<Arc<Candidates>> {
        self.with_state(|state| {
            let entry = problem(state, p)?;
            let graph = entry.graph.clone();
            Ok(entry.candidates.get_or_insert_with(|| Arc::new(list(&graph, p))).clone())
        })
    }

    /// cuDNN's heuristic pick (mode A's first usable config) without listing every engine:
    /// what a guided find adds to a model's candidates, for a fraction of a listing's cost.
    pub fn heuristic_pick(&self, p: &ConvProblem) -> Result<Option<Config>> {
        self.with_state(|state| {
            let entry = problem(state, p)?;
            if let Some(candidates) = &entry.candidates {
                return Ok(candidates.heuristic.clone());
            }
            if entry.heuristic.is_none() {
                let configs = entry.graph.heuristic(Mode::CUDNN_HEUR_MODE_A).unwrap_or_default();
                let usable = configs.into_iter().filter_map(|c| EngineConfig::from_heuristic(c).ok());
                let pick = usable.filter(|c| p.dtype != DataType::F32 || c.exact_fp32()).find_map(|c| c.tag.to_config().ok());
                entry.heuristic = Some(pick);
            }
            Ok(entry.heuristic.clone().flatten())
        })
    }

    /// The candidates when they are already listed, without asking cuDNN.
    pub fn known_candidates(&self, p: &ConvProblem) -> Option<Arc<Candidates>> {
        let guard = self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        guard.as_ref()?.as_ref().ok()?.problems.get(p)?.candidates.clone()
    }

    /// The plan of a config, built once per process.
    pub fn plan(&self, p: &ConvProblem, config: &Config) -> Result<Arc<Plan>> {
        self.with_state(|state| plan(state, p, config))
    }

    pub fn is_planned(&self, p: &ConvProblem, config: &Config) -> bool {
        let guard = self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        guard.as_ref().and_then(|s| s.as_ref().ok()).is_some_and(|s| s.plans.contains_key(&(p.clone(), config.clone())))
    }

    /// Runs a plan on the device buffers (under the lock: one thread uses the handle).
    pub fn execute(&self, plan: &Plan, x: u64, w: u64, y: u64, workspace: u64) -> Result<()> {
        self.with_state(|state| plan.execute(&state.handle, x, w, y, workspace))
    }
}

fn problem<'s>(state: &'s mut State, p: &ConvProblem) -> Result<&'s mut Problem> {
    if !state.problems.contains_key(p) {
        let graph = OpGraph::new(&state.handle, p)?;
        state.problems.insert(p.clone(), Problem { graph, candidates: None, heuristic: None });
    }
    Ok(state.problems.get_mut(p).expect("inserted"))
}

fn plan(state: &mut State, p: &ConvProblem, config: &Config) -> Result<Arc<Plan>> {
    let key = (p.clone(), config.clone());
    if let Some(plan) = state.plans.get(&key) {
        return Ok(plan.clone());
    }
    let tag = Tag::from_config(config)?;
    let graph = problem(state, p)?.graph.clone();
    let engine_config = EngineConfig::from_tag(&graph, &tag)?;
    if p.dtype == DataType::F32 && !engine_config.exact_fp32() {
        return Err(GconvError::BadConfig { text: config.to_string(), reason: "the engine is not exact fp32 (tensor cores or down-converted inputs)".into() });
    }
    let plan = Arc::new(Plan::new(&state.handle, &graph, engine_config)?);
    state.plans.insert(key, plan.clone());
    Ok(plan)
}

/// Lists the usable configs of a graph. Exact fp32 keeps only exact engines
/// ([`EngineConfig::exact_fp32`]); tf32 and 16-bit types keep every engine.
fn list(graph: &OpGraph, p: &ConvProblem) -> Candidates {
    let mut out = Candidates::default();
    let mut errors = Vec::new();
    let add = |config: EngineConfig, source: &str, out: &mut Candidates| -> Option<Config> {
        if p.dtype == DataType::F32 && !config.exact_fp32() {
            return None;
        }
        let text = config.tag.to_config().ok()?;
        match out.all.iter_mut().find(|c| c.config == text) {
            Some(known) => known.notes = format!("{source}, {}", known.notes),
            None => out.all.push(Candidate {
                config: text.clone(),
                workspace_bytes: config.workspace_bytes().ok(),
                compiles_at_run_time: config.compiles_at_run_time(),
                on_find_list: false,
                notes: format!("{source}; {}", config.describe_notes()),
            }),
        }
        Some(text)
    };
    for mode in [Mode::CUDNN_HEUR_MODE_A, Mode::CUDNN_HEUR_MODE_B, Mode::CUDNN_HEUR_MODE_FALLBACK] {
        let configs = match graph.heuristic(mode) {
            Ok(configs) => configs,
            Err(e) => {
                errors.push(format!("heuristic {mode:?}: {e}"));
                continue;
            }
        };
        let source = match mode {
            Mode::CUDNN_HEUR_MODE_A => "heuristic A",
            Mode::CUDNN_HEUR_MODE_B => "heuristic B",
            _ => "fallback",
        };
        for config in configs.into_iter().filter_map(|c| EngineConfig::from_heuristic(c).ok()) {
            if let Some(text) = add(config, source, &mut out) {
                if mode == Mode::CUDNN_HEUR_MODE_A && out.heuristic.is_none() {
                    out.heuristic = Some(text.clone());
                }
                if mode != Mode::CUDNN_HEUR_MODE_B && !out.find.contains(&text) {
                    out.find.push(text);
                }
            }
        }
    }
    match graph.engine_count() {
        Ok(count) => {
            for engine in 0..count {
                if let Ok(config) = EngineConfig::from_tag(graph, &Tag { engine, knobs: vec![] }) {
                    add(config, "engine with default knobs", &mut out);
                }
            }
        }
        Err(e) => errors.push(format!("engine count: {e}")),
    }
    for candidate in &mut out.all {
        candidate.on_find_list = out.find.contains(&candidate.config);
    }
    if out.all.is_empty() {
        out.none_because = Some(if errors.is_empty() { "no cuDNN engine supports this problem".into() } else { errors.join("; ") });
    }
    out
}
