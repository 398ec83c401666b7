//! One event-bus line → a typed event, validated into domain values.
//!
//! The wire form is protobuf JSON as Vega's tools print it: camelCase names, int64 and uint64
//! as strings (numbers are accepted too), enums by name (numeric codes are accepted too).

use std::borrow::Cow;
use std::fmt;

use ledger_core::{
    Account, AccountType, Amount, AssetId, LedgerEntry, MarketId, OracleSpecId, Owner,
    TransferType, VegaTime,
};
use oracle_core::{OracleData, Property, Signer};
use serde::Deserialize;
use serde::de::{self, Deserializer, Visitor};

/// An event that matters to the store, with its place in the stream.
#[derive(Debug)]
pub(crate) struct Event {
    pub height: u64,
    pub seq: u64,
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

/// Parses one line. The error is a human sentence, without the line number.
pub(crate) fn parse(line: &str) -> Result<Event, String> {
    let raw: RawEvent<'_> =
        serde_json::from_str(line).map_err(|err| format!("invalid JSON event: {err}"))?;
    let id = raw.id.ok_or("event has no id")?;
    let (height, seq) = parse_id(&id)?;
    let kind = raw.kind.as_deref().unwrap_or("");
    let missing = |field: &str| format!("{kind} event has no {field}");
    let body = match kind {
        "BUS_EVENT_TYPE_TIME_UPDATE" => Body::Time(
            raw.time_update
                .ok_or_else(|| missing("timeUpdate"))?
                .timestamp
                .0,
        ),
        "BUS_EVENT_TYPE_BEGIN_BLOCK" => Body::Time(
            raw.begin_block
                .ok_or_else(|| missing("beginBlock"))?
                .timestamp
                .0,
        ),
        "BUS_EVENT_TYPE_END_BLOCK" => Body::EndBlock,
        "BUS_EVENT_TYPE_LEDGER_MOVEMENTS" => {
            let movements = raw
                .ledger_movements
                .ok_or_else(|| missing("ledgerMovements"))?;
            let mut entries = Vec::new();
            for (entry_idx, entry) in movements
                .ledger_movements
                .into_iter()
                .flat_map(|m| m.entries)
                .enumerate()
            {
                entries.push(
                    entry
                        .into_domain()
                        .map_err(|err| format!("ledger entry {entry_idx}: {err}"))?,
                );
            }
            Body::Ledger(entries)
        }
        "BUS_EVENT_TYPE_ORACLE_DATA" => {
            let event = raw.oracle_data.ok_or_else(|| missing("oracleData"))?;
            Body::Oracle(event.external_data.data.into_domain()?)
        }
        _ => Body::Other,
    };
    Ok(Event { height, seq, body })
}

/// `"<block height>-<sequence>"`, both within SQLite's signed 64-bit integers.
fn parse_id(id: &str) -> Result<(u64, u64), String> {
    let invalid = || format!("invalid event id {id:?}: expected \"<block height>-<sequence>\"");
    let (height, seq) = id.split_once('-').ok_or_else(invalid)?;
    let number = |text: &str| -> Result<u64, String> {
        if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
            return Err(invalid());
        }
        text.parse::<i64>().map(|n| n as u64).map_err(|_| invalid())
    };
    Ok((number(height)?, number(seq)?))
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawEvent<'a> {
    #[serde(borrow)]
    id: Option<Cow<'a, str>>,
    #[serde(rename = "type", borrow)]
    kind: Option<Cow<'a, str>>,
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
    #[serde(borrow, default)]
    transfer_id: Option<Cow<'a, str>>,
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
    fn into_domain(self) -> Result<LedgerEntry, String> {
        // An absent balance is protobuf JSON's way of writing an empty string; Vega never
        // leaves a balance empty, so the only faithful reading is zero.
        let balance = |text: Option<Text<'_>>, field: &str| match text {
            Some(text) => amount(&text.0, field),
            None => amount("0", field),
        };
        Ok(LedgerEntry {
            from: self.from_account.into_domain("fromAccount")?,
            to: self.to_account.into_domain("toAccount")?,
            amount: amount(&self.amount.0, "amount")?,
            transfer_type: self
                .transfer_type
                .0
                .parse::<TransferType>()
                .map_err(|err| err.to_string())?,
            timestamp: VegaTime::from_nanos(self.timestamp.0),
            from_balance: balance(self.from_account_balance, "fromAccountBalance")?,
            to_balance: balance(self.to_account_balance, "toAccountBalance")?,
            transfer_id: self
                .transfer_id
                .filter(|id| !id.is_empty())
                .map(Cow::into_owned),
        })
    }
}

fn amount(text: &str, field: &str) -> Result<Amount, String> {
    text.parse::<Amount>()
        .map_err(|err| format!("{field}: {err}"))
}

impl RawAccount<'_> {
    fn into_domain(self, side: &str) -> Result<Account, String> {
        let context = |err: ledger_core::Error| format!("{side}: {err}");
        // Vega writes "!" for "no market" in some account payloads; treat it like absence.
        let market = match self.market_id.as_deref() {
            None | Some("") | Some("!") => None,
            Some(id) => Some(id.parse::<MarketId>().map_err(context)?),
        };
        Ok(Account {
            asset: self.asset_id.parse::<AssetId>().map_err(context)?,
            account_type: self
                .account_type
                .0
                .parse::<AccountType>()
                .map_err(context)?,
            owner: Owner::parse(self.owner.as_deref()).map_err(context)?,
            market,
        })
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
    fn into_domain(self) -> Result<OracleData, String> {
        let signers = self
            .signers
            .into_iter()
            .enumerate()
            .map(|(idx, signer)| match (signer.pub_key, signer.eth_address) {
                (Some(key), None) => Ok(Signer::PubKey(key.key.into_owned())),
                (None, Some(address)) => Ok(Signer::EthAddress(address.address.into_owned())),
                _ => Err(format!(
                    "oracle signer {idx} must have exactly one of pubKey and ethAddress"
                )),
            })
            .collect::<Result<_, _>>()?;
        let properties = |list: Vec<RawProperty<'_>>| {
            list.into_iter()
                .map(|p| Property {
                    name: p.name.into_owned(),
                    value: p.value.into_owned(),
                })
                .collect()
        };
        let matched_spec_ids = self
            .matched_spec_ids
            .iter()
            .map(|id| id.parse::<OracleSpecId>())
            .collect::<Result<_, _>>()
            .map_err(|err| format!("matchedSpecIds: {err}"))?;
        Ok(OracleData {
            signers,
            data: properties(self.data),
            meta_data: properties(self.meta_data),
            matched_spec_ids,
            broadcast_at: self.broadcast_at.map_or(0, |t| t.0),
            error: self.error.map(Cow::into_owned),
        })
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
