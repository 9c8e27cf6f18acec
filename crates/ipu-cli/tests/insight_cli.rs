//! The trace, the HTML report, `ipu report` and the run database, through the `ipu` binary.
//! Every run here writes into a scratch directory and a scratch database.

mod common;

use std::path::Path;

use common::{ipu_quiet, refused, scratch_in, stdout, succeeded};
use serde_json::Value;

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// `ipu run matmul` on 4 tiles into `dir`, recorded in `db`.
fn run_small(dir: &Path, db: &Path, extra: &[&str]) -> String {
    let mut args = vec![
        "run",
        "matmul",
        "--tiles",
        "4",
        "--artifacts",
        s(dir),
        "--db",
        s(db),
    ];
    args.extend_from_slice(extra);
    let (out, _) = succeeded(&ipu_quiet(&args));
    out
}

#[test]
fn a_run_writes_a_trace_in_the_trace_event_format() {
    let d = scratch_in("insight", "trace");
    let out = run_small(&d.join("a"), &d.join("runs.sqlite"), &[]);
    assert!(out.contains("trace="), "{out}");
    let trace: Value =
        serde_json::from_str(&std::fs::read_to_string(d.join("a/trace.json")).unwrap()).unwrap();
    let events = trace["traceEvents"].as_array().expect("traceEvents");
    assert!(!events.is_empty());
    let (mut slices, mut counters) = (0, 0);
    for e in events {
        for field in ["ph", "name", "pid", "tid", "ts"] {
            assert!(e.get(field).is_some(), "{field} missing in {e}");
        }
        assert!(e["ts"].as_f64().unwrap() >= 0.0, "{e}");
        match e["ph"].as_str().unwrap() {
            "X" => {
                slices += 1;
                assert!(e["dur"].as_f64().expect("dur of an X event") >= 0.0, "{e}");
            }
            "C" => {
                counters += 1;
                let args = e["args"].as_object().expect("counter args");
                assert!(
                    !args.is_empty() && args.values().all(Value::is_number),
                    "{e}"
                );
            }
            "M" => assert!(e["args"]["name"].is_string() || e["args"]["sort_index"].is_number()),
            other => panic!("unexpected phase {other}"),
        }
    }
    assert!(slices > 0 && counters > 0);
    // The step slices (process 1, named `KIND NAME`) add up to the call's cycles, and compute
    // steps carry the compiler's estimate beside the simulated cycles.
    let clock = trace["otherData"]["clock_hz"].as_f64().unwrap();
    let cycles = trace["otherData"]["call_cycles"].as_f64().unwrap();
    let steps: Vec<&Value> = events
        .iter()
        .filter(|e| e["ph"] == "X" && e["pid"] == 1 && e["args"].get("simulated_cycles").is_some())
        .collect();
    let total: f64 = steps.iter().map(|e| e["dur"].as_f64().unwrap()).sum();
    assert!(
        (total - cycles * 1e6 / clock).abs() < 0.01,
        "{total} vs {cycles}"
    );
    assert!(
        steps
            .iter()
            .any(|e| e["args"]["kind"] == "compute" && e["args"]["estimated_cycles"].is_u64())
    );
    let report: Value = common::read_json(&d.join("a/report.json"));
    assert_eq!(report["device"]["cycles"].as_f64().unwrap(), cycles);
}

#[test]
fn the_html_report_is_self_contained_and_ipu_report_redraws_it_identically() {
    let d = scratch_in("insight", "html");
    let dir = d.join("a");
    run_small(&dir, &d.join("runs.sqlite"), &[]);
    let html = std::fs::read_to_string(dir.join("report.html")).unwrap();
    for needle in [
        "id=\"report-data\"",
        "data-ok",
        "Memory",
        "Execution",
        "Exchange",
        "Planner",
    ] {
        assert!(html.contains(needle), "{needle} missing");
    }
    for net in ["src=\"http", "href=\"http", "@import", "<link"] {
        assert!(
            !html.contains(net),
            "the report refers to the network: {net}"
        );
    }
    let again = d.join("again.html");
    let o = ipu_quiet(&["report", s(&dir), "-o", s(&again)]);
    succeeded(&o);
    assert_eq!(std::fs::read_to_string(&again).unwrap(), html);
}

#[test]
fn ipu_report_refuses_a_run_directory_without_a_profile() {
    let d = scratch_in("insight", "no-profile");
    let dir = d.join("a");
    succeeded(&ipu_quiet(&[
        "run",
        "matmul",
        "--tiles",
        "4",
        "--artifacts",
        s(&dir),
        "--no-db",
    ]));
    std::fs::remove_file(dir.join("execution.profile.json")).unwrap();
    refused(&ipu_quiet(&["report", s(&dir)]), "has no profile");
    refused(
        &ipu_quiet(&["report", s(&d.join("nothing"))]),
        "not a directory",
    );
}

#[test]
fn a_refused_build_writes_a_report_with_its_error() {
    let d = scratch_in("insight", "refused");
    let dir = d.join("a");
    let o = ipu_quiet(&[
        "run",
        "attention",
        "--set",
        "seq=512",
        "--tiles",
        "4",
        "--artifacts",
        s(&dir),
        "--no-db",
    ]);
    refused(&o, "does not fit in tile memory");
    let html = std::fs::read_to_string(dir.join("report.html")).unwrap();
    assert!(html.contains("does_not_fit"));
    succeeded(&ipu_quiet(&["report", s(&dir), "-o", s(&d.join("r.html"))]));
}

