//! `sslmode` and `sslrootcert` as libpq reads them: the URL rewriting, the root certificate
//! file's errors, and the checks themselves against a PostgreSQL server of the test's own,
//! started with `ssl=on` and a certificate made here.

use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair, KeyUsagePurpose};

use super::{Check, Tls, split};
use crate::Manager;
use storage::Error;
use testdb::{Programs, free_port, run};

#[track_caller]
fn check(url: &str, expected_url: &str, expected_check: Check) {
    let (rewritten, check) = split(url).unwrap();
    assert_eq!(
        (rewritten.as_str(), check),
        (expected_url, expected_check),
        "{url}"
    );
}

#[test]
fn sslmode_and_sslrootcert_become_require_and_a_verifier() {
    let base = "postgres://ada:pw@db:5432/ledger";
    check(base, base, Check::Nothing);
    check(
        &format!("{base}?sslmode=disable"),
        &format!("{base}?sslmode=disable"),
        Check::Nothing,
    );
    check(
        &format!("{base}?sslmode=prefer"),
        &format!("{base}?sslmode=prefer"),
        Check::Nothing,
    );
    check(
        &format!("{base}?sslmode=require"),
        &format!("{base}?sslmode=require"),
        Check::Nothing,
    );
    check(
        &format!(
            "{base}?application_name=x&sslmode=verify-ca&sslrootcert=/etc/ca.pem&connect_timeout=3"
        ),
        &format!("{base}?application_name=x&connect_timeout=3&sslmode=require"),
        Check::Chain("/etc/ca.pem".into()),
    );
    check(
        &format!("{base}?sslrootcert=/a%20b/ca.pem&sslmode=verify-full"),
        &format!("{base}?sslmode=require"),
        Check::ChainAndName("/a b/ca.pem".into()),
    );
    // libpq's compatibility rule: `require` with a root certificate file checks the chain.
    check(
        &format!("{base}?sslmode=require&sslrootcert=ca.pem"),
        &format!("{base}?sslmode=require"),
        Check::Chain("ca.pem".into()),
    );
    // `prefer` may fall back to plain text, so checking the certificate would protect nothing.
    check(&format!("{base}?sslrootcert=ca.pem"), base, Check::Nothing);
    // The last value counts.
    check(
        &format!("{base}?sslmode=verify-full&sslmode=verify-ca&sslrootcert=a&sslrootcert=b"),
        &format!("{base}?sslmode=require"),
        Check::Chain("b".into()),
    );
}

#[test]
fn verify_modes_default_to_libpq_root_crt() {
    let Some(home) = std::env::var_os("HOME") else {
        return;
    };
    let expected = Path::new(&home).join(".postgresql/root.crt");
    check(
        "postgres://db/x?sslmode=verify-ca",
        "postgres://db/x?sslmode=require",
        Check::Chain(expected.clone()),
    );
    check(
        "postgres://db/x?sslmode=verify-full",
        "postgres://db/x?sslmode=require",
        Check::ChainAndName(expected),
    );
}

#[track_caller]
fn refused(url: &str, expected: &str) {
    match Tls::from_url(url) {
        Err(Error::Incompatible(why)) => {
            let message = why.to_string();
            assert!(message.contains(expected), "{message}")
        }
        Err(err) => panic!("{url}: {err:?}"),
        Ok(_) => panic!("{url}: accepted"),
    }
}

#[test]
fn bad_tls_parameters_are_refused_naming_them() {
    refused("postgres://db/x?sslmode=allow", "invalid sslmode \"allow\"");
    refused("postgres://db/x?sslmode=VERIFY-FULL", "invalid sslmode");
    refused(
        "postgres://a:s3cret@db/x?sslmode=verify-ca&sslrootcert=system",
        "sslrootcert=system",
    );
    // The password is never part of a message.
    let Err(err) = Tls::from_url("postgres://a:s3cret@db/x?sslmode=nope") else {
        panic!("accepted");
    };
    assert!(!err.to_string().contains("s3cret"), "{err}");
    refused(
        "postgres://db/x?sslmode=verify-ca&sslrootcert=%FF",
        "sslrootcert is not UTF-8",
    );
}

