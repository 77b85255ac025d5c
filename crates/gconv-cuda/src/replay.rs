//! Replays of a caller's repeated runs. In an eager training step each convolution is one run
//! on the caller's memory (`Runtime::run_on`), and what it costs the host (cuDNN's execute,
//! cuBLAS's calls, a kernel launch, each cold in the caches between the step's other work) is
//! what a host-bound step waits on: 12 to 37 us a launch on an H200 where a graph launch costs
//! a few. A run made again on the same addresses is the same work (the same kernels with the
//! same parameters), so on its third sighting it is captured into a graph on gconv's own
//! stream, and from then on that graph is launched on the caller's stream in its place: the
//! third, so that the first training step after `gconv.tune`'s pass pays no captures, nor
//! addresses that meet twice by chance. Runs on a stream that is itself being captured (a
//! framework's CUDA graph) are launched as they are.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;

use cudarc::driver::result::stream as stream_api;
use cudarc::driver::sys::CUstreamCaptureStatus;
use cudarc::driver::CudaStream;
use gconv_core::{Config, ConvProblem, Invoker, ReplayCounts, Result, Solution};

use crate::device::CudaDevice;
use crate::graph::{capture, Graph};
use crate::{Cuda, CudaBuffers};

/// Sites kept at most: past it, those without a graph are forgotten (a caller whose addresses
/// never repeat would otherwise grow the table without end), then all.
const MAX_SITES: usize = 4096;
/// The sighting of a site that captures it.
const CAPTURED_AT: u32 = 3;

pub(crate) struct Replays {
    enabled: AtomicBool,
    sites: Mutex<HashMap<Site, Seen>>,
    captured: AtomicU64,
    replayed: AtomicU64,
    refused: AtomicU64,
}

/// One run: a solution's invoker (by address) on the caller's buffers and workspace size.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
struct Site {
    invoker: usize,
    buffers: [u64; 5],
}

struct Seen {
    /// What ran at the site: a solution dropped and another built at the same address must not
    /// launch this one's graph.
    solver_id: &'static str,
    config: Config,
    problem: ConvProblem,
    replay: Replay,
}

enum Replay {
    /// Run this many times, as it is.
    Seen(u32),
    Graph(Graph),
    /// Not capturable (a vendor call refused the capture): always run as it is.
    Never,
}

impl Seen {
    fn ran(&self, s: &Solution) -> bool {
        self.solver_id == s.solver_id && self.config == s.config && self.problem == s.problem
    }
}

impl Replays {
    pub(crate) fn new() -> Self {
        Replays {
            enabled: AtomicBool::new(true),
            sites: Mutex::default(),
            captured: AtomicU64::new(0),
            replayed: AtomicU64::new(0),
            refused: AtomicU64::new(0),
        }
    }

    pub(crate) fn counts(&self) -> ReplayCounts {
        ReplayCounts {
            captured: self.captured.load(Ordering::Relaxed),
            replayed: self.replayed.load(Ordering::Relaxed),
            refused: self.refused.load(Ordering::Relaxed),
        }
    }

    pub(crate) fn set_enabled(&self, enabled: bool) {
        self.enabled.store(enabled, Ordering::Relaxed);
        if !enabled {
            self.sites.lock().unwrap_or_else(|p| p.into_inner()).clear();
        }
    }

    /// Runs `s` (whose invoker is `invoker`) on the caller's buffers: by its graph where the
    /// site has one, captured now where this is its third sighting, else as it is.
    pub(crate) fn run(
        &self,
        device: &CudaDevice,
        s: &Solution,
        invoker: &dyn Invoker<Cuda>,
        b: &mut CudaBuffers<'_>,
    ) -> Result<()> {
        if !self.enabled.load(Ordering::Relaxed) || capturing(b.stream()) {
            return invoker.run(b);
        }
        let site = Site {
            invoker: invoker as *const dyn Invoker<Cuda> as *const () as usize,
            buffers: [b.x.ptr, b.w.ptr, b.y.ptr, b.workspace.ptr, b.workspace.bytes],
        };
        let mut sites = self.sites.lock().unwrap_or_else(|p| p.into_inner());
        let seen = match sites.get_mut(&site) {
            Some(seen) if seen.ran(s) => seen,
            _ => {
                if sites.len() >= MAX_SITES {
                    sites.retain(|_, seen| matches!(seen.replay, Replay::Graph(_)));
                    if sites.len() >= MAX_SITES {
                        sites.clear();
                    }
                }
                let first = Seen {
                    solver_id: s.solver_id,
                    config: s.config.clone(),
                    problem: s.problem.clone(),
                    replay: Replay::Seen(1),
                };
                sites.insert(site, first);
                drop(sites);
                return invoker.run(b);
            }
        };
        if let Replay::Seen(times) = seen.replay {
            if times + 1 < CAPTURED_AT {
                seen.replay = Replay::Seen(times + 1);
                drop(sites);
                return invoker.run(b);
            }
            seen.replay = match captured(device, s, invoker, b) {
                Ok(graph) => {
                    self.captured.fetch_add(1, Ordering::Relaxed);
                    Replay::Graph(graph)
                }
                Err(_) => {
                    self.refused.fetch_add(1, Ordering::Relaxed);
                    Replay::Never
                }
            };
        }
        match &seen.replay {
            // Under the lock: a graph must not be launched from two threads at once.
            Replay::Graph(graph) => {
                self.replayed.fetch_add(1, Ordering::Relaxed);
                graph.launch(b.stream())
            }
            Replay::Seen(_) | Replay::Never => {
                drop(sites);
                invoker.run(b)
            }
        }
    }
}

/// Whether work enqueued on `stream` now goes into a capture (or the driver cannot say).
fn capturing(stream: &CudaStream) -> bool {
    // SAFETY: a live stream of the device's context (the caller's promise to `run_on`).
    !matches!(
        unsafe { stream_api::is_capturing(stream.cu_stream()) },
        Ok(CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE)
    )
}

/// The run captured on this thread's own stream (no caller's work is on it, so the capture
/// takes only the run's), for launching on the caller's.
fn captured(device: &CudaDevice, s: &Solution, invoker: &dyn Invoker<Cuda>, b: &CudaBuffers<'_>) -> Result<Graph> {
    let own = device.stream()?;
    let mut on_own = CudaBuffers::covering(&s.problem, s.workspace_bytes, [b.x, b.w, b.y, b.workspace], &own)?;
    capture(&own, 1, &mut || invoker.run(&mut on_own))
}
