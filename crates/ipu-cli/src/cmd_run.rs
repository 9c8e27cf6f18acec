//! `ipu build MODEL -o FILE.ipuexe`, `ipu exec FILE.ipuexe`, and `ipu run MODEL` (build, write
//! the package, read it back, execute on the device, check against the host reference).
//!
//! `exec` and `run` take inputs from NumPy files or generate them from the seed, call
//! `initialize` once and `run` `--iterations` times in one session, and can write the outputs
//! as NumPy files ([`crate::npy`]). Without input files every iteration gets fresh inputs
//! ([`ipu_reference::iteration_seed`]); `run` checks every iteration against the reference of
//! that iteration's inputs.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use ipu_codegen::{BuildOptions, BuildReport};
use ipu_graph::{DType, Graph, TensorType};
use ipu_package::{HostTensor, Package, TensorRole};
use ipu_reference::{
    Comparison, Precision, Tensor, Tolerance, compare, evaluate_split, iteration_seed, make_input,
    tolerance_versus_exact,
};
use ipu_runtime::{
    CALL_CYCLES_MAX, CallLimits, CallReport, DeviceLock, LockOptions, Session, SessionOptions,
    SimulatorDevice,
};
use ipu_target::{AmpMode, Target, TargetKind};
use serde_json::json;
use tracing::info;

use crate::cmd_graph::load_model_with;
use crate::cmd_onnx;
use crate::npy::{self, FileInputs, Output, TensorFileArgs};
use crate::output_file::write_atomically;

/// Most `--iterations` one command accepts: a bound against a mistyped count (a million calls
/// of the smallest package take hours on the simulator), far beyond any measurement's needs.
pub const ITERATIONS_MAX: u32 = 1_000_000;

/// Options shared by `build` and `run`.
#[derive(clap::Args, Clone)]
pub struct CompileArgs {
    /// Target: gc200, bow or c600.
    #[arg(long, default_value = "gc200")]
    pub(crate) target: String,
    /// Use the first N tiles (default: all of the target's).
    #[arg(long, allow_hyphen_values = true, value_parser = tile_count)]
    pub(crate) tiles: Option<u32>,
    /// Override a built-in's parameter: `--set key=value` (repeatable).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub(crate) set: Vec<String>,
    /// Bind a symbolic dimension of an ONNX model: `--dim batch=4` (repeatable).
    #[arg(long = "dim", value_name = "NAME=VALUE")]
    pub(crate) dim: Vec<String>,
    /// Bound the planner's search: N candidate mappings, or Nms milliseconds (the log says
    /// why the search stopped).
    #[arg(long, value_name = "N|Nms", value_parser = ipu_codegen::plan::SearchBudget::parse)]
    pub(crate) search_budget: Option<ipu_codegen::plan::SearchBudget>,
}

/// Options of running on the device.
#[derive(clap::Args, Clone)]
pub struct DeviceArgs {
    /// Seed of the generated inputs.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Calls of `run` after the one `initialize`, in the same session. Generated inputs are
    /// fresh in every iteration (iteration 0 gets the inputs of --seed itself); inputs from
    /// files are the same in every iteration.
    #[arg(
        long,
        default_value_t = 1,
        value_parser = clap::value_parser!(u32).range(1..=i64::from(ITERATIONS_MAX))
    )]
    iterations: u32,
    /// Most tile cycles one call may take before the device stops it with a fault naming the
    /// tile, context and pc (default: 64 times the compiler's estimate plus 2^24, at most
    /// 2^32; 2^32 for a package without an estimate).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    max_cycles: Option<u64>,
    /// Device ownership lock file (default: the system temporary directory's
    /// `ipu-stack-device.lock`).
    #[arg(long)]
    lock: Option<PathBuf>,
    /// Seconds to wait for another owner of the device.
    #[arg(long, default_value_t = 30.0, allow_hyphen_values = true, value_parser = seconds)]
    lock_timeout: f64,
    /// Directory for the package, profile and report of the run.
    #[arg(long)]
    artifacts: Option<PathBuf>,
    /// Write the JSON report here.
    #[arg(long)]
    report: Option<PathBuf>,
    #[command(flatten)]
    db: crate::insight_run::DbArgs,
}

/// Arguments of `ipu build`.
#[derive(clap::Args)]
pub struct BuildArgs {
    /// Built-in model name or model file.
    model: String,
    /// The package to write.
    #[arg(short = 'o', long)]
    output: PathBuf,
    #[command(flatten)]
    compile: CompileArgs,
    /// Write the JSON build report here, and the HTML report beside it (`.html`).
    #[arg(long)]
    report: Option<PathBuf>,
    /// Where the build looks for a search incumbent (`ipu tune`): the run database.
    #[command(flatten)]
    db: crate::insight_run::DbArgs,
}

/// Arguments of `ipu exec`.
#[derive(clap::Args)]
pub struct ExecArgs {
    /// The package.
    package: PathBuf,
    #[command(flatten)]
    files: TensorFileArgs,
    /// The device's target (default: the package's); a package for another target is refused.
    #[arg(long)]
    target: Option<String>,
    #[command(flatten)]
    device: DeviceArgs,
}

