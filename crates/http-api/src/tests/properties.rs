//! Property tests of the whole request path: any query string on either endpoint, with any
//! `Accept` and `Accept-Encoding`, answers without a 5xx, and every 4xx body is Vega's
//! `google.rpc.Status` in the endpoint's envelope.

use proptest::prelude::*;
use serde_json::Value;

use super::operations::{decode, get_with};
use super::{FakeStore, PARTY};

const EXPORT: &str = "/api/v2/ledgerentry/export";
const ORACLE: &str = "/api/v2/oracle/data";

/// Parameters of both endpoints with plausible and hostile values.
fn pair() -> impl Strategy<Value = (String, String)> {
    let names = prop::sample::select(vec![
        "partyId",
        "assetId",
        "dateRange.startTimestamp",
        "dateRange.endTimestamp",
        "oracleSpecId",
        "pagination.first",
        "pagination.after",
        "pagination.last",
        "pagination.before",
        "pagination.newestFirst",
        "pretty",
    ])
    .prop_map(str::to_owned);
    let values = prop_oneof![
        Just(PARTY.to_owned()),
        "[0-9a-fA-F]{60,66}",
        "[+-]?[0-9]{0,22}",
        "[A-Za-z0-9_-]{35}",
        "\\PC{0,30}",
    ];
    (prop_oneof![names, "\\PC{0,10}"], values)
}

/// Header values a client may send, including lists with weights and nonsense.
fn header_value() -> impl Strategy<Value = Option<String>> {
    prop::option::of(prop_oneof![
        "(text/csv|application/json|\\*/\\*|gzip|br|zstd|identity|\\*)(;q=[0-9.]{1,5})?(, ?[a-z/*]{1,16}(;q=[0-9.]{1,5})?){0,3}",
        "[ -~]{0,40}",
    ])
}

proptest! {
    #[test]
    fn any_query_and_negotiation_answers_without_5xx_in_the_error_shape(
        export in any::<bool>(),
        pairs in prop::collection::vec(pair(), 0..6),
        accept in header_value(),
        accept_encoding in header_value(),
    ) {
        let path = if export { EXPORT } else { ORACLE };
        let query = form_urlencoded::Serializer::new(String::new())
            .extend_pairs(&pairs)
            .finish();
        let uri = format!("{path}?{query}");
        let mut headers = Vec::new();
        if let Some(value) = &accept {
            headers.push(("accept", value.as_str()));
        }
        if let Some(value) = &accept_encoding {
            headers.push(("accept-encoding", value.as_str()));
        }
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let answer = runtime.block_on(get_with(FakeStore::default(), &uri, &headers));
        prop_assert!(!answer.status.is_server_error(), "{} {}", answer.status, uri);
        let body = decode(answer.header("content-encoding"), answer.body.as_ref().unwrap());
        if answer.status.is_client_error() {
            prop_assert_eq!(answer.header("content-type"), "application/json");
            let json: Value = serde_json::from_slice(&body).unwrap();
            let status = if export { &json["error"] } else { &json };
            prop_assert_eq!(status["code"].as_u64(), Some(3), "{}", json);
            prop_assert_eq!(&status["message"], "InvalidArgument error");
            let detail = &status["details"][0];
            prop_assert!(detail["code"].is_u64() && detail["message"].is_string(), "{}", json);
            prop_assert!(detail["inner"].is_string(), "{}", json);
        }
    }
}
