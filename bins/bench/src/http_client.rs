//! A minimal HTTP/1.1 client over `TcpStream`: GET only, keep-alive, `Content-Length` and
//! chunked bodies.
//!
//! Hand-written rather than hyper's client so that the client's share of the two cores is
//! as small as it can be: the body is never copied out of the read buffer, only shown to a
//! callback that counts what it needs.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

/// Read buffer of the fast clients.
pub(crate) const FAST_BUFFER: usize = 256 * 1024;

/// Header lines accepted in a response; more means something is wrong.
const MAX_HEADERS: usize = 100;

/// Which representation to ask for.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Accept {
    Csv,
    Json,
}

/// One keep-alive connection.
pub(crate) struct Connection {
    reader: BufReader<TcpStream>,
    host: String,
    line: Vec<u8>,
}

/// Status line and the headers that frame the body.
#[derive(Debug)]
pub(crate) struct Head {
    pub(crate) status: u16,
    /// The `Content-Type` header, as sent.
    pub(crate) content_type: Option<String>,
    content_length: Option<u64>,
    chunked: bool,
}

impl Connection {
    /// Connects with a read buffer of `buffer` bytes.
    pub(crate) async fn connect(addr: SocketAddr, buffer: usize) -> Result<Self> {
        let stream = TcpStream::connect(addr)
            .await
            .with_context(|| format!("cannot connect to {addr}"))?;
        stream.set_nodelay(true).context("cannot set TCP_NODELAY")?;
        Ok(Self {
            reader: BufReader::with_capacity(buffer, stream),
            host: addr.to_string(),
            line: Vec::with_capacity(256),
        })
    }

    /// Writes a GET request for `path` (with its query, already URL-safe).
    pub(crate) async fn send(&mut self, path: &str, accept: Accept) -> Result<()> {
        self.write_request(path, accept, "").await
    }

    /// Writes a GET request asking the server to close the connection after the response,
    /// so that a reader of raw bytes sees the end of the body as the end of the stream.
    pub(crate) async fn send_last(&mut self, path: &str, accept: Accept) -> Result<()> {
        self.write_request(path, accept, "Connection: close\r\n")
            .await
    }

    async fn write_request(&mut self, path: &str, accept: Accept, extra: &str) -> Result<()> {
        let accept = match accept {
            Accept::Csv => "text/csv",
            Accept::Json => "application/json",
        };
        let request = format!(
            "GET {path} HTTP/1.1\r\nHost: {}\r\nAccept: {accept}\r\n{extra}\r\n",
            self.host
        );
        self.reader
            .get_mut()
            .write_all(request.as_bytes())
            .await
            .context("cannot send the request")
    }

    /// Reads the status line and headers.
    pub(crate) async fn read_head(&mut self) -> Result<Head> {
        self.read_line().await?;
        let status = std::str::from_utf8(&self.line)
            .ok()
            .and_then(|line| line.split_whitespace().nth(1)?.parse().ok())
            .with_context(|| {
                format!("bad status line {:?}", String::from_utf8_lossy(&self.line))
            })?;
        let mut head = Head {
            status,
            content_type: None,
            content_length: None,
            chunked: false,
        };
        for _ in 0..MAX_HEADERS {
            self.read_line().await?;
            let line = String::from_utf8_lossy(&self.line);
            let line = line.trim_end();
            if line.is_empty() {
                return Ok(head);
            }
            let Some((name, value)) = line.split_once(':') else {
                bail!("bad header line {line:?}");
            };
            let value = value.trim();
            if name.eq_ignore_ascii_case("content-length") {
                head.content_length = Some(value.parse().context("bad content-length")?);
            } else if name.eq_ignore_ascii_case("content-type") {
                head.content_type = Some(value.to_owned());
            } else if name.eq_ignore_ascii_case("transfer-encoding") {
                head.chunked = value.to_ascii_lowercase().contains("chunked");
            }
        }
        bail!("more than {MAX_HEADERS} header lines")
    }

