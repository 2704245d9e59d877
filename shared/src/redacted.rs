//! URLs with their credentials hidden, for logs and errors.

use std::fmt;

/// Displays a URL with any `user:password@` replaced by `***@`; in a list of URLs separated
/// by commas (a cluster's nodes), each one's.
#[derive(Clone, PartialEq, Eq)]
pub struct Redacted<'a>(pub &'a str);

impl fmt::Display for Redacted<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, url) in self.0.split(',').enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            redact_one(url, f)?;
        }
        Ok(())
    }
}

/// One URL (or a `host:port` of a list that follows a URL's scheme and credentials, which
/// has neither).
fn redact_one(url: &str, f: &mut fmt::Formatter<'_>) -> fmt::Result {
    let Some(scheme_end) = url.find("://") else {
        // No scheme: anything before an `@` may still be credentials.
        return match url.rfind('@') {
            Some(at) => write!(f, "***@{}", &url[at + 1..]),
            None => f.write_str(url),
        };
    };
    let rest = &url[scheme_end + 3..];
    // The last '@' anywhere, not only before the first '/': a password with a raw '/' (an
    // invalid URL, but a real mistake) must not show either. Hosts, paths and Sentinel
    // master names hold no '@'.
    match rest.rfind('@') {
        Some(at) => write!(f, "{}://***@{}", &url[..scheme_end], &rest[at + 1..]),
        None => f.write_str(url),
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
        assert_eq!(
            Redacted("redis+sentinel://app:pw@h1:26379,h2:26379/cronq-ha/1").to_string(),
            "redis+sentinel://***@h1:26379,h2:26379/cronq-ha/1"
        );
        assert_eq!(
            Redacted("redis+sentinel://h1:26379,h2:26379/cronq-ha").to_string(),
            "redis+sentinel://h1:26379,h2:26379/cronq-ha"
        );
        assert_eq!(
            Redacted("redis://u:pa/ss@h:1/0").to_string(),
            "redis://***@h:1/0"
        );
    }

    #[test]
    fn hides_the_credentials_of_every_url_of_a_list() {
        assert_eq!(
            Redacted("amqp://a:s1@h1:5672/%2f,amqp://b:s2@h2:5672/%2f, amqps://c:s3@h3/v")
                .to_string(),
            "amqp://***@h1:5672/%2f,amqp://***@h2:5672/%2f, amqps://***@h3/v"
        );
        assert_eq!(
            Redacted("redis+sentinel://u:pw@s1:26379,s2:26379,x:pw2@s3:26379/main").to_string(),
            "redis+sentinel://***@s1:26379,s2:26379,***@s3:26379/main"
        );
    }
}