/// Arguments of `ipu run`.
#[derive(clap::Args)]
pub struct RunArgs {
    /// Built-in model name or model file.
    model: String,
    #[command(flatten)]
    compile: CompileArgs,
    #[command(flatten)]
    device: DeviceArgs,
    #[command(flatten)]
    files: TensorFileArgs,
    /// Precision of the host reference: device (emulates the device's rounding) or exact.
    #[arg(long, default_value = "device")]
    reference_precision: Precision,
    /// Host threads of the reference.
    #[arg(long, default_value_t = 2)]
    threads: usize,
    /// Override the absolute part of every output's element tolerance (finite, >= 0).
    #[arg(long, allow_hyphen_values = true, value_parser = tolerance)]
    atol: Option<f64>,
    /// Override the relative part of every output's element tolerance (finite, >= 0).
    #[arg(long, allow_hyphen_values = true, value_parser = tolerance)]
    rtol: Option<f64>,
    /// Override the lowest acceptable row cosine similarity (-1 to 1).
    #[arg(long, allow_hyphen_values = true, value_parser = cosine)]
    min_cosine: Option<f64>,
    /// An ONNX test data set: the inputs from DIR/input_N.pb and the outputs checked against
    /// DIR/output_N.pb as well as against the host reference (the ONNX backend tests'
    /// tolerances: rtol 1e-3, atol 1e-7 for f32; wider for f16 and FP8, see docs/onnx.md).
    #[arg(long, value_name = "DIR", conflicts_with_all = ["input", "inputs"])]
    data: Option<PathBuf>,
}

/// `--tiles`: a whole number from 1 (the target's bound is checked by the build).
pub(crate) fn tile_count(s: &str) -> Result<u32, String> {
    match s.trim().parse::<i64>() {
        Ok(n) if (1..=i64::from(u32::MAX)).contains(&n) => Ok(n as u32),
        Ok(n) => Err(format!("a tile count is at least 1, not {n}")),
        Err(_) => Err(format!("`{s}` is not a whole number of tiles")),
    }
}

/// `--lock-timeout`: a finite number of seconds, at least 0.
fn seconds(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && v >= 0.0 => Ok(v),
        Ok(v) => Err(format!(
            "a time is a finite number of seconds >= 0, not {v}"
        )),
        Err(_) => Err(format!("`{s}` is not a number of seconds")),
    }
}

/// `--atol` and `--rtol`: a finite number, at least 0.
fn tolerance(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && v >= 0.0 => Ok(v),
        Ok(v) => Err(format!("a tolerance is a finite number >= 0, not {v}")),
        Err(_) => Err(format!("`{s}` is not a number")),
    }
}

/// `--min-cosine`: a cosine similarity, -1 to 1.
fn cosine(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(v) if (-1.0..=1.0).contains(&v) => Ok(v),
        Ok(v) => Err(format!(
            "a cosine similarity is between -1 and 1, not {v} (no row could pass)"
        )),
        Err(_) => Err(format!("`{s}` is not a number")),
    }
}

pub(crate) fn target_of(name: &str) -> anyhow::Result<Target> {
    TargetKind::from_name(name)
        .map(|k| k.target())
        .ok_or_else(|| anyhow::anyhow!("unknown target {name:?}; known targets: gc200, bow, c600"))
}

/// Compiles `graph`. A refused build still writes the JSON report at `report` (and the HTML
/// report beside it) and into `dir`, whose top-level `error` is the compiler's typed error
/// (`kind` and its fields) with its `message`, with the memory view of the closest candidate.
/// The build resumes from the search incumbent the run database `db` keeps for it, if any
/// (`ipu tune`).
fn compile(
    graph: &Graph,
    c: &CompileArgs,
    report: Option<&Path>,
    dir: Option<&Path>,
    db: &crate::insight_run::DbArgs,
) -> anyhow::Result<(ipu_codegen::Build, u64)> {
    let target = target_of(&c.target)?;
    let tiles = c.tiles.unwrap_or(target.tiles);
    let budget = c.search_budget.unwrap_or_default();
    let start = Instant::now();
    let incumbent = crate::cmd_tune::incumbent_for(graph, &target, tiles, budget, db);
    let pb = ipu_insight::progress::bar(0, &format!("compiling {}", graph.name));
    let built = ipu_codegen::build_resuming(
        graph,
        &BuildOptions { target, tiles },
        incumbent.as_ref().map_err(String::as_str),
        budget,
    );
    pb.finish_and_clear();
    match built {
        Ok((build, _)) => Ok((build, start.elapsed().as_millis() as u64)),
        Err(refusal) => {
            let e = refusal.error.clone();
            let j = refusal_json(graph, &target, tiles, &e)?;
            let html: Vec<PathBuf> = report
                .map(|p| p.with_extension("html"))
                .into_iter()
                .collect();
            let json: Vec<&Path> = report.into_iter().collect();
            let dirs: Vec<&Path> = dir.into_iter().collect();
            let e = crate::insight_run::on_refusal(j, &refusal, &json, &html, &dirs)?;
            Err(e.context(format!("building {}", graph.name)))
        }
    }
}

/// For an ONNX model: its attention subgraphs in the form the compiler chooses
/// ([`ipu_codegen::choose_attention`]) for the target and tiles of `c`.
pub(crate) fn choose_attention(graph: Graph, c: &CompileArgs) -> anyhow::Result<Graph> {
    let target = target_of(&c.target)?;
    let tiles = c.tiles.unwrap_or(target.tiles);
    Ok(ipu_codegen::choose_attention(&graph, &target, tiles)?)
}

