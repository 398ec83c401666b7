//! A batch's oracle data laid into segments, the same way on both backends: every datum under
//! the owner of all data, then its matches under their specs.

use std::collections::HashMap;
use std::hash::Hash;

use super::{Kept, Line, LineKey};
use crate::{Error, OracleRow};

/// The key of a datum's lines: its position, with entry index 0.
fn datum_line_key(row: &OracleRow) -> Result<LineKey, Error> {
    Ok((
        row.position.vega_time,
        Error::signed("block height", row.position.block)?,
        Error::signed("sequence number", row.position.seq)?,
        0,
    ))
}

/// Stores a batch's oracle data through `store` (the backend's segment engine): each datum
/// under `all_data`, then its matches under their specs (`spec` gives a spec's owner) with the
/// datum's bytes as they read under `all_data`: the stored ones when it was stored already,
/// else the first of the batch's copies at its position.
pub fn store_oracle<O: Copy + Eq + Hash>(
    rows: &[OracleRow],
    all_data: O,
    mut spec: impl FnMut(&[u8; 32]) -> Result<O, Error>,
    mut store: impl for<'l> FnMut(Vec<(O, Line<'l>)>) -> Result<Kept<O>, Error>,
) -> Result<(), Error> {
    let keys = rows
        .iter()
        .map(datum_line_key)
        .collect::<Result<Vec<_>, _>>()?;
    let data = rows
        .iter()
        .zip(&keys)
        .map(|(row, &key)| {
            let line = Line {
                key,
                asset: 0,
                csv: &row.json[..],
            };
            (all_data, line)
        })
        .collect();
    let kept = store(data)?;
    // A stream's data come in position order; two at one position in a batch (a stream that
    // repeats itself) read as the first, the one stored.
    let mut first: HashMap<LineKey, &[u8]> = HashMap::new();
    if !keys.is_sorted_by(|a, b| a < b) {
        for (row, key) in rows.iter().zip(&keys) {
            first.entry(*key).or_insert(&row.json);
        }
    }
    let mut matches = Vec::new();
    for (row, key) in rows.iter().zip(&keys) {
        let csv = match (kept.get(&(all_data, *key)), first.get(key)) {
            (Some(stored), _) => &stored[..],
            (None, Some(first)) => first,
            (None, None) => &row.json[..],
        };
        for matched in &row.matched_specs {
            let line = Line {
                key: *key,
                asset: 0,
                csv,
            };
            matches.push((spec(matched.as_bytes())?, line));
        }
    }
    store(matches).map(drop)
}
