//! Schema and versioned migrations, applied on open.
//!
//! `PRAGMA user_version` holds the number of migrations applied; each migration runs in its own
//! transaction. A database from a newer version of this program is refused rather than guessed at,
//! and so is one written in another row format ([`ROW_FORMAT`]) or one that is not ours at all:
//! only a new or empty file gets our schema, anyone else's database is left untouched.

use std::path::Path;
use std::time::Duration;

use rusqlite::functions::FunctionFlags;
use rusqlite::{Connection, ErrorCode, Transaction, TransactionBehavior, params};

use super::map_err;
use super::segments::{ALL_DATA, ORACLE, Segments};
use crate::backend::Migrated;
use crate::error::{ROW_FORMAT, Upgrade, row_format_mismatch, upgradable, upgrade_needed};
use crate::segment::{Engine, Line, LineKey};
use crate::{Error, Incompatible, checksum};

/// The value of `created_by` in `schema_info` that marks a database as ours.
const CREATED_BY: &str = "vega-datanode-lite";

/// Migrations in order; the database's `user_version` is how many of them it has.
pub(super) const MIGRATIONS: &[&str] = &[
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
    // 2: the row format beside the schema version. Databases from before this migration hold
    // rows of format 1, so the literal is 1 whatever `ROW_FORMAT` says today.
    "INSERT INTO schema_info VALUES ('row_format', '1');",
    // 3: row format 2, ledger segments (`segment.rs`). A party's lines in the total order across
    // all its assets, in blobs of about 256 KiB, keyed by the party and the last line's key: an
    // export is one range search over the party's segments and copies most of them whole.
    // `csv` comes before `keys` in the record, so a whole segment is read without touching the
    // overflow pages of its index. `migrate` refuses to run it over ledger rows of format 1
    // (the oracle tables are the same in both formats).
    "
    CREATE TABLE ledger_segments (
        party INTEGER NOT NULL,
        last_time INTEGER NOT NULL,
        last_block INTEGER NOT NULL,
        last_seq INTEGER NOT NULL,
        last_idx INTEGER NOT NULL,
        first_time INTEGER NOT NULL,
        lines INTEGER NOT NULL,
        csv BLOB NOT NULL,
        keys BLOB NOT NULL,
        PRIMARY KEY (party, last_time, last_block, last_seq, last_idx)
    ) WITHOUT ROWID;
    DROP TABLE ledger_rows;
    UPDATE schema_info SET value = '2' WHERE key = 'row_format';
    ",
    // 4: row format 3, in which PostgreSQL compresses its segments. SQLite stores the bytes of
    // format 2 unchanged, so a database of format 2 was simply relabelled; one of any other
    // format keeps it. Since row format 4 `migrate` refuses a database of format 2 or 3 before
    // it gets here.
    "UPDATE schema_info SET value = '3' WHERE key = 'row_format' AND value = '2';",
    // 5: segments in a rowid table, found through an index of their keys. In a WITHOUT ROWID
    // table a segment's whole record is its b-tree key, and SQLite compares a key that spills
    // onto overflow pages by first copying the whole record, a quarter of a megabyte here: every
    // seek of the writer and every row step of an export copied whole segments only to compare
    // their first five integers (12 % of the writer's time went to those copies). The index's
    // entries are those five integers and a rowid; the table's b-tree is keyed by the rowid
    // alone. The segments' bytes are unchanged, so the row format is too.
    "
    CREATE TABLE ledger_segments_by_rowid (
        party INTEGER NOT NULL,
        last_time INTEGER NOT NULL,
        last_block INTEGER NOT NULL,
        last_seq INTEGER NOT NULL,
        last_idx INTEGER NOT NULL,
        first_time INTEGER NOT NULL,
        lines INTEGER NOT NULL,
        csv BLOB NOT NULL,
        keys BLOB NOT NULL
    );
    INSERT INTO ledger_segments_by_rowid
        SELECT party, last_time, last_block, last_seq, last_idx, first_time, lines, csv, keys
        FROM ledger_segments ORDER BY party, last_time, last_block, last_seq, last_idx;
    DROP TABLE ledger_segments;
    ALTER TABLE ledger_segments_by_rowid RENAME TO ledger_segments;
    CREATE UNIQUE INDEX ledger_segments_key
        ON ledger_segments (party, last_time, last_block, last_seq, last_idx);
    ",
    // 6: blocks identified by height and `seq_base`, with their hash. A real core's stream
    // begins with two blocks of its first height (the genesis or checkpoint block, then the
    // first real one), whose events both count from 1: the second one's rows are keyed after
    // the first one's by `seq_base`. Blocks stored before carry no hash and a `seq_base` of 0.
    // The chain id, once known, is `schema_info`'s `chain_id`.
    "
    CREATE TABLE blocks_by_hash (
        height INTEGER NOT NULL,
        seq_base INTEGER NOT NULL,
        hash TEXT,
        vega_time INTEGER,
        last_seq INTEGER NOT NULL,
        PRIMARY KEY (height, seq_base)
    ) WITHOUT ROWID;
    INSERT INTO blocks_by_hash SELECT height, 0, NULL, vega_time, last_seq FROM blocks;
    DROP TABLE blocks;
    ALTER TABLE blocks_by_hash RENAME TO blocks;
    ",
    // 7: row format 5 (6 today), a checksum beside every blob (`checksum.rs`), computed here by the
    // `checksum` function `migrate` registers: today's checksum, so that a database of format 4
    // is labelled with today's format (6) at once, and migration 8 leaves it. (Until format 6
    // this computed format 5's CRC32C and labelled format 5.) The checksums come before the
    // blobs in the record, so that reading them never walks a blob's overflow pages (columns
    // added at the end would sit behind `keys`): both tables are rebuilt, every row copied. The
    // lines are those of format 4, so a database of format 4 is upgraded in place; only
    // `server migrate` runs this over rows (`migrate`'s `upgrade`). Checksums computed here
    // vouch for the bytes as they are now: damage from before the upgrade is only found by
    // `server check --deep` (which checks every segment's index) or not at all.
    "
    CREATE TABLE ledger_segments_summed (
        party INTEGER NOT NULL,
        last_time INTEGER NOT NULL,
        last_block INTEGER NOT NULL,
        last_seq INTEGER NOT NULL,
        last_idx INTEGER NOT NULL,
        first_time INTEGER NOT NULL,
        lines INTEGER NOT NULL,
        csv_sum INTEGER NOT NULL,
        keys_sum INTEGER NOT NULL,
        csv BLOB NOT NULL,
        keys BLOB NOT NULL
    );
    INSERT INTO ledger_segments_summed
        SELECT party, last_time, last_block, last_seq, last_idx, first_time, lines,
               checksum(csv), checksum(keys), csv, keys
        FROM ledger_segments ORDER BY party, last_time, last_block, last_seq, last_idx;
    DROP TABLE ledger_segments;
    ALTER TABLE ledger_segments_summed RENAME TO ledger_segments;
    CREATE UNIQUE INDEX ledger_segments_key
        ON ledger_segments (party, last_time, last_block, last_seq, last_idx);
    CREATE TABLE oracle_data_summed (
        vega_time INTEGER NOT NULL,
        block INTEGER NOT NULL,
        seq INTEGER NOT NULL,
        sum INTEGER NOT NULL,
        json BLOB NOT NULL,
        PRIMARY KEY (vega_time, block, seq)
    ) WITHOUT ROWID;
    INSERT INTO oracle_data_summed
        SELECT vega_time, block, seq, checksum(json), json FROM oracle_data;
    DROP TABLE oracle_data;
    ALTER TABLE oracle_data_summed RENAME TO oracle_data;
    UPDATE schema_info SET value = '6' WHERE key = 'row_format' AND value = '4';
    ",
    // 8: row format 6, XXH3 checksums instead of format 5's CRC32C (`checksum.rs`): every sum
    // of a database of format 5 replaced in place by the `upgraded_sum` function `migrate`
    // registers, which compares the old sum first and stores one that never matches where it
    // did not (`checksum::carried`), so damage from before stays found. The blobs are
    // unchanged. Only `server migrate` runs this over rows; a database of any other format
    // (one that migration 7 just upgraded from format 4, a new one) is left as it is.
    "
    UPDATE ledger_segments
        SET csv_sum = upgraded_sum(csv, csv_sum), keys_sum = upgraded_sum(keys, keys_sum)
        WHERE (SELECT value FROM schema_info WHERE key = 'row_format') = '5';
    UPDATE oracle_data SET sum = upgraded_sum(json, sum)
        WHERE (SELECT value FROM schema_info WHERE key = 'row_format') = '5';
    UPDATE schema_info SET value = '6' WHERE key = 'row_format' AND value = '5';
    ",
    // 9: oracle data in segments (`segments.rs`, table `ORACLE`), as PostgreSQL's are since its
    // schema 5: per spec the data that matched it, and under spec 0 every datum, each line a
    // datum's finished JSON, in segments of about 16 KiB found through the index of their
    // keys. A page of a hundred reads three or four segments instead of stepping a hundred
    // rows, reading four columns of each and joining the spec's rows to the data. The stored
    // bytes are those of row format 6; the rows of `oracle_data` and `oracle_spec_data` are
    // moved by `oracle_into_segments`, which then drops both tables.
    "
    CREATE TABLE oracle_segments (
        spec INTEGER NOT NULL,
        last_time INTEGER NOT NULL,
        last_block INTEGER NOT NULL,
        last_seq INTEGER NOT NULL,
        last_idx INTEGER NOT NULL,
        first_time INTEGER NOT NULL,
        lines INTEGER NOT NULL,
        json_sum INTEGER NOT NULL,
        keys_sum INTEGER NOT NULL,
        json BLOB NOT NULL,
        keys BLOB NOT NULL
    );
    CREATE UNIQUE INDEX oracle_segments_key
        ON oracle_segments (spec, last_time, last_block, last_seq, last_idx);
    ",
];

