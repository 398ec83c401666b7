//! Property tests of `pagination.*` parsing: any input gives a valid request or an error that
//! names a parameter the client gave.

use proptest::prelude::*;

use super::*;
use crate::encode_cursor;

/// Values a client might send: numbers, cursors, Go booleans, empty strings and noise.
fn value() -> impl Strategy<Value = Option<String>> {
    let cursor = (any::<i64>(), any::<u64>(), any::<u64>()).prop_map(|(vega_time, block, seq)| {
        encode_cursor(Position {
            vega_time,
            block,
            seq,
        })
    });
    prop::option::of(prop_oneof![
        "[0-9]{0,6}",
        "[+-]?[0-9]{1,12}",
        cursor,
        "(true|false|1|0|t|F|TRUE|yes)",
        "\\PC{0,40}",
    ])
}

proptest! {
    #[test]
    fn parsing_gives_a_valid_request_or_names_a_given_parameter(
        first in value(),
        after in value(),
        last in value(),
        before in value(),
        newest_first in value(),
    ) {
        let params = PaginationParams {
            first: first.as_deref(),
            after: after.as_deref(),
            last: last.as_deref(),
            before: before.as_deref(),
            newest_first: newest_first.as_deref(),
        };
        match PageRequest::parse(&params) {
            Ok(request) => {
                prop_assert!((1..=MAX_PAGE_SIZE).contains(&request.page_size()));
                let size = params.first.or(params.last);
                prop_assert_eq!(size.map(|s| s.parse::<u32>().ok()), size.map(|_| Some(request.page_size())));
                prop_assert!(request.main_scan().limit <= MAX_PAGE_SIZE as usize + 2);
            }
            Err(err) => {
                let given = [
                    ("pagination.first", params.first.is_some()),
                    ("pagination.after", params.after.is_some_and(|c| !c.is_empty())),
                    ("pagination.last", params.last.is_some()),
                    ("pagination.before", params.before.is_some_and(|c| !c.is_empty())),
                    ("pagination.newestFirst", params.newest_first.is_some()),
                ];
                let message = err.to_string();
                prop_assert!(
                    given.iter().any(|(name, given)| *given && message.starts_with(name)),
                    "{}", message
                );
            }
        }
    }
}
