//! Signed messages: with a keyring (`CRONQ_SIGNING_KEY` or `CRONQ_SIGNING_KEY_FILE`), every
//! message cronq publishes is sealed, and a consumer with a keyring runs only what opens
//! with one of its keys (see `docs/security.md`).
//!
//! A sealed body is a wire message of its own kind around the plain one:
//! `{"kind":"signed.v1","key":"ID","mac":"BASE64","message":{"kind":"occurrence.v1",…}}`,
//! where `mac` is HMAC-SHA-256 under key `ID` over `cronq signed.v1`, the key id and the
//! inner message's exact bytes (so the id cannot be swapped, and nothing is canonicalised:
//! the bytes verified are the bytes that run).
//!
//! Invariants: [`Keyring::open`] hands back the inner bytes only when the MAC matches, and
//! compares it in constant time; a secret never leaves this module (no `Debug`, `Display`
//! or error shows one: they show key ids). [`unwrap`] reads a sealed body without checking
//! it, for what only displays a message (dead-letter listings) or runs without a keyring.

use std::fmt;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, Mac};
use serde::Deserialize;
use serde_json::value::RawValue;
use sha2::Sha256;

/// The variable holding the keys (`ID:SECRET`, several separated by commas; first signs).
pub const KEY_VARIABLE: &str = "CRONQ_SIGNING_KEY";
/// The variable naming a file of keys (one `ID:SECRET` per line; first signs).
pub const KEY_FILE_VARIABLE: &str = "CRONQ_SIGNING_KEY_FILE";

/// The shortest secret taken, in bytes: an HMAC key must not be guessable.
pub const MIN_SECRET_BYTES: usize = 16;

/// What the MAC covers besides the message: a domain label, so a MAC made for something
/// else under the same secret is never taken.
const DOMAIN: &[u8] = b"cronq signed.v1\n";

/// The kind tag of a sealed body.
const KIND: &str = "signed.v1";

/// The keys of one process: the first signs, every one verifies.
#[derive(Clone)]
pub struct Keyring {
    keys: Vec<Key>,
}

#[derive(Clone)]
struct Key {
    id: String,
    mac: Hmac<Sha256>,
}

impl fmt::Debug for Keyring {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Keyring")
            .field("signs_with", &self.signing_id())
            .field("accepts", &self.ids().collect::<Vec<_>>())
            .finish()
    }
}

/// Why a key list cannot be used (each names where the list came from, never a secret).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    /// The list holds no key.
    #[error(
        "{source_name}: no signing key; give ID:SECRET (generate a secret with `openssl rand -base64 32`)"
    )]
    Empty {
        /// The variable or file.
        source_name: String,
    },
    /// An entry is not `ID:SECRET` with a valid id.
    #[error(
        "{source_name}, {place}: {why}; each key is ID:SECRET, the id of letters, digits, '_', '.' or '-' (at most 32)"
    )]
    Malformed {
        /// The variable or file.
        source_name: String,
        /// `key 2`, `line 3`.
        place: String,
        /// What is wrong with it.
        why: String,
    },
    /// A secret is too short.
    #[error(
        "{source_name}, key {id:?}: the secret has {len} bytes, fewer than {MIN_SECRET_BYTES}; generate one with `openssl rand -base64 32`"
    )]
    Short {
        /// The variable or file.
        source_name: String,
        /// The key's id.
        id: String,
        /// Its length.
        len: usize,
    },
    /// Two keys share an id.
    #[error("{source_name}: key id {id:?} is given twice; each key needs an id of its own")]
    Duplicate {
        /// The variable or file.
        source_name: String,
        /// The id.
        id: String,
    },
}

/// Why a consumer refuses a message: it is dead-lettered with reason `unauthenticated`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Unauthenticated {
    /// Not sealed at all.
    #[error("the message is not signed")]
    Unsigned,
    /// Sealed with a key id this process does not have.
    #[error("signed with key {0:?}, which is not in this consumer's keyring ({KEY_VARIABLE})")]
    UnknownKey(String),
    /// The MAC does not match the message.
    #[error(
        "the signature of key {0:?} does not match the message (tampered with, or signed with another secret under that id)"
    )]
    Mismatch(String),
}

/// Where one key list came from, for its errors.
#[derive(Debug, Clone, Copy)]
pub enum KeySource<'a> {
    /// The variable [`KEY_VARIABLE`]: keys separated by commas.
    Variable,
    /// A file (the path as given): one key per line, `#` comments.
    File(&'a str),
}

