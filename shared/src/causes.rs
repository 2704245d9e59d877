//! An error's text with its causes: a client library's own text ("error sending request")
//! often says nothing of why (connection refused, the timeout, the TLS error).

/// `err` with its causes, outermost first, joined by `: `; a cause that its parent's text
/// already ends with is not repeated.
pub fn causes(err: &(dyn std::error::Error + 'static)) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        let line = cause.to_string();
        if !text.ends_with(&line) {
            text.push_str(": ");
            text.push_str(&line);
        }
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("error sending request")]
    struct Outer(#[source] std::io::Error);

    #[test]
    fn each_cause_is_added_once() {
        let err = Outer(std::io::Error::new(
            std::io::ErrorKind::ConnectionRefused,
            "connection refused",
        ));
        assert_eq!(causes(&err), "error sending request: connection refused");
    }
}
