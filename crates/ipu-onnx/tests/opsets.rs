//! The range of default-domain opsets the importer accepts. The ONNX backend node tests write
//! each model at its operator's newest version (opsets 24, 25 and 28 for Reshape, Transpose,
//! Cast, Identity, ... in onnx 1.23), whose changes since opset 23 are new element types only.

use ipu_onnx::proto::ModelProto;
use ipu_onnx::{ImportOptions, OPSET_MAX, OnnxError, import};
use prost::Message as _;

/// The committed Relu model (`scripts/gen-onnx-testdata.py`, opset 29) at opset `version`.
fn relu_at(version: i64) -> Vec<u8> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/opset_too_new.onnx");
    let mut m = ModelProto::decode(&std::fs::read(path).unwrap()[..]).unwrap();
    for o in &mut m.opset_import {
        o.version = Some(version);
    }
    m.encode_to_vec()
}

#[test]
fn opsets_24_to_28_import() {
    assert_eq!(OPSET_MAX, 28);
    for version in [23, 24, 25, 28] {
        let imported = import(&relu_at(version), &ImportOptions::default())
            .unwrap_or_else(|e| panic!("opset {version}: {e}"));
        assert_eq!(imported.graph.operations().len(), 1, "opset {version}");
    }
    assert_eq!(
        import(&relu_at(29), &ImportOptions::default()).unwrap_err(),
        OnnxError::OpsetTooNew {
            domain: "ai.onnx".into(),
            version: 29,
            max: 28
        }
    );
}

/// The committed model `name` (`scripts/gen-onnx-testdata.py`) at opset `version`.
fn model_at(name: &str, version: i64) -> Vec<u8> {
    let path = format!("{}/tests/data/{name}.onnx", env!("CARGO_MANIFEST_DIR"));
    let mut m = ModelProto::decode(&std::fs::read(path).unwrap()[..]).unwrap();
    for o in &mut m.opset_import {
        o.version = Some(version);
    }
    m.encode_to_vec()
}

#[test]
fn layer_normalization_exists_from_opset_17() {
    let err = import(&model_at("layer_norm", 16), &ImportOptions::default()).unwrap_err();
    let OnnxError::UnsupportedOperator {
        op_type,
        domain,
        reason,
        ..
    } = err
    else {
        panic!("{err:?}");
    };
    assert_eq!(op_type, "LayerNormalization");
    assert_eq!(domain, "ai.onnx");
    assert_eq!(
        reason,
        "LayerNormalization exists from opset 17; the model imports 16"
    );
    import(&model_at("layer_norm", 17), &ImportOptions::default()).unwrap();
}
