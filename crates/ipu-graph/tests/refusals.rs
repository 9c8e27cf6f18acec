//! What the verifier refuses because the lowering cannot do it, and the unknown-operation
//! message listing every operation.

use ipu_graph::parse;

fn attention(op: &str, q: &str, k: &str, v: &str) -> String {
    let extra = if op == "flash_attention" {
        ", block_q = 128, block_k = 128"
    } else {
        ""
    };
    format!(
        "graph t {{\n  input %q: {q}[1, 32, 16]\n  input %k: {k}[1, 32, 16]\n  input %v: {v}[1, 32, 16]\n  %out = {op}(%q, %k, %v) {{scale = 0.25, causal = false{extra}, partials = f32}}: f32[1, 32, 16]\n  output %out\n}}\n"
    )
}

#[test]
fn attention_with_q_and_k_of_different_classes_is_refused() {
    for op in ["attention", "flash_attention"] {
        for (q, k) in [
            ("f16", "f32"),
            ("f32", "f16"),
            ("f16", "f143@0"),
            ("f152@1", "f32"),
        ] {
            let e = parse(&attention(op, q, k, "f16"), "t.ipug")
                .expect_err(&format!("{op} {q} {k}"))
                .to_string();
            assert!(
                e.contains(&format!("q and k dtypes {q} and {k} do not match")),
                "{e}"
            );
            assert!(e.starts_with("t.ipug:5:"), "{e}");
        }
    }
    // What the lowerings do: FP8 q and k of either format and scale, v of another class.
    for (q, k, v) in [("f143@0", "f152@0", "f143@0"), ("f143@0", "f143@1", "f16")] {
        parse(&attention("attention", q, k, v), "t.ipug").unwrap();
        parse(&attention("flash_attention", q, k, v), "t.ipug").unwrap();
    }
    parse(&attention("attention", "f16", "f16", "f32"), "t.ipug").unwrap();
}

#[test]
fn flash_attention_needs_f32_throughout_or_nowhere() {
    let e = parse(&attention("flash_attention", "f16", "f16", "f32"), "t.ipug")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("flash attention needs q, k and v all f32 or none f32, got f16, f16 and f32"),
        "{e}"
    );
}

#[test]
fn the_unknown_operation_error_lists_every_operation() {
    let e = parse(
        "graph t {\n  input %x: f32[4]\n  %y = frobnicate(%x): f32[4]\n  output %y\n}\n",
        "t.ipug",
    )
    .unwrap_err()
    .to_string();
    for op in [
        "causal_mask",
        "sqrt",
        "tanh",
        "erf",
        "flash_attention",
        "layer_norm",
    ] {
        assert!(e.contains(op), "{op} missing: {e}");
    }
}

#[test]
fn a_value_listed_as_an_output_twice_is_refused() {
    let e = parse(
        "graph t {\n  input %x: f32[4]\n  %y = exp(%x): f32[4]\n  output %y\n  output %y\n}\n",
        "t.ipug",
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("value %y: is listed as an output twice"), "{e}");
}

#[test]
fn the_matmul_built_in_takes_its_partials_type() {
    use ipu_graph::{DType, OpKind, models};
    let params = |kv: &[(&str, &str)]| -> Vec<(String, String)> {
        kv.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    };
    let partials = |g: &ipu_graph::Graph| match g.operations()[0].kind {
        OpKind::MatMul { partials, .. } => partials,
        _ => unreachable!("one matmul"),
    };
    let g = models::build("matmul", &params(&[("partials", "f16")])).unwrap();
    assert_eq!(partials(&g), DType::F16);
    let g = models::build("matmul", &params(&[])).unwrap();
    assert_eq!(partials(&g), DType::F32);
    let e = models::build("matmul", &params(&[("dtype", "f32"), ("partials", "f16")]))
        .unwrap_err()
        .to_string();
    assert_eq!(
        e,
        "model `matmul`: operation %c (matmul), operand #0 %a: f16 partials need f16 or FP8 operands, got f32"
    );
    let e = models::build("matmul", &params(&[("partials", "f64")]))
        .unwrap_err()
        .to_string();
    assert!(e.contains("expected f32, f16 or auto"), "{e}");
}
