//! A cuBLAS handle whose GEMMs run on the stream and with the workspace of the buffers they are
//! given (the workspace set explicitly, so that GEMMs captured into CUDA graphs never allocate,
//! and never shared by two streams at once), on operands checked to lie in their buffers.

use std::ffi::c_void;
use std::sync::Mutex;

use cudarc::cublas::sys::{cublasComputeType_t, cublasGemmAlgo_t, cublasOperation_t, cudaDataType};
use cudarc::cublas::CudaBlas;
use cudarc::driver::{CudaSlice, CudaStream, DevicePtr};
use gconv_core::{GconvError, Result};

use crate::device::{backend_error, CudaDevice};
use crate::Buffer;

/// cuBLAS's workspace (NVIDIA suggests 32 MiB on Hopper).
pub const WORKSPACE_BYTES: u64 = 32 << 20;

pub struct BlasHandle {
    pub blas: CudaBlas,
    /// The handle holds a stream and a workspace between calls: a call sets both and runs its
    /// GEMMs while no other thread's call can change them. Held here: the stream and workspace
    /// a call last set, which the next call on the same ones need not set again (setting them
    /// costs the host a microsecond or two a call).
    turn: Mutex<Option<(usize, u64)>>,
}

fn check_workspace(workspace: Buffer) -> Result<()> {
    if workspace.bytes < WORKSPACE_BYTES || !workspace.ptr.is_multiple_of(256) {
        return Err(GconvError::Backend(format!(
            "cuBLAS's workspace wants {WORKSPACE_BYTES} bytes at 256-byte alignment, got {} at {:#x}",
            workspace.bytes, workspace.ptr
        )));
    }
    Ok(())
}

fn fail(what: &str, e: &dyn std::fmt::Debug) -> GconvError {
    GconvError::Backend(format!("cannot {what}: {e:?}"))
}

impl BlasHandle {
    /// A handle on this thread's stream.
    pub fn new(device: &CudaDevice) -> Result<Self> {
        let blas = CudaBlas::new(device.stream()?).map_err(|e| fail("create a cuBLAS handle", &e))?;
        Ok(BlasHandle { blas, turn: Mutex::new(None) })
    }

    /// Points the handle at `workspace`, which must outlive its GEMMs.
    pub fn set_workspace(&self, workspace: &CudaSlice<u8>) -> Result<()> {
        let (ptr, _) = workspace.device_ptr(workspace.stream());
        let mut set = self.turn.lock().unwrap_or_else(|p| p.into_inner());
        *set = None;
        self.use_workspace(Buffer { ptr, bytes: workspace.len() as u64 })
    }

    fn use_workspace(&self, workspace: Buffer) -> Result<()> {
        check_workspace(workspace)?;
        // SAFETY: a live handle and a device range of the given length (checked by the caller's
        // buffers) that outlives the GEMMs run with it.
        unsafe {
            cudarc::cublas::sys::cublasSetWorkspace_v2(
                *self.blas.handle(),
                workspace.ptr as *mut c_void,
                WORKSPACE_BYTES as usize,
            )
        }
        .result()
        .map_err(|e| fail("set cuBLAS's workspace", &e))
    }

    /// Runs `gemms` in order on `stream`, with cuBLAS's workspace the first WORKSPACE_BYTES of
    /// `workspace`.
    pub fn run_on(&self, stream: &CudaStream, workspace: Buffer, gemms: impl IntoIterator<Item = Gemm>) -> Result<()> {
        let mut set = self.turn.lock().unwrap_or_else(|p| p.into_inner());
        let wanted = (stream.cu_stream() as usize, workspace.ptr);
        check_workspace(workspace)?;
        if *set != Some(wanted) {
            *set = None;
            // SAFETY: a live handle and a live stream of the handle's context. Setting the
            // stream resets the workspace, so the workspace is set after it.
            unsafe { cudarc::cublas::sys::cublasSetStream_v2(*self.blas.handle(), stream.cu_stream() as _) }
                .result()
                .map_err(|e| fail("set cuBLAS's stream", &e))?;
            self.use_workspace(workspace)?;
            *set = Some(wanted);
        }
        gemms.into_iter().try_for_each(|g| self.gemm(&g))
    }
}

