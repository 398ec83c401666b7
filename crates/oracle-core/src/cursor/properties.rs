//! Property tests of cursors: round trips, one text per position, and clean rejection of
//! anything else.

use proptest::prelude::*;

use super::*;

/// Any position a store can hold: blocks and sequences fit in `i64`.
fn position() -> impl Strategy<Value = Position> {
    let stored = 0..=i64::MAX as u64;
    (any::<i64>(), stored.clone(), stored).prop_map(|(vega_time, block, seq)| Position {
        vega_time,
        block,
        seq,
    })
}

proptest! {
    #[test]
    fn cursors_round_trip(position in position()) {
        let cursor = encode_cursor(position);
        prop_assert_eq!(cursor.len(), TEXT_LEN);
        prop_assert_eq!(decode_cursor(&cursor), Ok(position));
    }

    #[test]
    fn any_text_decodes_only_if_it_is_the_cursor_of_its_position(
        text in "\\PC{0,40}|[A-Za-z0-9_=-]{34,36}",
    ) {
        match decode_cursor(&text) {
            Ok(position) => prop_assert_eq!(encode_cursor(position), text),
            Err(err) => prop_assert_eq!(err, Error::InvalidCursor),
        }
    }

    #[test]
    fn every_single_character_edit_is_rejected(
        position in position(),
        index in 0..TEXT_LEN,
        replacement in "[A-Za-z0-9_-]",
    ) {
        let cursor = encode_cursor(position);
        prop_assume!(cursor[index..=index] != *replacement);
        let mut edited = cursor.clone();
        edited.replace_range(index..=index, &replacement);
        prop_assert_eq!(decode_cursor(&edited), Err(Error::InvalidCursor), "{}", edited);
    }
}
