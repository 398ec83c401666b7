//! Vega's gateway on the wire: every field by either of its names, a field given twice refused.

use super::*;
use crate::query::{Field, fields};

const EXPORT: &str = "/api/v2/ledgerentry/export";
const ORACLE: &str = "/api/v2/oracle/data";
const SPEC: &str = "3d058bdb7d4b0e0d0d2a5bbfd1a7e8e6a6d0f6b1c0a9e4c4b8f6e0a1f2c3d4e5";

/// The fields of each operation with a valid value, besides the party the export needs.
fn export_fields() -> Vec<(Field, String)> {
    vec![
        (fields::ASSET_ID, ASSET.to_owned()),
        (fields::START_TIMESTAMP, "1690000001000000000".to_owned()),
        (fields::END_TIMESTAMP, "1690000002000000000".to_owned()),
    ]
}

/// A cursor the listing itself gave.
async fn cursor() -> String {
    let answer = get(
        FakeStore::default(),
        &format!("{ORACLE}?pagination.first=1"),
    )
    .await;
    answer.json()["oracleData"]["pageInfo"]["endCursor"]
        .as_str()
        .unwrap()
        .to_owned()
}

async fn oracle_fields() -> Vec<(Field, String)> {
    let cursor = cursor().await;
    vec![
        (fields::ORACLE_SPEC_ID, SPEC.to_owned()),
        (fields::FIRST, "2".to_owned()),
        (fields::AFTER, cursor.clone()),
        (fields::LAST, "2".to_owned()),
        (fields::BEFORE, cursor),
        (fields::NEWEST_FIRST, "false".to_owned()),
    ]
}

/// The whole answer as bytes: status, the headers that depend on the request, body.
fn bytes(answer: &Answer) -> (StatusCode, String, Vec<u8>) {
    (
        answer.status,
        answer.header("content-disposition").to_owned(),
        answer.body.clone().unwrap(),
    )
}

#[tokio::test]
async fn export_reads_every_field_by_either_name() {
    let party = |name: &str| format!("{EXPORT}?{name}={PARTY}");
    let by_json = get(
        FakeStore {
            rows: rows(),
            ..FakeStore::default()
        },
        &party("partyId"),
    )
    .await;
    let by_proto = get(
        FakeStore {
            rows: rows(),
            ..FakeStore::default()
        },
        &party("party_id"),
    )
    .await;
    assert_eq!(by_json.status, StatusCode::OK);
    assert_eq!(bytes(&by_json), bytes(&by_proto));

    for (field, value) in export_fields() {
        let mut answers = Vec::new();
        for name in [field.json, field.proto] {
            let store = FakeStore::default();
            let seen = Arc::clone(&store.seen);
            let answer = get(store, &format!("{}&{name}={value}", party("partyId"))).await;
            assert_eq!(answer.status, StatusCode::OK, "{name}");
            answers.push((bytes(&answer), seen.lock().unwrap().unwrap()));
        }
        assert_eq!(answers[0], answers[1], "{field}");
        assert_ne!(
            answers[0].1,
            ExportFilter {
                party: PARTY.parse().unwrap(),
                asset: None,
                range: ledger_core::TimeRange::new(None, None).unwrap(),
            },
            "{field} was read"
        );
    }
}

#[tokio::test]
async fn oracle_listing_reads_every_field_by_either_name() {
    for (field, value) in oracle_fields().await {
        let mut answers = Vec::new();
        for name in [field.json, field.proto] {
            let answer = get(FakeStore::versioned(0), &format!("{ORACLE}?{name}={value}")).await;
            assert_eq!(answer.status, StatusCode::OK, "{name}");
            answers.push(bytes(&answer));
        }
        let unfiltered = get(FakeStore::versioned(0), ORACLE).await;
        assert_eq!(answers[0], answers[1], "{field}");
        assert_ne!(answers[0], bytes(&unfiltered), "{field} was read");
    }
}

#[track_caller]
fn check_repeated(body: &Value, field: Field) {
    assert_eq!(
        *body,
        invalid(
            10015,
            "malformed request",
            &format!("too many values for field {field}")
        )
    );
}

#[tokio::test]
async fn a_field_given_twice_in_either_spelling_is_refused() {
    let mut export = export_fields();
    export.push((fields::PARTY_ID, PARTY.to_owned()));
    for (field, value) in export {
        for (first, second) in [
            (field.json, field.json),
            (field.proto, field.proto),
            (field.json, field.proto),
        ] {
            let party = if field == fields::PARTY_ID {
                String::new()
            } else {
                format!("partyId={PARTY}&")
            };
            let uri = format!("{EXPORT}?{party}{first}={value}&{second}={value}");
            let answer = get(FakeStore::default(), &uri).await;
            assert_eq!(answer.status, StatusCode::BAD_REQUEST, "{uri}");
            check_repeated(&answer.json()["error"], field);
        }
    }
    for (field, value) in oracle_fields().await {
        for (first, second) in [(field.json, field.json), (field.proto, field.json)] {
            let uri = format!("{ORACLE}?{first}={value}&{second}=");
            let answer = get(FakeStore::default(), &uri).await;
            assert_eq!(answer.status, StatusCode::BAD_REQUEST, "{uri}");
            check_repeated(&answer.json(), field);
        }
    }
}

#[tokio::test]
async fn unknown_names_and_the_other_operations_fields_are_ignored() {
    let plain = get(FakeStore::versioned(0), ORACLE).await;
    let noisy = get(
        FakeStore::versioned(0),
        &format!("{ORACLE}?partyId=x&partyId=y&oraclespecid=z&pagination.First=0&x=1&x=2"),
    )
    .await;
    assert_eq!(bytes(&plain), bytes(&noisy));
}
