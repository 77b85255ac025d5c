//! Measured candidates as `gconv sweep` writes them (one CSV row each), read back for
//! training and validation. Columns are found by name; a file named `*.gz` is read through
//! gzip (committed sweeps are kept compressed: a tenth of the size).

use std::collections::hash_map::Entry;
use std::collections::HashMap;
use std::fs::File;
use std::io::Read;
use std::path::Path;

use flate2::read::MultiGzDecoder;

use gconv_core::{Config, ConvProblem, DeviceFacts, Solver, Yardstick};

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
    /// Its place on that list, which is the heuristic's order (0: the heuristic's pick);
    /// unknown in rows swept before it was recorded.
    pub find_rank: Option<u16>,
}

impl VendorMarks {
    /// The marks of `solver`'s `config` on a problem whose vendor yardstick is `yardstick`
    /// (none where the library cannot list the problem): the sweep's rows and selection's
    /// features read them the same way.
    pub fn of(solver: &dyn Solver, config: &Config, yardstick: Option<&Yardstick>) -> Self {
        let ours = yardstick.filter(|y| y.solver == solver.id());
        let find_rank = ours.and_then(|y| y.find.iter().position(|c| c == config));
        VendorMarks {
            listed: solver.find_times_every_config(),
            heuristic: ours.is_some_and(|y| y.heuristic == *config),
            find: find_rank.is_some(),
            find_rank: find_rank.map(|r| r.min(usize::from(u16::MAX)) as u16),
        }
    }

    /// The CSV text: `listed`, then `heuristic` and `find` (`find@` its place, where known)
    /// where they hold, joined by `+`.
    pub fn text(self) -> String {
        let mut words = Vec::new();
        if self.listed {
            words.push("listed".to_string());
        }
        if self.heuristic {
            words.push("heuristic".to_string());
        }
        match (self.find, self.find_rank) {
            (true, Some(rank)) => words.push(format!("find@{rank}")),
            (true, None) => words.push("find".to_string()),
            (false, _) => {}
        }
        words.join("+")
    }

    fn parse(text: &str) -> Self {
        let has = |w: &str| text.split('+').any(|t| t == w);
        let find_rank = text.split('+').find_map(|t| t.strip_prefix("find@")?.parse().ok());
        VendorMarks {
            listed: has("listed"),
            heuristic: has("heuristic"),
            find: has("find") || find_rank.is_some(),
            find_rank,
        }
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
    /// The candidate ran and its result failed verification (beyond the tolerance).
    pub wrong: bool,
}

/// How a sweep's status column starts where the candidate's result was wrong (as gconv-tune's
/// outcome text words it).
const WRONG_STATUS: &str = "failed verification";

/// The columns this module reads.
const NEEDED: [&str; 9] =
    ["key", "solver", "config", "latency_ms", "workspace_bytes", "device", "device_units", "device_mhz", "vendor"];

/// Every row of the sweep CSVs at `paths`; where a candidate (device, problem, solver, config)
/// was measured more than once (`gconv sweep --remeasure` appends), the last row stands.
pub fn read(paths: &[impl AsRef<Path>]) -> Result<Vec<Measured>> {
    let mut rows: Vec<Measured> = Vec::new();
    let mut at: HashMap<[String; 4], usize> = HashMap::new();
    let mut problems: HashMap<String, ConvProblem> = HashMap::new();
    for path in paths {
        let path = path.as_ref();
        let bad = |reason: String| Error::BadData { path: path.to_path_buf(), reason };
        let file = File::open(path).map_err(|e| bad(e.to_string()))?;
        let source: Box<dyn Read> = if path.extension().is_some_and(|e| e == "gz") {
            Box::new(MultiGzDecoder::new(file))
        } else {
            Box::new(file)
        };
        let mut reader = csv::Reader::from_reader(source);
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
        // Rows without a status (exported by older gconvs) are taken as never wrong.
        let status = header.iter().position(|h| h == "status");
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
            let measured = Measured {
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
                wrong: status.is_some_and(|at| record[at].starts_with(WRONG_STATUS)),
            };
            let candidate = [device, key, solver, config].map(|column| record[column].to_string());
            match at.entry(candidate) {
                Entry::Occupied(earlier) => rows[*earlier.get()] = measured,
                Entry::Vacant(slot) => {
                    slot.insert(rows.len());
                    rows.push(measured);
                }
            }
        }
    }
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use flate2::write::GzEncoder;
    use flate2::Compression;

