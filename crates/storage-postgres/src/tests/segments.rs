//! The ledger segments as PostgreSQL stores them: a party's lines across many segments and
//! batches, exported whole, by window and by asset; re-runs that rewrite nothing; batches of
//! older keys; a stream of small batches. After every commit the stored layout is checked
//! (`layout`): indexes well formed, columns agreeing with them, segments in order and never
//! overlapping.

use std::ops::ControlFlow;

use super::super::packed::unpack;
use super::super::{PgConfig, PgStore, PgWriter};
use storage::segment::{LineKey, SegmentRef};
use storage::{Error, ExportSink, IngestWriter, LedgerRow, LedgerStore, WriterOptions, suite};
use testdb::TestDatabase;

/// A line of the model: party, asset, key (vega time, block, seq, index).
type Spec = (u8, u8, (i64, u64, u64, u32));

/// A stored segment as `layout` reads it.
#[derive(Debug, PartialEq, Eq)]
struct Stored {
    ctid: String,
    /// The party's number in `suite::party`, not its dictionary id.
    party: u8,
    last: LineKey,
    first_time: i64,
    csv: Vec<u8>,
}

/// Lines of `width` bytes, so that a few thousand fill several segments; the label names the
/// line, so that a misplaced one shows.
fn row(spec: &Spec, width: usize) -> LedgerRow {
    let (party, asset, key) = *spec;
    let label = format!("p{party} a{asset} t{} b{} i{}", key.0, key.1, key.3);
    suite::ledger_row(&format!("{label:-<width$}"), party, asset, key)
}

fn rows(specs: &[Spec], width: usize) -> Vec<LedgerRow> {
    specs.iter().map(|spec| row(spec, width)).collect()
}

struct Fixture {
    db: TestDatabase,
    store: PgStore,
    /// `None` only while [`Fixture::restart`] replaces it.
    writer: Option<PgWriter>,
    /// Every line committed, each key once (the first committed wins).
    model: Vec<LedgerRow>,
}

impl Fixture {
    fn new(test: &str) -> Option<Fixture> {
        let db = TestDatabase::create(test)?;
        // Many small commits: durability is not what these tests are about.
        db.client()
            .batch_execute(&format!(
                "ALTER DATABASE {} SET synchronous_commit = off",
                db.name()
            ))
            .unwrap();
        let writer = PgStore::writer(db.url()).unwrap();
        let store = PgStore::open(db.url(), PgConfig::default()).unwrap();
        Some(Fixture {
            db,
            store,
            writer: Some(writer),
            model: Vec::new(),
        })
    }

    /// Commits `rows` as one batch and checks the layout after it.
    fn commit(&mut self, rows: Vec<LedgerRow>) -> Vec<Stored> {
        self.commit_unchecked(rows);
        self.layout()
    }

    /// Commits `rows` as one batch.
    fn commit_unchecked(&mut self, rows: Vec<LedgerRow>) {
        self.writer()
            .commit(&suite::ledger_batch(rows.clone()))
            .unwrap();
        for row in rows {
            let stored = self
                .model
                .iter()
                .any(|kept| (kept.party, kept.key) == (row.party, row.key));
            if !stored {
                self.model.push(row);
            }
        }
    }

    fn writer(&mut self) -> &mut PgWriter {
        self.writer.as_mut().unwrap()
    }

    /// Starts a new writer, as a restarted ingest does: it remembers nothing of the stored
    /// segments. The old one goes first, with its advisory lock.
    fn restart(&mut self) {
        self.writer = None;
        self.writer = Some(PgStore::writer(self.db.url()).unwrap());
    }

    /// Every stored segment, each checked: a well-formed index, columns that agree with it, and
    /// per party segments in key order that never overlap.
    fn layout(&self) -> Vec<Stored> {
        let rows = self
            .db
            .client()
            .query(
                "SELECT s.ctid::text, get_byte(p.hex, 0), last_time, last_block, last_seq, \
                 last_idx, first_time, lines, csv, keys \
                 FROM ledger_segments s JOIN parties p ON p.id = s.party \
                 ORDER BY s.party, last_time, last_block, last_seq, last_idx",
                &[],
            )
            .unwrap();
        let mut previous: Option<(u8, LineKey)> = None;
        let mut layout = Vec::new();
        for row in rows {
            let stored = Stored {
                ctid: row.get(0),
                party: u8::try_from(row.get::<_, i32>(1)).unwrap(),
                last: (row.get(2), row.get(3), row.get(4), row.get(5)),
                first_time: row.get(6),
                csv: unpack(row.get(8), "csv").unwrap(),
            };
            let keys = unpack(row.get(9), "keys").unwrap();
            let segment = SegmentRef::new(&stored.csv, &keys).unwrap();
            let lines: Vec<_> = segment.iter().collect();
            assert_eq!(lines.len(), row.get::<_, i32>(7) as usize, "{stored:?}");
            assert_eq!(lines[0].key.0, stored.first_time);
            assert_eq!(lines[lines.len() - 1].key, stored.last);
            if let Some((party, last)) = previous
                && party == stored.party
            {
                assert!(last < lines[0].key, "segments overlap: {last:?} {stored:?}");
            }
            previous = Some((stored.party, stored.last));
            layout.push(stored);
        }
        layout
    }

