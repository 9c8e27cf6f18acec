//! The AMP benchmark without the CLI: `cargo run --release -p ipu-sim --example amp_bench --
//! [gc200|bow|c600] [ROWS,ROWS,..]`. Prints the same figures as `ipu bench amp`.

use ipu_sim::bench::run_amp_bench;
use ipu_target::TargetKind;

fn main() {
    let mut args = std::env::args().skip(1);
    let target = args
        .next()
        .and_then(|n| TargetKind::from_name(&n))
        .unwrap_or(TargetKind::Bow)
        .target();
    let rows: Vec<u32> = args
        .next()
        .unwrap_or_else(|| "16,64,256,1024,2048".into())
        .split(',')
        .map(|r| r.parse().expect("a row count"))
        .collect();
    let mut run_seconds = 0.0;
    let mut instrs = 0u64;
    for n in rows {
        match run_amp_bench(target, target.tiles, n) {
            Ok(p) => {
                println!(
                    "n={} cycles={} efficiency={:.4} worker_instructions={} run_seconds={:.3} total_seconds={:.3}",
                    p.n,
                    p.cycles,
                    p.efficiency,
                    p.worker_instructions,
                    p.run_seconds,
                    p.total_seconds
                );
                run_seconds += p.run_seconds;
                instrs += p.worker_instructions;
            }
            Err(e) => {
                println!("FAIL n={n}: {e}");
                std::process::exit(1);
            }
        }
    }
    println!(
        "simulated_worker_instructions_per_second={:.0}",
        instrs as f64 / run_seconds.max(1e-9)
    );
}
