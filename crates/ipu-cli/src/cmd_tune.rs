//! `ipu tune MODEL [--top K] [--db PATH]`: builds the best K finalists of every operation that
//! has a choice, runs each on the simulated device, and keeps the fastest measured plan as the
//! search incumbent in the run database; later builds of the same graph, target, tiles,
//! compiler version and build options resume from it ([`incumbent_for`]).
//!
//! Candidates: the planner's picks, then per operation each of its other finalists (the rest
//! at the planner's picks), then, when several operations gained, their fastest finalists
//! together. Every candidate's outputs are checked against the host reference (one
//! evaluation: the inputs are the same); a candidate that fails is never the incumbent. Each
//! prints its estimate against its measured cycles, and each is kept in the database.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use ipu_codegen::plan::{Choice, Choices, SearchBudget};
use ipu_codegen::{BuildOptions, COMPILER_VERSION, Search};
use ipu_graph::Graph;
use ipu_insight::{IncumbentKey, IncumbentRecord, Lookup, Measurement};
use ipu_reference::{
    Precision, Tensor, compare, evaluate, evaluate_split, iteration_seed, make_input,
};
use ipu_runtime::{CallLimits, DeviceLock, LockOptions, Session, SessionOptions, SimulatorDevice};
use ipu_target::Target;
use tracing::info;

use crate::cmd_graph::load_model_with;
use crate::cmd_run::{CompileArgs, graph_inputs, output_tolerance, read_outputs, target_of};
use crate::insight_run::{DbArgs, db_path, open_db};

/// Most finalists per operation `--top` takes: the planner keeps
/// [`ipu_codegen::plan::FINALISTS`].
pub const TOP_MAX: usize = ipu_codegen::plan::FINALISTS;

/// Arguments of `ipu tune`.
#[derive(clap::Args)]
pub struct TuneArgs {
    /// Built-in model name or model file.
    model: String,
    #[command(flatten)]
    compile: CompileArgs,
    /// Finalists per operation to build and run (at most the planner's 3).
    #[arg(long, default_value_t = TOP_MAX as u64, value_parser = clap::value_parser!(u64).range(1..=TOP_MAX as u64))]
    top: u64,
    /// The run database that keeps the incumbent and the measurements (default:
    /// $XDG_DATA_HOME/ipu-stack/runs.sqlite, else ~/.local/share/ipu-stack/runs.sqlite).
    #[arg(long, value_name = "PATH")]
    db: Option<PathBuf>,
    /// Seed of the generated inputs.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Device ownership lock file (default: the system temporary directory's
    /// `ipu-stack-device.lock`).
    #[arg(long)]
    lock: Option<PathBuf>,
}

/// The key of `graph`'s incumbent on `tiles` of `target`, built with `budget`.
pub fn key_of(graph: &Graph, target: &Target, tiles: u32, budget: SearchBudget) -> IncumbentKey {
    IncumbentKey {
        graph_hash: ipu_insight::text_hash(&ipu_graph::print(graph)),
        target: target.kind.name().to_string(),
        tiles,
        compiler_version: COMPILER_VERSION.to_string(),
        options: serde_json::json!({ "search_budget": budget.to_string() }).to_string(),
    }
}

/// The incumbent a build of `graph` resumes from, or why there is none (no database, none
/// recorded, a stale or corrupt record). Never creates the database and never fails the build.
pub fn incumbent_for(
    graph: &Graph,
    target: &Target,
    tiles: u32,
    budget: SearchBudget,
    db: &DbArgs,
) -> Result<Choices, String> {
    if db.no_db {
        return Err("--no-db: no run database to look in".into());
    }
    let path = db_path(db.db.as_deref()).map_err(|e| format!("{e:#}"))?;
    if !path.exists() {
        return Err(format!(
            "no incumbent recorded (no run database at {})",
            path.display()
        ));
    }
    let db = open_db(&path).map_err(|e| format!("the run database is unreadable: {e:#}"))?;
    let key = key_of(graph, target, tiles, budget);
    match db.incumbent(&graph.name, &key) {
        Ok(Lookup::Found(r)) => {
            let choices = r.parsed_choices()?;
            info!(
                measured_cycles = r.measured_cycles,
                planner_cycles = r.planner_cycles,
                recorded_at = %r.recorded_at,
                finalists = %choices_text(&choices),
                "found search incumbent"
            );
            Ok(choices)
        }
        Ok(Lookup::Stale(why)) => {
            tracing::warn!(reason = %why, "search incumbent ignored");
            Err(why)
        }
        Ok(Lookup::Missing) => Err(format!("no incumbent recorded in {}", path.display())),
        Err(e) => Err(format!("the run database is unreadable: {e}")),
    }
}

/// The choices as `op=finalist` words (`planner` for none).
pub fn choices_text(c: &Choices) -> String {
    if c.is_empty() {
        return "planner".into();
    }
    c.iter()
        .map(|(op, ch)| format!("{op}={}", ch.finalist))
        .collect::<Vec<_>>()
        .join(",")
}