    /// Checks the export of `filter` byte for byte against the model, and returns how many
    /// calls the sink had.
    #[track_caller]
    fn check(&self, party: u8, asset: Option<u8>, start: Option<i64>, end: Option<i64>) -> usize {
        let filter = suite::filter(party, asset, start, end);
        let mut expected: Vec<&LedgerRow> = self
            .model
            .iter()
            .filter(|row| {
                let time = row.key.vega_time.nanos();
                row.party == filter.party
                    && filter.asset.is_none_or(|asset| row.asset == asset)
                    && start.is_none_or(|start| time >= start)
                    && end.is_none_or(|end| time < end)
            })
            .collect();
        expected.sort_by_key(|row| row.key);
        let count = expected.len() as u64;
        let expected: Vec<u8> = expected
            .iter()
            .flat_map(|row| row.csv_line.clone())
            .collect();
        let mut sink = Bytes::default();
        let summary = self.store.export_ledger(&filter, &mut sink).unwrap();
        assert!(
            sink.csv == expected,
            "export of {party} {asset:?} [{start:?}, {end:?}) differs:\n{}\nexpected\n{}",
            String::from_utf8_lossy(&sink.csv),
            String::from_utf8_lossy(&expected)
        );
        assert_eq!((summary.rows, summary.stopped), (sink.rows, false));
        assert_eq!(sink.rows, count);
        sink.calls
    }
}

/// Collects an export's bytes.
#[derive(Default)]
struct Bytes {
    csv: Vec<u8>,
    rows: u64,
    calls: usize,
}

impl ExportSink for Bytes {
    fn started(&mut self) -> ControlFlow<()> {
        ControlFlow::Continue(())
    }

    fn rows(&mut self, csv_lines: &[u8], count: u64) -> ControlFlow<()> {
        assert_eq!(suite::split_lines(csv_lines).len() as u64, count);
        self.csv.extend_from_slice(csv_lines);
        self.rows += count;
        self.calls += 1;
        ControlFlow::Continue(())
    }
}

/// Takes an export's bytes without looking at them: damaged ones need not be lines.
struct Discard;

impl ExportSink for Discard {
    fn started(&mut self) -> ControlFlow<()> {
        ControlFlow::Continue(())
    }

    fn rows(&mut self, _: &[u8], _: u64) -> ControlFlow<()> {
        ControlFlow::Continue(())
    }
}

/// The line keys of party `party`: `n` lines from `from`, two per vega time (ten apart), in
/// assets 1–3 mixed.
fn lines(party: u8, from: u64, n: u64) -> Vec<Spec> {
    (from..from + n)
        .map(|i| {
            let asset = (i * 7 % 3 + 1) as u8;
            (party, asset, ((i / 2 * 10) as i64, i, 0, (i % 2) as u32))
        })
        .collect()
}

fn segments_of(layout: &[Stored], party: u8) -> Vec<&Stored> {
    layout.iter().filter(|s| s.party == party).collect()
}

#[test]
fn a_party_across_many_segments_exports_whole_by_window_and_by_asset() {
    let Some(mut fixture) = Fixture::new("a_party_across_many_segments") else {
        return;
    };
    // About 1.2 MB of party 1's lines in eight batches, each with a few lines of party 2.
    let mut layout = Vec::new();
    for batch in 0..8 {
        let mut specs = lines(1, batch * 500, 500);
        specs.extend(lines(2, batch * 500, 3));
        layout = fixture.commit(rows(&specs, 300));
    }
    let segments = segments_of(&layout, 1);
    assert!(segments.len() >= 4, "{} segments", segments.len());

    // Whole: one sink call per segment.
    assert_eq!(fixture.check(1, None, None, None), segments.len());
    fixture.check(2, None, None, None);
    for asset in 1..=3 {
        fixture.check(1, Some(asset), None, None);
    }
    // Windows that start and end inside segments, at their first and last lines, between two
    // lines of one vega time, and beyond the ends.
    let mut edges = vec![i64::MIN, -5, 0, 5, 19_995, 20_000];
    for segment in &segments {
        for time in [segment.first_time, segment.last.0] {
            edges.extend([time - 1, time, time + 1]);
        }
    }
    edges.sort_unstable();
    edges.dedup();
    for (i, &start) in edges.iter().enumerate() {
        for end in [edges.get(i + 1), edges.get(i + 4), edges.last()] {
            fixture.check(1, None, Some(start), end.copied());
        }
        fixture.check(1, None, Some(start), None);
        fixture.check(1, None, None, Some(start));
        fixture.check(1, Some((i % 3 + 1) as u8), Some(start), None);
    }
    // Unknown party and asset.
    assert_eq!(fixture.check(9, None, None, None), 0);
    assert_eq!(fixture.check(1, Some(9), None, None), 0);
}

