//! `gconv db`: inspect and maintain the user database.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Subcommand};

use super::{open_db, Context, DbArgs};
use crate::{learn, runtimes, tuning};

#[derive(Debug, Args)]
pub struct DbCmd {
    #[command(subcommand)]
    pub action: DbAction,
    #[command(flatten)]
    pub db: DbArgs,
}

#[derive(Debug, Subcommand)]
pub enum DbAction {
    /// Record counts and devices
    Stats,
    /// Every record, readable
    Dump,
    /// Every perf and find record as JSON lines, or this device's timed candidates as
    /// training rows
    Export {
        /// JSON lines of perf and find records (the default)
        #[arg(long, conflicts_with = "rows")]
        jsonl: bool,
        /// Instead, a sweep CSV of every timed candidate of this device from finds and tuning,
        /// for `gconv train --append`
        #[arg(long, value_name = "CSV")]
        rows: Option<PathBuf>,
        /// Write to this file instead of standard output
        #[arg(short, long)]
        output: Option<PathBuf>,
    },
    /// Read JSON lines; imported records replace existing ones
    Import { file: PathBuf },
    /// Read JSON lines; on conflict the faster record wins
    Merge { file: PathBuf },
    /// Remove records whose solver, config or problem key this gconv no longer accepts
    Prune,
}

pub fn run(ctx: &Context<'_>, cmd: DbCmd) -> anyhow::Result<ExitCode> {
    if let DbAction::Export { rows: Some(path), .. } = &cmd.action {
        return learn::export_rows(ctx.rt, &open_db(&cmd.db)?, path);
    }
    let mut db = open_db(&cmd.db)?;
    // Each record is judged by the solvers of the runtime that owns its device key; records of
    // devices no runtime here owns are kept.
    let available = runtimes::all_available();
    let keep = |problem: &str, device: &str, solver: &str, config: &str| match available
        .iter()
        .find(|r| r.owns_device_key(device))
    {
        Some(owner) => tuning::usable(owner.as_ref(), problem, solver, config),
        None => true,
    };
    tuning::db(&mut db, cmd.action, &keep)
}
