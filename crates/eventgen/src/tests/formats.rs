//! The two formats and the mixed-in other events.
//!
//! The buffer form is read back with `bus-proto` and turned into protobuf JSON here, from the
//! enum names `ledger-core` knows, independently of the transcoder that wrote it; both forms
//! are then normalised (every integer as its decimal text, empty lists and absent fields
//! alike) and compared event by event.

use prost::Message;
use serde_json::{Map, Value, json};

use crate::{Format, GenerateConfig, GenerateSummary, generate_as};
use bus_proto::{BusEvent, bus_event::Event, signer::Signer};
use ledger_core::{AccountType, TransferType};

fn write(config: &GenerateConfig, format: Format) -> (GenerateSummary, Vec<u8>) {
    let mut bytes = Vec::new();
    let summary = generate_as(config, format, &mut bytes).unwrap();
    (summary, bytes)
}

fn ndjson_events(bytes: &[u8]) -> Vec<Value> {
    bytes
        .split(|&byte| byte == b'\n')
        .filter(|line| !line.is_empty())
        .map(|line| normalise(serde_json::from_slice(line).unwrap()))
        .collect()
}

/// Splits the records by hand from the framing rules (4-byte size, 8-byte sequence number)
/// and checks that the sequence numbers count from 0.
fn buffer_events(mut bytes: &[u8]) -> Vec<Value> {
    let mut events = Vec::new();
    while !bytes.is_empty() {
        let size = u32::from_be_bytes(bytes[..4].try_into().unwrap()) as usize;
        let seq = u64::from_be_bytes(bytes[4..12].try_into().unwrap());
        assert_eq!(seq, events.len() as u64, "sequence numbers count from 0");
        let event = BusEvent::decode(&bytes[12..4 + size]).unwrap();
        events.push(normalise(to_json(&event)));
        bytes = &bytes[4 + size..];
    }
    events
}

/// Integers as decimal text, and no empty lists or nulls, so that the forms compare.
fn normalise(value: Value) -> Value {
    match value {
        Value::Number(number) => Value::String(number.to_string()),
        Value::Array(items) => Value::Array(items.into_iter().map(normalise).collect()),
        Value::Object(fields) => Value::Object(
            fields
                .into_iter()
                .filter(|(_, field)| !(field.is_null() || field == &json!([])))
                .map(|(name, field)| (name, normalise(field)))
                .collect(),
        ),
        other => other,
    }
}

fn to_json(event: &BusEvent) -> Value {
    let type_name = match event.r#type {
        bus_proto::event_type::TIME_UPDATE => "TIME_UPDATE",
        bus_proto::event_type::LEDGER_MOVEMENTS => "LEDGER_MOVEMENTS",
        bus_proto::event_type::ACCOUNT => "ACCOUNT",
        bus_proto::event_type::ORACLE_DATA => "ORACLE_DATA",
        bus_proto::event_type::BEGIN_BLOCK => "BEGIN_BLOCK",
        bus_proto::event_type::END_BLOCK => "END_BLOCK",
        other => panic!("unexpected event type {other}"),
    };
    let mut fields = Map::new();
    fields.insert("id".into(), json!(event.id));
    fields.insert("block".into(), json!(event.block));
    fields.insert("type".into(), json!(format!("BUS_EVENT_TYPE_{type_name}")));
    fields.insert("version".into(), json!(event.version));
    fields.insert("chainId".into(), json!(event.chain_id));
    if !event.tx_hash.is_empty() {
        fields.insert("txHash".into(), json!(event.tx_hash));
    }
    let (name, body) = match event.event.as_ref().unwrap() {
        Event::BeginBlock(begin) => (
            "beginBlock",
            json!({"height": begin.height, "timestamp": begin.timestamp, "hash": begin.hash}),
        ),
        Event::TimeUpdate(update) => ("timeUpdate", json!({"timestamp": update.timestamp})),
        Event::EndBlock(end) => ("endBlock", json!({"height": end.height})),
        Event::Account(account) => (
            "account",
            json!({
                "id": account.id, "owner": account.owner, "balance": account.balance,
                "asset": account.asset, "marketId": account.market_id,
                "type": account_type(account.r#type),
            }),
        ),
        Event::LedgerMovements(movements) => {
            let movements: Vec<Value> = movements
                .ledger_movements
                .iter()
                .map(|movement| {
                    let entries: Vec<Value> = movement.entries.iter().map(entry).collect();
                    assert!(movement.balances.is_empty());
                    json!({"entries": entries})
                })
                .collect();
            ("ledgerMovements", json!({"ledgerMovements": movements}))
        }
        Event::OracleData(oracle) => {
            let data = oracle
                .external_data
                .as_ref()
                .unwrap()
                .data
                .as_ref()
                .unwrap();
            let signers: Vec<Value> = data
                .signers
                .iter()
                .map(|signer| match signer.signer.as_ref().unwrap() {
                    Signer::PubKey(key) => json!({"pubKey": {"key": key.key}}),
                    Signer::EthAddress(eth) => json!({"ethAddress": {"address": eth.address}}),
                })
                .collect();
            let properties = |list: &[bus_proto::Property]| -> Vec<Value> {
                list.iter()
                    .map(|property| json!({"name": property.name, "value": property.value}))
                    .collect()
            };
            let data = json!({
                "signers": signers,
                "data": properties(&data.data),
                "matchedSpecIds": data.matched_spec_ids,
                "broadcastAt": data.broadcast_at,
                "metaData": properties(&data.meta_data),
                "error": data.error,
            });
            ("oracleData", json!({"externalData": {"data": data}}))
        }
    };
    fields.insert(name.into(), body);
    Value::Object(fields)
}

