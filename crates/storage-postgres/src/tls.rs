//! TLS for PostgreSQL connections, as libpq's `sslmode` and `sslrootcert` ask.
//!
//! tokio-postgres parses `sslmode=disable|prefer|require` and refuses `verify-ca`,
//! `verify-full` and `sslrootcert`, so [`Tls::from_url`] takes those out of the URL and turns
//! them into the rustls configuration that checks the server: the URL it gives back asks
//! tokio-postgres for `require` (TLS or no connection) and the verifier does the checking.
//!
//! | `sslmode` | encrypted | chain checked against `sslrootcert` | host name checked |
//! | --- | --- | --- | --- |
//! | `disable` | no | no | no |
//! | `prefer` (the default) | if the server offers it; to a loopback host only if it refuses plain text | no | no |
//! | `require` | yes | only when `sslrootcert` is given (libpq's compatibility rule) | no |
//! | `verify-ca` | yes | yes | no |
//! | `verify-full` | yes | yes | yes |
//!
//! As libpq, `verify-ca` and `verify-full` read `~/.postgresql/root.crt` when `sslrootcert` is
//! not given. Host names are checked against the certificate's subject alternative names
//! (rustls and webpki do not fall back to the common name, which libpq still does).
//! See: <https://www.postgresql.org/docs/current/libpq-ssl.html>
//!
//! `prefer` to a loopback host ([`plain_first`]) connects in plain text first, and with TLS
//! only when the server refuses that (libpq's `allow`): `prefer` never protected from an
//! attacker in the path, who can refuse TLS and get plain text, and on loopback nobody but the
//! host's root, who can read both processes' memory, sees the bytes. What it saves is the
//! encryption at both ends of every answer the database sends, a sixth of an export's CPU.

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use postgres::Config;
use postgres::config::{Host, SslMode as PgSslMode};

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::{WebPkiServerVerifier, verify_server_cert_signed_by_trust_anchor};
use rustls::crypto::{CryptoProvider, verify_tls12_signature, verify_tls13_signature};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::server::ParsedCertificate;
use rustls::{DigitallySignedStruct, RootCertStore, SignatureScheme};
use tokio_postgres_rustls::MakeRustlsConnect;

use storage::redact;
use storage::{Error, Incompatible};

/// libpq's `sslmode` values this client supports (`allow`, plain text first, is not one).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum SslMode {
    Disable,
    Prefer,
    Require,
    VerifyCa,
    VerifyFull,
}

impl SslMode {
    fn parse(value: &str) -> Option<Self> {
        Some(match value {
            "disable" => Self::Disable,
            "prefer" => Self::Prefer,
            "require" => Self::Require,
            "verify-ca" => Self::VerifyCa,
            "verify-full" => Self::VerifyFull,
            _ => return None,
        })
    }

    /// The mode tokio-postgres is told: the verifying modes are `require` to it.
    fn for_tokio_postgres(self) -> &'static str {
        match self {
            Self::Disable => "disable",
            Self::Prefer => "prefer",
            Self::Require | Self::VerifyCa | Self::VerifyFull => "require",
        }
    }
}

/// What a connection checks of the server's certificate.
#[derive(Debug, PartialEq, Eq)]
enum Check {
    /// Nothing but the handshake's signatures: libpq's `prefer` and `require`.
    Nothing,
    /// That it chains to a certificate in the file: `verify-ca`.
    Chain(PathBuf),
    /// That it chains to a certificate in the file and names the host: `verify-full`.
    ChainAndName(PathBuf),
}

/// A PostgreSQL URL split into what tokio-postgres parses and the TLS it connects with.
pub(crate) struct Tls {
    /// The URL without `sslrootcert`, its `sslmode` one that tokio-postgres knows.
    pub(crate) url: String,
    /// Makes each connection's TLS session, checking the server as `sslmode` asks.
    pub(crate) connector: MakeRustlsConnect,
}

impl Tls {
    /// Reads `sslmode` and `sslrootcert` from `url` and loads the certificates they name.
    /// An unknown `sslmode`, and a root certificate file that is missing, unreadable or holds
    /// no certificate, are [`Error::Incompatible`] naming the value or the file.
    pub(crate) fn from_url(url: &str) -> Result<Self, Error> {
        let (url, check) = split(url)?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let verifier: Arc<dyn ServerCertVerifier> = match check {
            Check::Nothing => Arc::new(NameUnchecked {
                roots: None,
                provider: Arc::clone(&provider),
            }),
            Check::Chain(file) => Arc::new(NameUnchecked {
                roots: Some(Arc::new(roots(&file)?)),
                provider: Arc::clone(&provider),
            }),
            Check::ChainAndName(file) => WebPkiServerVerifier::builder_with_provider(
                Arc::new(roots(&file)?),
                Arc::clone(&provider),
            )
            .build()
            .map_err(|err| Error::Internal(Box::new(err)))?,
        };
        let config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|err| Error::Internal(Box::new(err)))?
            .dangerous()
            .with_custom_certificate_verifier(verifier)
            .with_no_client_auth();
        Ok(Self {
            url,
            connector: MakeRustlsConnect::new(config),
        })
    }
}

