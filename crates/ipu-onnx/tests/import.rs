//! Import of the small models `scripts/gen-onnx-testdata.py` writes: golden graph texts, the
//! host reference (exact precision) against the script's NumPy outputs within 1e-5, and every
//! refusal with the names it must give. Update the snapshots with
//! `UPDATE_EXPECT=1 cargo test -p ipu-onnx`.

use std::collections::BTreeMap;
use std::path::PathBuf;

use expect_test::{ExpectFile, expect_file};
use ipu_onnx::{ExternalData, ImportOptions, Imported, OnnxError, import};
use ipu_reference::{Precision, Tensor, evaluate};

fn data_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data")
}

fn model_bytes(name: &str) -> Vec<u8> {
    std::fs::read(data_dir().join(format!("{name}.onnx"))).unwrap()
}

fn dims(d: &[(&str, usize)]) -> BTreeMap<String, usize> {
    d.iter().map(|(k, v)| (k.to_string(), *v)).collect()
}

fn import_named(name: &str, d: &[(&str, usize)]) -> Result<Imported, OnnxError> {
    let options = ImportOptions {
        dims: dims(d),
        ..Default::default()
    };
    import(&model_bytes(name), &options)
}

/// The tensors `prefix_0.pb`, `prefix_1.pb`, .. of a model's test data.
fn test_tensors(name: &str, prefix: &str) -> Vec<Tensor> {
    let mut out = Vec::new();
    for k in 0.. {
        let path = data_dir().join(name).join(format!("{prefix}_{k}.pb"));
        let Ok(bytes) = std::fs::read(&path) else {
            break;
        };
        let t = ipu_onnx::decode_tensor(&bytes).unwrap();
        out.push(Tensor::from_bytes(t.dtype, t.shape, &t.bytes).unwrap());
    }
    assert!(!out.is_empty(), "{name} has no {prefix} tensors");
    out
}

/// Imports `name`, evaluates it on the test inputs and compares every output with the
/// expected one within `tolerance` (absolute, relative to max(1, |expected|)).
fn check_outputs(imported: &Imported, name: &str, precision: Precision, tolerance: f32) {
    let inputs = test_tensors(name, "input");
    let expected = test_tensors(name, "output");
    let outputs = evaluate(&imported.graph, &inputs, precision, 1).unwrap();
    assert_eq!(outputs.len(), expected.len(), "{name}");
    for (i, (got, want)) in outputs.iter().zip(&expected).enumerate() {
        assert_eq!(got.shape, want.shape, "{name} output {i}");
        assert_eq!(got.dtype, want.dtype, "{name} output {i}");
        for (j, (&g, &w)) in got.data.iter().zip(&want.data).enumerate() {
            assert!(
                (g - w).abs() <= tolerance * w.abs().max(1.0),
                "{name} output {i} element {j}: {g} vs expected {w}"
            );
        }
    }
}

fn check_text(imported: &Imported, expect: ExpectFile) {
    expect.assert_eq(&ipu_graph::print(&imported.graph));
}

#[test]
fn linear_layer_with_initializers() {
    let m = import_named("linear", &[]).unwrap();
    check_text(&m, expect_file!["golden/linear.ipug"]);
    check_outputs(&m, "linear", Precision::Exact, 1e-5);
    check_outputs(&m, "linear", Precision::Device, 1e-5);
}

#[test]
fn gemm_with_trans_b_alpha_and_beta() {
    let m = import_named("gemm_trans_b", &[]).unwrap();
    let text = ipu_graph::print(&m.graph);
    // The transposed weight is folded into the constant; alpha and beta become scales.
    assert!(!text.contains("transpose"), "{text}");
    assert!(
        text.contains("%y.alpha = scale(%y.product) {factor = 0.5}"),
        "{text}"
    );
    check_outputs(&m, "gemm_trans_b", Precision::Exact, 1e-5);
}

#[test]
fn head_split_folds_its_shape_subgraph() {
    let m = import_named("head_split", &[("batch", 2), ("seq", 3)]).unwrap();
    check_text(&m, expect_file!["golden/head_split.ipug"]);
    assert_eq!(
        m.folded,
        [
            "shape",
            "gather_batch",
            "gather_seq",
            "#6",
            "#7",
            "concat_shape"
        ]
    );
    check_outputs(&m, "head_split", Precision::Exact, 0.0);
}

