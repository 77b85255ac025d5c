//! cuDNN through its graph (backend) API, as PyTorch uses it: per problem an operation graph,
//! engine configs from heuristic modes A, B and FALLBACK plus every engine with its default
//! knobs (deduplicated by tag), plans built before anything is timed and kept per stream.
//! A problem's listing (tens of ms, mostly cuDNN's heuristics; a quick one for the model's
//! pick, listing.rs) is kept in the process and in the on-disk build cache beside the kernels,
//! so a later process reads it instead.
//! `cuda.cudnn` (solvers/cudnn.rs) is the solver over these configs; `gconv bench` reads
//! cuDNN's own heuristic and find lists from here.

mod descriptor;
mod graph;
mod listing;

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Instant;

use cudarc::cudnn::sys::cudnnBackendHeurMode_t as Mode;
use cudarc::driver::CudaStream;
use gconv_core::{Config, ConvProblem, DataType, GconvError, Result};

use crate::device::CudaDevice;
use descriptor::Handle;
pub use graph::Plan;
use graph::{EngineConfig, OpGraph, Tag};
use listing::{ask_engines, list, read_listing, write_listing, Depth, LISTING_FORMAT};
pub use listing::{Candidate, Candidates, ListingTime};

/// What is known of a problem's engine configs, for every stream: configs are text.
#[derive(Default)]
struct Listed {
    candidates: Option<Arc<Candidates>>,
    /// Heuristic mode A's first usable config, asked alone (`None` until asked).
    heuristic: Option<Option<Config>>,
}

/// One stream's handle with the operation graphs and plans made with it. Fields drop in order:
/// the graphs and plans go before the handle.
struct State {
    graphs: HashMap<ConvProblem, Arc<OpGraph>>,
    /// By problem, then config: a run looks its plan up without copying either.
    plans: HashMap<ConvProblem, HashMap<Config, Arc<Plan>>>,
    handle: Handle,
}

/// A stream's state, while the stream lives.
struct StreamState {
    stream: Weak<CudaStream>,
    state: std::result::Result<State, String>,
}

/// The library on one device. Handles and plans are per stream: shared by two streams they
/// failed here (a plan run on one stream while another stream's run or graph capture of it was
/// in flight ended in CUDNN_STATUS_EXECUTION_FAILED or INTERNAL_ERROR and broke the capture),
/// even with every call taking turns; PyTorch keeps them per thread for the same reason.
/// Listings are shared.
pub struct Cudnn {
    device: Arc<CudaDevice>,
    listed: Mutex<HashMap<ConvProblem, Listed>>,
    /// Problems listed by asking cuDNN, and read from the disk cache.
    listings: [AtomicU32; 2],
    streams: Mutex<HashMap<usize, StreamState>>,
}

impl Cudnn {
    pub fn new(device: Arc<CudaDevice>) -> Arc<Self> {
        Arc::new(Cudnn { device, listed: Mutex::default(), listings: Default::default(), streams: Mutex::default() })
    }

    pub fn version(&self) -> Option<usize> {
        self.device.cudnn_version
    }

    /// `f` on `stream`'s state (made on first use), with the device's context current.
    fn with_state<R>(&self, stream: &Arc<CudaStream>, f: impl FnOnce(&mut State) -> Result<R>) -> Result<R> {
        // Separate handles in separate threads are not enough: with several runtimes of one
        // process calling cuDNN at once (the GPU tests' threads) it raised SIGFPE, and each
        // passed alone. So every call into cuDNN in the process takes turns.
        static CALLS: Mutex<()> = Mutex::new(());
        let _turn = CALLS.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let ctx = self.device.context()?;
        ctx.bind_to_thread().map_err(|e| crate::device::driver_error("bind the CUDA context", e))?;
        let mut streams = self.streams.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let key = stream.cu_stream() as usize;
        if streams.get(&key).is_none_or(|s| s.stream.strong_count() == 0) {
            // Streams gone (and a reused address's stale state) take their states with them.
            streams.retain(|_, s| s.stream.strong_count() > 0);
            let state = match self.version() {
                None => Err("cuDNN (libcudnn) not found".to_string()),
                Some(_) => Handle::new()
                    .map(|handle| State { graphs: HashMap::new(), plans: HashMap::new(), handle })
                    .map_err(|e| e.to_string()),
            };
            streams.insert(key, StreamState { stream: Arc::downgrade(stream), state });
        }
        match &mut streams.get_mut(&key).expect("inserted above").state {
            Ok(state) => f(state),
            Err(reason) => Err(GconvError::Backend(reason.clone())),
        }
    }

