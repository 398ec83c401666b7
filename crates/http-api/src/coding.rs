//! Response compression: `Accept-Encoding` negotiation and a streaming encoder.
//!
//! The encoder is fed a body chunk by chunk and flushes after each one, so that every chunk's
//! output can be decoded up to that chunk's end: a streamed export loses nothing to buffering
//! (its CSV header still leaves at once) and back-pressure still works chunk by chunk. The
//! flush costs a few bytes per 256 KiB chunk.
//!
//! Levels favour speed: an export is produced at hundreds of megabytes per second and the
//! encoder must not become its bottleneck (see docs/PERFORMANCE.md).

use std::io::{self, Write};

use hyper::HeaderMap;
use hyper::header::ACCEPT_ENCODING;

use crate::accept::weighted_items;

/// gzip level: zlib-rs at level 3 keeps most of level 6's ratio on CSV at twice the speed.
const GZIP_LEVEL: u32 = 3;
/// zstd's own default level.
const ZSTD_LEVEL: i32 = 3;
/// brotli quality 4: the last level before brotli's slow context modelling.
const BROTLI_QUALITY: u32 = 4;
/// brotli window: 4 MiB (2^22), ample for CSV rows that repeat ids.
const BROTLI_WINDOW_BITS: u32 = 22;

/// A content coding the server can apply to a response body.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Coding {
    /// No compression.
    Identity,
    /// `gzip` (RFC 1952).
    Gzip,
    /// `zstd` (RFC 8878).
    Zstd,
    /// `br` (RFC 7932).
    Brotli,
}

impl Coding {
    /// The codings the server offers, in its order of preference for equal client weights:
    /// zstd compresses best for its speed, gzip is understood everywhere.
    const OFFERED: [Coding; 3] = [Coding::Zstd, Coding::Brotli, Coding::Gzip];

    /// The coding to answer with: the offered one with the client's highest `q` above zero
    /// (ties go to the server's preference), else identity.
    pub(crate) fn negotiate(headers: &HeaderMap) -> Coding {
        let items = weighted_items(headers, ACCEPT_ENCODING);
        let weight = |name: &str| {
            let exact = items
                .iter()
                .find(|(item, _)| item.eq_ignore_ascii_case(name));
            let any = items.iter().find(|(item, _)| *item == "*");
            exact.or(any).map_or(0.0, |(_, q)| *q)
        };
        let mut best = (Coding::Identity, 0.0);
        for coding in Self::OFFERED {
            let q = weight(coding.token().expect("offered codings have a token"));
            if q > best.1 {
                best = (coding, q);
            }
        }
        best.0
    }

    /// The `Content-Encoding` token; `None` for identity, which is not announced.
    pub(crate) fn token(self) -> Option<&'static str> {
        match self {
            Coding::Identity => None,
            Coding::Gzip => Some("gzip"),
            Coding::Zstd => Some("zstd"),
            Coding::Brotli => Some("br"),
        }
    }
}

/// Compresses a body chunk by chunk.
pub(crate) enum Encoder {
    /// Passes chunks through.
    Identity,
    /// gzip.
    Gzip(flate2::write::GzEncoder<Vec<u8>>),
    /// zstd.
    Zstd(zstd::stream::write::Encoder<'static, Vec<u8>>),
    /// brotli (boxed: its state is large).
    Brotli(Box<brotli::CompressorWriter<Vec<u8>>>),
}

impl Encoder {
    /// An encoder for `coding`.
    pub(crate) fn new(coding: Coding) -> io::Result<Encoder> {
        Ok(match coding {
            Coding::Identity => Encoder::Identity,
            Coding::Gzip => Encoder::Gzip(flate2::write::GzEncoder::new(
                Vec::new(),
                flate2::Compression::new(GZIP_LEVEL),
            )),
            Coding::Zstd => {
                Encoder::Zstd(zstd::stream::write::Encoder::new(Vec::new(), ZSTD_LEVEL)?)
            }
            Coding::Brotli => Encoder::Brotli(Box::new(brotli::CompressorWriter::new(
                Vec::new(),
                64 * 1024,
                BROTLI_QUALITY,
                BROTLI_WINDOW_BITS,
            ))),
        })
    }

    /// Compresses `input` and returns everything the stream holds so far, flushed so that it
    /// decodes up to the end of `input`.
    pub(crate) fn chunk(&mut self, input: Vec<u8>) -> io::Result<Vec<u8>> {
        match self {
            Encoder::Identity => Ok(input),
            Encoder::Gzip(encoder) => drain(encoder, &input, |e| e.get_mut()),
            Encoder::Zstd(encoder) => drain(encoder, &input, |e| e.get_mut()),
            Encoder::Brotli(encoder) => drain(encoder.as_mut(), &input, |e| e.get_mut()),
        }
    }

    /// Ends the stream and returns its last bytes (the coding's trailer).
    pub(crate) fn finish(self) -> io::Result<Vec<u8>> {
        match self {
            Encoder::Identity => Ok(Vec::new()),
            Encoder::Gzip(encoder) => encoder.finish(),
            Encoder::Zstd(encoder) => encoder.finish(),
            Encoder::Brotli(encoder) => {
                // Dropping the writer would finish it too, but silently: into_inner does it
                // and hands the bytes back.
                Ok(encoder.into_inner())
            }
        }
    }