/// The migration whose SQL is followed by [`oracle_into_segments`].
const ORACLE_SEGMENTS: i64 = 9;

/// Rows moved per batch by [`oracle_into_segments`]: a writer's batch, about.
const MOVE_ROWS: i64 = 50_000;

/// Migration 9's step: the rows of `oracle_data` (every datum, under [`ALL_DATA`]) and of
/// `oracle_spec_data` (each match, under its spec), read in key order a batch at a time, laid
/// into `oracle_segments` as the writer lays a batch; then both tables dropped. Every datum's
/// checksum is compared on the way: a segment that holds a datum damaged before the move is
/// stored with a checksum that never matches it (`checksum::carried`), so that damage stays
/// found by every read and by the scrub instead of being vouched for by a new checksum.
fn oracle_into_segments(tx: &Transaction<'_>) -> Result<(), Error> {
    let data: i64 = tx
        .query_row("SELECT count(*) FROM oracle_data", [], |row| row.get(0))
        .map_err(map_err)?;
    if data > 0 {
        // Said before it starts (6 s for the standard dataset's million data), so that a long
        // move is not taken for a hang.
        tracing::info!(
            "schema 9: moving {data} oracle data and their matches into segments, in one \
             transaction"
        );
    }
    let mut engine = Engine::new(ORACLE.packing);
    let mut damaged = Vec::new();
    // Each statement reads the rows after the last one moved (owner `?1`, position `?2..?4`).
    for sql in [
        format!(
            "SELECT {ALL_DATA}, d.vega_time, d.block, d.seq, d.json, d.sum FROM oracle_data d \
             WHERE ?1 <= {ALL_DATA} AND (d.vega_time, d.block, d.seq) > (?2, ?3, ?4) \
             ORDER BY d.vega_time, d.block, d.seq LIMIT ?5"
        ),
        "SELECT s.spec, s.vega_time, s.block, s.seq, d.json, d.sum FROM oracle_spec_data s \
         JOIN oracle_data d ON d.vega_time = s.vega_time AND d.block = s.block AND d.seq = s.seq \
         WHERE (s.spec, s.vega_time, s.block, s.seq) > (?1, ?2, ?3, ?4) \
         ORDER BY s.spec, s.vega_time, s.block, s.seq LIMIT ?5"
            .to_owned(),
    ] {
        let mut after = (i64::MIN, (i64::MIN, i64::MIN, i64::MIN, 0));
        loop {
            let rows: Vec<(i64, LineKey, Vec<u8>, i64)> = tx
                .prepare(&sql)
                .and_then(|mut stmt| {
                    let (owner, (time, block, seq, _)) = after;
                    stmt.query_map(params![owner, time, block, seq, MOVE_ROWS], |row| {
                        let key = (row.get(1)?, row.get(2)?, row.get(3)?, 0);
                        Ok((row.get(0)?, key, row.get(4)?, row.get(5)?))
                    })?
                    .collect()
                })
                .map_err(map_err)?;
            let Some(&(owner, key, ..)) = rows.last() else {
                break;
            };
            after = (owner, key);
            let mut lines = Vec::with_capacity(rows.len());
            for (owner, key, json, sum) in &rows {
                let stored = checksum::from_sql("json", *sum)?;
                if checksum::verify("json", json, stored).is_err() {
                    damaged.push((*owner, *key));
                }
                let line = Line {
                    key: *key,
                    asset: 0,
                    csv: &json[..],
                };
                lines.push((*owner, line));
            }
            let mut table = Segments {
                table: &ORACLE,
                conn: tx,
            };
            engine.store(&mut table, lines)?;
        }
    }
    for (owner, (time, block, seq, idx)) in damaged {
        let (rowid, sum): (i64, i64) = tx
            .query_row(
                "SELECT rowid, json_sum FROM oracle_segments WHERE spec = ?1 \
                 AND (last_time, last_block, last_seq, last_idx) >= (?2, ?3, ?4, ?5) \
                 ORDER BY last_time, last_block, last_seq, last_idx LIMIT 1",
                params![owner, time, block, seq, idx],
                |row| Ok((row.get(0)?, row.get(1)?)),
            )
            .map_err(map_err)?;
        let sum = checksum::carried(checksum::from_sql("json", sum)?, false);
        tx.execute(
            "UPDATE oracle_segments SET json_sum = ?1 WHERE rowid = ?2",
            params![checksum::to_sql(sum), rowid],
        )
        .map_err(map_err)?;
    }
    tx.execute_batch("DROP TABLE oracle_spec_data; DROP TABLE oracle_data;")
        .map_err(map_err)?;
    if data > 0 {
        tracing::info!("schema 9: oracle data moved into segments");
    }
    Ok(())
}