#[test]
fn a_missing_or_unusable_root_certificate_file_is_refused_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing.pem");
    refused(
        &format!(
            "postgres://db/x?sslmode=verify-full&sslrootcert={}",
            missing.display()
        ),
        &format!("cannot use sslrootcert file {}", missing.display()),
    );
    let empty = dir.path().join("empty.pem");
    std::fs::write(&empty, "not a certificate\n").unwrap();
    refused(
        &format!(
            "postgres://db/x?sslmode=verify-ca&sslrootcert={}",
            empty.display()
        ),
        &format!(
            "cannot use sslrootcert file {}: no usable CA certificate",
            empty.display()
        ),
    );
    refused(
        &format!(
            "postgres://db/x?sslmode=require&sslrootcert={}",
            missing.display()
        ),
        "cannot use sslrootcert file",
    );
    // Modes that check nothing read no file.
    assert!(Tls::from_url("postgres://db/x?sslmode=require").is_ok());
}

/// A certificate authority made for the test.
struct Authority {
    issuer: CertifiedIssuer<'static, KeyPair>,
}

impl Authority {
    fn new(name: &str) -> Self {
        let mut params = CertificateParams::new(Vec::new()).unwrap();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, name);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let issuer = CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap();
        Self { issuer }
    }

    /// A server certificate for `host` and its private key, both PEM.
    fn server(&self, host: &str) -> (String, String) {
        let key = KeyPair::generate().unwrap();
        let cert = CertificateParams::new(vec![host.to_owned()])
            .unwrap()
            .signed_by(&key, &self.issuer)
            .unwrap();
        (cert.pem(), key.serialize_pem())
    }

    /// Writes the authority's certificate to `dir/file`.
    fn write(&self, dir: &Path, file: &str) -> PathBuf {
        let path = dir.join(file);
        std::fs::write(&path, self.issuer.pem()).unwrap();
        path
    }
}

/// A PostgreSQL server of the test's own, on a free loopback port, with TLS on; stopped and
/// its directory removed when dropped.
struct ThrowawayServer {
    programs: Programs,
    dir: tempfile::TempDir,
    port: u16,
}

impl ThrowawayServer {
    /// Starts one presenting `cert` and `key` (PEM), its `pg_hba.conf` initdb's or `hba`;
    /// `None` when PostgreSQL is missing and `NO_SERVER_VAR` is set.
    fn start(cert: &str, key: &str, hba: Option<&str>) -> Option<Self> {
        let programs = Programs::find("the TLS tests that need them")?;
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("server.crt"), cert).unwrap();
        let key_path = dir.path().join("server.key");
        std::fs::File::create(&key_path)
            .unwrap()
            .write_all(key.as_bytes())
            .unwrap();
        // PostgreSQL refuses a key file that others may read.
        std::fs::set_permissions(&key_path, std::fs::Permissions::from_mode(0o600)).unwrap();
        programs.own(dir.path());
        let server = Self {
            programs,
            port: free_port(),
            dir,
        };
        let data = server.dir.path().join("data");
        run(server
            .programs
            .command("initdb")
            .args([
                "--auth=trust",
                "--username=postgres",
                "--no-sync",
                "--no-instructions",
                "-D",
            ])
            .arg(&data));
        if let Some(hba) = hba {
            std::fs::write(data.join("pg_hba.conf"), hba).unwrap();
        }
        let dir = server.dir.path().display();
        let options = format!(
            "-c listen_addresses=127.0.0.1 -c port={} -c unix_socket_directories={dir} \
             -c ssl=on -c ssl_cert_file={dir}/server.crt -c ssl_key_file={dir}/server.key \
             -c fsync=off",
            server.port
        );
        // `-w` returns once the server accepts connections: no polling here.
        let started = server
            .programs
            .command("pg_ctl")
            .args(["start", "-w", "-t", "60", "-D"])
            .arg(&data)
            .arg("-l")
            .arg(server.dir.path().join("log"))
            .args(["-o", &options])
            .output()
            .unwrap();
        if !started.status.success() {
            let log = std::fs::read_to_string(server.dir.path().join("log")).unwrap_or_default();
            panic!(
                "pg_ctl start failed: {}\n{log}",
                String::from_utf8_lossy(&started.stderr)
            );
        }
        Some(server)
    }

    /// A URL for `host` (the name checked against the certificate), connecting to this server.
    fn url(&self, host: &str, params: &str) -> String {
        format!(
            "postgres://postgres@{host}:{}/postgres?hostaddr=127.0.0.1&{params}",
            self.port
        )
    }
}

