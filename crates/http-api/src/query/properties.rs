//! Property tests of query-string parsing against a model: the pairs a client encoded are the
//! pairs the service reads.

use proptest::prelude::*;

use super::*;

/// Names the service asks for, and others.
fn name() -> impl Strategy<Value = String> {
    prop_oneof![
        prop::sample::select(vec![
            "partyId",
            "assetId",
            "dateRange.startTimestamp",
            "pagination.first",
            "pagination.after",
            "pretty",
        ])
        .prop_map(str::to_owned),
        "\\PC{0,12}",
    ]
}

proptest! {
    #[test]
    fn encoded_pairs_read_back_first_value_wins(
        pairs in prop::collection::vec((name(), "\\PC{0,20}"), 0..6),
        asked in name(),
    ) {
        let text = form_urlencoded::Serializer::new(String::new())
            .extend_pairs(&pairs)
            .finish();
        let query = Query::parse(Some(&text));
        let first = pairs.iter().find(|(key, _)| *key == asked).map(|(_, value)| value.as_str());
        prop_assert_eq!(query.has(&asked), first.is_some());
        prop_assert_eq!(query.get(&asked), first.filter(|value| !value.is_empty()));
    }

    #[test]
    fn any_text_parses_and_never_yields_an_empty_value(text in "\\PC{0,60}", asked in name()) {
        let query = Query::parse(Some(&text));
        if let Some(value) = query.get(&asked) {
            prop_assert!(!value.is_empty());
            prop_assert!(query.has(&asked));
        }
    }
}
