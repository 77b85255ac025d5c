//! Kernel builds: NVRTC straight to CUBIN for the device's exact architecture (loading PTX
//! would make the driver run ptxas on every load), a disk cache keyed by
//! hash(source, options, arch, NVRTC version) with atomic writes, builds claimed across
//! processes (`build_claim.rs`), and counters.

use std::collections::HashMap;
use std::ffi::{c_char, CString};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, TryLockError};
use std::time::Instant;

use cudarc::nvrtc::{result as nvrtc, sys as nvrtc_sys};
use gconv_core::{BuildStats, DataType, GconvError, Result};

use crate::build_claim::{self, Claim};

const COMMON: &str = include_str!("kernels/common.cuh");
/// Longest wait for a kernel another process is building before building it here too.
const BUILD_WAIT: std::time::Duration = std::time::Duration::from_secs(120);

/// A kernel source and its compile-time parameters.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct KernelSource {
    /// File name, for messages.
    pub file: &'static str,
    pub text: &'static str,
    /// Preprocessor definitions (`NAME` or `NAME=VALUE`).
    pub defines: Vec<String>,
    /// Built for the architecture's specific features (`sm_90a`: wgmma, setmaxnreg), which
    /// run on that architecture alone.
    pub arch_specific: bool,
}

impl KernelSource {
    pub fn new(file: &'static str, text: &'static str, dtype: DataType) -> Self {
        // Kernels see the storage type; GCONV_TF32 also lets them multiply in TF32.
        let defines: &[&str] = match dtype {
            DataType::F32 => &["GCONV_F32"],
            DataType::F16 => &["GCONV_F16"],
            DataType::Bf16 => &["GCONV_BF16"],
            DataType::Tf32 => &["GCONV_F32", "GCONV_TF32"],
        };
        KernelSource { file, text, defines: defines.iter().map(|d| d.to_string()).collect(), arch_specific: false }
    }

    pub fn define(mut self, name: &str, value: impl std::fmt::Display) -> Self {
        self.defines.push(format!("{name}={value}"));
        self
    }

    /// This source, built for the device architecture's specific features.
    pub fn arch_specific(mut self) -> Self {
        self.arch_specific = true;
        self
    }

    fn full_text(&self) -> String {
        format!("{COMMON}\n#line 1 \"{}\"\n{}", self.file, self.text)
    }
}

pub struct Compiler {
    arch: String,
    nvrtc_version: (i32, i32),
    cache_dir: Option<PathBuf>,
    cubins: Mutex<HashMap<blake3::Hash, Arc<CubinSlot>>>,
    stats: Mutex<BuildStats>,
}

/// One source's CUBIN in this process. Its lock is held while the CUBIN is read or built, so
/// threads asking for the same source build it once.
type CubinSlot = Mutex<Option<Arc<Vec<u8>>>>;

impl Compiler {
    pub fn new(arch: String, nvrtc_version: (i32, i32), cache_dir: Option<PathBuf>) -> Self {
        Compiler { arch, nvrtc_version, cache_dir, cubins: Mutex::default(), stats: Mutex::default() }
    }

    pub fn arch(&self) -> &str {
        &self.arch
    }

    /// The on-disk build cache, where there is one.
    pub fn cache_dir(&self) -> Option<&std::path::Path> {
        self.cache_dir.as_deref()
    }

    fn options(&self, src: &KernelSource) -> Vec<String> {
        let suffix = if src.arch_specific { "a" } else { "" };
        let mut options =
            vec![format!("--gpu-architecture={}{suffix}", self.arch), "-std=c++17".into(), "--use_fast_math".into()];
        options.extend(src.defines.iter().map(|d| format!("-D{d}")));
        options
    }

    pub fn key(&self, src: &KernelSource) -> blake3::Hash {
        let mut h = blake3::Hasher::new();
        h.update(src.full_text().as_bytes());
        for o in self.options(src) {
            h.update(o.as_bytes()).update(&[0]);
        }
        h.update(format!("nvrtc{}.{}", self.nvrtc_version.0, self.nvrtc_version.1).as_bytes());
        h.finalize()
    }

    fn disk_path(&self, key: &blake3::Hash) -> Option<PathBuf> {
        self.cache_dir.as_ref().map(|d| d.join(format!("{}.cubin", key.to_hex())))
    }

    /// Whether the CUBIN is in this process or on disk: running it needs no build.
    pub fn is_cached(&self, src: &KernelSource) -> bool {
        let key = self.key(src);
        let in_memory =
            self.cubins.lock().unwrap().get(&key).is_some_and(|slot| slot.try_lock().is_ok_and(|c| c.is_some()));
        in_memory || self.disk_path(&key).is_some_and(|p| p.exists())
    }

    fn slot(&self, key: blake3::Hash) -> Arc<CubinSlot> {
        self.cubins.lock().unwrap().entry(key).or_default().clone()
    }

    pub fn stats(&self) -> BuildStats {
        *self.stats.lock().unwrap()
    }

    /// The CUBIN for `src`: from this process, else from disk, else built and stored; a build
    /// another thread has under way is waited for.
    pub fn cubin(&self, src: &KernelSource) -> Result<(blake3::Hash, Arc<Vec<u8>>)> {
        let key = self.key(src);
        let slot = self.slot(key);
        let mut held = slot.lock().unwrap_or_else(PoisonError::into_inner);
        let cubin = self.fill(src, &key, &mut held, true)?.expect("a waiting fill gives the CUBIN");
        Ok((key, cubin))
    }

