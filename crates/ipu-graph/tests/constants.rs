//! Constants in the graph IR: the builder, the verifier's data-length check, the text form's
//! inline literals and file references (golden prints, exact round trips of every f16 bit
//! pattern and every FP8 code) and its errors. Update the inline snapshots with
//! `UPDATE_EXPECT=1 cargo test -p ipu-graph`.

mod common;

use common::check_error;
use std::collections::BTreeMap;

use expect_test::expect;
use ipu_graph::{
    ConstantFile, DType, Graph, GraphBuilder, INLINE_CONSTANT_ELEMENTS_MAX, OpKind, TensorType,
    parse, parse_with, print, print_with_files,
};

fn t(d: DType, s: &[usize]) -> TensorType {
    TensorType::new(d, s.to_vec())
}

/// A linear layer with an external weight, an inline bias and one small constant per dtype.
fn linear() -> Graph {
    let mut b = GraphBuilder::new("linear");
    let x = b.input("x", t(DType::F32, &[2, 4]));
    let w: Vec<f32> = (0..4 * 24).map(|i| i as f32 * 0.25 - 3.0).collect();
    let w = b.constant_values("w", t(DType::F32, &[4, 24]), &w).unwrap();
    let bias: Vec<f32> = (0..INLINE_CONSTANT_ELEMENTS_MAX)
        .map(|i| i as f32)
        .collect();
    let xw = b.matmul("xw", x, w, DType::F32, DType::F32).unwrap();
    let sliced = b
        .op(
            "sliced",
            OpKind::Slice {
                axis: 1,
                start: 0,
                end: 16,
            },
            &[xw],
        )
        .unwrap();
    let bias = b
        .constant_values("bias", t(DType::F32, &[1, 16]), &bias)
        .unwrap();
    let y = b.op("y", OpKind::Add, &[sliced, bias]).unwrap();
    b.output(y);
    b.constant_values(
        "special",
        t(DType::F32, &[5]),
        &[-0.0, f32::INFINITY, f32::NEG_INFINITY, f32::NAN, 1e-5],
    )
    .unwrap();
    b.constant_values("half", t(DType::F16, &[3]), &[0.5, -65504.0, 5.96e-8])
        .unwrap();
    b.constant_values(
        "codes",
        t(DType::F143 { scale: -3 }, &[4]),
        &[0.0, 0.0625, -1.875, f32::NAN],
    )
    .unwrap();
    b.constant_values("wide", t(DType::F152 { scale: 0 }, &[2]), &[57344.0, -1.0])
        .unwrap();
    b.finish().unwrap()
}

