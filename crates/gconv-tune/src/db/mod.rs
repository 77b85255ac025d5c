//! The perf-db (best config per solver), the find-db (ranked solvers per problem) and tuning
//! trials, in SQLite. Two layers: a read-only system layer shipped with gconv under a writable
//! user layer; lookups try the user layer first.
//!
//! Every write is one `BEGIN IMMEDIATE` transaction, so several processes can share a user db
//! (WAL mode, busy timeout) and a killed process loses at most the measurement in flight.
//!
//! Pieces: `records` (what is stored, its key, warnings), `schema` (tables, opening, recovery),
//! `store` (rows of one layer), `jsonl` (export and import); the layers are here.

mod jsonl;
mod records;
mod schema;
mod store;

use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};

use rusqlite::{params, Connection, TransactionBehavior};
use serde::Serialize;

pub use jsonl::ImportMode;
pub use records::{FindRecord, PerfRecord, Record, RecordKey, Table, TrialRecord, Warning};
pub use schema::FORMAT_VERSION;
use store::{all_records, find_rows, insert_perf, perf_row, replace_find};

use crate::error::Result;

pub const GCONV_VERSION: &str = env!("CARGO_PKG_VERSION");

/// The system layer: records for known devices, shipped inside this crate as JSON lines.
const SYSTEM_RECORDS: &str = include_str!("system-db.jsonl");

#[derive(Debug, Default, Clone, PartialEq, Serialize)]
pub struct Stats {
    pub perf: u64,
    pub find_problems: u64,
    pub trials: u64,
    pub devices: Vec<String>,
}

pub struct Db {
    user: Connection,
    user_path: PathBuf,
    system: Connection,
}

/// gconv's folder under the user's cache directory: the user db, the kernel cache.
pub fn default_cache_dir() -> PathBuf {
    dirs::cache_dir().unwrap_or_else(std::env::temp_dir).join("gconv")
}

/// The default user db.
pub fn default_user_path() -> PathBuf {
    default_cache_dir().join("user.db")
}

impl Db {
    /// Opens (creating if needed) the user db at `path` over the shipped system layer. A
    /// corrupt file, or one written by a newer format, is renamed aside; the warning says so.
    pub fn open(path: &Path) -> Result<(Db, Option<Warning>)> {
        Self::open_layers(path, SYSTEM_RECORDS)
    }

    /// As [`Db::open`], with the system layer read from `system_records` (JSON lines).
    pub fn open_layers(path: &Path, system_records: &str) -> Result<(Db, Option<Warning>)> {
        let (user, warning) = schema::open_user(path)?;
        let mut system = Connection::open_in_memory()?;
        system.execute_batch(schema::SCHEMA)?;
        jsonl::import(&mut system, system_records.as_bytes(), ImportMode::Replace)?;
        Ok((Db { user, user_path: path.to_path_buf(), system }, warning))
    }

    pub fn path(&self) -> &Path {
        &self.user_path
    }

    fn layers(&self) -> [&Connection; 2] {
        [&self.user, &self.system]
    }

    /// The perf record of `solver` in the first layer that has one.
    pub fn perf(&self, key: &RecordKey, solver: &str) -> Result<Option<PerfRecord>> {
        for conn in self.layers() {
            if let Some(found) = perf_row(conn, key, solver)? {
                return Ok(Some(found));
            }
        }
        Ok(None)
    }

    /// The ranked find result of the first layer that has one.
    pub fn find(&self, key: &RecordKey) -> Result<Option<Vec<FindRecord>>> {
        for conn in self.layers() {
            let rows = find_rows(conn, key)?;
            if !rows.is_empty() {
                return Ok(Some(rows));
            }
        }
        Ok(None)
    }

