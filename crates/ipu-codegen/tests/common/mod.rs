//! Runs a graph the whole way: build, write the package bytes, read them back, load them on
//! the simulated device, run, and compare every output with the host reference in device
//! precision.

#![allow(dead_code)]

use ipu_codegen::{BuildOptions, CodegenError, build};
use ipu_graph::Graph;
use ipu_package::{Package, TensorRole};
use ipu_reference::{Comparison, Precision, Tensor, Tolerance, compare, evaluate, make_inputs};
use ipu_runtime::{Session, SimulatorDevice};
use ipu_target::Target;

/// What a run produced.
pub struct Outcome {
    /// Per output: its name and the comparison with the reference.
    pub checks: Vec<(String, Comparison)>,
    /// Cycles of the `run` call.
    pub cycles: u64,
    /// The package bytes.
    pub package_bytes: Vec<u8>,
    /// The device's outputs.
    pub outputs: Vec<Tensor>,
}

impl Outcome {
    /// Panics with the failing comparisons unless every output passed.
    pub fn assert_pass(&self, what: &str) {
        for (name, c) in &self.checks {
            assert!(c.pass(), "{what}: output {name}: {c}");
        }
        assert!(!self.checks.is_empty(), "{what}: no outputs checked");
    }

    /// Panics unless every output equals the device-precision reference bit for bit.
    pub fn assert_exact(&self, what: &str) {
        self.assert_within(what, 0.0);
    }

    /// Panics unless every output passed and is within `max_abs_error` of the reference.
    pub fn assert_within(&self, what: &str, max_abs_error: f64) {
        self.assert_pass(what);
        for (name, c) in &self.checks {
            assert!(
                c.max_abs_error <= max_abs_error,
                "{what}: output {name} is not within {max_abs_error}: {c}"
            );
        }
    }
}

/// Runs `graph` on the GC200 on each of `tiles` tile counts with inputs from `seed`: every
/// output within `max_abs_error` of the reference (`0.0`: bit for bit).
pub fn run_within(graph: &Graph, tiles: &[u32], seed: u64, what: &str, max_abs_error: f64) {
    for &t in tiles {
        run(graph, Target::gc200(), t, seed)
            .assert_within(&format!("{what} on {t} tiles"), max_abs_error);
    }
}

/// The bytes of the package `graph` builds into with `opts`.
pub fn package_bytes(graph: &Graph, opts: &BuildOptions) -> Vec<u8> {
    let b = build(graph, opts).unwrap_or_else(|e| panic!("{}: {e}", graph.name));
    b.package.to_bytes().expect("package serialises")
}

/// Options building for tiles `0..tiles` of the GC200.
pub fn gc200(tiles: u32) -> BuildOptions {
    let target = Target::gc200();
    BuildOptions { target, tiles }
}

/// The built-in model `name` with the parameters `kv`.
pub fn model(name: &str, kv: &[(&str, &str)]) -> Graph {
    let params: Vec<(String, String)> = kv
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    ipu_graph::models::build(name, &params).unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// The refusal of building `graph` on `tiles` tiles of the GC200, which must be a
/// `DoesNotFit` blamed on the user's operation `op`, needing more bytes than are available;
/// with the tile it names and its detail.
pub fn does_not_fit(graph: &Graph, tiles: u32, op: &str) -> (CodegenError, Option<u32>, String) {
    let e = build(graph, &gc200(tiles)).unwrap_err();
    let CodegenError::DoesNotFit {
        op: blamed,
        tile,
        need_bytes,
        available_bytes,
        detail,
        ..
    } = &e
    else {
        panic!("{e}");
    };
    assert_eq!(blamed.as_deref(), Some(op), "{e}");
    assert!(need_bytes > available_bytes, "{e}");
    let (tile, detail) = (*tile, detail.clone());
    (e, tile, detail)
}

/// Builds and runs `graph` on tiles `0..tiles` of `target` with inputs from `seed`.
pub fn run(graph: &Graph, target: Target, tiles: u32, seed: u64) -> Outcome {
    let b = build(graph, &BuildOptions { target, tiles })
        .unwrap_or_else(|e| panic!("{}: {e}", graph.name));
    let package_bytes = b.package.to_bytes().expect("package serialises");
    let package = Package::from_bytes(&package_bytes).expect("package reads back");
    assert_eq!(package, b.package, "package read back differs");
    let inputs = make_inputs(graph, seed);
    let mut s =
        Session::open(Box::new(SimulatorDevice::new(target)), &package).expect("session opens");
    s.start_host_exchange().expect("host exchange");
    for (&v, t) in graph.inputs().iter().zip(&inputs) {
        s.write_input(&graph.value(v).name, &t.to_bytes())
            .expect("input written");
    }
    s.call("initialize").expect("initialize runs");
    let run = s
        .call("run")
        .unwrap_or_else(|e| panic!("{}: run: {e}", graph.name));
    let expected = evaluate(graph, &inputs, Precision::Device, 1).expect("reference evaluates");
    let mut checks = Vec::new();
    let mut outputs = Vec::new();
    let outs: Vec<_> = package
        .manifest
        .tensors
        .iter()
        .filter(|t| t.role == TensorRole::Output)
        .collect();
    assert_eq!(outs.len(), expected.len());
    for (t, exp) in outs.iter().zip(&expected) {
        let bytes = s.read_output(&t.name).expect("output read");
        let actual =
            Tensor::from_bytes(exp.dtype, exp.shape.clone(), &bytes).expect("output decodes");
        checks.push((
            t.name.clone(),
            compare(&actual, exp, &Tolerance::for_dtype(exp.dtype)),
        ));
        outputs.push(actual);
    }
    Outcome {
        checks,
        cycles: run.counters.cycles,
        package_bytes,
        outputs,
    }
}
