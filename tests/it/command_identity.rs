//! How a real `cronq standalone` starts a job's command: as its `user` and `group` (when
//! cronq runs as root), in its `cwd`, with its `env` on top of an environment `clear_env`
//! emptied, the payload on stdin only; and a `user`, `group` or `cwd` this machine cannot
//! give stops it at start (exit 2) with the file, the job and the field named.

use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

use nix::unistd::{Group, Uid, User};

use crate::support::{TestEnv, eventually, scoped};

/// Starts `cronq standalone --data :memory:` on `toml`.
fn standalone(env: &TestEnv, toml: &str) -> u32 {
    let config = env.write_config("cronq.toml", toml);
    let mut cmd = env.cronq();
    cmd.env("CRONQ_INHERITED_MARK", "from-the-consumer")
        .args(["standalone", "--data", ":memory:", "--config"])
        .arg(&config);
    env.spawn_command("standalone", cmd)
}

/// The unprivileged account the root-only test runs the command as.
fn nobody() -> Option<(User, Group)> {
    let user = User::from_name("nobody").ok()??;
    let group = Group::from_gid(user.gid).ok()??;
    Some((user, group))
}

#[tokio::test(flavor = "multi_thread")]
async fn a_command_runs_as_its_user_in_its_cwd_with_its_env_and_the_payload_on_stdin_only() {
    if !Uid::effective().is_root() {
        // CI runs as root (.ci/run): there a skip would hide the test, so it fails instead.
        assert!(
            std::env::var_os("CI").is_none(),
            "CI=true but not root: this test runs a command as another user and needs root"
        );
        eprintln!(
            "skipped: running a command as another user needs root (CI runs as root); \
             `a_user_group_or_cwd_this_machine_cannot_give_stops_the_start` covers the refusal"
        );
        return;
    }
    let (user, group) = nobody().expect("the nobody account (every Debian has it)");
    scoped("cmd-identity", |env| async move {
        // A directory the user may write in, outside the test's own.
        let work = env.dir.join("work");
        std::fs::create_dir(&work).unwrap();
        std::fs::set_permissions(&work, std::fs::Permissions::from_mode(0o777)).unwrap();
        let script =
            "{ id -u; id -g; id -G; pwd; cat; echo; echo \"args:$#\"; env | sort; } > seen.txt";
        let toml = format!(
            r#"
[[job]]
name = "who"
schedule = "@every 1s"
max_attempts = 1
payload = {{ secret = "s3cret-payload" }}
command = ["/bin/sh", "-c", {script:?}]
user = "nobody"
cwd = "{}"
clear_env = true
env = {{ PATH = "/usr/bin:/bin", GREETING = "hello" }}
"#,
            work.display()
        );
        standalone(&env, &toml);
        let seen = work.join("seen.txt");
        let text = eventually(Duration::from_secs(20), "the command's report", || async {
            std::fs::read_to_string(&seen)
                .ok()
                .filter(|t| t.contains("CRONQ_KEY="))
        })
        .await;
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], user.uid.to_string(), "{text}");
        assert_eq!(lines[1], group.gid.to_string(), "{text}");
        assert_eq!(
            lines[2],
            group.gid.to_string(),
            "no supplementary group of root's is left: {text}"
        );
        assert_eq!(lines[3], work.display().to_string(), "{text}");
        assert!(
            lines[4].contains("\"secret\":\"s3cret-payload\""),
            "the payload on stdin: {text}"
        );
        assert_eq!(
            lines[5], "args:0",
            "nothing but the argv on its command line: {text}"
        );
        let env_lines = &lines[6..];
        for expected in [
            "GREETING=hello",
            "PATH=/usr/bin:/bin",
            "USER=nobody",
            "LOGNAME=nobody",
            "CRONQ_JOB=who",
        ] {
            assert!(env_lines.contains(&expected), "{expected} in {text}");
        }
        assert!(env_lines.iter().any(|l| l.starts_with("HOME=")), "{text}");
        assert!(
            !text.contains("CRONQ_INHERITED_MARK") && !text.contains("CRONQ_NAMESPACE"),
            "clear_env starts from an empty environment: {text}"
        );
        assert!(
            !env_lines.iter().any(|l| l.contains("s3cret-payload")),
            "the payload is not in the environment: {text}"
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn without_clear_env_the_command_inherits_the_consumer_environment_under_its_env() {
    scoped("cmd-env", |env| async move {
        let out = env.dir.join("env.txt");
        let toml = format!(
            r#"
[[job]]
name = "envy"
schedule = "@every 1s"
max_attempts = 1
command = ["/bin/sh", "-c", "env > {}"]
env = {{ JOB_MARK = "set-by-the-job", LANG = "C.UTF-8" }}
"#,
            out.display()
        );
        standalone(&env, &toml);
        let text = eventually(
            Duration::from_secs(20),
            "the command's environment",
            || async {
                std::fs::read_to_string(&out)
                    .ok()
                    .filter(|t| t.contains("CRONQ_KEY="))
            },
        )
        .await;
        for expected in [
            "CRONQ_INHERITED_MARK=from-the-consumer",
            "JOB_MARK=set-by-the-job",
            "LANG=C.UTF-8",
        ] {
            assert!(text.lines().any(|l| l == expected), "{expected} in {text}");
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_user_group_or_cwd_this_machine_cannot_give_stops_the_start() {
    scoped("cmd-refused", |env| async move {
        // Someone else than this process: refused when not root; unknown names either way.
        let other = if Uid::effective().is_root() {
            "no-such-user-cronq"
        } else {
            "root"
        };
        let toml = format!(
            r#"
[[job]]
name = "as-other"
schedule = "@every 1s"
command = ["true"]
user = "{other}"

[[job]]
name = "bad-group"
schedule = "@every 1s"
command = ["true"]
group = "no-such-group-cronq"

[[job]]
name = "bad-cwd"
schedule = "@every 1s"
command = ["true"]
cwd = "/no/such/dir/cronq"
"#
        );
        let config = env.write_config("cronq.toml", &toml);
        let out = env
            .cronq()
            .args(["standalone", "--data", ":memory:", "--config"])
            .arg(&config)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        let file = config.display().to_string();
        for expected in [
            format!("{file}: job \"as-other\": user: "),
            format!("{file}: job \"bad-group\": group: no group \"no-such-group-cronq\""),
            format!("{file}: job \"bad-cwd\": cwd: /no/such/dir/cronq is not a directory"),
        ] {
            assert!(stderr.contains(&expected), "{expected} in:\n{stderr}");
        }
    })
    .await;
}