/// The tolerance of graph output `id` against its reference `exp`, `reordered` when the graph
/// has a flash attention.
pub(crate) fn output_tolerance(
    graph: &Graph,
    id: ipu_graph::ValueId,
    exp: &Tensor,
    precision: Precision,
    reordered: usize,
) -> Tolerance {
    let mut tol = match precision {
        Precision::Device => Tolerance::for_dtype(exp.dtype),
        Precision::Exact => tolerance_versus_exact(graph, id),
    };
    if reordered > 0 && precision == Precision::Device {
        // The device merges flash attention's key blocks in another order than the
        // expansion the reference follows: a few units of the format's last place at
        // the largest magnitude involved, carried through what follows. The element
        // floor is then one unit at the output's scale, and with `reordered` such
        // attentions one after another (a model's layers), the root of their number:
        // independent differences of a unit add as a random walk (docs/numerics.md).
        let scale = exp.data.iter().fold(0.0f32, |m, x| m.max(x.abs())) as f64;
        let unit = match exp.dtype {
            DType::F32 => f64::from(f32::EPSILON),
            _ => (2.0f64).powi(-10),
        };
        tol.atol = tol
            .atol
            .max(scale * unit * (reordered as f64).sqrt().ceil());
    }
    tol
}

/// The report of a refused build.
fn refusal_json(
    graph: &Graph,
    target: &Target,
    tiles: u32,
    e: &ipu_codegen::CodegenError,
) -> anyhow::Result<serde_json::Value> {
    let mut error = serde_json::to_value(e)?;
    error["message"] = json!(e.to_string());
    let j = json!({
        "model": graph.name,
        "target": target.kind.name(),
        "tiles": tiles,
        "device": "simulator",
        "error": error,
    });
    Ok(j)
}

fn build_json(r: &BuildReport, compile_ms: u64) -> serde_json::Value {
    json!({
        "phases": r.phases.iter().map(|(n, ms)| json!({"name": n, "elapsed_ms": ms})).collect::<Vec<_>>(),
        "compile_ms": compile_ms,
        "estimated_cycles": r.estimated_cycles,
        "estimated_exchange_cycles": r.estimated_exchange_cycles,
        "final_cycles": r.final_cycles,
        "final_exchange_cycles": r.final_exchange_cycles,
        "tiles_used": r.tiles_used,
        "peak_tile_bytes": {"standard": r.peak_standard_bytes, "interleaved": r.peak_interleaved_bytes},
    })
}

/// `ipu build`.
pub fn build(a: BuildArgs) -> anyhow::Result<u8> {
    let mut graph = load_model_with(&a.model, &a.compile.set, &a.compile.dim)?;
    if cmd_onnx::is_onnx(&a.model) {
        graph = choose_attention(graph, &a.compile)?;
    }
    let (b, ms) = compile(&graph, &a.compile, a.report.as_deref(), None, &a.db)?;
    let bytes = b.package.to_bytes()?;
    info!(tiles = b.package.tiles.len(), "writing application package");
    write_atomically(&a.output, &bytes)?;
    info!("application package written");
    println!(
        "package={} model={} target={} tiles={} tiles_used={} package_bytes={} compile_ms={ms} estimated_cycles={} final_cycles={}",
        a.output.display(),
        graph.name,
        b.package.manifest.target,
        b.package.tiles.len(),
        b.report.tiles_used,
        bytes.len(),
        b.report.estimated_cycles,
        b.report.final_cycles
    );
    if let Some(path) = &a.report {
        let mut j = build_json(&b.report, ms);
        j["model"] = json!(graph.name);
        j["target"] = json!(b.package.manifest.target);
        j["package_bytes"] = json!(bytes.len());
        write_atomically(path, serde_json::to_string_pretty(&j)?.as_bytes())?;
        let html = ipu_insight::html::render(&ipu_insight::html::ReportInput {
            summary: &j,
            timeline: None,
            view: b.report.view.as_deref(),
        });
        write_atomically(&path.with_extension("html"), html.as_bytes())?;
    }
    Ok(0)
}

fn read_package(path: &Path) -> anyhow::Result<Package> {
    info!("reading application package");
    let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    let p = Package::from_bytes(&bytes).with_context(|| format!("{}", path.display()))?;
    info!(tiles = p.tiles.len(), compiler = %p.manifest.compiler_version, "application package read");
    Ok(p)
}

fn dtype_of(name: &str, scale: i32) -> anyhow::Result<DType> {
    Ok(match name {
        "f32" => DType::F32,
        "f16" => DType::F16,
        "f143" => DType::F143 { scale: scale as i8 },
        "f152" => DType::F152 { scale: scale as i8 },
        other => match DType::from_name(other) {
            Some(d) => d,
            None => bail!("unknown dtype {other:?} in the package"),
        },
    })
}

/// What a device run produced.
struct DeviceRun {
    /// The last iteration's outputs, in the package's order.
    outputs: Vec<Output>,
    /// The `run` call of every iteration.
    runs: Vec<CallReport>,
    profile_path: Option<PathBuf>,
    profile_tiles: usize,
    profile_samples: usize,
}

impl DeviceRun {
    /// The first iteration's `run` call: the figures of the summary and the report's top level.
    fn first(&self) -> &CallReport {
        &self.runs[0]
    }
}

fn open_lock(d: &DeviceArgs) -> anyhow::Result<DeviceLock> {
    let mut o = LockOptions::default();
    if let Some(p) = &d.lock {
        o.path = p.clone();
    }
    if !(d.lock_timeout >= 0.0 && d.lock_timeout.is_finite()) {
        bail!("--lock-timeout must be a non-negative number of seconds");
    }
    o.timeout = Duration::from_secs_f64(d.lock_timeout);
    Ok(DeviceLock::acquire(&o)?)
}

