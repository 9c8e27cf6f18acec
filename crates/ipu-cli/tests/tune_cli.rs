//! `ipu tune`, the search incumbent a later `ipu build` resumes from, `--search-budget`, and
//! `ipu sweep`: through the real binary, with every database and artifacts directory in a
//! scratch directory.

mod common;

use common::{assert_contains, ipu, read_json, refused, scratch_in, succeeded};

use std::path::{Path, PathBuf};

fn scratch(name: &str) -> PathBuf {
    scratch_in("tune-cli", name)
}

/// A small matmul whose planner keeps three finalists.
const MODEL: [&str; 9] = [
    "matmul", "--set", "m=64", "--set", "k=64", "--set", "n=64", "--tiles", "16",
];

fn with(base: &[&str], extra: &[&str]) -> Vec<String> {
    base.iter().chain(extra).map(|s| s.to_string()).collect()
}

fn run(args: &[String]) -> std::process::Output {
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    ipu(&refs)
}

fn tune(d: &Path, db: &Path) -> String {
    let mut args = vec!["tune".to_string()];
    args.extend(with(
        &MODEL,
        &[
            "--db",
            db.to_str().unwrap(),
            "--lock",
            d.join("device.lock").to_str().unwrap(),
        ],
    ));
    succeeded(&run(&args)).0
}

fn build(db: &Path, package: &Path) -> String {
    let mut args = vec!["build".to_string()];
    args.extend(with(
        &MODEL,
        &[
            "--db",
            db.to_str().unwrap(),
            "-o",
            package.to_str().unwrap(),
        ],
    ));
    succeeded(&run(&args)).1
}

fn field(line: &str, key: &str) -> u64 {
    line.split_whitespace()
        .find_map(|w| w.strip_prefix(&format!("{key}=")))
        .unwrap_or_else(|| panic!("{key} missing in {line}"))
        .parse()
        .unwrap()
}

#[test]
fn tune_finds_a_plan_at_least_as_fast_and_the_next_build_resumes_byte_identical() {
    let d = scratch("resume");
    let db = d.join("runs.sqlite");
    // Before any tune: nothing to resume.
    let err = build(&db, &d.join("before.ipuexe"));
    assert_contains(
        &err,
        &["validated search incumbent cycles=", "resuming=false"],
    );
    let out = tune(&d, &db);
    // Every candidate's estimate against its measurement.
    let candidates: Vec<&str> = out
        .lines()
        .filter(|l| l.starts_with("candidate="))
        .collect();
    assert!(candidates.len() >= 2, "{out}");
    for c in &candidates {
        assert_contains(c, &["estimated_cycles=", "measured_cycles=", "result=PASS"]);
    }
    let tuned = out.lines().find(|l| l.starts_with("tuned ")).unwrap();
    assert!(field(tuned, "tuned_cycles") <= field(tuned, "planner_cycles"));
    // The next build resumes, and again gives the same bytes.
    let err = build(&db, &d.join("a.ipuexe"));
    assert_contains(
        &err,
        &["validated search incumbent cycles=", "resuming=true"],
    );
    build(&db, &d.join("b.ipuexe"));
    let a = std::fs::read(d.join("a.ipuexe")).unwrap();
    assert_eq!(a, std::fs::read(d.join("b.ipuexe")).unwrap());
    // The measurements are kept.
    let c = rusqlite::Connection::open(&db).unwrap();
    let n: i64 = c
        .query_row("SELECT count(*) FROM tune_measurements", [], |r| r.get(0))
        .unwrap();
    assert_eq!(n as usize, candidates.len());
}

#[test]
fn stale_and_corrupt_incumbents_are_reported_and_ignored() {
    let d = scratch("stale");
    let db = d.join("runs.sqlite");
    tune(&d, &db);
    let fresh = d.join("fresh.ipuexe");
    std::fs::write(&fresh, []).unwrap();
    let c = rusqlite::Connection::open(&db).unwrap();
    let cases = [
        (
            "UPDATE incumbents SET compiler_version = '0.0.0-old'",
            "compiler version 0.0.0-old",
        ),
        (
            "UPDATE incumbents SET graph_hash = 'feedface'",
            "the graph changed",
        ),
        ("UPDATE incumbents SET choices = 'not json'", "corrupt"),
        (
            r#"UPDATE incumbents SET choices = '{"mm":{"finalist":1,"mapping":"matmul rows/1 column-groups/1 k-chunks/1 mode=F16F32"}}'"#,
            "the stored incumbent was refused",
        ),
    ];
    for (sql, needle) in cases {
        // Each case from a clean record.
        c.execute_batch("DELETE FROM incumbents").unwrap();
        tune(&d, &db);
        c.execute_batch(sql).unwrap();
        let err = build(&db, &d.join("stale.ipuexe"));
        assert_contains(&err, &["resuming=false", needle]);
    }
}

