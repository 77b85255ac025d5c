//! The GPU: found without creating a context (so `gconv precompile` never touches one), with
//! the context, streams and loaded modules created on first use.

use std::collections::HashMap;
use std::ffi::c_char;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::ThreadId;

use cudarc::driver::sys as cu;
use cudarc::driver::{CudaContext, CudaFunction, CudaModule, CudaStream};
use cudarc::nvrtc::Ptx;
use gconv_core::{BuildStats, GconvError, Result};

use crate::compile::{Compiler, KernelSource};

/// What one SM holds, read from the device at probe time (they differ between sm_80, sm_86,
/// sm_89 and sm_90).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SmLimits {
    /// 32-bit registers.
    pub registers: u32,
    /// Resident warps and blocks at most.
    pub warps: u32,
    pub blocks: u32,
    /// Shared memory of the SM, the most one block may use when it opts in, and what the
    /// driver keeps per block besides.
    pub shared_bytes: u32,
    pub block_shared_bytes: u32,
    pub reserved_shared_bytes: u32,
}

#[cfg(test)]
impl SmLimits {
    /// An H100's (and H200's) SM: tile logic is tested with it, no GPU needed.
    pub const HOPPER: SmLimits = SmLimits {
        registers: 64 * 1024,
        warps: 64,
        blocks: 32,
        shared_bytes: 228 * 1024,
        block_shared_bytes: 227 * 1024,
        reserved_shared_bytes: 1024,
    };
}

pub struct CudaDevice {
    pub ordinal: usize,
    /// GPUs this process sees; gconv works on the first (`ordinal`).
    pub visible_devices: u32,
    pub name: String,
    /// Compute capability (major, minor).
    pub capability: (i32, i32),
    pub sm_count: u32,
    /// Peak SM clock.
    pub clock_mhz: u32,
    /// What one SM holds, for occupancy.
    pub sm: SmLimits,
    /// Bytes of L2 cache: a cold-cache timing flushes twice this much.
    pub l2_bytes: u64,
    pub driver_version: i32,
    pub nvrtc_version: (i32, i32),
    /// `cudnnGetVersion()` (e.g. 91900 for 9.19.0), when libcudnn loads.
    pub cudnn_version: Option<usize>,
    compiler: Compiler,
    gpu: OnceLock<std::result::Result<Gpu, String>>,
}

/// What exists only once the GPU is used.
struct Gpu {
    ctx: Arc<CudaContext>,
    /// A stream per thread that puts work on the GPU: one thread's work runs in order, and two
    /// threads never share a stream (a graph captured on one would take in the other's calls).
    streams: Mutex<HashMap<ThreadId, Arc<CudaStream>>>,
    /// Wrappers of callers' streams ([`CudaDevice::borrowed_stream`]), by handle: kept, so that
    /// what is cached per stream outlives one call.
    borrowed: Mutex<HashMap<u64, Arc<CudaStream>>>,
    modules: Mutex<HashMap<blake3::Hash, Arc<CudaModule>>>,
}

/// Streams of threads beyond this many are dropped once nothing uses them.
const KEPT_STREAMS: usize = 64;

fn driver(what: &str, r: cu::CUresult) -> std::result::Result<(), String> {
    if r == cu::CUresult::CUDA_SUCCESS {
        Ok(())
    } else {
        Err(format!("{what} failed: {r:?}"))
    }
}

impl CudaDevice {
    /// The first GPU, or why there is none usable. Never panics: libraries are checked for
    /// before cudarc touches them.
    pub fn probe(kernel_cache: Option<PathBuf>) -> std::result::Result<Arc<CudaDevice>, String> {
        Self::probe_ordinal(0, kernel_cache)
    }

