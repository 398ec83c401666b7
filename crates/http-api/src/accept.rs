//! `Accept` negotiation between the CSV file and the documented stream of JSON messages, and the
//! weighted-list syntax that `Accept` shares with `Accept-Encoding`.

use hyper::HeaderMap;
use hyper::header::{ACCEPT, HeaderName};

/// The two forms of the export.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ExportForm {
    /// The CSV file itself (`text/csv`).
    Csv,
    /// Newline-delimited `{"result":{…HttpBody…}}` messages (`application/x-ndjson`).
    Messages,
}

/// The message form only when the client prefers JSON over CSV; a missing or unparseable
/// `Accept` gets the file, which is what browsers and `curl` expect.
pub(crate) fn export_form(headers: &HeaderMap) -> ExportForm {
    let mut ranges = weighted_items(headers, ACCEPT);
    ranges.retain(|(range, _)| range.contains('/'));
    if ranges.is_empty() {
        return ExportForm::Csv;
    }
    let csv = quality(&ranges, "text/csv");
    let json = quality(&ranges, "application/x-ndjson").max(quality(&ranges, "application/json"));
    if json > csv {
        ExportForm::Messages
    } else {
        ExportForm::Csv
    }
}

/// The items of every `name` header (a comma-separated list, as `Accept` and
/// `Accept-Encoding` are), each with its `q` weight: 1 when absent, 0 when malformed.
pub(crate) fn weighted_items(headers: &HeaderMap, name: HeaderName) -> Vec<(&str, f32)> {
    headers
        .get_all(name)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .filter_map(parse_item)
        .collect()
}

/// One `item;param=…` and its `q`.
fn parse_item(item: &str) -> Option<(&str, f32)> {
    let mut parts = item.split(';').map(str::trim);
    let item = parts.next().filter(|item| !item.is_empty())?;
    let mut q = 1.0;
    for param in parts {
        if let Some((name, value)) = param.split_once('=')
            && name.trim().eq_ignore_ascii_case("q")
        {
            q = value
                .trim()
                .parse::<f32>()
                .ok()
                .filter(|q| (0.0..=1.0).contains(q))
                .unwrap_or(0.0);
        }
    }
    Some((item, q))
}

/// The `q` the client gives `media`: that of the most specific matching range (RFC 9110 §12.5.1).
fn quality(ranges: &[(&str, f32)], media: &str) -> f32 {
    let (kind, _) = media.split_once('/').expect("media types have a slash");
    let mut best: Option<(u8, f32)> = None;
    for &(range, q) in ranges {
        let specificity = if range.eq_ignore_ascii_case(media) {
            3
        } else if range
            .split_once('/')
            .is_some_and(|(k, sub)| sub == "*" && k.eq_ignore_ascii_case(kind))
        {
            2
        } else if range == "*/*" {
            1
        } else {
            continue;
        };
        if best.is_none_or(|(s, _)| specificity > s) {
            best = Some((specificity, q));
        }
    }
    best.map_or(0.0, |(_, q)| q)
}

#[cfg(test)]
mod tests {
    use super::*;
    use hyper::header::HeaderValue;

    #[track_caller]
    fn check(accept: Option<&str>, expected: ExportForm) {
        let mut headers = HeaderMap::new();
        if let Some(accept) = accept {
            headers.insert(ACCEPT, HeaderValue::from_str(accept).unwrap());
        }
        assert_eq!(export_form(&headers), expected, "Accept: {accept:?}");
    }

    #[test]
    fn negotiates_the_export_form() {
        use ExportForm::*;
        check(None, Csv);
        check(Some("*/*"), Csv);
        check(Some("text/csv"), Csv);
        check(Some("application/json"), Messages);
        check(Some("application/x-ndjson"), Messages);
        check(Some("application/json, text/csv"), Csv);
        check(Some("text/csv;q=0.5, application/json"), Messages);
        check(Some("application/json;q=0.9, */*;q=0.1"), Messages);
        check(Some("application/*"), Messages);
        check(Some("text/*, application/json;q=0.8"), Csv);
        check(Some("application/json;q=0"), Csv);
        check(Some("application/json;q=abc"), Csv);
        check(Some("garbage"), Csv);
        check(Some("text/html,application/xhtml+xml,*/*;q=0.8"), Csv);
    }
}