#[test]
fn softmax_of_scaled_scores() {
    let m = import_named("softmax", &[]).unwrap();
    check_text(&m, expect_file!["golden/softmax.ipug"]);
    check_outputs(&m, "softmax", Precision::Exact, 1e-5);
}

#[test]
fn layer_normalization_with_scale_and_bias() {
    let m = import_named("layer_norm", &[]).unwrap();
    let text = ipu_graph::print(&m.graph);
    assert!(
        text.contains("%y.normalized = layer_norm(%x) {epsilon = 1e-5}: f32[4, 8]"),
        "{text}"
    );
    check_outputs(&m, "layer_norm", Precision::Exact, 1e-5);
}

#[test]
fn layer_normalization_over_two_axes_with_its_statistics() {
    let m = import_named("layer_norm_axis", &[]).unwrap();
    let text = ipu_graph::print(&m.graph);
    // The function body: reductions per normalised axis, the statistics as graph outputs.
    assert!(!text.contains("layer_norm("), "{text}");
    assert!(text.contains("reduce_sum(%x) {axis = 1}"), "{text}");
    assert!(text.contains("output %mean"), "{text}");
    assert!(text.contains("output %inv"), "{text}");
    check_outputs(&m, "layer_norm_axis", Precision::Exact, 1e-5);
    check_outputs(&m, "layer_norm_axis", Precision::Device, 1e-5);
}

#[test]
fn many_small_operators() {
    let m = import_named("mix", &[]).unwrap();
    check_outputs(&m, "mix", Precision::Exact, 1e-5);
    let names: Vec<&str> = m
        .graph
        .outputs()
        .iter()
        .map(|&o| m.graph.value(o).name.as_str())
        .collect();
    assert_eq!(names, ["y", "peak_flat"]);
}

#[test]
fn sqrt_tanh_erf_pow_and_gelu_match_numpy_in_both_precisions() {
    for name in [
        "sqrt",
        "tanh",
        "erf",
        "pow",
        "gelu",
        "gelu_tanh",
        "gelu_pattern",
    ] {
        let m = import_named(name, &[]).unwrap();
        check_outputs(&m, name, Precision::Exact, 1e-6);
        // The device's approximations are within a few 1e-7 (docs/numerics.md).
        check_outputs(&m, name, Precision::Device, 2e-6);
    }
}

#[test]
fn gelu_maps_to_its_definition() {
    let m = import_named("gelu", &[]).unwrap();
    check_text(&m, expect_file!["golden/gelu.ipug"]);
    let m = import_named("gelu_tanh", &[]).unwrap();
    check_text(&m, expect_file!["golden/gelu_tanh.ipug"]);
    let m = import_named("pow", &[]).unwrap();
    check_text(&m, expect_file!["golden/pow.ipug"]);
}

#[test]
fn f16_initializer_in_int32_data() {
    let m = import_named("f16", &[]).unwrap();
    let text = ipu_graph::print(&m.graph);
    assert!(
        text.contains("const %half: f16[1, 4] = [0.5, -1.25, 2.0, 0.0]"),
        "{text}"
    );
    // f16 arithmetic rounds once, as NumPy's float16 addition: bit-exact in device precision.
    check_outputs(&m, "f16", Precision::Device, 0.0);
}

#[test]
fn fp8_initializer_keeps_its_codes() {
    let m = import_named("fp8", &[]).unwrap();
    check_text(&m, expect_file!["golden/fp8.ipug"]);
    let w = m.graph.value_by_name("w.const").unwrap();
    let codes = m.graph.constant(w).unwrap().data.bytes().to_vec();
    assert_eq!(codes, [0x00, 0x01, 0x38, 0x40, 0x7f, 0xb8, 0xc0, 0xff]);
}

