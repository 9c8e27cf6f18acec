//! Graph constants are not lowered to the device yet: planning refuses a graph with one,
//! naming the constant, instead of building a package without its data.

use ipu_codegen::{BuildOptions, CodegenError, build};
use ipu_graph::{DType, GraphBuilder, OpKind, TensorType};
use ipu_target::Target;

#[test]
fn a_graph_with_a_constant_is_refused_naming_it() {
    let mut b = GraphBuilder::new("shifted");
    let x = b.input("x", TensorType::new(DType::F32, [4, 8]));
    let shift = b
        .constant_values("shift", TensorType::new(DType::F32, [1, 8]), &[0.5; 8])
        .unwrap();
    let y = b.op("y", OpKind::Add, &[x, shift]).unwrap();
    b.output(y);
    let g = b.finish().unwrap();
    let e = build(
        &g,
        &BuildOptions {
            target: Target::gc200(),
            tiles: 4,
        },
    )
    .unwrap_err();
    assert!(matches!(e, CodegenError::Unsupported { .. }), "{e}");
    assert_eq!(
        e.to_string(),
        "%shift: unsupported: graph constants are not lowered to the device yet"
    );
}
