//! The chain tip's query, the stored chain's query and the chain id's rule, shared by both
//! backends.
//!
//! It reads `blocks` by its height alone, so that it stays right when a height holds two rows
//! (a chain's first height appears twice: the genesis or checkpoint block, then the first real
//! one), and a block without a vega time takes the latest time known below it.

use crate::error::Damage;
use crate::{BlockTime, ChainState, ChainTip, Error};

/// The tip's columns ([`SQL`]), a literal so that a backend can add columns with `concat!`.
#[macro_export]
macro_rules! tip_columns {
    () => {
        "SELECT (SELECT min(height) FROM blocks), \
         (SELECT max(height) FROM blocks), \
         (SELECT vega_time FROM blocks WHERE vega_time IS NOT NULL ORDER BY height DESC LIMIT 1)"
    };
}

/// One row: the first height, the last height and the latest known vega time, each `NULL`
/// for an empty table. Each subquery is one step along the height index.
pub const SQL: &str = tip_columns!();

/// A stored height, which no writer stores negative.
fn height(height: i64) -> Result<u64, Error> {
    u64::try_from(height).map_err(|_| Damage::Value(format!("block height {height}")).into())
}

/// The tip from the query's row.
pub fn from_row(
    first: Option<i64>,
    last: Option<i64>,
    last_vega_time: Option<i64>,
) -> Result<Option<ChainTip>, Error> {
    Ok(match (first, last) {
        (Some(first), Some(last)) => Some(ChainTip {
            first_height: height(first)?,
            last_height: height(last)?,
            last_vega_time,
        }),
        _ => None,
    })
}

/// One row: the recorded chain id, then the height and vega time of the first stored block and
/// of the last one (the second block of the first height counts after the first), each `NULL`
/// when there is none. Read it inside one snapshot.
pub const CHAIN_SQL: &str = "SELECT \
     (SELECT value FROM schema_info WHERE key = 'chain_id'), \
     (SELECT height FROM blocks ORDER BY height, seq_base LIMIT 1), \
     (SELECT vega_time FROM blocks ORDER BY height, seq_base LIMIT 1), \
     (SELECT height FROM blocks ORDER BY height DESC, seq_base DESC LIMIT 1), \
     (SELECT vega_time FROM blocks ORDER BY height DESC, seq_base DESC LIMIT 1)";

/// The stored chain from [`CHAIN_SQL`]'s row.
pub fn chain_from_row(
    chain_id: Option<String>,
    first: (Option<i64>, Option<i64>),
    last: (Option<i64>, Option<i64>),
) -> Result<ChainState, Error> {
    let block = |(at, vega_time): (Option<i64>, Option<i64>)| -> Result<_, Error> {
        at.map(|at| {
            Ok(BlockTime {
                height: height(at)?,
                vega_time,
            })
        })
        .transpose()
    };
    Ok(ChainState {
        chain_id,
        first: block(first)?,
        last: block(last)?,
    })
}

/// Whether a batch of chain `found` must record it (`true`: the store holds no chain id yet),
/// given the chain id `stored`; a batch of another chain is refused ([`Error::OtherChain`]).
pub fn must_record(stored: Option<String>, found: &str) -> Result<bool, Error> {
    match stored {
        None => Ok(true),
        Some(stored) if stored == found => Ok(false),
        Some(stored) => Err(Error::OtherChain {
            stored,
            found: found.to_owned(),
        }),
    }
}