#[test]
fn external_data_is_read_through_the_loader() {
    let bytes = model_bytes("linear_external");
    let dir = data_dir();
    let loader = |e: &ExternalData<'_>| -> Result<Vec<u8>, String> {
        let all = std::fs::read(dir.join(e.location)).map_err(|err| err.to_string())?;
        let start = e.offset as usize;
        let end = e.length.map_or(all.len(), |n| start + n as usize);
        all.get(start..end)
            .map(<[u8]>::to_vec)
            .ok_or_else(|| "out of range".to_string())
    };
    let options = ImportOptions {
        external_data: Some(&loader),
        ..Default::default()
    };
    let m = import(&bytes, &options).unwrap();
    check_outputs(&m, "linear_external", Precision::Exact, 1e-5);

    // Without a loader, or with one that fails, the tensor and its location are named.
    let e = import(&bytes, &ImportOptions::default()).unwrap_err();
    assert_eq!(
        e.to_string(),
        "tensor `w`: external data `linear_external.data`: no loader for external data was given"
    );
    let failing = |_: &ExternalData<'_>| -> Result<Vec<u8>, String> { Err("no such file".into()) };
    let options = ImportOptions {
        external_data: Some(&failing),
        ..Default::default()
    };
    assert!(matches!(
        import(&bytes, &options).unwrap_err(),
        OnnxError::MissingExternalData { tensor, location, .. }
            if tensor == "w" && location == "linear_external.data"
    ));
}

#[test]
fn unknown_operator_names_the_node() {
    let e = import_named("unknown_op", &[]).unwrap_err();
    assert_eq!(
        e,
        OnnxError::UnsupportedOperator {
            node: "mystery".into(),
            op_type: "FancyOp".into(),
            domain: "ai.onnx".into(),
            reason: "the importer has no mapping for it".into(),
        }
    );
    let e = import_named("floor", &[]).unwrap_err();
    assert!(
        e.to_string()
            .starts_with("node `activation`: operator Floor (domain `ai.onnx`) is not supported: no floor device operator"),
        "{e}"
    );
}

#[test]
fn opset_newer_than_supported_is_refused() {
    let e = import_named("opset_too_new", &[]).unwrap_err();
    assert_eq!(
        e,
        OnnxError::OpsetTooNew {
            domain: "ai.onnx".into(),
            version: 29,
            max: 28
        }
    );
    assert_eq!(
        e.to_string(),
        "the model uses opset 29 of domain `ai.onnx`; the newest supported is 28"
    );
}

#[test]
fn symbolic_dimensions_need_bindings() {
    let e = import_named("head_split", &[("batch", 2)]).unwrap_err();
    assert_eq!(
        e,
        OnnxError::UnboundDimension {
            input: "x".into(),
            dim: "seq".into()
        }
    );
    assert_eq!(
        e.to_string(),
        "input `x`: dimension `seq` is symbolic; bind it with --dim seq=VALUE"
    );
    let e = import_named("head_split", &[("batch", 2), ("seq", 3), ("sequence", 3)]).unwrap_err();
    assert_eq!(
        e,
        OnnxError::UnusedDimension {
            dim: "sequence".into()
        }
    );
    // A binding of 1 is fine; the graph follows it.
    let m = import_named("head_split", &[("batch", 1), ("seq", 5)]).unwrap();
    assert_eq!(m.graph.value(m.graph.outputs()[0]).ty.shape, [1, 2, 5, 4]);
}

#[test]
fn a_binding_that_contradicts_a_declared_output_dimension_is_refused() {
    // linear declares y: [2, 3]; change the input to a symbolic batch bound to 5.
    use ipu_onnx::proto::{ModelProto, tensor_shape_proto::dimension::Value};
    use prost::Message as _;
    let mut model = ModelProto::decode(&model_bytes("linear")[..]).unwrap();
    let graph = model.graph.as_mut().unwrap();
    let Some(ipu_onnx::proto::type_proto::Value::TensorType(t)) =
        graph.input[0].r#type.as_mut().unwrap().value.as_mut()
    else {
        panic!("tensor input")
    };
    t.shape.as_mut().unwrap().dim[0].value = Some(Value::DimParam("batch".into()));
    let options = ImportOptions {
        dims: dims(&[("batch", 5)]),
        ..Default::default()
    };
    let e = import(&model.encode_to_vec(), &options).unwrap_err();
    assert_eq!(
        e.to_string(),
        "tensor `y`: dimension 0 is declared 2 but is 5"
    );
}