/// The resolver of a directory of printed constant files.
fn resolve_from(
    files: &[ConstantFile],
) -> impl FnMut(ipu_graph::ExternalConstant<'_>) -> Result<Vec<u8>, String> + '_ {
    let by_name: BTreeMap<&str, &ConstantFile> =
        files.iter().map(|f| (f.file_name.as_str(), f)).collect();
    move |c| {
        let f = by_name
            .get(c.file_name)
            .ok_or_else(|| format!("no such file {}", c.file_name))?;
        assert_eq!(&f.ty, c.ty, "the resolver is asked for the declared type");
        Ok(f.data.bytes().to_vec())
    }
}

#[test]
fn golden_constants() {
    let g = linear();
    let printed = print_with_files(&g);
    expect![[r#"
        graph linear {
          input %x: f32[2, 4]
          const %w: f32[4, 24] = file("w.npy")
          %xw = matmul(%x, %w) {partials = f32}: f32[2, 24]
          %sliced = slice(%xw) {axis = 1, start = 0, end = 16}: f32[2, 16]
          const %bias: f32[1, 16] = [0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 11.0, 12.0, 13.0, 14.0, 15.0]
          %y = add(%sliced, %bias): f32[2, 16]
          const %special: f32[5] = [-0.0, inf, -inf, nan, 1e-5]
          const %half: f16[3] = [0.5, -65504.0, 5.9604645e-8]
          const %codes: f143@-3[4] = [0.0, 0.0625, -1.875, nan]
          const %wide: f152@0[2] = [57344.0, -1.0]
          output %y
        }
    "#]]
    .assert_eq(&printed.text);
    assert_eq!(printed.text, print(&g));
    let names: Vec<&str> = printed.files.iter().map(|f| f.file_name.as_str()).collect();
    assert_eq!(names, ["w.npy"]);
    assert_eq!(printed.files[0].ty, t(DType::F32, &[4, 24]));
    assert_eq!(printed.files[0].data.len(), 4 * 24 * 4);
}

#[test]
fn inline_and_external_constants_round_trip() {
    let g = linear();
    let printed = print_with_files(&g);
    let back = parse_with(
        &printed.text,
        "linear.ipug",
        &mut resolve_from(&printed.files),
    )
    .unwrap_or_else(|e| panic!("{e}\n{}", printed.text));
    assert_eq!(back, g);
    assert_eq!(print_with_files(&back), printed);
    // Without a resolver the file reference is an error at its position.
    let e = parse(&printed.text, "linear.ipug").unwrap_err().to_string();
    assert_eq!(
        e,
        "linear.ipug:3:31: %w = file(\"w.npy\"): constant files need a resolver (this reader \
         takes inline constants only)"
    );
}

/// One graph holding every bit pattern of `dtype` (`bytes` per element) in constants of
/// `INLINE_CONSTANT_ELEMENTS_MAX` elements.
fn every_pattern(dtype: DType, patterns: usize) -> Graph {
    let width = dtype.bytes();
    let mut b = GraphBuilder::new("patterns");
    let x = b.input("x", t(DType::F32, &[1]));
    b.output(x);
    let per = INLINE_CONSTANT_ELEMENTS_MAX;
    for chunk in 0..patterns / per {
        let data: Vec<u8> = (chunk * per..(chunk + 1) * per)
            .flat_map(|p| p.to_le_bytes()[..width].to_vec())
            .collect();
        b.constant(format!("c{chunk}"), t(dtype, &[per]), data)
            .unwrap();
    }
    b.finish().unwrap()
}

/// Every FP8 code and every f16 bit pattern survives print and parse exactly; constants with
/// a non-canonical NaN go to files, the others are inline.
#[test]
fn every_fp8_code_and_f16_pattern_round_trips() {
    for (dtype, patterns) in [
        (DType::F143 { scale: -3 }, 256),
        (DType::F152 { scale: 5 }, 256),
        (DType::F143 { scale: 0 }, 256),
        (DType::F16, 65536),
    ] {
        let g = every_pattern(dtype, patterns);
        let printed = print_with_files(&g);
        let back = parse_with(&printed.text, "p.ipug", &mut resolve_from(&printed.files))
            .unwrap_or_else(|e| panic!("{dtype}: {e}"));
        assert_eq!(back, g, "{dtype}");
        if dtype.is_fp8() {
            assert!(
                printed.files.is_empty(),
                "{dtype}: every FP8 code is inline"
            );
        } else {
            // f16 NaNs: exponent all ones, mantissa non-zero; all but 0x7e00 are non-canonical,
            // and they fill the chunks from 0x7c00 to 0x7fff and 0xfc00 to 0xffff.
            assert_eq!(
                printed.files.len(),
                2 * 0x400 / INLINE_CONSTANT_ELEMENTS_MAX
            );
        }
    }
}

fn model(line: &str) -> String {
    format!("graph g {{\n  input %a: f32[2]\n{line}\n  output %a\n}}\n")
}

#[test]
fn constant_syntax_errors_have_positions() {
    check_error(
        &model("  const %c: f32[3] = [1.0, 2.0]"),
        expect!["bad.ipug:3:22: %c: 2 elements given, f32[3] has 3"],
    );
    check_error(
        &model("  const %c: f32[1] = [1.0, 2.0]"),
        expect!["bad.ipug:3:28: %c: more than the 1 elements of f32[1]"],
    );
    check_error(
        &model("  const %c: f16[1] = [0.1]"),
        expect!["bad.ipug:3:23: 0.1 is not a value of f16 (the nearest is 0.099975586)"],
    );
    check_error(
        &model("  const %c: f143@0[1] = [0.3]"),
        expect!["bad.ipug:3:26: 0.3 is not a value of f143@0 (the nearest is 0.3125)"],
    );
    check_error(
        &model("  const %c: f32[1] = [abc]"),
        expect!["bad.ipug:3:23: expected a number, `inf` or `nan`, found `abc`"],
    );
    check_error(
        &model("  const %c: f32[1] = 1.0"),
        expect![
            "bad.ipug:3:22: expected `[` or `file(\"NAME.npy\")` for the constant's data, found `1.0`"
        ],
    );
    check_error(
        &model("  const %c: f32[1] = file(\"../w.npy\")"),
        expect![
            "bad.ipug:3:27: file name `../w.npy` must be a relative path without `..` components"
        ],
    );
    check_error(
        &model("  const %c: f32[1] = file(\"w.npy)"),
        expect!["bad.ipug:3:27: unterminated string"],
    );
    check_error(
        &model("  const %a: f32[1] = [1.0]"),
        expect!["bad.ipug:3:9: value %a is already defined"],
    );
    // A resolver's data of the wrong length.
    let text = model("  const %c: f32[2] = file(\"c.npy\")");
    let e = parse_with(&text, "bad.ipug", &mut |_| Ok(vec![0; 4]))
        .unwrap_err()
        .to_string();
    assert_eq!(
        e,
        "bad.ipug:3:27: %c = file(\"c.npy\"): 4 bytes, f32[2] needs 8"
    );
    // A resolver's refusal.
    let e = parse_with(&text, "bad.ipug", &mut |c| {
        Err(format!("{} is not a float32 array", c.file_name))
    })
    .unwrap_err()
    .to_string();
    assert_eq!(
        e,
        "bad.ipug:3:27: %c = file(\"c.npy\"): c.npy is not a float32 array"
    );
}

#[test]
fn constants_in_operations_parse_and_evaluate_types() {
    let text = "graph g {
  input %x: f16[2, 3]
  const %shift: f16[1, 3] = [1.0, -2.0, 0.5]
  %y = sub(%x, %shift): f16[2, 3]
  output %y
}
";
    let g = parse(text, "g.ipug").unwrap();
    let c = g.value_by_name("shift").unwrap();
    assert!(g.constant(c).is_some());
    assert!(g.constant(g.inputs()[0]).is_none());
    assert_eq!(
        ipu_graph::decode_elements(DType::F16, g.constant(c).unwrap().data.bytes()),
        vec![1.0, -2.0, 0.5]
    );
    assert_eq!(print(&g), text);
}

#[test]
fn verifier_checks_constant_data_against_the_type() {
    let mut b = GraphBuilder::new("g");
    let e = b
        .constant("c", t(DType::F32, &[3]), vec![0u8; 8])
        .unwrap_err()
        .to_string();
    assert_eq!(e, "value %c: constant data has 8 bytes but f32[3] needs 12");
    let c = b.constant("c", t(DType::F16, &[3]), vec![0u8; 6]).unwrap();
    b.output(c);
    let mut g = b.finish_unverified();
    assert!(g.verify().is_ok(), "a constant may be a graph output");
    g.parts_mut().0[c.0 as usize].ty = t(DType::F16, &[4]);
    assert_eq!(
        g.verify().unwrap_err().to_string(),
        "value %c: constant data has 6 bytes but f16[4] needs 8"
    );
    // A constant that is also a graph input.
    let mut b = GraphBuilder::new("g");
    let c = b.constant("c", t(DType::F16, &[3]), vec![0u8; 6]).unwrap();
    b.output(c);
    let mut g = b.finish_unverified();
    g.parts_mut().2.push(c);
    assert_eq!(
        g.verify().unwrap_err().to_string(),
        "value %c: a constant must not be a graph input or have a producer"
    );
}
