//! The perf-db (best config per solver), the find-db (ranked solvers per problem) and tuning
//! trials, in SQLite. Two layers: a read-only system layer shipped with gconv under a writable
//! user layer; lookups try the user layer first.
//!
//! Every write is one `BEGIN IMMEDIATE` transaction, so several processes can share a user db
//! (WAL mode, busy timeout) and a killed process loses at most the measurement in flight.

use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use rusqlite::{params, Connection, ErrorCode, OptionalExtension, TransactionBehavior};
use serde::{Deserialize, Serialize};

use crate::error::{Result, TuneError};

/// Version of the schema and record meaning; a db written by a newer gconv is set aside.
pub const FORMAT_VERSION: i64 = 1;
pub const GCONV_VERSION: &str = env!("CARGO_PKG_VERSION");

/// The system layer: records for known devices, shipped in the repository as JSON lines.
const SYSTEM_RECORDS: &str = include_str!("../../../data/system-db.jsonl");

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS perf (
    problem TEXT NOT NULL, device TEXT NOT NULL, solver TEXT NOT NULL,
    config TEXT NOT NULL, time_ms REAL NOT NULL, verified INTEGER NOT NULL,
    gconv_version TEXT NOT NULL, format_version INTEGER NOT NULL,
    PRIMARY KEY (problem, device, solver));
CREATE TABLE IF NOT EXISTS find (
    problem TEXT NOT NULL, device TEXT NOT NULL, rank INTEGER NOT NULL,
    solver TEXT NOT NULL, config TEXT NOT NULL, time_ms REAL, workspace_bytes INTEGER NOT NULL,
    verified INTEGER NOT NULL, status TEXT NOT NULL, gconv_version TEXT NOT NULL,
    PRIMARY KEY (problem, device, rank));
CREATE TABLE IF NOT EXISTS trial (
    problem TEXT NOT NULL, device TEXT NOT NULL, solver TEXT NOT NULL, config TEXT NOT NULL,
    time_ms REAL, status TEXT NOT NULL, gconv_version TEXT NOT NULL,
    PRIMARY KEY (problem, device, solver, config));
";

/// The best known config of one solver for one problem on one device.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PerfRecord {
    pub problem: String,
    pub device: String,
    pub solver: String,
    pub config: String,
    pub time_ms: f64,
    pub verified: bool,
    pub gconv_version: String,
    pub format_version: i64,
}

/// One row of a find result: candidates ranked fastest first, failures last.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FindRecord {
    pub problem: String,
    pub device: String,
    pub rank: u32,
    pub solver: String,
    pub config: String,
    pub time_ms: Option<f64>,
    pub workspace_bytes: u64,
    pub verified: bool,
    /// `ok`, `time-boxed`, or why the candidate did not run or failed.
    pub status: String,
    pub gconv_version: String,
}

/// One measured config during tuning; what makes a killed tuning run resumable.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TrialRecord {
    pub problem: String,
    pub device: String,
    pub solver: String,
    pub config: String,
    pub time_ms: Option<f64>,
    pub status: String,
}

/// A record as one line of an export.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "table", rename_all = "lowercase")]
pub enum Record {
    Perf(PerfRecord),
    Find(FindRecord),
}

/// How imported records meet existing ones.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ImportMode {
    /// The imported record wins.
    Replace,
    /// The faster record wins: perf by time, find lists by their best time.
    KeepFaster,
}

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
    /// Things the user should know about: files set aside, records skipped.
    pub warnings: Vec<String>,
}

/// gconv's folder under the user's cache directory: the user db, the kernel cache.
pub fn default_cache_dir() -> PathBuf {
    dirs::cache_dir().unwrap_or_else(std::env::temp_dir).join("gconv")
}

/// The default user db.
pub fn default_user_path() -> PathBuf {
    default_cache_dir().join("user.db")
}

enum OpenFailure {
    /// Not a usable gconv db: set it aside and start afresh.
    Unusable(String),
    Other(TuneError),
}

impl From<rusqlite::Error> for OpenFailure {
    fn from(e: rusqlite::Error) -> Self {
        match e.sqlite_error_code() {
            Some(ErrorCode::NotADatabase | ErrorCode::DatabaseCorrupt) => OpenFailure::Unusable(e.to_string()),
            _ => OpenFailure::Other(e.into()),
        }
    }
}

