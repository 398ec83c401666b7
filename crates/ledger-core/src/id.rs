//! The 32-byte ids of parties, assets, markets and oracle specs, and account owners.

use std::fmt;
use std::str::FromStr;

use crate::Error;
use crate::hex::{self, Hex};

/// Declares one id newtype; the four ids differ only in name and error wording.
macro_rules! id_type {
    ($(#[$doc:meta])* $name:ident, $kind:literal) => {
        $(#[$doc])*
        ///
        /// Parsed from exactly 64 hex digits in either case and displayed as lowercase hex.
        /// Ordering is by bytes, which is also the order of the lowercase hex text.
        #[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub struct $name([u8; 32]);

        impl $name {
            /// Wraps raw id bytes.
            pub const fn from_bytes(bytes: [u8; 32]) -> Self {
                Self(bytes)
            }

            /// The raw id bytes.
            pub fn as_bytes(&self) -> &[u8; 32] {
                &self.0
            }

            /// The 64 lowercase hex digits, on the stack.
            pub fn hex(&self) -> Hex {
                hex::encode(&self.0)
            }
        }

        impl FromStr for $name {
            type Err = Error;

            fn from_str(text: &str) -> Result<Self, Error> {
                hex::decode(text).map(Self).ok_or_else(|| Error::InvalidId {
                    kind: $kind,
                    value: text.to_owned(),
                })
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.pad(self.hex().as_str())
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, concat!(stringify!($name), "({})"), self.hex().as_str())
            }
        }
    };
}

id_type!(
    /// A party: the public key of a Vega user.
    PartyId,
    "party"
);
id_type!(
    /// An asset.
    AssetId,
    "asset"
);
id_type!(
    /// A market.
    MarketId,
    "market"
);
id_type!(
    /// An oracle (data source) spec.
    OracleSpecId,
    "oracle spec"
);

/// The owner of an account: a party, or the network itself.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum Owner {
    /// The network (insurance pools, settlement, external and other system accounts).
    Network,
    /// A party.
    Party(PartyId),
}

impl Owner {
    /// Parses an owner as Vega writes it.
    ///
    /// No owner, `""`, `"network"` (the data node's spelling) and `"*"` (the core's
    /// `systemOwner`) are the network; anything else must be a party id.
    pub fn parse(owner: Option<&str>) -> Result<Owner, Error> {
        match owner {
            None | Some("" | "network" | "*") => Ok(Owner::Network),
            Some(party) => party.parse().map(Owner::Party),
        }
    }

    /// The party, or `None` for the network.
    pub fn party(&self) -> Option<PartyId> {
        match self {
            Owner::Network => None,
            Owner::Party(party) => Some(*party),
        }
    }
}

impl fmt::Display for Owner {
    /// `network`, or the party id in lowercase hex.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Owner::Network => f.pad("network"),
            Owner::Party(party) => fmt::Display::fmt(party, f),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LOWER: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
    const UPPER: &str = "0123456789ABCDEF0123456789ABCDEF0123456789ABCDEF0123456789ABCDEF";
    const MIXED: &str = "0123456789aBcDeF0123456789AbCdEf0123456789abcdef0123456789ABCDEF";

    /// Parses `input` as every id type; `Ok` holds the expected display text.
    #[track_caller]
    fn check(input: &str, expected: Result<&str, ()>) {
        fn parse<T: FromStr<Err = Error> + fmt::Display>(
            input: &str,
            kind: &str,
        ) -> Result<String, Error> {
            let parsed = input.parse::<T>().map(|id| id.to_string());
            if let Err(Error::InvalidId { kind: got, value }) = &parsed {
                assert_eq!((*got, value.as_str()), (kind, input));
            }
            parsed
        }
        let results = [
            parse::<PartyId>(input, "party"),
            parse::<AssetId>(input, "asset"),
            parse::<MarketId>(input, "market"),
            parse::<OracleSpecId>(input, "oracle spec"),
        ];
        for result in results {
            assert_eq!(
                result.as_deref().map_err(|_| ()),
                expected,
                "input {input:?}"
            );
        }
    }

    #[test]
    fn ids_parse_64_hex_digits_in_any_case() {
        check(LOWER, Ok(LOWER));
        check(UPPER, Ok(LOWER));
        check(MIXED, Ok(LOWER));
        check(&"0".repeat(64), Ok(&"0".repeat(64)));
        check(&"f".repeat(64), Ok(&"f".repeat(64)));
        check(&LOWER[..63], Err(()));
        check(&format!("{LOWER}0"), Err(()));
        check("", Err(()));
        check(&format!("{}g", &LOWER[..63]), Err(()));
        check(&format!("0x{}", &LOWER[..62]), Err(()));
        check(&format!(" {}", &LOWER[..63]), Err(()));
        check(&format!("{}é", &LOWER[..62]), Err(()));
        check(&format!("{}é", &LOWER[..61]), Err(()));
        check(&"٣".repeat(32), Err(()));
    }

    #[test]
    fn id_error_message_names_the_kind() {
        let error = "xyz".parse::<OracleSpecId>().unwrap_err();
        assert_eq!(error.to_string(), r#"invalid oracle spec id: "xyz""#);
    }

    #[test]
    fn id_bytes_hex_and_debug() {
        let mut bytes = [0u8; 32];
        bytes[0] = 0xab;
        bytes[31] = 0x01;
        let id = MarketId::from_bytes(bytes);
        assert_eq!(id.as_bytes(), &bytes);
        let hex = format!("ab{}01", "0".repeat(60));
        assert_eq!(id.hex().as_str(), hex);
        assert_eq!(format!("{id:?}"), format!("MarketId({hex})"));
        assert!(MarketId::from_bytes([0; 32]) < id);
    }

    #[track_caller]
    fn check_owner(input: Option<&str>, expected: Result<Owner, ()>) {
        assert_eq!(Owner::parse(input).map_err(|_| ()), expected);
    }

    #[test]
    fn owners_parse_network_spellings_and_party_ids() {
        let party = Owner::Party(LOWER.parse().unwrap());
        check_owner(None, Ok(Owner::Network));
        check_owner(Some(""), Ok(Owner::Network));
        check_owner(Some("network"), Ok(Owner::Network));
        check_owner(Some("*"), Ok(Owner::Network));
        check_owner(Some(LOWER), Ok(party));
        check_owner(Some(UPPER), Ok(party));
        check_owner(Some("NETWORK"), Err(()));
        check_owner(Some(" network"), Err(()));
        check_owner(Some(&LOWER[1..]), Err(()));
    }

    #[test]
    fn owner_display_and_party() {
        let party: PartyId = UPPER.parse().unwrap();
        assert_eq!(Owner::Network.to_string(), "network");
        assert_eq!(Owner::Party(party).to_string(), LOWER);
        assert_eq!(Owner::Network.party(), None);
        assert_eq!(Owner::Party(party).party(), Some(party));
        let error = Owner::parse(Some("nobody")).unwrap_err();
        assert_eq!(error.to_string(), r#"invalid party id: "nobody""#);
    }
}