impl Drop for ThrowawayServer {
    fn drop(&mut self) {
        let _ = self
            .programs
            .command("pg_ctl")
            .args(["stop", "-m", "immediate", "-w", "-D"])
            .arg(self.dir.path().join("data"))
            .output();
    }
}

/// An error and its sources, as one line.
fn chain(err: &dyn std::error::Error) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// Connects with `url` and tells whether the connection is encrypted, or the error's chain.
fn connect(url: &str) -> Result<bool, String> {
    let manager = Manager::new(url, Duration::from_secs(30)).map_err(|err| chain(&err))?;
    encrypted(&manager)
}

/// Connects through `manager` and tells whether the connection is encrypted, or the error's
/// chain.
fn encrypted(manager: &Manager) -> Result<bool, String> {
    let mut client = manager.connect().map_err(|err| chain(&err))?;
    let row = client
        .query_one(
            "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()",
            &[],
        )
        .unwrap();
    Ok(row.get(0))
}

#[test]
fn verify_ca_and_verify_full_check_the_server_certificate() {
    let authority = Authority::new("test authority");
    let stranger = Authority::new("another authority");
    let (cert, key) = authority.server("db.test");
    let Some(server) = ThrowawayServer::start(&cert, &key, None) else {
        return;
    };
    let ca = authority.write(server.dir.path(), "ca.pem");
    let wrong_ca = stranger.write(server.dir.path(), "wrong-ca.pem");
    let (ca, wrong_ca) = (ca.display(), wrong_ca.display());

    #[track_caller]
    fn connects(url: String) {
        assert_eq!(connect(&url), Ok(true), "{url}");
    }
    #[track_caller]
    fn refused(url: String, expected: &str) {
        match connect(&url) {
            Err(err) => assert!(err.contains(expected), "{url}: {err}"),
            Ok(_) => panic!("{url}: connected"),
        }
    }
    connects(server.url("db.test", &format!("sslmode=verify-full&sslrootcert={ca}")));
    refused(
        server.url(
            "other.test",
            &format!("sslmode=verify-full&sslrootcert={ca}"),
        ),
        "certificate not valid for name \"other.test\"",
    );
    refused(
        server.url(
            "db.test",
            &format!("sslmode=verify-full&sslrootcert={wrong_ca}"),
        ),
        "UnknownIssuer",
    );
    connects(server.url("other.test", &format!("sslmode=verify-ca&sslrootcert={ca}")));
    refused(
        server.url(
            "db.test",
            &format!("sslmode=verify-ca&sslrootcert={wrong_ca}"),
        ),
        "UnknownIssuer",
    );
    // `require` as before: any certificate; with a root certificate file, as `verify-ca`.
    connects(server.url("other.test", "sslmode=require"));
    refused(
        server.url(
            "db.test",
            &format!("sslmode=require&sslrootcert={wrong_ca}"),
        ),
        "UnknownIssuer",
    );
    assert_eq!(
        connect(&server.url("db.test", "sslmode=disable")),
        Ok(false)
    );
}

