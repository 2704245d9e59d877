//! The forms `CRONQ_REDIS_URL` takes: one Redis server (`redis://`, `rediss://`, a Unix
//! socket), handed to the Redis client as given, or a master found through Redis Sentinel
//! (`redis+sentinel://`, `rediss+sentinel://`), parsed here.
//!
//! The grammar is this backend's: the contract only knows the error a store URL can be
//! ([`UrlError`]). The binary checks `CRONQ_REDIS_URL` with it before it connects
//! (`cronq_backends::RedisUrl`).
//!
//! Invariant: no error of this module echoes the URL's credentials; a problem names the
//! variable, the part that is wrong and the form expected.

use std::fmt;

pub use cronq_shared::store::UrlError;

/// The variable the URL comes from, named by every error.
pub const VARIABLE: &str = "CRONQ_REDIS_URL";

/// The Sentinel form, as error messages show it.
pub const SENTINEL_FORM: &str = "redis+sentinel://[USER:PASSWORD@]HOST:PORT[,HOST:PORT...]/MASTER[/DB] (rediss+sentinel:// for TLS)";

/// The port of a sentinel whose address has none (Sentinel's own default).
pub const DEFAULT_SENTINEL_PORT: u16 = 26379;

/// Schemes of one server, left to the Redis client to parse.
const SERVER_SCHEMES: &[&str] = &[
    "redis",
    "rediss",
    "redis+unix",
    "unix",
    "valkey",
    "valkeys",
    "valkey+unix",
];

/// Where Redis is, as `CRONQ_REDIS_URL` says.
#[derive(Clone, PartialEq, Eq)]
pub enum RedisUrl {
    /// One server (`redis://`, `rediss://`, a Unix socket): the URL as given.
    Server(String),
    /// A master found through Redis Sentinel.
    Sentinel(SentinelUrl),
}

/// `redis+sentinel://[USER:PASSWORD@]HOST:PORT[,HOST:PORT...]/MASTER[/DB]`.
#[derive(Clone, PartialEq, Eq)]
pub struct SentinelUrl {
    /// `rediss+sentinel://`: TLS to the sentinels and to the master.
    pub tls: bool,
    /// The sentinels' `(host, port)`, in the order given (asked in that order).
    pub sentinels: Vec<(String, u16)>,
    /// The name the sentinels monitor the master under (`sentinel monitor NAME ...`).
    pub master: String,
    /// The database on the master.
    pub db: i64,
    /// The master's (and replicas') user, percent-decoded; the sentinels get none.
    pub username: Option<String>,
    /// The master's (and replicas') password, percent-decoded; the sentinels get none.
    pub password: Option<String>,
}

impl fmt::Debug for RedisUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Server(url) => f
                .debug_tuple("Server")
                .field(&cronq_shared::redacted::Redacted(url))
                .finish(),
            Self::Sentinel(s) => f.debug_tuple("Sentinel").field(s).finish(),
        }
    }
}

impl fmt::Debug for SentinelUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SentinelUrl")
            .field("tls", &self.tls)
            .field("sentinels", &self.sentinels)
            .field("master", &self.master)
            .field("db", &self.db)
            .field("username", &self.username.as_ref().map(|_| "***"))
            .field("password", &self.password.as_ref().map(|_| "***"))
            .finish()
    }
}

/// A malformed Sentinel URL: `problem`, and the form expected.
fn sentinel_error(problem: impl Into<String>) -> UrlError {
    UrlError {
        variable: VARIABLE,
        problem: problem.into(),
        expected: SENTINEL_FORM,
    }
}

impl RedisUrl {
    /// Parses `CRONQ_REDIS_URL`. A server URL is only checked for its scheme (the Redis
    /// client reads the rest); a Sentinel URL is parsed whole.
    ///
    /// # Errors
    /// [`UrlError`] naming the variable and the form expected, never the credentials.
    pub fn parse(url: &str) -> Result<Self, UrlError> {
        let Some((scheme, rest)) = url.split_once("://") else {
            // No scheme: the Redis client decides, as it always did.
            return Ok(Self::Server(url.to_owned()));
        };
        let tls = match scheme.to_ascii_lowercase().as_str() {
            "redis+sentinel" => false,
            "rediss+sentinel" => true,
            s if SERVER_SCHEMES.contains(&s) => return Ok(Self::Server(url.to_owned())),
            _ => {
                return Err(UrlError {
                    variable: VARIABLE,
                    problem: format!("unknown scheme {scheme:?}"),
                    expected: "redis://, rediss://, or the Sentinel form redis+sentinel://[USER:PASSWORD@]HOST:PORT[,HOST:PORT...]/MASTER[/DB]",
                });
            }
        };
        parse_sentinel(rest, tls).map(Self::Sentinel)
    }
}

