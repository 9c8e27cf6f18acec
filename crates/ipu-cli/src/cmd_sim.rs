//! `ipu sim`: assemble a file, load it onto tiles of the simulated device, run it to halt and
//! print the counters. `ipu bench amp`: the AMP matmul kernel on every tile.

use std::path::PathBuf;
use std::time::Instant;

use ipu_isa::{AsmOptions, assemble_with};
use ipu_sim::bench::{BenchError, run_amp_bench};
use ipu_sim::{Device, RunLimits, SimError};
use ipu_target::{Target, TargetKind};

fn parse_target(name: &str) -> Result<Target, String> {
    TargetKind::from_name(name)
        .map(|k| k.target())
        .ok_or_else(|| format!("unknown target `{name}` (known: gc200, bow, c600)"))
}

/// Arguments of `ipu sim`.
#[derive(clap::Args)]
pub struct SimArgs {
    /// The assembly file.
    pub file: PathBuf,
    /// Tiles that load and run the program (tiles 0..N).
    #[arg(long, default_value_t = 1, allow_hyphen_values = true, value_parser = crate::cmd_run::tile_count)]
    pub tiles: u32,
    /// The target: gc200, bow or c600.
    #[arg(long, default_value = "gc200", value_parser = parse_target)]
    pub target: Target,
    /// Cycle limit per tile (exceeding it is a fault).
    #[arg(long, default_value_t = ipu_sim::DEFAULT_MAX_CYCLES)]
    pub max_cycles: u64,
}

/// `ipu sim FILE.s`: 0 when the program halts, 1 when it faults, 2 for bad input.
pub fn sim(args: SimArgs) -> anyhow::Result<u8> {
    let source = crate::text_input::read_text(&args.file)?;
    let name = args.file.display().to_string();
    let object = assemble_with(
        &source,
        &name,
        &AsmOptions::default(),
        &mut crate::text_input::read_include,
    )?;
    let Some(first) = object.sections.first() else {
        anyhow::bail!("{name}: the program is empty");
    };
    let entry = object.symbols.get("main").copied().unwrap_or(first.address);
    let target = args.target;
    if args.tiles == 0 || args.tiles > target.tiles {
        anyhow::bail!("--tiles {} is outside 1..={}", args.tiles, target.tiles);
    }
    let mut device = Device::new(target, args.tiles);
    for tile in 0..args.tiles {
        for s in &object.sections {
            device.write(tile, s.address, &s.bytes)?;
        }
    }
    let limits = RunLimits {
        max_cycles: args.max_cycles,
        ..RunLimits::default()
    };
    let started = Instant::now();
    match device.run(entry, &limits) {
        Ok(r) => {
            let secs = started.elapsed().as_secs_f64();
            println!("device=simulator");
            println!("target={}", target.kind);
            println!("tiles={}", args.tiles);
            println!("cycles={}", r.cycles);
            println!("compute_cycles={}", r.compute_cycles);
            println!("exchange_cycles={}", r.exchange_cycles);
            println!("sync_cycles={}", r.sync_cycles);
            println!("instructions={}", r.instructions);
            println!("worker_instructions={}", r.worker_instructions);
            println!("global_steps={}", r.global_steps);
            tracing::info!(host_seconds = secs, "simulation finished");
            Ok(0)
        }
        Err(SimError::Fault(f)) => {
            println!("device=simulator");
            println!("fault={f}");
            eprintln!("{f}");
            Ok(1)
        }
        Err(e) => Err(e.into()),
    }
}

/// Arguments of `ipu bench amp`.
#[derive(clap::Args)]
pub struct AmpArgs {
    /// The target: gc200, bow or c600.
    #[arg(long, default_value = "gc200", value_parser = parse_target)]
    pub target: Target,
    /// Row counts N of the [N,16]x[16,16] matmul, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "16,64,256,1024,2048")]
    pub rows: Vec<u32>,
    /// Tiles that run the kernel (default: every tile of the chip).
    #[arg(long, allow_hyphen_values = true, value_parser = crate::cmd_run::tile_count)]
    pub tiles: Option<u32>,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// `ipu bench amp`: 0 when every tile's result matches the host model, 1 otherwise.
pub fn amp(args: AmpArgs) -> anyhow::Result<u8> {
    let target = args.target;
    let tiles = args.tiles.unwrap_or(target.tiles);
    if tiles == 0 || tiles > target.tiles {
        anyhow::bail!("--tiles {tiles} is outside 1..={}", target.tiles);
    }
    let rows = args.rows;
    let started = Instant::now();
    let mut points = Vec::new();
    for &n in &rows {
        match run_amp_bench(target, tiles, n) {
            Ok(p) => points.push(p),
            Err(e @ (BenchError::Mismatch { .. } | BenchError::Sim(SimError::Fault(_)))) => {
                println!("FAIL n={n}: {e}");
                return Ok(1);
            }
            Err(e) => return Err(e.into()),
        }
    }
    let host_seconds = started.elapsed().as_secs_f64();
    let run_seconds: f64 = points.iter().map(|p| p.run_seconds).sum();
    let worker_instructions: u64 = points.iter().map(|p| p.worker_instructions).sum();
    let rate = worker_instructions as f64 / run_seconds.max(1e-9);
    if args.json {
        let rows_json: Vec<_> = points
            .iter()
            .map(|p| {
                serde_json::json!({
                    "n": p.n,
                    "cycles": p.cycles,
                    "efficiency": (p.efficiency * 1000.0).round() / 1000.0,
                    "worker_instructions": p.worker_instructions,
                    "run_seconds": p.run_seconds,
                })
            })
            .collect();
        let out = serde_json::json!({
            "target": target.kind.name(),
            "tiles": tiles,
            "rows": rows_json,
            "host_seconds": host_seconds,
            "simulation_seconds": run_seconds,
            "simulated_worker_instructions_per_second": rate.round(),
        });
        println!("{out}");
    } else {
        println!(
            "AMP f16->f16 [N,16]x[16,16] on {tiles} tiles, target {}",
            target.kind
        );
        println!(
            "{:>6} {:>10} {:>11} {:>14} {:>9}",
            "N", "cycles", "efficiency", "worker instrs", "run s"
        );
        for p in &points {
            println!(
                "{:>6} {:>10} {:>10.1}% {:>14} {:>9.3}",
                p.n,
                p.cycles,
                100.0 * p.efficiency,
                p.worker_instructions,
                p.run_seconds
            );
        }
        println!("verified=all tiles match the host model");
        println!("host_seconds={host_seconds:.3}");
        println!("simulated_worker_instructions_per_second={rate:.0}");
    }
    Ok(0)
}
