//! `ipu sim` and `ipu bench amp` end to end: counters, faults (exit 1), assembly errors
//! (file:line:column, exit 2), the benchmark's JSON.

mod common;

use common::{assert_line_starts, ipu, stdout, succeeded};

use std::path::PathBuf;

fn write(name: &str, text: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("ipu-sim-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

#[test]
fn sim_prints_counters() {
    let f = write(
        "ok.s",
        "main:\n setzi $m1, w\n run $m1, $m2\n waitw\n sync\n halt\n .align 8\nw:\n rpt 10, 1\n nop\n exit\n",
    );
    let o = ipu(&[
        "sim",
        f.to_str().unwrap(),
        "--tiles",
        "4",
        "--target",
        "bow",
    ]);
    let (s, _) = succeeded(&o);
    assert_line_starts(
        &s,
        &[
            "cycles=",
            "compute_cycles=",
            "exchange_cycles=0",
            "sync_cycles=",
            "instructions=",
            "device=simulator",
        ],
    );
    // Supervisor: setzi, run, waitw; the worker runs 12 slots from cycle 6: waitw ends at 78;
    // then the sync (90).
    assert!(s.contains("\ncycles=168\n"), "{s}");
    assert!(s.contains("compute_cycles=78\n"), "{s}");
}

#[test]
fn sim_reports_a_fault_and_exits_1() {
    let f = write(
        "fault.s",
        "main:\n li $m1, 0x80004\n ld64 $a0:1, $m1, 0\n halt\n",
    );
    let o = ipu(&["sim", f.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1), "{o:?}");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains(
            "device fault: tile 0, supervisor, pc 0x4c008, `ld64 $a0:1, $m1, 0`, address 0x80004"
        ),
        "{err}"
    );
    assert!(!err.contains("panicked"));
}

#[test]
fn sim_cycle_limit_is_a_fault() {
    let f = write("spin.s", "main:\nspin: bri spin\n");
    let o = ipu(&["sim", f.to_str().unwrap(), "--max-cycles", "600"]);
    assert_eq!(o.status.code(), Some(1), "{o:?}");
    assert!(
        String::from_utf8_lossy(&o.stderr)
            .contains("reached cycle 600, the end of the run's cycle budget")
    );
}

#[test]
fn sim_assembly_error_gives_file_line_column_and_exits_2() {
    let f = write("bad.s", "main:\n  nop\n  frobnicate $m1\n");
    let o = ipu(&["sim", f.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2), "{o:?}");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("bad.s:3:3:"), "{err}");
}

#[test]
fn bench_amp_json_on_a_few_tiles() {
    let o = ipu(&[
        "bench", "amp", "--target", "bow", "--rows", "16,64", "--tiles", "8", "--json",
    ]);
    assert_eq!(o.status.code(), Some(0), "{o:?}");
    let v: serde_json::Value = serde_json::from_str(stdout(&o).trim()).expect("one JSON object");
    assert_eq!(v["target"], "bow");
    assert_eq!(v["tiles"], 8);
    let rows = v["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 2);
    assert_eq!(rows[0]["n"], 16);
    let (c, e) = (
        rows[1]["cycles"].as_u64().unwrap(),
        rows[1]["efficiency"].as_f64().unwrap(),
    );
    assert!((e - 64.0 * 4.0 / c as f64).abs() < 0.001, "{v}");
}

#[test]
fn bench_amp_table() {
    let o = ipu(&["bench", "amp", "--rows", "32", "--tiles", "2"]);
    assert_eq!(o.status.code(), Some(0), "{o:?}");
    assert!(stdout(&o).contains("verified="), "{}", stdout(&o));
}
