//! Protobuf JSON (one NDJSON line) → an [`Event`].
//!
//! The wire form is protobuf JSON as Vega's tools print it: camelCase names, int64 and uint64
//! as strings (numbers are accepted too), enums by name (numeric codes are accepted too).

use std::borrow::Cow;
use std::fmt;

use ledger_core::{AccountType, TransferType};
use oracle_core::{Property, Signer};
use serde::Deserialize;
use serde::de::{self, Deserializer, Visitor};

use super::{Body, Event, parse_id, type_name};
use crate::error::{EventError, RecordError};

/// Decodes one line (without its line end).
///
/// The event borrows its block hash and chain id from `scratch` (a JSON string with escapes
/// cannot be borrowed from the line), which the caller keeps between lines.
pub(crate) fn decode<'s>(
    line: &'s [u8],
    scratch: &'s mut Scratch,
) -> Result<Event<'s>, RecordError> {
    // Bytes, not text: a line that is not UTF-8 is a malformed record with a position, not a
    // failure to read the input.
    let text = std::str::from_utf8(line).map_err(|_| RecordError::NotUtf8)?;
    let mut raw: RawEvent<'_> = serde_json::from_str(text).map_err(RecordError::Json)?;
    let block = raw.block.take().unwrap_or_default();
    let chain_id = raw.chain_id.take().unwrap_or_default();
    let (block, chain_id) = scratch.keep(block, chain_id);
    Ok(raw.into_event(block, chain_id)?)
}

/// Where the strings an [`Event`] borrows live when the line itself cannot hold them.
#[derive(Default)]
pub(crate) struct Scratch {
    block: String,
    chain_id: String,
}

impl Scratch {
    /// The two strings, borrowed from the line when they are, else copied here.
    fn keep<'s>(&'s mut self, block: Cow<'s, str>, chain_id: Cow<'s, str>) -> (&'s str, &'s str) {
        let keep = |text: Cow<'s, str>, slot: &'s mut String| -> &'s str {
            match text {
                Cow::Borrowed(text) => text,
                Cow::Owned(text) => {
                    *slot = text;
                    slot
                }
            }
        };
        (
            keep(block, &mut self.block),
            keep(chain_id, &mut self.chain_id),
        )
    }
}

impl RawEvent<'_> {
    fn into_event<'e>(self, block: &'e str, chain_id: &'e str) -> Result<Event<'e>, EventError> {
        let id = self.id.ok_or(EventError::MissingId)?;
        let (height, seq) = parse_id(&id)?;
        let missing = |event_type, payload| EventError::MissingPayload {
            event_type,
            payload,
        };
        let body = match self.kind.as_deref().unwrap_or("") {
            type_name::TIME_UPDATE => Body::Time(
                self.time_update
                    .ok_or_else(|| missing(type_name::TIME_UPDATE, "timeUpdate"))?
                    .timestamp
                    .0,
            ),
            type_name::BEGIN_BLOCK => Body::Time(
                self.begin_block
                    .ok_or_else(|| missing(type_name::BEGIN_BLOCK, "beginBlock"))?
                    .timestamp
                    .0,
            ),
            type_name::END_BLOCK => Body::EndBlock,
            type_name::LEDGER_MOVEMENTS => {
                let movements = self
                    .ledger_movements
                    .ok_or_else(|| missing(type_name::LEDGER_MOVEMENTS, "ledgerMovements"))?;
                let entries = movements
                    .ledger_movements
                    .into_iter()
                    .flat_map(|movement| movement.entries)
                    .enumerate()
                    .map(|(index, entry)| entry.into_domain(index))
                    .collect::<Result<_, _>>()?;
                Body::Ledger(entries)
            }
            type_name::ORACLE_DATA => {
                let event = self
                    .oracle_data
                    .ok_or_else(|| missing(type_name::ORACLE_DATA, "oracleData"))?;
                Body::Oracle(event.external_data.data.into_domain()?)
            }
            _ => Body::Other,
        };
        Ok(Event {
            height,
            seq,
            block,
            chain_id,
            body,
        })
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawEvent<'a> {
    #[serde(borrow)]
    id: Option<Cow<'a, str>>,
    #[serde(rename = "type", borrow)]
    kind: Option<Cow<'a, str>>,
    #[serde(borrow)]
    block: Option<Cow<'a, str>>,
    #[serde(borrow)]
    chain_id: Option<Cow<'a, str>>,
    time_update: Option<RawTime>,
    begin_block: Option<RawTime>,
    #[serde(borrow)]
    ledger_movements: Option<RawLedgerMovements<'a>>,
    #[serde(borrow)]
    oracle_data: Option<RawOracleDataEvent<'a>>,
}

#[derive(Deserialize)]
struct RawTime {
    timestamp: Int64,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawLedgerMovements<'a> {
    #[serde(borrow, default)]
    ledger_movements: Vec<RawLedgerMovement<'a>>,
}