#[test]
fn a_recommitted_batch_rewrites_nothing() {
    let Some(mut fixture) = Fixture::new("a_recommitted_batch_rewrites_nothing") else {
        return;
    };
    let first = rows(&lines(1, 0, 1500), 300);
    let second = rows(&[lines(1, 1500, 1500), lines(2, 0, 10)].concat(), 300);
    fixture.commit(first.clone());
    let layout = fixture.commit(second.clone());
    assert!(segments_of(&layout, 1).len() >= 3);
    // The same batches again, in any order, and a changed copy of a stored line: the very same
    // stored tuples (same ctids), so nothing was rewritten.
    let mut changed = first[700].clone();
    changed.csv_line = b"changed\n".to_vec();
    for again in [second, first, vec![changed]] {
        assert_eq!(fixture.commit(again), layout);
    }
    fixture.check(1, None, None, None);
    fixture.check(1, Some(2), Some(1000), Some(9000));
}

#[test]
fn an_out_of_order_batch_lands_in_order() {
    let Some(mut fixture) = Fixture::new("an_out_of_order_batch_lands_in_order") else {
        return;
    };
    // Newer keys first: vega times 100_000 on, several segments.
    let newer: Vec<Spec> = lines(1, 20_000, 3000);
    let layout = fixture.commit(rows(&newer, 300));
    let segments = segments_of(&layout, 1);
    assert!(segments.len() >= 3);
    // A line in the gap between two segments: it touches neither, nor the last segment.
    let gap = segments
        .windows(2)
        .map(|pair| pair[0].last.0 + 5)
        .zip(&segments[1..])
        .find(|(gap, next)| *gap < next.first_time)
        .expect("two segments a vega time apart")
        .0;
    fixture.commit(rows(&[(1, 2, (gap, 1, 0, 0))], 300));
    // Older keys than any stored, then a batch mixing keys before, inside and after the
    // stored ones, some of them at stored vega times.
    fixture.commit(rows(&lines(1, 0, 600), 300));
    let mixed: Vec<Spec> = [
        lines(1, 600, 5),
        vec![
            (1, 3, (100_000, 0, 0, 0)),
            (1, 1, (segments[1].first_time, 0, 0, 7)),
            (1, 2, (segments[1].last.0 + 3, 5, 5, 5)),
        ],
        lines(1, 40_000, 5),
    ]
    .concat();
    let mut batch = rows(&mixed, 120);
    batch.reverse();
    fixture.commit(batch);
    fixture.check(1, None, None, None);
    fixture.check(1, Some(2), None, None);
    fixture.check(1, None, Some(gap), Some(gap + 1000));
    fixture.check(1, Some(1), Some(gap - 1000), Some(gap + 1));
}

#[test]
fn a_stream_of_small_batches_fills_segments() {
    let Some(mut fixture) = Fixture::new("a_stream_of_small_batches_fills_segments") else {
        return;
    };
    // One writer remembers its run; then a writer every seven batches (an ingest restarted)
    // reads it back from the table.
    for n in 0..500 {
        if n >= 300 && n % 7 == 0 {
            fixture.restart();
        }
        fixture.commit_unchecked(suite::packing::small_batch(n).ledger_rows);
    }
    let layout = fixture.layout();
    let sizes: Vec<usize> = segments_of(&layout, 1)
        .iter()
        .map(|segment| segment.csv.len())
        .collect();
    // 150 kB of lines: four segments of at least 32 KiB.
    suite::packing::assert_packed(&sizes, 4);
    fixture.check(1, None, None, None);
    suite::packing::assert_small_batches_exported(&fixture.store, 0..500);
}

