//! `gconv._native`: the engine under the `gconv` Python package. The package (python/gconv)
//! turns torch tensors into problem keys and addresses; this module selects a solution per
//! problem (from the databases, the learned model or a find) and runs it on those addresses,
//! on the caller's stream, without allocating, copying or waiting.

use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};

use gconv_core::{CallerBuffers, ConvProblem, GconvError, Runtime, Solution};
use gconv_heuristic::model::models_for;
use gconv_heuristic::rank::ModelHeuristic;
use gconv_tune::db::{default_cache_dir, default_user_path, Db};
use gconv_tune::find::{FindOptions, TestBed};
use gconv_tune::heuristic::Heuristic;
use gconv_tune::select::{select, stored, FindMode, Selection, Source};
use gconv_tune::TuneError;
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;

pyo3::create_exception!(_native, Error, PyRuntimeError, "A convolution gconv could not select or run.");
pyo3::create_exception!(
    _native,
    DeviceLost,
    Error,
    "A kernel faulted: the GPU's context is unusable for the rest of the process."
);

fn error(e: impl std::fmt::Display) -> PyErr {
    Error::new_err(e.to_string())
}

fn core_error(e: GconvError) -> PyErr {
    match e {
        GconvError::DeviceLost(_) => DeviceLost::new_err(e.to_string()),
        other => error(other),
    }
}

fn tune_error(e: TuneError) -> PyErr {
    match e {
        TuneError::Gconv(e) => core_error(e),
        other => error(other),
    }
}

/// The token of where a selection came from, as the package reports it.
fn source_token(source: Source) -> &'static str {
    match source {
        Source::FindDb => "find-db",
        Source::Find => "find",
        Source::Model => "model",
        Source::Rule => "rule",
        Source::Forced => "forced",
    }
}

struct Inner {
    rt: Box<dyn Runtime>,
    db: Mutex<Db>,
    /// Read on the first selection that needs it (reading the built-in models takes ~30 ms).
    model: OnceLock<Option<ModelHeuristic>>,
    /// Things the user should hear once (a database set aside, records skipped).
    notes: Mutex<Vec<String>>,
}

impl Inner {
    fn model(&self) -> Option<&dyn Heuristic> {
        let model = self.model.get_or_init(|| match models_for(self.rt.as_ref(), None) {
            Ok(set) => set.map(ModelHeuristic::new),
            Err(e) => {
                self.note(format!("the learned model could not be read ({e}); selecting by the rule"));
                None
            }
        });
        model.as_ref().map(|m| m as &dyn Heuristic)
    }

    fn note(&self, text: String) {
        self.notes.lock().unwrap_or_else(|p| p.into_inner()).push(text);
    }
}

/// One backend on one device, with the user database and the learned model.
#[pyclass(frozen, module = "gconv._native")]
struct Engine {
    inner: Arc<Inner>,
}

impl Engine {
    fn plan_of(&self, selection: Selection) -> Plan {
        for warning in &selection.warnings {
            self.inner.note(warning.to_string());
        }
        Plan { solution: selection.solution, source: source_token(selection.source), inner: self.inner.clone() }
    }
}

#[pymethods]
impl Engine {
    /// `backend` is `cuda` (GPU `device`, as torch numbers them) or `cpu`; `db` the user
    /// database's path (gconv's default when omitted, the one the CLI uses).
    #[new]
    #[pyo3(signature = (backend, device = 0, db = None))]
    fn new(backend: &str, device: usize, db: Option<PathBuf>) -> PyResult<Self> {
        let rt: Box<dyn Runtime> = match backend {
            "cuda" => Box::new(
                gconv_cuda::CudaRuntime::probe_ordinal(device, Some(default_cache_dir().join("kernels")))
                    .map_err(error)?,
            ),
            "cpu" => Box::new(gconv_cpu::CpuRuntime::detect()),
            other => return Err(PyValueError::new_err(format!("unknown backend `{other}` (expected cuda or cpu)"))),
        };
        let path = db.unwrap_or_else(default_user_path);
        let (db, warning) = Db::open(&path).map_err(error)?;
        let notes = warning.map(|w| w.to_string()).into_iter().collect();
        let inner = Inner { rt, db: Mutex::new(db), model: OnceLock::new(), notes: Mutex::new(notes) };
        Ok(Engine { inner: Arc::new(inner) })
    }

    /// Whether a run seen before on the same addresses may be launched from a CUDA graph
    /// captured of it (on by default on a GPU; nothing on the CPU).
    fn set_launch_replay(&self, enabled: bool) {
        self.inner.rt.set_launch_replay(enabled);
    }