/// Brings the database to the latest schema version, after checking that it is ours (or new)
/// and, once migrated, that its rows are in this program's format; says from which version.
/// Rows of the [`UPGRADABLE_FORMATS`](crate::UPGRADABLE_FORMATS) are only upgraded with
/// [`Upgrade::Rows`]; otherwise a database that holds them is refused untouched, the message
/// naming `server migrate --db <path>`.
pub(super) fn migrate(
    conn: &mut Connection,
    upgrade: Upgrade,
    path: &Path,
) -> Result<Migrated, Error> {
    // Before any pragma: switching to WAL would already change someone else's file.
    refuse_foreign(conn)?;
    // The page size can only change before the first table exists. 32 KiB pages hold about
    // seventy CSV rows each: measured on 224k entries, ingest ran at 88k entries/s with 4 KiB
    // pages, 115k with 16 KiB and 143k with 32 KiB (fewer b-tree splits), and long export
    // scans take fewer steps. See docs/PERFORMANCE.md.
    //
    // Switching a new file to WAL takes an exclusive lock, and when another connection is
    // opening the same new file SQLite answers SQLITE_BUSY at once rather than wait (waiting
    // could deadlock); the pragmas are idempotent, so they are simply tried again.
    retry_while_busy(|| {
        conn.execute_batch(
            "PRAGMA page_size = 32768; PRAGMA journal_mode = WAL; PRAGMA synchronous = NORMAL;",
        )
    })?;
    let version = user_version(conn)?;
    let known = MIGRATIONS.len() as i64;
    if version > known {
        return Err(Incompatible::NewerSchema {
            found: version,
            known,
        }
        .into());
    }
    // Rows of another format are refused before any migration touches the file (migration 5
    // copies every segment): they are re-ingested, never converted. A database records its
    // format from migration 2 on.
    // Rows of the upgradable formats are upgraded by migrations 7 and 8, but only when asked
    // to: a database without a block holds no rows, and its format is only a label.
    if version >= 2 {
        let format = row_format(conn)?;
        if upgradable(&format) {
            if upgrade == Upgrade::Refuse && !holds_no_block(conn)? {
                return Err(upgrade_needed(
                    &format,
                    &format!("server migrate --db {}", path.display()),
                ));
            }
        } else {
            check_row_format(conn)?;
        }
    }
    register_checksums(conn)?;
    // The migrations set the row formats of their day; a database that holds no block yet
    // holds no rows of any format, so it is labelled with today's in the same transactions.
    // Decided per transaction from the file, not from what this process saw when it opened it:
    // processes opening one new file at once each apply some of the migrations.
    for (version, sql) in (1i64..).zip(MIGRATIONS).skip(version as usize) {
        // Another process may be opening the same new file: the write lock, taken up front,
        // makes one of them wait, and the version read under it tells whether the other one
        // already applied this migration.
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(map_err)?;
        if user_version(&tx)? >= version {
            continue;
        }
        if version == 3 {
            refuse_ledger_rows(&tx)?;
        }
        tx.execute_batch(sql).map_err(map_err)?;
        if version == ORACLE_SEGMENTS {
            oracle_into_segments(&tx)?;
        }
        if holds_no_block(&tx)? {
            tx.execute(
                "UPDATE schema_info SET value = ?1 WHERE key = 'row_format'",
                [ROW_FORMAT.to_string()],
            )
            .map_err(map_err)?;
        }
        tx.pragma_update(None, "user_version", version)
            .map_err(map_err)?;
        tx.commit().map_err(map_err)?;
    }
    check_row_format(conn)?;
    let schema = |version: i64| u32::try_from(version).unwrap_or(u32::MAX);
    Ok(Migrated {
        from: schema(version),
        to: schema(known),
    })
}