#[test]
fn a_planning_refusal_writes_the_memory_view_of_every_tile() {
    // The mlp's first layer is refused at planning: the report draws each tile's live values
    // (the weights of every layer, a quarter on each tile) and the error names the busiest.
    let d = scratch_in("insight", "planning-refused");
    let dir = d.join("a");
    let o = ipu_quiet(&[
        "run",
        "mlp",
        "--set",
        "width=4096",
        "--set",
        "depth=3",
        "--tiles",
        "4",
        "--artifacts",
        s(&dir),
        "--no-db",
    ]);
    let err = refused(&o, "busiest tile 0: %w0 8388608 bytes, %w1 8388608 bytes");
    assert_eq!(err.matches("busiest tile").count(), 1, "named once: {err}");
    let report: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("report.json")).unwrap()).unwrap();
    assert_eq!(report["error"]["tile"], 0, "{report}");
    let b = &report["busiest_tile"];
    assert_eq!(b["planning_refusal"], true, "{report}");
    let names: Vec<&str> = b["largest_buffers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x["name"].as_str().unwrap())
        .collect();
    assert!(
        names.contains(&"%w2") && names.contains(&"%h0 working set (estimate)"),
        "{names:?}"
    );
    assert!(dir.join("build.view.json").exists());
    let html = std::fs::read_to_string(dir.join("report.html")).unwrap();
    assert!(html.contains("\"planning\":true") && html.contains("Planning refused an operation"));
}

#[test]
fn runs_are_listed_newest_first_shown_and_compared() {
    let d = scratch_in("insight", "runs");
    let db = d.join("runs.sqlite");
    run_small(&d.join("a"), &db, &[]);
    run_small(&d.join("b"), &db, &["--set", "n=512"]);
    let list = stdout(&succeeded_o(&["runs", "list", "--db", s(&db)]));
    let ids: Vec<i64> = list
        .lines()
        .map(|l| l.split_whitespace().next().unwrap().parse().unwrap())
        .collect();
    assert_eq!(ids, vec![2, 1], "{list}");
    let show = stdout(&succeeded_o(&["runs", "show", "1", "--db", s(&db)]));
    for needle in [
        "model=matmul",
        "graph_hash=",
        "step kind name",
        "check output=c",
        "memory region=standard",
    ] {
        assert!(show.contains(needle), "{needle} missing in\n{show}");
    }
    let cmp = stdout(&succeeded_o(&["runs", "compare", "1", "2", "--db", s(&db)]));
    for needle in [
        "cycles",
        "step 0",
        "memory standard peak bytes",
        "output c max_abs_error",
        "differs",
    ] {
        assert!(cmp.contains(needle), "{needle} missing in\n{cmp}");
    }
    refused(
        &ipu_quiet(&["runs", "show", "9", "--db", s(&db)]),
        "no run with id 9",
    );
}

fn succeeded_o(args: &[&str]) -> std::process::Output {
    let o = ipu_quiet(args);
    succeeded(&o);
    o
}

#[test]
fn a_newer_or_corrupt_database_is_refused_and_a_run_still_completes() {
    let d = scratch_in("insight", "bad-db");
    let newer = d.join("newer.sqlite");
    {
        let c = rusqlite::Connection::open(&newer).unwrap();
        c.pragma_update(None, "user_version", 99).unwrap();
    }
    refused(
        &ipu_quiet(&["runs", "list", "--db", s(&newer)]),
        "schema version is 99",
    );
    let corrupt = d.join("corrupt.sqlite");
    std::fs::write(&corrupt, vec![0x5a; 8192]).unwrap();
    refused(
        &ipu_quiet(&["runs", "list", "--db", s(&corrupt)]),
        "not a SQLite database",
    );
    // The run completes, passes, and says its record was not kept.
    let o = ipu_quiet(&[
        "run",
        "matmul",
        "--tiles",
        "4",
        "--artifacts",
        s(&d.join("a")),
        "--db",
        s(&corrupt),
    ]);
    let (out, err) = succeeded(&o);
    assert!(err.contains("record was not kept"), "{err}");
    assert!(
        out.contains("run_id=none") && out.contains("deviceTest=PASS"),
        "{out}"
    );
}

#[test]
fn parallel_processes_recording_runs_lose_nothing() {
    let d = scratch_in("insight", "parallel");
    let db = d.join("runs.sqlite");
    let pkg = d.join("m.ipuexe");
    succeeded(&ipu_quiet(&[
        "build",
        "matmul",
        "--tiles",
        "2",
        "--set",
        "m=16",
        "--set",
        "k=16",
        "--set",
        "n=16",
        "-o",
        s(&pkg),
    ]));
    const PROCESSES: usize = 8;
    let handles: Vec<_> = (0..PROCESSES)
        .map(|i| {
            std::process::Command::new(env!("CARGO_BIN_EXE_ipu"))
                .args(["exec", s(&pkg), "--db", s(&db), "--seed", &i.to_string()])
                .args(["--lock", s(&d.join(format!("plock{i}")))])
                .env("IPU_LOG", "warn")
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for h in handles {
        let o = h.wait_with_output().unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        assert!(String::from_utf8_lossy(&o.stdout).contains("run_id="));
    }
    let list = stdout(&succeeded_o(&["runs", "list", "--db", s(&db)]));
    let mut ids: Vec<i64> = list
        .lines()
        .map(|l| l.split_whitespace().next().unwrap().parse().unwrap())
        .collect();
    ids.sort_unstable();
    assert_eq!(ids, (1..=PROCESSES as i64).collect::<Vec<_>>(), "{list}");
}
