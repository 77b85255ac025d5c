//! Kernel builds claimed across processes. A process about to compile a kernel the disk cache
//! lacks first creates `<hash>.building` beside where the CUBIN will go, holding its process
//! id; a process that finds the claim waits for the CUBIN instead of compiling it too (a
//! sweep's kernel builder and its worker, PyTorch's process and its find worker, which
//! otherwise build the same kernels at once on the same cores). A claim whose process is gone,
//! or older than any build, is taken over.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

/// Older than any build: the claim's process hangs or is gone.
const STALE: Duration = Duration::from_secs(300);
/// How often a waiting process looks for the CUBIN.
const POLL: Duration = Duration::from_millis(20);

pub enum Claim {
    /// This process builds; the claim goes when the guard does.
    Ours(ClaimGuard),
    /// Another live process is building.
    Theirs,
    /// No claim could be made (an unwritable cache): build without one.
    Unclaimed,
}

pub struct ClaimGuard(PathBuf);

impl Drop for ClaimGuard {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// The claim file of the CUBIN at `cubin`.
pub fn claim_path(cubin: &Path) -> PathBuf {
    cubin.with_extension("building")
}

/// Claims the build of the CUBIN whose claim file is `claim`.
pub fn claim(claim: &Path) -> Claim {
    // The cache's first build finds no folder yet.
    if let Some(dir) = claim.parent() {
        let _ = std::fs::create_dir_all(dir);
    }
    for _ in 0..2 {
        match std::fs::OpenOptions::new().write(true).create_new(true).open(claim) {
            Ok(mut file) => {
                let _ = write!(file, "{} {}", std::process::id(), boot_id());
                return Claim::Ours(ClaimGuard(claim.to_path_buf()));
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                if !is_stale(claim) {
                    return Claim::Theirs;
                }
                let _ = std::fs::remove_file(claim);
            }
            Err(_) => return Claim::Unclaimed,
        }
    }
    Claim::Unclaimed
}

/// This machine's boot (Linux), so that a claim copied from another machine or left by an
/// earlier boot is not taken for a live one; empty where the system does not say.
fn boot_id() -> String {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id").map(|id| id.trim().to_string()).unwrap_or_default()
}

/// Whether a claim's process is gone (where the system says: Linux's /proc, and its boot) or
/// the claim is older than any build.
fn is_stale(claim: &Path) -> bool {
    let old = std::fs::metadata(claim)
        .and_then(|m| m.modified())
        .is_ok_and(|t| SystemTime::now().duration_since(t).unwrap_or_default() > STALE);
    let text = std::fs::read_to_string(claim).unwrap_or_default();
    let mut fields = text.split_whitespace();
    let pid = fields.next().and_then(|pid| pid.parse::<u32>().ok());
    let other_boot = fields.next().is_some_and(|boot| boot != boot_id());
    let gone = pid.is_some_and(|pid| Path::new("/proc/self").exists() && !Path::new(&format!("/proc/{pid}")).exists());
    old || other_boot || gone
}

/// The CUBIN another process is building, once it is on disk; `None` where the claim went
/// without it (that build failed), went stale, or `limit` passed.
pub fn wait_for(cubin: &Path, claim: &Path, limit: Duration, is_cubin: impl Fn(&[u8]) -> bool) -> Option<Vec<u8>> {
    let started = Instant::now();
    loop {
        if let Some(bytes) = std::fs::read(cubin).ok().filter(|b| is_cubin(b)) {
            return Some(bytes);
        }
        if !claim.exists() || is_stale(claim) || started.elapsed() > limit {
            // The build may have landed between the two looks.
            return std::fs::read(cubin).ok().filter(|b| is_cubin(b));
        }
        std::thread::sleep(POLL);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("gconv-claim-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn one_process_builds_and_the_others_wait_for_its_cubin() {
        let dir = scratch("wait");
        let cubin = dir.join("k.cubin");
        let claim_file = claim_path(&cubin);
        let Claim::Ours(guard) = claim(&claim_file) else { panic!("the first claim is ours") };
        assert!(matches!(claim(&claim_file), Claim::Theirs), "a live claim is another's");
        let writer = {
            let cubin = cubin.clone();
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(60));
                std::fs::write(&cubin, b"ELF").unwrap();
                drop(guard);
            })
        };
        let waited = wait_for(&cubin, &claim_file, Duration::from_secs(10), |b| b == b"ELF");
        writer.join().unwrap();
        assert_eq!(waited.as_deref(), Some(&b"ELF"[..]));
        assert!(!claim_file.exists(), "the claim goes with its build");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_claim_whose_process_is_gone_is_taken_over_and_a_failed_build_is_not_waited_for() {
        let dir = scratch("stale");
        let cubin = dir.join("k.cubin");
        let claim_file = claim_path(&cubin);
        // A live process (this one) but another machine's boot: a claim carried with a cache.
        std::fs::write(&claim_file, format!("{} another-boot", std::process::id())).unwrap();
        if !boot_id().is_empty() {
            assert!(matches!(claim(&claim_file), Claim::Ours(_)), "another boot's claim is taken over");
        }
        // No process has this id (above Linux's largest).
        std::fs::write(&claim_file, "4194305").unwrap();
        match Path::new("/proc/self").exists() {
            true => assert!(matches!(claim(&claim_file), Claim::Ours(_)), "a dead process's claim is taken over"),
            false => std::fs::remove_file(&claim_file).unwrap(),
        }
        // A claim dropped without a CUBIN: the waiter stops at once and builds itself.
        let guard = match claim(&claim_file) {
            Claim::Ours(guard) => guard,
            _ => panic!("the claim was dropped with its guard"),
        };
        drop(guard);
        let started = Instant::now();
        assert!(wait_for(&cubin, &claim_file, Duration::from_secs(10), |_| true).is_none());
        assert!(started.elapsed() < Duration::from_secs(1));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
