//! `ipu-fuzz`: the stable fuzz driver.
//!
//! ```text
//! ipu-fuzz run TARGET --corpus DIR [--seconds S] [--runs N] [--seed N] [--crashes DIR]
//! ipu-fuzz replay TARGET FILE_OR_DIR...
//! ipu-fuzz list
//! ```
//!
//! `run` mutates the corpus entries (seeded, deterministic for a given seed and run count)
//! and feeds every mutant to the target until the time or the run count is spent; a panic or
//! a finding is written to the crashes directory (default `fuzz/artifacts/TARGET`) and ends
//! the run with exit 1. `replay` feeds the given files as they are. Exit 2 for bad usage.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::{Parser, Subcommand};
use ipu_fuzz::mutate::{Rng, mutate};

#[derive(Parser)]
#[command(
    name = "ipu-fuzz",
    about = "Fuzz targets of ipu-stack on a stable mutation loop"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Mutate a corpus and run the mutants through a target.
    Run {
        /// The target (see `list`).
        target: String,
        /// The corpus directory (read only).
        #[arg(long)]
        corpus: PathBuf,
        /// Stop after this many seconds.
        #[arg(long, default_value_t = 10.0)]
        seconds: f64,
        /// Stop after this many executions (whichever comes first).
        #[arg(long)]
        runs: Option<u64>,
        /// Seed of the mutations.
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Where a crashing input is written.
        #[arg(long)]
        crashes: Option<PathBuf>,
    },
    /// Run files (or every file of directories) through a target as they are.
    Replay {
        /// The target.
        target: String,
        /// Files or directories.
        #[arg(required = true)]
        inputs: Vec<PathBuf>,
    },
    /// The targets.
    List,
}

/// Runs `input` through `target`, turning a panic into a finding.
fn execute(target: ipu_fuzz::FuzzTarget, input: &[u8]) -> Result<(), String> {
    match catch_unwind(AssertUnwindSafe(|| target(input))) {
        Ok(r) => r,
        Err(p) => Err(format!(
            "panic: {}",
            p.downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default()
        )),
    }
}

/// The files of `paths` (directories listed, sorted by name: a deterministic order).
fn files(paths: &[PathBuf]) -> std::io::Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    for p in paths {
        if p.is_dir() {
            let mut v: Vec<PathBuf> = std::fs::read_dir(p)?
                .map(|e| e.map(|e| e.path()))
                .collect::<std::io::Result<_>>()?;
            v.retain(|f| f.is_file());
            v.sort();
            out.extend(v);
        } else {
            out.push(p.clone());
        }
    }
    Ok(out)
}

/// FNV-1a of `bytes`: the name of a crash file.
fn fnv(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    })
}

fn save_crash(dir: &Path, input: &[u8]) -> std::io::Result<PathBuf> {
    std::fs::create_dir_all(dir)?;
    let p = dir.join(format!("crash-{:016x}", fnv(input)));
    std::fs::write(&p, input)?;
    Ok(p)
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // Findings are reported once, by the driver; the default hook would print every panic.
    std::panic::set_hook(Box::new(|_| {}));
    let lookup = |name: &str| {
        ipu_fuzz::target(name).ok_or_else(|| {
            let known: Vec<&str> = ipu_fuzz::TARGETS.iter().map(|(n, _)| *n).collect();
            eprintln!(
                "error: unknown target `{name}` (known: {})",
                known.join(", ")
            );
            ExitCode::from(2)
        })
    };
    match cli.command {
        Command::List => {
            for (name, _) in ipu_fuzz::TARGETS {
                println!("{name}");
            }
            ExitCode::SUCCESS
        }
        Command::Replay { target, inputs } => {
            let t = match lookup(&target) {
                Ok(t) => t,
                Err(c) => return c,
            };
            let files = match files(&inputs) {
                Ok(f) => f,
                Err(e) => {
                    eprintln!("error: reading the inputs: {e}");
                    return ExitCode::from(2);
                }
            };
            let mut failed = 0;
            for f in &files {
                let bytes = std::fs::read(f).unwrap_or_default();
                if let Err(e) = execute(t, &bytes) {
                    failed += 1;
                    eprintln!("finding: {target} {}: {e}", f.display());
                }
            }
            println!("target={target} inputs={} findings={failed}", files.len());
            ExitCode::from(u8::from(failed > 0))
        }
        Command::Run {
            target,
            corpus,
            seconds,
            runs,
            seed,
            crashes,
        } => {
            let t = match lookup(&target) {
                Ok(t) => t,
                Err(c) => return c,
            };
            let entries: Vec<Vec<u8>> = match files(std::slice::from_ref(&corpus)) {
                Ok(f) => f.iter().filter_map(|p| std::fs::read(p).ok()).collect(),
                Err(e) => {
                    eprintln!("error: reading the corpus {}: {e}", corpus.display());
                    return ExitCode::from(2);
                }
            };
            let entries = if entries.is_empty() {
                vec![Vec::new()]
            } else {
                entries
            };
            let crashes = crashes.unwrap_or_else(|| Path::new("fuzz/artifacts").join(&target));
            let mut rng = Rng::new(seed);
            let start = Instant::now();
            let budget = Duration::from_secs_f64(seconds.max(0.0));
            let mut n = 0u64;
            // The corpus itself first, then mutants.
            loop {
                if runs.is_some_and(|r| n >= r) || start.elapsed() >= budget {
                    break;
                }
                let input = if (n as usize) < entries.len() {
                    entries[n as usize].clone()
                } else {
                    let a = &entries[rng.below(entries.len())];
                    let b = &entries[rng.below(entries.len())];
                    mutate(&mut rng, a, b)
                };
                n += 1;
                if let Err(e) = execute(t, &input) {
                    let saved = save_crash(&crashes, &input)
                        .map_or_else(|e| format!("(not saved: {e})"), |p| p.display().to_string());
                    eprintln!("finding: {target} after {n} executions, input {saved}: {e}");
                    println!(
                        "target={target} executions={n} seconds={:.1} findings=1",
                        start.elapsed().as_secs_f64()
                    );
                    return ExitCode::from(1);
                }
            }
            let secs = start.elapsed().as_secs_f64();
            println!(
                "target={target} executions={n} seconds={secs:.1} executions_per_second={:.0} findings=0",
                n as f64 / secs.max(1e-9)
            );
            ExitCode::SUCCESS
        }
    }
}
