//! `ipu bench compile MODEL... [--set k=v]... [--runs N] [--json]`: compile time per model,
//! the median of several builds, with the package's figures.

use std::time::Instant;

use anyhow::Context;
use ipu_codegen::BuildOptions;
use ipu_target::TargetKind;
use serde_json::json;

use crate::cmd_graph::load_model;

/// Arguments of `ipu bench compile`.
#[derive(clap::Args)]
pub struct CompileArgs {
    /// Built-in model names or model files.
    #[arg(required = true)]
    models: Vec<String>,
    /// Override built-in parameters (applied to every model).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    set: Vec<String>,
    /// Target: gc200, bow or c600.
    #[arg(long, default_value = "gc200")]
    target: String,
    /// Use the first N tiles (default: all).
    #[arg(long, allow_hyphen_values = true, value_parser = crate::cmd_run::tile_count)]
    tiles: Option<u32>,
    /// Builds per model; the median is reported.
    #[arg(long, default_value_t = 5)]
    runs: usize,
    /// Print one JSON object.
    #[arg(long)]
    json: bool,
}

/// `ipu bench compile`.
pub fn compile(a: CompileArgs) -> anyhow::Result<u8> {
    let target = TargetKind::from_name(&a.target)
        .with_context(|| {
            format!(
                "unknown target {:?}; known targets: gc200, bow, c600",
                a.target
            )
        })?
        .target();
    if a.runs == 0 {
        anyhow::bail!("--runs must be at least 1");
    }
    let tiles = a.tiles.unwrap_or(target.tiles);
    let mut rows = Vec::new();
    for model in &a.models {
        let graph = load_model(model, &a.set)?;
        let mut times = Vec::new();
        let mut last = None;
        for _ in 0..a.runs {
            let start = Instant::now();
            let b = ipu_codegen::build(&graph, &BuildOptions { target, tiles })
                .with_context(|| format!("building {}", graph.name))?;
            times.push(start.elapsed().as_secs_f64() * 1e3);
            last = Some(b);
        }
        times.sort_by(f64::total_cmp);
        let median = times[times.len() / 2];
        let b = last.expect("at least one run");
        let bytes = b.package.to_bytes()?.len();
        if !a.json {
            println!(
                "model={} tiles={tiles} runs={} median_compile_ms={median:.1} min_ms={:.1} max_ms={:.1} estimated_cycles={} final_cycles={} package_bytes={bytes}",
                graph.name,
                a.runs,
                times[0],
                times[times.len() - 1],
                b.report.estimated_cycles,
                b.report.final_cycles
            );
        }
        rows.push(json!({
            "model": graph.name,
            "median_compile_ms": median,
            "min_compile_ms": times[0],
            "max_compile_ms": times[times.len() - 1],
            "estimated_cycles": b.report.estimated_cycles,
            "final_cycles": b.report.final_cycles,
            "package_bytes": bytes,
            "phases": b.report.phases.iter().map(|(n, ms)| json!({"name": n, "elapsed_ms": ms})).collect::<Vec<_>>(),
        }));
    }
    if a.json {
        println!(
            "{}",
            json!({"target": target.kind.name(), "tiles": tiles, "runs": a.runs, "models": rows})
        );
    }
    Ok(0)
}