fn account_type(code: i32) -> String {
    AccountType::from_code(code).unwrap().name().into_owned()
}

fn entry(entry: &bus_proto::LedgerEntry) -> Value {
    let details = |details: &bus_proto::AccountDetails| {
        json!({
            "assetId": details.asset_id,
            "type": account_type(details.r#type),
            "owner": details.owner,
            "marketId": details.market_id,
        })
    };
    json!({
        "fromAccount": details(entry.from_account.as_ref().unwrap()),
        "toAccount": details(entry.to_account.as_ref().unwrap()),
        "amount": entry.amount,
        "type": TransferType::from_code(entry.r#type).unwrap().name(),
        "timestamp": entry.timestamp,
        "fromAccountBalance": entry.from_account_balance,
        "toAccountBalance": entry.to_account_balance,
        "transferId": entry.transfer_id,
    })
}

fn mixed(share: f64) -> GenerateConfig {
    GenerateConfig {
        blocks: 60,
        seed: 5,
        other_events_share: share,
        ..GenerateConfig::DEFAULT
    }
}

#[test]
fn buffer_form_holds_the_same_events_as_ndjson() {
    for config in [super::small(13), mixed(0.5)] {
        let (ndjson_summary, ndjson) = write(&config, Format::Ndjson);
        let (buffer_summary, buffer) = write(&config, Format::VegaBuffer);
        assert_eq!(ndjson_summary, buffer_summary);
        let from_ndjson = ndjson_events(&ndjson);
        let from_buffer = buffer_events(&buffer);
        assert_eq!(from_ndjson.len() as u64, ndjson_summary.events);
        // Event by event, so that a failure names the first difference, not a huge diff.
        for (one, other) in from_ndjson.iter().zip(&from_buffer) {
            assert_eq!(one, other);
        }
        assert_eq!(from_ndjson.len(), from_buffer.len());
    }
}

#[test]
fn buffer_form_is_deterministic_by_seed() {
    let config = mixed(0.3);
    assert_eq!(
        write(&config, Format::VegaBuffer),
        write(&config, Format::VegaBuffer)
    );
    let other_seed = GenerateConfig {
        seed: 6,
        ..config.clone()
    };
    assert_ne!(
        write(&config, Format::VegaBuffer).1,
        write(&other_seed, Format::VegaBuffer).1
    );
}

#[test]
fn other_events_take_their_share_of_the_stream() {
    for share in [0.5, 0.9] {
        let config = mixed(share);
        let (summary, bytes) = write(&config, Format::Ndjson);
        let found = super::analyse(&config, &bytes);
        assert_eq!(found.format_problems, Vec::<String>::new(), "{share}");
        assert_eq!(found.balance_problems, Vec::<String>::new(), "{share}");
        assert_eq!(&found.counted, &summary);
        let measured = summary.other_events as f64 / summary.events as f64;
        assert!((measured - share).abs() < 0.005, "{measured} for {share}");
    }
}

/// The stored events do not depend on the share: only the ACCOUNT events and the sequence
/// numbers in the ids differ.
#[test]
fn other_events_leave_the_stored_events_unchanged() {
    let stored = |share| -> Vec<Value> {
        let (summary, bytes) = write(&mixed(share), Format::Ndjson);
        // 60 blocks of 20 entries, and the genesis block's deposit per party and asset.
        assert_eq!(summary.ledger_entries, 60 * 20 + 50 * 3);
        ndjson_events(&bytes)
            .into_iter()
            .filter(|event| event["type"] != "BUS_EVENT_TYPE_ACCOUNT")
            .map(|mut event| {
                event["id"] = Value::Null;
                event
            })
            .collect()
    };
    assert_eq!(stored(0.0), stored(0.9));
}
