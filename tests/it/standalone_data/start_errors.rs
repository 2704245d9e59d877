//! A data file cronq cannot use stops `cronq standalone` at start, with exit code 1 and a
//! message that names the file, and leaves the file as it was: a schema newer than this
//! build, a file that is not a SQLite database, a read-only path, a full disk.

use std::io::Write as _;
use std::path::Path;
use std::time::Duration;

use crate::support::data_file::{DataFile, open, raw};
use crate::support::tmpfs::Tmpfs;
use crate::support::{TestEnv, scoped, until};

/// How long a refused start may take.
const REFUSED_WITHIN: Duration = Duration::from_secs(10);

/// A config with one job.
const TOML: &str = "[[job]]\nname = \"tick\"\nschedule = \"@every 1s\"\ncommand = [\"true\"]\n";

/// Starts `cronq standalone` on `data`; asserts it exits 1 within [`REFUSED_WITHIN`] with a
/// last line `cronq: …` that names `data`; returns that line.
fn refused(env: &TestEnv, log: &str, data: &Path) -> String {
    let config = env.write_config("cronq.toml", TOML);
    let mut cmd = env.cronq();
    cmd.env_remove("CRONQ_DATA")
        .args(["standalone", "--config"])
        .arg(&config)
        .arg("--data")
        .arg(data);
    let pid = env.spawn_command(log, cmd);
    let code = env.wait(pid, REFUSED_WITHIN);
    let stderr = env.log(log);
    assert_eq!(
        code,
        Some(1),
        "cronq standalone --data {} did not exit 1 within {REFUSED_WITHIN:?}:\n{stderr}",
        data.display()
    );
    let last = stderr.lines().last().unwrap_or_default().to_owned();
    assert!(
        last.starts_with("cronq: ") && last.contains(&data.display().to_string()),
        "the error does not name the data file {}:\n{stderr}",
        data.display()
    );
    last
}

#[tokio::test]
async fn a_schema_newer_than_this_build_is_refused() {
    scoped("sd-err-schema", |env: TestEnv| async move {
        let file = DataFile::new(&env, TOML);
        drop(open(&file.path));
        assert!(
            raw::user_version(&file.path) > 0,
            "the schema version is kept in user_version"
        );
        raw::set_user_version(&file.path, 999);
        let line = refused(&env, "standalone", &file.path);
        assert!(
            line.contains("schema version 999, newer than this cronq knows"),
            "{line}"
        );
        assert_eq!(
            raw::user_version(&file.path),
            999,
            "the file was left alone"
        );
        // The operations commands refuse it too.
        let out = file.command(&["jobs"]);
        assert_eq!(out.status.code(), Some(1));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(&file.arg()), "{err}");
    })
    .await;
}

#[tokio::test]
async fn a_file_that_is_not_a_database_is_refused() {
    scoped("sd-err-corrupt", |env: TestEnv| async move {
        let file = DataFile::new(&env, TOML);
        let mut bytes = b"this is not a SQLite database\n".to_vec();
        bytes.extend((0..8192).map(|_| rand::random::<u8>()));
        std::fs::File::create(&file.path)
            .and_then(|mut f| f.write_all(&bytes))
            .unwrap();
        let line = refused(&env, "standalone", &file.path);
        assert!(line.contains("is not a cronq data file"), "{line}");
        assert_eq!(
            std::fs::read(&file.path).unwrap(),
            bytes,
            "the file was changed"
        );
        let out = file.command(&["runs"]);
        assert_eq!(out.status.code(), Some(1));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(&file.arg()), "{err}");
    })
    .await;
}

#[tokio::test]
async fn a_read_only_path_is_refused() {
    scoped("sd-err-readonly", |env: TestEnv| async move {
        let dir = env.dir.join("ro");
        let Some(mount) = Tmpfs::mount(&dir, "size=16m") else {
            return;
        };
        // An existing data file on a file system remounted read-only ...
        let existing = mount.dir.join("cronq.db");
        drop(open(&existing));
        // The dropped connection is closed by its own thread, a moment later.
        until(
            Duration::from_secs(10),
            "the tmpfs to remount read-only",
            || async { mount.remount("ro") },
        )
        .await;
        let line = refused(&env, "existing", &existing);
        assert!(line.contains("cannot be created or written"), "{line}");
        // ... and a new one there.
        let line = refused(&env, "new", &mount.dir.join("new.db"));
        assert!(line.contains("cannot be created or written"), "{line}");
        drop(mount);
    })
    .await;
}

#[tokio::test]
async fn a_full_disk_is_refused() {
    scoped("sd-err-full", |env: TestEnv| async move {
        let dir = env.dir.join("full");
        let Some(mount) = Tmpfs::mount(&dir, "size=64k") else {
            return;
        };
        let mut filler = std::fs::File::create(mount.dir.join("filler")).unwrap();
        let block = [0u8; 4096];
        while filler.write_all(&block).is_ok() {}
        let _ = filler.sync_all();
        let line = refused(&env, "standalone", &mount.dir.join("cronq.db"));
        assert!(
            line.contains("free"),
            "the error says the disk is full: {line}"
        );
        drop(mount);
    })
    .await;
}
