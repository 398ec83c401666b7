//! Schema and versioned migrations, applied on open.
//!
//! `PRAGMA user_version` holds the number of migrations applied; each migration runs in its own
//! transaction. A database from a newer version of this program is refused rather than guessed at.

use rusqlite::Connection;

use super::map_err;
use crate::Error;

/// Migrations in order; the database's `user_version` is how many of them it has.
const MIGRATIONS: &[&str] = &[
    // 1: the initial layout.
    "
    CREATE TABLE schema_info (key TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID;
    INSERT INTO schema_info VALUES ('created_by', 'vega-datanode-lite');

    -- Dictionaries keep the clustered keys below short: 32-byte ids become small integers.
    CREATE TABLE parties (id INTEGER PRIMARY KEY, hex BLOB NOT NULL UNIQUE);
    CREATE TABLE assets (id INTEGER PRIMARY KEY, hex BLOB NOT NULL UNIQUE);
    CREATE TABLE oracle_specs (id INTEGER PRIMARY KEY, hex BLOB NOT NULL UNIQUE);

    -- One row per (ledger entry, party owning one of its accounts), stored as the finished CSV
    -- line for that party. Clustered so that one party's rows of one asset are contiguous and in
    -- the total order: an export is a range scan with no sort and no other party's rows.
    CREATE TABLE ledger_rows (
        party INTEGER NOT NULL,
        asset INTEGER NOT NULL,
        vega_time INTEGER NOT NULL,
        block INTEGER NOT NULL,
        seq INTEGER NOT NULL,
        idx INTEGER NOT NULL,
        csv BLOB NOT NULL,
        PRIMARY KEY (party, asset, vega_time, block, seq, idx)
    ) WITHOUT ROWID;

    -- Oracle data clustered by position, each stored as its finished Vega JSON node.
    CREATE TABLE oracle_data (
        vega_time INTEGER NOT NULL,
        block INTEGER NOT NULL,
        seq INTEGER NOT NULL,
        json BLOB NOT NULL,
        PRIMARY KEY (vega_time, block, seq)
    ) WITHOUT ROWID;

    -- Which data matched which spec, clustered by (spec, position) for keyset pages per spec.
    CREATE TABLE oracle_spec_data (
        spec INTEGER NOT NULL,
        vega_time INTEGER NOT NULL,
        block INTEGER NOT NULL,
        seq INTEGER NOT NULL,
        PRIMARY KEY (spec, vega_time, block, seq)
    ) WITHOUT ROWID;

    -- Ingest progress per block, for idempotent re-runs that may start inside a block.
    CREATE TABLE blocks (
        height INTEGER PRIMARY KEY,
        vega_time INTEGER,
        last_seq INTEGER NOT NULL
    );
    ",
];

/// Brings the database to the latest schema version.
pub(super) fn migrate(conn: &mut Connection) -> Result<(), Error> {
    // The page size can only change before the first table exists; 8 KiB pages hold about
    // eighteen CSV rows each, halving b-tree steps of long scans against the 4 KiB default.
    conn.execute_batch(
        "PRAGMA page_size = 8192; PRAGMA journal_mode = WAL; PRAGMA synchronous = NORMAL;",
    )
    .map_err(map_err)?;
    let version: i64 = conn
        .query_row("PRAGMA user_version", [], |row| row.get(0))
        .map_err(map_err)?;
    let known = MIGRATIONS.len() as i64;
    if version > known {
        return Err(Error::Corrupt(format!(
            "database schema version {version} is newer than this program's {known}"
        )));
    }
    for (version, sql) in (1i64..).zip(MIGRATIONS).skip(version as usize) {
        let tx = conn.transaction().map_err(map_err)?;
        tx.execute_batch(sql).map_err(map_err)?;
        tx.pragma_update(None, "user_version", version)
            .map_err(map_err)?;
        tx.commit().map_err(map_err)?;
    }
    Ok(())
}
