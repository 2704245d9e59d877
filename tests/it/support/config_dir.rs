//! A private directory of config files for the tests that run `cronq` without services
//! (`check`, `next`): write files, run the binary in it, read its output.

use std::path::PathBuf;
use std::process::{Command, Output};

/// A private temporary directory holding config files, removed on drop (even on panic).
pub struct ConfigDir {
    /// Where the files are.
    pub dir: PathBuf,
}

impl ConfigDir {
    /// A fresh, empty directory for test `test`.
    pub fn new(test: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("t-{test}-{:08x}", rand::random::<u32>()));
        std::fs::create_dir_all(&dir).expect("create test dir");
        Self { dir }
    }

    /// Writes `cronq.toml` with `text`.
    pub fn with(test: &str, text: &str) -> Self {
        let dir = Self::new(test);
        dir.write("cronq.toml", text);
        dir
    }

    /// Writes the file `name` with `text`.
    pub fn write(&self, name: &str, text: &str) {
        std::fs::write(self.dir.join(name), text).expect("write config");
    }

    /// Runs `cronq ARGS` in the directory, so `--config cronq.toml` is relative.
    pub fn run(&self, args: &[&str]) -> Output {
        Command::new(env!("CARGO_BIN_EXE_cronq"))
            .args(args)
            .current_dir(&self.dir)
            .env_remove("CRONQ_CONFIG")
            .env_remove("RUST_LOG")
            .output()
            .expect("run cronq")
    }
}

impl Drop for ConfigDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A command's stdout as text.
pub fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A command's stderr as text.
pub fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}
