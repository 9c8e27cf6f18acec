//! `ipu build`, `ipu exec` and `ipu run` through the real binary: summary lines, reports, exit
//! codes, and the refusals of bad input.

mod common;

use common::{assert_contains, ipu, read_json, scratch_in, succeeded, text};

use std::path::{Path, PathBuf};
use std::process::Output;

fn scratch(name: &str) -> PathBuf {
    scratch_in("run-cli", name)
}

fn lock_args(dir: &Path) -> [String; 2] {
    [
        "--lock".into(),
        dir.join("device.lock").display().to_string(),
    ]
}

/// `ipu COMMAND MODEL`, each of `sets` as `--set`, `--tiles TILES`, then `extra`.
fn ipu_model(command: &str, model: &str, sets: &[&str], tiles: &str, extra: &[&str]) -> Output {
    let mut args = vec![command, model];
    for set in sets {
        args.extend(["--set", set]);
    }
    args.extend(["--tiles", tiles]);
    args.extend(extra);
    ipu(&args)
}

/// `ipu build` of `model` into `package`, which must succeed.
fn build(package: &Path, model: &str, sets: &[&str], tiles: &str) {
    succeeded(&ipu_model(
        "build",
        model,
        sets,
        tiles,
        &["-o", package.to_str().unwrap()],
    ));
}

#[test]
fn run_passes_with_summary_lines_and_report() {
    let d = scratch("run");
    let report = d.join("report.json");
    let [l0, l1] = lock_args(&d);
    let (out, err) = succeeded(&ipu_model(
        "run",
        "matmul",
        &["m=9", "k=21", "n=5"],
        "4",
        &[
            "--artifacts",
            d.to_str().unwrap(),
            "--report",
            report.to_str().unwrap(),
            &l0,
            &l1,
        ],
    ));
    assert_contains(
        &out,
        &["numericalTest=PASS", "device=simulator deviceTest=PASS"],
    );
    assert_contains(
        &err,
        &[
            "package build phase finished phase=\"place_storage\"",
            "acquired hardware ownership",
        ],
    );
    let j = read_json(&report);
    for key in [
        "model",
        "target",
        "tiles_used",
        "phases",
        "compile_ms",
        "estimated_cycles",
        "final_cycles",
        "device",
        "peak_tile_bytes",
        "package_bytes",
        "checks",
        "flops",
        "efficiency",
    ] {
        assert!(j.get(key).is_some(), "report lacks {key}: {j}");
    }
    assert!(j["device"]["cycles"].as_u64().unwrap() > 0);
    assert_eq!(j["checks"][0]["pass"], true);
    assert!(d.join("model.ipuexe").is_file() && d.join("execution.profile.json").is_file());
}

#[test]
fn a_failing_check_exits_1() {
    let d = scratch("fail");
    let [l0, l1] = lock_args(&d);
    // Against the exact reference with zero tolerance, f16 rounding must show.
    let o = ipu_model(
        "run",
        "matmul",
        &["m=8", "k=40", "n=8"],
        "2",
        &[
            "--reference-precision",
            "exact",
            "--atol",
            "0",
            "--rtol",
            "0",
            "--artifacts",
            d.to_str().unwrap(),
            &l0,
            &l1,
        ],
    );
    let (out, err) = text(&o);
    assert_eq!(o.status.code(), Some(1), "{out}\n{err}");
    assert!(
        out.contains("numericalTest=FAIL") && out.contains("deviceTest=FAIL"),
        "{out}"
    );
}

