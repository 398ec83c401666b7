//! `PgStore::scrub`: every segment of both tables read, unpacked (its checksum verified) and its
//! index checked, in one read-only snapshot. PostgreSQL's own pages are its own to check
//! (`data_checksums`, `pg_amcheck`; see README, Backups).

use postgres::Transaction;

use super::packed::unpack_into;
use super::{PgStore, map_err};
use storage::Error;
use storage::segment::{self, SegmentRef};
use storage::{SCRUB_SOURCES, Scrub, ScrubProgress, ScrubSource};

/// Segments fetched at a time: a few megabytes of ledger blobs.
const FETCH: i32 = 64;

impl PgStore {
    /// Reads and verifies every segment the store holds (see [`storage::Scrub`]), reporting
    /// progress after every one. Writes nothing.
    pub(crate) fn scrub_all(
        &self,
        progress: &mut dyn FnMut(ScrubProgress),
    ) -> Result<Scrub, Error> {
        let mut conn = self.get()?;
        let (mut tx, _) = conn.snapshot()?;
        let total: i64 = tx
            .query_one(
                "SELECT (SELECT count(*) FROM ledger_segments) + \
                 (SELECT count(*) FROM oracle_segments)",
                &[],
            )
            .map_err(map_err)?
            .get(0);
        let mut scrub = Scrub::default();
        for source in &SCRUB_SOURCES {
            segments(&mut tx, source, &mut scrub, &mut |scrub: &Scrub| {
                progress(ScrubProgress {
                    done: scrub.units,
                    total: total as u64,
                })
            })?;
        }
        tx.commit().map_err(map_err)?;
        Ok(scrub)
    }
}

/// Every segment of a table.
fn segments(
    tx: &mut Transaction<'_>,
    source: &ScrubSource,
    scrub: &mut Scrub,
    report: &mut dyn FnMut(&Scrub),
) -> Result<(), Error> {
    let table = source.table;
    let (name, owner, lines, dictionary) =
        (table.name, table.owner, table.lines, source.dictionary);
    let portal = tx
        .bind(
            &format!(
                "SELECT s.{owner}, s.last_time, s.last_block, s.last_seq, s.last_idx, \
                 s.first_time, s.{lines}, s.keys, encode(d.hex, 'hex') \
                 FROM {name} s LEFT JOIN {dictionary} d ON d.id = s.{owner} \
                 ORDER BY s.{owner}, s.last_time, s.last_block, s.last_seq, s.last_idx"
            ),
            &[],
        )
        .map_err(map_err)?;
    let (mut csv, mut keys) = (Vec::new(), Vec::new());
    loop {
        let rows = tx.query_portal(&portal, FETCH).map_err(map_err)?;
        if rows.is_empty() {
            return Ok(());
        }
        for row in rows {
            let id: i32 = row.get(0);
            let last = (row.get(1), row.get(2), row.get(3), row.get(4));
            let verify = unpack_into(row.get(6), lines, &mut csv)
                .and_then(|()| unpack_into(row.get(7), "keys", &mut keys))
                .and_then(|()| SegmentRef::new(&csv, &keys).map(drop))
                .map_err(|err| err.at(name, || segment::describe(owner, id.into(), last)));
            scrub.record(verify, || {
                let hex: Option<String> = row.get(8);
                let owner = hex.unwrap_or_else(|| id.to_string());
                (source.affects)(&owner, (row.get(5), last.0))
            })?;
            report(scrub);
        }
    }
}