    /// `f` on this thread's stream's state.
    fn with_this_thread<R>(&self, f: impl FnOnce(&mut State) -> Result<R>) -> Result<R> {
        self.with_state(&self.device.stream()?, f)
    }

    /// Whether cuDNN accepts the problem's operation graph (without listing its engines).
    pub fn supports(&self, p: &ConvProblem) -> Result<()> {
        self.with_this_thread(|state| graph(state, p).map(|_| ()))
    }

    /// The problem's engine configs from every source, listed once per runtime, or read from
    /// the disk cache where a process with the same device key listed them.
    pub fn candidates(&self, p: &ConvProblem) -> Result<Arc<Candidates>> {
        self.listing(p, Depth::Full)
    }

    /// The problem's engine configs from heuristics A and FALLBACK at least (and cuDNN's own
    /// marks, the same as a full listing's), or its full listing where known.
    pub fn quick_candidates(&self, p: &ConvProblem) -> Result<Arc<Candidates>> {
        self.listing(p, Depth::Quick)
    }

    /// Of `wanted`, the configs cuDNN lists for the problem, in listing order: the quick
    /// listing's, and of `wanted`'s default-knob engines it does not name, those that support
    /// the problem, each asked of cuDNN once.
    pub fn configs_among(&self, p: &ConvProblem, wanted: &HashSet<Config>) -> Result<Vec<Config>> {
        let mut listed = self.quick_candidates(p)?;
        let engines = listed.engines_to_ask(wanted);
        if !engines.is_empty() {
            let mut grown = (*listed).clone();
            self.with_this_thread(|state| {
                ask_engines(&*graph(state, p)?, p, &mut grown, engines.into_iter());
                Ok(())
            })?;
            listed = self.store(p, grown.indexed());
        }
        Ok(listed.among(wanted))
    }

    /// Of `wanted`, the configs the quick listing names, in listing order, then the
    /// default-knob engines [`Self::configs_among`] would ask about, unconfirmed.
    pub fn configs_to_rank(&self, p: &ConvProblem, wanted: &HashSet<Config>) -> Result<Vec<Config>> {
        Ok(self.quick_candidates(p)?.to_rank(wanted))
    }

    /// The listing to `depth` or deeper: kept by the process, else cached on disk, else asked
    /// of cuDNN (and then cached).
    fn listing(&self, p: &ConvProblem, depth: Depth) -> Result<Arc<Candidates>> {
        if let Some(known) = self.known_or_cached(p).filter(|l| !l.quick || depth == Depth::Quick) {
            return Ok(known);
        }
        let listed = self.with_this_thread(|state| {
            let started = Instant::now();
            let graph = graph(state, p)?;
            let made = started.elapsed();
            let mut listed = list(&graph, p, depth);
            listed.spent.graph = made;
            Ok(listed.indexed())
        })?;
        self.listings[0].fetch_add(1, Ordering::Relaxed);
        Ok(self.store(p, listed))
    }

    /// Keeps a listing for the process and caches it on disk.
    fn store(&self, p: &ConvProblem, listed: Candidates) -> Arc<Candidates> {
        if let Some(path) = self.listing_path(p) {
            write_listing(&path, &listed);
        }
        self.keep(p, listed)
    }

    /// Problems listed by asking cuDNN, and read from the disk cache, since the library was made.
    pub fn listing_counts(&self) -> (u32, u32) {
        (self.listings[0].load(Ordering::Relaxed), self.listings[1].load(Ordering::Relaxed))
    }

    /// The candidates in this process, else those cached on disk (then kept in the process).
    fn known_or_cached(&self, p: &ConvProblem) -> Option<Arc<Candidates>> {
        self.known_candidates(p).or_else(|| {
            let listed = read_listing(&self.listing_path(p)?)?;
            self.listings[1].fetch_add(1, Ordering::Relaxed);
            Some(self.keep(p, listed))
        })
    }

    /// Keeps a listing for the process in place of a quick one; a full one kept stays (the
    /// first wins where two threads listed).
    fn keep(&self, p: &ConvProblem, listed: Candidates) -> Arc<Candidates> {
        let mut all = self.listed.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let kept = &mut all.entry(p.clone()).or_default().candidates;
        match kept {
            Some(known) if !known.quick => known.clone(),
            _ => kept.insert(Arc::new(listed)).clone(),
        }
    }

