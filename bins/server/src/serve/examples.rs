//! The example requests logged at start-up, over the data actually served.

use std::net::SocketAddr;

/// Logs `curl` commands that work against this server and its data.
pub fn print_examples(addr: SocketAddr, examples: &storage::Examples) {
    let base = format!("http://{addr}");
    if let (Some(party), Some(asset)) = (&examples.party, &examples.asset) {
        tracing::info!("try: curl -OJ '{base}/api/v2/ledgerentry/export?partyId={party}'");
        tracing::info!(
            "try: curl -OJ '{base}/api/v2/ledgerentry/export?partyId={party}&assetId={asset}&dateRange.startTimestamp=1690000000000000000&dateRange.endTimestamp=1690000600000000000'"
        );
    }
    tracing::info!("try: curl '{base}/api/v2/oracle/data?pagination.first=10&pretty'");
    if let Some(spec) = &examples.spec {
        tracing::info!(
            "try: curl '{base}/api/v2/oracle/data?oracleSpecId={spec}&pagination.first=1&pretty'"
        );
    }
    tracing::info!("try: curl '{base}/health' '{base}/metrics' '{base}/api/v2/openapi.json'");
}
