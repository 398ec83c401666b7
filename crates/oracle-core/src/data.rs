//! Oracle data as Vega's data node stores it, and its rendering as the gateway's JSON.

use std::io::Write as _;

use ledger_core::OracleSpecId;

/// Who vouched for a datum.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Signer {
    /// A Vega public key (hex, as the event carried it), rendered as `{"pubKey":{"key":…}}`.
    PubKey(String),
    /// An Ethereum address, for data sourced from Ethereum, rendered as
    /// `{"ethAddress":{"address":…}}`.
    EthAddress(String),
}

/// One named value of a datum or of its metadata, rendered as `{"name":…,"value":…}`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Property {
    /// Name of the property, such as `prices.BTC.value`.
    pub name: String,
    /// Value of the property, always a string on the wire.
    pub value: String,
}

/// One oracle datum received by the network (Vega's `vega.OracleData`), matched or not.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OracleData {
    /// Keys or addresses that signed the datum.
    pub signers: Vec<Signer>,
    /// The data properties.
    pub data: Vec<Property>,
    /// Metadata properties, such as `eth-block-height`.
    pub meta_data: Vec<Property>,
    /// Oracle specs that matched this datum; empty when none did.
    pub matched_spec_ids: Vec<OracleSpecId>,
    /// When the datum was broadcast to matching markets, in Unix nanoseconds.
    pub broadcast_at: i64,
    /// Why the datum could not be sourced, if it could not.
    pub error: Option<String>,
}