    /// Where the problem's listing is cached on disk: named by a hash of the device key (GPU,
    /// driver, cuDNN version) and the problem key.
    fn listing_path(&self, p: &ConvProblem) -> Option<PathBuf> {
        let mut h = blake3::Hasher::new();
        for part in [LISTING_FORMAT, &self.device.key(), &p.key()] {
            h.update(part.as_bytes()).update(&[0]);
        }
        Some(self.device.cache_dir()?.join(format!("{}.cudnn-list.json", h.finalize().to_hex())))
    }

    /// cuDNN's heuristic pick (mode A's first usable config) without listing every engine:
    /// what a guided find adds to a model's candidates, for a fraction of a listing's cost.
    pub fn heuristic_pick(&self, p: &ConvProblem) -> Result<Option<Config>> {
        if let Some(listed) = self.known_or_cached(p) {
            return Ok(listed.heuristic.clone());
        }
        let asked = self
            .listed
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .get(p)
            .and_then(|l| l.heuristic.clone());
        if let Some(pick) = asked {
            return Ok(pick);
        }
        let pick = self.with_this_thread(|state| {
            let configs = graph(state, p)?.heuristic(Mode::CUDNN_HEUR_MODE_A).unwrap_or_default();
            let usable = configs.into_iter().filter_map(|c| EngineConfig::from_heuristic(c).ok());
            Ok(usable.filter(|c| p.dtype != DataType::F32 || c.exact_fp32()).find_map(|c| c.tag.to_config().ok()))
        })?;
        self.listed.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).entry(p.clone()).or_default().heuristic =
            Some(pick.clone());
        Ok(pick)
    }

    /// The candidates when they are already listed, without asking cuDNN.
    pub fn known_candidates(&self, p: &ConvProblem) -> Option<Arc<Candidates>> {
        self.listed.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).get(p)?.candidates.clone()
    }

    /// The plan of a config on this thread's stream, built once.
    pub fn plan(&self, p: &ConvProblem, config: &Config) -> Result<Arc<Plan>> {
        self.with_this_thread(|state| plan(state, p, config))
    }

    /// Whether this thread's stream has the config's plan.
    pub fn is_planned(&self, p: &ConvProblem, config: &Config) -> bool {
        let Ok(stream) = self.device.stream() else { return false };
        let streams = self.streams.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let state = streams.get(&(stream.cu_stream() as usize)).and_then(|s| s.state.as_ref().ok());
        state.is_some_and(|s| s.plans.get(p).is_some_and(|plans| plans.contains_key(config)))
    }

    /// Runs the config's plan on the device buffers x, w, y and the workspace on `stream`, with
    /// the stream's own handle and plan (made on its first run there). On a caller's stream it
    /// uses this thread's, as PyTorch keeps its plans per thread: a framework moves one thread's
    /// work between streams (a graph is captured on a stream of its own), and the plans made
    /// before the capture must serve in it, where making a handle is not allowed.
    pub fn execute(
        &self,
        p: &ConvProblem,
        config: &Config,
        stream: &Arc<CudaStream>,
        [x, w, y, workspace]: [u64; 4],
    ) -> Result<()> {
        let owner = if self.device.is_borrowed(stream) { self.device.stream()? } else { stream.clone() };
        self.with_state(&owner, |state| {
            plan(state, p, config)?.execute(&state.handle, stream.cu_stream() as _, x, w, y, workspace)
        })
    }
}

fn graph(state: &mut State, p: &ConvProblem) -> Result<Arc<OpGraph>> {
    if let Some(graph) = state.graphs.get(p) {
        return Ok(graph.clone());
    }
    let graph = OpGraph::new(&state.handle, p)?;
    state.graphs.insert(p.clone(), graph.clone());
    Ok(graph)
}

fn plan(state: &mut State, p: &ConvProblem, config: &Config) -> Result<Arc<Plan>> {
    if let Some(plan) = state.plans.get(p).and_then(|plans| plans.get(config)) {
        return Ok(plan.clone());
    }
    let tag = Tag::from_config(config)?;
    let graph = graph(state, p)?;
    let engine_config = EngineConfig::from_tag(&graph, &tag)?;
    if p.dtype == DataType::F32 && !engine_config.exact_fp32() {
        return Err(GconvError::BadConfig {
            text: config.to_string(),
            reason: "the engine is not exact fp32 (tensor cores or down-converted inputs)".into(),
        });
    }
    let plan = Arc::new(Plan::new(&state.handle, &graph, engine_config)?);
    state.plans.entry(p.clone()).or_default().insert(config.clone(), plan.clone());
    Ok(plan)
}
