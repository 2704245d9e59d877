//! A small tmpfs mounted in a test's directory, for the data file's start errors: a
//! read-only path, a full disk. Mounting needs root (CI runs the tests as root); without
//! it a test says why and passes, unless `CI` is set, where it fails. The mount is undone
//! when the guard drops, also when the test panics.

use std::path::{Path, PathBuf};
use std::process::Command;

/// A mounted tmpfs; unmounted on drop.
#[derive(Debug)]
pub struct Tmpfs {
    pub dir: PathBuf,
}

impl Tmpfs {
    /// Mounts a tmpfs with `options` (`size=64k`, `ro,size=64k`) at `dir` (created).
    /// `None` when this machine cannot mount and `CI` is not set (the reason is printed).
    ///
    /// # Panics
    /// When the mount fails and `CI` is set.
    pub fn mount(dir: &Path, options: &str) -> Option<Self> {
        std::fs::create_dir_all(dir).expect("create the mount point");
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", options, "tmpfs"])
            .arg(dir)
            .output();
        let why = match out {
            Ok(out) if out.status.success() => {
                return Some(Self {
                    dir: dir.to_owned(),
                });
            }
            Ok(out) => format!(
                "exit {:?}: {}",
                out.status.code(),
                String::from_utf8_lossy(&out.stderr).trim()
            ),
            Err(err) => err.to_string(),
        };
        let msg = format!(
            "cannot mount a tmpfs at {} (-o {options}): {why}; this test needs root",
            dir.display()
        );
        assert!(std::env::var_os("CI").is_none(), "{msg}");
        eprintln!("skipped: {msg}");
        None
    }
}

impl Tmpfs {
    /// Mounts it again with `options` (`ro`); `Err` with `mount`'s message when it refuses
    /// (a file still open for writing makes a read-only remount "busy").
    pub fn remount(&self, options: &str) -> Result<(), String> {
        let out = Command::new("mount")
            .args(["-o", &format!("remount,{options}")])
            .arg(&self.dir)
            .output()
            .map_err(|e| e.to_string())?;
        if out.status.success() {
            Ok(())
        } else {
            Err(String::from_utf8_lossy(&out.stderr).trim().to_owned())
        }
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let out = Command::new("umount").arg("-l").arg(&self.dir).output();
        match out {
            Ok(out) if out.status.success() => {}
            Ok(out) => eprintln!(
                "clean-up: umount {}: {}",
                self.dir.display(),
                String::from_utf8_lossy(&out.stderr).trim()
            ),
            Err(err) => eprintln!("clean-up: umount {}: {err}", self.dir.display()),
        }
    }
}