    use super::*;

    const SWEEP: &str = "key,solver,config,latency_ms,workspace_bytes,device,device_units,device_mhz,vendor\n\
        v1:fwd:bf16:NHWC:n32:c3:k64:i224x224:f7x7:s2x2:p3x3:d1x1,cuda.gemm_blas,default,0.356523,151568384,cuda:H200,132,1980,\n\
        v1:fwd:bf16:NHWC:n32:c3:k64:i224x224:f7x7:s2x2:p3x3:d1x1,cuda.naive,default,,0,cuda:H200,132,1980,\n";

    #[test]
    fn a_gzipped_sweep_reads_as_the_plain_one() {
        let dir = std::env::temp_dir().join(format!("gconv-measured-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (plain, packed) = (dir.join("sweep.csv"), dir.join("sweep.csv.gz"));
        std::fs::write(&plain, SWEEP).unwrap();
        let mut gz = GzEncoder::new(File::create(&packed).unwrap(), Compression::best());
        gz.write_all(SWEEP.as_bytes()).unwrap();
        gz.finish().unwrap();
        let summary = |rows: Vec<Measured>| -> Vec<(String, String, Option<f64>)> {
            rows.into_iter().map(|r| (r.problem.key(), r.solver, r.ms)).collect()
        };
        let from_plain = summary(read(&[&plain]).unwrap());
        assert_eq!(from_plain.len(), 2);
        assert_eq!(from_plain[0].2, Some(0.356523));
        assert_eq!(from_plain[1].2, None);
        assert_eq!(summary(read(&[&packed]).unwrap()), from_plain);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn vendor_marks_read_back_as_written_and_older_rows_lack_the_rank() {
        let marks = [
            VendorMarks { listed: true, heuristic: true, find: true, find_rank: Some(0) },
            VendorMarks { listed: true, heuristic: false, find: true, find_rank: Some(7) },
            VendorMarks { listed: true, heuristic: false, find: false, find_rank: None },
            VendorMarks::default(),
        ];
        for m in marks {
            assert_eq!(VendorMarks::parse(&m.text()), m, "{}", m.text());
        }
        assert_eq!(marks[1].text(), "listed+find@7");
        let older = VendorMarks::parse("listed+heuristic+find");
        assert!(older.find && older.heuristic && older.find_rank.is_none());
    }

    #[test]
    fn a_candidate_measured_again_takes_its_last_row() {
        let dir = std::env::temp_dir().join(format!("gconv-remeasured-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("sweep.csv");
        let again = "v1:fwd:bf16:NHWC:n32:c3:k64:i224x224:f7x7:s2x2:p3x3:d1x1,cuda.gemm_blas,default,0.25,151568384,cuda:H200,132,1980,\n\
            v1:fwd:bf16:NHWC:n32:c3:k64:i224x224:f7x7:s2x2:p3x3:d1x1,cuda.gemm_blas,default,0.25,151568384,cuda:H100,132,1980,\n";
        std::fs::write(&path, format!("{SWEEP}{again}")).unwrap();
        let rows = read(&[&path]).unwrap();
        let times: Vec<(&str, &str, Option<f64>)> =
            rows.iter().map(|r| (r.solver.as_str(), r.device.as_str(), r.ms)).collect();
        assert_eq!(
            times,
            [
                ("cuda.gemm_blas", "cuda:H200", Some(0.25)),
                ("cuda.naive", "cuda:H200", None),
                ("cuda.gemm_blas", "cuda:H100", Some(0.25))
            ]
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