impl OracleData {
    /// Renders the datum as the `node` of a `GET /api/v2/oracle/data` edge, byte for byte as
    /// Vega's grpc-gateway does: compact, fields in protobuf declaration order, every field
    /// present except `error`, which appears only when it is `Some` (even `Some("")`), and the
    /// `int64` `broadcastAt` as a JSON string.
    ///
    /// Strings are escaped by serde_json, whose rules match protojson's: `"`, `\` and control
    /// characters are escaped (`\n`-style where one exists, else `\u00xx` in lowercase hex),
    /// everything else, including non-ASCII text, is written as is.
    pub fn to_vega_json(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.estimated_json_len());
        out.extend_from_slice(br#"{"externalData":{"data":{"signers":["#);
        for (idx, signer) in self.signers.iter().enumerate() {
            if idx > 0 {
                out.push(b',');
            }
            match signer {
                Signer::PubKey(key) => {
                    out.extend_from_slice(br#"{"pubKey":{"key":"#);
                    push_json_string(&mut out, key);
                }
                Signer::EthAddress(address) => {
                    out.extend_from_slice(br#"{"ethAddress":{"address":"#);
                    push_json_string(&mut out, address);
                }
            }
            out.extend_from_slice(b"}}");
        }
        out.extend_from_slice(br#"],"data":"#);
        push_properties(&mut out, &self.data);
        out.extend_from_slice(br#","matchedSpecIds":["#);
        for (idx, spec_id) in self.matched_spec_ids.iter().enumerate() {
            if idx > 0 {
                out.push(b',');
            }
            // Display is lowercase hex, which needs no escaping.
            write!(out, "\"{spec_id}\"").expect("writing to a Vec cannot fail");
        }
        write!(
            out,
            r#"],"broadcastAt":"{}","metaData":"#,
            self.broadcast_at
        )
        .expect("writing to a Vec cannot fail");
        push_properties(&mut out, &self.meta_data);
        if let Some(error) = &self.error {
            out.extend_from_slice(br#","error":"#);
            push_json_string(&mut out, error);
        }
        out.extend_from_slice(b"}}}");
        out
    }

    /// A close upper bound for unescaped text, so that rendering allocates once.
    fn estimated_json_len(&self) -> usize {
        let signers: usize = self.signers.iter().map(|s| 32 + signer_text(s).len()).sum();
        let properties: usize = self
            .data
            .iter()
            .chain(&self.meta_data)
            .map(|p| 23 + p.name.len() + p.value.len())
            .sum();
        let error = self.error.as_ref().map_or(0, |e| 11 + e.len());
        128 + signers + properties + 67 * self.matched_spec_ids.len() + error
    }
}

/// The key or address carried by a signer.
fn signer_text(signer: &Signer) -> &str {
    match signer {
        Signer::PubKey(text) | Signer::EthAddress(text) => text,
    }
}

/// Appends `[{"name":…,"value":…},…]`.
fn push_properties(out: &mut Vec<u8>, properties: &[Property]) {
    out.push(b'[');
    for (idx, property) in properties.iter().enumerate() {
        if idx > 0 {
            out.push(b',');
        }
        out.extend_from_slice(br#"{"name":"#);
        push_json_string(out, &property.name);
        out.extend_from_slice(br#","value":"#);
        push_json_string(out, &property.value);
        out.push(b'}');
    }
    out.push(b']');
}

/// Appends `text` as a quoted, escaped JSON string.
fn push_json_string(out: &mut Vec<u8>, text: &str) {
    serde_json::to_writer(&mut *out, text)
        .expect("serializing a str into a Vec cannot fail: no I/O errors, no invalid input");
}

#[cfg(test)]
mod tests {
    use super::*;

    const SPEC_A: &str = "aa2ca1af6a107b75677f6cbdcc22af58be6521cc3e2434e37af027bc08d6af57";
    const SPEC_B: &str = "00000000000000000000000000000000000000000000000000000000000000ff";

    fn spec(hex: &str) -> OracleSpecId {
        hex.parse().expect("test spec ids are valid hex")
    }

    fn prop(name: &str, value: &str) -> Property {
        Property {
            name: name.to_owned(),
            value: value.to_owned(),
        }
    }

    fn empty() -> OracleData {
        OracleData {
            signers: vec![],
            data: vec![],
            meta_data: vec![],
            matched_spec_ids: vec![],
            broadcast_at: 0,
            error: None,
        }
    }

    #[track_caller]
    fn check(datum: OracleData, expected: &str) {
        let json = datum.to_vega_json();
        let text = String::from_utf8(json).expect("rendered JSON is UTF-8");
        assert_eq!(text, expected);
        // Whatever we emit must also be valid JSON.
        serde_json::from_str::<serde_json::Value>(&text).expect("rendered JSON parses");
    }

    #[test]
    fn empty_lists_and_no_error() {
        check(
            empty(),
            r#"{"externalData":{"data":{"signers":[],"data":[],"matchedSpecIds":[],"broadcastAt":"0","metaData":[]}}}"#,
        );
    }

    #[test]
    fn full_datum() {
        check(
            OracleData {
                signers: vec![
                    Signer::PubKey("0xAB".into()),
                    Signer::EthAddress("0xd8".into()),
                ],
                data: vec![
                    prop("prices.BTC.value", "1000"),
                    prop("prices.ETH.value", "7"),
                ],
                meta_data: vec![prop("eth-block-height", "17")],
                matched_spec_ids: vec![spec(SPEC_A), spec(SPEC_B)],
                broadcast_at: 1_690_000_001_264_036_759,
                error: Some("boom".into()),
            },
            concat!(
                r#"{"externalData":{"data":{"signers":[{"pubKey":{"key":"0xAB"}},{"ethAddress":{"address":"0xd8"}}],"#,
                r#""data":[{"name":"prices.BTC.value","value":"1000"},{"name":"prices.ETH.value","value":"7"}],"#,
                r#""matchedSpecIds":["aa2ca1af6a107b75677f6cbdcc22af58be6521cc3e2434e37af027bc08d6af57","#,
                r#""00000000000000000000000000000000000000000000000000000000000000ff"],"#,
                r#""broadcastAt":"1690000001264036759","metaData":[{"name":"eth-block-height","value":"17"}],"#,
                r#""error":"boom"}}}"#,
            ),
        );
    }

    #[test]
    fn matches_a_sample_event() {
        // From the sample stream crates/ingest/testdata/sample-events.ndjson (event 1000001-3).
        check(
            OracleData {
                signers: vec![Signer::PubKey(
                    "0xBCFBB050ACAB1A6BC69D4BD8B3FA7AA7E1FAB9D78C7E134F5DFBD3D12C4A3698".into(),
                )],
                data: vec![prop("prices.TSLA.value", "934166291")],
                meta_data: vec![],
                matched_spec_ids: vec![spec(&SPEC_A.to_uppercase())],
                broadcast_at: 1_690_000_001_499_727_697,
                error: None,
            },
            r#"{"externalData":{"data":{"signers":[{"pubKey":{"key":"0xBCFBB050ACAB1A6BC69D4BD8B3FA7AA7E1FAB9D78C7E134F5DFBD3D12C4A3698"}}],"data":[{"name":"prices.TSLA.value","value":"934166291"}],"matchedSpecIds":["aa2ca1af6a107b75677f6cbdcc22af58be6521cc3e2434e37af027bc08d6af57"],"broadcastAt":"1690000001499727697","metaData":[]}}}"#,
        );
    }

    #[test]
    fn error_present_even_when_empty() {
        check(
            OracleData {
                error: Some(String::new()),
                ..empty()
            },
            r#"{"externalData":{"data":{"signers":[],"data":[],"matchedSpecIds":[],"broadcastAt":"0","metaData":[],"error":""}}}"#,
        );
    }

    #[test]
    fn negative_and_extreme_broadcast_at() {
        check(
            OracleData {
                broadcast_at: -1,
                ..empty()
            },
            r#"{"externalData":{"data":{"signers":[],"data":[],"matchedSpecIds":[],"broadcastAt":"-1","metaData":[]}}}"#,
        );
        check(
            OracleData {
                broadcast_at: i64::MIN,
                ..empty()
            },
            r#"{"externalData":{"data":{"signers":[],"data":[],"matchedSpecIds":[],"broadcastAt":"-9223372036854775808","metaData":[]}}}"#,
        );
    }

    #[test]
    fn strings_are_escaped() {
        check(
            OracleData {
                signers: vec![
                    Signer::PubKey("a\"b\\c".into()),
                    Signer::EthAddress("</script>&".into()),
                ],
                data: vec![prop("q\"uote", "back\\slash")],
                meta_data: vec![prop("ctl", "\u{0}\u{1}\u{8}\t\n\u{b}\u{c}\r\u{1f}\u{7f}")],
                matched_spec_ids: vec![],
                broadcast_at: 5,
                error: Some("héllo ✓ 😀 \u{2028} \"x\"".into()),
            },
            concat!(
                r#"{"externalData":{"data":{"signers":[{"pubKey":{"key":"a\"b\\c"}},{"ethAddress":{"address":"</script>&"}}],"#,
                r#""data":[{"name":"q\"uote","value":"back\\slash"}],"matchedSpecIds":[],"broadcastAt":"5","#,
                r#""metaData":[{"name":"ctl","value":"\u0000\u0001\b\t\n\u000b\f\r\u001f"#,
                "\u{7f}",
                r#""}],"error":"héllo ✓ 😀 "#,
                "\u{2028}",
                r#" \"x\""}}}"#,
            ),
        );
    }

    #[test]
    fn estimate_covers_plain_text() {
        let datum = OracleData {
            signers: vec![
                Signer::PubKey("0xAB".into()),
                Signer::EthAddress("0xd8".into()),
            ],
            data: vec![prop("prices.BTC.value", "1000")],
            meta_data: vec![prop("eth-block-height", "17")],
            matched_spec_ids: vec![spec(SPEC_A); 3],
            broadcast_at: i64::MIN,
            error: Some("e".into()),
        };
        assert!(datum.to_vega_json().len() <= datum.estimated_json_len());
        assert!(empty().to_vega_json().len() <= empty().estimated_json_len());
    }
}