#[track_caller]
fn plain_first(url: &str, expected: bool) {
    // As `Manager::new` reads it: `split` first, since tokio-postgres knows no `verify-*`.
    let config: postgres::Config = split(url).unwrap().0.parse().unwrap();
    assert_eq!(super::plain_first(&config), expected, "{url}");
}

#[test]
fn prefer_tries_plain_text_first_only_to_hosts_on_this_machine() {
    for local in [
        "postgres://u@127.0.0.1:5432/db",
        "postgres://u@127.8.9.1/db?sslmode=prefer",
        "postgres://u@[::1]:5432/db",
        "postgres://u@localhost/db",
        "postgres://u@LocalHost:5433/db?application_name=x",
        "postgres://u@db.example/db?hostaddr=127.0.0.1",
        "postgresql:///db?hostaddr=127.0.0.1&user=u",
        "postgresql:///db?hostaddr=127.0.0.1,::1&port=5433",
        "postgres://u@localhost,127.0.0.2/db",
        "postgresql://u@%2Fvar%2Frun%2Fpostgresql/db",
        "postgresql:///db?host=/var/run/postgresql&user=u",
    ] {
        plain_first(local, true);
    }
    for other in [
        "postgres://u@db.example/db",
        "postgres://u@10.0.0.5/db",
        "postgres://u@[2001:db8::1]/db",
        "postgres://u@localhost.example.com/db",
        // hostaddr, not the name, is where the connection goes.
        "postgres://u@127.0.0.1/db?hostaddr=10.0.0.5",
        "postgresql:///db?hostaddr=10.0.0.5&user=u",
        "postgresql:///db?hostaddr=127.0.0.1,10.0.0.5",
        "postgresql:///db?hostaddr=127.0.0.1&sslmode=require",
        "postgres://u@127.0.0.1,db.example/db",
        "postgres://u@127.0.0.1/db?sslmode=require",
        "postgres://u@localhost/db?sslmode=verify-full",
        "postgres://u@127.0.0.1/db?sslmode=disable",
    ] {
        plain_first(other, false);
    }
}

#[test]
fn prefer_on_loopback_is_plain_text_and_require_still_encrypts() {
    let authority = Authority::new("test authority");
    let (cert, key) = authority.server("db.test");
    let Some(server) = ThrowawayServer::start(&cert, &key, None) else {
        return;
    };
    // The server offers TLS, and `prefer` to a loopback address does not take it.
    assert_eq!(connect(&server.url("db.test", "")), Ok(false));
    assert_eq!(connect(&server.url("db.test", "sslmode=prefer")), Ok(false));
    assert_eq!(connect(&server.url("db.test", "sslmode=require")), Ok(true));
    // Without a host name there is none to give TLS, so this URL could not connect before;
    // its loopback address alone makes it plain text.
    let address_only = format!(
        "postgresql:///postgres?user=postgres&hostaddr=127.0.0.1&port={}",
        server.port
    );
    assert_eq!(connect(&address_only), Ok(false));
}

#[test]
fn prefer_on_loopback_takes_tls_when_the_server_refuses_plain_text() {
    let authority = Authority::new("test authority");
    let (cert, key) = authority.server("db.test");
    let hba = "local all all trust\nhostssl all all 127.0.0.1/32 trust\n";
    let Some(server) = ThrowawayServer::start(&cert, &key, Some(hba)) else {
        return;
    };
    match connect(&server.url("db.test", "sslmode=disable")) {
        Err(err) => assert!(err.contains("no pg_hba.conf entry"), "{err}"),
        Ok(_) => panic!("plain text was not refused"),
    }
    let manager = Manager::new(&server.url("db.test", ""), Duration::from_secs(30)).unwrap();
    for _ in 0..3 {
        assert_eq!(encrypted(&manager), Ok(true));
    }
    // Refused once, plain text is not tried again: two refusals in the server's log (written
    // before the client hears of them), the `disable` one's and the manager's first.
    let log = std::fs::read_to_string(server.dir.path().join("log")).unwrap();
    assert_eq!(log.matches("no pg_hba.conf entry").count(), 2, "{log}");
}