/// The inputs of one iteration, in the order of `expected`: those read from files, and the
/// others generated from the iteration's seed (input `i` as the reference's `make_inputs`
/// draws graph input `i`).
fn iteration_inputs(
    expected: &[(String, TensorType)],
    files: &FileInputs,
    seed: u64,
    iteration: u32,
) -> Vec<Tensor> {
    let seed = iteration_seed(seed, u64::from(iteration));
    expected
        .iter()
        .zip(&files.tensors)
        .enumerate()
        .map(|(i, ((_, ty), file))| file.clone().unwrap_or_else(|| make_input(ty, i, seed)))
        .collect()
}

/// Logs where every input comes from.
fn log_input_sources(expected: &[(String, TensorType)], files: &FileInputs, d: &DeviceArgs) {
    for ((name, _), source) in expected.iter().zip(&files.sources) {
        if !source.is_empty() {
            info!(input = %name, file = %source, "input read from file");
        }
    }
    let generated: Vec<&str> = expected
        .iter()
        .zip(&files.tensors)
        .filter(|(_, f)| f.is_none())
        .map(|((n, _), _)| n.as_str())
        .collect();
    if !generated.is_empty() {
        info!(
            inputs = %generated.join(", "),
            seed = d.seed,
            fresh_per_iteration = d.iterations > 1,
            "inputs generated from the seed"
        );
    }
}

/// The package's outputs read back from the session.
pub(crate) fn read_outputs(s: &Session<'_>, package: &Package) -> anyhow::Result<Vec<Output>> {
    let mut outputs = Vec::new();
    for t in host_tensors(package, TensorRole::Output) {
        let dense = s.read_output(&t.name)?;
        let ty = tensor_type(t)?;
        let tensor = Tensor::from_bytes(ty.dtype, ty.shape, &dense)?;
        outputs.push(Output {
            name: t.name.clone(),
            tensor,
            dense,
        });
    }
    Ok(outputs)
}

/// The default cycle budget of a call: 64 times the compiler's estimate of `run` (the
/// `final_cycles` the package records) plus 2^24, at most [`CALL_CYCLES_MAX`], which is also
/// the budget of a package without an estimate. Generous: estimates are within tens of percent.
fn default_max_cycles(package: &Package) -> u64 {
    package
        .manifest
        .metadata
        .get("final_cycles")
        .and_then(|c| c.parse::<u64>().ok())
        .map_or(CALL_CYCLES_MAX, |c| {
            c.saturating_mul(64)
                .saturating_add(1 << 24)
                .min(CALL_CYCLES_MAX)
        })
}

/// What [`execute`] calls after every iteration with its index, its inputs (in the order of
/// the expected inputs) and the outputs it read back.
type EachIteration<'a> = dyn FnMut(u32, &[Tensor], &[Output]) -> anyhow::Result<()> + 'a;

/// Loads `package` on the simulated device, calls `initialize` once and `run` once per
/// iteration, each time writing the iteration's inputs before and reading every output after;
/// `each` sees every iteration's inputs (in the order of `expected`) and outputs.
fn execute(
    package: &Package,
    target: Target,
    expected: &[(String, TensorType)],
    files: &FileInputs,
    d: &DeviceArgs,
    profile: Option<PathBuf>,
    each: &mut EachIteration<'_>,
) -> anyhow::Result<DeviceRun> {
    let lock = open_lock(d)?;
    let device = Box::new(SimulatorDevice::new(target));
    let cycles_max = d.max_cycles.unwrap_or_else(|| default_max_cycles(package));
    info!(max_cycles = cycles_max, "cycle budget of every call");
    let mut s = Session::open_with(
        device,
        package,
        SessionOptions {
            ownership: Some(lock),
            limits: CallLimits {
                cycles_max,
                ..Default::default()
            },
        },
    )?;
    s.start_host_exchange()?;
    let mut runs = Vec::new();
    let mut outputs = Vec::new();
    let pb = ipu_insight::progress::bar(u64::from(d.iterations), "running");
    for iteration in 0..d.iterations {
        let inputs = iteration_inputs(expected, files, d.seed, iteration);
        for ((name, _), t) in expected.iter().zip(&inputs) {
            s.write_input(name, &t.to_bytes())?;
        }
        if iteration == 0 {
            s.call("initialize")?;
        }
        if d.iterations > 1 {
            info!(iteration, iterations = d.iterations, "iteration starts");
        }
        runs.push(s.call("run")?);
        outputs = read_outputs(&s, package)?;
        each(iteration, &inputs, &outputs)?;
        pb.inc(1);
    }
    pb.finish_and_clear();
    let (mut profile_tiles, mut profile_samples) = (0, 0);
    if let Some(p) = &profile {
        let prof = s.write_profile(p)?;
        profile_tiles = prof.tile_count();
        profile_samples = prof.sample_count();
    }
    Ok(DeviceRun {
        outputs,
        runs,
        profile_path: profile,
        profile_tiles,
        profile_samples,
    })
}

/// The inputs of a package from its manifest, in order.
fn package_inputs(package: &Package) -> anyhow::Result<Vec<(String, TensorType)>> {
    host_tensors(package, TensorRole::Input)
        .map(|t| Ok((t.name.clone(), tensor_type(t)?)))
        .collect()
}