fn parse_sentinel(rest: &str, tls: bool) -> Result<SentinelUrl, UrlError> {
    if rest.contains(['?', '#']) {
        return Err(sentinel_error(
            "query parameters and fragments are not supported",
        ));
    }
    // The last '@' ends the credentials (hosts and master names hold none), even when a
    // password holds a raw '/': nothing of it may reach an error message.
    let (userinfo, after) = match rest.rsplit_once('@') {
        Some((userinfo, after)) => (Some(userinfo), after),
        None => (None, rest),
    };
    let (hosts, path) = after.split_once('/').unwrap_or((after, ""));
    let (username, password) = match userinfo {
        None => (None, None),
        Some(userinfo) => {
            let (user, pass) = userinfo.split_once(':').unwrap_or((userinfo, ""));
            let user = decode(user, "user name")?;
            let pass = decode(pass, "password")?;
            (
                Some(user).filter(|u| !u.is_empty()),
                Some(pass).filter(|p| !p.is_empty()),
            )
        }
    };
    let sentinels = hosts
        .split(',')
        .enumerate()
        .map(|(i, addr)| sentinel_addr(i + 1, addr))
        .collect::<Result<Vec<_>, _>>()?;
    let mut segments = path.split('/');
    let master = segments.next().unwrap_or_default();
    if master.is_empty() {
        return Err(sentinel_error("no master name after the sentinels"));
    }
    if master.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(sentinel_error(format!(
            "master name {master:?} holds a space or a control character"
        )));
    }
    let db = match segments.next() {
        None | Some("") => 0,
        Some(db) => db
            .parse::<i64>()
            .ok()
            .filter(|db| *db >= 0)
            .ok_or_else(|| sentinel_error(format!("database {db:?} is not a number from 0")))?,
    };
    if let Some(extra) = segments.find(|s| !s.is_empty()) {
        return Err(sentinel_error(format!(
            "unexpected {extra:?} after the database"
        )));
    }
    Ok(SentinelUrl {
        tls,
        sentinels,
        master: master.to_owned(),
        db,
        username,
        password,
    })
}

/// `HOST[:PORT]` or `[IPV6][:PORT]`, the `n`th of the list.
fn sentinel_addr(n: usize, addr: &str) -> Result<(String, u16), UrlError> {
    let bad = |why: &str| sentinel_error(format!("sentinel {n} ({addr:?}): {why}"));
    let (host, port) = if let Some(bracketed) = addr.strip_prefix('[') {
        let (host, after) = bracketed
            .split_once(']')
            .ok_or_else(|| bad("an IPv6 address needs its closing ']'"))?;
        match after {
            "" => (host, None),
            _ => (
                host,
                Some(
                    after
                        .strip_prefix(':')
                        .ok_or_else(|| bad("expected ':' and a port after ']'"))?,
                ),
            ),
        }
    } else {
        match addr.split_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (addr, None),
        }
    };
    if host.is_empty() {
        return Err(bad("no host"));
    }
    if host.contains(|c: char| c.is_whitespace() || matches!(c, '@' | '/' | '[' | ']')) {
        return Err(bad("not a host name or address"));
    }
    let port = match port {
        None => DEFAULT_SENTINEL_PORT,
        Some(port) => port
            .parse::<u16>()
            .ok()
            .filter(|p| *p > 0)
            .ok_or_else(|| bad("the port is not a number from 1 to 65535"))?,
    };
    Ok((host.to_owned(), port))
}

