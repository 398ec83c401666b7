//! The connection header both sides exchange before any message.

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use crate::{HEADER_BYTES, PAIR_V0};

/// Why the exchange of connection headers failed; the connection is closed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HandshakeError {
    /// Reading or writing the header failed, or the peer sent it too late.
    #[error("exchanging the connection header failed")]
    Io(#[source] io::Error),
    /// The peer closed the connection before sending a whole header.
    #[error("the peer closed the connection after {received} of the 8 header bytes")]
    Closed {
        /// Header bytes received before the end of the stream.
        received: usize,
    },
    /// The peer's first bytes are not a scalability-protocols header.
    #[error("the peer sent {header:02x?}, not a scalability-protocols header")]
    NotSp {
        /// The 8 bytes received.
        header: [u8; HEADER_BYTES],
    },
    /// The peer speaks another SP protocol (pair v1 is 17, for instance).
    #[error("the peer speaks SP protocol {protocol}, not pair v0 ({PAIR_V0})")]
    WrongProtocol {
        /// The protocol number in the peer's header.
        protocol: u16,
    },
}

/// Our header: `\0SP\0`, the protocol number, two reserved zero bytes.
fn header() -> [u8; HEADER_BYTES] {
    let [high, low] = PAIR_V0.to_be_bytes();
    [0, b'S', b'P', 0, high, low, 0, 0]
}

/// Sends our header, then reads and checks the peer's within `timeout`.
///
/// On success the stream's read timeout is left unset (blocking), as a fresh stream's is.
pub(crate) fn exchange(stream: &mut TcpStream, timeout: Duration) -> Result<(), HandshakeError> {
    stream
        .set_read_timeout(Some(timeout))
        .map_err(HandshakeError::Io)?;
    stream
        .set_write_timeout(Some(timeout))
        .map_err(HandshakeError::Io)?;
    stream.write_all(&header()).map_err(HandshakeError::Io)?;
    let mut received = [0; HEADER_BYTES];
    let mut filled = 0;
    while filled < HEADER_BYTES {
        match stream.read(&mut received[filled..]) {
            Ok(0) => return Err(HandshakeError::Closed { received: filled }),
            Ok(n) => filled += n,
            Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
            Err(error) => return Err(HandshakeError::Io(error)),
        }
    }
    check(received)?;
    stream.set_read_timeout(None).map_err(HandshakeError::Io)?;
    stream.set_write_timeout(None).map_err(HandshakeError::Io)?;
    Ok(())
}

/// Accepts exactly what nng accepts: the SP magic, zero reserved bytes, protocol pair v0.
fn check(received: [u8; HEADER_BYTES]) -> Result<(), HandshakeError> {
    let [zero, s, p, zero_again, high, low, reserved_a, reserved_b] = received;
    if [zero, s, p, zero_again, reserved_a, reserved_b] != [0, b'S', b'P', 0, 0, 0] {
        return Err(HandshakeError::NotSp { header: received });
    }
    match u16::from_be_bytes([high, low]) {
        PAIR_V0 => Ok(()),
        protocol => Err(HandshakeError::WrongProtocol { protocol }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[track_caller]
    fn check_header(received: [u8; 8], expected: &str) {
        let outcome = match check(received) {
            Ok(()) => "ok".to_owned(),
            Err(error) => error.to_string(),
        };
        assert_eq!(outcome, expected);
    }

    #[test]
    fn headers() {
        check_header(header(), "ok");
        check_header([0, 0x53, 0x50, 0, 0, 0x10, 0, 0], "ok");
        check_header(
            [0, b'S', b'P', 0, 0, 0x11, 0, 0],
            "the peer speaks SP protocol 17, not pair v0 (16)",
        );
        check_header(
            [0, b'S', b'P', 0, 0, 0x30, 0, 0],
            "the peer speaks SP protocol 48, not pair v0 (16)",
        );
        check_header(
            *b"GET / HT",
            "the peer sent [47, 45, 54, 20, 2f, 20, 48, 54], not a scalability-protocols header",
        );
        check_header(
            [0, b'S', b'P', 0, 0, 0x10, 0, 1],
            "the peer sent [00, 53, 50, 00, 00, 10, 00, 01], not a scalability-protocols header",
        );
    }
}
