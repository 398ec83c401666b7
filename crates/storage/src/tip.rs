//! The chain tip's query, shared by both backends.
//!
//! It reads `blocks` by its height alone, so that it stays right when a height holds two rows
//! (a chain's first height appears twice: the genesis or checkpoint block, then the first real
//! one), and a block without a vega time takes the latest time known below it.

use crate::{ChainTip, Error};

/// One row: the first height, the last height and the latest known vega time, each `NULL`
/// for an empty table. Each subquery is one step along the height index.
pub(crate) const SQL: &str = "SELECT (SELECT min(height) FROM blocks), \
     (SELECT max(height) FROM blocks), \
     (SELECT vega_time FROM blocks WHERE vega_time IS NOT NULL ORDER BY height DESC LIMIT 1)";

/// The tip from the query's row.
pub(crate) fn from_row(
    first: Option<i64>,
    last: Option<i64>,
    last_vega_time: Option<i64>,
) -> Result<Option<ChainTip>, Error> {
    let height = |height: i64| {
        u64::try_from(height).map_err(|_| Error::Corrupt(format!("block height {height}")))
    };
    Ok(match (first, last) {
        (Some(first), Some(last)) => Some(ChainTip {
            first_height: height(first)?,
            last_height: height(last)?,
            last_vega_time,
        }),
        _ => None,
    })
}