/// The SQL functions by which migrations 7 and 8 compute checksums: `checksum(blob)`, today's
/// checksum of a blob, and `upgraded_sum(blob, sum)`, today's for a blob whose format-5
/// checksum `sum` was compared (`checksum::carried`).
fn register_checksums(conn: &Connection) -> Result<(), Error> {
    let flags = FunctionFlags::SQLITE_UTF8 | FunctionFlags::SQLITE_DETERMINISTIC;
    conn.create_scalar_function("checksum", 1, flags, |ctx| {
        let bytes = ctx.get_raw(0).as_bytes()?;
        Ok(checksum::to_sql(checksum::of(bytes)))
    })
    .map_err(map_err)?;
    conn.create_scalar_function("upgraded_sum", 2, flags, |ctx| {
        let bytes = ctx.get_raw(0).as_bytes()?;
        let old = ctx.get::<i64>(1)?;
        let whole = u32::try_from(old).is_ok_and(|old| checksum::format_5::of(bytes) == old);
        Ok(checksum::to_sql(checksum::carried(
            checksum::of(bytes),
            whole,
        )))
    })
    .map_err(map_err)
}

/// Whether the database holds no block: then it holds no rows either (every batch an ingest
/// commits records its blocks), and its row format is only a label.
fn holds_no_block(tx: &Connection) -> Result<bool, Error> {
    tx.query_row("SELECT NOT EXISTS (SELECT 1 FROM blocks)", [], |row| {
        row.get(0)
    })
    .map_err(map_err)
}

