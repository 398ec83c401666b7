//! NDJSON events → a Vega event buffer file: protobuf JSON translated field by field into
//! `bus_proto` messages and framed with `bus_proto::buffer::write_record`.
//!
//! For the tests, whose hand-made streams are written as protobuf JSON and must also be fed as
//! buffer files. Unlike the generator's transcoder (`eventgen`), it keeps what the decoder
//! must see as-is: absent fields stay absent, enum names and codes (known or not) become their
//! code. It translates the event types the store reads and ACCOUNT events; any other type is an
//! error.

use bus_proto::{bus_event::Event as Member, event_type};
use ledger_core::{AccountType, TransferType};
use prost::Message;
use serde_json::Value;

use crate::error::{EventError, RecordError};

/// Why an event cannot be translated.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TranscodeError {
    /// The line is not a JSON event, or an enum name is unknown.
    #[error("line {line}: {cause}")]
    Line {
        /// 1-based line number.
        line: usize,
        /// Why.
        cause: RecordError,
    },
    /// An event type this module does not translate.
    #[error("line {line}: no translation of {event_type:?} events")]
    Unsupported {
        /// 1-based line number.
        line: usize,
        /// The event's type.
        event_type: String,
    },
}

/// Every non-blank line of `ndjson` (protobuf JSON events) as one buffer file, records
/// numbered from 0 as Vega's core numbers them.
///
/// # Errors
/// The first line that is not a translatable event.
pub fn ndjson_to_buffer(ndjson: &str) -> Result<Vec<u8>, TranscodeError> {
    let mut out = Vec::new();
    let lines = ndjson
        .lines()
        .enumerate()
        .filter(|(_, line)| !line.trim().is_empty());
    for (seq, (idx, line)) in lines.enumerate() {
        let payload = encode(line).map_err(|err| err.at(idx + 1))?;
        bus_proto::buffer::write_record(&mut out, seq as u64, &payload);
    }
    Ok(out)
}

/// An error without its line, while one event is translated.
enum Failure {
    Record(RecordError),
    Unsupported(String),
}

impl Failure {
    fn at(self, line: usize) -> TranscodeError {
        match self {
            Failure::Record(cause) => TranscodeError::Line { line, cause },
            Failure::Unsupported(event_type) => TranscodeError::Unsupported { line, event_type },
        }
    }
}

/// One protobuf JSON event as protobuf bytes.
fn encode(line: &str) -> Result<Vec<u8>, Failure> {
    let value =
        serde_json::from_str(line).map_err(|err| Failure::Record(RecordError::Json(err)))?;
    Ok(to_proto(&value)?.encode_to_vec())
}

/// A string, or a number written as its decimal (protobuf JSON accepts both for enums).
fn text(value: &Value) -> String {
    match value {
        Value::Number(number) => number.to_string(),
        _ => value.as_str().unwrap_or_default().to_owned(),
    }
}

/// An int64 written as a string or a number; anything else (absent included) is 0, as
/// protobuf writes an absent integer.
fn int(value: &Value) -> i64 {
    match value {
        Value::String(text) => text.parse().unwrap_or_default(),
        Value::Number(number) => number.as_i64().unwrap_or_default(),
        _ => 0,
    }
}

fn optional(value: &Value) -> Option<String> {
    value.as_str().map(str::to_owned)
}

