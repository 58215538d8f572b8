//! What the command-line tests share: the binary, scratch directories, failure messages.
// Each test binary uses what it needs of this.
#![allow(dead_code)]

pub mod up;

use std::path::PathBuf;
use std::process::{Command, Output};

/// A scratch directory, unique per test binary, process and test, removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    /// An empty one for `test`.
    pub fn new(test: &str) -> TempDir {
        let dir = std::env::temp_dir().join(format!(
            "onepipe-{}-{}-{test}",
            env!("CARGO_CRATE_NAME"),
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("create temp dir");
        TempDir(dir)
    }

    /// The path of `file` in it.
    pub fn path(&self, file: &str) -> PathBuf {
        self.0.join(file)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Runs `onepipe ARGS` to completion.
pub fn onepipe(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_onepipe"))
        .args(args)
        .output()
        .expect("run onepipe")
}

/// The command, its exit code and its output, for a failed assertion.
pub fn describe(args: &[&str], out: &Output) -> String {
    format!(
        "onepipe {}\nexit: {:?}\nstdout:\n{}\nstderr:\n{}",
        args.join(" "),
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}
