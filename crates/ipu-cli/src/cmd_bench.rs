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

/// A workload of `ipu bench sim`: a name, the built-in model, its settings and its tiles
/// (default: all).
type Workload = (
    &'static str,
    &'static str,
    &'static [(&'static str, &'static str)],
    Option<u32>,
);

/// The workloads of `ipu bench sim`.
const SIM_WORKLOADS: &[Workload] = &[
    ("attention-flash", "attention-flash", &[], None),
    (
        "matmul-2048",
        "matmul",
        &[("m", "2048"), ("k", "2048"), ("n", "2048")],
        None,
    ),
    (
        "typed-attention-small-fp8",
        "typed-attention-small-fp8",
        &[],
        Some(64),
    ),
];

/// Arguments of `ipu bench sim`.
#[derive(clap::Args)]
pub struct SimArgs {
    /// Timed `run` calls per workload and thread count; the median is reported.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=100))]
    runs: u32,
    /// Host thread counts to simulate with.
    #[arg(long, value_delimiter = ',', default_value = "1,2")]
    threads: Vec<usize>,
    /// Only the workloads whose names contain this.
    #[arg(long)]
    only: Option<String>,
    /// Print one JSON object: `{"rows": [{"model", "threads", "instructions", "seconds",
    /// "instructions_per_second"}, ...]}`.
    #[arg(long)]
    json: bool,
}

/// `ipu bench sim`: the simulator's speed on the flash-attention preset, the 2048³ matmul and
/// the typed FP8 preset. Each package is built once and loaded once; the `run` call is timed
/// `--runs` times per thread count (inputs from the seed's generator) and the median is
/// reported, with the instructions it simulated (every context of every tile) per second.
pub fn sim(a: SimArgs) -> anyhow::Result<u8> {
    if let Some(&t) = a.threads.iter().find(|&&t| t == 0) {
        anyhow::bail!("--threads: a thread count is at least 1, not {t}");
    }
    let target = ipu_target::Target::gc200();
    let mut rows = Vec::new();
    for (name, model, sets, tiles) in SIM_WORKLOADS {
        if a.only.as_deref().is_some_and(|o| !name.contains(o)) {
            continue;
        }
        let sets: Vec<String> = sets.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let graph = load_model(model, &sets)?;
        let tiles = tiles.unwrap_or(target.tiles);
        let b = ipu_codegen::build(&graph, &BuildOptions { target, tiles })
            .with_context(|| format!("building {name}"))?;
        let inputs = ipu_reference::make_inputs(&graph, 0);
        let mut s = ipu_runtime::Session::open(
            Box::new(ipu_runtime::SimulatorDevice::new(target)),
            &b.package,
        )?;
        s.start_host_exchange()?;
        for (&v, t) in graph.inputs().iter().zip(&inputs) {
            s.write_input(&graph.value(v).name, &t.to_bytes())?;
        }
        s.call("initialize")?;
        for &threads in &a.threads {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .context("starting the simulation threads")?;
            let mut times = Vec::new();
            let mut instructions = 0;
            for _ in 0..a.runs {
                let start = Instant::now();
                let r = pool.install(|| s.call("run"))?;
                times.push(start.elapsed().as_secs_f64());
                instructions = r.counters.instructions;
            }
            times.sort_by(f64::total_cmp);
            let seconds = times[times.len() / 2];
            let rate = instructions as f64 / seconds.max(1e-9);
            if !a.json {
                println!(
                    "model={name} tiles={tiles} threads={threads} runs={} instructions={instructions} median_seconds={seconds:.3} instructions_per_second={rate:.0}",
                    a.runs
                );
            }
            rows.push(json!({
                "model": name,
                "threads": threads,
                "instructions": instructions,
                "seconds": seconds,
                "instructions_per_second": rate.round(),
            }));
        }
    }
    if a.json {
        println!("{}", json!({ "rows": rows }));
    }
    Ok(0)
}