    /// (solver, config) of the verified, fully timed rows of the first layer that has a find
    /// result, fastest first: the part of a find result that selection needs, read cheaply.
    pub fn find_ranked_ok(&self, key: &RecordKey) -> Result<Option<Vec<(String, String)>>> {
        for conn in self.layers() {
            let mut stmt = conn.prepare_cached(
                "SELECT solver, config, status = 'ok' FROM find WHERE problem = ?1 AND device = ?2 ORDER BY rank",
            )?;
            let mut rows = stmt.query(params![key.problem, key.device])?;
            let mut ok = Vec::new();
            let mut any = false;
            while let Some(row) = rows.next()? {
                any = true;
                if row.get::<_, bool>(2)? {
                    ok.push((row.get(0)?, row.get(1)?));
                }
            }
            if any {
                return Ok(Some(ok));
            }
        }
        Ok(None)
    }

    pub fn put_perf(&mut self, record: &PerfRecord) -> Result<()> {
        let tx = self.user.transaction_with_behavior(TransactionBehavior::Immediate)?;
        insert_perf(&tx, record)?;
        tx.commit()?;
        Ok(())
    }

    /// Replaces the find result of one problem on one device.
    pub fn put_find(&mut self, key: &RecordKey, rows: &[FindRecord]) -> Result<()> {
        let tx = self.user.transaction_with_behavior(TransactionBehavior::Immediate)?;
        replace_find(&tx, key, rows)?;
        tx.commit()?;
        Ok(())
    }