    /// GPU `ordinal` of those this process sees (as CUDA numbers them, and PyTorch).
    pub fn probe_ordinal(
        ordinal: usize,
        kernel_cache: Option<PathBuf>,
    ) -> std::result::Result<Arc<CudaDevice>, String> {
        // SAFETY: these only try to open the shared libraries.
        if !unsafe { cu::is_culib_present() } {
            return Err("no CUDA driver (libcuda) found".into());
        }
        if !unsafe { cudarc::nvrtc::sys::is_culib_present() } {
            return Err("the CUDA driver is present but NVRTC (libnvrtc) is not".into());
        }
        // SAFETY: plain driver queries with valid out-pointers; no context is created.
        let (visible_devices, name, capability, sm_count, clock_mhz, sm, l2_bytes, driver_version) = unsafe {
            driver("cuInit", cu::cuInit(0))?;
            let mut count = 0;
            driver("cuDeviceGetCount", cu::cuDeviceGetCount(&mut count))?;
            if count == 0 {
                return Err("the CUDA driver sees no GPU".into());
            }
            if ordinal >= count as usize {
                return Err(format!("there is no GPU {ordinal}: the CUDA driver sees {count}"));
            }
            let mut dev = 0;
            driver("cuDeviceGet", cu::cuDeviceGet(&mut dev, ordinal as i32))?;
            let mut raw = [0 as c_char; 256];
            driver("cuDeviceGetName", cu::cuDeviceGetName(raw.as_mut_ptr(), raw.len() as i32, dev))?;
            let name = std::ffi::CStr::from_ptr(raw.as_ptr()).to_string_lossy().into_owned();
            let attr = |a| {
                let mut v = 0;
                driver("cuDeviceGetAttribute", cu::cuDeviceGetAttribute(&mut v, a, dev)).map(|_| v)
            };
            use cu::CUdevice_attribute as A;
            let capability = (
                attr(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?,
                attr(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?,
            );
            let sms = attr(A::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)? as u32;
            let clock_mhz = attr(A::CU_DEVICE_ATTRIBUTE_CLOCK_RATE)? as u32 / 1000;
            let sm = SmLimits {
                registers: attr(A::CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR)? as u32,
                warps: attr(A::CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR)? as u32 / 32,
                blocks: attr(A::CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR)? as u32,
                shared_bytes: attr(A::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR)? as u32,
                block_shared_bytes: attr(A::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)? as u32,
                reserved_shared_bytes: attr(A::CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK)? as u32,
            };
            let l2 = attr(A::CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE)? as u64;
            let mut version = 0;
            driver("cuDriverGetVersion", cu::cuDriverGetVersion(&mut version))?;
            (count as u32, name, capability, sms, clock_mhz, sm, l2, version)
        };
        let mut nvrtc_version = (0, 0);
        // SAFETY: valid out-pointers.
        unsafe { cudarc::nvrtc::sys::nvrtcVersion(&mut nvrtc_version.0, &mut nvrtc_version.1) }
            .result()
            .map_err(|e| format!("nvrtcVersion failed: {e:?}"))?;
        let arch = format!("sm_{}{}", capability.0, capability.1);
        Ok(Arc::new(CudaDevice {
            ordinal,
            visible_devices,
            name,
            capability,
            sm_count,
            clock_mhz,
            sm,
            l2_bytes,
            driver_version,
            nvrtc_version,
            cudnn_version: cudnn_version(),
            compiler: Compiler::new(arch, nvrtc_version, kernel_cache),
            gpu: OnceLock::new(),
        }))
    }

    /// Identifies the device in databases. cuDNN's version is part of it: its engine indices
    /// (the configs of `cuda.cudnn`) are stable only within one version.
    pub fn key(&self) -> String {
        let cudnn = self.cudnn_version.map_or("nocudnn".to_string(), |v| format!("cudnn{v}"));
        format!(
            "cuda:{}:{}:sm{}:nvrtc{}.{}:drv{}:{cudnn}",
            self.name.replace(':', " "),
            self.compiler.arch(),
            self.sm_count,
            self.nvrtc_version.0,
            self.nvrtc_version.1,
            self.driver_version
        )
    }

    pub fn arch(&self) -> &str {
        self.compiler.arch()
    }

    pub fn build_stats(&self) -> BuildStats {
        self.compiler.stats()
    }

    /// The on-disk build cache (kernels, cuDNN's listings), where there is one.
    pub fn cache_dir(&self) -> Option<&std::path::Path> {
        self.compiler.cache_dir()
    }

    pub fn is_built(&self, src: &KernelSource) -> bool {
        self.compiler.is_cached(src)
    }

    /// Builds (or finds) the CUBIN without touching the GPU: what `gconv precompile` runs in
    /// many threads; a source another thread is building is left to it.
    pub fn precompile(&self, src: &KernelSource) -> Result<()> {
        self.compiler.ensure_built(src)
    }

    fn gpu(&self) -> Result<&Gpu> {
        self.gpu
            .get_or_init(|| {
                // The device's primary context, which other users of the device in this
                // process (another runtime, a framework) share.
                let ctx = CudaContext::new(self.ordinal).map_err(|e| format!("cannot create a CUDA context: {e:?}"))?;
                // cudarc's per-buffer event tracking is overhead on every launch.
                // SAFETY: gconv uses each buffer only on the stream it was made on (its
                // workload's, or the thread's for a timer's or conversion's own buffers).
                unsafe { ctx.disable_event_tracking() };
                Ok(Gpu { ctx, streams: Mutex::default(), borrowed: Mutex::default(), modules: Mutex::default() })
            })
            .as_ref()
            .map_err(|e| GconvError::Backend(e.clone()))
    }

    /// This thread's stream on the device, made on first use. A stream of gconv's own: the
    /// legacy default stream cannot be captured into a graph, and another user's stream must
    /// not see gconv's captures.
    pub fn stream(&self) -> Result<Arc<CudaStream>> {
        let gpu = self.gpu()?;
        let mut streams = gpu.streams.lock().unwrap_or_else(|p| p.into_inner());
        let thread = std::thread::current().id();
        if let Some(stream) = streams.get(&thread) {
            return Ok(stream.clone());
        }
        if streams.len() >= KEPT_STREAMS {
            streams.retain(|_, s| Arc::strong_count(s) > 1);
        }
        let stream = gpu.ctx.new_stream().map_err(|e| driver_error("create a CUDA stream", e))?;
        streams.insert(thread, stream.clone());
        Ok(stream)
    }

    /// A caller's stream (its `CUstream` handle; 0 is the legacy default stream) to enqueue on.
    ///
    /// # Safety
    /// The handle must name a live stream of this device's primary context, and stay live
    /// while work is enqueued on it.
    pub unsafe fn borrowed_stream(&self, handle: u64) -> Result<Arc<CudaStream>> {
        let gpu = self.gpu()?;
        let mut borrowed = gpu.borrowed.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(stream) = borrowed.get(&handle) {
            return Ok(stream.clone());
        }
        // SAFETY: as promised by the caller.
        let stream = unsafe { gpu.ctx.wrap_borrowed_stream(handle as cu::CUstream) };
        borrowed.insert(handle, stream.clone());
        Ok(stream)
    }

    /// Whether `stream` is a caller's ([`CudaDevice::borrowed_stream`]), not one of gconv's own.
    pub fn is_borrowed(&self, stream: &CudaStream) -> bool {
        let Ok(gpu) = self.gpu() else { return false };
        let borrowed = gpu.borrowed.lock().unwrap_or_else(|p| p.into_inner());
        borrowed.get(&(stream.cu_stream() as u64)).is_some_and(|s| **s == *stream)
    }

    pub(crate) fn context(&self) -> Result<&Arc<CudaContext>> {
        Ok(&self.gpu()?.ctx)
    }

    /// Loads `function` of the built source; a cached CUBIN that fails to load is rebuilt once.
    pub fn function(&self, src: &KernelSource, function: &str) -> Result<CudaFunction> {
        let gpu = self.gpu()?;
        let module = {
            let (key, cubin) = self.compiler.cubin(src)?;
            let cached = gpu.modules.lock().unwrap().get(&key).cloned();
            match cached {
                Some(m) => m,
                None => {
                    let module = match gpu.ctx.load_module(Ptx::from_binary(cubin.to_vec())) {
                        Ok(m) => m,
                        Err(_) => {
                            self.compiler.forget(&key);
                            let (_, fresh) = self.compiler.cubin(src)?;
                            gpu.ctx.load_module(Ptx::from_binary(fresh.to_vec())).map_err(|e| {
                                GconvError::Backend(format!("cannot load the module of {}: {e:?}", src.file))
                            })?
                        }
                    };
                    gpu.modules.lock().unwrap().insert(key, module.clone());
                    module
                }
            }
        };
        module
            .load_function(function)
            .map_err(|e| GconvError::Backend(format!("no function {function} in {}: {e:?}", src.file)))
    }
}

/// `cudnnGetVersion()` when libcudnn loads (its graph API is reached through `cudnn/`).
fn cudnn_version() -> Option<usize> {
    // SAFETY: a plain query.
    crate::cudnn_library::cudnn().map(|lib| unsafe { (lib.get_version)() })
}

pub fn backend_error(what: &str, e: impl std::fmt::Debug) -> GconvError {
    GconvError::Backend(format!("{what}: {e:?}"))
}

/// A driver error, typed: the sticky ones (a kernel faulted, and the context with it) become
/// [`GconvError::DeviceLost`], so find and tuning stop instead of failing every later
/// candidate.
pub fn driver_error(what: &str, e: cudarc::driver::DriverError) -> GconvError {
    use cu::CUresult as R;
    let sticky = matches!(
        e.0,
        R::CUDA_ERROR_ILLEGAL_ADDRESS
            | R::CUDA_ERROR_LAUNCH_FAILED
            | R::CUDA_ERROR_MISALIGNED_ADDRESS
            | R::CUDA_ERROR_ILLEGAL_INSTRUCTION
            | R::CUDA_ERROR_INVALID_ADDRESS_SPACE
            | R::CUDA_ERROR_INVALID_PC
            | R::CUDA_ERROR_HARDWARE_STACK_ERROR
            | R::CUDA_ERROR_ASSERT
            | R::CUDA_ERROR_LAUNCH_TIMEOUT
            | R::CUDA_ERROR_ECC_UNCORRECTABLE
            | R::CUDA_ERROR_CONTEXT_IS_DESTROYED
    );
    if sticky {
        GconvError::DeviceLost(format!("{what}: {e:?}"))
    } else {
        GconvError::Backend(format!("{what}: {e:?}"))
    }
}
