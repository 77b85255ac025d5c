//! Running the `gconv` binary from tests, each test with its own cache directory so the
//! default user db never touches the user's.

#![allow(dead_code)]

use std::path::PathBuf;
use std::process::{Command, Output};

/// A fresh directory for one test, removed when dropped.
pub struct Scratch(pub PathBuf);

impl Scratch {
    pub fn new(name: &str) -> Self {
        static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let unique = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("gconv-test-{name}-{}-{unique}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }

    pub fn db(&self) -> String {
        self.path("user.db").to_string_lossy().into_owned()
    }

    /// `gconv` on the CPU with this directory as the cache directory. These tests describe the
    /// CPU backend, so they pass on a machine with a GPU too; the GPU has its own tests.
    pub fn gconv(&self) -> Command {
        let mut cmd = Command::new(binary());
        cmd.env("XDG_CACHE_HOME", &self.0).args(["--backend", "cpu"]);
        cmd
    }

    pub fn run(&self, args: &[&str]) -> Output {
        self.gconv().args(args).output().expect("gconv runs")
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The binary cargo built for these tests, or the packed one when the tests travel to another
/// machine (`.device/bin/gconv`, relative to the repository root where the tests start).
pub fn binary() -> PathBuf {
    let built = PathBuf::from(env!("CARGO_BIN_EXE_gconv"));
    if built.exists() {
        built
    } else {
        PathBuf::from(".device/bin/gconv")
    }
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}
