//! A hang becomes a failure: work that may never return (a GPU kernel waiting on a flag no one
//! sets, a driver call stuck behind it) is armed with a time limit and a description of what it
//! is; when the limit passes, one thread of the process names it on stderr and aborts the
//! process. A hung kernel cannot be cancelled, so ending the process is the only way out, and
//! abort skips exit handlers that would wait on the GPU.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// What is armed: by id, its deadline and description.
struct Armed {
    cases: Mutex<BTreeMap<u64, (Instant, String)>>,
    changed: Condvar,
}

fn armed() -> &'static Armed {
    static ARMED: OnceLock<Armed> = OnceLock::new();
    static WATCHER: OnceLock<()> = OnceLock::new();
    let armed = ARMED.get_or_init(|| Armed { cases: Mutex::default(), changed: Condvar::new() });
    WATCHER.get_or_init(|| {
        std::thread::Builder::new()
            .name("gconv-watchdog".into())
            .spawn(|| watch(armed))
            .expect("the watchdog thread starts");
    });
    armed
}

fn watch(armed: &'static Armed) {
    let mut cases = armed.cases.lock().unwrap_or_else(|p| p.into_inner());
    loop {
        let now = Instant::now();
        if let Some((_, (deadline, what))) = cases.iter().find(|(_, (deadline, _))| *deadline <= now) {
            let late = now.duration_since(*deadline);
            eprintln!(
                "watchdog: did not return in time ({:.0} s past its limit), aborting: {what}",
                late.as_secs_f64()
            );
            for (_, (_, other)) in cases.iter().filter(|(_, (_, other))| other != what) {
                eprintln!("watchdog: also running then: {other}");
            }
            std::process::abort();
        }
        let next = cases.values().map(|(deadline, _)| *deadline).min();
        cases = match next {
            Some(deadline) => {
                armed
                    .changed
                    .wait_timeout(cases, deadline.saturating_duration_since(now))
                    .unwrap_or_else(|p| p.into_inner())
                    .0
            }
            None => armed.changed.wait(cases).unwrap_or_else(|p| p.into_inner()),
        };
    }
}

/// Disarms its case when dropped (also when the case panics).
#[must_use = "the case is watched only while the guard lives"]
pub struct Watched {
    id: u64,
}

impl Drop for Watched {
    fn drop(&mut self) {
        let armed = armed();
        armed.cases.lock().unwrap_or_else(|p| p.into_inner()).remove(&self.id);
        armed.changed.notify_one();
    }
}

/// Watches the work that runs while the returned guard lives: past `limit`, `what` is printed
/// and the process aborted.
pub fn watch_for(limit: Duration, what: impl Into<String>) -> Watched {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let id = NEXT.fetch_add(1, Ordering::Relaxed);
    let armed = armed();
    armed.cases.lock().unwrap_or_else(|p| p.into_inner()).insert(id, (Instant::now() + limit, what.into()));
    armed.changed.notify_one();
    Watched { id }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cases_that_return_in_time_are_disarmed() {
        for i in 0..100 {
            let _watched = watch_for(Duration::from_secs(60), format!("case {i}"));
        }
        assert!(armed().cases.lock().unwrap().values().all(|(_, what)| !what.starts_with("case ")));
    }

    /// Marks the copy of this test that the test runs in a process of its own, to hang there.
    const HANGING_CHILD: &str = "GCONV_WATCHDOG_TEST_CHILD";

    #[test]
    fn a_hang_aborts_the_process_naming_the_case() {
        if std::env::var_os(HANGING_CHILD).is_some() {
            let _watched = watch_for(Duration::from_millis(200), "a case that never returns");
            std::thread::sleep(Duration::from_secs(60));
            return;
        }
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "testing::watchdog::tests::a_hang_aborts_the_process_naming_the_case", "--nocapture"])
            .env(HANGING_CHILD, "1")
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{stderr}");
        assert!(stderr.contains("did not return in time") && stderr.contains("a case that never returns"), "{stderr}");
    }
}
