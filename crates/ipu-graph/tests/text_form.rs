//! The text form: golden prints, exact round trips of every built-in, and parse errors with
//! their positions. Update the inline snapshots with `UPDATE_EXPECT=1 cargo test -p ipu-graph`.

mod common;

use common::check_error;
use expect_test::expect;
use ipu_graph::{DType, models, parse, print};

fn built(name: &str, params: &[(&str, &str)]) -> ipu_graph::Graph {
    let params: Vec<(String, String)> = params
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    models::build(name, &params).unwrap()
}

#[test]
fn golden_matmul() {
    expect![[r#"
        graph matmul {
          input %a: f16[64, 128]
          input %b: f16[128, 32]
          %c = matmul(%a, %b) {partials = f32}: f16[64, 32]
          output %c
        }
    "#]]
    .assert_eq(&print(&built(
        "matmul",
        &[("m", "64"), ("k", "128"), ("n", "32")],
    )));
}

#[test]
fn golden_mlp_fp8() {
    expect![[r#"
        graph mlp {
          input %x: f152@0[8, 16]
          input %w0: f152@0[16, 16]
          input %w1: f152@0[16, 16]
          %h0 = matmul(%x, %w0) {partials = f16}: f16[8, 16]
          %n0 = scale(%h0) {factor = 0.25}: f16[8, 16]
          %leak0 = scale(%n0) {factor = 0.01}: f16[8, 16]
          %a0 = max(%n0, %leak0): f16[8, 16]
          %x1 = cast(%a0) {to = f152@0}: f152@0[8, 16]
          %h1 = matmul(%x1, %w1) {partials = f16}: f16[8, 16]
          %n1 = scale(%h1) {factor = 0.25}: f16[8, 16]
          %leak1 = scale(%n1) {factor = 0.01}: f16[8, 16]
          %a1 = max(%n1, %leak1): f16[8, 16]
          output %a1
        }
    "#]]
    .assert_eq(&print(&built(
        "mlp",
        &[
            ("batch", "8"),
            ("width", "16"),
            ("depth", "2"),
            ("dtype", "f152"),
        ],
    )));
}

#[test]
fn golden_attention_flash_preset() {
    expect![[r#"
        graph attention-flash {
          input %q: f16[4, 2048, 64]
          input %k: f16[4, 2048, 64]
          input %v: f16[4, 2048, 64]
          %out = flash_attention(%q, %k, %v) {scale = 0.125, causal = false, block_q = 128, block_k = 128, partials = f32}: f16[4, 2048, 64]
          output %out
        }
    "#]].assert_eq(&print(&built("attention-flash", &[])));
}

#[test]
fn golden_typed_attention_small_fp8() {
    expect![[r#"
        graph typed-attention-small-fp8 {
          input %q: f143@-4[128, 256]
          input %k: f143@-4[128, 256]
          input %v: f143@-4[128, 256]
          input %w_out: f143@-4[256, 256]
          %q_f16 = cast(%q) {to = f16}: f16[128, 256]
          %q_heads = reshape(%q_f16) {shape = [128, 4, 64]}: f16[128, 4, 64]
          %q_t = transpose(%q_heads) {perm = [1, 0, 2]}: f16[4, 128, 64]
          %k_f16 = cast(%k) {to = f16}: f16[128, 256]
          %k_heads = reshape(%k_f16) {shape = [128, 4, 64]}: f16[128, 4, 64]
          %k_t = transpose(%k_heads) {perm = [1, 2, 0]}: f16[4, 64, 128]
          %v_f16 = cast(%v) {to = f16}: f16[128, 256]
          %v_heads = reshape(%v_f16) {shape = [128, 4, 64]}: f16[128, 4, 64]
          %v_t = transpose(%v_heads) {perm = [1, 0, 2]}: f16[4, 128, 64]
          %scores = matmul(%q_t, %k_t) {partials = f16}: f16[4, 128, 128]
          %scaled = scale(%scores) {factor = 0.125}: f16[4, 128, 128]
          %row_max = reduce_max(%scaled) {axis = 2}: f16[4, 128, 1]
          %shifted = sub(%scaled, %row_max): f16[4, 128, 128]
          %exps = exp(%shifted): f16[4, 128, 128]
          %row_sum = reduce_sum(%exps) {axis = 2}: f16[4, 128, 1]
          %probs = div(%exps, %row_sum): f16[4, 128, 128]
          %context = matmul(%probs, %v_t) {partials = f16}: f16[4, 128, 64]
          %context_t = transpose(%context) {perm = [1, 0, 2]}: f16[128, 4, 64]
          %context_flat = reshape(%context_t) {shape = [128, 256]}: f16[128, 256]
          %context_fp8 = cast(%context_flat) {to = f143@-4}: f143@-4[128, 256]
          %projected = matmul(%context_fp8, %w_out) {partials = f16}: f16[128, 256]
          %residual = add(%projected, %q_f16): f16[128, 256]
          %normed = layer_norm(%residual) {epsilon = 1e-5}: f16[128, 256]
          %y = cast(%normed) {to = f143@-4}: f143@-4[128, 256]
          output %y
        }
    "#]]
    .assert_eq(&print(&built("typed-attention-small-fp8", &[])));
}

/// Every built-in, with every dtype it takes, prints and parses back to the same graph.
#[test]
fn every_builtin_round_trips() {
    let mut count = 0;
    for m in models::list() {
        let takes_dtype = m.params.iter().any(|p| p.key == "dtype");
        let dtypes: &[&str] = if takes_dtype {
            &["f32", "f16", "f143", "f152"]
        } else {
            &["-"]
        };
        for dtype in dtypes {
            let mut params = vec![];
            if takes_dtype {
                params.push(("dtype", *dtype));
            }
            if m.params.iter().any(|p| p.key == "causal") {
                params.push(("causal", "true"));
            }
            let g = built(m.name, &params);
            let text = print(&g);
            let back = parse(&text, "roundtrip.ipug").unwrap_or_else(|e| panic!("{e}\n{text}"));
            assert_eq!(back, g, "{} {dtype}", m.name);
            assert_eq!(print(&back), text);
            count += 1;
        }
    }
    assert!(count >= 13);
}

#[test]
fn typed_attention_preset_shape() {
    let g = built("typed-attention-small-fp8", &[]);
    assert_eq!(g.operations().len(), 24);
    for &i in g.inputs() {
        assert_eq!(
            g.value(i).ty.dtype,
            DType::F143 {
                scale: models::FP8_SCALE_F143
            }
        );
    }
    let flash = built("attention-flash", &[]);
    assert_eq!(flash.operations().len(), 1);
    assert_eq!(flash.operations()[0].kind.mnemonic(), "flash_attention");
}

#[test]
fn comments_whitespace_and_every_op_parse() {
    let text = "\
# a model file with every operation
graph every-op {   // trailing comment
  input %x: f32[2, 4, 8]
  input %y: f32[2, 8, 4]
  input %q: f143@-3[2, 4, 8]
  input %k8: f152[2, 8, 4]
  %m = matmul(%x, %y) {partials = f32}: f32[2, 4, 4]
  %mq = matmul(%q, %k8) {partials = f16}: f143@2[2, 4, 4]
  %t = transpose(%y) {perm = [0, 2, 1]}: f32[2, 4, 8]
  %r = reshape(%t) {shape = [8, 8]}: f32[8, 8]
  %s = slice(%r) {axis = 1, start = 2, end = 6}: f32[8, 4]
  %c = concat(%s, %s, %s) {axis = 1}: f32[8, 12]
  %a = add(%x, %t): f32[2, 4, 8]
  %b = sub(%a, %x): f32[2, 4, 8]
  %u = mul(%b, %b): f32[2, 4, 8]
  %mx = reduce_max(%u) {axis = 2}: f32[2, 4, 1]
  %d = div(%u, %mx): f32[2, 4, 8]
  %e = max(%d, %x): f32[2, 4, 8]
  %f = scale(%e) {factor = -0.5}: f32[2, 4, 8]
  %g = exp(%f): f32[2, 4, 8]
  %sq = sqrt(%g): f32[2, 4, 8]
  %th = tanh(%sq): f32[2, 4, 8]
  %ef = erf(%th): f32[2, 4, 8]
  %lg = log(%ef): f32[2, 4, 8]
  %h = reduce_sum(%g) {axis = 0}: f32[1, 4, 8]
  %i = softmax(%g) {axis = 1}: f32[2, 4, 8]
  %j = cast(%i) {to = f16}: f16[2, 4, 8]
  %l = layer_norm(%j) {epsilon = 0.001}: f16[2, 4, 8]
  %at = attention(%j, %j, %j) {scale = 0.35, causal = true, partials = f32}: f32[2, 4, 8]
  %fa = flash_attention(%q, %q, %q) {scale = 0.35, causal = false, block_q = 2, block_k = 2, partials = f16}: f16[2, 4, 8]
  output %m, %mq, %c, %h, %l, %at, %fa, %lg
}
";
    let g = parse(text, "every.ipug").unwrap();
    assert_eq!(g.operations().len(), 24);
    assert_eq!(g.outputs().len(), 8);
    let again = parse(&print(&g), "printed.ipug").unwrap();
    assert_eq!(again, g);
}

fn model(body: &str) -> String {
    format!("graph g {{\n  input %a: f16[4, 8]\n  input %b: f16[8, 2]\n{body}\n}}\n")
}

#[test]
fn syntax_errors_have_positions() {
    check_error(
        "grap g {}",
        expect!["bad.ipug:1:1: expected `graph`, found `grap`"],
    );
    check_error(
        &model("  %c = matmul(%a, %b {partials = f32}: f16[4, 2]"),
        expect!["bad.ipug:4:22: expected `,` or `)` after an operand, found `{`"],
    );
    check_error(
        &model("  %c = matmul(%a, %b) {partials = f32}: f16[4, 2"),
        expect!["bad.ipug:5:1: expected `,` or `]` in the shape, found `}`"],
    );
    check_error(
        &model("  %c = matmul(%a, %b) {partials = f32}: f16[4, 2]\n  output %c\n  $"),
        expect!["bad.ipug:6:3: unexpected character `$`"],
    );
    check_error(
        &model("  input %a: f16[1]"),
        expect!["bad.ipug:4:9: value %a is already defined"],
    );
    check_error(
        &model("  %c = matmul(%a, %b) {partials = f32}: f64[4, 2]"),
        expect![
            "bad.ipug:4:41: unknown dtype `f64` (known: f32, f16, bf16, e4m3fn, e5m2, f4e2m1, e8m0, i16, u16, i8, u8, i4, u4, i2, u2, bool, i32, u32, i64, u64, f143@S, f152@S)"
        ],
    );
    check_error(
        &model("  %c = matmul(%a, %b) {partials = f32}: f143@99[4, 2]"),
        expect!["bad.ipug:4:46: FP8 scale 99 outside -32..=31"],
    );
    check_error(
        &model("  input %z: f16[4, 0]"),
        expect!["bad.ipug:4:13: f16[4, 0] has a dimension of size 0"],
    );
    check_error(
        &model("  input %z: f16[65536, 65536, 65536, 65536, 65536]"),
        expect![
            "bad.ipug:4:13: f16[65536, 65536, 65536, 65536, 65536] has more than 2147483648 elements"
        ],
    );
    check_error(
        &model("  %c = exp(%a): f16[4, 8]"),
        expect!["bad.ipug:6:1: the graph has no `output`"],
    );
    check_error(
        "graph g {\n  input %a: f16[2]\n  output %a\n}\nextra",
        expect!["bad.ipug:5:1: expected end of file after the graph, found `extra`"],
    );
}

#[test]
fn type_errors_have_positions() {
    // inferred type differs from the annotation
    check_error(
        &model("  %c = matmul(%a, %b) {partials = f32}: f16[4, 3]\n  output %c"),
        expect!["bad.ipug:4:41: result %c is annotated f16[4, 3] but matmul gives f16[4, 2]"],
    );
    // unknown value
    check_error(
        &model("  %c = matmul(%a, %z) {partials = f32}: f16[4, 2]\n  output %c"),
        expect!["bad.ipug:4:19: unknown value %z"],
    );
    // wrong arity
    check_error(
        &model("  %c = add(%a): f16[4, 8]\n  output %c"),
        expect!["bad.ipug:4:8: add: takes 2 operands, got 1"],
    );
    // operand mismatch, reported at the operand
    check_error(
        &model("  %c = matmul(%b, %a) {partials = f32}: f16[8, 8]\n  output %c"),
        expect!["bad.ipug:4:19: matmul: inner dimensions differ: f16[8, 2] x f16[4, 8] (2 vs 4)"],
    );
    // bad, unknown and missing attributes
    check_error(
        &model("  %c = matmul(%a, %b) {partials = 3}: f16[4, 2]\n  output %c"),
        expect!["bad.ipug:4:24: attribute `partials` of matmul must be a dtype"],
    );
    check_error(
        &model("  %c = matmul(%a, %b) {partials = f32, tile = 3}: f16[4, 2]\n  output %c"),
        expect!["bad.ipug:4:40: unknown attribute `tile` for matmul (known: partials)"],
    );
    check_error(
        &model("  %c = softmax(%a): f16[4, 8]\n  output %c"),
        expect!["bad.ipug:4:8: softmax needs the attribute `axis`"],
    );
    check_error(
        &model("  %c = softmax(%a) {axis = 2}: f16[4, 8]\n  output %c"),
        expect!["bad.ipug:4:16: softmax: axis 2 out of range for rank 2 (f16[4, 8])"],
    );
    check_error(
        &model("  %c = frobnicate(%a): f16[4, 8]\n  output %c"),
        expect![
            "bad.ipug:4:8: unknown operation `frobnicate` (known: matmul, transpose, reshape, slice, concat, gather, gather_columns, add, sub, mul, div, max, scale, exp, sqrt, tanh, erf, log, sin, cos, causal_mask, reduce_max, reduce_sum, softmax, cast, layer_norm, attention, flash_attention, equal, less, less_or_equal, greater, greater_or_equal, not, and, or, xor, is_nan, is_inf, is_pos_inf, is_neg_inf, where)"
        ],
    );
    // redefinition
    check_error(
        &model("  %a = exp(%a): f16[4, 8]\n  output %a"),
        expect!["bad.ipug:4:3: value %a is already defined"],
    );
}

#[test]
fn unknown_model_and_parameter_list_the_known_ones() {
    let e = models::build("nope", &[]).unwrap_err().to_string();
    assert!(
        e.contains("typed-attention-small-fp8") && e.contains("attention-flash"),
        "{e}"
    );
    let e = models::build("attention", &[("block".into(), "4".into())])
        .unwrap_err()
        .to_string();
    assert!(e.contains("seq, heads, head_dim, dtype, causal"), "{e}");
    let e = models::build("matmul", &[("m".into(), "0".into())])
        .unwrap_err()
        .to_string();
    assert!(e.contains("bad value `0` for `m`"), "{e}");
    let e = models::build("matmul", &[("dtype".into(), "bf16".into())])
        .unwrap_err()
        .to_string();
    assert!(e.contains("f143"), "{e}");
}

/// The example model file shipped with the crate parses, and prints in canonical form.
#[test]
fn example_model_file_parses() {
    let text = include_str!("../models/fp8_projection.ipug");
    let g = parse(text, "fp8_projection.ipug").unwrap();
    assert_eq!(g.operations().len(), 6);
    assert_eq!(parse(&print(&g), "printed").unwrap(), g);
}

#[test]
fn the_stored_and_integer_dtypes_round_trip() {
    let text = "graph types {
  input %x: f32[2, 4]
  input %a: i8[2, 4]
  input %b: i8[2, 4]
  %h = cast(%x) {to = bf16}: bf16[2, 4]
  %e = cast(%x) {to = e5m2, overflow = nan}: e5m2[2, 4]
  %f = cast(%x) {to = f4e2m1}: f4e2m1[2, 4]
  %q = cast(%x) {to = u4}: u4[2, 4]
  %s = add(%a, %b): i8[2, 4]
  %t = cast(%s) {to = f16}: f16[2, 4]
  %lt = less(%a, %b): bool[2, 4]
  %nl = not(%lt): bool[2, 4]
  %w = where(%nl, %a, %b): i8[2, 4]
  %ids = cast(%w) {to = i32}: i32[2, 4]
  %g = gather(%x, %ids) {axis = 1}: f32[2, 2, 4]
  const %k: i64[3] = [1.0, 2.0, 3.0]
  const %m: bool[4] = [1.0, 0.0, 1.0, 1.0]
  output %h
  output %e
  output %f
  output %q
  output %t
  output %g
  output %k
  output %m
}
";
    let g = parse(text, "types.ipug").unwrap();
    assert_eq!(print(&g), text);
    let e = g.value_by_name("e").unwrap();
    assert_eq!(g.value(e).ty.dtype, DType::E5M2);
    // bf16 and the other stored formats are not computed in.
    let bad = text.replace("%s = add(%a, %b): i8[2, 4]", "%s = add(%h, %h): bf16[2, 4]");
    let err = parse(&bad, "types.ipug").unwrap_err().to_string();
    assert!(
        err.contains("add takes f32, f16, FP8 (f143, f152) or integer operands, not bf16"),
        "{err}"
    );
}
