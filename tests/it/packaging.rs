//! The help, and what packagers install beside the binary: shell completions and man pages generated
//! from the command line (`cronq completions`, `cronq man`), `cronq version`, and the
//! systemd units of `deploy/systemd/`, checked by `systemd-analyze verify`.

use std::path::Path;
use std::process::Command;

fn cronq(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_cronq"))
        .args(args)
        .env_remove("CRONQ_CONFIG")
        .output()
        .expect("cronq runs");
    assert!(
        out.status.success(),
        "cronq {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("UTF-8 output")
}

#[test]
fn completions_name_every_subcommand_for_each_shell() {
    for shell in ["bash", "zsh", "fish", "elvish", "powershell"] {
        let script = cronq(&["completions", shell]);
        for sub in ["standalone", "consumer", "dlq", "backfill", "completions"] {
            assert!(script.contains(sub), "{shell}: no {sub}:\n{script}");
        }
    }
}

#[test]
fn man_pages_are_generated_from_the_command_line() {
    let page = cronq(&["man"]);
    assert!(
        page.starts_with(".ie") || page.contains(".TH cronq"),
        "{page}"
    );
    assert!(page.contains("standalone"), "{page}");
    let dir = std::env::temp_dir().join(format!("cronq-man-{}", std::process::id()));
    cronq(&["man", "--dir", dir.to_str().expect("a UTF-8 path")]);
    for name in ["cronq.1", "cronq-standalone.1", "cronq-dlq.1"] {
        let text = std::fs::read_to_string(dir.join(name))
            .unwrap_or_else(|e| panic!("{name} in {}: {e}", dir.display()));
        assert!(text.contains(".TH"), "{name}: {text}");
    }
    std::fs::remove_dir_all(&dir).expect("temporary man directory removed");
}

#[test]
fn version_says_what_dash_dash_version_says() {
    let version = cronq(&["version"]);
    assert_eq!(version, cronq(&["--version"]));
    assert_eq!(
        version.trim(),
        format!("cronq {}", env!("CARGO_PKG_VERSION"))
    );
}

#[test]
fn systemd_units_verify() {
    let analyze = Path::new("/usr/bin/systemd-analyze");
    if !analyze.exists() {
        // CI installs it (.ci/run); a developer machine without systemd cannot check.
        assert!(
            std::env::var_os("CI").is_none(),
            "systemd-analyze is missing under CI: .ci/run installs the systemd package"
        );
        eprintln!("skipped: no systemd-analyze on this machine");
        return;
    }
    let units = Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/systemd");
    let dir = std::env::temp_dir().join(format!("cronq-units-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temporary unit directory");
    let mut files = Vec::new();
    for entry in std::fs::read_dir(&units).expect("deploy/systemd") {
        let path = entry.expect("a unit").path();
        // The units name the installed binary; verify checks that it exists.
        let text = std::fs::read_to_string(&path)
            .expect("a unit file")
            .replace("/usr/local/bin/cronq", env!("CARGO_BIN_EXE_cronq"));
        let copy = dir.join(path.file_name().expect("a file name"));
        std::fs::write(&copy, text).expect("unit copied");
        files.push(copy);
    }
    assert_eq!(files.len(), 3, "{files:?}");
    let out = Command::new(analyze)
        .args(["verify", "--man=no"])
        .args(&files)
        .output()
        .expect("systemd-analyze runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stderr.trim().is_empty(),
        "systemd-analyze verify: {stderr}"
    );
    std::fs::remove_dir_all(&dir).expect("temporary unit directory removed");
}

#[test]
fn help_puts_a_commands_own_options_first_and_shows_examples() {
    let subcommands: &[&[&str]] = &[
        &["check"],
        &["next"],
        &["producer"],
        &["consumer"],
        &["dashboard"],
        &["jobs"],
        &["runs"],
        &["pause"],
        &["resume"],
        &["trigger"],
        &["backfill"],
        &["cancel"],
        &["probe"],
        &["dlq", "list"],
        &["dlq", "replay"],
        &["job", "apply"],
        &["job", "get"],
        &["job", "delete"],
        &["job", "history"],
    ];
    for sub in subcommands {
        let help = cronq(&[sub, &["--help"][..]].concat());
        let examples = help.find("\nExamples:\n  cronq ");
        assert!(examples.is_some(), "{sub:?}: no examples:\n{help}");
        let connections = help
            .find("\nConnections (RabbitMQ, Redis):\n")
            .unwrap_or_else(|| panic!("{sub:?}: no connections heading:\n{help}"));
        let amqp = help.find("--amqp-url").expect("--amqp-url listed");
        assert!(
            amqp > connections,
            "{sub:?}: --amqp-url before its heading:\n{help}"
        );
        assert!(
            help.find("--signing-key-file") > help.find("\nSigning and TLS:\n"),
            "{sub:?}"
        );
    }
    // A standalone's help leaves out the fleet's connections, which it does not use, and
    // a producer's and a consumer's the data file; a hidden option still parses.
    let standalone = cronq(&["standalone", "--help"]);
    assert!(standalone.contains("\nExamples:\n  cronq "), "{standalone}");
    for unused in [
        "--amqp-url",
        "--redis-url",
        "--namespace",
        "Connections (RabbitMQ, Redis)",
    ] {
        assert!(
            !standalone.contains(unused),
            "standalone lists {unused}:\n{standalone}"
        );
    }
    for used in ["--data ", "--data-sync", "--signing-key-file", "--grace"] {
        assert!(
            standalone.contains(used),
            "standalone lacks {used}:\n{standalone}"
        );
    }
    for fleet in ["producer", "consumer"] {
        let help = cronq(&[fleet, "--help"]);
        assert!(
            help.contains("--amqp-url") && !help.contains("--data-sync"),
            "{fleet}:\n{help}"
        );
    }
    assert!(cronq(&["standalone", "--namespace", "x", "--help"]).contains("--grace"));
    // `next`'s own options come before the connection options (--from was between them).
    let help = cronq(&["next", "--help"]);
    assert!(
        help.find("--from") < help.find("Connections (RabbitMQ, Redis)"),
        "{help}"
    );
}

/// Where `.ci/run` installs `kubernetes-validate` (a virtual environment of its own).
const KUBERNETES_VALIDATE: &str = "/opt/cronq-ci/venv/bin/kubernetes-validate";

#[test]
fn kubernetes_manifests_validate_against_the_schemas() {
    let tool =
        std::env::var("CRONQ_KUBERNETES_VALIDATE").unwrap_or_else(|_| KUBERNETES_VALIDATE.into());
    if !Path::new(&tool).exists() {
        assert!(
            std::env::var_os("CI").is_none(),
            "{tool} is missing under CI: .ci/run installs kubernetes-validate"
        );
        eprintln!(
            "skipped: no {tool} (python3 -m venv /opt/cronq-ci/venv && /opt/cronq-ci/venv/bin/pip install kubernetes-validate)"
        );
        return;
    }
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/kubernetes");
    let mut manifests: Vec<_> = std::fs::read_dir(&dir)
        .expect("deploy/kubernetes")
        .map(|e| e.expect("a manifest").path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    manifests.sort();
    assert_eq!(manifests.len(), 3, "{manifests:?}");
    let out = Command::new(&tool)
        .args(["--strict", "--no-warn"])
        .args(&manifests)
        .output()
        .expect("kubernetes-validate runs");
    assert!(
        out.status.success(),
        "kubernetes-validate: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    // The probes go through `cronq probe` to the admin endpoints each process serves.
    for m in &manifests {
        let text = std::fs::read_to_string(m).expect("a manifest");
        if text.contains("kind: Deployment") {
            for path in ["/healthz", "/readyz"] {
                assert!(
                    text.contains(&format!(
                        "\"cronq\", \"probe\", \"http://127.0.0.1:9090{path}\""
                    )),
                    "{}: no {path} probe",
                    m.display()
                );
            }
        }
    }
}
