//! JSON lines: the one export and import format, and how the system layer is shipped.

use std::io::{BufRead, Write};

use rusqlite::{params, Connection, OptionalExtension, TransactionBehavior};

use super::records::{FindRecord, PerfRecord, Record, RecordKey};
use super::store::{find_rows, insert_perf, replace_find};
use crate::error::{Result, TuneError};

/// How imported records meet existing ones.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ImportMode {
    /// The imported record wins.
    Replace,
    /// The faster record wins: perf by time, find lists by their best time.
    KeepFaster,
}

pub(super) fn export(records: &[Record], mut out: impl Write) -> Result<usize> {
    for r in records {
        serde_json::to_writer(&mut out, r).map_err(|e| TuneError::Io(e.to_string()))?;
        writeln!(out).map_err(|e| TuneError::Io(e.to_string()))?;
    }
    Ok(records.len())
}

/// Reads JSON lines of [`Record`]s into `conn` in one transaction: all or nothing. Returns how
/// many records were taken.
pub(super) fn import(conn: &mut Connection, input: impl BufRead, mode: ImportMode) -> Result<usize> {
    let mut perf: Vec<PerfRecord> = Vec::new();
    let mut finds: Vec<(RecordKey, Vec<FindRecord>)> = Vec::new();
    for (i, line) in input.lines().enumerate() {
        let line = line.map_err(|e| TuneError::Io(e.to_string()))?;
        if line.trim().is_empty() {
            continue;
        }
        let record: Record =
            serde_json::from_str(&line).map_err(|e| TuneError::Import(format!("line {}: {e}", i + 1)))?;
        match record {
            Record::Perf(p) => perf.push(p),
            Record::Find(f) => match finds.iter_mut().find(|(k, _)| *k == f.key()) {
                Some((_, rows)) => rows.push(f),
                None => finds.push((f.key(), vec![f])),
            },
        }
    }
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let mut taken = 0;
    for p in &perf {
        let existing: Option<f64> = tx
            .query_row(
                "SELECT time_ms FROM perf WHERE problem = ?1 AND device = ?2 AND solver = ?3",
                params![p.problem, p.device, p.solver],
                |r| r.get(0),
            )
            .optional()?;
        if mode == ImportMode::Replace || existing.is_none_or(|t| p.time_ms < t) {
            insert_perf(&tx, p)?;
            taken += 1;
        }
    }
    for (key, mut rows) in finds {
        rows.sort_by_key(|r| r.rank);
        let existing = find_rows(&tx, &key)?;
        if mode == ImportMode::Replace || best_time(&existing).is_none_or(|t| best_time(&rows).is_some_and(|n| n < t)) {
            replace_find(&tx, &key, &rows)?;
            taken += rows.len();
        }
    }
    tx.commit()?;
    Ok(taken)
}

fn best_time(rows: &[FindRecord]) -> Option<f64> {
    rows.iter().filter(|r| r.status == crate::outcome::STATUS_OK).filter_map(|r| r.time_ms).reduce(f64::min)
}
