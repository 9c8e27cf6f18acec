//! The `ipu` command: compile, run and inspect programs for the IPU tile array.
//!
//! Summary lines go to stdout in `key=value` form; logs go to stderr. Exit status: 0 when every
//! check passes, 1 when a check fails, 2 for bad input or a device error.

use std::process::ExitCode;

// The compiler allocates many small vectors from several threads; mimalloc handles that
// pattern faster than the system allocator.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use clap::{Parser, Subcommand};

mod cmd_bench;
mod cmd_graph;
mod cmd_isa;
mod cmd_numerics;
mod cmd_onnx;
mod cmd_reference;
mod cmd_report;
mod cmd_run;
mod cmd_runs;
mod cmd_sim;
mod cmd_sweep;
mod cmd_tune;
mod graph_files;
mod insight_run;
mod npy;
mod output_file;
mod text_input;

#[derive(Parser)]
#[command(
    name = "ipu",
    version,
    about = "Compiler, runtime and simulator for the Graphcore IPU"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Assemble a tile assembly file into a binary.
    Asm(cmd_isa::AsmArgs),
    /// Disassemble a tile binary.
    Disasm(cmd_isa::DisasmArgs),
    /// Assemble a file, load it onto tiles of the simulated device, run to halt, print counters.
    Sim(cmd_sim::SimArgs),
    /// Benchmarks of the simulated device and the compiler.
    #[command(subcommand)]
    Bench(BenchCommand),
    /// FP8 and f16 number formats.
    #[command(subcommand)]
    Numerics(cmd_numerics::NumericsCommand),
    /// List the built-in models and their parameters.
    Models(cmd_graph::ModelsArgs),
    /// Print and check graphs in the text form.
    #[command(subcommand)]
    Graph(cmd_graph::GraphCommand),
    /// Evaluate a model on the host and print output statistics.
    Reference(cmd_reference::ReferenceArgs),
    /// Compile a model into a package.
    Build(cmd_run::BuildArgs),
    /// Execute a package on the device.
    Exec(cmd_run::ExecArgs),
    /// Build, write, read back, execute and check a model against the host reference.
    Run(cmd_run::RunArgs),
    /// Write the HTML report (and the trace) of a run directory.
    Report(cmd_report::ReportArgs),
    /// The runs kept in the run database: list, show, compare.
    Runs(cmd_runs::RunsArgs),
    /// Build and run the best finalists on the device; keep the fastest as the incumbent.
    Tune(cmd_tune::TuneArgs),
    /// Run a grid of parameters, one artifacts directory per point, with a summary.
    Sweep(cmd_sweep::SweepArgs),
}

#[derive(Subcommand)]
enum BenchCommand {
    /// The AMP matmul kernel [N,16]x[16,16] on every tile.
    Amp(cmd_sim::AmpArgs),
    /// Compile time per model (median of several builds).
    Compile(cmd_bench::CompileArgs),
    /// Simulator speed: instructions per second on three workloads, on 1 and 2 threads.
    Sim(cmd_bench::SimArgs),
}

fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("IPU_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
}

/// `mi_option_purge_delay` in mimalloc's `mimalloc.h` (v2): the 16th option.
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

fn main() -> ExitCode {
    // Keep freed memory instead of returning it to the system after 10 ms: a large build frees
    // and reallocates hundreds of megabytes, and the page faults of fresh memory cost more than
    // the memory held.
    // SAFETY: mi_option_set only stores an option value; no allocation is live yet that
    // depends on it.
    unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, -1) };
    let cli = Cli::parse();
    init_logging();
    catch_interrupts();
    let result = match cli.command {
        Command::Asm(a) => cmd_isa::asm(a),
        Command::Disasm(a) => cmd_isa::disasm(a),
        Command::Sim(a) => cmd_sim::sim(a),
        Command::Bench(BenchCommand::Amp(a)) => cmd_sim::amp(a),
        Command::Bench(BenchCommand::Compile(a)) => cmd_bench::compile(a),
        Command::Bench(BenchCommand::Sim(a)) => cmd_bench::sim(a),
        Command::Numerics(c) => cmd_numerics::run(c),
        Command::Models(a) => cmd_graph::models(a),
        Command::Graph(c) => cmd_graph::run(c),
        Command::Reference(a) => cmd_reference::run(a),
        Command::Build(a) => cmd_run::build(a),
        Command::Exec(a) => cmd_run::exec(a),
        Command::Run(a) => cmd_run::run(a),
        Command::Report(a) => cmd_report::report(a),
        Command::Runs(a) => cmd_runs::runs(a),
        Command::Tune(a) => cmd_tune::tune(a),
        Command::Sweep(a) => cmd_sweep::sweep(a),
    };
    if ipu_sim::interrupted() {
        eprintln!("{INTERRUPTED_MESSAGE}");
        return ExitCode::from(INTERRUPTED_EXIT);
    }
    match result {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln!("error: {}", shorten(&format!("{e:#}")));
            ExitCode::from(2)
        }
    }
}

/// The exit status after Ctrl-C: 128 + SIGINT, as a shell reports a process it interrupted.
const INTERRUPTED_EXIT: u8 = 130;
/// The one line printed after Ctrl-C.
const INTERRUPTED_MESSAGE: &str =
    "error: interrupted (Ctrl-C); artifacts not yet written were not written";
/// How long the process may take to stop after Ctrl-C before it exits where it is.
const INTERRUPT_GRACE: std::time::Duration = std::time::Duration::from_secs(1);

/// Ctrl-C stops the simulated device (every tile stops within a few thousand instructions
/// and the command returns through its error path, so nothing half-written is left: every
/// artifact is written to a temporary name and renamed); work that does not look at the flag
/// (compiling, the host reference) is ended after [`INTERRUPT_GRACE`].
fn catch_interrupts() {
    let installed = ctrlc::set_handler(|| {
        ipu_sim::interrupt();
        std::thread::sleep(INTERRUPT_GRACE);
        eprintln!("{INTERRUPTED_MESSAGE}");
        std::process::exit(i32::from(INTERRUPTED_EXIT));
    });
    if let Err(e) = installed {
        tracing::warn!("Ctrl-C will end the process without cleanup: {e}");
    }
}

/// Longest error message printed in full; a longer one (a corrupt input quoted at length) is
/// cut in the middle.
const MESSAGE_CHARS_MAX: usize = 2000;

/// `message`, cut in the middle to at most about [`MESSAGE_CHARS_MAX`] characters.
fn shorten(message: &str) -> String {
    let n = message.chars().count();
    if n <= MESSAGE_CHARS_MAX {
        return message.to_string();
    }
    let head: String = message.chars().take(MESSAGE_CHARS_MAX * 3 / 4).collect();
    let tail: String = message.chars().skip(n - MESSAGE_CHARS_MAX / 4).collect();
    format!(
        "{head} … ({} characters left out) … {tail}",
        n - MESSAGE_CHARS_MAX
    )
}