#[test]
fn search_budget_bounds_the_planner_and_says_why_it_stopped() {
    let d = scratch("budget");
    let db = d.join("none.sqlite");
    let err = build(&db, &d.join("full.ipuexe"));
    assert_contains(&err, &["planner search stopped", "space exhausted"]);
    let mut args = vec!["build".to_string()];
    args.extend(with(
        &MODEL,
        &[
            "--search-budget",
            "2",
            "--db",
            db.to_str().unwrap(),
            "-o",
            d.join("bounded.ipuexe").to_str().unwrap(),
        ],
    ));
    let err = succeeded(&run(&args)).1;
    assert_contains(
        &err,
        &["planner search stopped", "candidate budget reached"],
    );
    let o = ipu(&["build", "matmul", "--search-budget", "0", "-o", "/dev/null"]);
    refused(&o, "a search budget is at least 1");
}

fn sweep(d: &Path, sets: &[&str]) -> std::process::Output {
    let mut args = vec!["sweep", "matmul"];
    for s in sets {
        args.extend(["--set", s]);
    }
    let db = d.join("runs.sqlite");
    let art = d.join("sweep");
    args.extend([
        "--tiles",
        "4",
        "--artifacts",
        art.to_str().unwrap(),
        "--db",
        db.to_str().unwrap(),
    ]);
    ipu(&args)
}

#[test]
fn sweep_runs_the_grid_writes_its_summary_and_resumes_only_missing_points() {
    let d = scratch("sweep");
    let (out, _) = succeeded(&sweep(&d, &["m=8,16", "n=8", "k=16"]));
    assert_contains(&out, &["sweep points=2 recorded=0 to_run=2", "pass=2"]);
    let art = d.join("sweep");
    for p in ["m=8_n=8_k=16_tiles=4", "m=16_n=8_k=16_tiles=4"] {
        let point = read_json(&art.join(p).join("point.json"));
        assert_eq!(point["result"], "PASS");
        assert!(art.join(p).join("model.ipuexe").exists());
        assert!(art.join(p).join("report.html").exists());
    }
    let csv = std::fs::read_to_string(art.join("summary.csv")).unwrap();
    assert_eq!(csv.lines().count(), 3, "{csv}");
    assert!(csv.starts_with("m,n,k,tiles,result,cycles,"), "{csv}");
    let html = std::fs::read_to_string(art.join("summary.html")).unwrap();
    assert_contains(&html, &["<svg", "<table", "m=16_n=8_k=16_tiles=4"]);
    assert!(!html.contains("<script src") && !html.contains("http://cdn"));
    // A point that did not finish runs again; the others are skipped.
    std::fs::remove_file(art.join("m=16_n=8_k=16_tiles=4/point.json")).unwrap();
    let (out, _) = succeeded(&sweep(&d, &["m=8,16", "n=8", "k=16"]));
    assert_contains(&out, &["sweep points=2 recorded=1 to_run=1"]);
}

#[test]
fn sweep_refuses_empty_and_malformed_lists_naming_the_key() {
    let d = scratch("sweep-bad");
    refused(&sweep(&d, &["m="]), "--set m: the list of values is empty");
    refused(&sweep(&d, &["m=8,,16"]), "--set m: an empty value");
    refused(&sweep(&d, &["m"]), "--set `m`");
    refused(&sweep(&d, &["nosuch=1"]), "nosuch");
    // A malformed value anywhere in a list, not only in the first point.
    refused(&sweep(&d, &["m=8,x"]), "--set m: value `x`");
    assert!(!d.join("sweep").join("summary.csv").exists());
}