    /// What the launch replay did so far: `(captured, replayed, refused)` runs.
    fn launch_replays(&self) -> (u64, u64, u64) {
        let counts = self.inner.rt.launch_replays();
        (counts.captured, counts.replayed, counts.refused)
    }

    /// The device in one line.
    fn describe(&self) -> String {
        self.inner.rt.describe()
    }

    #[getter]
    fn device_key(&self) -> String {
        self.inner.rt.device_key().to_string()
    }

    #[getter]
    fn db_path(&self) -> String {
        self.inner.db.lock().unwrap_or_else(|p| p.into_inner()).path().display().to_string()
    }

    /// Selects and builds the solution for the problem `key` (gconv's problem key): `find`
    /// takes the find-db's answer, else benchmarks the candidates now and stores the ranking;
    /// `fast` takes the find-db's answer, else the learned model's pick, and never benchmarks.
    fn plan(&self, py: Python<'_>, key: &str, mode: &str) -> PyResult<Plan> {
        let p = ConvProblem::from_key(key).map_err(|e| PyValueError::new_err(e.to_string()))?;
        let mode = match mode {
            "find" => FindMode::Hybrid,
            "fast" => FindMode::Fast,
            other => return Err(PyValueError::new_err(format!("unknown mode `{other}` (expected find or fast)"))),
        };
        let inner = &self.inner;
        // A find takes seconds: other Python threads run meanwhile.
        let selection = py
            .detach(|| {
                let mut db = inner.db.lock().unwrap_or_else(|p| p.into_inner());
                let mut bed = TestBed::new(inner.rt.as_ref(), &p);
                select(inner.rt.as_ref(), &mut db, &mut bed, &p, mode, &FindOptions::default(), inner.model())
            })
            .map_err(tune_error)?;
        Ok(self.plan_of(selection))
    }

    /// The find-db's choice for the problem `key`, built, or None when it holds none.
    fn stored(&self, key: &str) -> PyResult<Option<Plan>> {
        let p = ConvProblem::from_key(key).map_err(|e| PyValueError::new_err(e.to_string()))?;
        let db = self.inner.db.lock().unwrap_or_else(|p| p.into_inner());
        let found = stored(self.inner.rt.as_ref(), &db, &p).map_err(tune_error)?;
        drop(db);
        Ok(found.map(|s| self.plan_of(s)))
    }

    /// Notes gathered since the last call, for the package to pass on as warnings.
    fn take_notes(&self) -> Vec<String> {
        std::mem::take(&mut *self.inner.notes.lock().unwrap_or_else(|p| p.into_inner()))
    }
}

/// A selected, built solution for one problem, ready to run on the caller's memory.
#[pyclass(frozen, module = "gconv._native")]
struct Plan {
    solution: Solution,
    source: &'static str,
    inner: Arc<Inner>,
}

#[pymethods]
impl Plan {
    #[getter]
    fn solver(&self) -> &'static str {
        self.solution.solver_id
    }

    #[getter]
    fn config(&self) -> String {
        self.solution.config.to_string()
    }

    /// Where the choice came from: `find-db`, `find`, `model` or `rule`.
    #[getter]
    fn source(&self) -> &'static str {
        self.source
    }

    #[getter]
    fn key(&self) -> String {
        self.solution.problem.key()
    }

    /// Bytes of workspace [`Plan::run`] must be given.
    #[getter]
    fn workspace_bytes(&self) -> u64 {
        self.solution.workspace_bytes
    }

    /// Enqueues the solution on `stream` (a `CUstream` handle; 0 on the CPU) over the tensors
    /// at addresses x, w, y and the workspace. The package passes the addresses of live,
    /// packed tensors of the plan's problem on the engine's device: that is what makes this
    /// call sound, and why this module is private.
    fn run(&self, x: u64, w: u64, y: u64, workspace: u64, workspace_bytes: u64, stream: u64) -> PyResult<()> {
        let buffers = CallerBuffers { x, w, y, workspace, workspace_bytes, stream };
        // SAFETY: as the package promises above; the sizes are checked against the problem.
        unsafe { self.inner.rt.run_on(&self.solution, &buffers) }.map_err(core_error)
    }
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Engine>()?;
    m.add_class::<Plan>()?;
    m.add("Error", m.py().get_type::<Error>())?;
    m.add("DeviceLost", m.py().get_type::<DeviceLost>())?;
    Ok(())
}
