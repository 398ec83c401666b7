//! Who asked: the connection's peer, and the client behind a trusted proxy.
//!
//! [`serve`](crate::serve) puts each connection's peer address in its requests' extensions as a
//! [`Peer`]. When that peer is a trusted proxy, the client is read from `X-Forwarded-For`: the
//! right-most address that is not itself a trusted proxy, since each proxy appends the address
//! it received the request from and everything to the left of the first untrusted hop may have
//! been written by the client. Nobody else's `X-Forwarded-For` is believed.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::str::FromStr;

use hyper::HeaderMap;
use hyper::header::HeaderName;

/// The peer address of the connection a request came on, in the request's extensions.
///
/// Requests without one (an embedder calling [`App::handle`](crate::App::handle) directly)
/// count as coming from [`Peer::LOCAL`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Peer(pub SocketAddr);

impl Peer {
    /// The address of requests that name no peer: they come from inside the process.
    pub const LOCAL: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);
}

static X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");

/// An address or a CIDR block, e.g. `127.0.0.1`, `10.0.0.0/8` or `::1`.
///
/// Hand-written rather than taken from `ipnet`: parsing and one masked comparison are all that
/// is needed, fewer lines than the dependency's review.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IpRange {
    base: IpAddr,
    prefix: u8,
}

impl IpRange {
    /// Whether `addr` lies in the range. An IPv4 address written as IPv6 (`::ffff:a.b.c.d`)
    /// counts as the IPv4 address.
    pub fn contains(&self, addr: IpAddr) -> bool {
        match (self.base, addr.to_canonical()) {
            (IpAddr::V4(base), IpAddr::V4(addr)) => {
                let mask = u32::MAX
                    .checked_shl(32 - u32::from(self.prefix))
                    .unwrap_or(0);
                u32::from(base) & mask == u32::from(addr) & mask
            }
            (IpAddr::V6(base), IpAddr::V6(addr)) => {
                let mask = u128::MAX
                    .checked_shl(128 - u32::from(self.prefix))
                    .unwrap_or(0);
                u128::from(base) & mask == u128::from(addr) & mask
            }
            _ => false,
        }
    }
}

/// Why an address range does not parse.
#[derive(Debug, thiserror::Error)]
#[error("invalid address or CIDR block {0:?} (e.g. 127.0.0.1, 10.0.0.0/8 or ::1)")]
pub struct InvalidRange(String);

impl FromStr for IpRange {
    type Err = InvalidRange;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let invalid = || InvalidRange(text.to_owned());
        let (addr, prefix) = match text.split_once('/') {
            Some((addr, prefix)) => (addr, Some(prefix)),
            None => (text, None),
        };
        let base = IpAddr::from_str(addr).map_err(|_| invalid())?;
        let max = if base.is_ipv4() { 32 } else { 128 };
        let prefix = match prefix {
            None => max,
            Some(prefix) => prefix
                .parse::<u8>()
                .ok()
                .filter(|prefix| *prefix <= max)
                .ok_or_else(invalid)?,
        };
        Ok(IpRange { base, prefix })
    }
}

impl fmt::Display for IpRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let max = if self.base.is_ipv4() { 32 } else { 128 };
        if self.prefix == max {
            write!(f, "{}", self.base)
        } else {
            write!(f, "{}/{}", self.base, self.prefix)
        }
    }
}

/// A list of address ranges, written comma-separated; the empty text is the empty list.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct IpRanges(pub Vec<IpRange>);

impl IpRanges {
    /// Whether any range of the list contains `addr`.
    pub fn contains(&self, addr: IpAddr) -> bool {
        self.0.iter().any(|range| range.contains(addr))
    }
}

impl FromStr for IpRanges {
    type Err = InvalidRange;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        text.split(',')
            .map(str::trim)
            .filter(|range| !range.is_empty())
            .map(IpRange::from_str)
            .collect::<Result<_, _>>()
            .map(IpRanges)
    }
}

impl fmt::Display for IpRanges {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (index, range) in self.0.iter().enumerate() {
            if index > 0 {
                f.write_str(",")?;
            }
            write!(f, "{range}")?;
        }
        Ok(())
    }
}

/// The client of a request that came from `peer`: the peer itself, or, when the peer is a
/// trusted proxy, the right-most untrusted address of `X-Forwarded-For` (every header of that
/// name, in order). A hop that is not an address (optionally with a port) ends the walk at the
/// last address known, since nothing to its left can be vouched for; a list of trusted
/// proxies only names the left-most of them.
pub(crate) fn client_addr(peer: IpAddr, headers: &HeaderMap, trusted: &IpRanges) -> IpAddr {
    let mut client = peer.to_canonical();
    if !trusted.contains(client) {
        return client;
    }
    let mut values = headers.get_all(&X_FORWARDED_FOR).iter().rev();
    for value in values.by_ref() {
        let Ok(value) = value.to_str() else {
            return client;
        };
        for hop in value.rsplit(',') {
            let Some(addr) = parse_hop(hop.trim()) else {
                return client;
            };
            client = addr;
            if !trusted.contains(addr) {
                return client;
            }
        }
    }
    client
}

