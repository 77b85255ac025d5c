//! cuDNN, the yardstick: the same problem on the same buffers, through cuDNN's heuristic pick
//! and its find pick, timed exactly like gconv's solutions.

use std::ffi::c_void;

use cudarc::cudnn::{result as dnn, sys};
use gconv_core::{ConvProblem, DataType, Direction, GconvError, Geometry, Layout, Result};

use crate::device::CudaDevice;
use crate::tensors::DeviceTensors;

/// A cuDNN algorithm for one direction.
#[derive(Debug, Clone, Copy)]
enum AlgoId {
    Fwd(sys::cudnnConvolutionFwdAlgo_t),
    Data(sys::cudnnConvolutionBwdDataAlgo_t),
    Filter(sys::cudnnConvolutionBwdFilterAlgo_t),
}

#[derive(Debug, Clone, Copy)]
pub struct Algo {
    id: AlgoId,
    pub workspace_bytes: u64,
}

impl Algo {
    /// cuDNN's enum name, e.g. `CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM`.
    pub fn name(&self) -> String {
        match self.id {
            AlgoId::Fwd(a) => format!("{a:?}"),
            AlgoId::Data(a) => format!("{a:?}"),
            AlgoId::Filter(a) => format!("{a:?}"),
        }
    }
}

fn err(what: &str, e: impl std::fmt::Debug) -> GconvError {
    GconvError::Backend(format!("cuDNN {what}: {e:?}"))
}

/// How many algorithms to ask cuDNN about: more than it has for any direction.
const ALGO_SLOTS: usize = 16;

pub struct CudnnPeer<'d> {
    device: &'d CudaDevice,
    direction: Direction,
    handle: sys::cudnnHandle_t,
    x: sys::cudnnTensorDescriptor_t,
    y: sys::cudnnTensorDescriptor_t,
    w: sys::cudnnFilterDescriptor_t,
    conv: sys::cudnnConvolutionDescriptor_t,
}

impl<'d> CudnnPeer<'d> {
    /// Whether libcudnn can be loaded at all.
    pub fn available() -> bool {
        // SAFETY: only tries to open the library.
        unsafe { sys::is_culib_present() }
    }

    /// Describes the problem to cuDNN. fp32 uses FMA math (no TF32), tf32 may use TF32 tensor
    /// cores; 16-bit types use tensor cores; all accumulate in fp32.
    pub fn new(device: &'d CudaDevice, p: &ConvProblem) -> Result<Self> {
        if !Self::available() {
            return Err(GconvError::Backend("cuDNN (libcudnn) not found".into()));
        }
        let stream = device.stream()?;
        let handle = dnn::create_handle().map_err(|e| err("create a handle", e))?;
        let mut peer = CudnnPeer {
            device,
            direction: p.direction,
            handle,
            x: std::ptr::null_mut(),
            y: std::ptr::null_mut(),
            w: std::ptr::null_mut(),
            conv: std::ptr::null_mut(),
        };
        // SAFETY: the handle is live; descriptors are created before they are set, and the
        // arrays passed outlive each call.
        unsafe {
            dnn::set_stream(handle, stream.cu_stream() as _).map_err(|e| err("set the stream", e))?;
            peer.x = dnn::create_tensor_descriptor().map_err(|e| err("create a descriptor", e))?;
            peer.y = dnn::create_tensor_descriptor().map_err(|e| err("create a descriptor", e))?;
            peer.w = dnn::create_filter_descriptor().map_err(|e| err("create a descriptor", e))?;
            peer.conv = dnn::create_convolution_descriptor().map_err(|e| err("create a descriptor", e))?;
            let g = Geometry::new(p);
            // cuDNN wants at least 4 dimensions: ranks 1 and 2 are 2D with leading ones.
            let spatial = if p.rank() == 3 { 0..3 } else { 1..3 };
            let data_type = match p.dtype {
                DataType::F32 | DataType::Tf32 => sys::cudnnDataType_t::CUDNN_DATA_FLOAT,
                DataType::F16 => sys::cudnnDataType_t::CUDNN_DATA_HALF,
                DataType::Bf16 => sys::cudnnDataType_t::CUDNN_DATA_BFLOAT16,
            };
            let dims = |outer: usize, ch: usize, sizes: [usize; 3]| -> Vec<i32> {
                [outer, ch].into_iter().chain(spatial.clone().map(|i| sizes[i])).map(|v| v as i32).collect()
            };
            let strides = |s: &gconv_core::geometry::Strides| -> Vec<i32> {
                [s.outer, s.c].into_iter().chain(spatial.clone().map(|i| s.spatial[i])).map(|v| v as i32).collect()
            };
            let (xd, yd) = (dims(g.n, g.c(), g.input), dims(g.n, g.k(), g.output));
            dnn::set_tensornd_descriptor(peer.x, data_type, xd.len() as i32, xd.as_ptr(), strides(&g.x).as_ptr())
                .map_err(|e| err("describe x", e))?;
            dnn::set_tensornd_descriptor(peer.y, data_type, yd.len() as i32, yd.as_ptr(), strides(&g.y).as_ptr())
                .map_err(|e| err("describe y", e))?;
            let format = match p.layout {
                Layout::Nchw => sys::cudnnTensorFormat_t::CUDNN_TENSOR_NCHW,
                Layout::Nhwc => sys::cudnnTensorFormat_t::CUDNN_TENSOR_NHWC,
            };
            let wd = dims(g.k(), g.cg, g.filter);
            dnn::set_filternd_descriptor(peer.w, data_type, format, wd.len() as i32, wd.as_ptr())
                .map_err(|e| err("describe w", e))?;
            let pick = |v: [usize; 3]| -> Vec<i32> { spatial.clone().map(|i| v[i] as i32).collect() };
            let (pads, strides_, dilations) = (pick(g.pad), pick(g.stride), pick(g.dilation));
            dnn::set_convolutionnd_descriptor(
                peer.conv,
                pads.len() as i32,
                pads.as_ptr(),
                strides_.as_ptr(),
                dilations.as_ptr(),
                sys::cudnnConvolutionMode_t::CUDNN_CROSS_CORRELATION,
                sys::cudnnDataType_t::CUDNN_DATA_FLOAT,
            )
            .map_err(|e| err("describe the convolution", e))?;
            dnn::set_convolution_group_count(peer.conv, p.g as i32).map_err(|e| err("set the groups", e))?;
            // Exact fp32 stays off tensor cores; TF32 problems allow them (TF32, never a
            // conversion to 16 bits).
            let math = match p.dtype {
                DataType::F32 => sys::cudnnMathType_t::CUDNN_FMA_MATH,
                _ => sys::cudnnMathType_t::CUDNN_TENSOR_OP_MATH,
            };
            dnn::set_convolution_math_type(peer.conv, math).map_err(|e| err("set the math type", e))?;
        }
        Ok(peer)
    }

