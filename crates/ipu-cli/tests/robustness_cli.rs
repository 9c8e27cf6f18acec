//! Bad input, limits and stops, through the command line: every case is a clear one-line
//! error and exit 2 (130 after Ctrl-C), never a panic, a hang or a corrupt package run as if
//! it were good.

mod common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::{ipu, ipu_quiet, scratch_in, stderr, text};
use serde_json::{Value, json};

fn scratch(name: &str) -> std::path::PathBuf {
    scratch_in("robust", name)
}

/// Exit 2 and one `error:` line containing every one of `wanted`.
fn refused(args: &[&str], wanted: &[&str]) {
    let o = ipu_quiet(args);
    let (out, err) = text(&o);
    assert_eq!(o.status.code(), Some(2), "{args:?}: {out}{err}");
    let errors: Vec<&str> = err.lines().filter(|l| l.starts_with("error:")).collect();
    assert_eq!(errors.len(), 1, "{args:?}: one error line: {err}");
    for w in wanted {
        assert!(errors[0].contains(w), "{args:?}: {w:?} not in {err}");
    }
    assert!(!err.contains("panicked"), "{args:?}: {err}");
}

#[test]
fn the_assembler_refuses_deep_and_long_expressions_with_their_position() {
    let d = scratch("asm");
    for (name, line, wanted) in [
        (
            "parens",
            format!(".word {}1{}", "(".repeat(3000), ")".repeat(3000)),
            "longest accepted is 4096",
        ),
        (
            "signs",
            format!(".word {}1", "-".repeat(50_000)),
            "longest accepted is 4096",
        ),
        (
            "sum",
            format!(".word {}", vec!["1"; 1000].join("+")),
            "nested deeper than 256 levels",
        ),
        (
            "nested",
            format!(".word {}1{}", "(".repeat(300), ")".repeat(300)),
            "nested deeper than 256 levels",
        ),
    ] {
        let f = d.join(format!("{name}.s"));
        std::fs::write(&f, format!("nop\n{line}\n")).unwrap();
        let f = f.to_str().unwrap();
        let at = format!("{f}:2:");
        refused(
            &["asm", f, "-o", d.join("x.bin").to_str().unwrap()],
            &[&at, wanted],
        );
        refused(&["sim", f], &[&at, wanted]);
    }
    assert!(!d.join("x.bin").exists());
}

#[test]
fn text_that_is_not_utf8_is_refused_with_line_column_and_byte_offset() {
    let d = scratch("utf8");
    let s = d.join("bad.s");
    std::fs::write(&s, b"nop\n  \xff\xfe\n").unwrap();
    refused(
        &["asm", s.to_str().unwrap()],
        &["bad.s:2:3:", "byte offset 6", "0xff"],
    );
    let g = d.join("bad.ipug");
    std::fs::write(&g, b"graph t {\n  input %x: f32[4]\xc3\n}\n").unwrap();
    refused(
        &["graph", "check", g.to_str().unwrap()],
        &["bad.ipug:2:19:", "byte offset 28"],
    );
}

#[test]
fn graph_text_limits_and_messages() {
    let d = scratch("graph");
    let write = |name: &str, body: &str| {
        let p = d.join(name);
        std::fs::write(&p, body).unwrap();
        p.to_str().unwrap().to_string()
    };
    // A rank-100,000 type: refused at the 17th dimension, not echoed.
    let dims = vec!["1"; 100_000].join(", ");
    let f = write(
        "rank.ipug",
        &format!("graph t {{\n  input %x: f32[{dims}]\n  output %x\n}}\n"),
    );
    let o = ipu_quiet(&["graph", "check", &f]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).len() < 300, "{}", stderr(&o).len());
    assert!(
        stderr(&o).contains("longest accepted is 65536"),
        "{}",
        stderr(&o)
    );
    let dims = vec!["1"; 17].join(", ");
    let f = write(
        "rank17.ipug",
        &format!("graph t {{\n  input %x: f32[{dims}]\n  output %x\n}}\n"),
    );
    refused(
        &["graph", "check", &f],
        &["rank17.ipug:2:65:", "at most 16 dimensions"],
    );
    // Integers too large for their field, and negative ones.
    for (v, wanted) in [
        (
            "99999999999999999999",
            "an integer no larger than 9223372036854775807, not 99999999999999999999",
        ),
        ("-3", "a non-negative integer, not -3"),
    ] {
        let f = write(
            "int.ipug",
            &format!(
                "graph t {{\n  input %x: f32[4, 8]\n  %y = softmax(%x) {{axis = {v}}}: f32[4, 8]\n  output %y\n}}\n"
            ),
        );
        refused(&["graph", "check", &f], &["int.ipug:3:21:", wanted]);
    }
    // The unknown-operation list names causal_mask.
    let f = write(
        "op.ipug",
        "graph t {\n  input %x: f32[4]\n  %y = frob(%x): f32[4]\n  output %y\n}\n",
    );
    refused(&["graph", "check", &f], &["causal_mask", "erf"]);
}

