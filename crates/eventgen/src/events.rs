//! Writing whole bus events: the envelope every event shares and the bodies of each type.

use rand::Rng;

use super::accounts::{Account, Entry};
use super::ids::{IdTable, random_hex};
use super::json::{one_percent, push_decimal, push_i64, push_int, push_quoted};
use super::ledger::Ledger;
use super::oracle::OracleFeed;
use ledger_core::hex::{LOWER, UPPER};

/// Opens the body of a LEDGER_MOVEMENTS event, up to its first entry.
const MOVEMENTS_HEAD: &[u8] = br#""ledgerMovements":{"ledgerMovements":[{"entries":["#;
/// Closes the body and the line after the last entry.
const MOVEMENTS_TAIL: &[u8] = b"],\"balances\":[]}]}}\n";

/// The block being written, with the text its events repeat formatted once: formatting a
/// 19-digit timestamp per entry was the generator's hottest spot.
pub(super) struct Block {
    height: u64,
    time: i64,
    hash: [u8; 64],
    /// Sequence number of the last event written.
    seq: u32,
    /// `{"id":"<height>-`
    id_head: Vec<u8>,
    /// `","block":"<hash>","type":"BUS_EVENT_TYPE_`
    id_tail: Vec<u8>,
    /// The timestamp as a quoted JSON string.
    time_text: Vec<u8>,
    /// `","version":1,"chainId":"<chain id>",`: the rest of the envelope, the same for every
    /// event of the stream.
    envelope_tail: Vec<u8>,
}

impl Block {
    /// A writer of blocks of the chain `chain_id`.
    pub(super) fn new(chain_id: &str) -> Block {
        let mut envelope_tail = br#"","version":1,"chainId":"#.to_vec();
        // Through serde_json, so that any chain id a config names is written escaped as JSON.
        serde_json::to_writer(&mut envelope_tail, chain_id).expect("a str always serializes");
        envelope_tail.push(b',');
        Block {
            height: 0,
            time: 0,
            hash: [0; 64],
            seq: 0,
            id_head: Vec::new(),
            id_tail: Vec::new(),
            time_text: Vec::new(),
            envelope_tail,
        }
    }