#[test]
fn truncated_models_are_malformed_never_a_panic() {
    for name in ["linear", "head_split", "mix", "fp8"] {
        let bytes = model_bytes(name);
        for n in 0..bytes.len() {
            let r = std::panic::catch_unwind(|| import(&bytes[..n], &ImportOptions::default()));
            let r = r.unwrap_or_else(|_| panic!("{name}: import of {n} bytes panicked"));
            assert!(r.is_err(), "{name}: {n} of {} bytes imported", bytes.len());
        }
    }
    let e = import(&model_bytes("linear")[..100], &ImportOptions::default()).unwrap_err();
    assert!(matches!(e, OnnxError::Malformed { .. }), "{e}");
}

#[test]
fn random_bytes_are_refused_never_a_panic() {
    // xorshift64, fixed seed: byte strings of every length up to 512.
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    for len in 0..512 {
        let bytes: Vec<u8> = (0..len).map(|_| next() as u8).collect();
        let r = std::panic::catch_unwind(|| import(&bytes, &ImportOptions::default()));
        assert!(r.is_ok(), "{len} random bytes panicked");
    }
    // Flipping every byte of a valid model, one at a time.
    let bytes = model_bytes("mix");
    for i in 0..bytes.len() {
        let mut b = bytes.clone();
        b[i] ^= 0xff;
        let r = std::panic::catch_unwind(|| import(&b, &ImportOptions::default()));
        assert!(r.is_ok(), "byte {i} flipped panicked");
    }
}

#[test]
fn import_is_deterministic() {
    for name in ["linear", "mix", "gemm_trans_b"] {
        let a = import_named(name, &[]).unwrap();
        let b = import_named(name, &[]).unwrap();
        assert_eq!(ipu_graph::print(&a.graph), ipu_graph::print(&b.graph));
        assert_eq!(a, b);
    }
}

#[test]
fn shape_arithmetic_masks_and_opset_18_forms_fold() {
    let m = import_named("folding", &[]).unwrap();
    check_outputs(&m, "folding", Precision::Exact, 1e-5);
    let text = ipu_graph::print(&m.graph);
    // 1 / sqrt(12) is folded to a scale; the mask and the ones are constants.
    assert!(
        text.contains("%scaled = scale(%rows) {factor = 0.28867513}"),
        "{text}"
    );
    assert!(
        text.contains("const %mask: f32[1, 12] = [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, -10000.0"),
        "{text}"
    );
    assert!(m.folded.len() >= 15, "{:?}", m.folded);
}

/// Structured mutations of valid models (attribute values, inputs swapped or dropped,
/// initializer shapes and data types changed) give results or errors, never a panic.
#[test]
fn mutated_models_never_panic() {
    use ipu_onnx::proto::ModelProto;
    use prost::Message as _;
    let try_import = |m: &ModelProto, what: &str| {
        let bytes = m.encode_to_vec();
        let r = std::panic::catch_unwind(|| import(&bytes, &ImportOptions::default()));
        assert!(r.is_ok(), "{what} panicked");
    };
    let values = [-3i64, -1, 0, 1, 2, 7, 1 << 40, i64::MAX, i64::MIN];
    for name in ["mix", "folding", "gemm_trans_b", "layer_norm", "head_split"] {
        let model = ModelProto::decode(&model_bytes(name)[..]).unwrap();
        let graph = model.graph.as_ref().unwrap();
        let names: Vec<String> = graph
            .node
            .iter()
            .flat_map(|n| n.output.clone())
            .chain(graph.initializer.iter().map(|t| t.name().to_string()))
            .collect();
        for n in 0..graph.node.len() {
            for a in 0..graph.node[n].attribute.len() {
                for &v in &values {
                    let mut m = model.clone();
                    let attr = &mut m.graph.as_mut().unwrap().node[n].attribute[a];
                    attr.i = Some(v);
                    attr.f = Some(v as f32);
                    attr.ints.iter_mut().for_each(|x| *x = v);
                    try_import(&m, &format!("{name} node {n} attribute {a} = {v}"));
                }
            }
            for i in 0..graph.node[n].input.len() {
                let mut m = model.clone();
                m.graph.as_mut().unwrap().node[n].input[i].clear();
                try_import(&m, &format!("{name} node {n} input {i} dropped"));
                for other in names.iter().step_by(3) {
                    let mut m = model.clone();
                    m.graph.as_mut().unwrap().node[n].input[i] = other.clone();
                    try_import(&m, &format!("{name} node {n} input {i} = {other}"));
                }
            }
        }
        for t in 0..graph.initializer.len() {
            for &v in &values {
                let mut m = model.clone();
                let init = &mut m.graph.as_mut().unwrap().initializer[t];
                init.dims.iter_mut().for_each(|d| *d = v);
                try_import(&m, &format!("{name} initializer {t} dims {v}"));
                let mut m = model.clone();
                m.graph.as_mut().unwrap().initializer[t].data_type = Some(v as i32);
                try_import(&m, &format!("{name} initializer {t} type {v}"));
            }
        }
    }
}