impl Db {
    /// Opens (creating if needed) the user db at `path` over the shipped system layer.
    /// A corrupt file, or one written by a newer format, is renamed aside with a warning.
    pub fn open(path: &Path) -> Result<Db> {
        Self::open_layers(path, SYSTEM_RECORDS)
    }

    /// As [`Db::open`], with the system layer read from `system_records` (JSON lines).
    pub fn open_layers(path: &Path, system_records: &str) -> Result<Db> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)
                .map_err(|e| TuneError::Io(format!("cannot create {}: {e}", dir.display())))?;
        }
        let mut warnings = Vec::new();
        let user = match open_user(path) {
            Ok(conn) => conn,
            Err(OpenFailure::Other(e)) => return Err(e),
            Err(OpenFailure::Unusable(reason)) => {
                let aside = set_aside(path)?;
                warnings.push(format!(
                    "{} is not a usable gconv database ({reason}); moved it to {} and started a fresh one",
                    path.display(),
                    aside.display()
                ));
                match open_user(path) {
                    Ok(conn) => conn,
                    Err(OpenFailure::Unusable(r)) => return Err(TuneError::Db(r)),
                    Err(OpenFailure::Other(e)) => return Err(e),
                }
            }
        };
        let mut system = Connection::open_in_memory()?;
        system.execute_batch(SCHEMA)?;
        import_into(&mut system, system_records.as_bytes(), ImportMode::Replace)?;
        Ok(Db { user, user_path: path.to_path_buf(), system, warnings })
    }

    pub fn path(&self) -> &Path {
        &self.user_path
    }

    fn layers(&self) -> [&Connection; 2] {
        [&self.user, &self.system]
    }

    pub fn perf(&self, problem: &str, device: &str, solver: &str) -> Result<Option<PerfRecord>> {
        for conn in self.layers() {
            let mut stmt = conn.prepare_cached(
                "SELECT config, time_ms, verified, gconv_version, format_version FROM perf
                 WHERE problem = ?1 AND device = ?2 AND solver = ?3",
            )?;
            let found = stmt
                .query_row(params![problem, device, solver], |r| {
                    Ok(PerfRecord {
                        problem: problem.to_string(),
                        device: device.to_string(),
                        solver: solver.to_string(),
                        config: r.get(0)?,
                        time_ms: r.get(1)?,
                        verified: r.get(2)?,
                        gconv_version: r.get(3)?,
                        format_version: r.get(4)?,
                    })
                })
                .optional()?;
            if found.is_some() {
                return Ok(found);
            }
        }
        Ok(None)
    }

    /// The ranked find result of the first layer that has one.
    pub fn find(&self, problem: &str, device: &str) -> Result<Option<Vec<FindRecord>>> {
        for conn in self.layers() {
            let rows = find_rows(conn, problem, device)?;
            if !rows.is_empty() {
                return Ok(Some(rows));
            }
        }
        Ok(None)
    }

    /// (solver, config) of the verified, fully timed rows of the first layer that has a find
    /// result, fastest first: the part of a find result that selection needs, read cheaply.
    pub fn find_ranked_ok(&self, problem: &str, device: &str) -> Result<Option<Vec<(String, String)>>> {
        for conn in self.layers() {
            let mut stmt = conn.prepare_cached(
                "SELECT solver, config, status = 'ok' FROM find WHERE problem = ?1 AND device = ?2 ORDER BY rank",
            )?;
            let mut rows = stmt.query(params![problem, device])?;
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
    pub fn put_find(&mut self, problem: &str, device: &str, rows: &[FindRecord]) -> Result<()> {
        let tx = self.user.transaction_with_behavior(TransactionBehavior::Immediate)?;
        replace_find(&tx, problem, device, rows)?;
        tx.commit()?;
        Ok(())
    }

    pub fn trials(&self, problem: &str, device: &str, solver: &str) -> Result<Vec<TrialRecord>> {
        let mut stmt = self.user.prepare_cached(
            "SELECT config, time_ms, status FROM trial
             WHERE problem = ?1 AND device = ?2 AND solver = ?3 AND gconv_version = ?4",
        )?;
        let rows = stmt.query_map(params![problem, device, solver, GCONV_VERSION], |r| {
            Ok(TrialRecord {
                problem: problem.to_string(),
                device: device.to_string(),
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

    /// Every perf and find record of the user layer, in a stable order.
    pub fn records(&self) -> Result<Vec<Record>> {
        let mut out = Vec::new();
        let mut stmt = self.user.prepare(
            "SELECT problem, device, solver, config, time_ms, verified, gconv_version, format_version
             FROM perf ORDER BY problem, device, solver",
        )?;
        let perf = stmt.query_map([], |r| {
            Ok(Record::Perf(PerfRecord {
                problem: r.get(0)?,
                device: r.get(1)?,
                solver: r.get(2)?,
                config: r.get(3)?,
                time_ms: r.get(4)?,
                verified: r.get(5)?,
                gconv_version: r.get(6)?,
                format_version: r.get(7)?,
            }))
        })?;
        for record in perf {
            out.push(record?);
        }
        let mut stmt = self.user.prepare("SELECT DISTINCT problem, device FROM find ORDER BY problem, device")?;
        let keys: Vec<(String, String)> =
            stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?.collect::<rusqlite::Result<_>>()?;
        for (problem, device) in keys {
            out.extend(find_rows(&self.user, &problem, &device)?.into_iter().map(Record::Find));
        }
        Ok(out)
    }

    pub fn export_jsonl(&self, mut out: impl Write) -> Result<usize> {
        let records = self.records()?;
        for r in &records {
            serde_json::to_writer(&mut out, r).map_err(|e| TuneError::Io(e.to_string()))?;
            writeln!(out).map_err(|e| TuneError::Io(e.to_string()))?;
        }
        Ok(records.len())
    }

    /// Reads JSON lines of [`Record`]s into the user layer in one transaction: all or nothing.
    /// Returns how many records were taken.
    pub fn import_jsonl(&mut self, input: impl BufRead, mode: ImportMode) -> Result<usize> {
        import_into(&mut self.user, input, mode)
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
                    removed += tx.execute(
                        "DELETE FROM find WHERE problem = ?1 AND device = ?2",
                        params![f.problem, f.device],
                    )?;
                }
                _ => {}
            }
        }
        removed += tx.execute("DELETE FROM trial WHERE gconv_version != ?1", params![GCONV_VERSION])?;
        tx.commit()?;
        Ok(removed)
    }
}

fn import_into(conn: &mut Connection, input: impl BufRead, mode: ImportMode) -> Result<usize> {
    let mut perf = Vec::new();
    let mut finds: Vec<((String, String), Vec<FindRecord>)> = Vec::new();
    for (i, line) in input.lines().enumerate() {
        let line = line.map_err(|e| TuneError::Io(e.to_string()))?;
        if line.trim().is_empty() {
            continue;
        }
        let record: Record = serde_json::from_str(&line)
            .map_err(|e| TuneError::Import(format!("line {}: {e}", i + 1)))?;
        match record {
            Record::Perf(p) => perf.push(p),
            Record::Find(f) => {
                let key = (f.problem.clone(), f.device.clone());
                match finds.iter_mut().find(|(k, _)| *k == key) {
                    Some((_, rows)) => rows.push(f),
                    None => finds.push((key, vec![f])),
                }
            }
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
    for ((problem, device), mut rows) in finds {
        rows.sort_by_key(|r| r.rank);
        let existing = find_rows(&tx, &problem, &device)?;
        if mode == ImportMode::Replace || best_time(&existing).is_none_or(|t| best_time(&rows).is_some_and(|n| n < t)) {
            replace_find(&tx, &problem, &device, &rows)?;
            taken += rows.len();
        }
    }
    tx.commit()?;
    Ok(taken)
}

fn best_time(rows: &[FindRecord]) -> Option<f64> {
    rows.iter().filter(|r| r.status == crate::outcome::STATUS_OK).filter_map(|r| r.time_ms).reduce(f64::min)
}

fn insert_perf(conn: &Connection, p: &PerfRecord) -> Result<()> {
    conn.execute(
        "INSERT OR REPLACE INTO perf VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
        params![p.problem, p.device, p.solver, p.config, p.time_ms, p.verified, p.gconv_version, p.format_version],
    )?;
    Ok(())
}

fn replace_find(conn: &Connection, problem: &str, device: &str, rows: &[FindRecord]) -> Result<()> {
    conn.execute("DELETE FROM find WHERE problem = ?1 AND device = ?2", params![problem, device])?;
    for (rank, r) in rows.iter().enumerate() {
        conn.execute(
            "INSERT INTO find VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
            params![problem, device, rank as i64, r.solver, r.config, r.time_ms, r.workspace_bytes as i64, r.verified, r.status, r.gconv_version],
        )?;
    }
    Ok(())
}

fn find_rows(conn: &Connection, problem: &str, device: &str) -> Result<Vec<FindRecord>> {
    let mut stmt = conn.prepare_cached(
        "SELECT rank, solver, config, time_ms, workspace_bytes, verified, status, gconv_version FROM find
         WHERE problem = ?1 AND device = ?2 ORDER BY rank",
    )?;
    let rows = stmt.query_map(params![problem, device], |r| {
        Ok(FindRecord {
            problem: problem.to_string(),
            device: device.to_string(),
            rank: r.get(0)?,
            solver: r.get(1)?,
            config: r.get(2)?,
            time_ms: r.get(3)?,
            workspace_bytes: r.get::<_, i64>(4)? as u64,
            verified: r.get(5)?,
            status: r.get(6)?,
            gconv_version: r.get(7)?,
        })
    })?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}

fn open_user(path: &Path) -> std::result::Result<Connection, OpenFailure> {
    let conn = Connection::open(path)?;
    conn.busy_timeout(Duration::from_secs(60))?;
    // Reading the journal mode is the first read of the file: a foreign file fails here.
    let mode: String = conn.query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0))?;
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(OpenFailure::Other(TuneError::Db(format!("{} cannot use WAL mode (got {mode})", path.display()))));
    }
    let version: i64 = conn.query_row("PRAGMA user_version", [], |r| r.get(0))?;
    if version > FORMAT_VERSION {
        return Err(OpenFailure::Unusable(format!(
            "written by a newer gconv: format {version}, this gconv reads format {FORMAT_VERSION}"
        )));
    }
    let check: String = conn.query_row("PRAGMA quick_check(1)", [], |r| r.get(0))?;
    if check != "ok" {
        return Err(OpenFailure::Unusable(format!("integrity check failed: {check}")));
    }
    if version < FORMAT_VERSION {
        conn.execute_batch(&format!("BEGIN IMMEDIATE; {SCHEMA} PRAGMA user_version = {FORMAT_VERSION}; COMMIT;"))?;
    }
    Ok(conn)
}

/// Renames a db (and its WAL and shared-memory files) to `<name>.bad-<unix seconds>`.
fn set_aside(path: &Path) -> Result<PathBuf> {
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or_default();
    let aside = PathBuf::from(format!("{}.bad-{stamp}", path.display()));
    std::fs::rename(path, &aside)
        .map_err(|e| TuneError::Io(format!("cannot move {} aside: {e}", path.display())))?;
    for suffix in ["-wal", "-shm"] {
        let side = PathBuf::from(format!("{}{suffix}", path.display()));
        if side.exists() {
            let _ = std::fs::rename(&side, format!("{}{suffix}", aside.display()));
        }
    }
    Ok(aside)
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
        let mut db = Db::open_layers(&path, &system).unwrap();
        assert_eq!(db.perf("a", "dev", "cpu.direct_blocked").unwrap().unwrap().config, "rb1_kb8_lo0");
        db.put_perf(&perf("a", "rb4_kb8_lo1", 1.0)).unwrap();
        assert_eq!(db.perf("a", "dev", "cpu.direct_blocked").unwrap().unwrap().config, "rb4_kb8_lo1");
        assert_eq!(db.perf("b", "dev", "cpu.direct_blocked").unwrap().unwrap().config, "rb2_kb8_lo0");
        assert!(db.perf("c", "dev", "cpu.direct_blocked").unwrap().is_none());
        // The system layer is not part of the user db: nothing of it is exported.
        assert_eq!(db.records().unwrap().len(), 1);
        std::fs::remove_dir_all(path.parent().unwrap()).unwrap();
    }

    #[test]
    fn reopening_keeps_records() {
        let path = temp_db("reopen");
        Db::open_layers(&path, "").unwrap().put_perf(&perf("a", "rb1_kb8_lo0", 2.0)).unwrap();
        let db = Db::open_layers(&path, "").unwrap();
        assert!(db.warnings.is_empty());
        assert_eq!(db.stats().unwrap().perf, 1);
        std::fs::remove_dir_all(path.parent().unwrap()).unwrap();
    }
}
