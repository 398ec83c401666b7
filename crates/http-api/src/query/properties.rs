//! Property tests of query-string parsing against a model: the pairs a client encoded are the
//! pairs the service reads, by either name of a field, and a field given twice is refused.

use proptest::prelude::*;

use super::*;

/// Fields the service asks for.
const FIELDS: [Field; 5] = [
    fields::PARTY_ID,
    fields::ASSET_ID,
    fields::START_TIMESTAMP,
    fields::FIRST,
    fields::NEWEST_FIRST,
];

/// Names the service asks for, in both spellings, and others.
fn name() -> impl Strategy<Value = String> {
    let known: Vec<&str> = FIELDS
        .iter()
        .flat_map(|field| [field.proto, field.json])
        .chain(["pretty"])
        .collect();
    prop_oneof![
        prop::sample::select(known).prop_map(str::to_owned),
        "\\PC{0,12}",
    ]
}

proptest! {
    #[test]
    fn encoded_pairs_read_back_by_either_name(
        pairs in prop::collection::vec((name(), "\\PC{0,20}"), 0..6),
        field in prop::sample::select(FIELDS.to_vec()),
    ) {
        let text = form_urlencoded::Serializer::new(String::new())
            .extend_pairs(&pairs)
            .finish();
        let query = Query::parse(Some(&text));
        let given: Vec<&str> = pairs
            .iter()
            .filter(|(key, _)| key == field.proto || key == field.json)
            .map(|(_, value)| value.as_str())
            .collect();
        let expected = match given[..] {
            [] => Ok(None),
            [value] => Ok(Some(value)),
            _ => Err(Repeated { field }),
        };
        prop_assert_eq!(query.raw(field), expected);
        prop_assert_eq!(
            query.get(field),
            expected.map(|value| value.filter(|value| !value.is_empty()))
        );
    }

    #[test]
    fn any_text_parses_and_never_yields_an_empty_value(
        text in "\\PC{0,60}",
        field in prop::sample::select(FIELDS.to_vec()),
    ) {
        let query = Query::parse(Some(&text));
        if let Ok(Some(value)) = query.get(field) {
            prop_assert!(!value.is_empty());
            prop_assert!(query.has(field.json) || query.has(field.proto));
        }
    }
}

#[track_caller]
fn check(query: &str, field: Field, expected: Result<Option<&str>, Repeated>) {
    assert_eq!(Query::parse(Some(query)).get(field), expected, "{query}");
}

#[test]
fn both_spellings_are_one_field() {
    let repeated = Err(Repeated {
        field: fields::PARTY_ID,
    });
    check("partyId=a", fields::PARTY_ID, Ok(Some("a")));
    check("party_id=a", fields::PARTY_ID, Ok(Some("a")));
    check("party_id=a&partyId=a", fields::PARTY_ID, repeated);
    check("partyId=a&partyId=b", fields::PARTY_ID, repeated);
    check("party_id=&party_id=b", fields::PARTY_ID, repeated);
    check("partyid=a&PartyId=b", fields::PARTY_ID, Ok(None));
    check("party_id=", fields::PARTY_ID, Ok(None));
    check(
        "date_range.start_timestamp=5",
        fields::START_TIMESTAMP,
        Ok(Some("5")),
    );
    check(
        "dateRange.start_timestamp=5",
        fields::START_TIMESTAMP,
        Ok(None),
    );
    check(
        "pagination.newest_first=false",
        fields::NEWEST_FIRST,
        Ok(Some("false")),
    );
}

#[test]
fn a_repeated_field_is_named_in_both_spellings() {
    let err = Repeated {
        field: fields::START_TIMESTAMP,
    };
    assert_eq!(
        err.to_string(),
        r#"too many values for field "dateRange.startTimestamp" (date_range.start_timestamp)"#
    );
    let err = Repeated {
        field: fields::FIRST,
    };
    assert_eq!(
        err.to_string(),
        r#"too many values for field "pagination.first""#
    );
}