#[test]
fn split_sizes_whose_sum_overflows_are_refused() {
    use ipu_onnx::proto::ModelProto;
    use prost::Message as _;
    let mut m = ModelProto::decode(&model_bytes("mix")[..]).unwrap();
    let g = m.graph.as_mut().unwrap();
    let split = g.initializer.iter_mut().find(|t| t.name() == "split");
    split.unwrap().int64_data = vec![i64::MAX, i64::MAX];
    let err = import(&m.encode_to_vec(), &ImportOptions::default()).unwrap_err();
    let OnnxError::UnsupportedInput {
        op_type,
        input,
        reason,
        ..
    } = &err
    else {
        panic!("{err:?}");
    };
    assert_eq!((op_type.as_str(), input.as_str()), ("Split", "split"));
    assert!(reason.contains("does not divide 4 into 2 parts"), "{err}");
}

#[test]
fn attention_maps_to_the_graph_attention() {
    let m = import_named("attention_causal", &[]).unwrap();
    check_text(&m, expect_file!["golden/attention_causal.ipug"]);
    check_outputs(&m, "attention_causal", Precision::Exact, 1e-5);
    let m = import_named("attention_gqa", &[]).unwrap();
    check_outputs(&m, "attention_gqa", Precision::Exact, 1e-5);
    assert_eq!(m.notes.len(), 1, "{:?}", m.notes);
    assert!(
        m.notes[0].contains("4 q heads, 2 kv heads"),
        "{:?}",
        m.notes
    );
}

#[test]
fn an_input_with_an_initializer_is_a_constant() {
    use ipu_onnx::proto::ModelProto;
    use prost::Message as _;
    let mut model = ModelProto::decode(&model_bytes("linear")[..]).unwrap();
    let graph = model.graph.as_mut().unwrap();
    // Older exporters list initializers among the inputs too.
    let mut w = graph.input[0].clone();
    w.name = Some("w".into());
    graph.input.push(w);
    let m = import(&model.encode_to_vec(), &ImportOptions::default()).unwrap();
    assert_eq!(m.graph.inputs().len(), 1);
    let w = m.graph.value_by_name("w").unwrap();
    assert!(m.graph.constant(w).is_some());
    check_outputs(&m, "linear", Precision::Exact, 1e-5);
}

#[test]
fn external_data_outside_the_model_directory_is_refused() {
    use ipu_onnx::proto::ModelProto;
    use prost::Message as _;
    let mut model = ModelProto::decode(&model_bytes("linear_external")[..]).unwrap();
    let t = &mut model.graph.as_mut().unwrap().initializer[0];
    for e in &mut t.external_data {
        if e.key() == "location" {
            e.value = Some("../../secret.data".into());
        }
    }
    let loader = |_: &ExternalData<'_>| -> Result<Vec<u8>, String> { panic!("must not be asked") };
    let options = ImportOptions {
        external_data: Some(&loader),
        ..Default::default()
    };
    assert_eq!(
        import(&model.encode_to_vec(), &options)
            .unwrap_err()
            .to_string(),
        "tensor `w`: external data `../../secret.data`: the location must be a relative path \
         inside the model's directory"
    );
}