    /// Moves on to a new block, reusing the buffers.
    pub(super) fn start(&mut self, height: u64, time: i64, hash: [u8; 64]) {
        self.height = height;
        self.time = time;
        self.hash = hash;
        self.seq = 0;
        self.id_head.clear();
        self.id_head.extend_from_slice(br#"{"id":""#);
        push_decimal(&mut self.id_head, height);
        self.id_head.push(b'-');
        self.id_tail.clear();
        self.id_tail.extend_from_slice(br#"","block":"#);
        push_quoted(&mut self.id_tail, &hash);
        self.id_tail
            .extend_from_slice(br#","type":"BUS_EVENT_TYPE_"#);
        self.time_text.clear();
        push_i64(&mut self.time_text, time, false);
    }

    /// Appends the envelope of the next event, up to and including the comma before its body.
    fn begin_event(&mut self, buf: &mut Vec<u8>, event_type: &str) {
        self.seq += 1;
        buf.extend_from_slice(&self.id_head);
        push_decimal(buf, self.seq);
        buf.extend_from_slice(&self.id_tail);
        buf.extend_from_slice(event_type.as_bytes());
        buf.extend_from_slice(&self.envelope_tail);
    }

    /// Events written so far in this block.
    pub(super) fn n_events(&self) -> u32 {
        self.seq
    }

    /// Appends the BEGIN_BLOCK line.
    pub(super) fn write_begin_block(&mut self, buf: &mut Vec<u8>, rng: &mut impl Rng) {
        self.begin_event(buf, "BEGIN_BLOCK");
        buf.extend_from_slice(br#""beginBlock":{"height":"#);
        push_int(buf, u128::from(self.height), one_percent(rng.random()));
        buf.extend_from_slice(br#","timestamp":"#);
        buf.extend_from_slice(&self.time_text);
        buf.extend_from_slice(br#","hash":"#);
        push_quoted(buf, &self.hash);
        buf.extend_from_slice(b"}}\n");
    }

    /// Appends the TIME_UPDATE line.
    pub(super) fn write_time_update(&mut self, buf: &mut Vec<u8>) {
        self.begin_event(buf, "TIME_UPDATE");
        buf.extend_from_slice(br#""timeUpdate":{"timestamp":"#);
        buf.extend_from_slice(&self.time_text);
        buf.extend_from_slice(b"}}\n");
    }

    /// Appends the END_BLOCK line.
    pub(super) fn write_end_block(&mut self, buf: &mut Vec<u8>, rng: &mut impl Rng) {
        self.begin_event(buf, "END_BLOCK");
        buf.extend_from_slice(br#""endBlock":{"height":"#);
        push_int(buf, u128::from(self.height), one_percent(rng.random()));
        buf.extend_from_slice(b"}}\n");
    }

    /// Appends a LEDGER_MOVEMENTS line holding `n_entries` fresh entries.
    pub(super) fn write_ledger_movements(
        &mut self,
        buf: &mut Vec<u8>,
        rng: &mut impl Rng,
        ids: &IdTable,
        ledger: &mut Ledger,
        n_entries: u64,
    ) {
        self.begin_event(buf, "LEDGER_MOVEMENTS");
        push_tx_hash(buf, rng);
        // Most events hold one movement, as in the sample; some split their entries over two
        // so that ingest cannot assume a single `ledgerMovements[]` item.
        let split_after = if n_entries > 1 && rng.random_ratio(3, 20) {
            rng.random_range(1..n_entries)
        } else {
            n_entries
        };
        buf.extend_from_slice(MOVEMENTS_HEAD);
        for entry_idx in 0..n_entries {
            if entry_idx == split_after {
                buf.extend_from_slice(br#"],"balances":[]},{"entries":["#);
            } else if entry_idx > 0 {
                buf.push(b',');
            }
            let entry = ledger.next_entry(rng);
            write_entry(self, buf, rng, ids, ledger, &entry);
        }
        buf.extend_from_slice(MOVEMENTS_TAIL);
    }

    /// Appends a LEDGER_MOVEMENTS line holding `entry`, already applied to the ledger.
    pub(super) fn write_entry_event(
        &mut self,
        buf: &mut Vec<u8>,
        rng: &mut impl Rng,
        ids: &IdTable,
        ledger: &Ledger,
        entry: &Entry,
    ) {
        self.begin_event(buf, "LEDGER_MOVEMENTS");
        push_tx_hash(buf, rng);
        buf.extend_from_slice(MOVEMENTS_HEAD);
        write_entry(self, buf, rng, ids, ledger, entry);
        buf.extend_from_slice(MOVEMENTS_TAIL);
    }

    /// Appends an ORACLE_DATA line.
    pub(super) fn write_oracle_data(
        &mut self,
        buf: &mut Vec<u8>,
        rng: &mut impl Rng,
        ids: &IdTable,
        feed: &mut OracleFeed,
    ) {
        self.begin_event(buf, "ORACLE_DATA");
        push_tx_hash(buf, rng);
        feed.write_body(buf, rng, ids, self.time);
        buf.extend_from_slice(b"}\n");
    }

    /// Appends an ACCOUNT line (an event type ingest must skip) for a random general
    /// account, with its current balance.
    pub(super) fn write_account(
        &mut self,
        buf: &mut Vec<u8>,
        rng: &mut impl Rng,
        ids: &IdTable,
        ledger: &Ledger,
    ) {
        self.begin_event(buf, "ACCOUNT");
        let party = rng.random_range(0..ids.parties.len() as u32);
        let asset = rng.random_range(0..ids.assets.len() as u32);
        let account_index = u64::from(party) * ids.assets.len() as u64 + u64::from(asset);
        buf.extend_from_slice(br#""account":{"id":"#);
        push_quoted(buf, &ids.account_id(account_index));
        buf.extend_from_slice(br#","owner":"#);
        push_quoted(buf, &ids.parties[party as usize]);
        buf.extend_from_slice(br#","balance":"#);
        let balance = ledger.balance(Account::General { party, asset });
        push_int(buf, balance, false);
        buf.extend_from_slice(br#","asset":"#);
        push_quoted(buf, &ids.assets[asset as usize]);
        // "!" is how Vega marks "no market" in account events.
        buf.extend_from_slice(b",\"marketId\":\"!\",\"type\":\"ACCOUNT_TYPE_GENERAL\"}}\n");
    }

    /// Appends the block time, as a bare number if asked and it fits.
    fn push_time(&self, buf: &mut Vec<u8>, as_number: bool) {
        if as_number {
            push_i64(buf, self.time, true);
        } else {
            buf.extend_from_slice(&self.time_text);
        }
    }
}

fn push_tx_hash(buf: &mut Vec<u8>, rng: &mut impl Rng) {
    buf.extend_from_slice(br#""txHash":""#);
    buf.extend_from_slice(&random_hex(rng, UPPER));
    buf.extend_from_slice(b"\",");
}

/// Appends one `LedgerEntry`.
fn write_entry(
    block: &Block,
    buf: &mut Vec<u8>,
    rng: &mut impl Rng,
    ids: &IdTable,
    ledger: &Ledger,
    entry: &Entry,
) {
    // One draw supplies the number-or-string and owner-case choices of every field, ten bits
    // each: amount, timestamp, the two balances, the two owners.
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
    block.push_time(buf, one_percent(style >> 10));
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
