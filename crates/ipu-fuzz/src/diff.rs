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
use ipu_reference::{
    Comparison, Precision, Tensor, Tolerance, compare, evaluate_split, make_inputs,
};
use ipu_runtime::{Session, SimulatorDevice};
use ipu_target::Target;

use crate::Finding;

/// What a run of a graph on the device produced.
pub struct Outcome {
    /// Per output: its name and the comparison with the reference.
    pub checks: Vec<(String, Comparison)>,
    /// Cycles of the `run` call.
    pub cycles: u64,
    /// Bank conflicts of the `run` call, all tiles.
    pub bank_conflicts: u64,
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
    let expected = evaluate_split(graph, &inputs, Precision::Device, 1, &b.report.k_splits)
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
        bank_conflicts: run.counters.bank_conflicts,
        package_bytes,
        outputs,
    })
}

/// A value of the generated graph: its name, dtype and shape.
struct Val {
    name: String,
    dtype: &'static str,
    shape: Vec<usize>,
}

fn shape_text(shape: &[usize]) -> String {
    let d: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
    d.join(", ")
}

/// One generated operation: its text (without the result), the result's dtype and shape.
type Op = (String, &'static str, Vec<usize>);

/// An operation on `a` (and on another value of its type where it takes two), chosen by `u`;
/// `pre` receives operations it needs first (a transpose for a matmul's right operand).
fn operation(
    u: &mut Unstructured<'_>,
    vals: &[Val],
    a: &Val,
    n: usize,
    pre: &mut String,
) -> ArbResult<Op> {
    let (an, dt, ash) = (a.name.as_str(), a.dtype, a.shape.clone());
    let r = ash.len();
    let same: Vec<&Val> = vals
        .iter()
        .filter(|v| v.shape == ash && v.dtype == dt)
        .collect();
    let b = same[u.choose_index(same.len())?].name.as_str();
    let keep = |e: String| (e, dt, ash.clone());
    Ok(match u.int_in_range(0..=21)? {
        0 => keep(format!("add(%{an}, %{b})")),
        1 => keep(format!("sub(%{an}, %{b})")),
        2 => keep(format!("mul(%{an}, %{b})")),
        3 => keep(format!("max(%{an}, %{b})")),
        4 => keep(format!("div(%{an}, %{b})")),
        5 => keep(format!("exp(%{an})")),
        6 => keep(format!("tanh(%{an})")),
        7 => keep(format!("erf(%{an})")),
        8 => {
            // sqrt and log of a positive value: of its exp.
            let e = format!("e{n}");
            *pre += &format!("  %{e} = exp(%{an}): {dt}[{}]\n", shape_text(&ash));
            let op = *u.choose(&["sqrt", "log"])?;
            keep(format!("{op}(%{e})"))
        }
        9 => keep(format!(
            "scale(%{an}) {{factor = {}}}",
            u.int_in_range(-4i32..=4)? as f32 * 0.5
        )),
        10 => keep(format!("softmax(%{an}) {{axis = {}}}", u.choose_index(r)?)),
        11 => {
            let axis = u.choose_index(r)?;
            let mut s = ash.clone();
            s[axis] = 1;
            let op = *u.choose(&["reduce_sum", "reduce_max"])?;
            (format!("{op}(%{an}) {{axis = {axis}}}"), dt, s)
        }
        12 if r >= 2 => {
            let mut perm: Vec<usize> = (0..r).collect();
            let (i, j) = (u.choose_index(r)?, u.choose_index(r)?);
            perm.swap(i, j);
            let s: Vec<usize> = perm.iter().map(|&p| ash[p]).collect();
            (
                format!("transpose(%{an}) {{perm = [{}]}}", shape_text(&perm)),
                dt,
                s,
            )
        }
        13 if r >= 2 => {
            // a · aᵀ over the last two axes.
            let mut t = ash.clone();
            t.swap(r - 2, r - 1);
            let tn = format!("t{n}");
            let mut perm: Vec<usize> = (0..r).collect();
            perm.swap(r - 2, r - 1);
            *pre += &format!(
                "  %{tn} = transpose(%{an}) {{perm = [{}]}}: {dt}[{}]\n",
                shape_text(&perm),
                shape_text(&t)
            );
            let mut s = ash.clone();
            s[r - 1] = ash[r - 2];
            let partials = *u.choose(&["f32", "f16"])?;
            let partials = if dt == "f32" { "f32" } else { partials };
            (
                format!("matmul(%{an}, %{tn}) {{partials = {partials}}}"),
                dt,
                s,
            )
        }
        14 => {
            let axis = u.choose_index(r)?;
            let start = u.int_in_range(0..=ash[axis] - 1)?;
            let end = u.int_in_range(start + 1..=ash[axis])?;
            let mut s = ash.clone();
            s[axis] = end - start;
            (
                format!("slice(%{an}) {{axis = {axis}, start = {start}, end = {end}}}"),
                dt,
                s,
            )
        }
        15 => {
            let axis = u.choose_index(r)?;
            let mut s = ash.clone();
            s[axis] *= 2;
            (format!("concat(%{an}, %{b}) {{axis = {axis}}}"), dt, s)
        }
        16 if r >= 2 => {
            // The last two axes as one.
            let mut s = ash[..r - 2].to_vec();
            s.push(ash[r - 2] * ash[r - 1]);
            (
                format!("reshape(%{an}) {{shape = [{}]}}", shape_text(&s)),
                dt,
                s,
            )
        }
        17 => {
            let to = if dt == "f32" { "f16" } else { "f32" };
            (format!("cast(%{an}) {{to = {to}}}"), to, ash.clone())
        }
        18 if r >= 2 && dt == "f32" => {
            // Scores masked from a key offset, then their softmax: fully masked rows included.
            let m = format!("m{n}");
            *pre += &format!(
                "  %{m} = causal_mask(%{an}) {{key_start = {}}}: {dt}[{}]\n",
                u.int_in_range(0..=ash[r - 2] + 1)?,
                shape_text(&ash)
            );
            keep(format!("softmax(%{m}) {{axis = {}}}", r - 1))
        }
        19 if r == 3 => {
            let causal = u.arbitrary::<bool>()?;
            let partials = if dt == "f32" {
                "f32"
            } else {
                *u.choose(&["f32", "f16"])?
            };
            keep(format!(
                "attention(%{an}, %{b}, %{b}) {{scale = 0.25, causal = {causal}, partials = {partials}}}"
            ))
        }
        20 if r == 3 => {
            let causal = u.arbitrary::<bool>()?;
            let bq = *u.choose(&[1usize, 4, 16, 128])?;
            let bk = *u.choose(&[1usize, 4, 16, 128])?;
            keep(format!(
                "flash_attention(%{an}, %{b}, %{b}) {{scale = 0.5, causal = {causal}, block_q = {bq}, block_k = {bk}, partials = f32}}"
            ))
        }
        _ => keep(format!("layer_norm(%{an}) {{epsilon = 0.00001}}")),
    })
}

/// The text of a small random graph, every operation's types valid, and a tile count.
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
            dtype,
            shape: shape.clone(),
        });
    }
    for n in 0..u.int_in_range(1..=5)? {
        let a = &vals[u.choose_index(vals.len())?];
        let mut pre = String::new();
        let (expr, dt, shape) = operation(u, &vals, a, n, &mut pre)?;
        let out = format!("v{n}");
        body += &pre;
        body += &format!("  %{out} = {expr}: {dt}[{}]\n", shape_text(&shape));
        vals.push(Val {
            name: out,
            dtype: dt,
            shape,
        });
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
