//! The backend-neutral traits and the records that cross them.

use std::ops::{ControlFlow, Range};

use ledger_core::{AssetId, EntryKey, ExportFilter, OracleSpecId, PartyId};
use oracle_core::{Edge, Page, PageRequest, Position};

use crate::Error;
use crate::backend::push_node;

/// Receives an export as it is read, in runs of finished CSV lines.
///
/// Returning [`ControlFlow::Break`] from either method stops the read at once (the client went
/// away) and releases the snapshot and the connection.
pub trait ExportSink {
    /// Called once the snapshot is open and the query is ready, before the first row: from here
    /// on a failure can no longer be reported as a status.
    fn started(&mut self) -> ControlFlow<()>;
    /// Called with the next `count` rows of the export, in order: `csv_lines` holds whole
    /// lines, each ending with `\n` (a store hands over as many adjacent lines at once as its
    /// layout holds, up to a whole stored segment).
    fn rows(&mut self, csv_lines: &[u8], count: u64) -> ControlFlow<()>;
}

/// How an export ended, when it did not fail.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ExportSummary {
    /// Rows handed to the sink.
    pub rows: u64,
    /// True when the sink asked to stop before the end.
    pub stopped: bool,
}

/// Reads a party's ledger entries for the CSV export.
pub trait LedgerStore: Send + Sync {
    /// Streams every row matching `filter` into `sink`, ascending in the ingest order, from one
    /// consistent snapshot.
    fn export_ledger(
        &self,
        filter: &ExportFilter,
        sink: &mut dyn ExportSink,
    ) -> Result<ExportSummary, Error>;
}

/// Reads pages of oracle data.
pub trait OracleStore: Send + Sync {
    /// One page of oracle data (each node is its finished Vega JSON), optionally only the data
    /// matched to `spec`, read from one consistent snapshot: [`oracle_pages`](Self::oracle_pages)
    /// with nothing read ahead.
    fn oracle_page(
        &self,
        spec: Option<&OracleSpecId>,
        request: &PageRequest,
    ) -> Result<OraclePage, Error> {
        self.oracle_pages(spec, request, 0)
    }

    /// [`oracle_page`](Self::oracle_page) and, from the same snapshot and read, up to `ahead`
    /// pages that continue its walk ([`OraclePage::ahead`]): a store reads
    /// [`PageRequest::read_ahead_scan`] where it would read [`PageRequest::main_scan`], and
    /// builds the pages with [`OraclePage::assemble`] or [`OraclePage::from_scan`]. A client
    /// paging through the data (an indexer, an explorer) asks for those pages next, and a
    /// cache can answer them without another read: where a read costs mostly its round trip
    /// (PostgreSQL), one read of a few hundred rows costs much less than three reads of a
    /// hundred; where it costs by its rows (SQLite), it saves the per-read costs only
    /// (docs/PERFORMANCE.md, "Pages read ahead").
    fn oracle_pages(
        &self,
        spec: Option<&OracleSpecId>,
        request: &PageRequest,
        ahead: usize,
    ) -> Result<OraclePage, Error>;

    /// The version of the committed data, for caches of what was read: `None` when the backend
    /// cannot tell cheaply, which means "do not cache".
    ///
    /// The rule every backend that answers `Some` follows, with [`Health::chain_tip`]: **a read
    /// that begins after a call answered a version sees at least every block up to the tip
    /// that `chain_tip` answers while the version stays the same**, and the version changes
    /// when the store learns of a commit. So a page read between two calls answering the same
    /// version never shows less than the blocks announced with that version: a cache may serve
    /// it as long as the version stays. It may show a later commit the store has not learnt of
    /// yet, never an earlier state. SQLite learns of every commit at once (two equal versions
    /// mean that nothing was committed in between); PostgreSQL learns of them from the
    /// writer's announcements, or by a poll within [`CHAIN_TIP_LAG`]. A different version says
    /// nothing: it may also change without a commit, and versions need not grow. Compare
    /// versions of one store only.
    ///
    /// Callers run this on async worker threads, inline, once or twice per request: an
    /// implementation answers from memory in microseconds and never waits for a writer or the
    /// network. A backend that would need a round trip to know answers `Ok(None)` (the
    /// default): one round trip per request would cost what the cache saves.
    fn data_version(&self) -> Result<Option<u64>, Error> {
        Ok(None)
    }

