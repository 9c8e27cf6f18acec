//! What the command-line test suites share: running the built `ipu` binary, its output as
//! text, scratch directories.

#![allow(dead_code)]

use std::path::PathBuf;
use std::process::{Command, Output};

/// A data directory of the test processes' own (`XDG_DATA_HOME`), so that a run without
/// `--db` records into a scratch database, never the user's.
pub fn data_home() -> PathBuf {
    std::env::temp_dir().join(format!("ipu-tests-data-{}", std::process::id()))
}

/// Runs `ipu` with `args`, logging at the default level (info) on stderr.
pub fn ipu(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ipu"))
        .args(args)
        .env("XDG_DATA_HOME", data_home())
        .output()
        .expect("ipu runs")
}

/// Runs `ipu` with `args`, logging warnings only.
pub fn ipu_quiet(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ipu"))
        .args(args)
        .env("XDG_DATA_HOME", data_home())
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

/// Standard output and standard error as text, after asserting that `ipu` exited with 0.
pub fn succeeded(o: &Output) -> (String, String) {
    let (out, err) = text(o);
    assert_eq!(o.status.code(), Some(0), "{out}\n{err}");
    (out, err)
}

/// A JSON file (a report) read and parsed.
pub fn read_json(path: &std::path::Path) -> serde_json::Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap()
}

/// Standard error as text, after asserting that `ipu` refused with exit code 2 saying `needle`.
pub fn refused(o: &Output, needle: &str) -> String {
    let err = stderr(o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains(needle), "stderr lacks {needle:?}:\n{err}");
    err
}

/// Asserts that for each of `prefixes` some line of `text` starts with it.
#[track_caller]
pub fn assert_line_starts(text: &str, prefixes: &[&str]) {
    for prefix in prefixes {
        assert!(
            text.lines().any(|l| l.starts_with(prefix)),
            "no line starts with {prefix} in\n{text}"
        );
    }
}

/// Asserts that `text` contains each of `needles`.
#[track_caller]
pub fn assert_contains(text: &str, needles: &[&str]) {
    for needle in needles {
        assert!(text.contains(needle), "{needle:?} missing in\n{text}");
    }
}
