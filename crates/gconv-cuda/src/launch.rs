//! Every launch of gconv's own kernels and every fill of a solution's buffers. Buffers carry
//! their lengths, and a `CudaBuffers` exists only once they are checked to cover the problem a
//! solution was built for (its tensors and workspace): the kernels and vendor calls given them
//! stay inside. The `unsafe` of launching lives here, so solver files hold none.

use std::sync::Arc;

use cudarc::driver::sys::CUfunction_attribute as FuncAttr;
use cudarc::driver::{CudaFunction, CudaStream, DeviceRepr, LaunchArgs, LaunchConfig, PushKernelArg};
use gconv_core::{ConvProblem, Direction, GconvError, Result};

use crate::device::{backend_error, driver_error};
use crate::ConvParams;

/// Dynamic shared memory a kernel may take without opting in to more.
pub const DEFAULT_SHARED_BYTES: u32 = 48 * 1024;

/// Lets `function` (of `solver`) take `bytes` of dynamic shared memory: an opt-in above
/// [`DEFAULT_SHARED_BYTES`], nothing to do below.
pub fn allow_shared(function: &CudaFunction, bytes: u32, solver: &str) -> Result<()> {
    if bytes <= DEFAULT_SHARED_BYTES {
        return Ok(());
    }
    function
        .set_attribute(FuncAttr::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, bytes as i32)
        .map_err(|e| backend_error(&format!("allow {solver}'s shared memory"), e))
}

/// A device allocation as a kernel sees it: its address and length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Buffer {
    pub ptr: u64,
    pub bytes: u64,
}

impl Buffer {
    /// The part of this buffer from `bytes` on (empty past its end).
    pub fn from_byte(self, bytes: u64) -> Buffer {
        let skipped = bytes.min(self.bytes);
        Buffer { ptr: self.ptr + skipped, bytes: self.bytes - skipped }
    }
}

/// The buffers one run of a solution reads and writes, on the stream to launch on.
pub struct CudaBuffers<'a> {
    pub x: Buffer,
    pub w: Buffer,
    pub y: Buffer,
    pub workspace: Buffer,
    /// Private, so that only [`CudaBuffers::covering`] makes buffers.
    stream: &'a Arc<CudaStream>,
}

impl<'a> CudaBuffers<'a> {
    /// The buffers, when each holds what problem `p` needs of it (the output may be wider than
    /// the problem's type: the reference writes fp32) and the workspace at least `workspace`
    /// bytes.
    pub fn covering(
        p: &ConvProblem,
        workspace_bytes: u64,
        [x, w, y, workspace]: [Buffer; 4],
        stream: &'a Arc<CudaStream>,
    ) -> Result<Self> {
        let elem = p.dtype.size_bytes() as u64;
        let needs = [
            ("x", x, p.input_elements() * elem),
            ("w", w, p.weight_elements() * elem),
            ("y", y, p.output_elements() * elem),
            ("the workspace", workspace, workspace_bytes),
        ];
        for (name, buffer, bytes) in needs {
            if buffer.bytes < bytes {
                return Err(GconvError::Backend(format!(
                    "{name} holds {} bytes, and {} needs {bytes}",
                    buffer.bytes,
                    p.key()
                )));
            }
        }
        Ok(CudaBuffers { x, w, y, workspace, stream })
    }

    /// The stream the buffers' work goes to.
    pub fn stream(&self) -> &Arc<CudaStream> {
        self.stream
    }

    /// The buffer a direction writes.
    pub fn output(&self, direction: Direction) -> Buffer {
        match direction {
            Direction::Forward => self.y,
            Direction::BackwardData => self.x,
            Direction::BackwardWeight => self.w,
        }
    }