    /// cuDNN's heuristic pick: its first recommendation that it says it supports.
    pub fn heuristic(&self) -> Result<Algo> {
        let mut returned = 0;
        // SAFETY: descriptors are live; the result arrays hold ALGO_SLOTS entries.
        unsafe {
            match self.direction {
                Direction::Forward => {
                    let mut perf = [std::mem::zeroed::<sys::cudnnConvolutionFwdAlgoPerf_t>(); ALGO_SLOTS];
                    dnn::get_convolution_forward_algorithm(self.handle, self.x, self.w, self.conv, self.y, ALGO_SLOTS as i32, &mut returned, perf.as_mut_ptr())
                        .map_err(|e| err("heuristic", e))?;
                    let best = perf[..returned as usize].iter().find(|r| r.status == sys::cudnnStatus_t::CUDNN_STATUS_SUCCESS);
                    best.map(|r| Algo { id: AlgoId::Fwd(r.algo), workspace_bytes: r.memory as u64 })
                }
                Direction::BackwardData => {
                    let mut perf = [std::mem::zeroed::<sys::cudnnConvolutionBwdDataAlgoPerf_t>(); ALGO_SLOTS];
                    dnn::get_convolution_backward_data_algorithm(self.handle, self.w, self.y, self.conv, self.x, ALGO_SLOTS as i32, &mut returned, perf.as_mut_ptr())
                        .map_err(|e| err("heuristic", e))?;
                    let best = perf[..returned as usize].iter().find(|r| r.status == sys::cudnnStatus_t::CUDNN_STATUS_SUCCESS);
                    best.map(|r| Algo { id: AlgoId::Data(r.algo), workspace_bytes: r.memory as u64 })
                }
                Direction::BackwardWeight => {
                    let mut perf = [std::mem::zeroed::<sys::cudnnConvolutionBwdFilterAlgoPerf_t>(); ALGO_SLOTS];
                    dnn::get_convolution_backward_filter_algorithm(self.handle, self.x, self.y, self.conv, self.w, ALGO_SLOTS as i32, &mut returned, perf.as_mut_ptr())
                        .map_err(|e| err("heuristic", e))?;
                    let best = perf[..returned as usize].iter().find(|r| r.status == sys::cudnnStatus_t::CUDNN_STATUS_SUCCESS);
                    best.map(|r| Algo { id: AlgoId::Filter(r.algo), workspace_bytes: r.memory as u64 })
                }
            }
        }
        .ok_or_else(|| err("heuristic", "no supported algorithm"))
    }

