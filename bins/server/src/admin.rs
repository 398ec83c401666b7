//! `server migrate` and `server check`: the operator's commands on a database.

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

/// `migrate`: creates or upgrades the schema, then says what it did.
pub fn migrate(args: DbArgs) -> Result<()> {
    let db = backend::backend(args.db.as_deref())?;
    let done = backend::migrate(&*db)?;
    println!("{}: {done}", db.describe());
    Ok(())
}

/// `check`: reads the database as `serve` would, failing on anything it cannot serve.
pub fn check(args: DbArgs) -> Result<()> {
    let db = backend::backend(args.db.as_deref())?;
    let done = backend::check(&*db)?;
    println!("{}: {done}", db.describe());
    Ok(())
}
