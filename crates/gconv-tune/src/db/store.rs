//! Rows in and out of one layer's tables; every write the callers make is inside their own
//! `BEGIN IMMEDIATE` transaction.

use rusqlite::{params, Connection};

use super::records::{FindRecord, PerfRecord, Record, RecordKey};
use crate::error::Result;

pub(super) fn insert_perf(conn: &Connection, p: &PerfRecord) -> Result<()> {
    conn.execute(
        "INSERT OR REPLACE INTO perf VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
        params![p.problem, p.device, p.solver, p.config, p.time_ms, p.verified, p.gconv_version, p.format_version],
    )?;
    Ok(())
}

pub(super) fn perf_row(conn: &Connection, key: &RecordKey, solver: &str) -> Result<Option<PerfRecord>> {
    let mut stmt = conn.prepare_cached(
        "SELECT config, time_ms, verified, gconv_version, format_version FROM perf
         WHERE problem = ?1 AND device = ?2 AND solver = ?3",
    )?;
    let mut rows = stmt.query(params![key.problem, key.device, solver])?;
    let Some(r) = rows.next()? else { return Ok(None) };
    Ok(Some(PerfRecord {
        problem: key.problem.clone(),
        device: key.device.clone(),
        solver: solver.to_string(),
        config: r.get(0)?,
        time_ms: r.get(1)?,
        verified: r.get(2)?,
        gconv_version: r.get(3)?,
        format_version: r.get(4)?,
    }))
}

pub(super) fn replace_find(conn: &Connection, key: &RecordKey, rows: &[FindRecord]) -> Result<()> {
    conn.execute("DELETE FROM find WHERE problem = ?1 AND device = ?2", params![key.problem, key.device])?;
    for (rank, r) in rows.iter().enumerate() {
        conn.execute(
            "INSERT INTO find VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
            params![
                key.problem,
                key.device,
                rank as i64,
                r.solver,
                r.config,
                r.time_ms,
                r.workspace_bytes as i64,
                r.verified,
                r.status,
                r.gconv_version
            ],
        )?;
    }
    Ok(())
}

pub(super) fn find_rows(conn: &Connection, key: &RecordKey) -> Result<Vec<FindRecord>> {
    let mut stmt = conn.prepare_cached(
        "SELECT rank, solver, config, time_ms, workspace_bytes, verified, status, gconv_version FROM find
         WHERE problem = ?1 AND device = ?2 ORDER BY rank",
    )?;
    let rows = stmt.query_map(params![key.problem, key.device], |r| {
        Ok(FindRecord {
            problem: key.problem.clone(),
            device: key.device.clone(),
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

/// Every perf and find record of a layer, in a stable order.
pub(super) fn all_records(conn: &Connection) -> Result<Vec<Record>> {
    let mut out = Vec::new();
    let mut stmt = conn.prepare(
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
    let mut stmt = conn.prepare("SELECT DISTINCT problem, device FROM find ORDER BY problem, device")?;
    let keys: Vec<RecordKey> = stmt
        .query_map([], |r| Ok(RecordKey { problem: r.get(0)?, device: r.get(1)? }))?
        .collect::<rusqlite::Result<_>>()?;
    for key in keys {
        out.extend(find_rows(conn, &key)?.into_iter().map(Record::Find));
    }
    Ok(out)
}
