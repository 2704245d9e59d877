//! Who may do what through the dashboard and its API (docs/security.md, "Roles and
//! tokens").
//!
//! Tokens are named, each with a [`Role`]: `viewer` (reads), `operator` (also pause,
//! resume, trigger, backfill, cancel, dead-letter replay) and `admin` (also runtime job
//! changes).
//! They come from a tokens file (`--tokens-file`, one `NAME ROLE SECRET` a line), or from
//! `CRONQ_DASHBOARD_TOKEN` / `--dashboard-token-file`: one token named `admin` with the
//! role admin. Without any token the dashboard is read-only: it shows no action and refuses
//! every change with 403. Reads need no token (as they did before roles), except the audit
//! log, which needs an operator.
//!
//! A change needs either `Authorization: Bearer SECRET` (the API) or the session cookie the
//! login form sets (HttpOnly, SameSite=Strict) together with the session's CSRF token (a
//! form field `csrf` or the header `X-CSRF-Token`); then the token's role must allow it
//! (403 naming the role needed).
//!
//! Invariant: nothing is kept per session: a session cookie (which carries the token's
//! name and role) and its CSRF token are MACs under a key drawn at start, so they cannot be
//! forged without it and a restart ends every session. Secrets are compared as MACs, in
//! constant time, against every token.

use std::path::Path;

use axum::http::HeaderMap;
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use chrono::Utc;
use hmac::{Hmac, Mac};
use sha2::Sha256;

use crate::settings::UsageError;

/// The variable holding the admin token.
pub const TOKEN_VARIABLE: &str = "CRONQ_DASHBOARD_TOKEN";

/// The name of the one admin token of `CRONQ_DASHBOARD_TOKEN` / `--dashboard-token-file`.
pub const ADMIN_NAME: &str = "admin";

/// The session cookie.
pub const SESSION_COOKIE: &str = "cronq_session";

/// The cookie the login form's CSRF token is bound to.
pub const LOGIN_COOKIE: &str = "cronq_login";

/// How long a session lasts.
pub const SESSION_SECONDS: i64 = 12 * 3600;

/// The shortest secret taken.
const MIN_TOKEN: usize = 16;

/// What a token may do; each role may do what the ones before it may.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Role {
    /// Reads.
    Viewer,
    /// Also pause, resume, trigger, backfill, cancel, dead-letter replay, and reading the
    /// audit log.
    Operator,
    /// Also create, change and delete runtime jobs.
    Admin,
}

impl Role {
    /// Every role, weakest first.
    pub const ALL: [Self; 3] = [Self::Viewer, Self::Operator, Self::Admin];

    /// `viewer`, `operator` or `admin`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Viewer => "viewer",
            Self::Operator => "operator",
            Self::Admin => "admin",
        }
    }

    /// The role named `text`.
    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|r| r.as_str() == text)
    }
}

impl std::fmt::Display for Role {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One named token (its secret never shown, not even by `Debug`).
#[derive(Clone)]
pub struct Token {
    /// Its name, as the audit log shows it.
    pub name: String,
    /// What it may do.
    pub role: Role,
    secret: String,
}

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Token")
            .field("name", &self.name)
            .field("role", &self.role)
            .finish_non_exhaustive()
    }
}

impl Token {
    /// A token named `name` with `role` and `secret`.
    pub fn new(name: impl Into<String>, role: Role, secret: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            role,
            secret: secret.into(),
        }
    }
}

/// Whom a request comes from: a token's name and role.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    /// The token's name.
    pub name: String,
    /// Its role.
    pub role: Role,
}

/// The tokens, and the key sessions are signed with.
pub struct Access {
    tokens: Vec<Token>,
    key: [u8; 32],
}

impl std::fmt::Debug for Access {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Access")
            .field("tokens", &self.tokens.len())
            .finish_non_exhaustive()
    }
}

