//! The one place where failures become Vega's wire shapes.
//!
//! Vega's gateway answers errors as a `google.rpc.Status`: `{"code":3,"message":"InvalidArgument
//! error","details":[{"@type":"type.googleapis.com/vega.ErrorDetail","code":10014,"message":
//! "missing party id","inner":""}]}`. Streaming methods (the export) wrap it as `{"error":…}`.
//! Detail codes follow Vega's table (`datanode/api/errors.go`); errors it has no code for get
//! 10000, as Vega does.

use std::error::Error as StdError;
use std::fmt::Write as _;

use serde::Serialize;

use hyper::StatusCode;
use hyper::header::{ALLOW, HeaderValue, RETRY_AFTER};

use crate::body::Body;
use crate::query::Repeated;
use crate::respond::{Style, whole};

/// Vega's API detail codes used here.
pub(crate) mod detail {
    /// Not in Vega's table (`ErrNotMapped`).
    pub const NOT_MAPPED: u32 = 10000;
    /// `ErrMissingPartyID`.
    pub const MISSING_PARTY_ID: u32 = 10014;
    /// `ErrMalformedRequest`.
    pub const MALFORMED_REQUEST: u32 = 10015;
    /// `ErrInvalidPagination`.
    pub const INVALID_PAGINATION: u32 = 10028;
    /// `ErrInvalidAssetID`.
    pub const INVALID_ASSET_ID: u32 = 10038;
    /// `ErrOracleDataServiceGet`.
    pub const ORACLE_DATA_SERVICE: u32 = 190003;
    /// `ErrLedgerServiceExport`.
    pub const LEDGER_EXPORT: u32 = 260002;
}

/// A request that failed before its answer began.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ApiError {
    /// The request is invalid (gRPC code 3, HTTP 400).
    #[error("{message}: {inner}")]
    InvalidArgument {
        /// Vega's detail code.
        detail: u32,
        /// Vega's detail message, e.g. `missing party id`.
        message: &'static str,
        /// What exactly is wrong.
        inner: String,
    },
    /// No such route (gRPC code 5, HTTP 404).
    #[error("not found")]
    NotFound,
    /// The route exists but not for this method (gRPC code 12, HTTP 405 with `Allow`).
    #[error("method not allowed")]
    MethodNotAllowed {
        /// The methods the route answers, for the `Allow` header.
        allow: &'static str,
    },
    /// The store failed (gRPC code 13, HTTP 500).
    #[error("{message}")]
    Internal {
        /// Vega's detail code.
        detail: u32,
        /// Vega's detail message.
        message: &'static str,
        /// The cause.
        #[source]
        source: Box<dyn StdError + Send + Sync>,
    },
    /// Too busy, or the store cannot be reached, right now (gRPC code 14, HTTP 503).
    #[error("unavailable: {reason}")]
    Unavailable {
        /// Vega's detail code.
        detail: u32,
        /// The detail message, e.g. `server busy`.
        message: &'static str,
        /// Why, for the `inner` field.
        reason: String,
        /// Seconds after which a retry is sensible, sent as `Retry-After`.
        retry_after: Option<u32>,
    },
    /// The client's bucket is empty (HTTP 429 with `Retry-After`; gRPC code 14 in the body, as
    /// Vega's limiter answers).
    #[error("rate limited")]
    RateLimited {
        /// Seconds until the bucket holds a token again.
        retry_after: u32,
    },
    /// The client kept asking while refused and is banned (HTTP 403 with `Retry-After`; gRPC
    /// code 14 in the body, as Vega's limiter answers).
    #[error("banned")]
    Banned {
        /// Seconds until the ban ends.
        retry_after: u32,
    },
}

/// Which of Vega's two error envelopes an endpoint uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorShape {
    /// The bare status object (unary methods).
    Bare,
    /// The status inside `{"error":…}` (streaming methods).
    Stream,
}

/// Seconds a client is asked to wait before retrying a store that is unavailable.
const STORE_RETRY_AFTER: u32 = 1;

/// `google.rpc.Status` as Vega's gateway writes it.
#[derive(Serialize)]
struct Status<'a> {
    code: u32,
    message: &'a str,
    details: Vec<Detail<'a>>,
}

/// `vega.ErrorDetail` inside a status's `details`.
#[derive(Serialize)]
struct Detail<'a> {
    #[serde(rename = "@type")]
    type_url: &'static str,
    code: u32,
    message: &'a str,
    inner: &'a str,
}

/// The envelope of streaming methods.
#[derive(Serialize)]
struct Envelope<'a> {
    error: &'a Status<'a>,
}

