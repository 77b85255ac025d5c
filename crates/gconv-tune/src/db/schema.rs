//! The schema, and opening the user db: WAL mode, the format version, and recovery from a file
//! that is not a usable gconv db (set aside, started afresh).

use std::path::{Path, PathBuf};
use std::time::Duration;

use rusqlite::{Connection, ErrorCode};

use super::records::Warning;
use crate::error::{Result, TuneError};

/// Version of the schema and record meaning; a db written by a newer gconv is set aside.
pub const FORMAT_VERSION: i64 = 1;

pub(super) const SCHEMA: &str = "
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

/// Opens (creating if needed) the user db at `path`. A corrupt file, or one written by a newer
/// format, is renamed aside and a fresh db started; the warning says so.
pub(super) fn open_user(path: &Path) -> Result<(Connection, Option<Warning>)> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|e| TuneError::Io(format!("cannot create {}: {e}", dir.display())))?;
    }
    match try_open(path) {
        Ok(conn) => Ok((conn, None)),
        Err(OpenFailure::Other(e)) => Err(e),
        Err(OpenFailure::Unusable(reason)) => {
            let aside = set_aside(path)?;
            let warning = Warning::SetAside { path: path.to_path_buf(), aside, reason };
            match try_open(path) {
                Ok(conn) => Ok((conn, Some(warning))),
                Err(OpenFailure::Unusable(r)) => Err(TuneError::Db(r)),
                Err(OpenFailure::Other(e)) => Err(e),
            }
        }
    }
}

fn try_open(path: &Path) -> std::result::Result<Connection, OpenFailure> {
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
    let stamp =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or_default();
    let aside = PathBuf::from(format!("{}.bad-{stamp}", path.display()));
    std::fs::rename(path, &aside).map_err(|e| TuneError::Io(format!("cannot move {} aside: {e}", path.display())))?;
    for suffix in ["-wal", "-shm"] {
        let side = PathBuf::from(format!("{}{suffix}", path.display()));
        if side.exists() {
            let _ = std::fs::rename(&side, format!("{}{suffix}", aside.display()));
        }
    }
    Ok(aside)
}
