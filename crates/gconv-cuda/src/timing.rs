//! The one way gconv times GPU work: GPU time per call of back-to-back calls. A sample is a
//! CUDA-graph replay of R calls (R chosen so a replay lasts about a millisecond) between two
//! events, enqueued behind a spin kernel so the GPU never waits for the host launching it.
//! Where capture fails, the R calls themselves are queued behind a spin long enough to cover
//! their launch cost. A cold-cache sample first writes twice the L2's size (and takes one call
//! per sample, so every call sees a cold cache).

use std::sync::Arc;
use std::time::Instant;

use cudarc::driver::sys::CUevent_flags;
use cudarc::driver::{CudaEvent, CudaFunction, CudaSlice, CudaStream, LaunchConfig, PushKernelArg};
use gconv_core::runtime::calls_per_sample;
use gconv_core::{DataType, Result, Timer, TimingMethod, TimingOptions};

use crate::device::{driver_error, CudaDevice};
use crate::graph::{capture, Graph};
use crate::KernelSource;

const SPIN_SOURCE: &str = include_str!("kernels/spin.cu");
/// The spin before the calibration call: longer than any launch's host cost.
const CALIBRATION_SPIN_NS: u64 = 200_000;
/// Spins are at least this long: event records and a graph launch cost a few microseconds.
const MIN_SPIN_NS: u64 = 30_000;
const MAX_SPIN_NS: u64 = 100_000_000;
/// Captures tried before calls are queued instead.
const CAPTURE_TRIES: u32 = 2;
/// A sample whose enqueueing outlasted its spin (the GPU may have waited) is taken again,
/// behind a longer spin, this many times at most.
const RETRIES: u32 = 3;

