//! The Vega event buffer form of the stream: each NDJSON line the generator wrote, transcoded
//! into a `bus_proto::BusEvent` and framed as one buffer-file record.
//!
//! Transcoding the finished lines, rather than writing protobuf beside the JSON from the same
//! draws, means the two forms cannot drift apart: every id, amount, string and the order of
//! events come from the one writer. It costs a JSON parse per event, which only the buffer
//! form pays, and generation is not what the benchmarks measure.

use std::io;
use std::str::FromStr;

use bus_proto::{bus_event::Event, event_type, signer};
use ledger_core::{AccountType, TransferType};
use prost::Message;
use serde_json::Value;

/// Turns NDJSON lines into buffer-file records, numbering them from 0 across calls.
#[derive(Debug, Default)]
pub(super) struct BufferEncoder {
    /// Sequence number of the next record.
    seq: u64,
    /// Records of the current chunk.
    records: Vec<u8>,
    /// One encoded event, reused.
    payload: Vec<u8>,
}

impl BufferEncoder {
    /// Transcodes `lines` (whole NDJSON lines) and writes their records to `out`.
    pub(super) fn write(&mut self, lines: &[u8], out: &mut impl io::Write) -> io::Result<()> {
        self.records.clear();
        for line in lines.split(|&byte| byte == b'\n') {
            if line.is_empty() {
                continue;
            }
            let event = transcode(line).ok_or_else(|| {
                io::Error::other(format!(
                    "the generator wrote an event it cannot transcode: {}",
                    String::from_utf8_lossy(line)
                ))
            })?;
            self.payload.clear();
            event
                .encode(&mut self.payload)
                .expect("a Vec grows to fit any message");
            bus_proto::buffer::write_record(&mut self.records, self.seq, &self.payload);
            self.seq += 1;
        }
        out.write_all(&self.records)
    }
}

/// One protobuf-JSON `BusEvent` as the message; `None` if it is not one the generator writes.
fn transcode(line: &[u8]) -> Option<bus_proto::BusEvent> {
    let json: Value = serde_json::from_slice(line).ok()?;
    let (r#type, event) = match json["type"].as_str()? {
        "BUS_EVENT_TYPE_BEGIN_BLOCK" => {
            let body = &json["beginBlock"];
            let begin = bus_proto::BeginBlock {
                height: uint(&body["height"])?,
                timestamp: int(&body["timestamp"])?,
                hash: text(&body["hash"])?,
            };
            (event_type::BEGIN_BLOCK, Event::BeginBlock(begin))
        }
        "BUS_EVENT_TYPE_TIME_UPDATE" => {
            let timestamp = int(&json["timeUpdate"]["timestamp"])?;
            let update = bus_proto::TimeUpdate { timestamp };
            (event_type::TIME_UPDATE, Event::TimeUpdate(update))
        }
        "BUS_EVENT_TYPE_END_BLOCK" => {
            let height = uint(&json["endBlock"]["height"])?;
            (
                event_type::END_BLOCK,
                Event::EndBlock(bus_proto::EndBlock { height }),
            )
        }
        "BUS_EVENT_TYPE_LEDGER_MOVEMENTS" => {
            let movements = ledger_movements(&json["ledgerMovements"])?;
            (
                event_type::LEDGER_MOVEMENTS,
                Event::LedgerMovements(movements),
            )
        }
        "BUS_EVENT_TYPE_ORACLE_DATA" => {
            let data = oracle_data(&json["oracleData"]["externalData"]["data"])?;
            let external_data = Some(bus_proto::ExternalData { data: Some(data) });
            let oracle = bus_proto::OracleData { external_data };
            (event_type::ORACLE_DATA, Event::OracleData(oracle))
        }
        "BUS_EVENT_TYPE_ACCOUNT" => {
            let body = &json["account"];
            let account = bus_proto::Account {
                id: text(&body["id"])?,
                owner: text(&body["owner"])?,
                balance: decimal(&body["balance"])?,
                asset: text(&body["asset"])?,
                market_id: text(&body["marketId"])?,
                r#type: AccountType::from_str(body["type"].as_str()?).ok()?.code(),
            };
            (event_type::ACCOUNT, Event::Account(account))
        }
        _ => return None,
    };
    Some(bus_proto::BusEvent {
        id: text(&json["id"])?,
        block: text(&json["block"])?,
        r#type,
        version: u32::try_from(json["version"].as_u64()?).ok()?,
        chain_id: text(&json["chainId"])?,
        tx_hash: optional_text(&json["txHash"])?.unwrap_or_default(),
        event: Some(event),
    })
}