/// One candidate's figures.
struct Tried {
    choices: Choices,
    estimated_cycles: u64,
    final_cycles: u64,
    measured_cycles: Option<u64>,
    /// The measured call's host exchange cycles (the estimates cover the rest, on chip).
    host_exchange_cycles: u64,
    pass: bool,
}

/// `ipu tune`.
pub fn tune(a: TuneArgs) -> anyhow::Result<u8> {
    let mut graph = load_model_with(&a.model, &a.compile.set, &a.compile.dim)?;
    if crate::cmd_onnx::is_onnx(&a.model) {
        graph = crate::cmd_run::choose_attention(graph, &a.compile)?;
    }
    let target = target_of(&a.compile.target)?;
    let tiles = a.compile.tiles.unwrap_or(target.tiles);
    let budget = a.compile.search_budget.unwrap_or_default();
    let options = BuildOptions { target, tiles };
    let key = key_of(&graph, &target, tiles, budget);
    let path = db_path(a.db.as_deref())?;
    let mut db = open_db(&path)?;
    // The planner's finalists: the candidates.
    let plan = ipu_codegen::plan::plan_searched(
        &graph,
        &target,
        tiles,
        &Default::default(),
        ipu_codegen::plan::SUPPORT_RESERVE_BYTES,
        &Choices::new(),
        budget,
    )
    .with_context(|| format!("planning {}", graph.name))?
    .0;
    let with_choice = ipu_codegen::plan::finalists_with_choice(&plan);
    let mut candidates: Vec<Choices> = vec![Choices::new()];
    for (op, finalists) in &with_choice {
        for (i, f) in finalists.iter().enumerate().take(a.top as usize).skip(1) {
            let choice = Choice {
                finalist: i,
                mapping: f.mapping.clone(),
            };
            candidates.push(Choices::from([(op.clone(), choice)]));
        }
    }
    info!(
        operations_with_choice = with_choice.len(),
        candidates = candidates.len(),
        top = a.top,
        "tuning on the device"
    );
    // Inputs and their reference, once.
    let expected = graph_inputs(&graph);
    let seed = iteration_seed(a.seed, 0);
    let inputs: Vec<Tensor> = expected
        .iter()
        .enumerate()
        .map(|(i, (_, ty))| make_input(ty, i, seed))
        .collect();
    let reference = evaluate(&graph, &inputs, Precision::Device, 2)?;
    let ctx = Measure {
        graph: &graph,
        options: &options,
        budget,
        expected: &expected,
        inputs: &inputs,
        reference: &reference,
        lock: a.lock.clone(),
    };
    let pb = ipu_insight::progress::bar(candidates.len() as u64, "tuning");
    let mut tried: Vec<Tried> = Vec::new();
    let measure_and_keep =
        |choices: Choices, db: &mut ipu_insight::RunDb, tried: &mut Vec<Tried>| {
            let t = ctx.measure(choices)?;
            print_tried(tried.len(), &t);
            let m = Measurement {
                choices: serde_json::to_string(&t.choices)?,
                estimated_cycles: t.estimated_cycles,
                final_cycles: t.final_cycles,
                measured_cycles: t.measured_cycles,
                pass: t.pass,
            };
            db.add_measurement(&graph.name, &key, &m, &ipu_insight::utc_now())?;
            tried.push(t);
            anyhow::Ok(())
        };
    for c in candidates {
        measure_and_keep(c, &mut db, &mut tried)?;
        pb.inc(1);
        if ipu_sim::interrupted() {
            anyhow::bail!("interrupted");
        }
    }
    pb.finish_and_clear();
    // Several operations gained: their fastest finalists together.
    let planner = tried[0].measured_cycles;
    let mut best_per_op = Choices::new();
    for (op, _) in &with_choice {
        let best = tried
            .iter()
            .filter(|t| t.pass && t.choices.contains_key(op))
            .filter(|t| t.measured_cycles < planner || planner.is_none())
            .filter_map(|t| t.measured_cycles.map(|c| (c, t)))
            .min_by_key(|(c, _)| *c);
        if let Some((_, t)) = best {
            best_per_op.insert(op.clone(), t.choices[op].clone());
        }
    }
    if best_per_op.len() > 1 {
        measure_and_keep(best_per_op, &mut db, &mut tried)?;
    }
    let Some(best) = tried
        .iter()
        .filter(|t| t.pass)
        .filter_map(|t| t.measured_cycles.map(|c| (c, t)))
        .min_by_key(|(c, _)| *c)
        .map(|(_, t)| t)
    else {
        anyhow::bail!(
            "no candidate of {} built, ran and passed its checks",
            graph.name
        );
    };
    let best_cycles = best.measured_cycles.unwrap_or(0);
    let planner_cycles = planner.unwrap_or(best_cycles);
    db.put_incumbent(&IncumbentRecord {
        key: key.clone(),
        model: graph.name.clone(),
        choices: serde_json::to_string(&best.choices)?,
        measured_cycles: best_cycles,
        planner_cycles,
        recorded_at: ipu_insight::utc_now(),
    })?;
    let gain = planner_cycles.saturating_sub(best_cycles);
    println!(
        "tuned model={} target={} tiles={tiles} candidates={} planner_cycles={planner_cycles} tuned_cycles={best_cycles} gain_cycles={gain} gain={:.2}% incumbent={} db={}",
        graph.name,
        key.target,
        tried.len(),
        100.0 * gain as f64 / planner_cycles.max(1) as f64,
        choices_text(&best.choices),
        path.display()
    );
    Ok(0)
}