/// What one sample enqueues: nothing yet right after calibration (a time-boxed candidate is
/// never captured), then a graph, or the calls themselves where capture fails. The graph keeps
/// the launch closure alive: a closure may own the buffers the captured calls read and write.
enum Payload<'a> {
    Calibrated(Box<dyn FnMut() -> Result<()> + 'a>),
    Graph(Graph, Box<dyn FnMut() -> Result<()> + 'a>),
    Queued(Box<dyn FnMut() -> Result<()> + 'a>),
}

pub struct GpuTimer<'a> {
    stream: Arc<CudaStream>,
    spin: CudaFunction,
    spin_ns: u64,
    start: CudaEvent,
    end: CudaEvent,
    flush: Option<CudaSlice<u8>>,
    payload: Payload<'a>,
    calls: u32,
    estimate: f64,
    /// Host nanoseconds the calibration call took to enqueue.
    launch_ns: u64,
}

impl<'a> GpuTimer<'a> {
    /// Calibrates a timer for `launch`, which enqueues one call on `stream`: the calibration
    /// call, behind a spin, is the one-call estimate and may be the first call.
    pub fn new(
        device: &CudaDevice,
        stream: Arc<CudaStream>,
        options: TimingOptions,
        mut launch: impl FnMut() -> Result<()> + 'a,
    ) -> Result<Self> {
        let ctx = device.context()?;
        let event =
            || ctx.new_event(Some(CUevent_flags::CU_EVENT_DEFAULT)).map_err(|e| driver_error("create an event", e));
        let spin = device.function(&KernelSource::new("spin.cu", SPIN_SOURCE, DataType::F32), "gconv_spin")?;
        let flush = match options.cold_cache {
            true => Some(
                stream
                    .alloc_zeros::<u8>(2 * device.l2_bytes as usize)
                    .map_err(|e| driver_error("allocate the L2 flush buffer", e))?,
            ),
            false => None,
        };
        let mut timer = GpuTimer {
            stream: stream.clone(),
            spin,
            spin_ns: CALIBRATION_SPIN_NS,
            start: event()?,
            end: event()?,
            flush,
            payload: Payload::Queued(Box::new(|| Ok(()))),
            calls: 1,
            estimate: 0.0,
            launch_ns: 0,
        };
        // A first call may cost the host more than the spin covers (lazy module loading, a
        // library's first-use set-up), and the GPU waits for it. A wait of up to a tenth of the
        // measured time is taken off, leaving a lower bound of the call (find's time box must
        // not stop a candidate by an inflated estimate); a longer one has the call timed again
        // behind a longer spin.
        for retry in 0..=RETRIES {
            let (measured, launch_ns) = timer.time(&mut launch)?;
            let wait = launch_ns.saturating_sub(timer.spin_ns) as f64 * 1e-9;
            (timer.estimate, timer.launch_ns) = (measured, launch_ns);
            if wait <= 0.1 * measured {
                timer.estimate = measured - wait;
                break;
            }
            if retry < RETRIES {
                timer.spin_ns = (2 * launch_ns).clamp(MIN_SPIN_NS, MAX_SPIN_NS);
            }
        }
        timer.calls = if options.cold_cache { 1 } else { calls_per_sample(timer.estimate) };
        timer.payload = Payload::Calibrated(Box::new(launch));
        Ok(timer)
    }

    /// Captures the calls of a sample into a graph, or queues them where capture fails. A
    /// capture is tried again before giving up: another thread of the process may have made a
    /// call that invalidated it (seen once in many runs beside runtimes made and dropped).
    fn capture(&mut self) {
        let payload = std::mem::replace(&mut self.payload, Payload::Queued(Box::new(|| Ok(()))));
        self.payload = match payload {
            Payload::Calibrated(mut launch) => {
                let mut captured = || {
                    let graph = capture(&self.stream, self.calls, &mut launch)?;
                    graph.upload(&self.stream).map(|()| graph)
                };
                match (0..CAPTURE_TRIES).find_map(|_| captured().ok()) {
                    Some(graph) => Payload::Graph(graph, launch),
                    None => Payload::Queued(launch),
                }
            }
            ready => ready,
        };
        // The spin must outlast the host's enqueueing of one sample: a graph launch costs a few
        // microseconds, queued calls their launch cost each.
        self.spin_ns = match self.payload {
            Payload::Queued(_) => (2 * self.launch_ns * u64::from(self.calls)).clamp(MIN_SPIN_NS, MAX_SPIN_NS),
            _ => MIN_SPIN_NS,
        };
    }

    /// GPU seconds of what `enqueue` puts on the stream behind the spin, and the host
    /// nanoseconds the enqueueing took.
    fn time(&mut self, enqueue: impl FnOnce() -> Result<()>) -> Result<(f64, u64)> {
        if let Some(flush) = &mut self.flush {
            self.stream.memset_zeros(flush).map_err(|e| driver_error("flush the L2", e))?;
        }
        let mut spin = self.stream.launch_builder(&self.spin);
        spin.arg(&self.spin_ns);
        // SAFETY: gconv_spin takes one u64 and touches no memory.
        unsafe { spin.launch(LaunchConfig { grid_dim: (1, 1, 1), block_dim: (1, 1, 1), shared_mem_bytes: 0 }) }
            .map_err(|e| driver_error("launch the spin kernel", e))?;
        self.start.record(&self.stream).map_err(|e| driver_error("record an event", e))?;
        let host = Instant::now();
        enqueue()?;
        let enqueue_ns = host.elapsed().as_nanos() as u64;
        self.end.record(&self.stream).map_err(|e| driver_error("record an event", e))?;
        self.end.synchronize().map_err(|e| driver_error("run on the GPU", e))?;
        let ms = self.start.elapsed_ms(&self.end).map_err(|e| driver_error("read an event", e))?;
        Ok((f64::from(ms) * 1e-3, enqueue_ns))
    }

    /// One sample of the payload, taken again behind a longer spin while its enqueueing
    /// outlasts the spin.
    fn time_payload(&mut self) -> Result<f64> {
        for _ in 0..RETRIES {
            let (seconds, enqueue_ns) = self.enqueue_payload()?;
            if enqueue_ns < self.spin_ns {
                return Ok(seconds);
            }
            self.spin_ns = (2 * enqueue_ns).clamp(MIN_SPIN_NS, MAX_SPIN_NS);
        }
        Ok(self.enqueue_payload()?.0)
    }

    fn enqueue_payload(&mut self) -> Result<(f64, u64)> {
        let calls = self.calls;
        let payload = std::mem::replace(&mut self.payload, Payload::Queued(Box::new(|| Ok(()))));
        let (payload, seconds) = match payload {
            Payload::Graph(graph, launch) => {
                let stream = self.stream.clone();
                let t = self.time(|| graph.launch(&stream));
                (Payload::Graph(graph, launch), t)
            }
            Payload::Queued(mut launch) => {
                let t = self.time(|| (0..calls).try_for_each(|_| launch()));
                (Payload::Queued(launch), t)
            }
            calibrated @ Payload::Calibrated(_) => {
                (calibrated, Err(gconv_core::GconvError::Backend("a sample before capture".into())))
            }
        };
        self.payload = payload;
        seconds
    }
}

impl Timer for GpuTimer<'_> {
    fn estimate(&self) -> f64 {
        self.estimate
    }

    fn sample(&mut self) -> Result<f64> {
        if let Payload::Calibrated(_) = self.payload {
            self.capture();
        }
        Ok(self.time_payload()? / f64::from(self.calls))
    }

    fn calls(&self) -> u32 {
        self.calls
    }

    fn method(&self) -> TimingMethod {
        match self.payload {
            Payload::Graph(..) => TimingMethod::GraphReplay,
            Payload::Queued(_) | Payload::Calibrated(_) => TimingMethod::SpinQueued,
        }
    }
}