/// One operand of a strided-batched GEMM: a column-major matrix (as cuBLAS sees it) starting
/// `offset` elements into `buffer`, leading dimension `ld`, `stride` elements between batch
/// steps, elements of `data`.
#[derive(Debug, Clone, Copy)]
pub struct Matrix {
    pub buffer: Buffer,
    pub offset: i64,
    pub ld: i32,
    pub stride: i64,
    pub data: cudaDataType,
}

fn element_bytes(data: cudaDataType) -> Result<i64> {
    match data {
        cudaDataType::CUDA_R_32F => Ok(4),
        cudaDataType::CUDA_R_16F | cudaDataType::CUDA_R_16BF => Ok(2),
        other => Err(GconvError::Backend(format!("cuda.gemm_blas has no element size for {other:?}"))),
    }
}

impl Matrix {
    /// The address of the first element, when every batch step's `rows` x `cols` matrix lies
    /// inside the buffer.
    fn checked_ptr(&self, rows: i32, cols: i32, batch: i32) -> Result<*mut c_void> {
        let (rows, cols, batch, ld) = (i64::from(rows), i64::from(cols), i64::from(batch), i64::from(self.ld));
        let end = self.offset + (batch - 1) * self.stride + (cols - 1) * ld + rows;
        let elem = element_bytes(self.data)?;
        let inside = self.offset >= 0 && self.stride >= 0 && rows > 0 && cols > 0 && batch > 0 && ld >= rows;
        if !inside || end * elem > self.buffer.bytes as i64 {
            return Err(GconvError::Backend(format!(
                "a {rows}x{cols} GEMM operand (ld {ld}, {batch} steps of {} elements from {}) does not fit its {}-byte buffer",
                self.stride, self.offset, self.buffer.bytes
            )));
        }
        Ok((self.buffer.ptr + (self.offset * elem) as u64) as *mut c_void)
    }
}

/// C = op(A) op(B) + beta C for each batch step, op(A) m x k and op(B) k x n, fp32 scalars.
#[derive(Debug, Clone, Copy)]
pub struct Gemm {
    pub trans_a: bool,
    pub trans_b: bool,
    pub m: i32,
    pub n: i32,
    pub k: i32,
    pub a: Matrix,
    pub b: Matrix,
    pub c: Matrix,
    pub batch: i32,
    pub beta: f32,
    pub compute: cublasComputeType_t,
}

impl BlasHandle {
    /// Runs `g` on the handle's stream, once each operand is checked to lie in its buffer.
    fn gemm(&self, g: &Gemm) -> Result<()> {
        let stored = |trans: bool, rows: i32, cols: i32| if trans { (cols, rows) } else { (rows, cols) };
        let (a_rows, a_cols) = stored(g.trans_a, g.m, g.k);
        let (b_rows, b_cols) = stored(g.trans_b, g.k, g.n);
        let a = g.a.checked_ptr(a_rows, a_cols, g.batch)?;
        let b = g.b.checked_ptr(b_rows, b_cols, g.batch)?;
        let c = g.c.checked_ptr(g.m, g.n, g.batch)?;
        let op = |t: bool| if t { cublasOperation_t::CUBLAS_OP_T } else { cublasOperation_t::CUBLAS_OP_N };
        let alpha = 1.0f32;
        // SAFETY: the handle is live and on the stream the buffers belong to; every operand
        // lies inside its buffer (checked above), and the scalars outlive the call.
        unsafe {
            cudarc::cublas::result::gemm_strided_batched_ex(
                *self.blas.handle(),
                op(g.trans_a),
                op(g.trans_b),
                g.m,
                g.n,
                g.k,
                &alpha as *const f32 as *const c_void,
                a,
                g.a.data,
                g.a.ld,
                g.a.stride,
                b,
                g.b.data,
                g.b.ld,
                g.b.stride,
                &g.beta as *const f32 as *const c_void,
                c,
                g.c.data,
                g.c.ld,
                g.c.stride,
                g.batch,
                g.compute,
                cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
            )
        }
        .map_err(|e| backend_error("cuBLAS GEMM", e))
    }
}