#[test]
fn build_then_exec_and_refusals() {
    let d = scratch("exec");
    let pkg = d.join("m.ipuexe");
    build(&pkg, "mlp", &["batch=6", "width=24"], "8");
    let [l0, l1] = lock_args(&d);
    let o = ipu(&[
        "exec",
        pkg.to_str().unwrap(),
        "--outputs",
        d.join("out").to_str().unwrap(),
        &l0,
        &l1,
    ]);
    let (out, _) = succeeded(&o);
    assert!(
        out.contains("device=simulator") && d.join("out").read_dir().unwrap().count() == 1,
        "{out}"
    );

    // Another target's device refuses the package.
    let o = ipu(&["exec", pkg.to_str().unwrap(), "--target", "c600", &l0, &l1]);
    let (_, err) = text(&o);
    assert_eq!(o.status.code(), Some(2));
    assert!(err.contains("gc200") && err.contains("c600"), "{err}");

    // A truncated package names the byte offset.
    let bytes = std::fs::read(&pkg).unwrap();
    let cut = d.join("cut.ipuexe");
    std::fs::write(&cut, &bytes[..bytes.len() / 2]).unwrap();
    let o = ipu(&["exec", cut.to_str().unwrap(), &l0, &l1]);
    let (_, err) = text(&o);
    assert_eq!(o.status.code(), Some(2));
    assert!(err.contains("byte offset"), "{err}");
    assert_eq!(
        err.lines().filter(|l| l.starts_with("error:")).count(),
        1,
        "{err}"
    );

    // A flipped byte fails a checksum.
    let mut bad = bytes.clone();
    let at = bad.len() - 10;
    bad[at] ^= 0xFF;
    let flipped = d.join("flipped.ipuexe");
    std::fs::write(&flipped, &bad).unwrap();
    let o = ipu(&["exec", flipped.to_str().unwrap(), &l0, &l1]);
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o).1.contains("checksum"), "{}", text(&o).1);
}

#[test]
fn a_held_lock_is_refused_after_the_timeout() {
    let d = scratch("lock");
    let pkg = d.join("m.ipuexe");
    build(&pkg, "matmul", &["m=4", "k=4", "n=4"], "1");
    let lock = d.join("device.lock");
    let f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&lock)
        .unwrap();
    f.lock().unwrap();
    let o = ipu(&[
        "exec",
        pkg.to_str().unwrap(),
        "--lock",
        lock.to_str().unwrap(),
        "--lock-timeout",
        "0.3",
    ]);
    let (_, err) = text(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains(lock.to_str().unwrap()), "{err}");
    drop(f);
}

#[test]
fn a_model_that_does_not_fit_is_refused_at_build() {
    let d = scratch("fit");
    let pkg = d.join("big.ipuexe");
    let report = d.join("report.json");
    let o = ipu_model(
        "build",
        "matmul",
        &["m=4096", "k=65536", "n=64", "dtype=f32"],
        "1",
        &[
            "-o",
            pkg.to_str().unwrap(),
            "--report",
            report.to_str().unwrap(),
        ],
    );
    let (_, err) = text(&o);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        err.contains("does not fit") && err.contains("bytes over"),
        "{err}"
    );
    assert!(!pkg.exists(), "no package may be left behind");
    // The refusal's report carries the typed error: its kind and figures, the user's operation.
    let j = read_json(&report);
    let e = &j["error"];
    assert_eq!(e["kind"], "does_not_fit", "{j}");
    assert_eq!(e["op"], "%c", "{j}");
    assert_eq!(e["region"], "any", "{j}");
    assert_eq!(
        e["tile"], 0,
        "the busiest tile of the closest candidate: {j}"
    );
    let (need, have) = (
        e["need_bytes"].as_u64().unwrap(),
        e["available_bytes"].as_u64().unwrap(),
    );
    assert!(need > have, "{j}");
    assert_eq!(have, 540_672, "a tile's memory less the support reserve");
    assert!(e["message"].as_str().unwrap().contains("bytes over"), "{j}");
}

#[test]
fn unknown_model_and_bad_options_exit_2() {
    let o = ipu(&["run", "no-such-model"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        text(&o).1.contains("matmul"),
        "the error lists the known models"
    );
    let o = ipu(&["build", "matmul", "--target", "ipu9", "-o", "/dev/null"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o).1.contains("gc200"));
    let o = ipu(&["build", "matmul", "--tiles", "5000", "-o", "/dev/null"]);
    assert_eq!(o.status.code(), Some(2));
}
