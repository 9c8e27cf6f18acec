//! Runs a graph the whole way: build, write the package bytes, read them back, load them on
//! the simulated device, run, and compare every output with the host reference in device
//! precision.

#![allow(dead_code)]

use ipu_graph::Graph;
use ipu_target::Target;

pub use ipu_fuzz::diff::Outcome;

/// Builds and runs `graph` on tiles `0..tiles` of `target` with inputs from `seed`, through
/// the package bytes and the reader, and compares with the device-precision reference.
pub fn run(graph: &Graph, target: Target, tiles: u32, seed: u64) -> Outcome {
    ipu_fuzz::diff::run_on_device(graph, target, tiles, seed).unwrap_or_else(|e| panic!("{e}"))
}
