//! A deterministic synthetic Vega event-bus stream.
//!
//! [`generate`] writes newline-delimited protobuf-JSON `BusEvent`s in the shape of a data-node
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

mod ids;
mod json;
mod ledger;
mod oracle;
#[cfg(test)]
mod tests;

use std::io::{self, Write};

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use ids::{IdKind, IdTable, LOWER, UPPER, hex_id, random_hex};
use json::{one_percent, push_i64, push_int, push_quoted, push_u64};
use ledger::{Account, Entry, Ledger};
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

    for height in config.start_height..config.start_height + config.blocks {
        time += rng.random_range(MIN_BLOCK_GAP_NANOS..=MAX_BLOCK_GAP_NANOS);
        let mut block = Block {
            height,
            time,
            hash: random_hex(&mut rng, UPPER),
            seq: 0,
        };

        block.begin_event(&mut buf, "BEGIN_BLOCK");
        buf.extend_from_slice(br#""beginBlock":{"height":"#);
        push_int(&mut buf, u128::from(height), one_percent(rng.random()));
        buf.extend_from_slice(br#","timestamp":"#);
        push_i64(&mut buf, time, false);
        buf.extend_from_slice(br#","hash":"#);
        push_quoted(&mut buf, &block.hash);
        buf.extend_from_slice(b"}}\n");
        block.begin_event(&mut buf, "TIME_UPDATE");
        buf.extend_from_slice(br#""timeUpdate":{"timestamp":"#);
        push_i64(&mut buf, time, false);
        buf.extend_from_slice(b"}}\n");

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
                block.begin_event(&mut buf, "LEDGER_MOVEMENTS");
                push_tx_hash(&mut buf, &mut rng);
                write_ledger_movements(&mut buf, &mut rng, &ids, &mut ledger, &block, n_entries);
            } else if ticket < ledger_weight + oracle_left {
                oracle_left -= 1;
                summary.oracle_data += 1;
                block.begin_event(&mut buf, "ORACLE_DATA");
                push_tx_hash(&mut buf, &mut rng);
                feed.write_body(&mut buf, &mut rng, &ids, time);
            } else {
                accounts_left -= 1;
                block.begin_event(&mut buf, "ACCOUNT");
                write_account(&mut buf, &mut rng, config.seed, &ids, &mut ledger);
            }
            buf.extend_from_slice(b"}\n");
            // Flushing per event, not per block, bounds memory even for huge blocks.
            if buf.len() >= FLUSH_AT {
                out.write_all(&buf)?;
                buf.clear();
            }
        }

        block.begin_event(&mut buf, "END_BLOCK");
        buf.extend_from_slice(br#""endBlock":{"height":"#);
        push_int(&mut buf, u128::from(height), one_percent(rng.random()));
        buf.extend_from_slice(b"}}\n");
        summary.events += u64::from(block.seq);
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
const CHAIN_ID: &str = "vega-mainnet-0011";

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

/// The block being written and the sequence number of its last event.
struct Block {
    height: u64,
    time: i64,
    hash: [u8; 64],
    seq: u32,
}

impl Block {
    /// Appends the envelope of the next event, up to and including the comma before its body.
    fn begin_event(&mut self, buf: &mut Vec<u8>, event_type: &str) {
        self.seq += 1;
        buf.extend_from_slice(br#"{"id":""#);
        push_u64(buf, self.height);
        buf.push(b'-');
        push_u64(buf, u64::from(self.seq));
        buf.extend_from_slice(br#"","block":"#);
        push_quoted(buf, &self.hash);
        buf.extend_from_slice(br#","type":"BUS_EVENT_TYPE_"#);
        buf.extend_from_slice(event_type.as_bytes());
        buf.extend_from_slice(br#"","version":1,"chainId":""#);
        buf.extend_from_slice(CHAIN_ID.as_bytes());
        buf.extend_from_slice(b"\",");
    }
}

fn push_tx_hash(buf: &mut Vec<u8>, rng: &mut impl Rng) {
    buf.extend_from_slice(br#""txHash":""#);
    buf.extend_from_slice(&random_hex(rng, UPPER));
    buf.extend_from_slice(b"\",");
}

/// Appends the body of a LEDGER_MOVEMENTS event holding `n_entries` fresh entries.
fn write_ledger_movements(
    buf: &mut Vec<u8>,
    rng: &mut impl Rng,
    ids: &IdTable,
    ledger: &mut Ledger,
    block: &Block,
    n_entries: u64,
) {
    // Most events hold one movement, as in the sample; some split their entries over two so
    // that ingest cannot assume a single `ledgerMovements[]` item.
    let split_after = if n_entries > 1 && rng.random_ratio(3, 20) {
        rng.random_range(1..n_entries)
    } else {
        n_entries
    };
    buf.extend_from_slice(br#""ledgerMovements":{"ledgerMovements":[{"entries":["#);
    for entry_idx in 0..n_entries {
        if entry_idx == split_after {
            buf.extend_from_slice(br#"],"balances":[]},{"entries":["#);
        } else if entry_idx > 0 {
            buf.push(b',');
        }
        let entry = ledger.next_entry(rng);
        write_entry(buf, rng, ids, ledger, block, &entry);
    }
    buf.extend_from_slice(br#"],"balances":[]}]}"#);
}

/// Appends one `LedgerEntry`.
fn write_entry(
    buf: &mut Vec<u8>,
    rng: &mut impl Rng,
    ids: &IdTable,
    ledger: &Ledger,
    block: &Block,
    entry: &Entry,
) {
    // One draw supplies the number-or-string and owner-case choices of every field.
    let style: u64 = rng.random();
    buf.extend_from_slice(br#"{"fromAccount":"#);
    write_account_details(buf, style >> 40, ids, ledger, entry.from);
    buf.extend_from_slice(br#","toAccount":"#);
    write_account_details(buf, style >> 50, ids, ledger, entry.to);
    buf.extend_from_slice(br#","amount":"#);
    push_int(buf, entry.amount, one_percent(style));
    buf.extend_from_slice(br#","type":""#);
    buf.extend_from_slice(entry.transfer_type.name().as_bytes());
    buf.extend_from_slice(br#"","timestamp":"#);
    push_i64(buf, block.time, one_percent(style >> 10));
    buf.extend_from_slice(br#","fromAccountBalance":"#);
    push_int(buf, entry.from_balance, one_percent(style >> 20));
    buf.extend_from_slice(br#","toAccountBalance":"#);
    push_int(buf, entry.to_balance, one_percent(style >> 30));
    if entry.has_transfer_id {
        buf.extend_from_slice(br#","transferId":"#);
        push_quoted(buf, &random_hex(rng, LOWER));
    }
    buf.push(b'}');
}

/// Appends `AccountDetails`; about 1% of owners are written in uppercase (`style` bits) to
/// make ingest normalise the case of ids.
fn write_account_details(
    buf: &mut Vec<u8>,
    style: u64,
    ids: &IdTable,
    ledger: &Ledger,
    account: Account,
) {
    buf.extend_from_slice(br#"{"assetId":"#);
    push_quoted(buf, &ids.assets[ledger.asset_of(account) as usize]);
    buf.extend_from_slice(br#","type":""#);
    buf.extend_from_slice(account.type_name().as_bytes());
    buf.push(b'"');
    if let Some(party) = account.owner() {
        buf.extend_from_slice(br#","owner":"#);
        let id = &ids.parties[party as usize];
        if one_percent(style) {
            push_quoted(buf, &id.map(|digit| digit.to_ascii_uppercase()));
        } else {
            push_quoted(buf, id);
        }
    }
    if let Some(market) = account.market() {
        buf.extend_from_slice(br#","marketId":"#);
        push_quoted(buf, &ids.markets[market as usize]);
    }
    buf.push(b'}');
}

/// Appends the body of an ACCOUNT event for a random general account, with its current balance.
fn write_account(
    buf: &mut Vec<u8>,
    rng: &mut impl Rng,
    seed: u64,
    ids: &IdTable,
    ledger: &mut Ledger,
) {
    let party = rng.random_range(0..ids.parties.len() as u32);
    let asset = rng.random_range(0..ids.assets.len() as u32);
    let account_index = u64::from(party) * ids.assets.len() as u64 + u64::from(asset);
    buf.extend_from_slice(br#""account":{"id":"#);
    push_quoted(buf, &hex_id(seed, IdKind::Account, account_index));
    buf.extend_from_slice(br#","owner":"#);
    push_quoted(buf, &ids.parties[party as usize]);
    buf.extend_from_slice(br#","balance":"#);
    push_int(
        buf,
        ledger.balance(Account::General { party, asset }),
        false,
    );
    buf.extend_from_slice(br#","asset":"#);
    push_quoted(buf, &ids.assets[asset as usize]);
    // "!" is how Vega marks "no market" in account events.
    buf.extend_from_slice(br#","marketId":"!","type":"ACCOUNT_TYPE_GENERAL"}"#);
}
