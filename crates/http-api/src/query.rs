//! Query strings, percent-decoded once.

use std::borrow::Cow;

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

    /// The first value of `name`, treating an empty value as absent: that is how grpc-gateway
    /// reads an unset field, and how a client writes "no filter".
    pub(crate) fn get(&self, name: &str) -> Option<&str> {
        self.pairs
            .iter()
            .find(|(key, _)| key == name)
            .map(|(_, value)| value.as_ref())
            .filter(|value| !value.is_empty())
    }

    /// True when `name` is present, even with an empty value.
    pub(crate) fn has(&self, name: &str) -> bool {
        self.pairs.iter().any(|(key, _)| key == name)
    }
}

#[cfg(test)]
mod properties;
