//! A deterministic synthetic Vega event-bus stream.
//!
//! [`generate()`] writes newline-delimited protobuf-JSON `BusEvent`s in the shape of a data-node
//! event dump: per block a BEGIN_BLOCK and a TIME_UPDATE, then LEDGER_MOVEMENTS, ORACLE_DATA and
//! the odd ACCOUNT event (which ingest must skip) in random order, then END_BLOCK. The server's
//! demo database, the tests and the benchmarks are all built from it.
//!
//! It begins as a real Vega core's stream does ([`GenerateConfig::genesis`]): a genesis block
//! that funds every party's general account in every asset with a deposit, then the first real
//! block at the same height and time with another hash, its event sequence restarting at 1 (so
//! ids `<height>-1`, `<height>-2`, … occur twice) and its first ledger entry a deposit. Every
//! event carries the chain id ([`GenerateConfig::chain_id`]) and its block's hash (64 uppercase
//! hex digits, as `BeginBlock.hash` gives it).
//!
//! The stream is internally consistent: a simulated ledger (see `ledger`) applies every entry
//! before writing it, so `fromAccountBalance`/`toAccountBalance` are the balances a replay
//! computes and no account but EXTERNAL pays more than it holds.
//!
//! It also carries the edge cases ingest must survive: amounts beyond 64 bits, entries whose
//! both sides belong to one party, owner ids in uppercase, entries with no owner on either side,
//! integers written as JSON numbers instead of strings, oracle data with errors, with no
//! matched spec, or with text that needs unescaping.
//!
//! Output is streamed through a fixed-size buffer, so memory depends on the number of parties,
//! assets and markets, never on the number of blocks.
//!
//! [`generate_as`] writes the same stream in another [`Format`]: as a Vega event buffer file,
//! each line transcoded into a `bus_proto::BusEvent` record. [`GenerateConfig::other_events_share`]
//! mixes in ACCOUNT events until they make that share of the stream, as the many event types a
//! data node skips do in a real one. [`GenerateConfig::DEFAULT`] is the one definition of the
//! defaults; the `serde` and `clap` features derive the traits tools need on the config and the
//! format.
//!
//! This crate must not know storage, ingest or HTTP: it only writes bytes.

// Tests may unwrap (STYLE.md); the library itself is still linted without `cfg(test)`.
#![cfg_attr(test, allow(clippy::unwrap_used))]

mod accounts;
mod buffer;
mod events;
mod ids;
mod json;
mod ledger;
mod oracle;
mod scenario;
#[cfg(test)]
mod tests;

use std::borrow::Cow;
use std::io::{self, Write};

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use buffer::BufferEncoder;
use events::Block;
use ids::{IdKind, IdTable, hex_id, random_hex};
use ledger::Ledger;
use ledger_core::hex::UPPER;
use oracle::OracleFeed;

/// Sizes and seed; the same config always yields the same bytes.
///
/// With the `serde` feature it (de)serializes with its field names; fields missing from the
/// input take their [`GenerateConfig::DEFAULT`] values, except [`GenerateConfig::genesis`]
/// (see there).
#[derive(Clone, Debug, PartialEq)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Serialize, serde::Deserialize),
    serde(default)
)]
pub struct GenerateConfig {
    /// Seeds both the event stream and the ids.
    pub seed: u64,
    /// Number of heights to write, from `start_height` on; with [`GenerateConfig::genesis`] the
    /// first height has two blocks, so the stream holds one block more.
    pub blocks: u64,
    /// Number of parties; at least 2, since transfers need a counterparty.
    pub parties: u32,
    /// Number of assets; at least 1.
    pub assets: u32,
    /// Number of markets; at least 1. Market `m` settles in asset `m % assets`.
    pub markets: u32,
    /// Number of oracle spec ids that data can match; 0 means data never matches a spec.
    pub specs: u32,
    /// Ledger entries in every block, exactly, grouped into events of 1–4 entries.
    pub entries_per_block: u32,
    /// ORACLE_DATA events in every block, exactly.
    pub oracle_data_per_block: u32,
    /// Height of the first block.
    pub start_height: u64,
    /// The first block is stamped one gap (0.5–1.5 s) after this time.
    pub start_time_nanos: i64,
    /// Fraction (0.0–1.0) of ledger entries that involve party 0; the other entries then
    /// avoid party 0 where they can, so the share is close to exact.
    pub whale_share: f64,
    /// Share (0 to below 1) of all events that are ACCOUNT events mixed in between the others:
    /// valid events of a type the data node does not store, as most of a real stream is. They
    /// come from a random stream of their own, so the stored events are the same whatever the
    /// share (only the sequence numbers in their ids move). Beside them, about one block in
    /// eight carries one ACCOUNT event even at share 0.
    pub other_events_share: f64,
    /// The chain every event belongs to (`BusEvent.chain_id`), never empty. Vega names its
    /// chains like `vega-mainnet-0011` or `vega-stagnet1-202307191148`.
    pub chain_id: Cow<'static, str>,
    /// Whether the stream starts where a core's stream starts: a genesis block at
    /// `start_height` holding a deposit into every party's general account in every asset
    /// (and nothing else), then the first real block at the same height and time with another
    /// hash and the event sequence restarting at 1. False for a stream that continues another
    /// one (see [`GenerateConfig::end_height`]), which starts at `start_height` directly.
    ///
    /// Absent from serialized input it is false, not the default: configs recorded before the
    /// field existed describe streams without the genesis block.
    #[cfg_attr(feature = "serde", serde(default))]
    pub genesis: bool,
}

