//! The one list of runtimes: adding a backend is a crate and a line here.

use gconv_core::Runtime;
use gconv_tune::db::default_cache_dir;

type Open = fn() -> Result<Box<dyn Runtime>, String>;

/// Every backend, in the order `--backend auto` tries them.
const RUNTIMES: &[(&str, Open)] = &[
    ("cuda", || {
        gconv_cuda::CudaRuntime::probe(Some(default_cache_dir().join("kernels")))
            .map(|r| Box::new(r) as Box<dyn Runtime>)
    }),
    ("cpu", || Ok(Box::new(gconv_cpu::CpuRuntime::detect()))),
];

/// The values `--backend` takes.
pub fn choices() -> Vec<&'static str> {
    std::iter::once("auto").chain(RUNTIMES.iter().map(|(name, _)| *name)).collect()
}

/// The runtime commands run on, and the device line of reports (which says why `auto`
/// passed over a backend).
pub fn open(choice: &str) -> anyhow::Result<(Box<dyn Runtime>, String)> {
    let mut passed_over = Vec::new();
    for (name, open) in RUNTIMES.iter().filter(|(name, _)| choice == "auto" || choice == *name) {
        match open() {
            Ok(rt) => {
                let line = match passed_over.is_empty() {
                    true => rt.describe(),
                    false => format!("{} (not used: {})", rt.describe(), passed_over.join("; ")),
                };
                return Ok((rt, line));
            }
            Err(reason) if choice == "auto" => passed_over.push(format!("{name}: {reason}")),
            Err(reason) => anyhow::bail!("--backend {name}: {reason}"),
        }
    }
    anyhow::bail!("no backend could be opened: {}", passed_over.join("; "))
}

/// Every runtime that opens here, for judging database records by their own device's solvers.
pub fn all_available() -> Vec<Box<dyn Runtime>> {
    RUNTIMES.iter().filter_map(|(_, open)| open().ok()).collect()
}
