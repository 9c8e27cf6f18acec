//! Graph constants on the device: the package carries their data, `initialize` writes them
//! onto the tiles once, and every `run` reads them there; differential tests against the host
//! reference through "write the package, read it back, run".

mod common;

use ipu_codegen::{BuildOptions, build};
use ipu_graph::{DType, Graph, GraphBuilder, OpKind, TensorType};
use ipu_package::{Package, TensorRole};
use ipu_reference::{Precision, Tensor, evaluate, make_inputs};
use ipu_runtime::{Session, SimulatorDevice};
use ipu_target::Target;

fn values(n: usize, seed: u32) -> Vec<f32> {
    (0..n)
        .map(|i| (((i as u32).wrapping_mul(2_654_435_761) ^ seed) % 1000) as f32 / 500.0 - 1.0)
        .collect()
}

/// `y = x w + b`, then `y * s` with a broadcast row: weights, a bias and a scale row as
/// constants, of `dtype`.
fn linear(dtype: DType, m: usize, k: usize, n: usize) -> Graph {
    let mut g = GraphBuilder::new("linear");
    let x = g.input("x", TensorType::new(dtype, [m, k]));
    let w = g
        .constant_values("w", TensorType::new(dtype, [k, n]), &values(k * n, 7))
        .unwrap();
    let b = g
        .constant_values("b", TensorType::new(dtype, [m, n]), &values(m * n, 11))
        .unwrap();
    let s = g
        .constant_values("s", TensorType::new(dtype, [1, n]), &values(n, 13))
        .unwrap();
    let xw = g
        .op(
            "xw",
            OpKind::MatMul {
                partials: DType::F32,
                out: dtype,
            },
            &[x, w],
        )
        .unwrap();
    let y = g.op("y", OpKind::Add, &[xw, b]).unwrap();
    let z = g.op("z", OpKind::Mul, &[y, s]).unwrap();
    g.output(z);
    g.finish().unwrap()
}

#[test]
fn constants_reach_the_device_and_match_the_reference() {
    for dtype in [DType::F32, DType::F16] {
        for tiles in [1, 4] {
            let g = linear(dtype, 16, 32, 24);
            common::run(&g, Target::gc200(), tiles, 3).assert_exact(&format!("{dtype} {tiles}"));
        }
    }
}

#[test]
fn the_package_carries_the_constants_and_initialize_moves_them() {
    let g = linear(DType::F16, 8, 16, 16);
    let b = build(&g, &common::gc200(2)).unwrap();
    let m = &b.package.manifest;
    let constants: Vec<_> = m
        .tensors
        .iter()
        .filter(|t| t.role == TensorRole::Constant)
        .collect();
    assert_eq!(
        constants
            .iter()
            .map(|t| t.name.as_str())
            .collect::<Vec<_>>(),
        ["w", "b", "s"]
    );
    // The constants page holds them, in their storage order; inputs do not include them.
    assert_eq!(b.package.constants.len() as u64, m.host_pages[2]);
    assert!(
        m.tensors
            .iter()
            .filter(|t| t.role == TensorRole::Input)
            .all(|t| t.name == "x")
    );
    let init = b.package.program("initialize").unwrap();
    let run = b.package.program("run").unwrap();
    assert_eq!(init.phases, 1, "one host exchange of the constants");
    // The run program moves the inputs and outputs only: its host exchange points are two.
    let program =
        ipu_codegen::lower::lower(&ipu_codegen::plan::plan(&g, &Target::gc200(), 2).unwrap())
            .unwrap()
            .program;
    assert_eq!(program.init_steps, 1);
    let run_hosts = program.steps[program.init_steps..]
        .iter()
        .filter(|s| matches!(s, ipu_codegen::program::Step::Host { .. }))
        .count();
    assert_eq!(run_hosts, 2);
    assert_eq!(run.phases as usize, program.steps.len() - 1);
    // Constant buffers live across every step; they count in the memory peaks.
    assert!(
        program
            .buffers
            .iter()
            .filter(|b| b.resident)
            .all(|b| b.first == 0 && b.last == program.steps.len() - 1)
    );
    assert!(program.buffers.iter().any(|b| b.resident));
    assert!(b.report.peak_standard_bytes as u64 > b.package.constants.len() as u64 / 2);
}

#[test]
fn runs_after_one_initialize_reuse_the_resident_constants() {
    let g = linear(DType::F32, 8, 16, 8);
    let target = Target::gc200();
    let b = build(&g, &BuildOptions { target, tiles: 3 }).unwrap();
    let package = Package::from_bytes(&b.package.to_bytes().unwrap()).unwrap();
    let mut s = Session::open(Box::new(SimulatorDevice::new(target)), &package).unwrap();
    s.start_host_exchange().unwrap();
    s.call("initialize").unwrap();
    for seed in [1, 2, 3] {
        let inputs = make_inputs(&g, seed);
        s.write_input("x", &inputs[0].to_bytes()).unwrap();
        s.call("run").unwrap();
        let want = evaluate(&g, &inputs, Precision::Device, 1).unwrap();
        let got = Tensor::from_bytes(
            want[0].dtype,
            want[0].shape.clone(),
            &s.read_output("z").unwrap(),
        )
        .unwrap();
        assert_eq!(got, want[0], "run with seed {seed}");
    }
}

#[test]
fn an_fp8_constant_keeps_its_codes() {
    // Every F143 code that is a finite value, as a constant cast to f32 on the device.
    let dtype = DType::F143 { scale: -2 };
    let codes: Vec<u8> = (0..=255u8).filter(|&c| c != 0x80).take(64).collect();
    let mut g = GraphBuilder::new("codes");
    let x = g.input("x", TensorType::new(DType::F32, [4, 16]));
    let q = g
        .constant("q", TensorType::new(dtype, [4, 16]), codes)
        .unwrap();
    let f = g.op("f", OpKind::cast(DType::F32), &[q]).unwrap();
    let y = g.op("y", OpKind::Add, &[f, x]).unwrap();
    g.output(y);
    let g = g.finish().unwrap();
    common::run_within(&g, &[2], 5, "fp8 constant", 0.0);
}