/// Percent-decodes a part of the credentials; a bad escape is named, the text is not.
fn decode(part: &str, what: &str) -> Result<String, UrlError> {
    let bad = || sentinel_error(format!("the {what} has an invalid percent-escape"));
    let bytes = part.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = bytes.get(i + 1..i + 3).ok_or_else(bad)?;
            let hex = std::str::from_utf8(hex).map_err(|_| bad())?;
            out.push(u8::from_str_radix(hex, 16).map_err(|_| bad())?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| bad())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sentinel(url: &str) -> SentinelUrl {
        match RedisUrl::parse(url) {
            Ok(RedisUrl::Sentinel(s)) => s,
            other => panic!("{url}: {other:?}"),
        }
    }

    fn problem(url: &str) -> String {
        let err = RedisUrl::parse(url).expect_err(url);
        let text = err.to_string();
        assert!(text.starts_with("CRONQ_REDIS_URL: "), "{text}");
        assert!(!text.contains("s3cret"), "credentials echoed: {text}");
        err.problem
    }

    #[test]
    fn server_urls_pass_through() {
        for url in [
            "redis://127.0.0.1:6379",
            "rediss://:pw@h:6380/2",
            "redis+unix:///tmp/redis.sock",
            "REDIS://h",
            "127.0.0.1:6379",
        ] {
            assert_eq!(RedisUrl::parse(url), Ok(RedisUrl::Server(url.to_owned())));
        }
    }

    #[test]
    fn sentinel_url_with_everything() {
        let s = sentinel(
            "rediss+sentinel://app:s3%40cret@h1:26391,10.0.0.2:26392,[::1]:26393/cronq-ha/3",
        );
        assert!(s.tls);
        assert_eq!(
            s.sentinels,
            [
                ("h1".to_owned(), 26391),
                ("10.0.0.2".to_owned(), 26392),
                ("::1".to_owned(), 26393)
            ]
        );
        assert_eq!(s.master, "cronq-ha");
        assert_eq!(s.db, 3);
        assert_eq!(s.username.as_deref(), Some("app"));
        assert_eq!(s.password.as_deref(), Some("s3@cret"));
        let debug = format!("{s:?}");
        assert!(
            !debug.contains("s3@cret") && !debug.contains("app"),
            "{debug}"
        );
    }

    #[test]
    fn sentinel_url_defaults() {
        let s = sentinel("redis+sentinel://h1,h2:26380/mymaster/");
        assert!(!s.tls);
        assert_eq!(
            s.sentinels,
            [("h1".to_owned(), 26379), ("h2".to_owned(), 26380)]
        );
        assert_eq!((s.master.as_str(), s.db), ("mymaster", 0));
        assert_eq!((s.username, s.password), (None, None));
        // A password alone, as in redis://:PASSWORD@host.
        let s = sentinel("redis+sentinel://:s3cret@h1:1/m");
        assert_eq!((s.username, s.password.as_deref()), (None, Some("s3cret")));
    }

    #[test]
    fn malformed_sentinel_urls_say_what_and_the_form() {
        let err = RedisUrl::parse("redis+sentinel://u:s3cret@h1:x/m").unwrap_err();
        assert_eq!(
            err.to_string(),
            "CRONQ_REDIS_URL: sentinel 1 (\"h1:x\"): the port is not a number from 1 to 65535; \
             expected redis+sentinel://[USER:PASSWORD@]HOST:PORT[,HOST:PORT...]/MASTER[/DB] \
             (rediss+sentinel:// for TLS)"
        );
        assert_eq!(
            problem("redis+sentinel://u:s3cret@h1:1"),
            "no master name after the sentinels"
        );
        assert_eq!(
            problem("redis+sentinel://u:s3cret@h1:1/"),
            "no master name after the sentinels"
        );
        assert_eq!(
            problem("redis+sentinel://u:s3cret@h1:1,/m"),
            "sentinel 2 (\"\"): no host"
        );
        assert_eq!(
            problem("redis+sentinel://u:s3cret@/m"),
            "sentinel 1 (\"\"): no host"
        );
        assert_eq!(
            problem("redis+sentinel://h1:70000/m"),
            "sentinel 1 (\"h1:70000\"): the port is not a number from 1 to 65535"
        );
        assert_eq!(
            problem("redis+sentinel://u:s3cret@h1:1/m/x"),
            "database \"x\" is not a number from 0"
        );
        assert_eq!(
            problem("redis+sentinel://u:s3cret@h1:1/m/-1"),
            "database \"-1\" is not a number from 0"
        );
        assert_eq!(
            problem("redis+sentinel://u:s3cret@h1:1/m/0/x"),
            "unexpected \"x\" after the database"
        );
        assert_eq!(
            problem("redis+sentinel://u:s3cret@h1:1/m?protocol=resp3"),
            "query parameters and fragments are not supported"
        );
        assert_eq!(
            problem("redis+sentinel://u:s3cret%zz@h1:1/m"),
            "the password has an invalid percent-escape"
        );
        assert_eq!(
            problem("redis+sentinel://[::1/m"),
            "sentinel 1 (\"[::1\"): an IPv6 address needs its closing ']'"
        );
        assert_eq!(
            problem("redis+sentinel://u:s3/cret@h1:x/m"),
            "sentinel 1 (\"h1:x\"): the port is not a number from 1 to 65535"
        );
        assert_eq!(
            problem("redis+sentinel://h1:1/my master"),
            "master name \"my master\" holds a space or a control character"
        );
    }

    #[test]
    fn unknown_scheme_is_named_without_the_rest() {
        let err = RedisUrl::parse("http://u:s3cret@h:1").unwrap_err();
        assert_eq!(err.problem, "unknown scheme \"http\"");
        assert!(!err.to_string().contains("s3cret"));
    }
}