impl Keyring {
    /// Parses a key list from `source`: `ID:SECRET` entries, the first of which signs.
    ///
    /// # Errors
    /// [`KeyError`] naming the source and the entry.
    pub fn parse(text: &str, source: KeySource<'_>) -> Result<Self, KeyError> {
        let (source_name, entries): (String, Vec<(String, &str)>) = match source {
            KeySource::Variable => (
                KEY_VARIABLE.to_owned(),
                text.split(',')
                    .enumerate()
                    .map(|(i, e)| (format!("key {}", i + 1), e.trim()))
                    .filter(|(_, e)| !e.is_empty())
                    .collect(),
            ),
            KeySource::File(path) => (
                format!("{KEY_FILE_VARIABLE} {path}"),
                text.lines()
                    .enumerate()
                    .map(|(i, l)| (format!("line {}", i + 1), l.trim()))
                    .filter(|(_, l)| !l.is_empty() && !l.starts_with('#'))
                    .collect(),
            ),
        };
        let mut keys: Vec<Key> = Vec::with_capacity(entries.len());
        for (place, entry) in entries {
            let key = Key::parse(entry).map_err(|e| match e {
                EntryError::Malformed(why) => KeyError::Malformed {
                    source_name: source_name.clone(),
                    place,
                    why,
                },
                EntryError::Short { id, len } => KeyError::Short {
                    source_name: source_name.clone(),
                    id,
                    len,
                },
            })?;
            if keys.iter().any(|k| k.id == key.id) {
                return Err(KeyError::Duplicate {
                    source_name,
                    id: key.id,
                });
            }
            keys.push(key);
        }
        if keys.is_empty() {
            return Err(KeyError::Empty { source_name });
        }
        Ok(Self { keys })
    }

    /// The keys of the variable [`KEY_VARIABLE`], when it is set (for programs that embed
    /// cronq; the `cronq` binary also takes a key file).
    ///
    /// # Errors
    /// As [`Keyring::parse`].
    pub fn from_variable() -> Result<Option<Self>, KeyError> {
        match std::env::var(KEY_VARIABLE) {
            Ok(keys) if !keys.trim().is_empty() => {
                Self::parse(&keys, KeySource::Variable).map(Some)
            }
            _ => Ok(None),
        }
    }

    /// The id of the key this process signs with.
    pub fn signing_id(&self) -> &str {
        &self.keys[0].id
    }

    /// The ids of every key this process accepts, the signing one first.
    pub fn ids(&self) -> impl Iterator<Item = &str> {
        self.keys.iter().map(|k| k.id.as_str())
    }