/// Refuses a database that holds anything but our schema.
fn refuse_foreign(conn: &Connection) -> Result<(), Error> {
    let objects: i64 = conn
        .query_row("SELECT count(*) FROM sqlite_schema", [], |row| row.get(0))
        .map_err(map_err)?;
    if objects == 0 && user_version(conn)? == 0 {
        return Ok(());
    }
    let ours: bool = conn
        .query_row(
            "SELECT count(*) FROM sqlite_schema WHERE type = 'table' AND name = 'schema_info'",
            [],
            |row| row.get(0),
        )
        .map_err(map_err)?;
    let ours = ours
        && conn
            .query_row(
                "SELECT count(*) FROM schema_info WHERE key = 'created_by' AND value = ?1",
                [CREATED_BY],
                |row| row.get::<_, bool>(0),
            )
            .map_err(map_err)?;
    if ours {
        return Ok(());
    }
    Err(Incompatible::ForeignFile { objects }.into())
}

/// Refuses, before migration 3 replaces `ledger_rows` with segments, a database that holds
/// ledger rows of format 1: they are re-ingested into a new database, never dropped.
fn refuse_ledger_rows(tx: &Transaction<'_>) -> Result<(), Error> {
    let rows: bool = tx
        .query_row("SELECT EXISTS (SELECT 1 FROM ledger_rows)", [], |row| {
            row.get(0)
        })
        .map_err(map_err)?;
    if rows {
        return Err(row_format_mismatch("1"));
    }
    Ok(())
}

/// Refuses rows written in another format than this program's.
pub(super) fn check_row_format(conn: &Connection) -> Result<(), Error> {
    let found = row_format(conn)?;
    if found == ROW_FORMAT.to_string() {
        Ok(())
    } else {
        Err(row_format_mismatch(&found))
    }
}

/// The recorded row format.
fn row_format(conn: &Connection) -> Result<String, Error> {
    conn.query_row(
        "SELECT value FROM schema_info WHERE key = 'row_format'",
        [],
        |row| row.get(0),
    )
    .map_err(map_err)
}

fn user_version(conn: &Connection) -> Result<i64, Error> {
    conn.query_row("PRAGMA user_version", [], |row| row.get(0))
        .map_err(map_err)
}

/// Runs `op` until it is not refused with SQLITE_BUSY, for about as long as the busy timeout.
fn retry_while_busy(mut op: impl FnMut() -> rusqlite::Result<()>) -> Result<(), Error> {
    for _ in 0..500 {
        match op() {
            Err(err) if err.sqlite_error_code() == Some(ErrorCode::DatabaseBusy) => {
                std::thread::sleep(Duration::from_millis(10));
            }
            result => return result.map_err(map_err),
        }
    }
    op().map_err(map_err)
}