impl GenerateConfig {
    /// The defaults: the demo database's stream, and every flag's default in `server generate`.
    ///
    /// A `const` rather than only a `Default` impl, so that clap attributes
    /// (`default_value_t = GenerateConfig::DEFAULT.seed`) and other constants can read it.
    pub const DEFAULT: GenerateConfig = GenerateConfig {
        seed: 42,
        blocks: 2000,
        parties: 50,
        assets: 3,
        markets: 4,
        specs: 20,
        entries_per_block: 20,
        oracle_data_per_block: 4,
        start_height: 1_000_001,
        start_time_nanos: 1_690_000_000_000_000_000,
        whale_share: 0.0,
        other_events_share: 0.0,
        chain_id: Cow::Borrowed("vega-mainnet-0011"),
        genesis: true,
    };

    /// The height after the last block: where a stream continuing this one starts (with
    /// `genesis: false`).
    pub fn end_height(&self) -> u64 {
        self.start_height.saturating_add(self.blocks)
    }
}

impl Default for GenerateConfig {
    fn default() -> Self {
        GenerateConfig::DEFAULT
    }
}

/// What was written.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GenerateSummary {
    /// Lines (bus events) of every type.
    pub events: u64,
    /// Blocks, each opened by BEGIN_BLOCK and closed by END_BLOCK; the genesis block included.
    pub blocks: u64,
    /// Ledger entries across all LEDGER_MOVEMENTS events.
    pub ledger_entries: u64,
    /// ORACLE_DATA events.
    pub oracle_data: u64,
    /// Events of types the data node does not store (ACCOUNT), included in `events`.
    pub other_events: u64,
}

/// How the stream is written.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[cfg_attr(
    feature = "serde",
    derive(serde::Serialize, serde::Deserialize),
    serde(rename_all = "kebab-case")
)]
pub enum Format {
    /// Newline-delimited protobuf-JSON `BusEvent`s, one per line.
    #[default]
    Ndjson,
    /// A Vega event buffer file: length-prefixed protobuf `BusEvent` records, numbered from 0.
    VegaBuffer,
}

/// Writes the stream described by `config` to `out` as NDJSON and returns what it wrote.
///
/// The same as [`generate_as`] with [`Format::Ndjson`].
pub fn generate(config: &GenerateConfig, out: &mut impl Write) -> io::Result<GenerateSummary> {
    generate_as(config, Format::Ndjson, out)
}

