//! Property tests of the text form: random graphs with arbitrary f32 attributes and shapes
//! print and parse back to the same graph.

use ipu_graph::{DType, GraphBuilder, OpKind, TensorType, parse, print};
use proptest::prelude::*;

fn dtype() -> impl Strategy<Value = DType> {
    prop_oneof![
        Just(DType::F32),
        Just(DType::F16),
        (-32i8..=31).prop_map(|scale| DType::F143 { scale }),
        (-32i8..=31).prop_map(|scale| DType::F152 { scale }),
    ]
}

proptest! {
    #[test]
    fn random_chains_round_trip(
        d in dtype(),
        shape in proptest::collection::vec(1usize..5, 1..4),
        factor_bits in any::<u32>(),
        epsilon_bits in 0u32..0x7f80_0000,
        to in dtype(),
    ) {
        let factor = f32::from_bits(factor_bits);
        prop_assume!(factor.is_finite());
        let epsilon = f32::from_bits(epsilon_bits);
        let mut b = GraphBuilder::new("chain");
        let x = b.input("x", TensorType::new(d, shape.clone()));
        let s = b.op("s", OpKind::Scale { factor }, &[x]).unwrap();
        let n = b.op("n", OpKind::LayerNorm { epsilon }, &[s]).unwrap();
        let axis = shape.len() - 1;
        let r = b.op("r", OpKind::ReduceSum { axis }, &[n]).unwrap();
        let y = b.op("y", OpKind::Sub, &[n, r]).unwrap();
        let c = b.cast("c", y, to).unwrap();
        b.output(c);
        b.output(r);
        let g = b.finish().unwrap();
        let text = print(&g);
        let back = parse(&text, "prop.ipug").unwrap();
        prop_assert_eq!(&back, &g);
        prop_assert_eq!(print(&back), text);
    }
}
