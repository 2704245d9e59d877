//! A job's handler (`command` or `http`, or none for an embedded one), checked and
//! resolved.
//!
//! Invariant: a resolved [`Handler`] is runnable as is: argv non-empty, `env` names legal and
//! `cwd` absolute, URL http(s) with a host, method known, header names and values legal.
//! URLs in messages are redacted; the URL and header values are [`super::Secret`]s, read
//! here from the environment or a file when so given, and never shown. `user` and `group`
//! are looked up where the command runs (the consumer), not here.

use std::sync::Arc;

use super::raw::{RawHttp, RawJob};
use super::report::Report;
use super::secret::{self, Origin};
use super::{CommandHandler, Handler, HttpHandler};
use crate::redacted::Redacted;

/// HTTP methods an `http` handler may use.
const HTTP_METHODS: &[&str] = &["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"];

/// The job's one handler, `None` when it has none in the file (an embedding program
/// registers it) or when it is invalid (then a problem is recorded).
pub(super) fn resolve_handler(raw: &RawJob, scope: &str, out: &mut Report) -> Option<Handler> {
    if raw.own.command.is_some() && raw.http.is_some() {
        out.problem(
            scope,
            "http",
            "is set together with command: a job has exactly one handler, so keep one of them (or neither, when an embedding program registers the handler)",
        );
        return None;
    }
    if let Some(argv) = &raw.own.command {
        return match argv.first() {
            None => {
                out.problem(
                    scope,
                    "command",
                    "is empty: give the program and its arguments, such as [\"/usr/local/bin/report\", \"--daily\"]",
                );
                None
            }
            Some(program) if program.trim().is_empty() => {
                out.problem(
                    scope,
                    "command",
                    "the program (first element) is empty: give a path such as \"/usr/local/bin/report\"",
                );
                None
            }
            Some(_) => {
                resolve_command(raw, argv, scope, out).map(|h| Handler::Command(Arc::new(h)))
            }
        };
    }
    for (name, set) in command_options(raw) {
        if set {
            out.problem(
                scope,
                name,
                "is only for a command handler: remove it, or give the job a command",
            );
        }
    }
    raw.http
        .as_ref()
        .and_then(|http| resolve_http(http, scope, out))
        .map(|h| Handler::Http(Arc::new(h)))
}

/// The fields that say how a command starts, and whether each is set.
pub(super) fn command_options(raw: &RawJob) -> [(&'static str, bool); 5] {
    let own = &raw.own;
    [
        ("user", own.user.is_some()),
        ("group", own.group.is_some()),
        ("env", own.env.is_some()),
        ("clear_env", own.clear_env.is_some()),
        ("cwd", own.cwd.is_some()),
    ]
}

/// The command and how it starts: `user` and `group` names or ids (looked up where it
/// runs, by the consumer), `env` names that a process environment can hold, `cwd` absolute.
fn resolve_command(
    raw: &RawJob,
    argv: &[String],
    scope: &str,
    out: &mut Report,
) -> Option<CommandHandler> {
    let own = &raw.own;
    let before = out.problems.len();
    for (name, value) in [("user", &own.user), ("group", &own.group)] {
        if value.as_deref().is_some_and(|v| v.trim().is_empty()) {
            out.problem(
                scope,
                name,
                format!("is empty: name a {name} or give its numeric id, or leave {name} out"),
            );
        }
    }
    let env: Vec<(String, String)> = own
        .env
        .iter()
        .flatten()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    for (key, value) in &env {
        if key.is_empty() || key.contains('=') || key.contains('\0') {
            out.problem(
                scope,
                "env",
                format!("{key:?} is not a variable name: it must be non-empty, without '=' or NUL"),
            );
        } else if key.starts_with("CRONQ_") {
            out.problem(
                scope,
                "env",
                format!("{key:?}: the CRONQ_ variables are set by cronq for each attempt; use another name"),
            );
        }
        if value.contains('\0') {
            out.problem(
                scope,
                "env",
                format!("the value of {key:?} holds a NUL byte"),
            );
        }
    }
    if let Some(cwd) = own.cwd.as_deref()
        && !cwd.starts_with('/')
    {
        out.problem(
            scope,
            "cwd",
            format!("{cwd:?} is not an absolute path: give one such as \"/srv/report\""),
        );
    }
    (out.problems.len() == before).then(|| CommandHandler {
        argv: argv.to_vec(),
        user: own.user.clone(),
        group: own.group.clone(),
        env,
        clear_env: own.clear_env.unwrap_or(false),
        cwd: own.cwd.as_ref().map(std::path::PathBuf::from),
    })
}

fn resolve_http(raw: &RawHttp, scope: &str, out: &mut Report) -> Option<HttpHandler> {
    let before = out.problems.len();
    let url = match &raw.url {
        None => {
            out.problem(
                scope,
                "http.url",
                "is required: an http:// or https:// URL such as \"http://127.0.0.1:8080/sync\"",
            );
            None
        }
        Some(value) => secret::resolve(value, scope, "http.url", out),
    };
    if let Some(url) = &url
        && !is_http_url(url.expose())
    {
        let shown = match url.origin() {
            Origin::Inline => format!("\"{}\"", Redacted(url.expose())),
            _ => format!("the URL {url}"),
        };
        out.problem(
            scope,
            "http.url",
            format!(
                "{shown} is not an http:// or https:// URL with a host, such as \"http://127.0.0.1:8080/sync\""
            ),
        );
    }
    let method = raw.method.as_deref().unwrap_or("POST").to_ascii_uppercase();
    if !HTTP_METHODS.contains(&method.as_str()) {
        out.problem(
            scope,
            "http.method",
            format!(
                "{:?} is not an HTTP method: use {}",
                raw.method.as_deref().unwrap_or_default(),
                HTTP_METHODS.join(", ")
            ),
        );
    }
    let mut headers = Vec::new();
    for (name, value) in raw.headers.iter().flatten() {
        let field = format!("http.headers.{}", super::raw::key_text(name));
        let token = |c: char| c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(c);
        if name.is_empty() || !name.chars().all(token) {
            out.problem(
                scope,
                "http.headers",
                format!("{name:?} is not a valid header name: use letters, digits and -"),
            );
            continue;
        }
        match secret::resolve(value, scope, &field, out) {
            Some(v) if v.expose().chars().any(|c| c.is_control() && c != '\t') => {
                out.problem(
                    scope,
                    &field,
                    format!("the value ({v}) contains a line break or control character"),
                );
            }
            Some(v) => headers.push((name.clone(), v)),
            None => {}
        }
    }
    if out.problems.len() > before {
        return None;
    }
    Some(HttpHandler {
        url: url?,
        method,
        headers,
    })
}

/// An http(s) URL with a host and no whitespace.
pub(super) fn is_http_url(url: &str) -> bool {
    let rest = url
        .strip_prefix("http://")
        .or_else(|| url.strip_prefix("https://"));
    match rest {
        Some(rest) => {
            let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
            let host = authority.rsplit('@').next().unwrap_or_default();
            !host.is_empty() && !url.chars().any(|c| c.is_whitespace() || c.is_control())
        }
        None => false,
    }
}
