//! Which form an imported model's attention takes: the attention subgraphs exporters write
//! (`ipu_graph::fuse`) fused into one operation and lowered unfused (`attention`) or as
//! `flash_attention`, or the graph as imported, whichever the planner estimates cheapest. A
//! compiler decision, so every front end (`ipu run`, `ipu build`, `ipu tune`, a library
//! caller) makes it alike.

use ipu_graph::{Graph, GraphError};
use ipu_target::Target;
use tracing::info;

use crate::CodegenError;
use crate::plan::plan;
use crate::repeat::{dev_repeat, estimated};

fn graph_error(e: GraphError) -> CodegenError {
    CodegenError::Graph {
        message: e.to_string(),
    }
}

/// `graph` with its attention subgraphs in the cheapest planned form on `tiles` tiles of
/// `target`; the graph as it is when nothing is fused or no form plans. The log names the
/// fused nodes and every form's estimate.
pub fn choose_attention(graph: &Graph, target: &Target, tiles: u32) -> Result<Graph, CodegenError> {
    let (fused_graph, fused) = ipu_graph::fuse::attention_subgraphs(graph).map_err(graph_error)?;
    if fused.is_empty() {
        return Ok(graph.clone());
    }
    let outputs: Vec<String> = fused.iter().map(|f| f.output.clone()).collect();
    let flash_graph = ipu_graph::fuse::as_flash(&fused_graph, &outputs).map_err(graph_error)?;
    let candidates = [
        ("as imported", graph),
        ("attention", &fused_graph),
        ("flash_attention", &flash_graph),
    ];
    let mut best: Option<(&str, &Graph, u64)> = None;
    for (what, g) in candidates {
        match estimate(g, target, tiles) {
            Ok(cycles) => {
                info!(
                    lowering = what,
                    estimated_cycles = cycles,
                    "planned an attention lowering"
                );
                if best.is_none_or(|b| cycles < b.2) {
                    best = Some((what, g, cycles));
                }
            }
            Err(e) => info!(lowering = what, reason = %e, "an attention lowering does not plan"),
        }
    }
    let Some((what, chosen, cycles)) = best else {
        return Ok(graph.clone());
    };
    for f in &fused {
        info!(
            nodes = %f.operations.join(","),
            output = %f.output,
            causal = f.causal,
            lowering = what,
            estimated_cycles = cycles,
            "fused attention subgraph"
        );
    }
    Ok(chosen.clone())
}

/// The planner's estimate of `graph`'s cycles; a run of identical layers planned once, as
/// the build plans it (`crate::repeat`), its block counted once per layer.
fn estimate(graph: &Graph, target: &Target, tiles: u32) -> Result<u64, CodegenError> {
    if let Some((one, r)) = ipu_graph::repeat::find(graph).map_err(graph_error)? {
        let p = plan(&one, target, tiles)?;
        if let Ok(d) = dev_repeat(&p, &r) {
            return Ok(estimated(&p, &d).0);
        }
    }
    Ok(plan(graph, target, tiles)?.estimated_cycles)
}
