//! ONNX models from the command line: `ipu graph print|check` and `ipu reference` import
//! `*.onnx` files with their `--dim` bindings; bad models exit 2 with the importer's message.

mod common;

use common::{ipu_quiet as ipu, refused, stderr, stdout, succeeded};

use std::path::PathBuf;

/// A model written by scripts/gen-onnx-testdata.py.
fn model(name: &str) -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../ipu-onnx/tests/data")
        .join(format!("{name}.onnx"))
        .to_str()
        .unwrap()
        .to_string()
}

#[test]
fn graph_print_imports_with_dimension_bindings() {
    let m = model("head_split");
    let o = ipu(&["graph", "print", &m, "--dim", "batch=2", "--dim", "seq=3"]);
    succeeded(&o);
    assert_eq!(
        stdout(&o),
        "graph head_split {\n  input %x: f32[2, 3, 8]\n  \
         %heads = reshape(%x) {shape = [2, 3, 2, 4]}: f32[2, 3, 2, 4]\n  \
         %y = transpose(%heads) {perm = [0, 2, 1, 3]}: f32[2, 2, 3, 4]\n  output %y\n}\n"
    );
    let o = ipu(&["graph", "print", &m, "--dim", "batch=2"]);
    refused(
        &o,
        "input `x`: dimension `seq` is symbolic; bind it with --dim seq=VALUE",
    );
    let o = ipu(&["graph", "print", &m, "--dim", "batch=0"]);
    refused(&o, "at least 1");
}

#[test]
fn graph_check_and_reference_take_onnx_models() {
    let o = ipu(&["graph", "check", &model("linear_external")]);
    succeeded(&o);
    assert_eq!(
        stdout(&o),
        "graph=linear_external operations=2 values=5 inputs=1 outputs=1 result=ok\n"
    );
    let o = ipu(&["reference", &model("mix"), "--precision", "exact"]);
    succeeded(&o);
    let s = stdout(&o);
    assert!(
        s.contains("output=y precision=exact dtype=f32 shape=[2,8]"),
        "{s}"
    );
    assert!(
        s.contains("output=peak_flat precision=exact dtype=f32 shape=[2]"),
        "{s}"
    );
}

#[test]
fn bad_models_exit_2_naming_what_is_wrong() {
    let o = ipu(&["graph", "check", &model("unknown_op")]);
    refused(
        &o,
        "node `mystery`: operator FancyOp (domain `ai.onnx`) is not supported",
    );
    let o = ipu(&["graph", "check", &model("opset_too_new")]);
    refused(&o, "opset 29");
    let truncated = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("truncated.onnx");
    let bytes = std::fs::read(model("linear")).unwrap();
    std::fs::write(&truncated, &bytes[..bytes.len() / 2]).unwrap();
    let o = ipu(&["graph", "check", truncated.to_str().unwrap()]);
    refused(&o, "malformed ONNX model");
    let o = ipu(&["graph", "print", "matmul", "--dim", "batch=2"]);
    refused(&o, "--dim applies to ONNX models only");
}

fn data(name: &str) -> String {
    format!(
        "{}/../ipu-onnx/tests/data/{name}",
        env!("CARGO_MANIFEST_DIR")
    )
}

