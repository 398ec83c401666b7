//! `SqliteStore::scrub`: SQLite's own `PRAGMA integrity_check`, then every ledger segment and
//! every oracle segment read and verified, in one snapshot.

use rusqlite::Connection;

use super::segments::Table;
use super::{SqliteStore, map_err, verified};
use crate::Error;
use crate::error::Damage;
use crate::scrub::{SCRUB_SOURCES, Scrub, ScrubProgress, ScrubSource};
use crate::segment::SegmentRef;

/// The most problems `PRAGMA integrity_check` reports.
const INTEGRITY_ROWS: u32 = 100;

impl SqliteStore {
    /// Reads and verifies everything the store holds (see [`crate::Scrub`]), reporting
    /// progress after every unit. Writes nothing.
    pub(crate) fn scrub_all(
        &self,
        progress: &mut dyn FnMut(ScrubProgress),
    ) -> Result<Scrub, Error> {
        let mut conn = self.readers.get()?;
        let tx = conn.snapshot()?;
        let mut scrub = Scrub::default();
        integrity(&tx, &mut scrub)?;
        let total: i64 = tx
            .query_row(
                "SELECT (SELECT count(*) FROM ledger_segments) + \
                 (SELECT count(*) FROM oracle_segments)",
                [],
                |row| row.get(0),
            )
            .map_err(map_err)?;
        let mut report = |scrub: &Scrub| {
            progress(ScrubProgress {
                done: scrub.units,
                total: total as u64,
            })
        };
        let scanned = SCRUB_SOURCES
            .iter()
            .try_for_each(|source| segments(&tx, source, &mut scrub, &mut report));
        // A scan that SQLite itself cannot go on with is damage it found: recorded, not fatal.
        match scanned {
            Err(Error::Corrupt(corruption)) => scrub.findings.push(crate::Finding {
                place: corruption.place,
                damage: corruption.damage,
                affects: "the scan stopped here: what follows was not read".to_owned(),
            }),
            other => other?,
        }
        tx.commit()?;
        Ok(scrub)
    }
}

/// `PRAGMA integrity_check`: every problem it names is a finding without a place.
fn integrity(conn: &Connection, scrub: &mut Scrub) -> Result<(), Error> {
    let mut stmt = conn
        .prepare(&format!("PRAGMA integrity_check({INTEGRITY_ROWS})"))
        .map_err(map_err)?;
    let problems = stmt
        .query_map([], |row| row.get::<_, String>(0))
        .map_err(map_err)?;
    for problem in problems {
        let problem = problem.map_err(map_err)?;
        if problem != "ok" {
            scrub.findings.push(crate::Finding {
                place: None,
                damage: Damage::Store(format!("integrity_check: {problem}").into()),
                affects: "any answer that reads the pages named".to_owned(),
            });
        }
    }
    Ok(())
}

/// Every segment of a table, its blobs' checksums and its index.
fn segments(
    conn: &Connection,
    source: &ScrubSource,
    scrub: &mut Scrub,
    report: &mut dyn FnMut(&Scrub),
) -> Result<(), Error> {
    let table = source.table;
    let (
        Table {
            name, owner, lines, ..
        },
        dictionary,
    ) = (table, source.dictionary);
    let mut stmt = conn
        .prepare(&format!(
            "SELECT s.{lines}, s.keys, s.{lines}_sum, s.keys_sum, s.last_time, s.last_block, \
             s.last_seq, s.last_idx, s.{owner}, nullif(lower(hex(d.hex)), ''), s.first_time \
             FROM {name} s LEFT JOIN {dictionary} d ON d.id = s.{owner} \
             ORDER BY s.{owner}, s.last_time, s.last_block, s.last_seq, s.last_idx"
        ))
        .map_err(map_err)?;
    let mut rows = stmt.query([]).map_err(map_err)?;
    while let Some(row) = rows.next().map_err(map_err)? {
        let id: i64 = row.get(8).map_err(map_err)?;
        let verify = verified(row, (0, lines), 2)
            .and_then(|bytes| SegmentRef::new(bytes, verified(row, (1, "keys"), 3)?).map(drop))
            .map_err(|err| table.at_segment(err, id, row, 4));
        scrub.record(verify, || {
            let hex: Option<String> = row.get(9).ok().flatten();
            let owner = hex.unwrap_or_else(|| id.to_string());
            let times = (
                row.get(10).unwrap_or(i64::MIN),
                row.get(4).unwrap_or(i64::MAX),
            );
            (source.affects)(&owner, times)
        })?;
        report(scrub);
    }
    Ok(())
}
