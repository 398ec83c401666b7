//! The same events as buffer records: protobuf JSON lines translated field by field into
//! `bus_proto` messages and framed with `bus_proto::buffer::write_record`, so that one
//! hand-made stream exercises both formats.

use bus_proto::{bus_event::Event as Member, event_type};
use ledger_core::{AccountType, TransferType};
use prost::Message;
use serde_json::Value;

/// `lines` (protobuf JSON events; blank lines skipped) as a buffer file.
pub(crate) fn buffer(lines: &[String]) -> Vec<u8> {
    let mut out = Vec::new();
    for (seq, line) in lines
        .iter()
        .filter(|line| !line.trim().is_empty())
        .enumerate()
    {
        bus_proto::buffer::write_record(&mut out, seq as u64, &encode(line));
    }
    out
}

/// One protobuf JSON event as protobuf bytes.
pub(crate) fn encode(line: &str) -> Vec<u8> {
    to_proto(&serde_json::from_str(line).unwrap()).encode_to_vec()
}

/// A string, or a number written as its decimal (protobuf JSON accepts both for enums).
fn text(value: &Value) -> String {
    match value {
        Value::Number(number) => number.to_string(),
        _ => value.as_str().unwrap_or_default().to_owned(),
    }
}

fn int(value: &Value) -> i64 {
    match value {
        Value::String(text) => text.parse().unwrap(),
        Value::Number(number) => number.as_i64().unwrap(),
        _ => 0,
    }
}

fn optional(value: &Value) -> Option<String> {
    value.as_str().map(str::to_owned)
}

fn to_proto(event: &Value) -> bus_proto::BusEvent {
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
            Some(Member::LedgerMovements(ledger(&event["ledgerMovements"]))),
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
        other => panic!("no translation of {other} events"),
    };
    bus_proto::BusEvent {
        id: text(&event["id"]),
        block: text(&event["block"]),
        r#type: code,
        version: 1,
        chain_id: text(&event["chainId"]),
        tx_hash: text(&event["txHash"]),
        event: member,
    }
}

fn ledger(movements: &Value) -> bus_proto::LedgerMovements {
    let account = |account: &Value| bus_proto::AccountDetails {
        asset_id: text(&account["assetId"]),
        r#type: text(&account["type"])
            .parse::<AccountType>()
            .unwrap()
            .code(),
        owner: optional(&account["owner"]),
        market_id: optional(&account["marketId"]),
    };
    let entry = |entry: &Value| bus_proto::LedgerEntry {
        from_account: Some(account(&entry["fromAccount"])),
        to_account: Some(account(&entry["toAccount"])),
        amount: text(&entry["amount"]),
        r#type: text(&entry["type"]).parse::<TransferType>().unwrap().code(),
        timestamp: int(&entry["timestamp"]),
        from_account_balance: text(&entry["fromAccountBalance"]),
        to_account_balance: text(&entry["toAccountBalance"]),
        transfer_id: optional(&entry["transferId"]),
    };
    let list = |value: &Value| value.as_array().cloned().unwrap_or_default();
    bus_proto::LedgerMovements {
        ledger_movements: list(&movements["ledgerMovements"])
            .iter()
            .map(|movement| bus_proto::LedgerMovement {
                entries: list(&movement["entries"]).iter().map(entry).collect(),
                balances: Vec::new(),
            })
            .collect(),
    }
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