    /// True when [`OracleStore::oracle_page`] reads local storage and does not wait: not for
    /// another reader, not for the writer, not for the network (an SQLite file in WAL mode,
    /// whose pool opens a connection rather than wait for one, and whose readers wait only
    /// for SQLite's brief locks of the WAL index). A page of the default size then costs less
    /// than handing it to a blocking thread and back, and callers may read it on their async
    /// worker. False (the default) for a store behind a network connection:
    /// one slow round trip would stall every request of that worker.
    fn pages_are_local(&self) -> bool {
        false
    }
}

/// A page of oracle data whose nodes share one buffer: a store appends each row's JSON to
/// `nodes` straight from its own row buffer instead of allocating a copy per row.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OraclePage {
    /// The page; each edge's node is the range of its JSON in `nodes`.
    pub page: Page<Range<usize>>,
    /// The pages read ahead ([`OracleStore::oracle_pages`]): those that continue the walk from
    /// `page`, in walk order, each with the request a client asks for it with. Their nodes
    /// are in `nodes` too.
    pub ahead: Vec<(PageRequest, Page<Range<usize>>)>,
    /// The nodes' JSON, back to back (it may also hold rows that the pages left out).
    pub nodes: Vec<u8>,
}

impl OraclePage {
    /// Builds the page and the `ahead` pages after it (see [`PageRequest::assemble_ahead`])
    /// from rows of [`PageRequest::read_ahead_scan`] whose JSON lies in `nodes`.
    pub fn from_scan(
        request: &PageRequest,
        rows: Vec<(Position, Range<usize>)>,
        boundary_exists: bool,
        nodes: Vec<u8>,
        ahead: usize,
    ) -> OraclePage {
        let (page, ahead) = request.assemble_ahead(rows, boundary_exists, ahead);
        OraclePage { page, ahead, nodes }
    }

    /// [`OraclePage::from_scan`] from scanned rows that each own their JSON, for stores that
    /// read rows as owned values.
    pub fn assemble(
        request: &PageRequest,
        rows: Vec<(Position, Vec<u8>)>,
        boundary_exists: bool,
        ahead: usize,
    ) -> OraclePage {
        let mut nodes = Vec::with_capacity(rows.iter().map(|(_, node)| node.len()).sum());
        let rows = rows
            .into_iter()
            .map(|(position, node)| (position, push_node(&mut nodes, &node)))
            .collect();
        Self::from_scan(request, rows, boundary_exists, nodes, ahead)
    }

    /// The JSON of one of the page's edges.
    pub fn node(&self, edge: &Edge<Range<usize>>) -> &[u8] {
        &self.nodes[edge.node.clone()]
    }
}

/// Answers whether the store is usable, and how far its chain goes.
pub trait Health: Send + Sync {
    /// Runs a trivial read; an error means the store cannot serve.
    fn check(&self) -> Result<(), Error>;

    /// The first and last stored heights and the last block's vega time; `None` while the
    /// store holds no block.
    ///
    /// Callers run this on async worker threads, inline, once per request (the HTTP layer puts
    /// it in every answer's `X-Block-Height` and `X-Block-Timestamp`): an implementation answers
    /// from memory and never waits for a writer or the network. It may lag the database by at
    /// most [`CHAIN_TIP_LAG`]: SQLite rereads its `blocks` table only when its data version
    /// changed, so it never lags; PostgreSQL rereads it in the background when the writer
    /// announces a commit, and once per [`CHAIN_TIP_LAG`] in any case.
    fn chain_tip(&self) -> Result<Option<ChainTip>, Error>;