/// The host tensors of a package with `role`, in manifest order.
fn host_tensors(package: &Package, role: TensorRole) -> impl Iterator<Item = &HostTensor> {
    package
        .manifest
        .tensors
        .iter()
        .filter(move |t| t.role == role)
}

/// A host tensor's type, from its manifest entry.
fn tensor_type(t: &HostTensor) -> anyhow::Result<TensorType> {
    Ok(TensorType::new(
        dtype_of(&t.dtype, t.scale)?,
        t.shape.clone(),
    ))
}

/// The inputs of a graph, in order.
pub(crate) fn graph_inputs(graph: &Graph) -> Vec<(String, TensorType)> {
    graph
        .inputs()
        .iter()
        .map(|&v| (graph.value(v).name.clone(), graph.value(v).ty.clone()))
        .collect()
}

/// Writes the outputs to `--outputs DIR`, if given, and prints where.
fn write_output_files(files: &TensorFileArgs, outputs: &[Output]) -> anyhow::Result<()> {
    if let Some(dir) = &files.outputs {
        let paths = npy::write_outputs(dir, outputs, files.raw_fp8)?;
        info!(dir = %dir.display(), files = paths.len(), "outputs written");
        println!("outputs={} files={}", dir.display(), paths.len());
    }
    Ok(())
}

/// The report's figures of one `run` call: its cycles, the host exchange of the inputs and of
/// the outputs, and the rest (on chip).
fn call_json(iteration: u32, r: &CallReport) -> serde_json::Value {
    let c = &r.counters;
    json!({
        "iteration": iteration,
        "cycles": c.cycles,
        "compute_cycles": c.compute_cycles,
        "exchange_cycles": c.exchange_cycles,
        "sync_cycles": c.sync_cycles,
        "host_exchange_cycles": c.host_exchange_cycles,
        "host_to_device_cycles": c.host_to_device_cycles,
        "device_to_host_cycles": c.device_to_host_cycles,
        "on_chip_cycles": c.cycles.saturating_sub(c.host_exchange_cycles),
        "instructions": c.instructions,
        "bank_conflicts": c.bank_conflicts,
    })
}

/// The report's `device` object of a `run` call: its cycles, and what simulating it cost the
/// host (the worker instructions simulated, the call's wall-clock seconds, their ratio).
fn device_json(r: &CallReport) -> serde_json::Value {
    let c = &r.counters;
    let seconds = r.host_elapsed_us as f64 / 1e6;
    json!({
        "name": "simulator",
        "cycles": c.cycles,
        "compute_cycles": c.compute_cycles,
        "exchange_cycles": c.exchange_cycles,
        "sync_cycles": c.sync_cycles,
        "instructions": c.instructions,
        "bank_conflicts": c.bank_conflicts,
        "simulated_worker_instructions": c.worker_instructions,
        "simulation_seconds": seconds,
        "simulated_worker_instructions_per_second": (seconds > 0.0).then(|| (c.worker_instructions as f64 / seconds).round()),
    })
}

/// The report's list of inputs and where each came from.
fn inputs_json(expected: &[(String, TensorType)], files: &FileInputs) -> serde_json::Value {
    json!(
        expected
            .iter()
            .zip(&files.sources)
            .map(|((name, ty), source)| json!({
                "name": name,
                "type": ty.to_string(),
                "file": (!source.is_empty()).then_some(source),
            }))
            .collect::<Vec<_>>()
    )
}

/// What one `run` call gives a user: its time at the target's clock, and for a model whose
/// first 32-bit integer input is `[batch, sequence]` token ids, sequences and tokens a second;
/// the bytes of the model's parameters (its constants) held on the chip.
struct Throughput {
    seconds: f64,
    sequences: Option<usize>,
    tokens: Option<usize>,
    parameter_bytes: usize,
}

impl Throughput {
    fn of(graph: &Graph, cycles: u64, clock_hz: u64) -> Throughput {
        let ids = graph
            .inputs()
            .iter()
            .map(|&v| &graph.value(v).ty)
            .find(|t| t.dtype == ipu_graph::DType::I32 && t.shape.len() == 2);
        Throughput {
            seconds: cycles as f64 / clock_hz as f64,
            sequences: ids.map(|t| t.shape[0]),
            tokens: ids.map(|t| t.shape[0] * t.shape[1]),
            parameter_bytes: graph.constants().iter().map(|c| c.data.len()).sum(),
        }
    }
}

impl std::fmt::Display for Throughput {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let rate = |n: Option<usize>| {
            n.map_or("n/a".to_string(), |n| {
                format!("{:.1}", n as f64 / self.seconds)
            })
        };
        write!(
            f,
            "run_us={:.1} sequences_per_second={} tokens_per_second={} parameter_bytes={}",
            self.seconds * 1e6,
            rate(self.sequences),
            rate(self.tokens),
            self.parameter_bytes
        )
    }
}

/// Prints one line per iteration when there are several.
fn print_iterations(r: &DeviceRun) {
    if r.runs.len() < 2 {
        return;
    }
    for (i, run) in r.runs.iter().enumerate() {
        let c = &run.counters;
        println!(
            "iteration={i} cycles={} host_to_device_cycles={} device_to_host_cycles={} on_chip_cycles={}",
            c.cycles,
            c.host_to_device_cycles,
            c.device_to_host_cycles,
            c.cycles.saturating_sub(c.host_exchange_cycles)
        );
    }
}

