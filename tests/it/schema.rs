//! Answers checked against two contracts: Vega's published schema
//! (`vega-data-node-v0.78.2-subset.swagger.json`, a copy of the reference) and our own OpenAPI
//! document (`crates/http-api/src/openapi.json`, the one the server serves). Vega's is the
//! contract clients were generated from; ours is stricter (required fields, no others, id and
//! cursor patterns), so an answer that passes both is what Vega would send and what we promise.

use std::collections::BTreeMap;
use std::sync::OnceLock;

use jsonschema::Validator;
use serde_json::{Value, json};

/// Vega's schema, as published.
pub const VEGA: &str = include_str!("vega-data-node-v0.78.2-subset.swagger.json");
/// Ours, as served at `/api/v2/openapi.json`.
pub const OURS: &str = include_str!("../../crates/http-api/src/openapi.json");

/// A validator for one named schema of a document, its `$ref`s resolved within the document.
fn validator(document: &str, pointer: &[&str], name: &str) -> Validator {
    let document: Value = serde_json::from_str(document).expect("the schema is JSON");
    let mut definitions = &document;
    for key in pointer {
        definitions = &definitions[*key];
    }
    // The definitions sit at the same place in the wrapper, so the document's own `$ref`s
    // (`#/definitions/…`, `#/components/schemas/…`) resolve against it.
    let mut root = json!({ "$ref": format!("#/{}/{name}", pointer.join("/")) });
    let mut slot = &mut root;
    for key in &pointer[..pointer.len() - 1] {
        slot = &mut slot[*key];
    }
    slot[pointer[pointer.len() - 1]] = definitions.clone();
    jsonschema::validator_for(&root).unwrap_or_else(|err| panic!("schema {name}: {err}"))
}

/// The schemas answers are checked against, compiled once.
struct Schemas {
    validators: BTreeMap<&'static str, Vec<(&'static str, Validator)>>,
}

fn schemas() -> &'static Schemas {
    static SCHEMAS: OnceLock<Schemas> = OnceLock::new();
    SCHEMAS.get_or_init(|| {
        let vega = |name| ("Vega's", validator(VEGA, &["definitions"], name));
        let ours = |name| ("ours", validator(OURS, &["components", "schemas"], name));
        let mut validators = BTreeMap::new();
        validators.insert(
            "page",
            vec![
                vega("v2ListOracleDataResponse"),
                ours("v2ListOracleDataResponse"),
            ],
        );
        validators.insert(
            "status",
            vec![vega("googlerpcStatus"), ours("googlerpcStatus")],
        );
        validators.insert("stream error", vec![ours("ExportStreamError")]);
        validators.insert("export message", vec![ours("ExportStreamMessage")]);
        validators.insert("http body", vec![vega("apiHttpBody"), ours("apiHttpBody")]);
        Schemas { validators }
    })
}

#[track_caller]
fn check(kind: &str, value: &Value) {
    for (source, validator) in &schemas().validators[kind] {
        let errors: Vec<String> = validator
            .iter_errors(value)
            .map(|err| format!("{err} at {}", err.instance_path()))
            .collect();
        assert!(
            errors.is_empty(),
            "{kind} does not match {source} schema: {errors:?}\n{value}"
        );
    }
}

/// An oracle data page.
#[track_caller]
pub fn page(value: &Value) {
    check("page", value);
}

/// A bare error status (the listing's errors).
#[track_caller]
pub fn status(value: &Value) {
    check("status", value);
}

/// An export error: the status inside `{"error":…}`.
#[track_caller]
pub fn stream_error(value: &Value) {
    check("stream error", value);
    status(&value["error"]);
}

/// One line of the export's message form.
#[track_caller]
pub fn export_message(value: &Value) {
    check("export message", value);
    match value.get("result") {
        Some(result) => check("http body", result),
        None => status(&value["error"]),
    }
}

