//! Query strings, percent-decoded once, read field by field in both of the spellings Vega's
//! gateway accepts.
//!
//! grpc-gateway v2 binds a query parameter to a request field by the field's proto path
//! (`party_id`, `date_range.start_timestamp`) and by its JSON path (`partyId`,
//! `dateRange.startTimestamp`): clients use either, so both mean the same here.
//! See: <https://github.com/grpc-ecosystem/grpc-gateway/blob/main/runtime/query.go>

use std::borrow::Cow;
use std::fmt;

/// A request field, by its two names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Field {
    /// The proto field path, e.g. `date_range.start_timestamp`.
    pub proto: &'static str,
    /// The JSON field path, e.g. `dateRange.startTimestamp`; the same as `proto` for one-word
    /// names.
    pub json: &'static str,
}

impl Field {
    const fn new(proto: &'static str, json: &'static str) -> Self {
        Self { proto, json }
    }

    fn is_named(&self, name: &str) -> bool {
        name == self.json || name == self.proto
    }
}

impl fmt::Display for Field {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.proto == self.json {
            write!(f, "{:?}", self.json)
        } else {
            write!(f, "{:?} ({})", self.json, self.proto)
        }
    }
}

/// The fields the two operations read.
pub(crate) mod fields {
    use super::Field;

    /// `ExportLedgerEntriesRequest.party_id`.
    pub const PARTY_ID: Field = Field::new("party_id", "partyId");
    /// `ExportLedgerEntriesRequest.asset_id`.
    pub const ASSET_ID: Field = Field::new("asset_id", "assetId");
    /// `DateRange.start_timestamp` of the export.
    pub const START_TIMESTAMP: Field =
        Field::new("date_range.start_timestamp", "dateRange.startTimestamp");
    /// `DateRange.end_timestamp` of the export.
    pub const END_TIMESTAMP: Field =
        Field::new("date_range.end_timestamp", "dateRange.endTimestamp");
    /// `ListOracleDataRequest.oracle_spec_id`.
    pub const ORACLE_SPEC_ID: Field = Field::new("oracle_spec_id", "oracleSpecId");
    /// `Pagination.first`.
    pub const FIRST: Field = Field::new("pagination.first", "pagination.first");
    /// `Pagination.after`.
    pub const AFTER: Field = Field::new("pagination.after", "pagination.after");
    /// `Pagination.last`.
    pub const LAST: Field = Field::new("pagination.last", "pagination.last");
    /// `Pagination.before`.
    pub const BEFORE: Field = Field::new("pagination.before", "pagination.before");
    /// `Pagination.newest_first`.
    pub const NEWEST_FIRST: Field = Field::new("pagination.newest_first", "pagination.newestFirst");
}

/// A field given more than once, in either spelling: its fields are single values, so the
/// request is ambiguous (grpc-gateway refuses a name repeated too).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("too many values for field {field}")]
pub(crate) struct Repeated {
    /// The field.
    pub field: Field,
}

/// The decoded pairs of a query string. Unknown names are simply never asked for.
pub(crate) struct Query<'a> {
    pairs: Vec<(Cow<'a, str>, Cow<'a, str>)>,
}

impl<'a> Query<'a> {
    pub(crate) fn parse(query: Option<&'a str>) -> Self {
        let pairs = query
            .map(|q| form_urlencoded::parse(q.as_bytes()).collect())
            .unwrap_or_default();
        Self { pairs }
    }

    /// The value of `field` in either spelling, empty values included.
    pub(crate) fn raw(&self, field: Field) -> Result<Option<&str>, Repeated> {
        let mut values = self
            .pairs
            .iter()
            .filter(|(key, _)| field.is_named(key))
            .map(|(_, value)| value.as_ref());
        let first = values.next();
        match values.next() {
            Some(_) => Err(Repeated { field }),
            None => Ok(first),
        }
    }

    /// The value of `field`, treating an empty value as absent: that is how grpc-gateway
    /// reads an unset field, and how a client writes "no filter".
    pub(crate) fn get(&self, field: Field) -> Result<Option<&str>, Repeated> {
        Ok(self.raw(field)?.filter(|value| !value.is_empty()))
    }

    /// True when the flag `name` is present, even with an empty value.
    pub(crate) fn has(&self, name: &str) -> bool {
        self.pairs.iter().any(|(key, _)| key == name)
    }
}

#[cfg(test)]
mod properties;