    /// Compresses a whole body at once.
    pub(crate) fn whole(coding: Coding, body: &[u8]) -> io::Result<Vec<u8>> {
        let mut encoder = Encoder::new(coding)?;
        // No flush: the output stays in the encoder's `Vec` until `finish` hands it over whole.
        match &mut encoder {
            Encoder::Identity => return Ok(body.to_vec()),
            Encoder::Gzip(inner) => inner.write_all(body)?,
            Encoder::Zstd(inner) => inner.write_all(body)?,
            Encoder::Brotli(inner) => inner.write_all(body)?,
        }
        encoder.finish()
    }
}

/// Writes `input` into `encoder`, flushes it, and takes what it wrote to its `Vec`.
fn drain<W: Write>(
    encoder: &mut W,
    input: &[u8],
    sink: impl Fn(&mut W) -> &mut Vec<u8>,
) -> io::Result<Vec<u8>> {
    encoder.write_all(input)?;
    encoder.flush()?;
    Ok(std::mem::take(sink(encoder)))
}

#[cfg(test)]
mod tests {
    use hyper::header::HeaderValue;

    use super::*;

    #[track_caller]
    fn check(accept_encoding: Option<&str>, expected: Coding) {
        let mut headers = HeaderMap::new();
        if let Some(value) = accept_encoding {
            headers.insert(ACCEPT_ENCODING, HeaderValue::from_str(value).unwrap());
        }
        assert_eq!(
            Coding::negotiate(&headers),
            expected,
            "Accept-Encoding: {accept_encoding:?}"
        );
    }

    #[test]
    fn negotiates_the_coding() {
        use Coding::*;
        check(None, Identity);
        check(Some(""), Identity);
        check(Some("identity"), Identity);
        check(Some("gzip"), Gzip);
        check(Some("GZIP"), Gzip);
        check(Some("deflate, gzip;q=1.0, *;q=0.5"), Gzip);
        check(Some("gzip, deflate, br, zstd"), Zstd);
        check(Some("gzip, deflate, br"), Brotli);
        check(Some("br;q=0.5, gzip"), Gzip);
        check(Some("zstd;q=0, gzip;q=0.1"), Gzip);
        check(Some("*"), Zstd);
        check(Some("*;q=0.3, zstd;q=0"), Brotli);
        check(Some("gzip;q=0"), Identity);
        check(Some("gzip;q=2"), Identity);
        check(Some("gzip;q=x"), Identity);
        check(Some("compress, deflate"), Identity);
    }

    /// A decoder fed the stream piece by piece, as a client reads it.
    enum Decoder {
        Identity(Vec<u8>),
        Gzip(Box<flate2::write::GzDecoder<Vec<u8>>>),
        Zstd(zstd::stream::write::Decoder<'static, Vec<u8>>),
        Brotli(Box<brotli::DecompressorWriter<Vec<u8>>>),
    }

    impl Decoder {
        fn new(coding: Coding) -> Self {
            match coding {
                Coding::Identity => Decoder::Identity(Vec::new()),
                Coding::Gzip => Decoder::Gzip(Box::new(flate2::write::GzDecoder::new(Vec::new()))),
                Coding::Zstd => {
                    Decoder::Zstd(zstd::stream::write::Decoder::new(Vec::new()).unwrap())
                }
                Coding::Brotli => {
                    Decoder::Brotli(Box::new(brotli::DecompressorWriter::new(Vec::new(), 4096)))
                }
            }
        }

        /// Feeds `bytes` and returns everything decoded so far.
        fn feed(&mut self, bytes: &[u8]) -> &[u8] {
            match self {
                Decoder::Identity(out) => {
                    out.extend_from_slice(bytes);
                    out
                }
                Decoder::Gzip(decoder) => {
                    decoder.write_all(bytes).unwrap();
                    decoder.flush().unwrap();
                    decoder.get_ref()
                }
                Decoder::Zstd(decoder) => {
                    decoder.write_all(bytes).unwrap();
                    decoder.flush().unwrap();
                    decoder.get_ref()
                }
                Decoder::Brotli(decoder) => {
                    decoder.write_all(bytes).unwrap();
                    decoder.flush().unwrap();
                    decoder.get_ref()
                }
            }
        }
    }

    #[test]
    fn every_chunk_decodes_as_soon_as_it_is_sent() {
        let chunks: Vec<Vec<u8>> = (0..5)
            .map(|n| format!("row {n},{}\n", "x".repeat(n * 1000)).into_bytes())
            .collect();
        for coding in [Coding::Identity, Coding::Gzip, Coding::Zstd, Coding::Brotli] {
            let mut encoder = Encoder::new(coding).unwrap();
            let mut decoder = Decoder::new(coding);
            let mut plain = Vec::new();
            for chunk in &chunks {
                let out = encoder.chunk(chunk.clone()).unwrap();
                plain.extend_from_slice(chunk);
                assert_eq!(decoder.feed(&out), plain, "{coding:?} held data back");
            }
            let trailer = encoder.finish().unwrap();
            assert_eq!(decoder.feed(&trailer), plain, "{coding:?}");
            if coding != Coding::Identity {
                let whole = Encoder::whole(coding, &plain).unwrap();
                assert!(
                    whole.len() < plain.len() / 4,
                    "{coding:?} barely compresses"
                );
                assert_eq!(Decoder::new(coding).feed(&whole), plain, "{coding:?}");
            }
        }
    }
}