#[test]
fn run_takes_an_onnx_test_data_set_and_checks_its_expected_outputs() {
    let art = std::env::temp_dir().join(format!("ipu-onnx-data-{}", std::process::id()));
    let o = ipu(&[
        "run",
        &model("linear"),
        "--data",
        &data("linear"),
        "--tiles",
        "4",
        "--artifacts",
        art.to_str().unwrap(),
    ]);
    let out = stdout(&o);
    assert_eq!(o.status.code(), Some(0), "{out}");
    assert!(
        out.lines()
            .any(|l| l.starts_with("output=y versus=onnx_data") && l.ends_with("result=PASS")),
        "{out}"
    );
    // A data set whose input has another shape is refused before anything runs.
    let o = ipu(&[
        "run",
        &model("gemm_trans_b"),
        "--data",
        &data("linear"),
        "--artifacts",
        art.to_str().unwrap(),
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("input_0.pb") && err.contains("expects"),
        "{err}"
    );
    // A symbolic dimension is bound on `ipu run` as on `ipu graph print`.
    let o = ipu(&[
        "run",
        &model("head_split"),
        "--dim",
        "batch=2",
        "--dim",
        "seq=4",
        "--tiles",
        "2",
        "--artifacts",
        art.to_str().unwrap(),
    ]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let _ = std::fs::remove_dir_all(&art);
}

/// Runs each model on `tiles` tiles with its ONNX data set (`--data`): every output checked
/// against the data set's expected outputs passes.
fn passes_its_data_set(names: &[&str], tiles: &str) {
    for name in names {
        let art = std::env::temp_dir().join(format!("ipu-onnx-{name}-{}", std::process::id()));
        let o = ipu(&[
            "run",
            &model(name),
            "--data",
            &data(name),
            "--tiles",
            tiles,
            "--artifacts",
            art.to_str().unwrap(),
        ]);
        let out = stdout(&o);
        assert_eq!(o.status.code(), Some(0), "{name}: {out}{}", stderr(&o));
        let checked: Vec<&str> = out
            .lines()
            .filter(|l| l.contains("versus=onnx_data"))
            .collect();
        assert!(!checked.is_empty(), "{name}: {out}");
        assert!(
            checked.iter().all(|l| l.ends_with("result=PASS")),
            "{name}: {out}"
        );
        let _ = std::fs::remove_dir_all(&art);
    }
}

#[test]
fn gelu_models_run_on_the_device_within_the_onnx_data_tolerance() {
    passes_its_data_set(
        &[
            "gelu",
            "gelu_tanh",
            "gelu_pattern",
            "sqrt",
            "tanh",
            "erf",
            "pow",
        ],
        "3",
    );
}

#[test]
fn expanded_forms_and_the_logarithm_match_their_data_sets_on_the_device() {
    // LayerNormalization over two axes with its statistics read, and Attention with a
    // past cache, causal offset, soft cap, run-time mask with a fully masked row and its
    // post-softmax scores; then a constant boolean mask; a matmul whose operands broadcast
    // different batch axes; the natural logarithm; powers with exponents known per column;
    // slices with steps -1 and 2; causal attention over more keys than queries; LeakyRelu
    // with alphas above 1, below 0 and between, over NaN, infinities and signed zeros; Pow
    // with exponent 0.
    passes_its_data_set(
        &[
            "layer_norm_axis",
            "attention_unfused",
            "attention_bool_mask",
            "matmul_bcast",
            "log",
            "pow_exponents",
            "slice_steps",
            "attention_causal_more_keys",
            "leaky_relu_alphas",
            "pow_zero",
        ],
        "4",
    );
}

#[test]
fn exported_transformers_models_match_onnxruntime_on_all_tiles() {
    // Two-layer BERT (dynamo), DistilBERT (dynamo, sdpa attention), GPT-2 with its tied LM
    // head (TorchScript exporter) and a grouped-query Llama (dynamo), exported by
    // torch.onnx.export from their transformers configurations (scripts/gen-hf-testdata.sh):
    // int64 ids and a padding mask in, onnxruntime's outputs expected.
    passes_its_data_set(
        &[
            "hf_bert",
            "hf_distilbert_sdpa",
            "hf_gpt2_torchscript",
            "hf_llama",
        ],
        "1472",
    );
}

#[test]
fn a_token_id_outside_the_vocabulary_is_refused_before_running() {
    let dir = std::env::temp_dir().join(format!("ipu-hf-bad-ids-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // input_ids of shape (2, 16): int64 ids, the last of row 1 beyond the 1000 entries.
    let mut ids: Vec<i64> = (0..32).collect();
    ids[31] = 1000;
    let write = |name: &str, v: &[i64]| {
        let header = "{'descr': '<i8', 'fortran_order': False, 'shape': (2, 16), }";
        let pad = 64 - (10 + header.len() + 1) % 64;
        let text = format!("{header}{}\n", " ".repeat(pad));
        let mut bytes = b"\x93NUMPY\x01\x00".to_vec();
        bytes.extend((text.len() as u16).to_le_bytes());
        bytes.extend(text.as_bytes());
        bytes.extend(v.iter().flat_map(|x| x.to_le_bytes()));
        let path = dir.join(name);
        std::fs::write(&path, bytes).unwrap();
        path
    };
    let mask_file = write("mask.npy", &[1; 32]);
    let art = dir.join("art");
    let run = |ids: &[i64]| {
        let ids_file = write("ids.npy", ids);
        let o = ipu(&[
            "run",
            &model("hf_bert"),
            "--input",
            &format!("input_ids={}", ids_file.display()),
            "--input",
            &format!("attention_mask={}", mask_file.display()),
            "--artifacts",
            art.to_str().unwrap(),
        ]);
        assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
        stderr(&o)
    };
    let err = run(&ids);
    assert!(
        err.contains("input \"input_ids\"")
            && err.contains("the value 1000 at [1, 15]")
            && err.contains("table of 1000 entries"),
        "{err}"
    );
    assert!(!art.join("model.ipuexe").exists(), "nothing is built");
    // An int64 value the device's 32-bit form cannot hold.
    ids[3] = 1 << 40;
    let err = run(&ids);
    assert!(err.contains("1099511627776 at [0, 3]"), "{err}");
    // A package carries its inputs' bounds: `ipu exec` refuses the same id before running.
    let package = dir.join("bert.ipuexe");
    let o = ipu(&[
        "build",
        &model("hf_bert"),
        "-o",
        package.to_str().unwrap(),
        "--no-db",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    ids[3] = 3;
    let ids_file = write("ids.npy", &ids);
    let o = ipu(&[
        "exec",
        package.to_str().unwrap(),
        "--input",
        &format!("input_ids={}", ids_file.display()),
        "--input",
        &format!("attention_mask={}", mask_file.display()),
    ]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("input \"input_ids\"")
            && err.contains("the value 1000 at [1, 15]")
            && err.contains("table of 1000 entries"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