/// Writes the stream described by `config` to `out` in `format` and returns what it wrote.
///
/// Both formats hold the same events in the same order with the same ids, so ingesting
/// either gives the same database. The stream is buffered internally, so `out` need not be a
/// `BufWriter`; it is flushed at the end. Fails with [`io::ErrorKind::InvalidInput`] when the
/// config cannot be honoured (fewer than 2 parties, no asset or market, `whale_share` outside
/// 0–1, `other_events_share` outside 0 to below 1, an empty `chain_id`, heights or timestamps
/// that would overflow), before anything is written.
pub fn generate_as<W: Write>(
    config: &GenerateConfig,
    format: Format,
    out: &mut W,
) -> io::Result<GenerateSummary> {
    validate(config)?;
    let mut rng = ChaCha8Rng::seed_from_u64(config.seed);
    let mut stream = Stream {
        out,
        encoder: match format {
            Format::Ndjson => None,
            Format::VegaBuffer => Some(BufferEncoder::default()),
        },
        // A plain Vec rather than a BufWriter: appending cannot fail, so the JSON helpers need
        // no error plumbing, and it is handed to `out` in large chunks all the same.
        buf: Vec::with_capacity(FLUSH_AT + 8 * 1024),
        block: Block::new(&config.chain_id),
        other_events: OtherEvents::new(config),
        ids: IdTable::new(
            config.seed,
            config.parties,
            config.assets,
            config.markets,
            config.specs,
        ),
        ledger: Ledger::new(config),
        summary: GenerateSummary::default(),
    };
    let mut feed = OracleFeed::new(&mut rng);
    let mut time = config.start_time_nanos;

    for height in config.start_height..config.end_height() {
        time += rng.random_range(MIN_BLOCK_GAP_NANOS..=MAX_BLOCK_GAP_NANOS);
        if config.genesis && height == config.start_height {
            stream.write_genesis_block(config, height, time)?;
        }
        let block = &mut stream.block;
        block.start(height, time, random_hex(&mut rng, UPPER));
        block.write_begin_block(&mut stream.buf, &mut rng);
        block.write_time_update(&mut stream.buf);
        // TIME_UPDATE stays right after BEGIN_BLOCK, as Vega writes it; the owed share of
        // other events follows.
        stream.after_stored(2)?;

        let mut entries_left = u64::from(config.entries_per_block);
        let mut oracle_left = u64::from(config.oracle_data_per_block);
        let mut accounts_left = u64::from(rng.random_ratio(1, 8));
        while entries_left + oracle_left + accounts_left > 0 {
            // Weighting by (roughly) the events each kind has left spreads them evenly.
            let ledger_weight = entries_left.div_ceil(2);
            let ticket = rng.random_range(0..ledger_weight + oracle_left + accounts_left);
            let (block, buf, ids) = (&mut stream.block, &mut stream.buf, &stream.ids);
            if ticket < ledger_weight {
                let n_entries = rng.random_range(1..=4).min(entries_left);
                entries_left -= n_entries;
                stream.summary.ledger_entries += n_entries;
                block.write_ledger_movements(buf, &mut rng, ids, &mut stream.ledger, n_entries);
            } else if ticket < ledger_weight + oracle_left {
                oracle_left -= 1;
                stream.summary.oracle_data += 1;
                block.write_oracle_data(buf, &mut rng, ids, &mut feed);
            } else {
                accounts_left -= 1;
                stream.summary.other_events += 1;
                block.write_account(buf, &mut rng, ids, &stream.ledger);
            }
            stream.after_stored(1)?;
        }
        stream.end_block(&mut rng);
    }
    stream.hand_on()?;
    stream.out.flush()?;
    Ok(stream.summary)
}

/// The generator's state between blocks: where the bytes go, and what the stream has written.
struct Stream<'w, W> {
    out: &'w mut W,
    /// `Some` when the lines are transcoded into buffer records before they go out.
    encoder: Option<BufferEncoder>,
    /// Whole lines not yet handed to `out`.
    buf: Vec<u8>,
    block: Block,
    other_events: OtherEvents,
    ids: IdTable,
    ledger: Ledger,
    summary: GenerateSummary,
}

impl<W: Write> Stream<'_, W> {
    /// Follows `n_events` stored events inside a block: writes the other events now owed, and
    /// hands the buffer on once it is full (per event, not per block, which bounds memory even
    /// for huge blocks).
    fn after_stored(&mut self, n_events: u32) -> io::Result<()> {
        self.other_events.owe(n_events);
        self.summary.other_events +=
            self.other_events
                .write(&mut self.buf, &mut self.block, &self.ids, &self.ledger);
        if self.buf.len() >= FLUSH_AT {
            self.hand_on()?;
        }
        Ok(())
    }

    /// Closes the block; other events owed for END_BLOCK go into the next one.
    fn end_block(&mut self, rng: &mut impl Rng) {
        self.block.write_end_block(&mut self.buf, rng);
        self.other_events.owe(1);
        self.summary.events += u64::from(self.block.n_events());
        self.summary.blocks += 1;
    }

    /// Writes the buffered lines to `out`, transcoded if asked.
    fn hand_on(&mut self) -> io::Result<()> {
        match self.encoder.as_mut() {
            None => self.out.write_all(&self.buf),
            Some(encoder) => encoder.write(&self.buf, self.out),
        }?;
        self.buf.clear();
        Ok(())
    }

    /// Writes the genesis block at the first height and time: BEGIN_BLOCK, TIME_UPDATE, a
    /// deposit into every party's general account in every asset, END_BLOCK. Its draws come
    /// from a random stream of their own, so the blocks after it draw as they would without
    /// it; only the balances it funds change what they can move.
    fn write_genesis_block(
        &mut self,
        config: &GenerateConfig,
        height: u64,
        time: i64,
    ) -> io::Result<()> {
        let mut rng = ChaCha8Rng::seed_from_u64(config.seed ^ GENESIS_SEED_SALT);
        self.block.start(height, time, random_hex(&mut rng, UPPER));
        self.block.write_begin_block(&mut self.buf, &mut rng);
        self.block.write_time_update(&mut self.buf);
        self.after_stored(2)?;
        for party in 0..config.parties {
            for asset in 0..config.assets {
                let entry = self.ledger.genesis_deposit(party, asset, &mut rng);
                self.block.write_entry_event(
                    &mut self.buf,
                    &mut rng,
                    &self.ids,
                    &self.ledger,
                    &entry,
                );
                self.summary.ledger_entries += 1;
                self.after_stored(1)?;
            }
        }
        self.end_block(&mut rng);
        // The first real block moves money too, and opens with a deposit: data there matters
        // as much as in the genesis block, and ingest must not take it for a block it stored.
        self.ledger.deposit_next();
        Ok(())
    }
}

