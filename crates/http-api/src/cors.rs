//! Cross-origin resource sharing, so that browser apps on other origins (Vega's console among
//! them) can call both endpoints and read an export's file name.
//!
//! See: <https://fetch.spec.whatwg.org/#http-cors-protocol>

use hyper::header::{
    ACCESS_CONTROL_ALLOW_HEADERS, ACCESS_CONTROL_ALLOW_METHODS, ACCESS_CONTROL_ALLOW_ORIGIN,
    ACCESS_CONTROL_EXPOSE_HEADERS, ACCESS_CONTROL_MAX_AGE, ACCESS_CONTROL_REQUEST_HEADERS, ALLOW,
    HeaderMap, HeaderValue, ORIGIN, VARY,
};
use hyper::{Response, StatusCode};

use crate::body::{Body, empty};

/// Which origins may read the answers.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum AllowedOrigins {
    /// Every origin (`Access-Control-Allow-Origin: *`): the data are public.
    #[default]
    Any,
    /// Only these origins (e.g. `https://console.vega.xyz`), compared byte for byte with the
    /// request's `Origin`, as browsers send it: scheme, host and port, no trailing slash.
    List(Vec<String>),
}

impl AllowedOrigins {
    /// Parses a comma-separated list; `*` alone means any origin.
    pub fn parse(list: &str) -> Self {
        let origins: Vec<String> = list
            .split(',')
            .map(str::trim)
            .filter(|origin| !origin.is_empty())
            .map(str::to_owned)
            .collect();
        if origins.is_empty() || origins.iter().any(|origin| origin == "*") {
            AllowedOrigins::Any
        } else {
            AllowedOrigins::List(origins)
        }
    }

    /// The `Access-Control-Allow-Origin` value for a request from `origin`, if it is allowed.
    fn allow(&self, origin: Option<&HeaderValue>) -> Option<HeaderValue> {
        match self {
            AllowedOrigins::Any => Some(HeaderValue::from_static("*")),
            AllowedOrigins::List(list) => origin
                .filter(|origin| {
                    list.iter()
                        .any(|allowed| allowed.as_bytes() == origin.as_bytes())
                })
                .cloned(),
        }
    }
}

/// Methods the API answers.
const METHODS: &str = "GET, OPTIONS";

/// How long a browser may cache a preflight answer: a day.
const MAX_AGE_SECS: u32 = 86_400;

/// Adds the CORS headers of an actual (not preflight) response.
pub(crate) fn decorate(allowed: &AllowedOrigins, request: &HeaderMap, headers: &mut HeaderMap) {
    if let AllowedOrigins::List(_) = allowed {
        // The answer depends on the Origin: caches must keep one copy per origin.
        vary_on_origin(headers);
    }
    let Some(allow) = allowed.allow(request.get(ORIGIN)) else {
        return;
    };
    headers.insert(ACCESS_CONTROL_ALLOW_ORIGIN, allow);
    // Without it, a page cannot read the export's file name from Content-Disposition, the
    // block headers the Vega console judges a node's freshness by, its request's id, nor its
    // rate limit.
    headers.insert(
        ACCESS_CONTROL_EXPOSE_HEADERS,
        HeaderValue::from_static("Content-Disposition, X-Block-Height, X-Block-Timestamp, X-Request-Id, RateLimit-Limit, RateLimit-Remaining, RateLimit-Reset, Retry-After"),
    );
}

