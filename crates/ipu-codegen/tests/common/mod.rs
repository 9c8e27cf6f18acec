//! Runs a graph the whole way: build, write the package bytes, read them back, load them on
//! the simulated device, run, and compare every output with the host reference in device
//! precision.

#![allow(dead_code)]

use ipu_codegen::{BuildOptions, CodegenError, build};
use ipu_graph::Graph;
use ipu_target::Target;

pub use ipu_fuzz::diff::Outcome;

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

/// Builds and runs `graph` on tiles `0..tiles` of `target` with inputs from `seed`, through
/// the package bytes and the reader, and compares with the device-precision reference.
pub fn run(graph: &Graph, target: Target, tiles: u32, seed: u64) -> Outcome {
    ipu_fuzz::diff::run_on_device(graph, target, tiles, seed).unwrap_or_else(|e| panic!("{e}"))
}
