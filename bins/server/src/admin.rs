//! `server migrate`, `server check` and `server backup`: the operator's commands on a database.

use anyhow::Result;
use clap::Args;

use crate::backend;

/// Flags of `migrate` and `check`.
#[derive(Debug, Args)]
pub struct DbArgs {
    /// The database: an SQLite file, or a postgres:// URL [default: ./datanode.sqlite].
    #[arg(long, env = "DATANODE_DB", value_name = "PATH|URL")]
    db: Option<String>,
}

/// Flags of `migrate`.
#[derive(Debug, Args)]
pub struct MigrateArgs {
    #[command(flatten)]
    db: DbArgs,
    /// PostgreSQL only: the hash partitions of each table of segments, made once, when the
    /// schema is created or reaches version 8 (a database partitioned already keeps its count,
    /// and another is refused); 1 to 1024 [default: 16].
    #[arg(long, value_name = "N")]
    partitions: Option<u32>,
}

/// `migrate`: creates or upgrades the schema, then says what it did.
pub fn migrate(args: MigrateArgs) -> Result<()> {
    let db = match args.partitions {
        Some(partitions) => backend::partitioned(args.db.db.as_deref(), partitions)?,
        None => backend::backend(args.db.db.as_deref())?,
    };
    let done = backend::migrate(&*db)?;
    println!("{}: {done}", db.describe());
    Ok(())
}

/// Flags of `backup`.
#[derive(Debug, Args)]
pub struct BackupArgs {
    #[command(flatten)]
    db: DbArgs,
    /// The copy to write: a new file (an existing one is refused).
    #[arg(value_name = "OUT")]
    out: std::path::PathBuf,
}

/// `backup`: copies an SQLite database as of one commit while it is served and written.
pub fn backup(args: BackupArgs) -> Result<()> {
    let db = backend::backend(args.db.db.as_deref())?;
    let done = backend::backup(&*db, &args.out)?;
    println!("{}: {done}", db.describe());
    Ok(())
}

/// Flags of `check`.
#[derive(Debug, Args)]
pub struct CheckArgs {
    #[command(flatten)]
    db: DbArgs,
    /// Read and verify every stored unit (each segment's and datum's checksum and index) and
    /// the store's own integrity (SQLite's `PRAGMA integrity_check`), print what is damaged and
    /// what it affects, and fail when anything is; progress on standard error. Reads only.
    #[arg(long)]
    deep: bool,
}

/// `check`: reads the database as `serve` would, failing on anything it cannot serve; with
/// `--deep`, reads all of it.
pub fn check(args: CheckArgs) -> Result<()> {
    let db = backend::backend(args.db.db.as_deref())?;
    let done = if args.deep {
        backend::check_deep(&*db)?
    } else {
        backend::check(&*db)?
    };
    println!("{}: {done}", db.describe());
    Ok(())
}