/// Each of `parties`' segments' lines' bytes, in key order, in the database at `db`.
fn party_segment_sizes(db: &TestDatabase, parties: &[u8]) -> Vec<Vec<usize>> {
    let mut client = db.client();
    parties
        .iter()
        .map(|party| {
            let rows = client
                .query(
                    "SELECT csv FROM ledger_segments s JOIN parties p ON p.id = s.party \
                     WHERE p.hex = $1 ORDER BY last_time, last_block, last_seq, last_idx",
                    &[&&suite::party(*party).as_bytes()[..]],
                )
                .unwrap();
            rows.iter()
                .map(|row| unpack(row.get::<_, &[u8]>(0), "csv").unwrap().len())
                .collect()
        })
        .collect()
}

#[test]
fn runs_remembered_by_their_shape_are_stored_as_runs_kept_whole() {
    let test = "runs_remembered_by_their_shape";
    let (Some(whole), Some(shaped)) = (
        TestDatabase::create(&format!("{test}_whole")),
        TestDatabase::create(&format!("{test}_shaped")),
    ) else {
        return;
    };
    suite::packing::stage_small_batches(&mut PgStore::writer(whole.url()).unwrap());
    // No run kept whole: every party's is remembered by its shape and read back to merge.
    let nothing_whole = WriterOptions {
        remembered_bytes: 0,
    };
    let mut writer = PgStore::writer_with(shaped.url(), &nothing_whole).unwrap();
    suite::packing::stage_small_batches(&mut writer);
    let store = |db: &TestDatabase| PgStore::open(db.url(), PgConfig::default()).unwrap();
    let parties = suite::packing::PARTIES;
    suite::packing::assert_stored_alike(
        (&store(&whole), &party_segment_sizes(&whole, &parties)),
        (&store(&shaped), &party_segment_sizes(&shaped, &parties)),
    );
}

/// Damaged compressed blobs, written with SQL, fail an export and an ingest that reads them back
/// as corrupt: never a panic, never lines cut by an index they do not match.
#[test]
fn damaged_compressed_segments_are_reported_as_corrupt() {
    let Some(mut fixture) = Fixture::new("damaged_compressed_segments") else {
        return;
    };
    // One segment each, of different lengths.
    fixture.commit(rows(&lines(1, 0, 20), 100));
    fixture.commit(rows(&lines(2, 0, 40), 100));
    let mut client = fixture.db.client();
    client
        .batch_execute("CREATE TABLE intact AS SELECT * FROM ledger_segments")
        .unwrap();
    // The damage, and whether an export of the whole party, which reads no index, sees it.
    let cases = [
        (
            "garbage after a small size",
            "csv = '\\x00000100ffffffffff'",
            true,
        ),
        ("no size", "csv = '\\x0001'", true),
        (
            "truncated",
            "csv = substring(csv FOR octet_length(csv) - 3)",
            true,
        ),
        (
            "a size beyond what the block holds",
            "csv = overlay(csv PLACING '\\x0000ffff' FROM 1 FOR 4)",
            true,
        ),
        (
            "a size no block can hold",
            "csv = overlay(csv PLACING '\\xffffffff' FROM 1 FOR 4)",
            true,
        ),
        ("truncated index", "keys = substring(keys FOR 20)", false),
        (
            "another party's lines",
            "csv = (SELECT csv FROM intact i WHERE i.party <> ledger_segments.party)",
            false,
        ),
    ];
    for (case, damage, whole_detects) in cases {
        client
            .batch_execute(&format!(
                "DELETE FROM ledger_segments; INSERT INTO ledger_segments SELECT * FROM intact; \
                 UPDATE ledger_segments SET {damage} \
                 WHERE party = (SELECT id FROM parties WHERE get_byte(hex, 0) = 1)"
            ))
            .unwrap();
        let corrupt = |asset: Option<u8>| {
            let filter = suite::filter(1, asset, None, None);
            match fixture.store.export_ledger(&filter, &mut Discard) {
                Err(Error::Corrupt(_)) => true,
                Ok(_) => false,
                Err(other) => panic!("{case}: {other:?}"),
            }
        };
        assert!(corrupt(Some(1)), "{case}: one asset");
        assert_eq!(corrupt(None), whole_detects, "{case}: whole party");
        // A line among the stored ones: the ingest reads the segment back to rewrite it.
        let batch = suite::ledger_batch(vec![suite::ledger_row("new", 1, 1, (5, 100, 0, 0))]);
        match fixture.writer().commit(&batch) {
            Err(Error::Corrupt(_)) => {}
            other => panic!("{case}: ingest: {other:?}"),
        }
    }
    // The other party's segment was never touched.
    fixture.check(2, None, None, None);
}