#[test]
fn attention_the_lowering_cannot_do_is_refused_before_building() {
    let d = scratch("attention");
    for (op, q, k, v, wanted) in [
        (
            "attention",
            "f16",
            "f32",
            "f16",
            "q and k dtypes f16 and f32 do not match",
        ),
        (
            "flash_attention",
            "f16",
            "f143@0",
            "f143@0",
            "q and k dtypes f16 and f143@0 do not match",
        ),
        (
            "flash_attention",
            "f16",
            "f16",
            "f32",
            "all f32 or none f32",
        ),
    ] {
        let extra = if op == "flash_attention" {
            ", block_q = 128, block_k = 128"
        } else {
            ""
        };
        let f = d.join(format!("{op}-{q}-{k}-{v}.ipug"));
        std::fs::write(&f, format!(
            "graph t {{\n  input %q: {q}[1, 32, 16]\n  input %k: {k}[1, 32, 16]\n  input %v: {v}[1, 32, 16]\n  %out = {op}(%q, %k, %v) {{scale = 0.25, causal = false{extra}, partials = f32}}: f32[1, 32, 16]\n  output %out\n}}\n"
        )).unwrap();
        let f = f.to_str().unwrap();
        refused(&["graph", "check", f], &[":5:", wanted]);
        refused(&["run", f, "--tiles", "4"], &[wanted]);
    }
}

#[test]
fn fully_masked_rows_pass_their_check() {
    let d = scratch("masked");
    let f = d.join("cm.ipug");
    std::fs::write(&f, "graph cm {\n  input %x: f32[8, 16]\n  %m = causal_mask(%x) {key_start = 2}: f32[8, 16]\n  %p = softmax(%m) {axis = 1}: f32[8, 16]\n  output %p\n}\n").unwrap();
    let o = run_small(f.to_str().unwrap(), &d.join("a"), &d.join("lock"), &[]);
    let (out, err) = text(&o);
    assert_eq!(o.status.code(), Some(0), "{out}{err}");
    assert!(out.contains("max_abs_error=0.000000e0"), "{out}");
}

#[test]
fn bad_option_values_are_refused_saying_why() {
    for (args, wanted) in [
        (
            vec!["run", "matmul", "--min-cosine", "2"],
            "a cosine similarity is between -1 and 1, not 2",
        ),
        (
            vec!["run", "matmul", "--rtol", "nan"],
            "a tolerance is a finite number >= 0, not NaN",
        ),
        (
            vec!["run", "matmul", "--atol=-1"],
            "a tolerance is a finite number >= 0, not -1",
        ),
        (
            vec!["run", "matmul", "--atol", "-1"],
            "a tolerance is a finite number >= 0, not -1",
        ),
        (
            vec!["run", "matmul", "--tiles", "-1"],
            "a tile count is at least 1, not -1",
        ),
        (
            vec!["build", "matmul", "-o", "x", "--tiles", "0"],
            "a tile count is at least 1, not 0",
        ),
        (
            vec!["run", "matmul", "--set", "m=4", "--set", "m=8"],
            "--set m is given twice (m=4 and m=8)",
        ),
        (
            vec!["run", "matmul", "--lock-timeout", "-5"],
            "finite number of seconds >= 0, not -5",
        ),
        (
            vec!["exec", "x.ipuexe", "--max-cycles", "0"],
            "--max-cycles",
        ),
    ] {
        refused(&args, &[wanted]);
    }
}

/// A package built from `model`, in `dir`.
fn package(dir: &Path, model: &str) -> std::path::PathBuf {
    let p = dir.join("model.ipuexe");
    let o = ipu_quiet(&["build", model, "-o", p.to_str().unwrap(), "--tiles", "4"]);
    assert!(o.status.success(), "{}", stderr(&o));
    p
}