#[test]
fn attention_with_cache_softcap_offset_causal_and_mask_is_unfused() {
    let m = import_named("attention_unfused", &[]).unwrap();
    let text = ipu_graph::print(&m.graph);
    // No fused attention: the cache concatenated, the cap through tanh, the softmax written
    // out (the run-time mask may mask a row entirely).
    assert!(!text.contains("attention("), "{text}");
    assert!(text.contains("concat(%past_k, %k) {axis = 2}"), "{text}");
    assert!(text.contains("tanh("), "{text}");
    assert!(!text.contains("softmax("), "{text}");
    check_outputs(&m, "attention_unfused", Precision::Exact, 1e-5);
    check_outputs(&m, "attention_unfused", Precision::Device, 1e-5);
    // The fully masked row (query 1) gives zeros, not NaN.
    let inputs = test_tensors("attention_unfused", "input");
    let y = &evaluate(&m.graph, &inputs, Precision::Device, 1).unwrap()[0];
    assert!(y.data[4..8].iter().all(|&x| x == 0.0), "{:?}", y.data);
}

#[test]
fn attention_with_a_constant_boolean_mask() {
    let m = import_named("attention_bool_mask", &[]).unwrap();
    let text = ipu_graph::print(&m.graph);
    // No row is masked entirely, so the softmax is the graph's.
    assert!(text.contains("softmax("), "{text}");
    check_outputs(&m, "attention_bool_mask", Precision::Exact, 1e-5);
    check_outputs(&m, "attention_bool_mask", Precision::Device, 1e-5);
}

#[test]
fn matmul_operands_broadcasting_different_batch_axes_are_expanded() {
    let m = import_named("matmul_bcast", &[]).unwrap();
    let text = ipu_graph::print(&m.graph);
    // Each operand's size-1 batch axis is filled with copies; the matmul then has equal
    // batches.
    assert!(
        text.contains("concat(%a, %a) {axis = 1}: f32[3, 2, 2, 4]"),
        "{text}"
    );
    assert!(
        text.contains("concat(%b, %b, %b) {axis = 0}: f32[3, 2, 4, 3]"),
        "{text}"
    );
    check_outputs(&m, "matmul_bcast", Precision::Exact, 1e-5);
}

#[test]
fn log_is_the_graph_logarithm() {
    let m = import_named("log", &[]).unwrap();
    let text = ipu_graph::print(&m.graph);
    assert!(text.contains("%y = log(%x): f32[3, 7]"), "{text}");
    check_outputs(&m, "log", Precision::Exact, 1e-6);
    check_outputs(&m, "log", Precision::Device, 1e-6);
}

#[test]
fn pow_with_a_known_exponent_varying_along_an_axis_is_raised_slice_by_slice() {
    let m = import_named("pow_exponents", &[]).unwrap();
    let text = ipu_graph::print(&m.graph);
    // Exponent 5 by repeated squaring, 1.5 through exp and log, -3 through a reciprocal.
    assert!(text.contains("%z.piece3.square1 = mul("), "{text}");
    assert!(text.contains("%z.piece2.log = log("), "{text}");
    assert!(text.contains("%z.piece1 = div("), "{text}");
    assert!(text.contains("%z = concat("), "{text}");
    check_outputs(&m, "pow_exponents", Precision::Exact, 1e-5);
    check_outputs(&m, "pow_exponents", Precision::Device, 1e-5);
}

#[test]
fn slices_with_steps_other_than_one_are_gathered_entry_by_entry() {
    let m = import_named("slice_steps", &[]).unwrap();
    let text = ipu_graph::print(&m.graph);
    assert!(
        text.contains("%y.axis0.entry0 = slice(%x) {axis = 0, start = 3, end = 4}"),
        "{text}"
    );
    assert!(text.contains("%y = concat("), "{text}");
    check_outputs(&m, "slice_steps", Precision::Exact, 0.0);
}

#[test]
fn causal_attention_with_more_keys_than_queries_uses_the_causal_mask() {
    let m = import_named("attention_causal_more_keys", &[]).unwrap();
    let text = ipu_graph::print(&m.graph);
    // Top-left aligned with no cache: the graph's causal mask, no constant bias.
    assert!(
        text.contains("%y.causal = causal_mask(%y.scores) {key_start = 0}: f32[1, 2, 3, 5]"),
        "{text}"
    );
    assert!(!text.contains("const"), "{text}");
    check_outputs(&m, "attention_causal_more_keys", Precision::Exact, 1e-5);
    check_outputs(&m, "attention_causal_more_keys", Precision::Device, 1e-5);
}