/// The answer to `OPTIONS` on an API path: a preflight when it carries
/// `Access-Control-Request-Method`, else a plain `Allow`.
pub(crate) fn options(allowed: &AllowedOrigins, request: &HeaderMap) -> Response<Body> {
    let mut response = Response::new(empty());
    *response.status_mut() = StatusCode::NO_CONTENT;
    let headers = response.headers_mut();
    headers.insert(ALLOW, HeaderValue::from_static(METHODS));
    if let AllowedOrigins::List(_) = allowed {
        vary_on_origin(headers);
    }
    if let Some(allow) = allowed.allow(request.get(ORIGIN)) {
        headers.insert(ACCESS_CONTROL_ALLOW_ORIGIN, allow);
        headers.insert(
            ACCESS_CONTROL_ALLOW_METHODS,
            HeaderValue::from_static(METHODS),
        );
        // Any request header may be sent: echo what the browser asks for.
        if let Some(requested) = request.get(ACCESS_CONTROL_REQUEST_HEADERS) {
            headers.insert(ACCESS_CONTROL_ALLOW_HEADERS, requested.clone());
        }
        headers.insert(ACCESS_CONTROL_MAX_AGE, HeaderValue::from(MAX_AGE_SECS));
    }
    response
}

/// Adds `Origin` to the response's one `Vary` header.
fn vary_on_origin(headers: &mut HeaderMap) {
    let value = match headers.get(VARY).and_then(|vary| vary.to_str().ok()) {
        Some(vary) if !vary.is_empty() => format!("{vary}, Origin"),
        _ => "Origin".to_owned(),
    };
    headers.insert(
        VARY,
        HeaderValue::from_str(&value).expect("header values stay ASCII"),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(origin: Option<&str>) -> HeaderMap {
        let mut headers = HeaderMap::new();
        if let Some(origin) = origin {
            headers.insert(ORIGIN, HeaderValue::from_str(origin).unwrap());
        }
        headers
    }

    #[track_caller]
    fn check(allowed: &str, origin: Option<&str>, expected: Option<&str>) {
        let allowed = AllowedOrigins::parse(allowed);
        let mut headers = HeaderMap::new();
        decorate(&allowed, &request(origin), &mut headers);
        let allow = headers
            .get(ACCESS_CONTROL_ALLOW_ORIGIN)
            .map(|value| value.to_str().unwrap());
        assert_eq!(allow, expected, "{allowed:?} from {origin:?}");
        assert_eq!(
            headers.get(ACCESS_CONTROL_EXPOSE_HEADERS).is_some(),
            expected.is_some()
        );
        assert_eq!(
            headers.get(VARY).is_some(),
            matches!(allowed, AllowedOrigins::List(_))
        );
    }

    #[test]
    fn allows_any_origin_or_a_list() {
        let console = "https://console.vega.xyz";
        check("*", None, Some("*"));
        check("*", Some(console), Some("*"));
        check("", Some(console), Some("*"));
        check(console, Some(console), Some(console));
        check(
            &format!("https://other.example, {console}"),
            Some(console),
            Some(console),
        );
        check(console, Some("https://evil.example"), None);
        check(console, Some("https://console.vega.xyz/"), None);
        check(console, None, None);
        check(
            &format!("{console}, *"),
            Some("https://x.example"),
            Some("*"),
        );
    }

    #[test]
    fn preflight_echoes_the_requested_headers() {
        let mut headers = request(Some("https://console.vega.xyz"));
        headers.insert(
            ACCESS_CONTROL_REQUEST_HEADERS,
            HeaderValue::from_static("accept, x-trace"),
        );
        let response = options(&AllowedOrigins::Any, &headers);
        assert_eq!(response.status(), StatusCode::NO_CONTENT);
        let headers = response.headers();
        assert_eq!(headers[ACCESS_CONTROL_ALLOW_ORIGIN], "*");
        assert_eq!(headers[ACCESS_CONTROL_ALLOW_METHODS], METHODS);
        assert_eq!(headers[ACCESS_CONTROL_ALLOW_HEADERS], "accept, x-trace");
        assert_eq!(headers[ACCESS_CONTROL_MAX_AGE], "86400");
        assert_eq!(headers[ALLOW], METHODS);

        let refused = options(
            &AllowedOrigins::parse("https://a.example"),
            &request(Some("https://b.example")),
        );
        assert!(refused.headers().get(ACCESS_CONTROL_ALLOW_ORIGIN).is_none());
    }
}