    /// [`Health::chain_tip`] and, when the store can tell it in the same look, the data
    /// version ([`OracleStore::data_version`]) that the tip belongs to: for a request that needs
    /// both (a page, whose answer carries the tip and whose cache is keyed by the version).
    ///
    /// A version answered here names a state that holds every block up to the tip answered
    /// with it, so a page read while the version stays the same holds the tip's blocks; a
    /// cache may serve such a page under that tip. `None` (the default) says "ask
    /// `data_version` after this call": a version read after the tip always names a state
    /// that holds it. Same rules of speed as `chain_tip`.
    fn chain_tip_with_version(&self) -> Result<(Option<ChainTip>, Option<u64>), Error> {
        Ok((self.chain_tip()?, None))
    }
}

/// How far [`Health::chain_tip`] may lag the database.
pub const CHAIN_TIP_LAG: std::time::Duration = std::time::Duration::from_secs(1);

/// Where the stored chain starts and ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChainTip {
    /// The lowest stored height.
    pub first_height: u64,
    /// The highest stored height.
    pub last_height: u64,
    /// The vega time of the last stored block in Unix nanoseconds; when that block has none
    /// (it held no timed event), the latest one known below it; `None` when no block has one.
    pub last_vega_time: Option<i64>,
}

/// One ledger entry as seen by one party that owns one of its accounts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LedgerRow {
    /// The party whose export holds the row.
    pub party: PartyId,
    /// The entry's asset.
    pub asset: AssetId,
    /// The entry's place in the total order.
    pub key: EntryKey,
    /// The finished CSV line (with its `\n`), effect already signed for `party`.
    pub csv_line: Vec<u8>,
}

/// One oracle datum.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OracleRow {
    /// The datum's place in the total order.
    pub position: Position,
    /// The specs it matched, in the order ingested.
    pub matched_specs: Vec<OracleSpecId>,
    /// The finished Vega JSON node (`{"externalData":…}`).
    pub json: Vec<u8>,
}

/// What the store remembers of a block, so that an ingest can resume inside it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockState {
    /// The block's vega time, when one was seen.
    pub vega_time: Option<i64>,
    /// The highest event sequence number of the block already stored (as the event ids count
    /// them, from 1 in every block).
    pub last_seq: u64,
}

/// A block as the store knows it.
///
/// A block is identified by its height and its hash. Heights are unique but for one exception:
/// a real core's stream begins with two blocks of its first height (the genesis or checkpoint
/// block, then the first real block), with different hashes and event sequences that both start
/// at 1. The second one's rows are keyed after the first one's by `seq_base`, the first one's
/// last sequence number, added to each of its events' sequence numbers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BlockRecord {
    /// Block height.
    pub height: u64,
    /// The block hash as the stream wrote it (`BeginBlock.hash`, `BusEvent.block`); `None`
    /// when the stream carries none.
    pub hash: Option<String>,
    /// Added to the block's event sequence numbers in its rows' keys: 0, but for the second
    /// block of a height (see above). With the height, it identifies the block in the store.
    pub seq_base: u64,
    /// What this batch saw of the block; merged with what is stored (see below).
    pub state: BlockState,
}

/// Whole blocks of ingested rows, written atomically.
///
/// Committing a record for a block already stored (the same height and `seq_base`) merges the
/// two: the stored vega time stays when there is one (the first time seen wins), the sequence
/// number becomes the higher of the two, and a stored hash stays.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct IngestBatch {
    /// The chain the blocks belong to, when the stream names one: recorded with the first
    /// batch that has one, and a batch of another chain is refused whole with
    /// [`Error::OtherChain`].
    pub chain_id: Option<String>,
    /// The blocks the rows belong to.
    pub blocks: Vec<BlockRecord>,
    /// Ledger rows, one per (entry, owning party).
    pub ledger_rows: Vec<LedgerRow>,
    /// Oracle data.
    pub oracle_rows: Vec<OracleRow>,
}

impl IngestBatch {
    /// True when the batch holds nothing to write.
    pub fn is_empty(&self) -> bool {
        self.blocks.is_empty() && self.ledger_rows.is_empty() && self.oracle_rows.is_empty()
    }

    /// Empties the batch, keeping its allocations.
    pub fn clear(&mut self) {
        self.chain_id = None;
        self.blocks.clear();
        self.ledger_rows.clear();
        self.oracle_rows.clear();
    }
}