fn to_proto(event: &Value) -> Result<bus_proto::BusEvent, Failure> {
    let kind = event["type"].as_str().unwrap_or_default();
    let (code, member) = match kind.strip_prefix("BUS_EVENT_TYPE_").unwrap_or(kind) {
        "TIME_UPDATE" => (
            event_type::TIME_UPDATE,
            Some(Member::TimeUpdate(bus_proto::TimeUpdate {
                timestamp: int(&event["timeUpdate"]["timestamp"]),
            })),
        ),
        "BEGIN_BLOCK" => {
            let begin = &event["beginBlock"];
            (
                event_type::BEGIN_BLOCK,
                Some(Member::BeginBlock(bus_proto::BeginBlock {
                    height: int(&begin["height"]) as u64,
                    timestamp: int(&begin["timestamp"]),
                    hash: text(&begin["hash"]),
                })),
            )
        }
        "END_BLOCK" => (
            event_type::END_BLOCK,
            Some(Member::EndBlock(bus_proto::EndBlock {
                height: int(&event["endBlock"]["height"]) as u64,
            })),
        ),
        "LEDGER_MOVEMENTS" => (
            event_type::LEDGER_MOVEMENTS,
            Some(Member::LedgerMovements(
                ledger(&event["ledgerMovements"]).map_err(Failure::Record)?,
            )),
        ),
        "ORACLE_DATA" => (
            event_type::ORACLE_DATA,
            Some(Member::OracleData(oracle(
                &event["oracleData"]["externalData"]["data"],
            ))),
        ),
        "ACCOUNT" => {
            let account = &event["account"];
            (
                event_type::ACCOUNT,
                Some(Member::Account(bus_proto::Account {
                    id: text(&account["id"]),
                    owner: text(&account["owner"]),
                    balance: text(&account["balance"]),
                    ..bus_proto::Account::default()
                })),
            )
        }
        _ => return Err(Failure::Unsupported(kind.to_owned())),
    };
    Ok(bus_proto::BusEvent {
        id: text(&event["id"]),
        block: text(&event["block"]),
        r#type: code,
        version: 1,
        chain_id: text(&event["chainId"]),
        tx_hash: text(&event["txHash"]),
        event: member,
    })
}

fn ledger(movements: &Value) -> Result<bus_proto::LedgerMovements, RecordError> {
    let list = |value: &Value| value.as_array().cloned().unwrap_or_default();
    let mut index = 0;
    let mut ledger_movements = Vec::new();
    for movement in list(&movements["ledgerMovements"]) {
        let mut entries = Vec::new();
        for entry in list(&movement["entries"]) {
            entries.push(ledger_entry(&entry, index)?);
            index += 1;
        }
        ledger_movements.push(bus_proto::LedgerMovement {
            entries,
            balances: Vec::new(),
        });
    }
    Ok(bus_proto::LedgerMovements { ledger_movements })
}

fn ledger_entry(entry: &Value, index: usize) -> Result<bus_proto::LedgerEntry, RecordError> {
    let invalid = |field| {
        move |source| {
            RecordError::Event(EventError::LedgerEntry {
                index,
                field,
                source,
            })
        }
    };
    let account = |account: &Value, field| -> Result<_, RecordError> {
        Ok(bus_proto::AccountDetails {
            asset_id: text(&account["assetId"]),
            r#type: text(&account["type"])
                .parse::<AccountType>()
                .map_err(invalid(field))?
                .code(),
            owner: optional(&account["owner"]),
            market_id: optional(&account["marketId"]),
        })
    };
    Ok(bus_proto::LedgerEntry {
        from_account: Some(account(&entry["fromAccount"], "fromAccount")?),
        to_account: Some(account(&entry["toAccount"], "toAccount")?),
        amount: text(&entry["amount"]),
        r#type: text(&entry["type"])
            .parse::<TransferType>()
            .map_err(invalid("type"))?
            .code(),
        timestamp: int(&entry["timestamp"]),
        from_account_balance: text(&entry["fromAccountBalance"]),
        to_account_balance: text(&entry["toAccountBalance"]),
        transfer_id: optional(&entry["transferId"]),
    })
}

fn oracle(data: &Value) -> bus_proto::OracleData {
    let list = |value: &Value| value.as_array().cloned().unwrap_or_default();
    let properties = |value: &Value| {
        list(value)
            .iter()
            .map(|p| bus_proto::Property {
                name: text(&p["name"]),
                value: text(&p["value"]),
            })
            .collect()
    };
    let signer = |signer: &Value| bus_proto::Signer {
        signer: if signer["pubKey"].is_object() {
            Some(bus_proto::signer::Signer::PubKey(bus_proto::PubKey {
                key: text(&signer["pubKey"]["key"]),
            }))
        } else if signer["ethAddress"].is_object() {
            Some(bus_proto::signer::Signer::EthAddress(
                bus_proto::EthAddress {
                    address: text(&signer["ethAddress"]["address"]),
                },
            ))
        } else {
            None
        },
    };
    bus_proto::OracleData {
        external_data: Some(bus_proto::ExternalData {
            data: Some(bus_proto::Data {
                signers: list(&data["signers"]).iter().map(signer).collect(),
                data: properties(&data["data"]),
                matched_spec_ids: list(&data["matchedSpecIds"]).iter().map(text).collect(),
                broadcast_at: int(&data["broadcastAt"]),
                meta_data: properties(&data["metaData"]),
                error: optional(&data["error"]),
            }),
        }),
    }
}
