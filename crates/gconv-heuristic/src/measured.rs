//! Measured candidates as `gconv sweep` writes them (one CSV row each), read back for
//! training and validation. Columns are found by name.

use std::collections::HashMap;
use std::path::Path;

use gconv_core::{Config, ConvProblem, DeviceFacts};

use crate::{Error, Result};

/// What a vendor library itself would do with a config of its listed solver.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct VendorMarks {
    /// The solver's configs are the library's list for the problem.
    pub listed: bool,
    /// The library's heuristic picks this config.
    pub heuristic: bool,
    /// The library's own find times it.
    pub find: bool,
}

impl VendorMarks {
    /// The CSV text: `listed`, then `heuristic` and `find` where they hold, joined by `+`.
    pub fn text(self) -> String {
        let mut words = Vec::new();
        if self.listed {
            words.push("listed");
        }
        if self.heuristic {
            words.push("heuristic");
        }
        if self.find {
            words.push("find");
        }
        words.join("+")
    }

    fn parse(text: &str) -> Self {
        let has = |w: &str| text.split('+').any(|t| t == w);
        VendorMarks { listed: has("listed"), heuristic: has("heuristic"), find: has("find") }
    }
}

/// One candidate's measurement.
#[derive(Debug, Clone)]
pub struct Measured {
    pub problem: ConvProblem,
    pub solver: String,
    pub config: Config,
    /// The time of a verified, fully timed run; `None` for a failed, wrong or skipped one.
    pub ms: Option<f64>,
    pub workspace_bytes: u64,
    pub device: String,
    pub facts: DeviceFacts,
    pub vendor: VendorMarks,
}

/// The columns this module reads.
const NEEDED: [&str; 9] =
    ["key", "solver", "config", "latency_ms", "workspace_bytes", "device", "device_units", "device_mhz", "vendor"];

/// Every row of the sweep CSVs at `paths`.
pub fn read(paths: &[impl AsRef<Path>]) -> Result<Vec<Measured>> {
    let mut rows = Vec::new();
    let mut problems: HashMap<String, ConvProblem> = HashMap::new();
    for path in paths {
        let path = path.as_ref();
        let bad = |reason: String| Error::BadData { path: path.to_path_buf(), reason };
        let mut reader = csv::Reader::from_path(path).map_err(|e| bad(e.to_string()))?;
        let header = reader.headers().map_err(|e| bad(e.to_string()))?.clone();
        let column = |name: &str| {
            header
                .iter()
                .position(|h| h == name)
                .ok_or_else(|| bad(format!("no `{name}` column: not a sweep CSV of this gconv")))
        };
        let [key, solver, config, ms, workspace, device, units, mhz, vendor] = {
            let mut found = [0; NEEDED.len()];
            for (slot, name) in found.iter_mut().zip(NEEDED) {
                *slot = column(name)?;
            }
            found
        };
        for (line, record) in reader.records().enumerate() {
            let record = record.map_err(|e| bad(e.to_string()))?;
            let at_line = |what: &str, e: String| bad(format!("row {}: {what}: {e}", line + 2));
            let problem = match problems.get(&record[key]) {
                Some(p) => p.clone(),
                None => {
                    let p = ConvProblem::from_key(&record[key]).map_err(|e| at_line("problem key", e.to_string()))?;
                    problems.insert(record[key].to_string(), p.clone());
                    p
                }
            };
            let number =
                |column: usize, what: &str| record[column].parse::<f64>().map_err(|e| at_line(what, e.to_string()));
            rows.push(Measured {
                problem,
                solver: record[solver].to_string(),
                config: record[config].parse().map_err(|e: gconv_core::GconvError| at_line("config", e.to_string()))?,
                ms: if record[ms].is_empty() {
                    None
                } else {
                    Some(number(ms, "latency_ms")?).filter(|t| t.is_finite() && *t > 0.0)
                },
                workspace_bytes: number(workspace, "workspace_bytes")? as u64,
                device: record[device].to_string(),
                facts: DeviceFacts {
                    units: number(units, "device_units")? as u32,
                    clock_mhz: number(mhz, "device_mhz")? as u32,
                },
                vendor: VendorMarks::parse(&record[vendor]),
            });
        }
    }
    Ok(rows)
}
