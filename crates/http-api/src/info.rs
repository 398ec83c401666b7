//! `GET /api/v2/info`: what is running, in Vega's `InfoResponse` shape.

use serde::Serialize;

/// The version and commit of the running server, given by the binary (this crate cannot know
/// them: it is built into the binary, which holds the build script that reads git).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BuildInfo {
    /// The server's version, e.g. `0.1.0`.
    pub version: String,
    /// The git commit it was built from (12 hex digits), or `unknown`.
    pub commit: String,
}

impl Default for BuildInfo {
    /// This crate's version and an unknown commit: for embedders and tests.
    fn default() -> Self {
        Self {
            version: env!("CARGO_PKG_VERSION").to_owned(),
            commit: "unknown".to_owned(),
        }
    }
}

/// Vega's `datanode.api.v2.InfoResponse`, as its gateway writes it (camelCase names).
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct InfoResponse<'a> {
    version: &'a str,
    commit_hash: &'a str,
}

impl BuildInfo {
    /// The answer of `/api/v2/info`.
    pub(crate) fn json(&self) -> Vec<u8> {
        serde_json::to_vec(&InfoResponse {
            version: &self.version,
            commit_hash: &self.commit,
        })
        .expect("two strings always serialise")
    }
}
