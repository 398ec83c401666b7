//! Scrubbing: reading every stored unit of a store and verifying it, as `server check --deep`
//! does, instead of trusting it until a client's read trips over it.
//!
//! A scrub reads one snapshot and writes nothing. Damage found in a unit is a [`Finding`], and
//! the scrub goes on with the next unit; a failure that is not damage (the store unreachable)
//! ends it as an error.

use crate::segment::{self, Table};
use crate::{Damage, Error, Place};

/// What a damaged segment affects, from its owner (the id's hex, or its dictionary id when none
/// is stored: always for the oracle's owner 0, all data) and its first and last vega times.
pub type Affects = fn(&str, (i64, i64)) -> String;

/// A table of segments to scrub, as both backends scrub them.
#[derive(Debug)]
pub struct ScrubSource {
    /// The table.
    pub table: &'static Table,
    /// The dictionary of its owners' ids.
    pub dictionary: &'static str,
    /// What a damaged segment of it affects.
    pub affects: Affects,
}

/// The tables of segments a scrub reads, in order: the ledger's, then the oracle data's.
pub const SCRUB_SOURCES: [ScrubSource; 2] = [
    ScrubSource {
        table: &segment::LEDGER,
        dictionary: "parties",
        affects: |owner, _| format!("the export of party {owner}"),
    },
    ScrubSource {
        table: &segment::ORACLE,
        dictionary: "oracle_specs",
        affects: oracle_pages,
    },
];

/// The oracle pages a damaged oracle segment of `owner` affects (owner 0 holds all data).
fn oracle_pages(owner: &str, (first, last): (i64, i64)) -> String {
    let listing = if owner == "0" {
        "all data".to_owned()
    } else {
        format!("spec {owner}")
    };
    format!("the oracle data pages of {listing} from vega time {first} to {last}")
}

/// One damaged unit, or damage the store itself reports.
#[derive(Debug)]
pub struct Finding {
    /// The unit: its table and key; `None` for damage the store reports about itself (SQLite's
    /// `PRAGMA integrity_check`).
    pub place: Option<Place>,
    /// What is wrong.
    pub damage: Damage,
    /// The answers that read the unit and fail until it is repaired: which party's export,
    /// which oracle pages.
    pub affects: String,
}

/// What a scrub read and found.
#[derive(Debug, Default)]
pub struct Scrub {
    /// The stored units read (segments, oracle rows).
    pub units: u64,
    /// What was found damaged; empty when everything verified.
    pub findings: Vec<Finding>,
}

/// How far a scrub is, reported after every unit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ScrubProgress {
    /// Units read so far.
    pub done: u64,
    /// Units to read in all, as counted when the scrub started.
    pub total: u64,
}

impl Scrub {
    /// Records the outcome of verifying one unit: damage becomes a finding affecting
    /// `affects`; any other error ends the scrub.
    pub fn record(
        &mut self,
        verified: Result<(), Error>,
        affects: impl FnOnce() -> String,
    ) -> Result<(), Error> {
        self.units += 1;
        match verified {
            Ok(()) => Ok(()),
            Err(Error::Corrupt(corruption)) => {
                self.findings.push(Finding {
                    place: corruption.place,
                    damage: corruption.damage,
                    affects: affects(),
                });
                Ok(())
            }
            Err(other) => Err(other),
        }
    }
}
