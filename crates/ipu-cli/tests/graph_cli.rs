//! `ipu models`, `ipu graph print|check` and `ipu reference` from the command line.

mod common;

use common::{assert_line_starts, ipu_quiet as ipu, refused, stderr, stdout, succeeded};

use std::path::PathBuf;

fn temp_file(name: &str, text: &str) -> PathBuf {
    let path = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(name);
    std::fs::write(&path, text).unwrap();
    path
}

#[test]
fn models_lists_builtins_with_parameters() {
    let o = ipu(&["models"]);
    assert_eq!(o.status.code(), Some(0));
    let s = stdout(&o);
    assert_line_starts(
        &s,
        &[
            "matmul:",
            "mlp:",
            "attention:",
            "attention-flash:",
            "typed-attention-small-fp8:",
        ],
    );
    for param in [
        "  m=256",
        "  depth=2",
        "  causal=false",
        "  block=128",
        "  seq=2048",
        "  dtype=f16",
    ] {
        assert!(s.contains(param), "{param} missing:\n{s}");
    }
}

#[test]
fn graph_print_builtin_with_settings() {
    let o = ipu(&[
        "graph", "print", "matmul", "--set", "m=64", "--set", "k=128", "--set", "n=32",
    ]);
    succeeded(&o);
    assert_eq!(
        stdout(&o),
        "graph matmul {\n  input %a: f16[64, 128]\n  input %b: f16[128, 32]\n  \
         %c = matmul(%a, %b) {partials = f32}: f16[64, 32]\n  output %c\n}\n"
    );
}

#[test]
fn printed_model_files_check_and_print_back() {
    let text = stdout(&ipu(&["graph", "print", "typed-attention-small-fp8"]));
    let path = temp_file("typed.ipug", &text);
    let path = path.to_str().unwrap();
    let (out, _) = succeeded(&ipu(&["graph", "check", path]));
    assert_eq!(
        out,
        "graph=typed-attention-small-fp8 operations=24 values=28 inputs=4 outputs=1 result=ok\n"
    );
    let o = ipu(&["graph", "print", path]);
    assert_eq!(stdout(&o), text);
}

#[test]
fn check_reports_position_of_errors() {
    let path = temp_file(
        "bad.ipug",
        "graph g {\n  input %a: f16[4, 8]\n  %b = exp(%a): f16[4, 9]\n  output %b\n}\n",
    );
    let path = path.to_str().unwrap();
    let o = ipu(&["graph", "check", path]);
    assert_eq!(o.status.code(), Some(2));
    assert_eq!(
        stderr(&o).trim_end(),
        format!("error: {path}:3:17: result %b is annotated f16[4, 9] but exp gives f16[4, 8]")
    );
    let path = temp_file("syntax.ipug", "graph g {\n  input %a f16[4]\n}\n");
    let o = ipu(&["graph", "check", path.to_str().unwrap()]);
    refused(&o, "syntax.ipug:2:12: expected `:` before the input type");
}

#[test]
fn unknown_model_or_parameter_lists_the_known_ones() {
    let o = ipu(&["graph", "print", "resnet"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains(
        "unknown model `resnet` (known: matmul, mlp, attention, attention-flash, typed-attention-small-fp8)"
    ));
    let o = ipu(&["reference", "attention", "--set", "block=8"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o)
            .contains("has no parameter `block` (known: seq, heads, head_dim, dtype, causal)")
    );
    let o = ipu(&["graph", "print", "matmul", "--set", "m"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("--set expects key=value"));
}

#[test]
fn reference_prints_statistics_independent_of_threads() {
    let args = [
        "reference",
        "attention",
        "--set",
        "seq=32",
        "--seed",
        "9",
        "--precision",
        "exact",
    ];
    let one = ipu(&[&args[..], &["--threads", "1"]].concat());
    let two = ipu(&[&args[..], &["--threads", "2"]].concat());
    assert_eq!(one.status.code(), Some(0), "{}", stderr(&one));
    let (s1, s2) = (stdout(&one), stdout(&two));
    let out1: Vec<&str> = s1.lines().filter(|l| l.starts_with("output=")).collect();
    let out2: Vec<&str> = s2.lines().filter(|l| l.starts_with("output=")).collect();
    assert_eq!(out1.len(), 1);
    assert_eq!(out1, out2);
    let line = out1[0];
    for key in [
        "output=out ",
        "precision=exact ",
        "dtype=f16 ",
        "shape=[4,32,64] ",
        "min=",
        "max=",
        "mean=",
        "rms=",
    ] {
        assert!(line.contains(key), "{key} in {line}");
    }
    let other_seed = ipu(&[
        "reference",
        "attention",
        "--set",
        "seq=32",
        "--seed",
        "10",
        "--precision",
        "exact",
    ]);
    assert_ne!(stdout(&other_seed).lines().last(), s1.lines().last());
}

#[test]
fn reference_compares_precisions() {
    let o = ipu(&[
        "reference",
        "typed-attention-small-fp8",
        "--set",
        "seq=32",
        "--compare-precisions",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}{}", stdout(&o), stderr(&o));
    let s = stdout(&o);
    assert!(
        s.contains("output=y precision=device dtype=f143@-4 shape=[32,256]"),
        "{s}"
    );
    assert!(s.contains("output=y precision=exact"), "{s}");
    let cmp = s
        .lines()
        .find(|l| l.starts_with("comparison output=y"))
        .expect("comparison line");
    assert!(
        cmp.contains("checks=8192 ") && cmp.ends_with("result=PASS"),
        "{cmp}"
    );
}