/// Whether connections made with `config` try plain text first: `sslmode=prefer` (the default)
/// to hosts that are all on this machine: each a loopback address (`127.0.0.0/8`, `::1`), the
/// name `localhost` or a Unix socket (where PostgreSQL offers no TLS anyway), or given a
/// loopback `hostaddr`, which is where libpq connects whatever the name. A `hostaddr` without a
/// host name counts by its address alone.
pub(crate) fn plain_first(config: &Config) -> bool {
    let hosts = config.get_hosts();
    let hostaddrs = config.get_hostaddrs();
    let local = |at: usize| match (hostaddrs.get(at), hosts.get(at)) {
        (Some(addr), _) => addr.is_loopback(),
        (None, Some(Host::Tcp(name))) => {
            name.eq_ignore_ascii_case("localhost")
                || name
                    .trim_start_matches('[')
                    .trim_end_matches(']')
                    .parse::<IpAddr>()
                    .is_ok_and(|addr| addr.is_loopback())
        }
        (None, Some(Host::Unix(_))) => true,
        (None, None) => false,
    };
    let count = hosts.len().max(hostaddrs.len());
    config.get_ssl_mode() == PgSslMode::Prefer && count > 0 && (0..count).all(local)
}

/// Whether a plain-text connection's `err` is the server refusing it, as a `pg_hba.conf` that
/// holds only `hostssl` lines for the client does: a refusal of its authorization (SQLSTATE
/// class 28), which a connection with TLS may pass.
pub(crate) fn refused_plain_text(err: &postgres::Error) -> bool {
    err.as_db_error()
        .is_some_and(|db| db.code().code().starts_with("28"))
}

/// `url` without the TLS parameters tokio-postgres refuses, and what they ask to check.
/// Parameters may repeat; the last one counts, as in tokio-postgres and libpq.
fn split(url: &str) -> Result<(String, Check), Error> {
    let invalid = |setting: String| {
        Error::from(Incompatible::TlsSetting {
            setting,
            url: redact(url),
        })
    };
    let Some((base, query)) = url.split_once('?') else {
        return Ok((url.to_owned(), Check::Nothing));
    };
    let mut kept = Vec::new();
    let mut mode = None;
    let mut rootcert = None;
    for param in query.split('&') {
        let (key, value) = param.split_once('=').unwrap_or((param, ""));
        let decoded = || {
            percent_encoding::percent_decode_str(value)
                .decode_utf8()
                .map(|value| value.into_owned())
                .map_err(|_| invalid(format!("{key} is not UTF-8 once percent-decoded")))
        };
        match key {
            "sslmode" => {
                let value = decoded()?;
                mode = Some(SslMode::parse(&value).ok_or_else(|| {
                    invalid(format!(
                        "invalid sslmode {value:?} (expected disable, prefer, require, \
                         verify-ca or verify-full)"
                    ))
                })?);
            }
            "sslrootcert" => rootcert = Some(PathBuf::from(decoded()?)),
            _ => kept.push(param),
        }
    }
    if rootcert.as_deref() == Some(Path::new("system")) {
        return Err(invalid(
            "sslrootcert=system (the system's trusted roots) is not supported: name a file of \
             CA certificates"
                .to_owned(),
        ));
    }
    let check = match mode {
        None | Some(SslMode::Disable | SslMode::Prefer) => Check::Nothing,
        // libpq: "if a root CA file exists, the behavior of sslmode=require will be the same
        // as that of verify-ca"; here only a file the URL names counts, so that a `require`
        // URL never changes meaning with the contents of a home directory.
        Some(SslMode::Require) => rootcert.map_or(Check::Nothing, Check::Chain),
        Some(SslMode::VerifyCa) => Check::Chain(rootcert.map_or_else(default_rootcert, Ok)?),
        Some(SslMode::VerifyFull) => {
            Check::ChainAndName(rootcert.map_or_else(default_rootcert, Ok)?)
        }
    };
    let mode_param = mode.map(|mode| format!("sslmode={}", mode.for_tokio_postgres()));
    kept.extend(mode_param.as_deref());
    let url = if kept.is_empty() {
        base.to_owned()
    } else {
        format!("{base}?{}", kept.join("&"))
    };
    Ok((url, check))
}

/// libpq's default root certificate file, `~/.postgresql/root.crt`.
fn default_rootcert() -> Result<PathBuf, Error> {
    let home = std::env::var_os("HOME").ok_or_else(|| Error::from(Incompatible::NoRootCert))?;
    Ok(Path::new(&home).join(".postgresql").join("root.crt"))
}

/// The CA certificates of a PEM file.
fn roots(file: &Path) -> Result<RootCertStore, Error> {
    let refuse = |why: String| {
        Error::from(Incompatible::RootCert {
            file: file.to_path_buf(),
            reason: why,
        })
    };
    let certificates = CertificateDer::pem_file_iter(file)
        .and_then(|certificates| certificates.collect::<Result<Vec<_>, _>>())
        .map_err(|err| refuse(err.to_string()))?;
    let mut roots = RootCertStore::empty();
    let (_, unusable) = roots.add_parsable_certificates(certificates);
    if roots.is_empty() {
        return Err(refuse(format!(
            "no usable CA certificate in it ({unusable} unusable)"
        )));
    }
    Ok(roots)
}

/// libpq's `sslmode=require` (no `roots`: any certificate) and `verify-ca` (a certificate
/// that chains to one of `roots` and is valid now, whatever names it holds; rustls's own
/// verifier always checks the name, hence this one). Either way the handshake must be signed by
/// the certificate's key.
#[derive(Debug)]
struct NameUnchecked {
    roots: Option<Arc<RootCertStore>>,
    provider: Arc<CryptoProvider>,
}

impl ServerCertVerifier for NameUnchecked {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        if let Some(roots) = &self.roots {
            verify_server_cert_signed_by_trust_anchor(
                &ParsedCertificate::try_from(end_entity)?,
                roots,
                intermediates,
                now,
                self.provider.signature_verification_algorithms.all,
            )?;
        }
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        let algorithms = &self.provider.signature_verification_algorithms;
        verify_tls12_signature(message, cert, dss, algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        let algorithms = &self.provider.signature_verification_algorithms;
        verify_tls13_signature(message, cert, dss, algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

#[cfg(test)]
mod tests;
