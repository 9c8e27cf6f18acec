//! `ipu numerics table` and `ipu numerics encode`, run through the built binary.

mod common;

use common::refused;

use std::io::Write;
use std::process::{Command, Output, Stdio};

fn ipu(args: &[&str], stdin: &str) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_ipu"))
        .args(args)
        .env("IPU_LOG", "warn")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn ipu");
    // The command may exit (on a bad argument) before reading stdin; a broken pipe is fine.
    if let Err(e) = child.stdin.take().unwrap().write_all(stdin.as_bytes())
        && e.kind() != std::io::ErrorKind::BrokenPipe
    {
        panic!("writing stdin: {e}");
    }
    child.wait_with_output().expect("wait for ipu")
}

fn stdout(o: &Output) -> String {
    String::from_utf8(o.stdout.clone()).unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8(o.stderr.clone()).unwrap()
}

#[test]
fn table_prints_256_codes_with_values() {
    for format in ["f143", "f152", "e4m3fn", "e5m2"] {
        let o = ipu(&["numerics", "table", format], "");
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        let text = stdout(&o);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 256, "{format}");
        for (code, line) in lines.iter().enumerate() {
            let (hex, value) = line.split_once(' ').unwrap();
            assert_eq!(hex, format!("{code:#04x}"));
            if value != "nan" {
                // Every value reads back as a number (including inf and -inf).
                value
                    .parse::<f32>()
                    .unwrap_or_else(|_| panic!("{format}: {line}"));
            }
        }
    }
    let f143 = stdout(&ipu(&["numerics", "table", "f143"], ""));
    let e4m3fn = stdout(&ipu(&["numerics", "table", "e4m3fn"], ""));
    let e5m2 = stdout(&ipu(&["numerics", "table", "e5m2"], ""));
    let f152 = stdout(&ipu(&["numerics", "table", "f152"], ""));
    assert!(f143.contains("\n0x44 1.5\n"));
    assert!(f143.contains("\n0x7f 240\n0x80 nan\n0x81 -0.0009765625\n"));
    assert!(f152.contains("\n0x7f 57344\n0x80 nan\n"));
    assert!(e4m3fn.contains("\n0x3c 1.5\n"));
    assert!(e4m3fn.contains("\n0x7e 448\n0x7f nan\n0x80 -0\n"));
    assert!(e5m2.contains("\n0x7b 57344\n0x7c inf\n0x7d nan\n"));
    assert!(e5m2.contains("\n0xfc -inf\n"));
}

#[test]
fn table_rejects_an_unknown_format_and_lists_the_known_ones() {
    let o = ipu(&["numerics", "table", "fp8"], "");
    refused(&o, "f143, f152, e4m3fn, e5m2");
    assert!(stdout(&o).is_empty());
}

#[test]
fn encode_rounds_to_nearest_even_by_default_and_skips_blank_lines() {
    // 1.5 exact; 1.0625 is the tie between 1.0 (0x40) and 1.125 (0x41), even is 0x40;
    // 248 ties between 240 and the would-be 256 and overflows to NaN by default.
    let o = ipu(
        &["numerics", "encode", "--format", "f143"],
        "1.5\n\n1.0625\n  -0 \n248\nnan\n-inf\n",
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(stdout(&o), "0x44\n0x40\n0x00\n0x80\n0x80\n0x80\n");
    let o = ipu(
        &[
            "numerics",
            "encode",
            "--format",
            "f143",
            "--overflow",
            "saturate",
        ],
        "248\n-1e9\n",
    );
    assert_eq!(stdout(&o), "0x7f\n0xff\n");
    let o = ipu(&["numerics", "encode", "--format", "e5m2"], "61440\n-0\n");
    assert_eq!(stdout(&o), "0x7c\n0x80\n");
}

#[test]
fn encode_applies_the_scale() {
    // 3 / 2^-2 = 12 = 1.5 * 2^3 -> f143 exponent field 11, mantissa 100.
    let o = ipu(
        &["numerics", "encode", "--format", "f143", "--scale", "-2"],
        "3\n",
    );
    assert_eq!(stdout(&o), "0x5c\n");
    let o = ipu(
        &["numerics", "encode", "--format", "f143", "--scale", "2"],
        "6\n",
    );
    assert_eq!(stdout(&o), "0x44\n");
}

#[test]
fn stochastic_encoding_is_deterministic_for_a_seed() {
    let input = "1.03\n".repeat(200);
    let run = |seed: &str| {
        let o = ipu(
            &[
                "numerics",
                "encode",
                "--format",
                "f143",
                "--rounding",
                "stochastic",
                "--seed",
                seed,
            ],
            &input,
        );
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        stdout(&o)
    };
    let a = run("5");
    assert_eq!(a, run("5"));
    assert_ne!(a, run("6"));
    // 1.03 lies between 0x40 (1.0) and 0x41 (1.125): both appear, 0x40 more often.
    let ups = a.lines().filter(|l| *l == "0x41").count();
    assert!(a.lines().all(|l| l == "0x40" || l == "0x41"));
    assert!((20..100).contains(&ups), "{ups}");
}

#[test]
fn a_bad_number_names_its_line_and_prints_nothing() {
    let o = ipu(&["numerics", "encode", "--format", "f152"], "1\n\nabc\n2\n");
    refused(&o, "error: stdin line 3: \"abc\" is not a number");
    assert!(stdout(&o).is_empty());
}

#[test]
fn a_bad_scale_or_format_is_an_error() {
    let o = ipu(
        &["numerics", "encode", "--format", "f143", "--scale", "32"],
        "1\n",
    );
    refused(&o, "FP8 scale 32 is out of range -32..=31");
    assert!(stdout(&o).is_empty());
    let o = ipu(&["numerics", "encode", "--format", "e4m3"], "1\n");
    refused(&o, "known formats: f143, f152, e4m3fn, e5m2");
}
