//! URLs with their credentials hidden, for logs and errors.

use std::fmt;

/// Displays a URL with any `user:password@` replaced by `***@`.
#[derive(Clone, PartialEq, Eq)]
pub struct Redacted<'a>(pub &'a str);

impl fmt::Display for Redacted<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let url = self.0;
        let Some(scheme_end) = url.find("://") else {
            return f.write_str(url);
        };
        let rest = &url[scheme_end + 3..];
        let authority_end = rest.find('/').unwrap_or(rest.len());
        match rest[..authority_end].rfind('@') {
            Some(at) => write!(f, "{}://***@{}", &url[..scheme_end], &rest[at + 1..]),
            None => f.write_str(url),
        }
    }
}

impl fmt::Debug for Redacted<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "\"{self}\"")
    }
}

#[cfg(test)]
mod tests {
    use super::Redacted;

    #[test]
    fn hides_credentials() {
        assert_eq!(
            Redacted("amqp://guest:secret@127.0.0.1:5672/%2f").to_string(),
            "amqp://***@127.0.0.1:5672/%2f"
        );
        assert_eq!(
            Redacted("redis://127.0.0.1:6379").to_string(),
            "redis://127.0.0.1:6379"
        );
        assert_eq!(
            Redacted("rediss://:pw@h:1/0").to_string(),
            "rediss://***@h:1/0"
        );
    }
}