    /// Seals `message` (a plain wire body, JSON) with the signing key. What
    /// [`Keyring::open`] gives back is `message` without the JSON whitespace around it: a
    /// JSON value inside the sealed body has none, so the MAC covers the value alone.
    pub fn seal(&self, message: &[u8]) -> Vec<u8> {
        let message = trim_json_whitespace(message);
        let key = &self.keys[0];
        let mac = URL_SAFE_NO_PAD.encode(key.tag(message));
        let mut body = Vec::with_capacity(message.len() + key.id.len() + mac.len() + 48);
        body.extend_from_slice(br#"{"kind":""#);
        body.extend_from_slice(KIND.as_bytes());
        // The id is letters, digits and `_.-` only (checked when parsed): nothing to escape.
        body.extend_from_slice(br#"","key":""#);
        body.extend_from_slice(key.id.as_bytes());
        body.extend_from_slice(br#"","mac":""#);
        body.extend_from_slice(mac.as_bytes());
        body.extend_from_slice(br#"","message":"#);
        body.extend_from_slice(message);
        body.push(b'}');
        body
    }

    /// The inner message of `body` when it is sealed by one of this keyring's keys.
    ///
    /// # Errors
    /// [`Unauthenticated`]: unsigned, an unknown key, or a MAC that does not match.
    pub fn open<'b>(&self, body: &'b [u8]) -> Result<&'b [u8], Unauthenticated> {
        let sealed = Sealed::parse(body).ok_or(Unauthenticated::Unsigned)?;
        let key = self
            .keys
            .iter()
            .find(|k| k.id == sealed.key)
            .ok_or_else(|| Unauthenticated::UnknownKey(sealed.key.clone()))?;
        let mismatch = || Unauthenticated::Mismatch(key.id.clone());
        let tag = URL_SAFE_NO_PAD
            .decode(sealed.mac.as_bytes())
            .map_err(|_| mismatch())?;
        key.keyed(sealed.message)
            .verify_slice(&tag)
            .map_err(|_| mismatch())?;
        Ok(sealed.message)
    }
}

/// `bytes` without JSON's whitespace (space, tab, line feed, carriage return) at either end.
fn trim_json_whitespace(bytes: &[u8]) -> &[u8] {
    let ws = |b: &u8| matches!(b, b' ' | b'\t' | b'\n' | b'\r');
    let start = bytes.iter().position(|b| !ws(b)).unwrap_or(bytes.len());
    let end = bytes.iter().rposition(|b| !ws(b)).map_or(start, |i| i + 1);
    &bytes[start..end]
}

/// The plain message inside `body` when it is sealed (unchecked), else `body` itself.
pub fn unwrap(body: &[u8]) -> &[u8] {
    Sealed::parse(body).map_or(body, |s| s.message)
}

/// `plain` sealed by `keyring` when one is given, else `plain` itself: the one rule of
/// every publisher of a deployment that may sign.
pub fn seal_with(keyring: Option<&Keyring>, plain: Vec<u8>) -> Vec<u8> {
    match keyring {
        Some(k) => k.seal(&plain),
        None => plain,
    }
}

enum EntryError {
    Malformed(String),
    Short { id: String, len: usize },
}

impl Key {
    fn parse(entry: &str) -> Result<Self, EntryError> {
        let Some((id, secret)) = entry.split_once(':') else {
            return Err(EntryError::Malformed(
                "no ':' between the id and the secret".to_owned(),
            ));
        };
        let id = id.trim();
        let valid = (1..=32).contains(&id.len())
            && id
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'));
        if !valid {
            return Err(EntryError::Malformed(format!(
                "the key id {id:?} is not valid"
            )));
        }
        let secret = secret.trim().as_bytes();
        if secret.len() < MIN_SECRET_BYTES {
            return Err(EntryError::Short {
                id: id.to_owned(),
                len: secret.len(),
            });
        }
        let mac = Hmac::<Sha256>::new_from_slice(secret)
            .map_err(|_| EntryError::Malformed("the secret cannot key HMAC".to_owned()))?;
        Ok(Self {
            id: id.to_owned(),
            mac,
        })
    }

    /// The MAC state over what a seal covers: the domain label, the key id, the message.
    fn keyed(&self, message: &[u8]) -> Hmac<Sha256> {
        let mut mac = self.mac.clone();
        mac.update(DOMAIN);
        mac.update(self.id.as_bytes());
        mac.update(b"\n");
        mac.update(message);
        mac
    }

    fn tag(&self, message: &[u8]) -> Vec<u8> {
        self.keyed(message).finalize().into_bytes().to_vec()
    }
}

/// A sealed body, parsed but not checked.
struct Sealed<'b> {
    key: String,
    mac: String,
    message: &'b [u8],
}

impl<'b> Sealed<'b> {
    fn parse(body: &'b [u8]) -> Option<Self> {
        /// The only kind of sealed body: a plain body fails at its first field.
        #[derive(Deserialize)]
        enum Kind {
            #[serde(rename = "signed.v1")]
            SignedV1,
        }
        #[derive(Deserialize)]
        struct Wire<'a> {
            #[allow(dead_code)]
            kind: Kind,
            key: String,
            mac: String,
            #[serde(borrow)]
            message: &'a RawValue,
        }
        // A plain occurrence as cronq encodes it (the kind its first field) is not sealed:
        // said without serde building the error that refuses it (a consumer asks once
        // per delivery). Exact: a body that starts so has a kind other than `signed.v1`,
        // or two kinds, which serde refuses too.
        if body.starts_with(br#"{"kind":"occurrence.v1""#) {
            return None;
        }
        let wire: Wire<'b> = serde_json::from_slice(body).ok()?;
        Some(Self {
            key: wire.key,
            mac: wire.mac,
            message: wire.message.get().as_bytes(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BODY: &[u8] =
        br#"{"kind":"occurrence.v1","key":"a@2026-01-01T00:00:00Z","payload":{"x":[1,2]}}"#;

    fn ring(text: &str) -> Keyring {
        Keyring::parse(text, KeySource::Variable).unwrap()
    }

    #[test]
    fn sealed_opens_to_the_exact_bytes() {
        let k = ring("k2:0123456789abcdef0123,k1:fedcba9876543210fedc");
        let sealed = k.seal(BODY);
        assert_eq!(k.open(&sealed).unwrap(), BODY);
        assert_eq!(unwrap(&sealed), BODY);
        let json: serde_json::Value = serde_json::from_slice(&sealed).unwrap();
        assert_eq!(json["kind"], "signed.v1");
        assert_eq!(json["key"], "k2");
    }

    #[test]
    fn the_old_key_still_opens_during_a_rotation() {
        let old = ring("k1:fedcba9876543210fedc");
        let both = ring("k2:0123456789abcdef0123,k1:fedcba9876543210fedc");
        assert_eq!(both.open(&old.seal(BODY)).unwrap(), BODY);
        assert_eq!(
            old.open(&both.seal(BODY)),
            Err(Unauthenticated::UnknownKey("k2".into()))
        );
    }

    #[test]
    fn a_body_that_starts_as_a_plain_occurrence_is_never_unwrapped() {
        let k = ring("k1:0123456789abcdef0123456789abcdef");
        let sealed = String::from_utf8(k.seal(BODY)).unwrap();
        // The same seal with a plain occurrence's kind put first: two kinds, not sealed.
        let twice = sealed.replacen('{', r#"{"kind":"occurrence.v1","#, 1);
        assert_eq!(unwrap(twice.as_bytes()), twice.as_bytes());
        // The sealed body itself still opens to its message.
        assert_eq!(unwrap(sealed.as_bytes()), BODY);
    }

    #[test]
    fn unsigned_forged_and_tampered_are_refused() {
        let k = ring("k1:fedcba9876543210fedc");
        assert_eq!(k.open(BODY), Err(Unauthenticated::Unsigned));
        assert_eq!(unwrap(BODY), BODY);
        // Same id, other secret.
        let forged = ring("k1:another-secret-of-16+").seal(BODY);
        assert_eq!(k.open(&forged), Err(Unauthenticated::Mismatch("k1".into())));
        // One byte of the message changed.
        let sealed = k.seal(BODY);
        let text = String::from_utf8(sealed).unwrap().replace("[1,2]", "[1,3]");
        assert_eq!(
            k.open(text.as_bytes()),
            Err(Unauthenticated::Mismatch("k1".into()))
        );
        // The id swapped for another key's: the MAC covers the id.
        let two = ring("k1:fedcba9876543210fedc,k9:fedcba9876543210fedc");
        let swapped = String::from_utf8(two.seal(BODY))
            .unwrap()
            .replace(r#""key":"k1""#, r#""key":"k9""#);
        assert_eq!(
            two.open(swapped.as_bytes()),
            Err(Unauthenticated::Mismatch("k9".into()))
        );
        // A MAC that is not base64.
        let bad = br#"{"kind":"signed.v1","key":"k1","mac":"!!","message":{}}"#;
        assert_eq!(k.open(bad), Err(Unauthenticated::Mismatch("k1".into())));
    }

    #[test]
    fn key_lists_are_checked_and_secrets_never_shown() {
        let file = Keyring::parse(
            "# rotated 2026-12\n\nk2: 0123456789abcdef0123\nk1:fedcba9876543210fedc\n",
            KeySource::File("/run/keys"),
        )
        .unwrap();
        assert_eq!(file.ids().collect::<Vec<_>>(), ["k2", "k1"]);
        let shown = format!("{file:?}");
        assert!(!shown.contains("0123456789"), "{shown}");
        let err = |text: &str| {
            Keyring::parse(text, KeySource::Variable)
                .unwrap_err()
                .to_string()
        };
        assert!(err("").contains("CRONQ_SIGNING_KEY: no signing key"));
        assert!(err("k1").contains("key 1: no ':'"), "{}", err("k1"));
        assert!(err("k 1:0123456789abcdef").contains("key id \"k 1\" is not valid"));
        let short = err("k1:s3cr3t");
        assert!(
            short.contains("fewer than 16") && !short.contains("s3cr3t"),
            "{short}"
        );
        assert!(err("a:0123456789abcdef,a:0123456789abcdeg").contains("\"a\" is given twice"));
        let in_file = Keyring::parse("#\nbad line\n", KeySource::File("/k"))
            .unwrap_err()
            .to_string();
        assert!(
            in_file.starts_with("CRONQ_SIGNING_KEY_FILE /k, line 2:"),
            "{in_file}"
        );
    }
}