/// Why a request was refused: the status, the message for the caller, and who it was
/// when the token was known.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// 401 or 403.
    pub status: u16,
    /// What to do.
    pub message: String,
    /// The caller, when its token was recognised (a role too weak).
    pub caller: Option<Caller>,
}

impl Refusal {
    fn new(status: u16, message: impl Into<String>) -> Self {
        Self {
            status,
            message: message.into(),
            caller: None,
        }
    }
}

/// Whether `name` can name a token: 1 to 64 of `A-Z a-z 0-9 _ - . @`.
fn is_token_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | '@'))
}

/// The tokens of a tokens file's `text` (`file` names it in errors).
///
/// # Errors
/// A usage error naming the file and the line: not `NAME ROLE SECRET`, a bad name, an
/// unknown role, a short secret, a name or a secret given twice, or no token at all.
pub fn parse_tokens(text: &str, file: &Path) -> Result<Vec<Token>, UsageError> {
    let at = |n: usize, what: String| {
        UsageError(format!("tokens file {}, line {n}: {what}", file.display()))
    };
    let mut tokens: Vec<Token> = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let n = i + 1;
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let fields: Vec<&str> = line.split_whitespace().collect();
        let [name, role, secret] = fields[..] else {
            return Err(at(
                n,
                format!(
                    "has {} fields: write `NAME ROLE SECRET` (ROLE: viewer, operator or admin; the secret without spaces)",
                    fields.len()
                ),
            ));
        };
        if !is_token_name(name) {
            return Err(at(
                n,
                format!("name {name:?} is not 1 to 64 of A-Z a-z 0-9 _ - . @: rename the token"),
            ));
        }
        let Some(role) = Role::parse(role) else {
            return Err(at(
                n,
                format!(
                    "role {role:?} of token {name:?} is not viewer, operator or admin: use one of them"
                ),
            ));
        };
        if secret.chars().count() < MIN_TOKEN {
            return Err(at(
                n,
                format!(
                    "the secret of token {name:?} is shorter than {MIN_TOKEN} characters: use a long random one, such as the output of `openssl rand -hex 32`"
                ),
            ));
        }
        if tokens.iter().any(|t| t.name == name) {
            return Err(at(
                n,
                format!("token {name:?} is named twice: give each token its own name"),
            ));
        }
        if let Some(other) = tokens.iter().find(|t| t.secret == secret) {
            return Err(at(
                n,
                format!(
                    "token {name:?} has the secret of token {:?}: give each token its own secret",
                    other.name
                ),
            ));
        }
        tokens.push(Token::new(name, role, secret));
    }
    if tokens.is_empty() {
        return Err(UsageError(format!(
            "tokens file {} holds no token: add a line `NAME ROLE SECRET`, or drop --tokens-file for a read-only dashboard",
            file.display()
        )));
    }
    Ok(tokens)
}