/// Salts the seed of the genesis block's random stream.
const GENESIS_SEED_SALT: u64 = 0x6A09_E667_F3BC_C909;

/// The ACCOUNT events mixed in at `other_events_share`, by error diffusion: every other event
/// adds `share / (1 - share)` to what is owed, and whole owed events are written at the next
/// point inside a block, so the share is exact over the stream up to the last block's rest.
struct OtherEvents {
    /// Their own random stream, so that mixing them in leaves every other draw unchanged.
    rng: ChaCha8Rng,
    per_event: f64,
    owed: f64,
}

impl OtherEvents {
    /// Salts the seed of their random stream (the fractional part of the golden ratio).
    const SEED_SALT: u64 = 0x9E37_79B9_7F4A_7C15;

    fn new(config: &GenerateConfig) -> OtherEvents {
        let share = config.other_events_share;
        OtherEvents {
            rng: ChaCha8Rng::seed_from_u64(config.seed ^ Self::SEED_SALT),
            per_event: share / (1.0 - share),
            owed: 0.0,
        }
    }

    /// Records that `n_events` stored events were written.
    fn owe(&mut self, n_events: u32) {
        self.owed += f64::from(n_events) * self.per_event;
    }

    /// Writes the whole events owed and returns how many.
    fn write(
        &mut self,
        buf: &mut Vec<u8>,
        block: &mut Block,
        ids: &IdTable,
        ledger: &Ledger,
    ) -> u64 {
        let mut written = 0;
        while self.owed >= 1.0 {
            self.owed -= 1.0;
            written += 1;
            block.write_account(buf, &mut self.rng, ids, ledger);
        }
        written
    }
}

/// Handy for tests and the demo: the id of party `index` (64 lowercase hex digits).
pub fn party_id(config: &GenerateConfig, index: u32) -> String {
    id_string(config, IdKind::Party, index)
}

/// The id of asset `index` (64 lowercase hex digits).
pub fn asset_id(config: &GenerateConfig, index: u32) -> String {
    id_string(config, IdKind::Asset, index)
}

/// The id of oracle spec `index` (64 lowercase hex digits).
pub fn spec_id(config: &GenerateConfig, index: u32) -> String {
    id_string(config, IdKind::Spec, index)
}

/// The id of `kind` number `index` (64 lowercase hex digits).
fn id_string(config: &GenerateConfig, kind: IdKind, index: u32) -> String {
    hex_id(config.seed, kind, u64::from(index))
        .iter()
        .map(|&digit| char::from(digit))
        .collect()
}

/// Tendermint block times on Vega are about a second apart, never exactly.
const MIN_BLOCK_GAP_NANOS: i64 = 500_000_000;
const MAX_BLOCK_GAP_NANOS: i64 = 1_500_000_000;
/// Bytes buffered before they are handed to the writer.
const FLUSH_AT: usize = 64 * 1024;

fn validate(config: &GenerateConfig) -> io::Result<()> {
    let invalid = |message: &str| Err(io::Error::new(io::ErrorKind::InvalidInput, message));
    if config.parties < 2 {
        return invalid("generator needs at least 2 parties");
    }
    if config.assets == 0 || config.markets == 0 {
        return invalid("generator needs at least one asset and one market");
    }
    if !(0.0..=1.0).contains(&config.whale_share) {
        return invalid("whale_share must be between 0 and 1");
    }
    if !(0.0..1.0).contains(&config.other_events_share) {
        return invalid("other_events_share must be at least 0 and below 1");
    }
    if config.chain_id.is_empty() {
        return invalid("chain_id must not be empty");
    }
    if config.start_height.checked_add(config.blocks).is_none() {
        return invalid("block heights would overflow");
    }
    let last_time = i128::from(config.start_time_nanos)
        + i128::from(config.blocks) * i128::from(MAX_BLOCK_GAP_NANOS);
    if last_time > i128::from(i64::MAX) {
        return invalid("block timestamps would overflow");
    }
    Ok(())
}