fn print_tried(i: usize, t: &Tried) {
    let measured = t
        .measured_cycles
        .map_or("none".to_string(), |c| c.to_string());
    let on_chip = t
        .measured_cycles
        .map(|c| c.saturating_sub(t.host_exchange_cycles));
    let error = on_chip.map_or("n/a".to_string(), |c| {
        format!(
            "{:+.1}%",
            100.0 * (t.final_cycles as f64 - c as f64) / c.max(1) as f64
        )
    });
    println!(
        "candidate={i} finalists={} estimated_cycles={} final_cycles={} measured_cycles={measured} on_chip_cycles={} estimate_error={error} result={}",
        choices_text(&t.choices),
        t.estimated_cycles,
        t.final_cycles,
        on_chip.map_or("none".to_string(), |c| c.to_string()),
        if t.measured_cycles.is_none() {
            "REFUSED"
        } else if t.pass {
            "PASS"
        } else {
            "FAIL"
        }
    );
}

/// What measuring a candidate needs.
struct Measure<'a> {
    graph: &'a Graph,
    options: &'a BuildOptions,
    budget: SearchBudget,
    expected: &'a [(String, ipu_graph::TensorType)],
    inputs: &'a [Tensor],
    reference: &'a [Tensor],
    lock: Option<PathBuf>,
}

/// Seconds a tune waits for another owner of the device.
const LOCK_TIMEOUT: Duration = Duration::from_secs(600);

impl Measure<'_> {
    /// Builds with `choices`, runs the package once, checks its outputs. A build the compiler
    /// refuses is a candidate without a measurement.
    fn measure(&self, choices: Choices) -> anyhow::Result<Tried> {
        let search = Search {
            choices: choices.clone(),
            budget: self.budget,
        };
        let b = match ipu_codegen::build_searched(self.graph, self.options, &search) {
            Ok(b) => b,
            Err(r) => {
                tracing::warn!(finalists = %choices_text(&choices), reason = %r.error, "candidate refused");
                return Ok(Tried {
                    choices,
                    estimated_cycles: 0,
                    final_cycles: 0,
                    measured_cycles: None,
                    host_exchange_cycles: 0,
                    pass: false,
                });
            }
        };
        // Through the package's bytes, as `ipu run` does.
        let package = ipu_package::Package::from_bytes(&b.package.to_bytes()?)?;
        let mut lock = LockOptions::default();
        if let Some(p) = &self.lock {
            lock.path = p.clone();
        }
        lock.timeout = LOCK_TIMEOUT;
        let device = Box::new(SimulatorDevice::new(self.options.target));
        let mut s = Session::open_with(
            device,
            &package,
            SessionOptions {
                ownership: Some(DeviceLock::acquire(&lock)?),
                limits: CallLimits::default(),
            },
        )?;
        s.start_host_exchange()?;
        for ((name, _), t) in self.expected.iter().zip(self.inputs) {
            s.write_input(name, &t.to_bytes())?;
        }
        s.call("initialize")?;
        let call = s.call("run")?;
        let outputs = read_outputs(&s, &package)?;
        // A build that splits a matmul over k sums its partials in its own order.
        let split_reference;
        let reference = if b.report.k_splits.is_empty() {
            self.reference
        } else {
            split_reference = evaluate_split(
                self.graph,
                self.inputs,
                Precision::Device,
                2,
                &b.report.k_splits,
            )?;
            &split_reference
        };
        let reordered = self
            .graph
            .operations()
            .iter()
            .filter(|o| matches!(o.kind, ipu_graph::OpKind::FlashAttention { .. }))
            .count();
        let pass =
            outputs
                .iter()
                .zip(reference)
                .zip(self.graph.outputs())
                .all(|((o, exp), &id)| {
                    let tol = output_tolerance(self.graph, id, exp, Precision::Device, reordered);
                    compare(&o.tensor, exp, &tol).pass()
                });
        Ok(Tried {
            choices,
            estimated_cycles: b.report.estimated_cycles,
            final_cycles: b.report.final_cycles,
            measured_cycles: Some(call.counters.cycles),
            host_exchange_cycles: call.counters.host_exchange_cycles,
            pass,
        })
    }
}
