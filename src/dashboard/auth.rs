//! Who may change things through the dashboard (docs/dashboard.md, "Security").
//!
//! Without an admin token (`CRONQ_DASHBOARD_TOKEN` or `--dashboard-token-file`) the
//! dashboard is read-only: it shows no action and refuses every mutation with 403. With one,
//! a mutation needs either `Authorization: Bearer TOKEN` (the API) or the session cookie
//! the login form sets (HttpOnly, SameSite=Strict) together with the session's CSRF token
//! (a form field `csrf` or the header `X-CSRF-Token`).
//!
//! Invariant: nothing is kept per session: a session cookie and its CSRF token are MACs
//! under a key drawn at start, so they cannot be forged without it and a restart ends every
//! session. Tokens are compared as MACs, in constant time.

use std::path::Path;

use axum::http::HeaderMap;
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use chrono::Utc;
use hmac::{Hmac, Mac};
use sha2::Sha256;

use crate::cmd::settings::UsageError;

/// The variable holding the admin token.
pub const TOKEN_VARIABLE: &str = "CRONQ_DASHBOARD_TOKEN";

/// The session cookie.
pub const SESSION_COOKIE: &str = "cronq_session";

/// The cookie the login form's CSRF token is bound to.
pub const LOGIN_COOKIE: &str = "cronq_login";

/// How long a session lasts.
pub const SESSION_SECONDS: i64 = 12 * 3600;

/// The shortest admin token taken.
const MIN_TOKEN: usize = 16;

/// The admin token, if any, and the key sessions are signed with.
pub struct Admin {
    token: Option<String>,
    key: [u8; 32],
}

impl std::fmt::Debug for Admin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Admin")
            .field("read_only", &self.token.is_none())
            .finish_non_exhaustive()
    }
}

/// Why a mutation was refused: the status and the message for the caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// 401 or 403.
    pub status: u16,
    /// What to do.
    pub message: String,
}

impl Admin {
    /// The token from `CRONQ_DASHBOARD_TOKEN` or the file `file`; read-only without either.
    ///
    /// # Errors
    /// A usage error when both are given, the file cannot be read, or the token is shorter
    /// than 16 characters (the message never shows it).
    pub fn load(file: Option<&Path>) -> anyhow::Result<Self> {
        let from_env = std::env::var(TOKEN_VARIABLE).ok().filter(|t| !t.is_empty());
        let token = match (from_env, file) {
            (Some(_), Some(file)) => {
                return Err(UsageError(format!(
                    "{TOKEN_VARIABLE} and --dashboard-token-file {} are both set: keep one",
                    file.display()
                ))
                .into());
            }
            (Some(token), None) => Some((token, TOKEN_VARIABLE.to_owned())),
            (None, Some(file)) => {
                let text = std::fs::read_to_string(file).map_err(|e| {
                    UsageError(format!(
                        "--dashboard-token-file {}: cannot read it: {e}",
                        file.display()
                    ))
                })?;
                Some((
                    text.trim_end_matches(['\n', '\r']).to_owned(),
                    format!("--dashboard-token-file {}", file.display()),
                ))
            }
            (None, None) => None,
        };
        if let Some((token, from)) = &token
            && token.chars().count() < MIN_TOKEN
        {
            return Err(UsageError(format!(
                "the dashboard admin token of {from} is shorter than {MIN_TOKEN} characters: use a long random one, such as the output of `openssl rand -hex 32`"
            ))
            .into());
        }
        Ok(Self::new(token.map(|(t, _)| t)))
    }

    /// With this token (`None`: read-only), and a fresh session key.
    pub fn new(token: Option<String>) -> Self {
        Self {
            token,
            key: rand::random(),
        }
    }

    /// Whether no admin token is configured.
    pub fn is_read_only(&self) -> bool {
        self.token.is_none()
    }

    fn mac(&self, parts: &[&str]) -> Hmac<Sha256> {
        let mut mac =
            Hmac::<Sha256>::new_from_slice(&self.key).expect("HMAC takes a key of any length");
        for part in parts {
            mac.update(part.as_bytes());
            mac.update(&[0]);
        }
        mac
    }

    fn sign(&self, parts: &[&str]) -> String {
        URL_SAFE_NO_PAD.encode(self.mac(parts).finalize().into_bytes())
    }

    fn verify(&self, parts: &[&str], given: &str) -> bool {
        URL_SAFE_NO_PAD
            .decode(given)
            .is_ok_and(|bytes| self.mac(parts).verify_slice(&bytes).is_ok())
    }

    /// Whether `given` is the admin token (compared as MACs: constant time).
    pub fn is_token(&self, given: &str) -> bool {
        let Some(token) = &self.token else {
            return false;
        };
        let expected = self.mac(&["token", token]).finalize().into_bytes();
        self.mac(&["token", given]).verify_slice(&expected).is_ok()
    }

    /// A new session cookie value: `EXPIRES.NONCE.MAC`.
    pub fn new_session(&self) -> String {
        let expires = (Utc::now().timestamp() + SESSION_SECONDS).to_string();
        let nonce = URL_SAFE_NO_PAD.encode(rand::random::<[u8; 16]>());
        let mac = self.sign(&["session", &expires, &nonce]);
        format!("{expires}.{nonce}.{mac}")
    }

