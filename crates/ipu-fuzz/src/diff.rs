//! The differential graph fuzzer: bytes choose a small valid graph (dtype, inputs, a chain of
//! operations whose shapes fit), which goes through the whole pipeline — build, package bytes,
//! package reader, the simulated device — and the device's outputs must agree with the host
//! reference in device precision at the dtype's tolerance. A build may refuse the graph (a
//! typed error), but an internal compiler error, a device fault or a disagreement is a
//! finding.

use arbitrary::{Result as ArbResult, Unstructured};
use ipu_codegen::{BuildOptions, CodegenError, build};
use ipu_graph::Graph;
use ipu_package::{Package, TensorRole};
use ipu_reference::{Comparison, Precision, Tensor, Tolerance, compare, evaluate, make_inputs};
use ipu_runtime::{Session, SimulatorDevice};
use ipu_target::Target;

use crate::Finding;

/// What a run of a graph on the device produced.
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
        self.assert_pass(what);
        for (name, c) in &self.checks {
            assert!(
                c.max_abs_error == 0.0,
                "{what}: output {name} is not exact: {c}"
            );
        }
    }
}

/// Builds `graph` on `tiles` tiles of the GC200; a refusal is `Ok(None)`, an internal compiler
/// error a finding.
pub fn build_checked(graph: &Graph, tiles: u32) -> Result<Option<ipu_codegen::Build>, Finding> {
    match build(
        graph,
        &BuildOptions {
            target: Target::gc200(),
            tiles,
        },
    ) {
        Ok(b) => Ok(Some(b)),
        Err(e @ CodegenError::Internal { .. }) => Err(format!(
            "internal compiler error: {e}\n{}",
            ipu_graph::print(graph)
        )),
        Err(_) => Ok(None),
    }
}

/// Builds and runs `graph` on tiles `0..tiles` of `target` with the generated inputs of
/// `seed`, through the package bytes and the reader, and compares every output with the
/// device-precision reference. Every step's failure is an `Err` naming the step.
pub fn run_on_device(
    graph: &Graph,
    target: Target,
    tiles: u32,
    seed: u64,
) -> Result<Outcome, Finding> {
    let b = build(graph, &BuildOptions { target, tiles })
        .map_err(|e| format!("{}: build: {e}", graph.name))?;
    let package_bytes = b.package.to_bytes().map_err(|e| format!("write: {e}"))?;
    let package = Package::from_bytes(&package_bytes).map_err(|e| format!("read back: {e}"))?;
    if package != b.package {
        return Err("the package read back differs from the one written".into());
    }
    let inputs = make_inputs(graph, seed);
    let device = |e: ipu_runtime::RuntimeError| format!("{}: device: {e}", graph.name);
    let mut s = Session::open(Box::new(SimulatorDevice::new(target)), &package).map_err(device)?;
    s.start_host_exchange().map_err(device)?;
    for (&v, t) in graph.inputs().iter().zip(&inputs) {
        s.write_input(&graph.value(v).name, &t.to_bytes())
            .map_err(device)?;
    }
    s.call("initialize").map_err(device)?;
    let run = s.call("run").map_err(device)?;
    let expected = evaluate(graph, &inputs, Precision::Device, 1)
        .map_err(|e| format!("{}: reference: {e}", graph.name))?;
    let outs: Vec<_> = package
        .manifest
        .tensors
        .iter()
        .filter(|t| t.role == TensorRole::Output)
        .collect();
    if outs.len() != expected.len() {
        return Err(format!(
            "{} outputs in the package, {} in the reference",
            outs.len(),
            expected.len()
        ));
    }
    let mut checks = Vec::new();
    let mut outputs = Vec::new();
    for (t, exp) in outs.iter().zip(&expected) {
        let bytes = s.read_output(&t.name).map_err(device)?;
        let actual = Tensor::from_bytes(exp.dtype, exp.shape.clone(), &bytes)
            .map_err(|e| format!("output {}: {e}", t.name))?;
        checks.push((
            t.name.clone(),
            compare(&actual, exp, &Tolerance::for_dtype(exp.dtype)),
        ));
        outputs.push(actual);
    }
    Ok(Outcome {
        checks,
        cycles: run.counters.cycles,
        package_bytes,
        outputs,
    })
}

/// A value of the generated graph: its name and shape.
struct Val {
    name: String,
    shape: Vec<usize>,
}

fn shape_text(shape: &[usize]) -> String {
    let d: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
    d.join(", ")
}