    /// Makes sure `src` is built, or is being built by another thread or process, which then
    /// reports its failure: ahead-of-time builds never build one source twice nor wait.
    pub fn ensure_built(&self, src: &KernelSource) -> Result<()> {
        let key = self.key(src);
        let slot = self.slot(key);
        let mut held = match slot.try_lock() {
            Ok(held) => held,
            Err(TryLockError::Poisoned(poisoned)) => poisoned.into_inner(),
            Err(TryLockError::WouldBlock) => {
                self.stats.lock().unwrap().memory_hits += 1;
                return Ok(());
            }
        };
        self.fill(src, &key, &mut held, false).map(|_| ())
    }

    /// The CUBIN from this process, the disk cache or a build. Where another process claims
    /// the build, waits for its CUBIN (`wait`, else gives none).
    fn fill(
        &self,
        src: &KernelSource,
        key: &blake3::Hash,
        held: &mut Option<Arc<Vec<u8>>>,
        wait: bool,
    ) -> Result<Option<Arc<Vec<u8>>>> {
        if let Some(cubin) = held.as_ref() {
            self.stats.lock().unwrap().memory_hits += 1;
            return Ok(Some(cubin.clone()));
        }
        let path = self.disk_path(key);
        let read = |p: &PathBuf| std::fs::read(p).ok().filter(|b| is_elf(b));
        let mut from_disk = path.as_ref().and_then(read);
        let mut claimed = None;
        if let (None, Some(path)) = (&from_disk, &path) {
            let claim_file = build_claim::claim_path(path);
            match build_claim::claim(&claim_file) {
                Claim::Ours(guard) => claimed = Some(guard),
                Claim::Theirs if !wait => return Ok(None),
                Claim::Theirs => from_disk = build_claim::wait_for(path, &claim_file, BUILD_WAIT, is_elf),
                Claim::Unclaimed => {}
            }
        }
        let cubin = match from_disk {
            Some(bytes) => {
                self.stats.lock().unwrap().disk_hits += 1;
                Arc::new(bytes)
            }
            None => {
                let start = Instant::now();
                let bytes = self.compile(src)?;
                let mut stats = self.stats.lock().unwrap();
                stats.builds += 1;
                stats.build_ms += start.elapsed().as_secs_f64() * 1e3;
                drop(stats);
                if let Some(path) = &path {
                    store_atomically(path, &bytes);
                }
                drop(claimed);
                Arc::new(bytes)
            }
        };
        *held = Some(cubin.clone());
        Ok(Some(cubin))
    }

    /// Drops a cache entry that failed to load, so the next `cubin` call rebuilds it.
    pub fn forget(&self, key: &blake3::Hash) {
        self.cubins.lock().unwrap().remove(key);
        if let Some(p) = self.disk_path(key) {
            let _ = std::fs::remove_file(p);
        }
    }

    fn compile(&self, src: &KernelSource) -> Result<Vec<u8>> {
        let fail = |what: &str, detail: String| GconvError::Backend(format!("NVRTC {what} {}: {detail}", src.file));
        let text = CString::new(src.full_text()).map_err(|e| fail("cannot take", e.to_string()))?;
        let name = CString::new(src.file).map_err(|e| fail("cannot take", e.to_string()))?;
        let prog = nvrtc::create_program(&text, Some(&name)).map_err(|e| fail("cannot load", format!("{e:?}")))?;
        // SAFETY: `prog` is live until destroy_program below.
        let result = unsafe {
            match nvrtc::compile_program(prog, &self.options(src)) {
                Ok(()) => cubin_of(prog).map_err(|e| fail("cannot read the CUBIN of", e)),
                Err(e) => {
                    let log = nvrtc::get_program_log(prog)
                        .map(|l| String::from_utf8_lossy(&l.iter().map(|&c| c as u8).collect::<Vec<_>>()).into_owned())
                        .unwrap_or_default();
                    Err(fail("failed on", format!("{e:?}\n{}", log.trim_end_matches('\0'))))
                }
            }
        };
        // SAFETY: created above, destroyed once.
        let _ = unsafe { nvrtc::destroy_program(prog) };
        result
    }
}

/// # Safety
/// `prog` must be a live, successfully compiled program.
unsafe fn cubin_of(prog: nvrtc_sys::nvrtcProgram) -> std::result::Result<Vec<u8>, String> {
    let mut size = 0usize;
    nvrtc_sys::nvrtcGetCUBINSize(prog, &mut size).result().map_err(|e| format!("{e:?}"))?;
    let mut bytes = vec![0u8; size];
    nvrtc_sys::nvrtcGetCUBIN(prog, bytes.as_mut_ptr() as *mut c_char).result().map_err(|e| format!("{e:?}"))?;
    Ok(bytes)
}

fn is_elf(bytes: &[u8]) -> bool {
    bytes.starts_with(b"\x7fELF")
}

/// Writes through a unique temporary file and a rename, so readers never see half a file.
/// A cache that cannot be written only costs a rebuild later.
pub(crate) fn store_atomically(path: &std::path::Path, bytes: &[u8]) {
    // Unique within the process too: two runtimes of one process may build the same source
    // into one cache at once, and a shared name let one truncate the file the other renamed.
    static WRITES: AtomicU64 = AtomicU64::new(0);
    let Some(dir) = path.parent() else { return };
    if std::fs::create_dir_all(dir).is_err() {
        return;
    }
    let write = WRITES.fetch_add(1, Ordering::Relaxed);
    let tmp = dir.join(format!(
        ".{}.{write}.{}.tmp",
        std::process::id(),
        path.file_name().unwrap_or_default().to_string_lossy()
    ));
    if std::fs::write(&tmp, bytes).is_ok() && std::fs::rename(&tmp, path).is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
}
