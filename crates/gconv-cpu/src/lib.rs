//! gconv-cpu: the CPU backend. Solvers compute in fp32 (16-bit tensors are widened on the way in
//! and rounded once on the way out) and use every core through rayon.
//!
//! # Running a convolution on your own memory
//!
//! Build the solution once (here a named solver; find and the learned pick live in
//! `gconv-tune`), then run it on your tensors as often as you like. On the GPU the same call
//! takes device addresses and your stream.
//!
//! ```
//! use gconv_core::{CallerBuffers, Config, ConvProblem, Runtime};
//! use gconv_cpu::CpuRuntime;
//!
//! let rt = CpuRuntime::detect();
//! // 2 images of 8 channels, 6x6, into 8 channels by 3x3 filters in 4 groups, padding 1.
//! let p = ConvProblem::from_key("v1:fwd:f32:NCHW:n2:c8:k8:i6x6:f3x3:s1x1:p1x1:d1x1:g4")?;
//! let solution = rt.build("cpu.im2col_gemm", &p, Config::empty())?;
//!
//! let x = vec![1.0f32; p.input_elements() as usize];
//! let w = vec![0.5f32; p.weight_elements() as usize];
//! let mut y = vec![0.0f32; p.output_elements() as usize];
//! let mut workspace = vec![0u8; solution.workspace_bytes as usize];
//! let buffers = CallerBuffers {
//!     x: x.as_ptr() as u64,
//!     w: w.as_ptr() as u64,
//!     y: y.as_mut_ptr() as u64,
//!     workspace: workspace.as_mut_ptr() as u64,
//!     workspace_bytes: workspace.len() as u64,
//!     stream: 0,
//! };
//! // SAFETY: each address holds the problem's tensor (or the workspace) and outlives the call.
//! unsafe { rt.run_on(&solution, &buffers)? };
//!
//! // Pixel (2, 2) of image 0, channel 0 sees 3x3 taps of its group's 2 input channels.
//! assert_eq!(y[2 * 6 + 2], 2.0 * 9.0 * 0.5);
//! # Ok::<(), gconv_core::GconvError>(())
//! ```

mod matmul;
pub mod solvers;

mod runtime;

use gconv_core::{Backend, ConvProblem, ConvTensors, Direction, GconvError, Invoker, Registry, Result};

pub use runtime::CpuRuntime;

/// The CPU backend: invokers are handed host tensors and an fp32 workspace.
pub struct Host;

impl Backend for Host {
    const NAME: &'static str = "cpu";
    type Buffers<'a> = HostBuffers<'a>;
}

pub struct HostBuffers<'a> {
    pub tensors: &'a mut ConvTensors,
    /// At least the solution's `workspace_bytes`, as fp32 elements.
    pub workspace: &'a mut [f32],
}

/// The machine the CPU solvers run on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CpuDevice {
    pub threads: usize,
    pub model: String,
    pub simd: &'static str,
}

impl CpuDevice {
    pub fn detect() -> Self {
        let model = std::fs::read_to_string("/proc/cpuinfo")
            .ok()
            .and_then(|info| {
                info.lines()
                    .find(|l| l.starts_with("model name"))
                    .and_then(|l| l.split(':').nth(1))
                    .map(|m| m.trim().to_string())
            })
            .unwrap_or_else(|| std::env::consts::ARCH.to_string());
        CpuDevice { threads: rayon::current_num_threads(), model, simd: simd_level() }
    }

    /// Identifies the device in databases: results from another CPU do not transfer.
    pub fn key(&self) -> String {
        format!("cpu:{}:{}:t{}", self.model.replace(':', " "), self.simd, self.threads)
    }
}

fn simd_level() -> &'static str {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx512f") {
            return "avx512";
        }
        if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma") {
            return "avx2";
        }
        "sse2"
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        std::env::consts::ARCH
    }
}

/// Every CPU solver, one line each, in priority order.
pub fn registry(device: &CpuDevice) -> Registry<Host> {
    use solvers::*;
    Registry::new(vec![
        Box::new(gemm_1x1::Gemm1x1 { threads: device.threads }),
        Box::new(depthwise::Depthwise { threads: device.threads }),
        Box::new(im2col_gemm::Im2colGemm { threads: device.threads }),
        Box::new(direct_blocked::DirectBlocked),
        Box::new(reference::Reference),
    ])
}

/// The fp32 computation of a CPU solution, one function per direction. Output slices arrive
/// zeroed; inputs are fp32 views of the tensors.
pub(crate) trait HostKernel: Send + Sync {
    fn forward(&self, x: &[f32], w: &[f32], y: &mut [f32], workspace: &mut [f32]);
    fn backward_data(&self, dy: &[f32], w: &[f32], dx: &mut [f32], workspace: &mut [f32]);
    fn backward_weight(&self, x: &[f32], dy: &[f32], dw: &mut [f32], workspace: &mut [f32]);
}

/// Runs a [`HostKernel`] for one direction: converts the tensors and checks the workspace.
pub(crate) struct HostInvoker<K> {
    pub problem: ConvProblem,
    pub workspace_elements: usize,
    pub kernel: K,
}

impl<K: HostKernel + 'static> HostInvoker<K> {
    pub fn boxed(problem: &ConvProblem, workspace_bytes: u64, kernel: K) -> Box<dyn Invoker<Host>> {
        let workspace_elements = workspace_bytes.div_ceil(4) as usize;
        Box::new(HostInvoker { problem: problem.clone(), workspace_elements, kernel })
    }
}

impl<K: HostKernel> Invoker<Host> for HostInvoker<K> {
    fn run(&self, b: &mut HostBuffers<'_>) -> Result<()> {
        b.tensors.check(&self.problem)?;
        if b.workspace.len() < self.workspace_elements {
            return Err(GconvError::TensorMismatch(format!(
                "workspace of {} bytes given, {} needed",
                b.workspace.len() * 4,
                self.workspace_elements * 4
            )));
        }
        let ws = &mut b.workspace[..self.workspace_elements];
        let t = &mut *b.tensors;
        match self.problem.direction {
            Direction::Forward => {
                let (x, w) = (t.x.to_f32(), t.w.to_f32());
                t.y.write_f32_with(|y| self.kernel.forward(&x, &w, y, ws));
            }
            Direction::BackwardData => {
                let (dy, w) = (t.y.to_f32(), t.w.to_f32());
                t.x.write_f32_with(|dx| self.kernel.backward_data(&dy, &w, dx, ws));
            }
            Direction::BackwardWeight => {
                let (x, dy) = (t.x.to_f32(), t.y.to_f32());
                t.w.write_f32_with(|dw| self.kernel.backward_weight(&x, &dy, dw, ws));
            }
        }
        Ok(())
    }
}