impl ApiError {
    /// An invalid-argument error.
    pub(crate) fn invalid(detail: u32, message: &'static str, inner: impl Into<String>) -> Self {
        Self::InvalidArgument {
            detail,
            message,
            inner: inner.into(),
        }
    }

    /// The answer to a failed store read: 503 with `Retry-After` when the store is unavailable
    /// (retrying later may succeed), 500 otherwise.
    pub(crate) fn storage(detail: u32, message: &'static str, err: storage::Error) -> Self {
        match err {
            storage::Error::Unavailable(_) => Self::Unavailable {
                detail,
                message,
                reason: chain(&err),
                retry_after: Some(STORE_RETRY_AFTER),
            },
            err => Self::Internal {
                detail,
                message,
                source: Box::new(err),
            },
        }
    }

    fn status(&self) -> StatusCode {
        match self {
            Self::InvalidArgument { .. } => StatusCode::BAD_REQUEST,
            Self::NotFound => StatusCode::NOT_FOUND,
            Self::MethodNotAllowed { .. } => StatusCode::METHOD_NOT_ALLOWED,
            Self::Internal { .. } => StatusCode::INTERNAL_SERVER_ERROR,
            Self::Unavailable { .. } => StatusCode::SERVICE_UNAVAILABLE,
            Self::RateLimited { .. } => StatusCode::TOO_MANY_REQUESTS,
            Self::Banned { .. } => StatusCode::FORBIDDEN,
        }
    }

    /// The error's JSON in the endpoint's envelope: the bare `google.rpc.Status`, or the status
    /// inside `{"error":…}`.
    pub(crate) fn json(&self, shape: ErrorShape) -> Vec<u8> {
        let cause;
        let (code, message, detail) = match self {
            Self::InvalidArgument {
                detail,
                message,
                inner,
            } => (
                3,
                "InvalidArgument error",
                Some((*detail, *message, inner.as_str())),
            ),
            Self::NotFound => (5, "Not Found", None),
            Self::MethodNotAllowed { .. } => (12, "Method Not Allowed", None),
            Self::Internal {
                detail,
                message,
                source,
            } => {
                cause = chain(source.as_ref());
                (
                    13,
                    "Internal error",
                    Some((*detail, *message, cause.as_str())),
                )
            }
            Self::Unavailable {
                detail,
                message,
                reason,
                ..
            } => (
                14,
                "Unavailable error",
                Some((*detail, *message, reason.as_str())),
            ),
            // Vega's limiter answers a plain status, with no detail.
            Self::RateLimited { .. } => (14, "api request rate limit exceeded", None),
            Self::Banned { .. } => (
                14,
                "temporarily banned for continuing to request while rate limited",
                None,
            ),
        };
        let status = Status {
            code,
            message,
            details: detail
                .map(|(code, message, inner)| Detail {
                    type_url: "type.googleapis.com/vega.ErrorDetail",
                    code,
                    message,
                    inner,
                })
                .into_iter()
                .collect(),
        };
        let json = match shape {
            ErrorShape::Bare => serde_json::to_vec(&status),
            ErrorShape::Stream => serde_json::to_vec(&Envelope { error: &status }),
        };
        json.expect("plain structs of strings and integers always serialize")
    }

    /// The response for this error in the endpoint's envelope. 5xx causes are logged here, and
    /// only here.
    pub(crate) fn into_response(self, shape: ErrorShape, style: Style) -> hyper::Response<Body> {
        match &self {
            Self::Internal { .. } => tracing::error!(error = %chain(&self), "request failed"),
            Self::Unavailable { reason, .. } => tracing::warn!(%reason, "request refused"),
            _ => {}
        }
        let mut response = whole(
            self.status(),
            "application/json",
            style.json(self.json(shape)),
        );
        let headers = response.headers_mut();
        match self {
            Self::Unavailable {
                retry_after: Some(seconds),
                ..
            }
            | Self::RateLimited {
                retry_after: seconds,
            }
            | Self::Banned {
                retry_after: seconds,
            } => {
                headers.insert(RETRY_AFTER, HeaderValue::from(seconds));
            }
            Self::MethodNotAllowed { allow } => {
                headers.insert(ALLOW, HeaderValue::from_static(allow));
            }
            _ => {}
        }
        response
    }
}

impl From<Repeated> for ApiError {
    /// A repeated field is a malformed request; `inner` names the field in both spellings.
    fn from(err: Repeated) -> Self {
        Self::invalid(
            detail::MALFORMED_REQUEST,
            "malformed request",
            err.to_string(),
        )
    }
}

/// An error and its causes, joined by `: `.
pub(crate) fn chain(err: &(dyn StdError + 'static)) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        let _ = write!(text, ": {cause}");
        source = cause.source();
    }
    text
}