/// Where the stored data start and end, and on which chain.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ChainState {
    /// The chain id recorded with the first block that named one.
    pub chain_id: Option<String>,
    /// The lowest stored block.
    pub first: Option<BlockTime>,
    /// The highest stored block.
    pub last: Option<BlockTime>,
}

/// A stored block's height and time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockTime {
    /// Block height.
    pub height: u64,
    /// Its vega time in Unix nanoseconds, when one was seen.
    pub vega_time: Option<i64>,
}

/// How a store's writer is opened: what it may hold in memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WriterOptions {
    /// The most bytes of runs of small segments the writer keeps whole, per table of segments,
    /// counted as the memory their buffers take. An owner beyond it is remembered by its run's
    /// shape (its segments' keys and sizes) and read back when a batch merges its run, so the
    /// layout written is the same whatever the bound; a lower bound trades those reads for the
    /// ingest's memory when there are many parties (see [`TAILS_BYTES`](crate::segment::TAILS_BYTES)).
    pub remembered_bytes: usize,
}

impl Default for WriterOptions {
    fn default() -> Self {
        Self {
            remembered_bytes: crate::segment::TAILS_BYTES,
        }
    }
}

/// The single writer of a store. `Send`, because an ingest commits on a thread of its own.
pub trait IngestWriter: Send {
    /// The chain id and the first and last stored blocks: an ingest checks the stream against
    /// them (the same chain, no hole), and blocks above the last need no
    /// [`blocks`](Self::blocks) lookup, which spares an appending ingest one query per block.
    fn chain(&mut self) -> Result<ChainState, Error>;
    /// The blocks stored at `height` (none above `i64::MAX`), in the order of their
    /// `seq_base`: at most two, and two only at the first height of a chain.
    fn blocks(&mut self, height: u64) -> Result<Vec<BlockRecord>, Error>;
    /// Writes the batch, and every batch [staged](Self::stage) since the last commit, in one
    /// transaction: all of it or none of it. Rows already stored are left as they are; block
    /// records merge (see [`IngestBatch`]); a height or sequence number above `i64::MAX` fails
    /// the whole transaction with [`Error::OutOfRange`], a chain id other than the stored one
    /// with [`Error::OtherChain`]. An empty batch commits what is staged, if anything.
    fn commit(&mut self, batch: &IngestBatch) -> Result<(), Error>;

    /// Writes the batch into the transaction the next [`commit`](Self::commit) ends, so that
    /// a transaction can span more rows than the writer holds in memory at once: an ingest
    /// stages batches of a bounded size and commits once a transaction is worth its cost.
    /// Nothing staged is visible to readers before that commit, and a failure of any staged
    /// batch or of the commit undoes them all; what this writer reads ([`blocks`]) includes
    /// them. The default commits the batch at once, which a caller must accept too: staging
    /// only allows a store to commit later.
    ///
    /// [`blocks`]: Self::blocks
    fn stage(&mut self, batch: &IngestBatch) -> Result<(), Error> {
        self.commit(batch)
    }

    /// How many batches of an ingest's size a transaction spread thin over many parties may
    /// span, at most: a commit costs more the more parties it touches (each one's newest
    /// segment is written), and a transaction long enough gives each party lines enough for a
    /// segment that is never merged again. What a long transaction costs depends on the store:
    /// [`TRANSACTION_BATCHES`] unless it says otherwise.
    fn transaction_batches(&self) -> usize {
        TRANSACTION_BATCHES
    }
}

/// The default of [`IngestWriter::transaction_batches`]: four batches. Longer transactions
/// measured slower on SQLite, whose write-ahead log cannot be checkpointed past an open
/// transaction (docs/PERFORMANCE.md, "What the 16× ingest pays for", its
/// "Longer transactions, as a probe").
pub const TRANSACTION_BATCHES: usize = 4;

/// Real ids from the store, for ready-to-paste example URLs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Examples {
    /// The party with ledger rows found first.
    pub party: Option<String>,
    /// An asset of that party.
    pub asset: Option<String>,
    /// An oracle spec that matched some data.
    pub spec: Option<String>,
}
