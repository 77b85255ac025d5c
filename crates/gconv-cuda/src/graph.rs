//! CUDA graphs of gconv's own launches: captured on a stream and instantiated, then launched
//! on any stream of the context. The timer replays R calls of a candidate (uploaded ahead on
//! its stream); the runtime replays a caller's repeated run (`replay.rs`).

use cudarc::driver::result::{graph as graph_api, stream as stream_api};
use cudarc::driver::sys::{self as cu, CUgraphInstantiate_flags, CUstreamCaptureMode};
use cudarc::driver::CudaStream;
use gconv_core::Result;

use crate::device::driver_error;

/// `calls` calls captured into a graph and instantiated; an error where the calls cannot be
/// captured (the stream is out of capture mode again either way).
pub(crate) fn capture(stream: &CudaStream, calls: u32, launch: &mut impl FnMut() -> Result<()>) -> Result<Graph> {
    let raw = stream.cu_stream();
    // SAFETY: a live stream of the current context (the timer's calibration call, or the
    // replayed run's earlier sightings, ran on this thread). Only this thread's unsafe calls
    // are checked against the capture, so other threads of the process (another runtime, a
    // framework) go on.
    unsafe { stream_api::begin_capture(raw, CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL) }
        .map_err(|e| driver_error("begin a graph capture", e))?;
    let enqueued = (0..calls).try_for_each(|_| launch());
    // Ended here, whatever happened: cudarc's own end_capture first returns any error a drop
    // recorded on the context, before ending the capture, which left the stream capturing and
    // every later call on it captured and never run.
    // SAFETY: the stream began a capture above.
    let ended = unsafe { stream_api::end_capture(raw) };
    enqueued?;
    let graph = ended.map_err(|e| driver_error("capture a graph", e))?;
    if graph.is_null() {
        return Err(gconv_core::GconvError::Backend("the captured graph is empty".into()));
    }
    // SAFETY: a graph captured above, instantiated once; on failure destroyed here.
    let exec = match unsafe { graph_api::instantiate(graph, CUgraphInstantiate_flags(0)) } {
        Ok(exec) => exec,
        Err(e) => {
            // SAFETY: the graph is not used again.
            let _ = unsafe { graph_api::destroy(graph) };
            return Err(driver_error("instantiate a graph", e));
        }
    };
    Ok(Graph { graph, exec })
}

/// A captured and instantiated graph, destroyed on drop.
pub(crate) struct Graph {
    graph: cu::CUgraph,
    exec: cu::CUgraphExec,
}

// SAFETY: the driver's graph handles belong to the context, not to a thread; whoever shares a
// graph between threads serializes its launches (the replay table's lock).
unsafe impl Send for Graph {}

impl Graph {
    /// Sets up the graph's device resources ahead of its first launch on `stream`, which
    /// would otherwise pay for it.
    pub(crate) fn upload(&self, stream: &CudaStream) -> Result<()> {
        // SAFETY: a live instantiated graph and stream of the same context.
        unsafe { graph_api::upload(self.exec, stream.cu_stream()) }.map_err(|e| driver_error("upload a graph", e))
    }

    pub(crate) fn launch(&self, stream: &CudaStream) -> Result<()> {
        // SAFETY: a live instantiated graph and stream of the same context; whoever holds the
        // graph keeps the buffers its calls use live while it launches it (the timer's launch
        // closure outlives the graph; a replayed run's caller promises what `run_on` asks).
        unsafe { graph_api::launch(self.exec, stream.cu_stream()) }.map_err(|e| driver_error("launch a graph", e))
    }
}

impl Drop for Graph {
    fn drop(&mut self) {
        // SAFETY: made by `capture`, destroyed once; a graph may be destroyed while a launch of
        // it is pending (the driver releases it when the launch completes).
        unsafe {
            let _ = graph_api::exec_destroy(self.exec);
            let _ = graph_api::destroy(self.graph);
        }
    }
}