    /// This gconv version's tuning trials of `solver`.
    pub fn trials(&self, key: &RecordKey, solver: &str) -> Result<Vec<TrialRecord>> {
        let mut stmt = self.user.prepare_cached(
            "SELECT config, time_ms, status FROM trial
             WHERE problem = ?1 AND device = ?2 AND solver = ?3 AND gconv_version = ?4",
        )?;
        let rows = stmt.query_map(params![key.problem, key.device, solver, GCONV_VERSION], |r| {
            Ok(TrialRecord {
                problem: key.problem.clone(),
                device: key.device.clone(),
                solver: solver.to_string(),
                config: r.get(0)?,
                time_ms: r.get(1)?,
                status: r.get(2)?,
            })
        })?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    pub fn put_trial(&mut self, t: &TrialRecord) -> Result<()> {
        let tx = self.user.transaction_with_behavior(TransactionBehavior::Immediate)?;
        tx.execute(
            "INSERT OR REPLACE INTO trial VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
            params![t.problem, t.device, t.solver, t.config, t.time_ms, t.status, GCONV_VERSION],
        )?;
        tx.commit()?;
        Ok(())
    }

    pub fn stats(&self) -> Result<Stats> {
        let count = |sql: &str| -> Result<u64> { Ok(self.user.query_row(sql, [], |r| r.get::<_, i64>(0))? as u64) };
        let mut stmt = self.user.prepare(
            "SELECT device FROM perf UNION SELECT device FROM find UNION SELECT device FROM trial ORDER BY 1",
        )?;
        let devices = stmt.query_map([], |r| r.get(0))?.collect::<rusqlite::Result<_>>()?;
        Ok(Stats {
            perf: count("SELECT COUNT(*) FROM perf")?,
            find_problems: count("SELECT COUNT(*) FROM (SELECT DISTINCT problem, device FROM find)")?,
            trials: count("SELECT COUNT(*) FROM trial")?,
            devices,
        })
    }

    /// Every verified, fully timed candidate of `device` in the user layer, from finds and
    /// tuning trials: training rows for the learned heuristic.
    pub fn timed_candidates(&self, device: &str) -> Result<Vec<TrialRecord>> {
        let mut stmt = self.user.prepare(
            "SELECT problem, solver, config, time_ms FROM find WHERE device = ?1 AND status = 'ok' AND time_ms IS NOT NULL
             UNION SELECT problem, solver, config, time_ms FROM trial WHERE device = ?1 AND status = 'ok' AND time_ms IS NOT NULL
             ORDER BY 1, 2, 3",
        )?;
        let rows = stmt.query_map(params![device], |r| {
            Ok(TrialRecord {
                problem: r.get(0)?,
                device: device.to_string(),
                solver: r.get(1)?,
                config: r.get(2)?,
                time_ms: r.get(3)?,
                status: "ok".into(),
            })
        })?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// Every perf and find record of the user layer, in a stable order.
    pub fn records(&self) -> Result<Vec<Record>> {
        all_records(&self.user)
    }

    pub fn export_jsonl(&self, out: impl Write) -> Result<usize> {
        jsonl::export(&self.records()?, out)
    }

    /// Reads JSON lines of [`Record`]s into the user layer in one transaction: all or nothing.
    /// Returns how many records were taken.
    pub fn import_jsonl(&mut self, input: impl BufRead, mode: ImportMode) -> Result<usize> {
        jsonl::import(&mut self.user, input, mode)
    }

    /// Deletes records that can no longer be used, as judged by `keep(problem, device, solver,
    /// config)` (e.g. unknown solvers, configs their solver rejects, malformed problem keys),
    /// and trials of other versions. Returns how many records were removed.
    pub fn prune(&mut self, keep: impl Fn(&str, &str, &str, &str) -> bool) -> Result<usize> {
        let records = self.records()?;
        let tx = self.user.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let mut removed = 0;
        for record in records {
            match record {
                Record::Perf(p) if !keep(&p.problem, &p.device, &p.solver, &p.config) => {
                    removed += tx.execute(
                        "DELETE FROM perf WHERE problem = ?1 AND device = ?2 AND solver = ?3",
                        params![p.problem, p.device, p.solver],
                    )?;
                }
                Record::Find(f) if !keep(&f.problem, &f.device, &f.solver, &f.config) => {
                    removed += tx
                        .execute("DELETE FROM find WHERE problem = ?1 AND device = ?2", params![f.problem, f.device])?;
                }
                _ => {}
            }
        }
        removed += tx.execute("DELETE FROM trial WHERE gconv_version != ?1", params![GCONV_VERSION])?;
        tx.commit()?;
        Ok(removed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn perf(problem: &str, config: &str, time_ms: f64) -> PerfRecord {
        PerfRecord {
            problem: problem.into(),
            device: "dev".into(),
            solver: "cpu.direct_blocked".into(),
            config: config.into(),
            time_ms,
            verified: true,
            gconv_version: GCONV_VERSION.into(),
            format_version: FORMAT_VERSION,
        }
    }

    fn temp_db(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("gconv-db-unit-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        dir.join("user.db")
    }

    #[test]
    fn user_layer_wins_over_system_layer() {
        let system: String = [perf("a", "rb1_kb8_lo0", 2.0), perf("b", "rb2_kb8_lo0", 3.0)]
            .into_iter()
            .map(|r| serde_json::to_string(&Record::Perf(r)).unwrap() + "\n")
            .collect();
        let path = temp_db("layers");
        let mut db = Db::open_layers(&path, &system).unwrap().0;
        let key = |problem: &str| RecordKey { problem: problem.into(), device: "dev".into() };
        assert_eq!(db.perf(&key("a"), "cpu.direct_blocked").unwrap().unwrap().config, "rb1_kb8_lo0");
        db.put_perf(&perf("a", "rb4_kb8_lo1", 1.0)).unwrap();
        assert_eq!(db.perf(&key("a"), "cpu.direct_blocked").unwrap().unwrap().config, "rb4_kb8_lo1");
        assert_eq!(db.perf(&key("b"), "cpu.direct_blocked").unwrap().unwrap().config, "rb2_kb8_lo0");
        assert!(db.perf(&key("c"), "cpu.direct_blocked").unwrap().is_none());
        // The system layer is not part of the user db: nothing of it is exported.
        assert_eq!(db.records().unwrap().len(), 1);
        std::fs::remove_dir_all(path.parent().unwrap()).unwrap();
    }

    #[test]
    fn reopening_keeps_records() {
        let path = temp_db("reopen");
        Db::open_layers(&path, "").unwrap().0.put_perf(&perf("a", "rb1_kb8_lo0", 2.0)).unwrap();
        let (db, warning) = Db::open_layers(&path, "").unwrap();
        assert_eq!(warning, None);
        assert_eq!(db.stats().unwrap().perf, 1);
        std::fs::remove_dir_all(path.parent().unwrap()).unwrap();
    }
}
