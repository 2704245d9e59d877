//! Cutting a config file into pieces that parse alone: the head (everything before the
//! first `[[job]]`), then one piece per `[[job]]` table, its sub-tables included.
//!
//! Why: `toml` parses a whole document through token and event vectors and a table tree
//! that, for a million jobs, take ≈ 3 GB at once, and leave the allocator's heap riddled
//! with holes that the process keeps for its lifetime; a piece at a time needs kilobytes.
//!
//! Invariant: reading the pieces one by one gives what the whole document would, as long
//! as each piece parses to exactly one job table ([`job_of`]): [`cut`] cuts only where the
//! head has no `job` key and no table header other than `[[job]]`, `[job.…]` or
//! `[[job.…]]` follows the first job. A piece that does not parse alone (checked as it is
//! read, so each is parsed once) sends the caller back to the whole-text parse, with its
//! exact error messages.
//!
//! This module only cuts, and reads nothing but a piece's own table: reading the pieces is
//! the fast path's (`super::quick`), choosing a path the loader's (`super::load`).

use toml::{Table, Value};
use toml_parser::Source;
use toml_parser::lexer::{Token, TokenKind};

/// A file cut at its `[[job]]` headers.
pub(crate) struct Pieces<'t> {
    /// The text before the first `[[job]]`, parsed.
    pub(crate) head: Table,
    /// Each `[[job]]` piece's text, in file order.
    pub(crate) jobs: Vec<&'t str>,
}

/// Cuts `text` before each line that opens a `[[job]]` table; `None` when the file has no
/// job, is laid out otherwise, or its head does not parse.
pub(crate) fn cut(text: &str) -> Option<Pieces<'_>> {
    let starts = job_headers(text)?;
    let first = *starts.first()?;
    let head: Table = text[..first].parse().ok()?;
    if head.contains_key("job") {
        return None;
    }
    let ends = starts.iter().skip(1).copied().chain([text.len()]);
    let jobs = starts.iter().zip(ends).map(|(&a, b)| &text[a..b]).collect();
    Some(Pieces { head, jobs })
}

/// The one job table of a piece, or `None` if it does not parse or holds anything else.
pub(crate) fn job_of(piece: &str) -> Option<Value> {
    let table: Table = piece.parse().ok()?;
    if table.len() != 1 {
        return None;
    }
    let (key, value) = table.into_iter().next()?;
    match value {
        Value::Array(mut items) if key == "job" && items.len() == 1 => items.pop(),
        _ => None,
    }
}

/// Where a line opening a table header leads.
#[derive(Debug, PartialEq, Eq)]
enum Header {
    /// `[[job]]`: a new job starts here.
    Job,
    /// `[job.…]` or `[[job.…]]`: part of the job above.
    JobPart,
    /// Anything else that starts with `[`.
    Other,
}

/// Byte offsets of the lines that open a `[[job]]` table; `None` when, after the first
/// job, a line opens another table (or starts with `[` inside a value: then the file is
/// parsed whole, which is always right).
fn job_headers(text: &str) -> Option<Vec<usize>> {
    let mut tokens = Source::new(text).lex();
    let mut starts = Vec::new();
    let mut line_start = true;
    let mut line = Vec::new();
    while let Some(token) = tokens.next() {
        match token.kind() {
            TokenKind::Newline => line_start = true,
            TokenKind::Whitespace if line_start => {}
            TokenKind::LeftSquareBracket if line_start => {
                line.clear();
                line.push(token);
                for t in tokens.by_ref() {
                    if matches!(t.kind(), TokenKind::Newline | TokenKind::Eof) {
                        break;
                    }
                    line.push(t);
                }
                // The rest of the line was taken, its newline too.
                match header(text, &line) {
                    Header::Job => starts.push(token.span().start()),
                    Header::JobPart => {}
                    Header::Other if starts.is_empty() => {}
                    Header::Other => return None,
                }
            }
            _ => line_start = false,
        }
    }
    Some(starts)
}

/// Classifies a line that starts with `[`.
fn header(text: &str, line: &[Token]) -> Header {
    use TokenKind::{Atom, Dot, LeftSquareBracket as Open, RightSquareBracket as Close};
    let significant: Vec<(TokenKind, &str)> = line
        .iter()
        .filter(|t| !matches!(t.kind(), TokenKind::Whitespace | TokenKind::Comment))
        .map(|t| (t.kind(), &text[t.span().start()..t.span().end()]))
        .collect();
    // `[[` must be written without a space inside, and so must `]]`.
    let opens_double = line.len() > 1 && line[1].kind() == Open;
    match significant.as_slice() {
        [(Open, _), (Open, _), (Atom, "job"), (Close, _), (Close, _)]
            if opens_double && closes_double(line) =>
        {
            Header::Job
        }
        [(Open, _), (Open, _), (Atom, "job"), (Dot, _), ..] if opens_double => Header::JobPart,
        [(Open, _), (Atom, "job"), (Dot, _), ..] => Header::JobPart,
        _ => Header::Other,
    }
}