#[derive(Deserialize)]
struct RawLedgerMovement<'a> {
    #[serde(borrow, default)]
    entries: Vec<RawEntry<'a>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawEntry<'a> {
    #[serde(borrow)]
    from_account: RawAccount<'a>,
    #[serde(borrow)]
    to_account: RawAccount<'a>,
    #[serde(borrow)]
    amount: Text<'a>,
    #[serde(rename = "type", borrow)]
    transfer_type: Text<'a>,
    timestamp: Int64,
    #[serde(borrow, default)]
    from_account_balance: Option<Text<'a>>,
    #[serde(borrow, default)]
    to_account_balance: Option<Text<'a>>,
    // `transferId` is not read: serde skips it without allocating.
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawAccount<'a> {
    #[serde(borrow)]
    asset_id: Cow<'a, str>,
    #[serde(rename = "type", borrow)]
    account_type: Text<'a>,
    #[serde(borrow, default)]
    owner: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    market_id: Option<Cow<'a, str>>,
}

impl RawEntry<'_> {
    fn into_domain(self, index: usize) -> Result<ledger_core::LedgerEntry, EventError> {
        let transfer_type = self
            .transfer_type
            .0
            .parse::<TransferType>()
            .map_err(|source| EventError::LedgerEntry {
                index,
                field: "type",
                source,
            })?;
        super::RawEntry {
            from: self.from_account.into_domain(index, "fromAccount")?,
            to: self.to_account.into_domain(index, "toAccount")?,
            amount: &self.amount.0,
            transfer_type,
            timestamp: self.timestamp.0,
            from_balance: self.from_account_balance.as_ref().map(|text| &*text.0),
            to_balance: self.to_account_balance.as_ref().map(|text| &*text.0),
        }
        .into_domain(index)
    }
}

impl RawAccount<'_> {
    fn into_domain(
        self,
        index: usize,
        field: &'static str,
    ) -> Result<ledger_core::Account, EventError> {
        let account_type = self
            .account_type
            .0
            .parse::<AccountType>()
            .map_err(|source| EventError::LedgerEntry {
                index,
                field,
                source,
            })?;
        super::RawAccount {
            asset_id: &self.asset_id,
            account_type,
            owner: self.owner.as_deref(),
            market_id: self.market_id.as_deref(),
        }
        .into_domain(index, field)
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawOracleDataEvent<'a> {
    #[serde(borrow)]
    external_data: RawExternalData<'a>,
}

#[derive(Deserialize)]
struct RawExternalData<'a> {
    #[serde(borrow)]
    data: RawOracleData<'a>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawOracleData<'a> {
    #[serde(borrow, default)]
    signers: Vec<RawSigner<'a>>,
    #[serde(borrow, default)]
    data: Vec<RawProperty<'a>>,
    #[serde(borrow, default)]
    matched_spec_ids: Vec<Cow<'a, str>>,
    #[serde(default)]
    broadcast_at: Option<Int64>,
    #[serde(borrow, default)]
    meta_data: Vec<RawProperty<'a>>,
    #[serde(borrow, default)]
    error: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawSigner<'a> {
    #[serde(borrow, default)]
    pub_key: Option<RawKey<'a>>,
    #[serde(borrow, default)]
    eth_address: Option<RawAddress<'a>>,
}

#[derive(Deserialize)]
struct RawKey<'a> {
    #[serde(borrow)]
    key: Cow<'a, str>,
}

#[derive(Deserialize)]
struct RawAddress<'a> {
    #[serde(borrow)]
    address: Cow<'a, str>,
}

#[derive(Deserialize)]
struct RawProperty<'a> {
    #[serde(borrow, default)]
    name: Cow<'a, str>,
    #[serde(borrow, default)]
    value: Cow<'a, str>,
}

impl RawOracleData<'_> {
    fn into_domain(self) -> Result<oracle_core::OracleData, EventError> {
        fn properties(list: Vec<RawProperty<'_>>) -> impl Iterator<Item = Property> {
            list.into_iter().map(|p| Property {
                name: p.name.into_owned(),
                value: p.value.into_owned(),
            })
        }
        super::RawOracleData {
            signers: self.signers.into_iter().map(|signer| {
                match (signer.pub_key, signer.eth_address) {
                    (Some(key), None) => Some(Signer::PubKey(key.key.into_owned())),
                    (None, Some(address)) => Some(Signer::EthAddress(address.address.into_owned())),
                    _ => None,
                }
            }),
            data: properties(self.data),
            meta_data: properties(self.meta_data),
            matched_spec_ids: self.matched_spec_ids.iter().map(|id| &**id),
            broadcast_at: self.broadcast_at.map_or(0, |t| t.0),
            error: self.error.map(Cow::into_owned),
        }
        .into_domain()
    }
}

/// An int64 written as a JSON string or a JSON number.
struct Int64(i64);

impl<'de> Deserialize<'de> for Int64 {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = Text::deserialize(deserializer)?;
        text.0
            .parse::<i64>()
            .map(Int64)
            .map_err(|_| de::Error::custom(format!("{:?} is not an int64", text.0)))
    }
}

/// A scalar written as a JSON string or a JSON integer, kept as text: amounts (uint256 carried
/// as decimal strings), enum names or codes.
struct Text<'a>(Cow<'a, str>);

impl<'de: 'a, 'a> Deserialize<'de> for Text<'a> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct TextVisitor;
        impl<'de> Visitor<'de> for TextVisitor {
            type Value = Text<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string or an integer")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(Text(Cow::Borrowed(v)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                Ok(Text(Cow::Owned(v.to_owned())))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
                Ok(Text(Cow::Owned(v.to_string())))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
                Ok(Text(Cow::Owned(v.to_string())))
            }
        }
        deserializer.deserialize_any(TextVisitor)
    }
}