/// A hop of `X-Forwarded-For`: an address, or an address and a port as some proxies write it.
fn parse_hop(hop: &str) -> Option<IpAddr> {
    let addr = IpAddr::from_str(hop)
        .ok()
        .or_else(|| SocketAddr::from_str(hop).ok().map(|addr| addr.ip()))?;
    Some(addr.to_canonical())
}

#[cfg(test)]
mod tests {
    use super::*;
    use hyper::header::HeaderValue;

    #[track_caller]
    fn check_range(range: &str, addr: &str, expected: bool) {
        let range: IpRange = range.parse().unwrap();
        assert_eq!(
            range.contains(addr.parse().unwrap()),
            expected,
            "{range} ∋ {addr}"
        );
    }

    #[test]
    fn ranges_match_by_prefix() {
        check_range("127.0.0.1", "127.0.0.1", true);
        check_range("127.0.0.1", "127.0.0.2", false);
        check_range("127.0.0.0/8", "127.255.0.9", true);
        check_range("127.0.0.0/8", "128.0.0.1", false);
        check_range("0.0.0.0/0", "203.0.113.9", true);
        check_range("0.0.0.0/0", "::1", false);
        check_range("::1", "::1", true);
        check_range("::/0", "2001:db8::1", true);
        check_range("2001:db8::/32", "2001:db8:ffff::1", true);
        check_range("2001:db8::/32", "2001:db9::1", false);
        check_range("127.0.0.1", "::ffff:127.0.0.1", true);
        check_range("::ffff:10.0.0.0/8", "10.1.2.3", false);
    }

    #[test]
    fn ranges_parse_and_print() {
        for bad in [
            "",
            "x",
            "127.0.0.1/33",
            "::1/129",
            "10.0.0.0/",
            "10.0.0.0/-1",
            "1.2.3.4:80",
        ] {
            assert!(bad.parse::<IpRange>().is_err(), "{bad}");
        }
        let list: IpRanges = " 127.0.0.0/8, ::1 ,,10.0.0.1/32".parse().unwrap();
        assert_eq!(list.to_string(), "127.0.0.0/8,::1,10.0.0.1");
        assert_eq!("".parse::<IpRanges>().unwrap(), IpRanges::default());
        let err = "127.0.0.1,nope".parse::<IpRanges>().unwrap_err();
        assert!(err.to_string().contains(r#""nope""#), "{err}");
    }

    #[track_caller]
    fn check_client(peer: &str, forwarded: &[&str], expected: &str) {
        let trusted: IpRanges = "127.0.0.1,10.0.0.0/8".parse().unwrap();
        let mut headers = HeaderMap::new();
        for value in forwarded {
            headers.append(&X_FORWARDED_FOR, HeaderValue::from_str(value).unwrap());
        }
        let client = client_addr(peer.parse().unwrap(), &headers, &trusted);
        assert_eq!(
            client,
            expected.parse::<IpAddr>().unwrap(),
            "{peer} {forwarded:?}"
        );
    }

    #[test]
    fn forwarded_addresses_are_believed_from_trusted_proxies_only() {
        // No proxy, or one nobody trusts: the peer.
        check_client("203.0.113.9", &[], "203.0.113.9");
        check_client("203.0.113.9", &["198.51.100.1"], "203.0.113.9");
        check_client("::ffff:203.0.113.9", &[], "203.0.113.9");
        // A trusted proxy without the header: the proxy itself.
        check_client("127.0.0.1", &[], "127.0.0.1");
        // The right-most untrusted hop, past every trusted one.
        check_client("127.0.0.1", &["198.51.100.1"], "198.51.100.1");
        check_client("127.0.0.1", &["6.6.6.6, 198.51.100.1"], "198.51.100.1");
        check_client(
            "127.0.0.1",
            &["6.6.6.6, 198.51.100.1, 10.1.1.1"],
            "198.51.100.1",
        );
        check_client(
            "127.0.0.1",
            &["6.6.6.6", "198.51.100.1, 10.1.1.1"],
            "198.51.100.1",
        );
        check_client("127.0.0.1", &["198.51.100.1:4711"], "198.51.100.1");
        check_client("127.0.0.1", &["[2001:db8::1]:443"], "2001:db8::1");
        check_client("127.0.0.1", &["2001:db8::1"], "2001:db8::1");
        // Only trusted hops: the left-most of them.
        check_client("127.0.0.1", &["10.0.0.7, 10.0.0.8"], "10.0.0.7");
        // Garbage stops the walk at the last known address.
        check_client("127.0.0.1", &["198.51.100.1, garbage"], "127.0.0.1");
        check_client(
            "127.0.0.1",
            &["198.51.100.1, garbage, 10.0.0.2"],
            "10.0.0.2",
        );
        check_client("127.0.0.1", &["garbage, 198.51.100.1"], "198.51.100.1");
        check_client("127.0.0.1", &[""], "127.0.0.1");
    }
}