/// Whether the last two tokens of `line` before any space or comment are `]]`, together.
fn closes_double(line: &[Token]) -> bool {
    let mut closing = line
        .iter()
        .rev()
        .filter(|t| !matches!(t.kind(), TokenKind::Whitespace | TokenKind::Comment));
    match (closing.next(), closing.next()) {
        (Some(b), Some(a)) => a.span().end() == b.span().start(),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use chrono::{DateTime, Utc};

    use super::super::load::{careful, fast};
    use super::*;

    fn cut_at(text: &str) -> Option<Vec<&str>> {
        cut(text).map(|p| p.jobs)
    }

    const USUAL: &str = r#"# a comment
[defaults]
timezone = "Europe/Berlin"
[leader]
lease = "20s"

[[job]]
name = "a"
schedule = "0 3 * * *"
command = ["x", """
[[job]]
not a header: inside a string
"""]

  [[ job ]]   # spaced inside, as TOML allows
name = "b"
schedule = "@every 5m"
[job.http]
url = "http://127.0.0.1:8080/"
[job.http.headers]
X-Token = "t"
[job.payload]
list = [
  1,
]
[[job]]
name = 'c'
schedule = "0 0 1 1 *"
"#;

    #[test]
    fn the_usual_layout_is_cut_before_each_job() {
        let jobs = cut_at(USUAL).unwrap();
        assert_eq!(jobs.len(), 3);
        assert!(jobs[0].starts_with("[[job]]\nname = \"a\""));
        assert!(jobs[1].starts_with("[[ job ]]"));
        assert!(jobs[1].contains("X-Token"));
        assert!(jobs[2].starts_with("[[job]]\nname = 'c'"));
        let head = cut(USUAL).unwrap().head;
        assert_eq!(head.keys().collect::<Vec<_>>(), ["defaults", "leader"]);
    }

    /// A `[calendars.NAME]` before the first job is part of the head: the file is still cut,
    /// and loads as the whole file does.
    #[test]
    fn calendars_in_the_head_keep_the_file_cut() {
        let now: DateTime<Utc> = "2026-01-15T00:00:00Z".parse().unwrap();
        let text = "[calendars.h]\ndates = [\"2026-12-25\"]\n\n[[job]]\nname = \"a\"\nschedule = \"@daily\"\ncalendars = [\"h\"]\n[[job]]\nname = \"b\"\nschedules = [\"@daily\", \"0 12 * * *\"]\nexclude = [2026-12-24]\n";
        let pieces = cut(text).unwrap();
        assert_eq!(pieces.head.keys().collect::<Vec<_>>(), ["calendars"]);
        assert_eq!(pieces.jobs.len(), 2);
        let path = Path::new("c.toml");
        let cut_read = fast(text, path, now).unwrap().unwrap();
        let whole = careful(text, path, now).unwrap();
        assert_eq!(format!("{cut_read:?}"), format!("{whole:?}"));
        assert_eq!(
            cut_read.jobs[1].schedule.as_str(),
            "@daily | 0 12 * * * except 2026-12-24"
        );
    }

    #[test]
    fn other_layouts_are_parsed_whole() {
        for text in [
            "[[job]]\nname = \"a\"\n[defaults]\ntimezone = \"UTC\"\n",
            "job = [{ name = \"a\" }]\n[[job]]\nname = \"b\"\n",
            "[[job]]\nname = \"a\"\nlist = [\n[1],\n]\n",
            "[defaults\n[[job]]\nname = \"a\"\n",
            "[[job]]\nname = \"a\"\n[[\"job\"]]\nname = \"b\"\n",
            "[[job]]\nname = \"a\"\n[ [job]]\nname = \"b\"\n",
            "[job]\nname = \"a\"\n",
            "[defaults]\ntimezone = \"UTC\"\n",
            "",
        ] {
            assert!(cut(text).is_none(), "{text:?}");
        }
    }

    /// Whole or in pieces, loading gives the same config, problems and warnings; a piece
    /// that does not parse alone is caught as it is read.
    #[test]
    fn pieces_load_exactly_as_the_whole_file() {
        let now: DateTime<Utc> = "2026-01-15T00:00:00Z".parse().unwrap();
        let bad = "[[job]]\nname = \"x y\"\nschedule = \"61 * * * *\"\ncolor = 1\n[job.http]\nurl = 3\n[[job]]\nname = \"ok\"\nschedule = \"30 2 * * *\"\ntimezone = \"America/New_York\"\n[[job]]\n";
        let path = Path::new("c.toml");
        for text in [USUAL, bad] {
            assert!(cut(text).is_some());
            let pieces = fast(text, path, now).expect("read in pieces");
            let whole = careful(text, path, now);
            assert_eq!(format!("{pieces:?}"), format!("{whole:?}"));
        }
        for text in [
            "[[job]]\nname = \"a\"\n[[job]]\nname = \"a\" = 1\n",
            "[[job]]\nname = \"a\"\nname = \"b\"\n",
            "[[job]]\nname = \"a\"\nmax_attempts = 99999999999999999999\n",
        ] {
            assert!(cut(text).is_some(), "{text:?}");
            assert!(fast(text, path, now).is_none(), "{text:?}");
            let loaded = crate::config::Config::from_toml_at(text, path, now);
            let whole = careful(text, path, now);
            assert_eq!(format!("{loaded:?}"), format!("{whole:?}"));
            assert!(
                format!("{loaded:?}").contains("not valid TOML"),
                "{loaded:?}"
            );
        }
    }

    /// A file large enough to be read ahead in several batches, each over several threads
    /// (`super::quick`): the same config as parsed whole, every job at its ordinal,
    /// problems of jobs deep in it (a batch's first and last job, one a thread's share
    /// starts with) named at their own position, and a piece that does not parse alone in
    /// a later batch still caught.
    #[test]
    fn a_large_file_read_ahead_on_threads_loads_as_the_whole_file() {
        let now: DateTime<Utc> = "2026-01-15T00:00:00Z".parse().unwrap();
        let path = Path::new("c.toml");
        let job = |i: usize| match i {
            // Unknown field, wrong type, bad value: quick reads refuse the first two.
            1 | 4096 | 4097 | 6145 => {
                format!("[[job]]\nname = \"j{i}\"\nschedule = \"@every 1m\"\ncolour = 1\n")
            }
            2048 | 9000 => format!(
                "[[job]]\nname = \"j{i}\"\nschedule = \"@every 1m\"\nmax_attempts = \"3\"\n"
            ),
            8191 => format!("[[job]]\nname = \"j{i}\"\nschedule = \"61 * * * *\"\n"),
            // Not a valid name: the job is named by its position.
            5000 => "[[job]]\nname = \"x y\"\nschedule = \"@every 1m\"\n".to_owned(),
            _ => format!(
                "[[job]]\nname = \"j{i}\"\nschedule = \"@every {}s\"\n",
                i % 97 + 1
            ),
        };
        let text: String = (1..=10_000).map(job).collect();
        assert!(cut(&text).is_some());
        let pieces = fast(&text, path, now).expect("read in pieces");
        let whole = careful(&text, path, now);
        let shown = format!("{pieces:?}");
        assert_eq!(shown, format!("{whole:?}"));
        for (i, field) in [
            (1, "colour"),
            (4096, "colour"),
            (4097, "colour"),
            (6145, "colour"),
            (2048, "max_attempts"),
            (9000, "max_attempts"),
            (8191, "schedule"),
        ] {
            let problem = format!("scope: \"job \\\"j{i}\\\"\", field: \"{field}\"");
            assert!(shown.contains(&problem), "{problem} not in {shown}");
        }
        assert!(
            shown.contains("scope: \"job #5000\", field: \"name\""),
            "{shown}"
        );

        let valid: String = (1..=10_000)
            .map(|i| {
                format!(
                    "[[job]]\nname = \"j{i}\"\nschedule = \"@every {}s\"\n",
                    i % 97 + 1
                )
            })
            .collect();
        let config = crate::config::Config::from_toml_at(&valid, path, now).unwrap();
        assert_eq!(config.jobs.len(), 10_000);
        for (i, job) in config.jobs.iter().enumerate() {
            assert_eq!(job.name.as_str(), format!("j{}", i + 1));
        }

        // A piece holding two tables of one job, deep in a later batch.
        let late = valid.replacen(
            "name = \"j9500\"\n",
            "name = \"j9500\"\nname = \"again\"\n",
            1,
        );
        assert!(fast(&late, path, now).is_none());
        let loaded = crate::config::Config::from_toml_at(&late, path, now);
        assert!(
            format!("{loaded:?}").contains("not valid TOML"),
            "{loaded:?}"
        );
    }
}