/// The text of a small random graph of one dtype, every operation's shapes valid.
fn generate(u: &mut Unstructured<'_>) -> ArbResult<(String, u32)> {
    let dtype = *u.choose(&["f32", "f16"])?;
    let tiles = *u.choose(&[1u32, 2, 3, 4, 7, 16])?;
    let mut body = String::new();
    let mut vals: Vec<Val> = Vec::new();
    let rank = u.int_in_range(1..=3)?;
    let shape: Vec<usize> = (0..rank)
        .map(|_| u.int_in_range(1..=12))
        .collect::<ArbResult<_>>()?;
    for i in 0..u.int_in_range(1..=2)? {
        let name = format!("in{i}");
        body += &format!("  input %{name}: {dtype}[{}]\n", shape_text(&shape));
        vals.push(Val {
            name,
            shape: shape.clone(),
        });
    }
    let ops = u.int_in_range(1..=5)?;
    for n in 0..ops {
        let a = u.choose_index(vals.len())?;
        let (an, ash) = (vals[a].name.clone(), vals[a].shape.clone());
        let r = ash.len();
        let out = format!("v{n}");
        let same: Vec<usize> = (0..vals.len()).filter(|&i| vals[i].shape == ash).collect();
        let b = vals[same[u.choose_index(same.len())?]].name.clone();
        let (expr, shape) = match u.int_in_range(0..=11)? {
            0 => (format!("add(%{an}, %{b})"), ash.clone()),
            1 => (format!("sub(%{an}, %{b})"), ash.clone()),
            2 => (format!("mul(%{an}, %{b})"), ash.clone()),
            3 => (format!("max(%{an}, %{b})"), ash.clone()),
            4 => (format!("exp(%{an})"), ash.clone()),
            5 => (format!("tanh(%{an})"), ash.clone()),
            6 => (
                format!(
                    "scale(%{an}) {{factor = {}}}",
                    u.int_in_range(-4i32..=4)? as f32 * 0.5
                ),
                ash.clone(),
            ),
            7 => (format!("softmax(%{an}) {{axis = {}}}", r - 1), ash.clone()),
            8 => {
                let axis = u.choose_index(r)?;
                let mut s = ash.clone();
                s[axis] = 1;
                let op = *u.choose(&["reduce_sum", "reduce_max"])?;
                (format!("{op}(%{an}) {{axis = {axis}}}"), s)
            }
            9 if r >= 2 => {
                let mut perm: Vec<usize> = (0..r).collect();
                perm.swap(r - 2, r - 1);
                let mut s = ash.clone();
                s.swap(r - 2, r - 1);
                (
                    format!("transpose(%{an}) {{perm = [{}]}}", shape_text(&perm)),
                    s,
                )
            }
            10 if r >= 2 => {
                // x · xᵀ-like: the operand times a fresh constant-free transpose of itself.
                let mut t = ash.clone();
                t.swap(r - 2, r - 1);
                let tn = format!("t{n}");
                let mut perm: Vec<usize> = (0..r).collect();
                perm.swap(r - 2, r - 1);
                body += &format!(
                    "  %{tn} = transpose(%{an}) {{perm = [{}]}}: {dtype}[{}]\n",
                    shape_text(&perm),
                    shape_text(&t)
                );
                let mut s = ash.clone();
                s[r - 1] = ash[r - 2];
                (format!("matmul(%{an}, %{tn}) {{partials = f32}}"), s)
            }
            _ => (
                format!("layer_norm(%{an}) {{epsilon = 0.00001}}"),
                ash.clone(),
            ),
        };
        body += &format!("  %{out} = {expr}: {dtype}[{}]\n", shape_text(&shape));
        vals.push(Val { name: out, shape });
    }
    let last = &vals[vals.len() - 1].name;
    body += &format!("  output %{last}\n");
    Ok((format!("graph fuzz {{\n{body}}}\n"), tiles))
}

/// The differential target: a generated graph must verify, and build and run to the
/// reference's results (or be refused by a typed error).
pub fn graph_diff(data: &[u8]) -> Result<(), Finding> {
    let mut u = Unstructured::new(data);
    let Ok((text, tiles)) = generate(&mut u) else {
        return Ok(());
    };
    let graph = ipu_graph::parse(&text, "generated.ipug")
        .map_err(|e| format!("a generated graph does not verify: {e}\n{text}"))?;
    if build_checked(&graph, tiles)?.is_none() {
        return Ok(());
    }
    let outcome =
        run_on_device(&graph, Target::gc200(), tiles, 7).map_err(|e| format!("{e}\n{text}"))?;
    for (name, c) in &outcome.checks {
        if !c.pass() {
            return Err(format!(
                "output {name} disagrees with the reference on {tiles} tiles: {c}\n{text}"
            ));
        }
    }
    Ok(())
}