fn ledger_movements(body: &Value) -> Option<bus_proto::LedgerMovements> {
    let mut ledger_movements = Vec::new();
    for movement in body["ledgerMovements"].as_array()? {
        let entries = movement["entries"]
            .as_array()?
            .iter()
            .map(ledger_entry)
            .collect::<Option<_>>()?;
        let balances = movement["balances"]
            .as_array()?
            .iter()
            .map(|balance| {
                Some(bus_proto::PostTransferBalance {
                    account: Some(account_details(&balance["account"])?),
                    balance: decimal(&balance["balance"])?,
                })
            })
            .collect::<Option<_>>()?;
        ledger_movements.push(bus_proto::LedgerMovement { entries, balances });
    }
    Some(bus_proto::LedgerMovements { ledger_movements })
}

fn ledger_entry(entry: &Value) -> Option<bus_proto::LedgerEntry> {
    Some(bus_proto::LedgerEntry {
        from_account: Some(account_details(&entry["fromAccount"])?),
        to_account: Some(account_details(&entry["toAccount"])?),
        amount: decimal(&entry["amount"])?,
        r#type: TransferType::from_str(entry["type"].as_str()?).ok()?.code(),
        timestamp: int(&entry["timestamp"])?,
        from_account_balance: decimal(&entry["fromAccountBalance"])?,
        to_account_balance: decimal(&entry["toAccountBalance"])?,
        transfer_id: optional_text(&entry["transferId"])?,
    })
}

fn account_details(details: &Value) -> Option<bus_proto::AccountDetails> {
    Some(bus_proto::AccountDetails {
        asset_id: text(&details["assetId"])?,
        r#type: AccountType::from_str(details["type"].as_str()?)
            .ok()?
            .code(),
        owner: optional_text(&details["owner"])?,
        market_id: optional_text(&details["marketId"])?,
    })
}

fn oracle_data(data: &Value) -> Option<bus_proto::Data> {
    let signers = data["signers"]
        .as_array()?
        .iter()
        .map(|signer| {
            let signer = if let Some(key) = signer.get("pubKey") {
                signer::Signer::PubKey(bus_proto::PubKey {
                    key: text(&key["key"])?,
                })
            } else {
                signer::Signer::EthAddress(bus_proto::EthAddress {
                    address: text(&signer["ethAddress"]["address"])?,
                })
            };
            Some(bus_proto::Signer {
                signer: Some(signer),
            })
        })
        .collect::<Option<_>>()?;
    let matched_spec_ids = data["matchedSpecIds"]
        .as_array()?
        .iter()
        .map(text)
        .collect::<Option<_>>()?;
    Some(bus_proto::Data {
        signers,
        data: properties(&data["data"])?,
        matched_spec_ids,
        broadcast_at: int(&data["broadcastAt"])?,
        meta_data: properties(&data["metaData"])?,
        error: optional_text(&data["error"])?,
    })
}

/// A repeated `Property`; an absent list is empty, as protobuf JSON leaves empty lists out.
fn properties(list: &Value) -> Option<Vec<bus_proto::Property>> {
    let Some(items) = list.as_array() else {
        return list.is_null().then(Vec::new);
    };
    items
        .iter()
        .map(|property| {
            Some(bus_proto::Property {
                name: text(&property["name"])?,
                value: text(&property["value"])?,
            })
        })
        .collect()
}

fn text(value: &Value) -> Option<String> {
    value.as_str().map(str::to_owned)
}

/// An optional string: `Some(None)` when absent, `None` when present but not a string.
fn optional_text(value: &Value) -> Option<Option<String>> {
    match value {
        Value::Null => Some(None),
        other => text(other).map(Some),
    }
}

/// A protobuf-JSON integer, which the generator writes as a string or, now and then, a bare
/// number: its decimal text either way (amounts exceed 64 bits, so they stay text).
fn decimal(value: &Value) -> Option<String> {
    match value {
        Value::String(digits) => Some(digits.clone()),
        Value::Number(number) => Some(number.to_string()),
        _ => None,
    }
}

fn uint(value: &Value) -> Option<u64> {
    decimal(value)?.parse().ok()
}

fn int(value: &Value) -> Option<i64> {
    decimal(value)?.parse().ok()
}