/// `ipu exec`.
pub fn exec(a: ExecArgs) -> anyhow::Result<u8> {
    let package = read_package(&a.package)?;
    let expected = package_inputs(&package)?;
    let files = npy::read_inputs(&expected, &a.files)?;
    npy::check_index_bounds(&package.manifest.index_bounds, &expected, &files)?;
    if a.files.outputs.is_some() {
        npy::check_output_names(
            host_tensors(&package, TensorRole::Output).map(|t| t.name.as_str()),
        )?;
    }
    log_input_sources(&expected, &files, &a.device);
    let profile = a
        .device
        .artifacts
        .as_ref()
        .map(|d| d.join("execution.profile.json"));
    let target = target_of(a.target.as_deref().unwrap_or(&package.manifest.target))?;
    let r = execute(
        &package,
        target,
        &expected,
        &files,
        &a.device,
        profile,
        &mut |_, _, _| Ok(()),
    )?;
    write_output_files(&a.files, &r.outputs)?;
    for o in &r.outputs {
        let (name, t) = (&o.name, &o.tensor);
        let s = t.stats();
        println!(
            "output={name} dtype={} min={:.6} max={:.6} mean={:.6} rms={:.6}",
            t.dtype, s.min, s.max, s.mean, s.rms
        );
    }
    print_device(&r, &a.package, package.tiles.len());
    print_iterations(&r);
    let c = &r.first().counters;
    let report = json!({
        "model": package.manifest.model,
        "target": package.manifest.target,
        "package": a.package.display().to_string(),
        "device": device_json(r.first()),
        "on_chip_cycles": c.cycles.saturating_sub(c.host_exchange_cycles),
        "host_exchange_cycles": c.host_exchange_cycles,
        "seed": a.device.seed,
        "inputs": inputs_json(&expected, &files),
        "iterations": r.runs.len(),
        "per_iteration": r.runs.iter().enumerate().map(|(i, run)| call_json(i as u32, run)).collect::<Vec<_>>(),
    });
    let text = serde_json::to_string_pretty(&report)?;
    if let Some(dir) = &a.device.artifacts {
        write_atomically(&dir.join("report.json"), text.as_bytes())?;
    }
    if let Some(p) = &a.device.report {
        write_atomically(p, text.as_bytes())?;
    }
    let mut options = options_json_device(&a.device);
    options["package"] = json!(a.package.display().to_string());
    let dir = a.device.artifacts.as_deref();
    crate::insight_run::after_run(dir, &report, None, &a.device.db, "exec", options, None)?;
    Ok(0)
}

fn print_device(r: &DeviceRun, package: &Path, tiles: usize) {
    if let Some(p) = &r.profile_path {
        println!(
            "profile={} tiles={} samples={}",
            p.display(),
            r.profile_tiles,
            r.profile_samples
        );
    }
    let c = &r.first().counters;
    println!(
        "cycles={} compute_cycles={} exchange_cycles={} sync_cycles={} instructions={} bank_conflicts={}",
        c.cycles,
        c.compute_cycles,
        c.exchange_cycles,
        c.sync_cycles,
        c.instructions,
        c.bank_conflicts
    );
    println!(
        "package={} tiles={tiles} device=simulator",
        package.display()
    );
}

/// Combines the comparisons of one output over several iterations: counts add up, the error
/// maxima and the cosine minimum are over all, the rms error is over all elements.
fn merge_comparisons(a: &Comparison, b: &Comparison) -> Comparison {
    let checks = a.checks + b.checks;
    let sum_sq = |c: &Comparison| c.rms_error * c.rms_error * c.checks as f64;
    Comparison {
        checks,
        max_abs_error: a.max_abs_error.max(b.max_abs_error),
        rms_error: ((sum_sq(a) + sum_sq(b)) / checks.max(1) as f64).sqrt(),
        min_cosine: a.min_cosine.min(b.min_cosine),
        beyond_tolerance: a.beyond_tolerance + b.beyond_tolerance,
        tolerance: a.tolerance,
    }
}

fn check_json(name: &str, c: &Comparison) -> serde_json::Value {
    json!({
        "name": name,
        "count": c.checks,
        "max_abs_error": c.max_abs_error,
        "rms_error": c.rms_error,
        "min_cosine": c.min_cosine,
        "threshold": {"atol": c.tolerance.atol, "rtol": c.tolerance.rtol, "min_cosine": c.tolerance.min_cosine},
        "pass": c.pass(),
    })
}

fn peak_macs_per_cycle(target: &Target, mode: Option<AmpMode>) -> Option<u64> {
    mode.and_then(|m| target.chip_macs_per_cycle(m))
}

