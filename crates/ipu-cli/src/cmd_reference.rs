//! `ipu reference MODEL [--set key=value]... [--dim NAME=VALUE]... [--precision exact|device] [--threads N]
//! [--seed S] [--compare-precisions]`: evaluates a model on the host from deterministic inputs
//! and prints, per output, `output=NAME dtype=.. shape=[..] min=.. max=.. mean=.. rms=..`.
//! With `--compare-precisions` both precisions run and each output's device result is compared
//! with the exact one under `ipu_reference::tolerance_versus_exact` (the loosest dtype
//! tolerance along the output's computation); exit 1 if a comparison fails.

use anyhow::Context;
use ipu_graph::Graph;
use ipu_reference::{Precision, Tensor, compare, evaluate, make_inputs, tolerance_versus_exact};

use crate::cmd_graph::load_model_with;

/// Arguments of `ipu reference`.
#[derive(clap::Args)]
pub struct ReferenceArgs {
    /// Built-in model name or path of a model file.
    model: String,
    /// Override a built-in's parameter: `--set key=value` (repeatable).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    set: Vec<String>,
    /// Bind a symbolic dimension of an ONNX model: `--dim NAME=VALUE` (repeatable).
    #[arg(long = "dim", value_name = "NAME=VALUE")]
    dim: Vec<String>,
    /// exact or device.
    #[arg(long, default_value = "device")]
    precision: Precision,
    /// Host threads for the reference GEMM (default: available parallelism).
    #[arg(long)]
    threads: Option<usize>,
    /// Seed of the reference inputs.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Run both precisions and compare device against exact.
    #[arg(long)]
    compare_precisions: bool,
}

fn shape_text(shape: &[usize]) -> String {
    let dims: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
    format!("[{}]", dims.join(","))
}

fn print_outputs(graph: &Graph, outputs: &[Tensor], precision: Precision) {
    for (&id, t) in graph.outputs().iter().zip(outputs) {
        let s = t.stats();
        println!(
            "output={} precision={precision} dtype={} shape={} min={:.6} max={:.6} mean={:.6} rms={:.6}",
            graph.value(id).name,
            t.dtype,
            shape_text(&t.shape),
            s.min,
            s.max,
            s.mean,
            s.rms
        );
    }
}

/// `ipu reference`.
pub fn run(a: ReferenceArgs) -> anyhow::Result<u8> {
    if std::env::var_os("MATMUL_NUM_THREADS").is_none() {
        // SAFETY: no other thread exists yet in this process (logging does not start one), so
        // nothing reads the environment concurrently. The reference splits GEMMs over its own
        // threads; matrixmultiply's internal threading stays off so the two do not multiply.
        unsafe { std::env::set_var("MATMUL_NUM_THREADS", "1") };
    }
    let graph = load_model_with(&a.model, &a.set, &a.dim)?;
    let threads = a
        .threads
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    if threads == 0 {
        anyhow::bail!("--threads must be at least 1");
    }
    let inputs = make_inputs(&graph, a.seed);
    println!(
        "model={} operations={} inputs={} outputs={} seed={} threads={threads}",
        graph.name,
        graph.operations().len(),
        graph.inputs().len(),
        graph.outputs().len(),
        a.seed
    );
    if !a.compare_precisions {
        let outputs = evaluate(&graph, &inputs, a.precision, threads).context("evaluating")?;
        print_outputs(&graph, &outputs, a.precision);
        return Ok(0);
    }
    let device = evaluate(&graph, &inputs, Precision::Device, threads).context("evaluating")?;
    let exact = evaluate(&graph, &inputs, Precision::Exact, threads).context("evaluating")?;
    print_outputs(&graph, &device, Precision::Device);
    print_outputs(&graph, &exact, Precision::Exact);
    let mut failed = false;
    for ((&id, d), e) in graph.outputs().iter().zip(&device).zip(&exact) {
        let c = compare(d, e, &tolerance_versus_exact(&graph, id));
        failed |= !c.pass();
        println!(
            "comparison output={} device_vs_exact {c}",
            graph.value(id).name
        );
    }
    Ok(u8::from(failed))
}