    /// Whether `value` is a session of this process that has not expired.
    pub fn is_session(&self, value: &str) -> bool {
        let mut parts = value.splitn(3, '.');
        let (Some(expires), Some(nonce), Some(mac)) = (parts.next(), parts.next(), parts.next())
        else {
            return false;
        };
        self.token.is_some()
            && expires
                .parse::<i64>()
                .is_ok_and(|t| t > Utc::now().timestamp())
            && self.verify(&["session", expires, nonce], mac)
    }

    /// The CSRF token of a session.
    pub fn csrf(&self, session: &str) -> String {
        self.sign(&["csrf", session])
    }

    /// The CSRF token of the login form bound to the login cookie `value`.
    pub fn login_csrf(&self, value: &str) -> String {
        self.sign(&["login", value])
    }

    /// Whether `given` is the login form's CSRF token for the login cookie `value`.
    pub fn is_login_csrf(&self, value: &str, given: &str) -> bool {
        self.verify(&["login", value], given)
    }

    /// A new login cookie value.
    pub fn new_login(&self) -> String {
        URL_SAFE_NO_PAD.encode(rand::random::<[u8; 16]>())
    }

    /// The valid session of a request, if any.
    pub fn session_of(&self, headers: &HeaderMap) -> Option<String> {
        cookie(headers, SESSION_COOKIE).filter(|s| self.is_session(s))
    }

    /// Whether the request may change things: read-only refuses (403); a bearer token must
    /// be the admin token (401); a session needs its CSRF token, from the form field
    /// `csrf_field` or the `X-CSRF-Token` header (403); nothing at all is 401.
    ///
    /// # Errors
    /// The [`Refusal`] to answer.
    pub fn authorize(&self, headers: &HeaderMap, csrf_field: Option<&str>) -> Result<(), Refusal> {
        if self.is_read_only() {
            return Err(Refusal {
                status: 403,
                message: format!(
                    "the dashboard is read-only: start it with {TOKEN_VARIABLE} or --dashboard-token-file to allow changes"
                ),
            });
        }
        if let Some(value) = headers
            .get(axum::http::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
        {
            let given = value.strip_prefix("Bearer ").unwrap_or_default();
            if self.is_token(given.trim()) {
                return Ok(());
            }
            return Err(Refusal {
                status: 401,
                message: "the bearer token is not the dashboard's admin token".into(),
            });
        }
        let Some(session) = self.session_of(headers) else {
            return Err(Refusal {
                status: 401,
                message: "not logged in: log in at /login, or send Authorization: Bearer TOKEN"
                    .into(),
            });
        };
        let given = csrf_field.map(str::to_owned).or_else(|| {
            headers
                .get("x-csrf-token")
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned)
        });
        match given {
            Some(given) if self.verify(&["csrf", &session], &given) => Ok(()),
            Some(_) => Err(Refusal {
                status: 403,
                message: "wrong CSRF token: reload the page and try again".into(),
            }),
            None => Err(Refusal {
                status: 403,
                message:
                    "missing CSRF token: send the form of the page, or the header X-CSRF-Token"
                        .into(),
            }),
        }
    }
}

/// The value of cookie `name` in a request.
pub fn cookie(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get_all(axum::http::header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v.to_owned())
}

/// A `Set-Cookie` value: HttpOnly, SameSite=Strict, for the whole dashboard.
pub fn set_cookie(name: &str, value: &str, max_age: i64) -> String {
    format!("{name}={value}; Path=/; HttpOnly; SameSite=Strict; Max-Age={max_age}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn headers(pairs: &[(&'static str, String)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(*k, HeaderValue::from_str(v).unwrap());
        }
        h
    }

    #[test]
    fn sessions_need_their_csrf_token() {
        let admin = Admin::new(Some("0123456789abcdef".into()));
        let session = admin.new_session();
        assert!(admin.is_session(&session));
        assert!(!admin.is_session(&format!("{session}x")));
        assert!(!Admin::new(Some("0123456789abcdef".into())).is_session(&session));
        let cookie = format!("{SESSION_COOKIE}={session}");
        let h = headers(&[("cookie", cookie)]);
        assert_eq!(admin.authorize(&h, None).unwrap_err().status, 403);
        assert_eq!(admin.authorize(&h, Some("nope")).unwrap_err().status, 403);
        assert!(admin.authorize(&h, Some(&admin.csrf(&session))).is_ok());
    }

    #[test]
    fn bearer_and_read_only() {
        let admin = Admin::new(Some("0123456789abcdef".into()));
        let ok = headers(&[("authorization", "Bearer 0123456789abcdef".into())]);
        assert!(admin.authorize(&ok, None).is_ok());
        let bad = headers(&[("authorization", "Bearer 0123456789abcdeX".into())]);
        assert_eq!(admin.authorize(&bad, None).unwrap_err().status, 401);
        assert_eq!(
            admin.authorize(&HeaderMap::new(), None).unwrap_err().status,
            401
        );
        let ro = Admin::new(None);
        assert_eq!(ro.authorize(&ok, None).unwrap_err().status, 403);
        assert!(!ro.is_token(""));
    }
}
