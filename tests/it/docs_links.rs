//! The docs' relative links: every `[text](path#anchor)` in the README, the CHANGELOG and
//! `docs/*.md` names a file of the repository, and an anchor names a heading of the file it
//! points to, by the slug rule of GitHub's Markdown rendering (lower case; letters, digits,
//! `_`, `-` and spaces kept, spaces made `-`; a repeated heading gets `-1`, `-2`, …).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Component, Path, PathBuf};

/// GitHub's anchor of a heading's text.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, '-' | '_' | ' '))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// The text of a heading as rendered: code spans and links reduced to their text.
fn rendered(heading: &str) -> String {
    let mut out = String::new();
    let mut rest = heading;
    while let Some(open) = rest.find('[') {
        let Some(close) = rest[open..].find("](").map(|i| open + i) else {
            break;
        };
        let Some(end) = rest[close..].find(')').map(|i| close + i) else {
            break;
        };
        out.push_str(&rest[..open]);
        out.push_str(&rest[open + 1..close]);
        rest = &rest[end + 1..];
    }
    out.push_str(rest);
    out.replace('`', "")
}

/// Lines outside fenced code blocks, numbered from 1.
fn prose(text: &str) -> impl Iterator<Item = (usize, &str)> {
    let mut fenced = false;
    text.lines().enumerate().filter_map(move |(i, line)| {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            return None;
        }
        (!fenced).then_some((i + 1, line))
    })
}

/// The anchors of a Markdown file's headings.
fn anchors(text: &str) -> BTreeSet<String> {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut out = BTreeSet::new();
    for (_, line) in prose(text) {
        let hashes = line.chars().take_while(|c| *c == '#').count();
        if !(1..=6).contains(&hashes) || !line[hashes..].starts_with(' ') {
            continue;
        }
        let base = slug(&rendered(&line[hashes..]));
        let n = seen.entry(base.clone()).or_insert(0);
        out.insert(if *n == 0 {
            base.clone()
        } else {
            format!("{base}-{n}")
        });
        *n += 1;
    }
    out
}

/// The relative link targets of a line (`](target)`), without URLs with a scheme.
fn targets(line: &str) -> Vec<&str> {
    line.match_indices("](")
        .filter_map(|(i, _)| {
            let rest = &line[i + 2..];
            let end = rest.find(')')?;
            let target = rest[..end].split_whitespace().next()?;
            let scheme = target.split_once(':').is_some_and(|(s, _)| {
                !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '+')
            });
            (!scheme).then_some(target)
        })
        .collect()
}

/// `base/rel` with `.` and `..` folded away.
fn join(base: &Path, rel: &str) -> PathBuf {
    let mut out = PathBuf::new();
    for c in base.join(rel).components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            c => out.push(c),
        }
    }
    out
}

#[test]
fn docs_links_name_files_and_headings_that_exist() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = vec![root.join("README.md"), root.join("CHANGELOG.md")];
    for entry in std::fs::read_dir(root.join("docs")).expect("docs/") {
        let path = entry.expect("a docs entry").path();
        if path.extension().is_some_and(|e| e == "md") {
            files.push(path);
        }
    }
    let mut broken = Vec::new();
    let mut checked = 0;
    for file in &files {
        let text = std::fs::read_to_string(file).expect("a Markdown file");
        for (n, line) in prose(&text) {
            for target in targets(line) {
                checked += 1;
                let (path, anchor) = target.split_once('#').unwrap_or((target, ""));
                let dest = if path.is_empty() {
                    file.clone()
                } else {
                    join(file.parent().expect("a folder"), path)
                };
                let name = file.strip_prefix(root).unwrap_or(file).display();
                if !dest.exists() {
                    broken.push(format!("{name}:{n}: {target}: no such file"));
                    continue;
                }
                if anchor.is_empty() || dest.extension().is_none_or(|e| e != "md") {
                    continue;
                }
                let headings = anchors(&std::fs::read_to_string(&dest).expect("a linked file"));
                if !headings.contains(anchor) {
                    broken.push(format!("{name}:{n}: {target}: no heading with that anchor"));
                }
            }
        }
    }
    assert!(
        checked > 50,
        "only {checked} links found: is the scan broken?"
    );
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

#[test]
fn slugs_follow_githubs_rule() {
    assert_eq!(
        slug("The tick built ahead (2026-12-02, 12:41–13:17 UTC)"),
        "the-tick-built-ahead-2026-12-02-12411317-utc"
    );
    assert_eq!(
        slug(&rendered("`CRONQ_REDIS_MIN_REPLICAS`")),
        "cronq_redis_min_replicas"
    );
    assert_eq!(slug(&rendered("See [ha](ha.md) now")), "see-ha-now");
    let a = anchors("# A\n## A\n```\n# not a heading\n```\n### B c\n");
    assert_eq!(a, BTreeSet::from(["a".into(), "a-1".into(), "b-c".into()]));
}
