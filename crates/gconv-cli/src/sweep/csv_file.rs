//! The sweep's CSV: its columns, one row per measured candidate, appended as results come so
//! that a stopped sweep keeps what it measured, and read back to resume.

use std::collections::HashSet;
use std::fs::OpenOptions;
use std::path::Path;

use anyhow::Context;
use gconv_core::{ConvProblem, DeviceFacts};
use gconv_heuristic::measured::VendorMarks;
use gconv_tune::outcome::STATUS_TIME_BOXED;

/// The CSV's columns: Composable Kernel's (C and K per group, as CK counts them) and then
/// gconv's. 1D and 2D problems fill the missing leading dimensions with size 1.
/// `vendor` says, for a solver whose configs a vendor library lists (cuDNN's engines), that it
/// is `listed` and whether the library's heuristic picks it and its find times it.
pub(super) const COLUMNS: [&str; 36] = [
    "kernel",
    "problem_idx",
    "N",
    "C",
    "K",
    "G",
    "Hi",
    "Wi",
    "Y",
    "X",
    "stride_h",
    "stride_w",
    "pad_h",
    "pad_w",
    "latency_ms",
    "tflops",
    "non_zero",
    "direction",
    "dtype",
    "layout",
    "Di",
    "Z",
    "stride_d",
    "pad_d",
    "dil_d",
    "dil_h",
    "dil_w",
    "solver",
    "config",
    "workspace_bytes",
    "device",
    "device_units",
    "device_mhz",
    "vendor",
    "status",
    "key",
];
/// A candidate's result as the CSV takes it.
pub struct RowReply {
    pub status: String,
    pub ms: Option<f64>,
    pub workspace_bytes: u64,
}

/// What a CSV row says of the candidate besides its result.
pub struct Row<'a> {
    pub problem_idx: usize,
    pub problem: &'a ConvProblem,
    pub solver: &'a str,
    pub config: &'a str,
    pub device: &'a str,
    pub facts: DeviceFacts,
    pub vendor: VendorMarks,
}

/// The (problem key, solver, config) rows of `device` already in the CSV at `path`.
pub(super) fn measured_rows(path: &Path, device: &str) -> anyhow::Result<HashSet<(String, String, String)>> {
    let mut done = HashSet::new();
    if !path.exists() {
        return Ok(done);
    }
    let mut reader = csv::Reader::from_path(path).with_context(|| format!("cannot read {}", path.display()))?;
    let header = reader.headers()?.clone();
    anyhow::ensure!(
        header.iter().eq(COLUMNS),
        "{} is not a sweep CSV of this gconv (its columns differ); name a new file",
        path.display()
    );
    let column = |name: &str| COLUMNS.iter().position(|c| *c == name).expect("a sweep column");
    let [key, solver, config, on] = ["key", "solver", "config", "device"].map(column);
    for row in reader.records() {
        let row = row.with_context(|| format!("cannot read {}", path.display()))?;
        if &row[on] == device {
            done.insert((row[key].to_string(), row[solver].to_string(), row[config].to_string()));
        }
    }
    Ok(done)
}

/// The CSV, appended to a row at a time so that a stopped sweep keeps what it measured.
pub struct CsvSink {
    writer: csv::Writer<std::fs::File>,
    /// ok, failed (or wrong), not run, stopped early (`--early-stop`).
    pub(super) counts: [usize; 4],
}

impl CsvSink {
    pub fn open(path: &Path) -> anyhow::Result<Self> {
        let fresh = !path.exists() || std::fs::metadata(path)?.len() == 0;
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .with_context(|| format!("cannot write {}", path.display()))?;
        let mut writer = csv::Writer::from_writer(file);
        if fresh {
            writer.write_record(COLUMNS)?;
            writer.flush()?;
        }
        Ok(CsvSink { writer, counts: [0; 4] })
    }

    pub fn write(&mut self, row: &Row<'_>, reply: &RowReply) -> anyhow::Result<()> {
        let p = row.problem;
        // One field's (depth, height, width) sizes; missing leading dimensions are `absent`.
        let sizes = |get: fn(&gconv_core::SpatialDim) -> u32, absent: u32| -> [String; 3] {
            std::array::from_fn(|axis| {
                p.dims.len().checked_sub(3 - axis).map_or(absent, |i| get(&p.dims[i])).to_string()
            })
        };
        let [di, hi, wi] = sizes(|d| d.input, 1);
        let [z, y, x] = sizes(|d| d.filter, 1);
        let [stride_d, stride_h, stride_w] = sizes(|d| d.stride, 1);
        let [pad_d, pad_h, pad_w] = sizes(|d| d.pad, 0);
        let [dil_d, dil_h, dil_w] = sizes(|d| d.dilation, 1);
        let tflops = reply.ms.map(|ms| format!("{:.4}", p.flops() / (ms * 1e-3) / 1e12)).unwrap_or_default();
        // A verified, fully timed candidate has a time, and one stopped early its one call's.
        let class = match (reply.ms, reply.status.as_str()) {
            (Some(_), STATUS_TIME_BOXED) => 3,
            (Some(_), _) => 0,
            (None, status) if status.starts_with("not run") => 2,
            (None, _) => 1,
        };
        self.counts[class] += 1;
        let record = [
            format!("{}:{}", row.solver, row.config),
            row.problem_idx.to_string(),
            p.n.to_string(),
            p.c_per_group().to_string(),
            p.k_per_group().to_string(),
            p.g.to_string(),
            hi,
            wi,
            y,
            x,
            stride_h,
            stride_w,
            pad_h,
            pad_w,
            reply.ms.map(|ms| format!("{ms:.6}")).unwrap_or_default(),
            tflops,
            u8::from(reply.ms.is_some()).to_string(),
            p.direction.to_string(),
            p.dtype.to_string(),
            p.layout.name(p.rank()).to_string(),
            di,
            z,
            stride_d,
            pad_d,
            dil_d,
            dil_h,
            dil_w,
            row.solver.to_string(),
            row.config.to_string(),
            reply.workspace_bytes.to_string(),
            row.device.to_string(),
            row.facts.units.to_string(),
            row.facts.clock_mhz.to_string(),
            row.vendor.text(),
            reply.status.clone(),
            p.key(),
        ];
        self.writer.write_record(&record)?;
        self.writer.flush()?;
        Ok(())
    }
}
