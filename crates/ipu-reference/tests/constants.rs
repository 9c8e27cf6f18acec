//! Graphs with constants evaluate in both precisions: constants take the values their data
//! decodes to (FP8 codes at the dtype's scale, f16 bits), including through the expansion of
//! fused operations in device precision.

use ipu_graph::{DType, GraphBuilder, OpKind, TensorType};
use ipu_reference::{Precision, Tensor, evaluate};

fn t(d: DType, s: &[usize]) -> TensorType {
    TensorType::new(d, s.to_vec())
}

#[test]
fn linear_layer_with_constant_weight_and_bias() {
    let mut b = GraphBuilder::new("linear");
    let x = b.input("x", t(DType::F32, &[2, 3]));
    let w = b
        .constant_values("w", t(DType::F32, &[3, 2]), &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0])
        .unwrap();
    let bias = b
        .constant_values("bias", t(DType::F32, &[1, 2]), &[0.5, -0.5])
        .unwrap();
    let xw = b.matmul("xw", x, w, DType::F32, DType::F32).unwrap();
    let y = b.op("y", OpKind::Add, &[xw, bias]).unwrap();
    b.output(y);
    b.output(bias);
    let g = b.finish().unwrap();
    let x = Tensor::new(DType::F32, vec![2, 3], vec![1.0, 0.0, -1.0, 2.0, 1.0, 0.5]).unwrap();
    for precision in [Precision::Exact, Precision::Device] {
        let out = evaluate(&g, std::slice::from_ref(&x), precision, 1).unwrap();
        // [1, 0, -1] w = [1 - 5, 2 - 6]; [2, 1, 0.5] w = [2 + 3 + 2.5, 4 + 4 + 3]
        assert_eq!(out[0].data, vec![-3.5, -4.5, 8.0, 10.5], "{precision}");
        assert_eq!(out[1].data, vec![0.5, -0.5], "a constant output");
    }
}

#[test]
fn fp8_and_f16_constants_decode_exactly() {
    let mut b = GraphBuilder::new("codes");
    let x = b.input("x", t(DType::F16, &[1, 4]));
    // Codes 0x01 (smallest subnormal), 0x7f (largest), 0x80 (NaN) and 0xc0 of F143 at scale -3.
    let codes = b
        .constant(
            "codes",
            t(DType::F143 { scale: -3 }, &[1, 4]),
            vec![0x01, 0x7f, 0x80, 0xc0],
        )
        .unwrap();
    let wide = b.cast("wide", codes, DType::F16).unwrap();
    let half = b
        .constant(
            "half",
            t(DType::F16, &[1, 4]),
            vec![0x02, 0x00, 0x00, 0x3c, 0, 0, 0, 0],
        )
        .unwrap();
    let sum = b.op("sum", OpKind::Add, &[x, wide]).unwrap();
    let y = b.op("y", OpKind::Add, &[sum, half]).unwrap();
    b.output(y);
    let g = b.finish().unwrap();
    let x = Tensor::new(DType::F16, vec![1, 4], vec![0.0; 4]).unwrap();
    let table = ipu_numerics::decode_table(ipu_numerics::Fp8Format::F143, -3);
    for precision in [Precision::Exact, Precision::Device] {
        let y = &evaluate(&g, std::slice::from_ref(&x), precision, 1).unwrap()[0].data;
        // f16 0x0002 is 2^-23; F143 code 0x01 at scale -3 is 2^-10 * 2^-3.
        assert_eq!(y[0], table[0x01] + 2f32.powi(-23), "{precision}");
        assert_eq!(y[1], table[0x7f] + 1.0, "{precision}");
        assert!(y[2].is_nan(), "{precision}");
        assert_eq!(y[3], table[0xc0], "{precision}");
    }
}

/// In device precision flash attention is evaluated through its expansion, which must carry
/// the graph's constants along.
#[test]
fn constants_survive_the_expansion_of_fused_operations() {
    let mut b = GraphBuilder::new("flash");
    let q = b.input("q", t(DType::F32, &[4, 8]));
    let k = b
        .constant_values("k", t(DType::F32, &[4, 8]), &[0.25; 32])
        .unwrap();
    let v = b
        .constant_values(
            "v",
            t(DType::F32, &[4, 8]),
            &(0..32).map(|i| i as f32).collect::<Vec<_>>(),
        )
        .unwrap();
    let out = b
        .op(
            "out",
            OpKind::FlashAttention {
                scale: 0.5,
                causal: false,
                block_q: 2,
                block_k: 2,
                partials: DType::F32,
                out: DType::F32,
            },
            &[q, k, v],
        )
        .unwrap();
    b.output(out);
    let g = b.finish().unwrap();
    let q = Tensor::new(DType::F32, vec![4, 8], vec![1.0; 32]).unwrap();
    for precision in [Precision::Exact, Precision::Device] {
        let y = &evaluate(&g, std::slice::from_ref(&q), precision, 1).unwrap()[0].data;
        // Equal scores: every query averages the rows of v, 12 + column.
        for (i, &x) in y.iter().enumerate() {
            assert!(
                (x - (12.0 + (i % 8) as f32)).abs() < 1e-5,
                "{precision} {i}: {x}"
            );
        }
    }
}