/// `ipu run`.
pub fn run(a: RunArgs) -> anyhow::Result<u8> {
    let mut graph = load_model_with(&a.model, &a.compile.set, &a.compile.dim)?;
    if cmd_onnx::is_onnx(&a.model) {
        graph = choose_attention(graph, &a.compile)?;
    }
    if a.threads == 0 {
        bail!("--threads must be at least 1");
    }
    // Input files are read and checked before anything is compiled or run.
    let expected_inputs = graph_inputs(&graph);
    let (files, onnx_expected) = match &a.data {
        Some(dir) => {
            let outputs: Vec<(String, TensorType)> = graph
                .outputs()
                .iter()
                .map(|&v| (graph.value(v).name.clone(), graph.value(v).ty.clone()))
                .collect();
            let (files, expected) = cmd_onnx::read_data_set(dir, &expected_inputs, &outputs)?;
            (files, Some(expected))
        }
        None => (npy::read_inputs(&expected_inputs, &a.files)?, None),
    };
    npy::check_index_bounds(
        &ipu_codegen::manifest::index_bounds(&graph),
        &expected_inputs,
        &files,
    )?;
    if a.files.outputs.is_some() {
        npy::check_output_names(
            graph
                .outputs()
                .iter()
                .map(|&v| graph.value(v).name.as_str()),
        )?;
    }
    log_input_sources(&expected_inputs, &files, &a.device);
    let dir = a
        .device
        .artifacts
        .clone()
        .unwrap_or_else(|| PathBuf::from("artifacts").join(&graph.name));
    let (b, compile_ms) = compile(
        &graph,
        &a.compile,
        a.device.report.as_deref(),
        Some(&dir),
        &a.device.db,
    )?;
    let package_path = dir.join("model.ipuexe");
    // An earlier run's report and profile would sit beside this run's package as if they
    // were this run's until it writes its own: a run stopped before then leaves none.
    let views = crate::insight_run::RUN_FILES.map(|f| dir.join(f));
    for stale in [dir.join("report.json"), dir.join("execution.profile.json")]
        .into_iter()
        .chain(views)
    {
        match std::fs::remove_file(&stale) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                return Err(e).with_context(|| format!("removing {}", stale.display()));
            }
            _ => {}
        }
    }
    // The device precision of a matmul split over k follows the build's split.
    let k_splits = b.report.k_splits.clone();
    let bytes = b.package.to_bytes()?;
    info!(tiles = b.package.tiles.len(), "writing application package");
    write_atomically(&package_path, &bytes)?;
    info!("application package written");
    // The run uses the package read back and the build's figures: neither the built package
    // nor its bytes stay beside it.
    let package_bytes = bytes.len();
    drop(bytes);
    let ipu_codegen::Build {
        package: built,
        report: build_report,
    } = b;
    drop(built);
    let package = read_package(&package_path)?;
    let target = target_of(&package.manifest.target)?;
    // Every iteration's outputs against the reference of that iteration's inputs; inputs that
    // all come from files are the same in every iteration, and so is their reference.
    let mut per_iteration: Vec<Vec<(String, Comparison)>> = Vec::new();
    let mut reference_of_files: Option<Vec<Tensor>> = None;
    let mut check = |_: u32, inputs: &[Tensor], outputs: &[Output]| -> anyhow::Result<()> {
        let expected = match &reference_of_files {
            Some(e) => e.clone(),
            None => {
                let start = Instant::now();
                info!(threads = a.threads, "configured host reference threads");
                let e =
                    evaluate_split(&graph, inputs, a.reference_precision, a.threads, &k_splits)?;
                info!(
                    elapsed_ms = start.elapsed().as_millis() as u64,
                    "evaluated host reference"
                );
                if files.all_from_files() {
                    reference_of_files = Some(e.clone());
                }
                e
            }
        };
        let mut checks = Vec::new();
        let reordered = graph
            .operations()
            .iter()
            .filter(|o| matches!(o.kind, ipu_graph::OpKind::FlashAttention { .. }))
            .count();
        for ((o, exp), &id) in outputs.iter().zip(&expected).zip(graph.outputs()) {
            let mut tol = output_tolerance(&graph, id, exp, a.reference_precision, reordered);
            tol.atol = a.atol.unwrap_or(tol.atol);
            tol.rtol = a.rtol.unwrap_or(tol.rtol);
            tol.min_cosine = a.min_cosine.unwrap_or(tol.min_cosine);
            checks.push((o.name.clone(), compare(&o.tensor, exp, &tol)));
        }
        per_iteration.push(checks);
        Ok(())
    };
    let r = execute(
        &package,
        target,
        &expected_inputs,
        &files,
        &a.device,
        Some(dir.join("execution.profile.json")),
        &mut check,
    )?;
    write_output_files(&a.files, &r.outputs)?;
    println!("referencePrecision={}", a.reference_precision);
    // One comparison per output over all iterations.
    let mut checks: Vec<(String, Comparison)> = per_iteration.first().cloned().unwrap_or_default();
    for later in per_iteration.iter().skip(1) {
        for ((_, all), (_, c)) in checks.iter_mut().zip(later) {
            *all = merge_comparisons(all, c);
        }
    }
    // Against the data set's expected outputs (the last iteration's outputs: with files, every
    // iteration has the same inputs).
    let mut versus_onnx = Vec::new();
    for (o, want) in r.outputs.iter().zip(onnx_expected.iter().flatten()) {
        let c = compare(&o.tensor, want, &cmd_onnx::onnx_tolerance(want.dtype));
        versus_onnx.push((o.name.clone(), c));
    }
    let pass = checks.iter().all(|(_, c)| c.pass()) && versus_onnx.iter().all(|(_, c)| c.pass());
    let total: usize = checks.iter().map(|(_, c)| c.checks).sum();
    let max_err = checks
        .iter()
        .map(|(_, c)| c.max_abs_error)
        .fold(0.0, f64::max);
    let rms = (checks
        .iter()
        .map(|(_, c)| c.rms_error * c.rms_error * c.checks as f64)
        .sum::<f64>()
        / total.max(1) as f64)
        .sqrt();
    let min_cos = checks.iter().map(|(_, c)| c.min_cosine).fold(1.0, f64::min);
    print_device(&r, &package_path, package.tiles.len());
    let c = &r.first().counters;
    // Efficiency: the matmuls' MACs against the AMP's peak for their mode, over the whole
    // `run` call and over its on-chip part (without the host-exchange points).
    let host_exchange_cycles = c.host_exchange_cycles;
    let on_chip_cycles = c.cycles.saturating_sub(host_exchange_cycles);
    let eff = |cycles: u64| {
        peak_macs_per_cycle(&target, build_report.amp_mode)
            .filter(|_| cycles > 0 && build_report.macs > 0)
            .map(|peak| build_report.macs as f64 / (peak as f64 * cycles as f64))
    };
    let (efficiency, efficiency_on_chip) = (eff(c.cycles), eff(on_chip_cycles));
    let text = |e: Option<f64>| e.map_or("n/a".to_string(), |e| format!("{e:.4}"));
    println!(
        "estimated_cycles={} final_cycles={} device_cycles={} host_exchange_cycles={host_exchange_cycles} on_chip_cycles={on_chip_cycles} efficiency={} efficiency_on_chip={}",
        build_report.estimated_cycles,
        build_report.final_cycles,
        c.cycles,
        text(efficiency),
        text(efficiency_on_chip)
    );
    let speed = Throughput::of(&graph, c.cycles, target.clock_hz);
    println!("{speed}");
    print_iterations(&r);
    let verdict = if pass { "PASS" } else { "FAIL" };
    if per_iteration.len() > 1 {
        for (i, iteration) in per_iteration.iter().enumerate() {
            for (name, c) in iteration {
                println!("iteration={i} output={name} {c}");
            }
        }
    }
    for (name, c) in &checks {
        println!("output={name} {c}");
    }
    for (name, c) in &versus_onnx {
        println!("output={name} versus=onnx_data {c}");
    }
    println!(
        "numericalChecks={total} maxError={max_err:.6} rmsError={rms:.6} minCosine={min_cos:.9} numericalTest={verdict}"
    );
    println!(
        "package={} tiles={} device=simulator deviceTest={verdict}",
        package_path.display(),
        package.tiles.len()
    );
    let report = json!({
        "model": graph.name,
        "target": package.manifest.target,
        "tiles_used": build_report.tiles_used,
        "phases": build_report.phases.iter().map(|(n, ms)| json!({"name": n, "elapsed_ms": ms})).collect::<Vec<_>>(),
        "compile_ms": compile_ms,
        "estimated_cycles": build_report.estimated_cycles,
        "final_cycles": build_report.final_cycles,
        "device": device_json(r.first()),
        "peak_tile_bytes": {"standard": build_report.peak_standard_bytes, "interleaved": build_report.peak_interleaved_bytes},
        "package_bytes": package_bytes,
        "checks": checks.iter().map(|(n, c)| check_json(n, c)).collect::<Vec<_>>(),
        "flops": 2 * build_report.macs,
        "efficiency": efficiency,
        "efficiency_on_chip": efficiency_on_chip,
        "on_chip_cycles": on_chip_cycles,
        "host_exchange_cycles": host_exchange_cycles,
        "run_seconds": speed.seconds,
        "sequences_per_second": speed.sequences.map(|n| n as f64 / speed.seconds),
        "tokens_per_second": speed.tokens.map(|n| n as f64 / speed.seconds),
        "parameter_bytes": speed.parameter_bytes,
        "repeated_layers": build_report.repeated_layers,
        "amp_mode": build_report.amp_mode.map(|m| format!("{m:?}")),
        "reference_precision": a.reference_precision.to_string(),
        "seed": a.device.seed,
        "inputs": inputs_json(&expected_inputs, &files),
        "iterations": r.runs.len(),
        "per_iteration": r.runs.iter().zip(&per_iteration).enumerate().map(|(i, (run, checks))| {
            let mut j = call_json(i as u32, run);
            j["checks"] = json!(checks.iter().map(|(n, c)| check_json(n, c)).collect::<Vec<_>>());
            j["pass"] = json!(checks.iter().all(|(_, c)| c.pass()));
            j
        }).collect::<Vec<_>>(),
    });
    let text = serde_json::to_string_pretty(&report)?;
    write_atomically(&dir.join("report.json"), text.as_bytes())?;
    if let Some(p) = &a.device.report {
        write_atomically(p, text.as_bytes())?;
    }
    let view = build_report.view.as_deref();
    crate::insight_run::write_view(&dir, view)?;
    let options = options_json(&a.compile, &a.device);
    let hash = ipu_insight::text_hash(&ipu_graph::print(&graph));
    crate::insight_run::after_run(
        Some(&dir),
        &report,
        view,
        &a.device.db,
        "run",
        options,
        Some(hash),
    )?;
    Ok(if pass { 0 } else { 1 })
}

/// The options of a device run, for the run database.
fn options_json_device(d: &DeviceArgs) -> serde_json::Value {
    json!({"seed": d.seed, "iterations": d.iterations, "max_cycles": d.max_cycles})
}

/// The options of `ipu run`, for the run database.
fn options_json(c: &CompileArgs, d: &DeviceArgs) -> serde_json::Value {
    let mut j = options_json_device(d);
    j["target"] = json!(c.target);
    j["tiles"] = json!(c.tiles);
    j["set"] = json!(c.set);
    j["dim"] = json!(c.dim);
    j
}