    /// These buffers with the direction's output replaced by `output`, checked again.
    pub fn with_output(&self, p: &ConvProblem, output: Buffer) -> Result<Self> {
        let [mut x, mut w, mut y] = [self.x, self.w, self.y];
        *match p.direction {
            Direction::Forward => &mut y,
            Direction::BackwardData => &mut x,
            Direction::BackwardWeight => &mut w,
        } = output;
        CudaBuffers::covering(p, self.workspace.bytes, [x, w, y, self.workspace], self.stream)
    }

    /// Zeroes the first `bytes` of the workspace (fp32 zero is all-zero bits).
    pub fn zero_workspace(&self, bytes: u64) -> Result<()> {
        if bytes > self.workspace.bytes {
            return Err(GconvError::Backend(format!(
                "cannot zero {bytes} bytes of a {}-byte workspace",
                self.workspace.bytes
            )));
        }
        // SAFETY: the range lies inside the workspace allocation, written on its own stream.
        unsafe {
            cudarc::driver::result::memset_d8_async(self.workspace.ptr, 0, bytes as usize, self.stream.cu_stream())
        }
        .map_err(|e| driver_error("zero the workspace", e))
    }
}

/// A kernel parameter passed by value as a struct: any `#[repr(C)]` type the kernel declares
/// alike (`DeviceRepr`).
pub trait KernelStruct: Sync {
    fn push<'a>(&'a self, launch: &mut LaunchArgs<'a>);
}

impl<T: DeviceRepr + Sync> KernelStruct for T {
    fn push<'a>(&'a self, launch: &mut LaunchArgs<'a>) {
        launch.arg(self);
    }
}

/// One argument of a kernel, in the order of its parameter list.
pub enum Arg<'a> {
    Params(&'a ConvParams),
    Buffer(Buffer),
    Int(i32),
    /// A parameter passed by value as a struct of its own: a TMA map, a solver's table.
    Struct(&'a dyn KernelStruct),
}

/// How a grid is launched.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Residency {
    /// Blocks start as SMs come free.
    Any,
    /// Every block resident at once (a cooperative launch), also beside other streams' kernels:
    /// for grids whose blocks wait on one another.
    AllAtOnce,
}

/// Launches `function` on the buffers' stream. `args` follow the kernel's parameter list as
/// its `.cu` file declares it; every buffer among them is one of `b`'s, checked to cover the
/// problem the kernel was built for.
pub fn kernel(
    b: &CudaBuffers<'_>,
    function: &CudaFunction,
    config: LaunchConfig,
    args: &[Arg<'_>],
    what: &str,
) -> Result<()> {
    kernel_with(b, function, config, Residency::Any, args, what)
}

/// [`kernel`], launched with the given residency.
pub fn kernel_with(
    b: &CudaBuffers<'_>,
    function: &CudaFunction,
    config: LaunchConfig,
    residency: Residency,
    args: &[Arg<'_>],
    what: &str,
) -> Result<()> {
    let mut launch = b.stream.launch_builder(function);
    for arg in args {
        match arg {
            Arg::Params(params) => {
                launch.arg(*params);
            }
            Arg::Buffer(buffer) => {
                launch.arg(&buffer.ptr);
            }
            Arg::Int(value) => {
                launch.arg(value);
            }
            Arg::Struct(value) => value.push(&mut launch),
        }
    }
    // SAFETY: the arguments are the kernel's parameters in order (above), and the buffers hold
    // what the problem needs (`CudaBuffers::covering`), which is all a kernel of it touches.
    let launched = unsafe {
        match residency {
            Residency::Any => launch.launch(config),
            Residency::AllAtOnce => launch.launch_cooperative(config),
        }
    };
    launched.map_err(|e| backend_error(what, e))?;
    Ok(())
}

/// A one-dimensional launch of `blocks` blocks of `threads` threads.
pub fn flat(blocks: u32, threads: u32) -> LaunchConfig {
    LaunchConfig { grid_dim: (blocks, 1, 1), block_dim: (threads, 1, 1), shared_mem_bytes: 0 }
}
