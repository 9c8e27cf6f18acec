//! What the command-line test suites share: running the built `ipu` binary, its output as
//! text, scratch directories.

#![allow(dead_code)]

use std::path::PathBuf;
use std::process::{Command, Output};

/// Runs `ipu` with `args`, logging at the default level (info) on stderr.
pub fn ipu(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ipu"))
        .args(args)
        .output()
        .expect("ipu runs")
}

/// Runs `ipu` with `args`, logging warnings only.
pub fn ipu_quiet(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ipu"))
        .args(args)
        .env("IPU_LOG", "warn")
        .output()
        .expect("run ipu")
}

/// Standard output as text.
pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Standard error as text.
pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Standard output and standard error as text.
pub fn text(o: &Output) -> (String, String) {
    (stdout(o), stderr(o))
}

/// An empty scratch directory `ipu-SUITE-PID-NAME` in the system's temporary directory.
pub fn scratch_in(suite: &str, name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("ipu-{suite}-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}