/// The exporters' layers are one repeated block: every two-layer export is a run of two blocks
/// chained by the hidden state, as imported and with its attention fused.
#[test]
fn exported_layers_are_one_repeated_block() {
    for name in [
        "hf_bert",
        "hf_distilbert_sdpa",
        "hf_gpt2_torchscript",
        "hf_llama",
    ] {
        let imported = import_named(name, &[]).unwrap();
        let (fused, _) = ipu_graph::fuse::attention_subgraphs(&imported.graph).unwrap();
        for g in [&imported.graph, &fused] {
            let (one, r) = ipu_graph::repeat::find(g)
                .unwrap()
                .unwrap_or_else(|| panic!("{name}: no repeated block"));
            eprintln!(
                "{name}: {} ops -> {}, block {} ({}..), carry {} -> {}, frames {}",
                g.operations().len(),
                one.operations().len(),
                r.block.len(),
                r.block[0],
                r.input,
                r.output,
                r.frames.len()
            );
            assert_eq!(r.count, 2, "{name}");
        }
    }
}

/// A tied LM head holds its table once, whichever exporter wrote it: the dynamo exporter's one
/// initializer with a `Transpose` for the head (Llama) and the TorchScript exporter's two
/// initializers of the same numbers (GPT-2). The lookup reads the head's operand's columns
/// (the outputs against onnxruntime's: `ipu-cli/tests/onnx_cli.rs`).
#[test]
fn a_tied_embedding_is_held_once() {
    for name in ["hf_llama", "hf_gpt2_torchscript"] {
        let imported = import_named(name, &[]).unwrap();
        let g = &imported.graph;
        let text = ipu_graph::print(g);
        assert!(text.contains("= gather_columns("), "{name}: {text}");
        assert!(
            imported.notes.iter().any(|n| n.contains("held once")),
            "{name}: {:?}",
            imported.notes
        );
        // The vocabulary's table appears once among the constants, as `[hidden, vocab]`.
        let tables: Vec<_> = (g.constants().iter())
            .map(|c| &g.value(c.value).ty.shape)
            .filter(|s| s.len() == 2 && (s[0] >= 1000 || s[1] >= 1000))
            .collect();
        assert_eq!(tables.len(), 1, "{name}: {tables:?}");
    }
}

/// LeakyRelu with any alpha: the maximum of `x` and `alpha x` for alpha in 0..=1, the selection
/// `where(x < 0, alpha x, x)` otherwise; bit for bit the data set's outputs (NumPy's definition
/// in float64), NaN, infinities and signed zeros included.
#[test]
fn leaky_relu_with_any_alpha() {
    let m = import_named("leaky_relu_alphas", &[]).unwrap();
    let text = ipu_graph::print(&m.graph);
    assert!(text.contains("%y0 = where("), "{text}");
    assert!(text.contains("%y1 = where("), "{text}");
    assert!(text.contains("%y2 = max("), "{text}");
    check_outputs_bitwise(&m, "leaky_relu_alphas");
}

/// Pow with exponent 0 is 1 for every base (NaN and infinities too), as a scalar exponent and
/// among others along the last axis; bit for bit the data set's outputs.
#[test]
fn pow_with_exponent_zero_is_one() {
    let m = import_named("pow_zero", &[]).unwrap();
    check_outputs_bitwise(&m, "pow_zero");
}

/// The data set's outputs bit for bit in both precisions (NaN matching NaN).
fn check_outputs_bitwise(m: &Imported, name: &str) {
    let inputs = test_tensors(name, "input");
    let expected = test_tensors(name, "output");
    for precision in [Precision::Exact, Precision::Device] {
        let outputs = evaluate(&m.graph, &inputs, precision, 1).unwrap();
        for (i, (got, want)) in outputs.iter().zip(&expected).enumerate() {
            for (j, (&g, &w)) in got.data.iter().zip(&want.data).enumerate() {
                let same = if w.is_nan() {
                    g.is_nan()
                } else {
                    g.to_bits() == w.to_bits()
                };
                assert!(
                    same,
                    "{name} {precision:?} output {i} element {j}: {g} vs {w}"
                );
            }
        }
    }
}