/// The schemas themselves catch what they should: a test of the tests.
#[test]
fn schemas_reject_answers_that_break_the_contract() {
    let node = json!({"externalData": {"data": {
        "signers": [{"pubKey": {"key": "0xAB"}}], "data": [{"name": "p", "value": "1"}],
        "matchedSpecIds": [], "broadcastAt": "0", "metaData": []
    }}});
    let good = json!({"oracleData": {"edges": [{"node": node, "cursor": "AQ"}],
        "pageInfo": {"hasNextPage": false, "hasPreviousPage": false, "startCursor": "AQ", "endCursor": "AQ"}}});
    page(&good);
    let schemas = schemas();
    let fails = |kind: &str, value: &Value| {
        schemas.validators[kind]
            .iter()
            .any(|(_, validator)| !validator.is_valid(value))
    };
    let mut broadcast_as_number = good.clone();
    broadcast_as_number["oracleData"]["edges"][0]["node"]["externalData"]["data"]["broadcastAt"] =
        json!(0);
    let mut extra_field = good.clone();
    extra_field["oracleData"]["pageInfo"]["total"] = json!(1);
    let mut missing_meta = good.clone();
    missing_meta["oracleData"]["edges"][0]["node"]["externalData"]["data"]
        .as_object_mut()
        .unwrap()
        .remove("metaData");
    for bad in [broadcast_as_number, extra_field, missing_meta] {
        assert!(fails("page", &bad), "accepted {bad}");
    }
    assert!(fails(
        "status",
        &json!({"code": "3", "message": "x", "details": []})
    ));
    assert!(fails(
        "stream error",
        &json!({"code": 3, "message": "Not Found", "details": []})
    ));
}

/// The served document is the one checked against, and it is a valid OpenAPI 3 document whose
/// every status and content type matches what the server answers.
#[test]
fn served_openapi_document_matches_the_answers() {
    use crate::support::{get, mixed, request};

    let set = mixed();
    let served = set.get("/api/v2/openapi.json");
    assert_eq!(served.status, 200);
    let document: Value = serde_json::from_str(OURS).unwrap();
    assert_eq!(served.json(), document);
    assert_eq!(document["openapi"], "3.0.3");

    let party = set.reference().largest_party();
    let export = format!("/api/v2/ledgerentry/export?partyId={party}");
    let oracle = "/api/v2/oracle/data";
    let json_form = [("accept", "application/x-ndjson")];
    /// Path, request target, request headers.
    type Case<'a> = (&'a str, String, &'a [(&'a str, &'a str)]);
    let cases: Vec<Case<'_>> = vec![
        ("/api/v2/ledgerentry/export", export.clone(), &[]),
        ("/api/v2/ledgerentry/export", export.clone(), &json_form),
        (
            "/api/v2/ledgerentry/export",
            "/api/v2/ledgerentry/export".to_owned(),
            &[],
        ),
        (oracle, format!("{oracle}?pagination.first=3"), &[]),
        (oracle, format!("{oracle}?pagination.first=x"), &[]),
    ];
    for (path, target, headers) in cases {
        let response = get(set.server.addr, &target, headers);
        let operation = &document["paths"][path]["get"];
        let answer = &operation["responses"][response.status.to_string()];
        assert!(
            answer.is_object(),
            "{target}: status {} is not documented",
            response.status
        );
        let content_type = response.header("content-type").unwrap();
        assert!(
            answer["content"].get(content_type).is_some(),
            "{target}: {content_type} is not documented for {}",
            response.status
        );
        for header in [
            "content-disposition",
            "retry-after",
            "x-block-height",
            "x-block-timestamp",
        ] {
            if response.header(header).is_some() {
                let documented = answer["headers"]
                    .as_object()
                    .unwrap()
                    .keys()
                    .any(|name| name.eq_ignore_ascii_case(header));
                assert!(documented, "{target}: header {header} is not documented");
            }
        }
    }
    // Other methods are documented as 405.
    let put = request(set.server.addr, "PUT", oracle, &[]).unwrap();
    assert_eq!(put.status, 405);
    assert!(document["paths"][oracle]["get"]["responses"]["405"].is_object());
}