impl Access {
    /// The tokens of the tokens file `tokens_file`, or the one admin token of
    /// `CRONQ_DASHBOARD_TOKEN` or the file `token_file`; read-only without any.
    ///
    /// # Errors
    /// A usage error when a tokens file and an admin token are both given, when a file
    /// cannot be read, for a tokens file's bad line ([`parse_tokens`]), or when the admin
    /// token is shorter than 16 characters (no message shows a secret).
    pub fn load(tokens_file: Option<&Path>, token_file: Option<&Path>) -> anyhow::Result<Self> {
        let from_env = std::env::var(TOKEN_VARIABLE).ok().filter(|t| !t.is_empty());
        if let Some(tokens_file) = tokens_file {
            let other = match (&from_env, token_file) {
                (Some(_), _) => Some(TOKEN_VARIABLE.to_owned()),
                (None, Some(f)) => Some(format!("--dashboard-token-file {}", f.display())),
                (None, None) => None,
            };
            if let Some(other) = other {
                return Err(UsageError(format!(
                    "--tokens-file {} and {other} are both set: keep one (the admin token can be a line `admin admin SECRET` of the tokens file)",
                    tokens_file.display()
                ))
                .into());
            }
            let text = crate::secret_file::read(tokens_file, "--tokens-file", "the tokens file")?;
            return Ok(Self::new(parse_tokens(&text, tokens_file)?));
        }
        let token = match (from_env, token_file) {
            (Some(_), Some(file)) => {
                return Err(UsageError(format!(
                    "{TOKEN_VARIABLE} and --dashboard-token-file {} are both set: keep one",
                    file.display()
                ))
                .into());
            }
            (Some(token), None) => Some((token, TOKEN_VARIABLE.to_owned())),
            (None, Some(file)) => {
                let text = crate::secret_file::read(
                    file,
                    "--dashboard-token-file",
                    "the dashboard token file",
                )?;
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
        Ok(Self::new(
            token
                .map(|(t, _)| Token::new(ADMIN_NAME, Role::Admin, t))
                .into_iter()
                .collect(),
        ))
    }

    /// With these tokens (none: read-only), and a fresh session key.
    pub fn new(tokens: Vec<Token>) -> Self {
        Self {
            tokens,
            key: rand::random(),
        }
    }

    /// Whether no token is configured.
    pub fn is_read_only(&self) -> bool {
        self.tokens.is_empty()
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

    /// The token whose secret is `given`, if any: compared as MACs in constant time, with
    /// every token (the time taken does not tell which one matched).
    pub fn token(&self, given: &str) -> Option<Caller> {
        let given = self.mac(&["token", given]).finalize().into_bytes();
        let mut found = None;
        for token in &self.tokens {
            if self
                .mac(&["token", &token.secret])
                .verify_slice(&given)
                .is_ok()
            {
                found = Some(Caller {
                    name: token.name.clone(),
                    role: token.role,
                });
            }
        }
        found
    }

    /// A new session cookie value for `caller`: `EXPIRES.NONCE.ROLE.MAC.NAME`.
    pub fn new_session(&self, caller: &Caller) -> String {
        let expires = (Utc::now().timestamp() + SESSION_SECONDS).to_string();
        let nonce = URL_SAFE_NO_PAD.encode(rand::random::<[u8; 16]>());
        let role = caller.role.as_str();
        let mac = self.sign(&["session", &expires, &nonce, role, &caller.name]);
        format!("{expires}.{nonce}.{role}.{mac}.{}", caller.name)
    }

    /// The caller of `value` when it is a session of this process that has not expired.
    pub fn session(&self, value: &str) -> Option<Caller> {
        let mut parts = value.splitn(5, '.');
        let (Some(expires), Some(nonce), Some(role), Some(mac), Some(name)) = (
            parts.next(),
            parts.next(),
            parts.next(),
            parts.next(),
            parts.next(),
        ) else {
            return None;
        };
        let ok = !self.is_read_only()
            && expires
                .parse::<i64>()
                .is_ok_and(|t| t > Utc::now().timestamp())
            && self.verify(&["session", expires, nonce, role, name], mac);
        if !ok {
            return None;
        }
        Some(Caller {
            name: name.to_owned(),
            role: Role::parse(role)?,
        })
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

    /// The valid session of a request, with its caller.
    pub fn session_of(&self, headers: &HeaderMap) -> Option<(String, Caller)> {
        let value = cookie(headers, SESSION_COOKIE)?;
        let caller = self.session(&value)?;
        Some((value, caller))
    }

    /// Who a request comes from, for a read: a bearer token or a session (no CSRF token
    /// needed, as a read changes nothing); `None` without either.
    ///
    /// # Errors
    /// 401 for a bearer token that is none of the tokens.
    pub fn reader(&self, headers: &HeaderMap) -> Result<Option<Caller>, Refusal> {
        if let Some(given) = bearer(headers) {
            return self.token(&given).map(Some).ok_or_else(wrong_bearer);
        }
        Ok(self.session_of(headers).map(|(_, c)| c))
    }

    /// Whether the request may read what needs `need` (the audit log).
    ///
    /// # Errors
    /// The [`Refusal`] to answer: 401 without a token, 403 for a weaker role.
    pub fn authorize_read(&self, headers: &HeaderMap, need: Role) -> Result<Caller, Refusal> {
        if self.is_read_only() {
            return Err(read_only());
        }
        let caller = self.reader(headers)?.ok_or_else(|| {
            Refusal::new(
                401,
                "not logged in: log in at /login, or send Authorization: Bearer TOKEN",
            )
        })?;
        permit(caller, need)
    }

    /// Whether the request may do what needs `need`: read-only refuses (403); a bearer
    /// token must be one of the tokens (401); a session needs its CSRF token, from the form
    /// field `csrf_field` or the `X-CSRF-Token` header (403); nothing at all is 401; a
    /// role weaker than `need` is 403.
    ///
    /// # Errors
    /// The [`Refusal`] to answer.
    pub fn authorize(
        &self,
        headers: &HeaderMap,
        csrf_field: Option<&str>,
        need: Role,
    ) -> Result<Caller, Refusal> {
        if self.is_read_only() {
            return Err(read_only());
        }
        if let Some(given) = bearer(headers) {
            let caller = self.token(&given).ok_or_else(wrong_bearer)?;
            return permit(caller, need);
        }
        let Some((session, caller)) = self.session_of(headers) else {
            return Err(Refusal::new(
                401,
                "not logged in: log in at /login, or send Authorization: Bearer TOKEN",
            ));
        };
        let given = csrf_field.map(str::to_owned).or_else(|| {
            headers
                .get("x-csrf-token")
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned)
        });
        let refused = |message: &str| Refusal {
            status: 403,
            message: message.to_owned(),
            caller: Some(caller.clone()),
        };
        match given {
            Some(given) if self.verify(&["csrf", &session], &given) => permit(caller, need),
            Some(_) => Err(refused("wrong CSRF token: reload the page and try again")),
            None => Err(refused(
                "missing CSRF token: send the form of the page, or the header X-CSRF-Token",
            )),
        }
    }
}

fn read_only() -> Refusal {
    Refusal::new(
        403,
        format!(
            "the dashboard is read-only: start it with --tokens-file, {TOKEN_VARIABLE} or --dashboard-token-file to allow changes"
        ),
    )
}

fn wrong_bearer() -> Refusal {
    Refusal::new(401, "the bearer token is none of the dashboard's tokens")
}

/// `caller`, when its role is at least `need`; otherwise 403 naming the role needed.
fn permit(caller: Caller, need: Role) -> Result<Caller, Refusal> {
    if caller.role >= need {
        return Ok(caller);
    }
    let roles = match need {
        Role::Admin => "the role admin",
        Role::Operator => "the role operator or admin",
        Role::Viewer => "a token",
    };
    Err(Refusal {
        status: 403,
        message: format!(
            "token {:?} has the role {}: this needs {roles}",
            caller.name, caller.role
        ),
        caller: Some(caller),
    })
}

/// The bearer token of a request, if it sends one.
fn bearer(headers: &HeaderMap) -> Option<String> {
    let value = headers
        .get(axum::http::header::AUTHORIZATION)?
        .to_str()
        .ok()?;
    Some(
        value
            .strip_prefix("Bearer ")
            .unwrap_or_default()
            .trim()
            .to_owned(),
    )
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

    fn three() -> Access {
        Access::new(vec![
            Token::new("ada", Role::Admin, "0123456789abcdef"),
            Token::new("otto", Role::Operator, "operator-secret-1"),
            Token::new("vera.v", Role::Viewer, "viewer-secret-123"),
        ])
    }

    #[test]
    fn sessions_carry_the_role_and_need_their_csrf_token() {
        let access = three();
        let otto = access.token("operator-secret-1").unwrap();
        let session = access.new_session(&otto);
        assert_eq!(access.session(&session), Some(otto.clone()));
        assert_eq!(access.session(&format!("{session}x")), None);
        let forged = session.replacen(".operator.", ".admin.", 1);
        assert_eq!(access.session(&forged), None);
        assert_eq!(three().session(&session), None);
        let cookie = format!("{SESSION_COOKIE}={session}");
        let h = headers(&[("cookie", cookie)]);
        assert_eq!(
            access
                .authorize(&h, None, Role::Operator)
                .unwrap_err()
                .status,
            403
        );
        let csrf = access.csrf(&session);
        assert_eq!(access.authorize(&h, Some(&csrf), Role::Operator), Ok(otto));
        let refused = access.authorize(&h, Some(&csrf), Role::Admin).unwrap_err();
        assert_eq!(refused.status, 403);
        assert!(
            refused.message.contains("role admin"),
            "{}",
            refused.message
        );
        let viewer = access.token("viewer-secret-123").unwrap();
        assert_eq!(access.session(&access.new_session(&viewer)), Some(viewer));
    }

    #[test]
    fn bearer_roles_and_read_only() {
        let access = three();
        let bearer = |t: &str| headers(&[("authorization", format!("Bearer {t}"))]);
        assert_eq!(
            access
                .authorize(&bearer("0123456789abcdef"), None, Role::Admin)
                .unwrap()
                .name,
            "ada"
        );
        let viewer = access
            .authorize(&bearer("viewer-secret-123"), None, Role::Operator)
            .unwrap_err();
        assert_eq!(viewer.status, 403);
        assert_eq!(viewer.caller.unwrap().name, "vera.v");
        assert!(viewer.message.contains("role operator or admin"));
        let bad = bearer("0123456789abcdeX");
        assert_eq!(
            access
                .authorize(&bad, None, Role::Viewer)
                .unwrap_err()
                .status,
            401
        );
        assert_eq!(
            access
                .authorize(&HeaderMap::new(), None, Role::Viewer)
                .unwrap_err()
                .status,
            401
        );
        let ro = Access::new(Vec::new());
        assert_eq!(
            ro.authorize(&bearer("0123456789abcdef"), None, Role::Viewer)
                .unwrap_err()
                .status,
            403
        );
        assert_eq!(ro.token(""), None);
    }

    #[test]
    fn a_tokens_file_error_names_its_line() {
        let file = Path::new("/etc/cronq/tokens");
        let ok = "# who\n\nada admin 0123456789abcdef\n  otto operator operator-secret-1 \n";
        let tokens = parse_tokens(ok, file).unwrap();
        assert_eq!(tokens.len(), 2);
        assert_eq!(tokens[1].role, Role::Operator);
        let cases = [
            ("ada admin\n", "line 1: has 2 fields"),
            ("# c\nada boss 0123456789abcdef\n", "line 2: role \"boss\""),
            (
                "ada admin short\n",
                "line 1: the secret of token \"ada\" is shorter",
            ),
            ("a/b admin 0123456789abcdef\n", "line 1: name \"a/b\""),
            (
                "ada admin 0123456789abcdef\nada viewer 0123456789abcdeX\n",
                "line 2: token \"ada\" is named twice",
            ),
            (
                "ada admin 0123456789abcdef\nbob viewer 0123456789abcdef\n",
                "line 2: token \"bob\" has the secret of token \"ada\"",
            ),
            ("# nothing\n", "holds no token"),
        ];
        for (text, expected) in cases {
            let err = parse_tokens(text, file).unwrap_err().0;
            assert!(err.starts_with("tokens file /etc/cronq/tokens"), "{err}");
            assert!(err.contains(expected), "{err} lacks {expected}");
            assert!(!err.contains("0123456789abcdef"), "a secret shown: {err}");
        }
    }
}
