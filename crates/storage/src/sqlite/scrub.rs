//! `SqliteStore::scrub`: SQLite's own `PRAGMA integrity_check`, then every ledger segment and
//! every oracle datum read and verified, in one snapshot.

use rusqlite::Connection;

use super::{SqliteStore, at_segment, map_err, verified};
use crate::Error;
use crate::error::Damage;
use crate::scrub::{Scrub, ScrubProgress};
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
                "SELECT (SELECT count(*) FROM ledger_segments) + (SELECT count(*) FROM oracle_data)",
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
        let scanned = ledger(&tx, &mut scrub, &mut report)
            .and_then(|()| oracle(&tx, &mut scrub, &mut report));
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

/// Every ledger segment, its blobs' checksums and its index.
fn ledger(
    conn: &Connection,
    scrub: &mut Scrub,
    report: &mut dyn FnMut(&Scrub),
) -> Result<(), Error> {
    let mut stmt = conn
        .prepare(
            "SELECT s.csv, s.keys, s.csv_sum, s.keys_sum, s.last_time, s.last_block, \
             s.last_seq, s.last_idx, s.party, lower(hex(p.hex)) \
             FROM ledger_segments s LEFT JOIN parties p ON p.id = s.party \
             ORDER BY s.party, s.last_time, s.last_block, s.last_seq, s.last_idx",
        )
        .map_err(map_err)?;
    let mut rows = stmt.query([]).map_err(map_err)?;
    while let Some(row) = rows.next().map_err(map_err)? {
        let party: i64 = row.get(8).map_err(map_err)?;
        let verify = verified(row, (0, "csv"), 2)
            .and_then(|csv| SegmentRef::new(csv, verified(row, (1, "keys"), 3)?).map(drop))
            .map_err(|err| at_segment(err, party, row, 4));
        scrub.record(verify, || {
            let hex: Option<String> = row.get(9).ok().flatten();
            match hex {
                Some(hex) => format!("the export of party {hex}"),
                None => format!("the export of party {party}, whose id is not stored"),
            }
        })?;
        report(scrub);
    }
    Ok(())
}

/// Every oracle datum's checksum.
fn oracle(
    conn: &Connection,
    scrub: &mut Scrub,
    report: &mut dyn FnMut(&Scrub),
) -> Result<(), Error> {
    let mut stmt = conn
        .prepare("SELECT json, sum, vega_time, block, seq FROM oracle_data")
        .map_err(map_err)?;
    let mut rows = stmt.query([]).map_err(map_err)?;
    while let Some(row) = rows.next().map_err(map_err)? {
        let key: (i64, i64, i64) = (
            row.get(2).map_err(map_err)?,
            row.get(3).map_err(map_err)?,
            row.get(4).map_err(map_err)?,
        );
        let verify = verified(row, (0, "json"), 1)
            .map(drop)
            .map_err(|err| err.at("oracle_data", || format!("{key:?}")));
        scrub.record(verify, || pages_of(conn, key))?;
        report(scrub);
    }
    Ok(())
}

/// The oracle pages that hold the datum at `key`: the listing of all data and of every spec it
/// matched.
fn pages_of(conn: &Connection, (time, block, seq): (i64, i64, i64)) -> String {
    let specs: Result<Vec<String>, _> = conn
        .prepare(
            "SELECT lower(hex(s.hex)) FROM oracle_spec_data d JOIN oracle_specs s \
             ON s.id = d.spec WHERE d.vega_time = ?1 AND d.block = ?2 AND d.seq = ?3",
        )
        .and_then(|mut stmt| {
            stmt.query_map([time, block, seq], |row| row.get(0))?
                .collect()
        });
    let specs = match specs {
        Ok(specs) if specs.is_empty() => String::new(),
        Ok(specs) => format!(" and of spec {}", specs.join(", spec ")),
        Err(_) => " and of the specs it matched (unreadable)".to_owned(),
    };
    format!("the oracle data pages holding vega time {time} of all data{specs}")
}
