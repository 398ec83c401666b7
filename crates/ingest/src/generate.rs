//! A deterministic synthetic Vega event-bus stream.
//!
//! [`generate()`] writes newline-delimited protobuf-JSON `BusEvent`s in the shape of a data-node
//! event dump: per block a BEGIN_BLOCK and a TIME_UPDATE, then LEDGER_MOVEMENTS, ORACLE_DATA and
//! the odd ACCOUNT event (which ingest must skip) in random order, then END_BLOCK. The server's
//! demo database, the tests and the benchmarks are all built from it.
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

mod accounts;
mod events;
mod ids;
mod json;
mod ledger;
mod oracle;
mod scenario;
#[cfg(test)]
mod tests;

use std::io::{self, Write};

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use events::Block;
use ids::{IdKind, IdTable, hex_id, random_hex};
use ledger::Ledger;
use ledger_core::hex::UPPER;
use oracle::OracleFeed;

/// Sizes and seed; the same config always yields the same bytes.
#[derive(Clone, Debug)]
pub struct GenerateConfig {
    /// Seeds both the event stream and the ids.
    pub seed: u64,
    /// Number of blocks to write.
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
}

impl Default for GenerateConfig {
    fn default() -> Self {
        GenerateConfig {
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
        }
    }
}

/// What was written.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GenerateSummary {
    /// Lines (bus events) of every type.
    pub events: u64,
    /// Blocks, each opened by BEGIN_BLOCK and closed by END_BLOCK.
    pub blocks: u64,
    /// Ledger entries across all LEDGER_MOVEMENTS events.
    pub ledger_entries: u64,
    /// ORACLE_DATA events.
    pub oracle_data: u64,
}

/// Writes the stream described by `config` to `out` and returns what it wrote.
///
/// The stream is buffered internally, so `out` need not be a `BufWriter`; it is flushed at
/// the end. Fails with [`io::ErrorKind::InvalidInput`] when the config cannot be honoured
/// (fewer than 2 parties, no asset or market, `whale_share` outside 0–1, heights or
/// timestamps that would overflow), before anything is written.
pub fn generate(config: &GenerateConfig, out: &mut impl Write) -> io::Result<GenerateSummary> {
    validate(config)?;
    let mut rng = ChaCha8Rng::seed_from_u64(config.seed);
    let ids = IdTable::new(
        config.seed,
        config.parties,
        config.assets,
        config.markets,
        config.specs,
    );
    let mut ledger = Ledger::new(config);
    let mut feed = OracleFeed::new(&mut rng);
    // A plain Vec rather than a BufWriter: appending cannot fail, so the JSON helpers need no
    // error plumbing, and it is handed to `out` in large chunks all the same.
    let mut buf: Vec<u8> = Vec::with_capacity(FLUSH_AT + 8 * 1024);
    let mut summary = GenerateSummary::default();
    let mut time = config.start_time_nanos;
    let mut block = Block::new();

    for height in config.start_height..config.start_height + config.blocks {
        time += rng.random_range(MIN_BLOCK_GAP_NANOS..=MAX_BLOCK_GAP_NANOS);
        block.start(height, time, random_hex(&mut rng, UPPER));

        block.write_begin_block(&mut buf, &mut rng);
        block.write_time_update(&mut buf);

        let mut entries_left = u64::from(config.entries_per_block);
        let mut oracle_left = u64::from(config.oracle_data_per_block);
        let mut accounts_left = u64::from(rng.random_ratio(1, 8));
        while entries_left + oracle_left + accounts_left > 0 {
            // Weighting by (roughly) the events each kind has left spreads them evenly.
            let ledger_weight = entries_left.div_ceil(2);
            let ticket = rng.random_range(0..ledger_weight + oracle_left + accounts_left);
            if ticket < ledger_weight {
                let n_entries = rng.random_range(1..=4).min(entries_left);
                entries_left -= n_entries;
                summary.ledger_entries += n_entries;
                block.write_ledger_movements(&mut buf, &mut rng, &ids, &mut ledger, n_entries);
            } else if ticket < ledger_weight + oracle_left {
                oracle_left -= 1;
                summary.oracle_data += 1;
                block.write_oracle_data(&mut buf, &mut rng, &ids, &mut feed);
            } else {
                accounts_left -= 1;
                block.write_account(&mut buf, &mut rng, &ids, &ledger);
            }
            // Flushing per event, not per block, bounds memory even for huge blocks.
            if buf.len() >= FLUSH_AT {
                out.write_all(&buf)?;
                buf.clear();
            }
        }

        block.write_end_block(&mut buf, &mut rng);
        summary.events += u64::from(block.n_events());
        summary.blocks += 1;
    }
    out.write_all(&buf)?;
    out.flush()?;
    Ok(summary)
}

/// Handy for tests and the demo: the id of party `index` (64 lowercase hex digits).
pub fn party_id(config: &GenerateConfig, index: u32) -> String {
    id_string(config, IdKind::Party, index)
}

/// The id of asset `index` (64 lowercase hex digits).
pub fn asset_id(config: &GenerateConfig, index: u32) -> String {
    id_string(config, IdKind::Asset, index)
}

/// The id of market `index` (64 lowercase hex digits).
pub fn market_id(config: &GenerateConfig, index: u32) -> String {
    id_string(config, IdKind::Market, index)
}

/// The id of oracle spec `index` (64 lowercase hex digits).
pub fn spec_id(config: &GenerateConfig, index: u32) -> String {
    id_string(config, IdKind::Spec, index)
}

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