    /// Reads the body that `head` announces, showing each piece to `on_data` as it arrives.
    pub(crate) async fn read_body(
        &mut self,
        head: &Head,
        mut on_data: impl FnMut(&[u8]),
    ) -> Result<()> {
        if head.chunked {
            loop {
                self.read_line().await?;
                let size = chunk_size(&self.line)?;
                if size == 0 {
                    // Trailers, if any, end with an empty line.
                    loop {
                        self.read_line().await?;
                        if self.line.trim_ascii().is_empty() {
                            return Ok(());
                        }
                    }
                }
                self.read_exactly(size, &mut on_data).await?;
                self.read_line().await?;
                if !self.line.trim_ascii().is_empty() {
                    bail!("chunk not followed by CRLF");
                }
            }
        }
        match head.content_length {
            Some(length) => self.read_exactly(length, &mut on_data).await,
            None => {
                // Delimited by the end of the connection.
                loop {
                    let data = self.reader.fill_buf().await.context("cannot read")?;
                    if data.is_empty() {
                        return Ok(());
                    }
                    on_data(data);
                    let n = data.len();
                    self.reader.consume(n);
                }
            }
        }
    }

    /// Sends a GET and reads the whole response into `body`; returns the status.
    pub(crate) async fn get(
        &mut self,
        path: &str,
        accept: Accept,
        body: &mut Vec<u8>,
    ) -> Result<u16> {
        self.send(path, accept).await?;
        let head = self.read_head().await?;
        body.clear();
        self.read_body(&head, |data| body.extend_from_slice(data))
            .await?;
        Ok(head.status)
    }

    /// Reads raw bytes (framing included) into `buf`: for the slow reader, which only paces.
    pub(crate) async fn read_raw(&mut self, buf: &mut [u8]) -> Result<usize> {
        self.reader.read(buf).await.context("cannot read")
    }

    async fn read_exactly(&mut self, mut left: u64, on_data: &mut impl FnMut(&[u8])) -> Result<()> {
        while left > 0 {
            let data = self.reader.fill_buf().await.context("cannot read")?;
            if data.is_empty() {
                bail!("connection closed with {left} bytes of the body to come");
            }
            let n = data.len().min(usize::try_from(left).unwrap_or(usize::MAX));
            on_data(&data[..n]);
            self.reader.consume(n);
            left -= n as u64;
        }
        Ok(())
    }

    async fn read_line(&mut self) -> Result<()> {
        self.line.clear();
        let n = self
            .reader
            .read_until(b'\n', &mut self.line)
            .await
            .context("cannot read")?;
        if n == 0 {
            bail!("connection closed by the server");
        }
        Ok(())
    }
}

/// The size on a chunk's first line: hex digits, then maybe extensions after `;`.
fn chunk_size(line: &[u8]) -> Result<u64> {
    let text = String::from_utf8_lossy(line);
    let digits = text.split(';').next().unwrap_or_default().trim();
    u64::from_str_radix(digits, 16).with_context(|| format!("bad chunk size line {text:?}"))
}

/// Waits until the oracle listing answers 200, retrying for up to `timeout`.
pub(crate) async fn wait_until_ready(addr: SocketAddr, timeout: Duration) -> Result<()> {
    let deadline = Instant::now() + timeout;
    let mut body = Vec::new();
    loop {
        let attempt = async {
            let mut connection = Connection::connect(addr, 64 * 1024).await?;
            connection
                .get(
                    "/api/v2/oracle/data?pagination.first=1",
                    Accept::Json,
                    &mut body,
                )
                .await
        };
        let outcome = attempt.await;
        match outcome {
            Ok(200) => return Ok(()),
            _ if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Ok(status) => bail!("the server answers {status} to the oracle listing"),
            Err(err) => return Err(err.context("the server does not answer")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunk_sizes_are_hex_with_optional_extensions() {
        assert_eq!(chunk_size(b"10000\r\n").unwrap(), 0x10000);
        assert_eq!(chunk_size(b"a;name=value\r\n").unwrap(), 10);
        assert_eq!(chunk_size(b"0\r\n").unwrap(), 0);
        assert!(chunk_size(b"zz\r\n").is_err());
    }
}
