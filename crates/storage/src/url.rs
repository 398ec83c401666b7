//! Database URLs: telling a PostgreSQL URL from a file path, and hiding passwords in logs.
//! Here rather than in `storage-postgres`, so that a program without that backend can still name
//! what it refuses without leaking a password.

/// True when `db` names a PostgreSQL database (`postgres://` or `postgresql://`) rather than
/// an SQLite file.
pub fn is_url(db: &str) -> bool {
    db.starts_with("postgres://") || db.starts_with("postgresql://")
}

/// `url` with its password, if any, replaced by `***`: safe to log. Both places a libpq URL can
/// hold one are covered, `user:password@` and a `password=` parameter.
pub fn redact(url: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((base, query)) => (base, Some(query)),
        None => (url, None),
    };
    let mut out = match base.split_once("://") {
        Some((scheme, rest)) => {
            let authority_end = rest.find('/').unwrap_or(rest.len());
            let (authority, path) = rest.split_at(authority_end);
            match authority.rsplit_once('@') {
                Some((userinfo, host)) => match userinfo.split_once(':') {
                    Some((user, _)) => format!("{scheme}://{user}:***@{host}{path}"),
                    None => base.to_owned(),
                },
                None => base.to_owned(),
            }
        }
        None => base.to_owned(),
    };
    if let Some(query) = query {
        let params: Vec<String> = query
            .split('&')
            .map(|param| match param.split_once('=') {
                Some((key, _)) if key.eq_ignore_ascii_case("password") => format!("{key}=***"),
                _ => param.to_owned(),
            })
            .collect();
        out.push('?');
        out.push_str(&params.join("&"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::redact;

    #[test]
    fn redact_hides_passwords_only() {
        assert_eq!(
            redact("postgres://ada:s3cret@db:5432/ledger?sslmode=require"),
            "postgres://ada:***@db:5432/ledger?sslmode=require"
        );
        assert_eq!(
            redact("postgresql://ada@db/ledger?password=s3cret&application_name=x"),
            "postgresql://ada@db/ledger?password=***&application_name=x"
        );
        assert_eq!(redact("postgres://db/ledger"), "postgres://db/ledger");
        // A Unix socket's directory as the host, percent-encoded.
        assert_eq!(
            redact("postgresql://ada:s3cret@%2Fvar%2Frun%2Fpostgresql/ledger"),
            "postgresql://ada:***@%2Fvar%2Frun%2Fpostgresql/ledger"
        );
    }
}