    /// cuDNN's find: it runs its algorithms on these buffers (with up to `workspace_limit`
    /// bytes of workspace) and the fastest successful one is returned.
    pub fn find(&self, t: &mut DeviceTensors, workspace_limit: u64) -> Result<Algo> {
        t.reserve_workspace(self.device, workspace_limit)?;
        let b = t.buffers(self.device)?;
        let (x, w, y, ws) = (b.x as *mut c_void, b.w as *mut c_void, b.y as *mut c_void, b.workspace as *mut c_void);
        let mut returned = 0;
        let ws_bytes = workspace_limit as usize;
        // SAFETY: descriptors are live, the buffers are sized for the problem, the workspace
        // holds `workspace_limit` bytes, and the result arrays ALGO_SLOTS entries.
        let best = unsafe {
            match self.direction {
                Direction::Forward => {
                    let mut perf = [std::mem::zeroed::<sys::cudnnConvolutionFwdAlgoPerf_t>(); ALGO_SLOTS];
                    sys::cudnnFindConvolutionForwardAlgorithmEx(self.handle, self.x, x, self.w, w, self.conv, self.y, y, ALGO_SLOTS as i32, &mut returned, perf.as_mut_ptr(), ws, ws_bytes)
                        .result()
                        .map_err(|e| err("find", e))?;
                    let best = perf[..returned as usize].iter().find(|r| r.status == sys::cudnnStatus_t::CUDNN_STATUS_SUCCESS);
                    best.map(|r| Algo { id: AlgoId::Fwd(r.algo), workspace_bytes: r.memory as u64 })
                }
                Direction::BackwardData => {
                    let mut perf = [std::mem::zeroed::<sys::cudnnConvolutionBwdDataAlgoPerf_t>(); ALGO_SLOTS];
                    sys::cudnnFindConvolutionBackwardDataAlgorithmEx(self.handle, self.w, w, self.y, y, self.conv, self.x, x, ALGO_SLOTS as i32, &mut returned, perf.as_mut_ptr(), ws, ws_bytes)
                        .result()
                        .map_err(|e| err("find", e))?;
                    let best = perf[..returned as usize].iter().find(|r| r.status == sys::cudnnStatus_t::CUDNN_STATUS_SUCCESS);
                    best.map(|r| Algo { id: AlgoId::Data(r.algo), workspace_bytes: r.memory as u64 })
                }
                Direction::BackwardWeight => {
                    let mut perf = [std::mem::zeroed::<sys::cudnnConvolutionBwdFilterAlgoPerf_t>(); ALGO_SLOTS];
                    sys::cudnnFindConvolutionBackwardFilterAlgorithmEx(self.handle, self.x, x, self.y, y, self.conv, self.w, w, ALGO_SLOTS as i32, &mut returned, perf.as_mut_ptr(), ws, ws_bytes)
                        .result()
                        .map_err(|e| err("find", e))?;
                    let best = perf[..returned as usize].iter().find(|r| r.status == sys::cudnnStatus_t::CUDNN_STATUS_SUCCESS);
                    best.map(|r| Algo { id: AlgoId::Filter(r.algo), workspace_bytes: r.memory as u64 })
                }
            }
        };
        best.ok_or_else(|| err("find", "no algorithm ran"))
    }

    /// Runs `algo` once and returns its GPU time in seconds (CUDA events, like gconv's).
    pub fn run_timed(&self, t: &mut DeviceTensors, algo: &Algo) -> Result<f64> {
        let (alpha, beta) = (1.0f32, 0.0f32);
        let (alpha, beta) = (&alpha as *const f32 as *const c_void, &beta as *const f32 as *const c_void);
        t.timed(self.device, algo.workspace_bytes, |b| {
            let (x, w, y, ws) = (b.x as *mut c_void, b.w as *mut c_void, b.y as *mut c_void, b.workspace as *mut c_void);
            let ws_bytes = algo.workspace_bytes as usize;
            // SAFETY: as in `find`; the workspace holds the algorithm's requirement.
            unsafe {
                match algo.id {
                    AlgoId::Fwd(a) => dnn::convolution_forward(self.handle, alpha, self.x, x, self.w, w, self.conv, a, ws, ws_bytes, beta, self.y, y),
                    AlgoId::Data(a) => dnn::convolution_backward_data(self.handle, alpha, self.w, w, self.y, y, self.conv, a, ws, ws_bytes, beta, self.x, x),
                    AlgoId::Filter(a) => dnn::convolution_backward_filter(self.handle, alpha, self.x, x, self.y, y, self.conv, a, ws, ws_bytes, beta, self.w, w),
                }
            }
            .map_err(|e| err("run", e))
        })
    }
}

impl Drop for CudnnPeer<'_> {
    fn drop(&mut self) {
        // SAFETY: each descriptor was created by `new` (or is null and skipped) and is freed once.
        unsafe {
            if !self.conv.is_null() {
                let _ = dnn::destroy_convolution_descriptor(self.conv);
            }
            if !self.w.is_null() {
                let _ = dnn::destroy_filter_descriptor(self.w);
            }
            for t in [self.x, self.y] {
                if !t.is_null() {
                    let _ = dnn::destroy_tensor_descriptor(t);
                }
            }
            let _ = dnn::destroy_handle(self.handle);
        }
    }
}