/// The package at `path` with its manifest edited by `edit` and every checksum recomputed.
fn edited(path: &Path, edit: impl FnOnce(&mut Value)) -> std::path::PathBuf {
    let bytes = std::fs::read(path).unwrap();
    let mut sections = ipu_package::sections(&bytes).unwrap();
    let mut m: Value = serde_json::from_slice(&sections[0].1).unwrap();
    edit(&mut m);
    sections[0].1 = serde_json::to_vec(&m).unwrap();
    let minor = u16::from_le_bytes([bytes[10], bytes[11]]);
    let s: Vec<(u32, &[u8])> = sections.iter().map(|(k, p)| (*k, p.as_slice())).collect();
    let out = path.with_file_name("edited.ipuexe");
    std::fs::write(&out, ipu_package::pack(minor, &s)).unwrap();
    out
}

#[test]
fn exec_refuses_packages_whose_manifest_cannot_be_right() {
    let d = scratch("manifest");
    let p = package(&d, "matmul");
    type Edit = Box<dyn FnOnce(&mut Value)>;
    let cases: Vec<(Edit, &str)> = vec![
        (
            Box::new(|m| m["tensors"][0]["shape"] = json!([1u64 << 40, 1u64 << 40])),
            "holds more than 2^64 bytes",
        ),
        (
            Box::new(|m| {
                m["tensors"][1]["offset"] = json!(m["tensors"][1]["offset"].as_u64().unwrap() + 4)
            }),
            "the previous tensor ends at",
        ),
        (Box::new(|m| m["tensors"] = json!([])), "no output tensor"),
        (
            Box::new(|m| {
                m["tensors"].as_array_mut().unwrap().pop();
            }),
            "no output tensor",
        ),
        (
            Box::new(|m| {
                let t = m["tensors"][0].clone();
                m["tensors"].as_array_mut().unwrap().insert(0, t);
            }),
            "appears twice",
        ),
        (
            Box::new(|m| {
                for t in m["tensors"].as_array_mut().unwrap() {
                    let r = if t["role"] == "input" {
                        "output"
                    } else {
                        "input"
                    };
                    t["role"] = json!(r);
                }
            }),
            "that role's page is",
        ),
        (
            Box::new(|m| m["programs"][1]["phases"] = json!(0)),
            "has 0 phases",
        ),
        (
            Box::new(|m| m["programs"][1]["phases"] = json!(950_272)),
            "has 950272 phases",
        ),
    ];
    for (edit, wanted) in cases {
        let e = edited(&p, edit);
        refused(
            &["exec", e.to_str().unwrap()],
            &["invalid manifest", wanted],
        );
    }
    // Bytes appended after the last section.
    let mut bytes = std::fs::read(&p).unwrap();
    bytes.extend_from_slice(b"trailing");
    let t = d.join("trailing.ipuexe");
    std::fs::write(&t, bytes).unwrap();
    refused(
        &["exec", t.to_str().unwrap()],
        &["8 bytes after the last section"],
    );
}

#[test]
fn a_run_past_its_cycle_budget_stops_with_tile_context_and_pc() {
    let d = scratch("budget");
    let p = package(&d, "matmul");
    refused(
        &[
            "exec",
            p.to_str().unwrap(),
            "--max-cycles",
            "1000",
            "--lock",
            d.join("lock").to_str().unwrap(),
        ],
        &["tile 0, supervisor, pc 0x", "cycle budget (--max-cycles)"],
    );
    let o = ipu(&[
        "exec",
        p.to_str().unwrap(),
        "--lock",
        d.join("lock").to_str().unwrap(),
    ]);
    assert!(
        stderr(&o).contains("cycle budget of every call"),
        "{}",
        stderr(&o)
    );
    assert!(o.status.success());
}

/// `ipu run MODEL` on 4 tiles with its artifacts and lock where given, and `extra` options.
fn run_small(model: &str, artifacts: &Path, lock: &Path, extra: &[&str]) -> std::process::Output {
    let mut args = vec!["run", model, "--tiles", "4"];
    args.extend(["--artifacts", artifacts.to_str().unwrap()]);
    args.extend(["--lock", lock.to_str().unwrap()]);
    args.extend(extra);
    ipu_quiet(&args)
}

/// Starts `ipu run MODEL` in `dir` and waits until the device's `run` call has started.
fn start_run(dir: &Path, model: &str) -> std::process::Child {
    use std::io::{BufRead, BufReader};
    let mut child = Command::new(env!("CARGO_BIN_EXE_ipu"))
        .args(["run", model, "--artifacts", dir.join("a").to_str().unwrap()])
        .args(["--lock", dir.join("lock").to_str().unwrap()])
        .arg("--no-db")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let err = child.stderr.take().unwrap();
    let mut lines = BufReader::new(err).lines();
    for line in lines.by_ref() {
        if line.unwrap().contains("call=\"run\"") {
            break;
        }
    }
    // Keep draining so the child never blocks on a full pipe.
    std::thread::spawn(move || for _ in lines {});
    child
}

