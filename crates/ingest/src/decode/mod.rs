//! One record's bytes → a format-neutral [`Event`], validated into domain values.
//!
//! [`json`] reads protobuf JSON (NDJSON lines), [`proto`] reads protobuf (buffer records,
//! socket messages). Both look at the event's type first and decode only the payload of the
//! types the store keeps; both build the domain values through the functions here, so that a
//! value means the same whichever encoding carried it.

pub(crate) mod json;
pub(crate) mod proto;

use ledger_core::{
    Account, AccountType, Amount, AssetId, LedgerEntry, MarketId, OracleSpecId, Owner,
    TransferType, VegaTime,
};
use oracle_core::{OracleData, Property, Signer};

use crate::error::EventError;

/// An event that matters to the store, with its place in the stream.
#[derive(Debug)]
pub(crate) struct Event<'a> {
    pub height: u64,
    pub seq: u64,
    /// The block hash (`BusEvent.block`), empty when the stream has none.
    pub block: &'a str,
    /// The chain id (`BusEvent.chain_id`), empty when the stream has none.
    pub chain_id: &'a str,
    pub body: Body,
}

/// What an event carries.
#[derive(Debug)]
pub(crate) enum Body {
    /// The vega time changes (time update or begin block).
    Time(i64),
    /// The block ends.
    EndBlock,
    /// Ledger entries, flattened across the event's movements, in order.
    Ledger(Vec<LedgerEntry>),
    /// One oracle datum.
    Oracle(OracleData),
    /// Any other event type: it only advances the block's sequence.
    Other,
}

/// The names of the event types the store reads, for messages.
mod type_name {
    pub(super) const LEDGER_MOVEMENTS: &str = "BUS_EVENT_TYPE_LEDGER_MOVEMENTS";
    pub(super) const ORACLE_DATA: &str = "BUS_EVENT_TYPE_ORACLE_DATA";
    pub(super) const TIME_UPDATE: &str = "BUS_EVENT_TYPE_TIME_UPDATE";
    pub(super) const BEGIN_BLOCK: &str = "BUS_EVENT_TYPE_BEGIN_BLOCK";
    pub(super) const END_BLOCK: &str = "BUS_EVENT_TYPE_END_BLOCK";
}

/// `"<block height>-<sequence>"`, both within SQLite's signed 64-bit integers.
fn parse_id(id: &str) -> Result<(u64, u64), EventError> {
    let invalid = || EventError::InvalidId(id.to_owned());
    let (height, seq) = id.split_once('-').ok_or_else(invalid)?;
    let number = |text: &str| -> Result<u64, EventError> {
        if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
            return Err(invalid());
        }
        text.parse::<i64>().map(|n| n as u64).map_err(|_| invalid())
    };
    Ok((number(height)?, number(seq)?))
}

/// One side of a ledger entry as the wire carries it.
struct RawAccount<'a> {
    asset_id: &'a str,
    account_type: AccountType,
    owner: Option<&'a str>,
    market_id: Option<&'a str>,
}

impl RawAccount<'_> {
    fn into_domain(self, index: usize, field: &'static str) -> Result<Account, EventError> {
        let context = |source| EventError::LedgerEntry {
            index,
            field,
            source,
        };
        // Vega writes "!" for "no market" in some account payloads; treat it like absence.
        let market = match self.market_id {
            None | Some("" | "!") => None,
            Some(id) => Some(id.parse::<MarketId>().map_err(context)?),
        };
        Ok(Account {
            asset: self.asset_id.parse::<AssetId>().map_err(context)?,
            account_type: self.account_type,
            owner: Owner::parse(self.owner).map_err(context)?,
            market,
        })
    }
}

/// A ledger entry as the wire carries it; balances are `None` when absent (protobuf JSON) or
/// empty (protobuf): both encodings' way of writing an empty string.
struct RawEntry<'a> {
    from: Account,
    to: Account,
    amount: &'a str,
    transfer_type: TransferType,
    timestamp: i64,
    from_balance: Option<&'a str>,
    to_balance: Option<&'a str>,
}

impl RawEntry<'_> {
    fn into_domain(self, index: usize) -> Result<LedgerEntry, EventError> {
        let amount = |text: &str, field: &'static str| {
            text.parse::<Amount>()
                .map_err(|source| EventError::LedgerEntry {
                    index,
                    field,
                    source,
                })
        };
        // Vega never leaves a balance empty, so the only faithful reading of one is zero.
        Ok(LedgerEntry {
            from: self.from,
            to: self.to,
            amount: amount(self.amount, "amount")?,
            transfer_type: self.transfer_type,
            timestamp: VegaTime::from_nanos(self.timestamp),
            from_balance: amount(self.from_balance.unwrap_or("0"), "fromAccountBalance")?,
            to_balance: amount(self.to_balance.unwrap_or("0"), "toAccountBalance")?,
        })
    }
}

/// An oracle datum as the wire carries it; a signer is `None` when it is neither kind (or
/// both, in protobuf JSON).
struct RawOracleData<'a, S, P, M>
where
    S: Iterator<Item = Option<Signer>>,
    P: Iterator<Item = Property>,
    M: Iterator<Item = &'a str>,
{
    signers: S,
    data: P,
    meta_data: P,
    matched_spec_ids: M,
    broadcast_at: i64,
    error: Option<String>,
}

impl<'a, S, P, M> RawOracleData<'a, S, P, M>
where
    S: Iterator<Item = Option<Signer>>,
    P: Iterator<Item = Property>,
    M: Iterator<Item = &'a str>,
{
    fn into_domain(self) -> Result<OracleData, EventError> {
        let signers = self
            .signers
            .enumerate()
            .map(|(idx, signer)| signer.ok_or(EventError::OracleSigner(idx)))
            .collect::<Result<_, _>>()?;
        let matched_spec_ids = self
            .matched_spec_ids
            .map(str::parse::<OracleSpecId>)
            .collect::<Result<_, _>>()
            .map_err(EventError::MatchedSpecId)?;
        Ok(OracleData {
            signers,
            data: self.data.collect(),
            meta_data: self.meta_data.collect(),
            matched_spec_ids,
            broadcast_at: self.broadcast_at,
            error: self.error,
        })
    }
}
