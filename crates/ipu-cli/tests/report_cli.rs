//! The run report's figures of what simulating cost the host.

mod common;

use common::{ipu_quiet, scratch_in};

#[test]
fn the_report_gives_simulated_instructions_seconds_and_their_ratio() {
    let d = scratch_in("report", "sim-cost");
    let report = d.join("r.json");
    let o = ipu_quiet(&[
        "run",
        "matmul",
        "--tiles",
        "4",
        "--report",
        report.to_str().unwrap(),
        "--artifacts",
        d.join("a").to_str().unwrap(),
    ]);
    assert!(o.status.success());
    let r: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    let dev = &r["device"];
    let n = dev["simulated_worker_instructions"].as_u64().unwrap();
    let s = dev["simulation_seconds"].as_f64().unwrap();
    let rate = dev["simulated_worker_instructions_per_second"]
        .as_f64()
        .unwrap();
    assert!(n > 0 && n <= dev["instructions"].as_u64().unwrap());
    assert!(s > 0.0);
    assert!(
        (rate - n as f64 / s).abs() <= 1.0 + 1e-6 * rate,
        "{rate} vs {n} / {s}"
    );
    // Bank conflicts: none in this build, in the report, the profile and the HTML report.
    assert_eq!(dev["bank_conflicts"].as_u64(), Some(0));
    let profile: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(d.join("a/execution.profile.json")).unwrap())
            .unwrap();
    assert_eq!(profile["entry_conflicts"], serde_json::json!([]));
    let html = std::fs::read_to_string(d.join("a/report.html")).unwrap();
    assert!(html.contains("Bank conflicts by kernel"));
}

#[test]
fn bench_sim_prints_one_json_object_of_rows_per_thread_count() {
    let o = ipu_quiet(&[
        "bench",
        "sim",
        "--only",
        "typed",
        "--runs",
        "1",
        "--threads",
        "1,2",
        "--json",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let rows = j["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 2);
    for (row, threads) in rows.iter().zip([1, 2]) {
        assert_eq!(row["model"], "typed-attention-small-fp8");
        assert_eq!(row["threads"], threads);
        assert!(row["instructions"].as_u64().unwrap() > 0);
        assert!(row["seconds"].as_f64().unwrap() > 0.0);
        assert!(row["instructions_per_second"].as_f64().unwrap() > 0.0);
    }
    // The same instructions on any thread count.
    assert_eq!(rows[0]["instructions"], rows[1]["instructions"]);
}