fn signal(child: &std::process::Child, sig: i32) {
    // SAFETY: kill(2) with the pid of a child this process started and has not reaped.
    assert_eq!(unsafe { libc::kill(child.id() as i32, sig) }, 0);
}

#[test]
fn ctrl_c_stops_the_simulator_with_exit_130() {
    let d = scratch("sigint");
    let mut child = start_run(&d, "attention-flash");
    std::thread::sleep(Duration::from_millis(200));
    signal(&child, libc::SIGINT);
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(130));
    let a = d.join("a");
    assert!(a.join("model.ipuexe").exists());
    assert!(
        !a.join("report.json").exists(),
        "a stopped run leaves no report"
    );
}

#[test]
fn sigkill_leaves_no_complete_looking_artifact_and_no_lock() {
    let d = scratch("sigkill");
    // A report from an earlier run in the same directory.
    let o = run_small("matmul", &d.join("a"), &d.join("lock"), &[]);
    assert!(o.status.success());
    assert!(d.join("a/report.json").exists());
    let mut child = start_run(&d, "attention-flash");
    signal(&child, libc::SIGKILL);
    child.wait().unwrap();
    assert!(
        !d.join("a/report.json").exists(),
        "the earlier run's report is gone"
    );
    assert!(!d.join("a/execution.profile.json").exists());
    // Every file left is either complete or a hidden temporary file.
    for e in std::fs::read_dir(d.join("a")).unwrap() {
        let name = e.unwrap().file_name().into_string().unwrap();
        assert!(name == "model.ipuexe" || name.starts_with('.'), "{name}");
    }
    let bytes = std::fs::read(d.join("a/model.ipuexe")).unwrap();
    ipu_package::Package::from_bytes(&bytes).expect("the package written is complete");
    // The lock does not block the next run.
    let o = run_small(
        "matmul",
        &d.join("b"),
        &d.join("lock"),
        &["--lock-timeout", "2"],
    );
    assert!(o.status.success(), "{}", stderr(&o));
}

#[test]
fn sigkill_during_build_leaves_no_package_or_a_complete_one() {
    let d = scratch("buildkill");
    let out = d.join("big.ipuexe");
    for delay_ms in [50, 400, 1500] {
        let mut child = Command::new(env!("CARGO_BIN_EXE_ipu"))
            .args(["build", "attention-flash", "-o", out.to_str().unwrap()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(delay_ms));
        signal(&child, libc::SIGKILL);
        child.wait().unwrap();
        if out.exists() {
            let bytes = std::fs::read(&out).unwrap();
            ipu_package::Package::from_bytes(&bytes)
                .expect("a package at the output path is complete");
        }
    }
}

#[test]
fn an_npz_entry_that_expands_past_its_array_is_refused_without_reading_it_all() {
    // `a` of matmul m=k=n=4 is f16[4, 4]: a valid header and 32 bytes, then 32 MiB of zeros
    // that deflate to a few hundred kilobytes.
    let header = "{'descr': '<f2', 'fortran_order': False, 'shape': (4, 4), }";
    let pad = (64 - (10 + header.len() + 1) % 64) % 64;
    let header = format!("{header}{}\n", " ".repeat(pad));
    let mut npy = b"\x93NUMPY\x01\x00".to_vec();
    npy.extend_from_slice(&(header.len() as u16).to_le_bytes());
    npy.extend_from_slice(header.as_bytes());
    npy.extend_from_slice(&[0; 32]);
    let mut zip = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    let options = zip::write::SimpleFileOptions::default()
        .compression_method(zip::CompressionMethod::Deflated)
        .large_file(true);
    zip.start_file("a.npy", options).unwrap();
    std::io::Write::write_all(&mut zip, &npy).unwrap();
    let zeros = vec![0u8; 1 << 20];
    for _ in 0..32 {
        std::io::Write::write_all(&mut zip, &zeros).unwrap();
    }
    let bytes = zip.finish().unwrap().into_inner();
    assert!(bytes.len() < 2 << 20, "{}", bytes.len());
    let d = scratch("bomb");
    let f = d.join("bomb.npz");
    std::fs::write(&f, bytes).unwrap();
    refused(
        &[
            "run",
            "matmul",
            "--set",
            "m=4",
            "--set",
            "k=4",
            "--set",
            "n=4",
            "--inputs",
            f.to_str().unwrap(),
        ],
        &["input \"a\"", "bytes follow the 32 bytes of data"],
    );
}
