//! The compiler: from a tensor graph to an `.ipuexe` package.
//!
//! [`build`] is the list of phases, each a function of the previous phases' results (several
//! followed by a checker of their output), each in a `tracing` span that ends with `package
//! build phase finished phase=NAME elapsed_ms=N success=true`:
//!
//! 0. `find_repeats` — [`ipu_graph::repeat::find`]: a run of identical layers, planned and
//!    lowered once and run once per layer ([`repeat`]).
//! 1. `lower_mid` — [`plan::plan`]: expand the graph into device operations, enumerate and cost
//!    candidate tile mappings per operator family ([`ops`]); `select_finalist` —
//!    [`plan::log_finalists`].
//! 2. `lower_program` — [`lower::lower`]: the bulk-synchronous [`program::TileProgram`].
//! 3. `plan_kernels` — [`emit::plan_kernels`], the kernels launched; `compile_kernels` —
//!    [`emit::compile_kernels`]; `link_runtime` — [`emit::check_kernels_fit`].
//! 4. `size_tile_code` — [`emit::size_tile_code`]: supervisor programs and support data sized
//!    per tile.
//! 5. `place_storage` — [`place::place`] with its checker.
//! 6. `lower_exchanges` — [`exchange::schedule_program`], with its checker; then the placed
//!    program's cost, [`cost::final_cycles`].
//! 7. `emit_tile_code` — [`emit::emit_tile_code`]; `build_tile_images` —
//!    [`emit::build_tile_images`]; the [`manifest::manifest`] and the package.
//!
//! The crate is sans-IO: it takes values and returns values.

pub mod attention_form;
pub mod cost;
pub mod emit;
pub mod error;
pub mod exchange;
pub mod layout;
pub mod lower;
pub mod manifest;
pub mod operator_plan;
pub mod ops;
pub mod place;
pub mod plan;
pub mod program;
pub mod repeat;
pub mod view;

use std::collections::BTreeMap;
use std::time::Instant;

pub use attention_form::choose_attention;
use ipu_graph::Graph;
use ipu_package::Package;
use ipu_target::Target;
use tracing::{info, info_span};

pub use error::{CodegenError, MemoryRegion};
pub use view::Refusal;

// A graph tensor of any rank the verifier accepts is a host tensor the package reader accepts.
const _: () = assert!(ipu_graph::RANK_MAX == ipu_package::RANK_MAX);

/// What to build for.
#[derive(Debug, Clone)]
pub struct BuildOptions {
    /// The target.
    pub target: Target,
    /// Use tiles `0..tiles`.
    pub tiles: u32,
}

/// Figures of a build, for logs and reports.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct BuildReport {
    /// Phase names and their wall-clock milliseconds.
    pub phases: Vec<(String, u64)>,
    /// The planner's estimate of the `run` program's cycles.
    pub estimated_cycles: u64,
    /// The planner's estimate of the exchange cycles.
    pub estimated_exchange_cycles: u64,
    /// The cost of the placed program (compute estimates, scheduled exchange horizons, syncs).
    pub final_cycles: u64,
    /// Its exchange part.
    pub final_exchange_cycles: u64,
    /// Tiles used.
    pub tiles_used: u32,
    /// Peak bytes of standard memory on the busiest tile.
    pub peak_standard_bytes: u32,
    /// Peak bytes of interleaved memory on the busiest tile.
    pub peak_interleaved_bytes: u32,
    /// Multiply-accumulates of the matmuls (for efficiency figures).
    pub macs: u64,
    /// The AMP mode of the matmuls, if any (the peak rate for efficiency).
    pub amp_mode: Option<ipu_target::AmpMode>,
    /// The graph matmuls split over k on separate tiles (3-D splits), by operation name, with
    /// their number of k chunks: the device precision of such a product sums the chunks'
    /// partials (`ipu_reference::DeviceSplits` takes this map).
    pub k_splits: std::collections::BTreeMap<String, usize>,
    /// Device operations.
    pub device_operations: usize,
    /// Layers of the run of identical blocks the build compiled once and runs once per layer
    /// (`repeat`), or 0.
    pub repeated_layers: usize,
    /// Operations re-planned after placement found their memory short, with the per-tile
    /// budget they were given, in order.
    pub replans: Vec<(String, u64)>,
    /// The tile program's summary (one line per step; `TileProgram`'s `Display` is the whole
    /// text form).
    pub program_text: String,
    /// The build's steps, memory per tile and finalists, for reports and traces.
    pub view: Option<Box<view::BuildView>>,
}

/// A package and its build figures.
#[derive(Debug, Clone)]
pub struct Build {
    /// The package.
    pub package: Package,
    /// The figures.
    pub report: BuildReport,
}

/// The compiler's version, recorded in packages.
pub const COMPILER_VERSION: &str = env!("CARGO_PKG_VERSION");

fn phase<T>(
    report: &mut BuildReport,
    name: &str,
    f: impl FnOnce() -> Result<T, CodegenError>,
) -> Result<T, CodegenError> {
    let span = info_span!("ipu_codegen.package.phase", phase = name);
    let _g = span.enter();
    let start = Instant::now();
    let r = f();
    let ms = start.elapsed().as_millis() as u64;
    info!(
        phase = name,
        elapsed_ms = ms,
        success = r.is_ok(),
        "package build phase finished"
    );
    report.phases.push((name.to_string(), ms));
    r
}

/// Placement failures after which the build re-plans the operation at fault with a tighter
/// memory budget, at most: each costs a planning and lowering of the whole graph.
pub const PLACEMENT_REPLANS_MAX: usize = 4;

/// The budget to re-plan with after placement refused `e`: the user operation at fault and
/// its planned peak per tile less the bytes that did not fit and an eighth for the
/// fragmentation of what else is live. None when the error is not an operation's buffer.
fn replan_budget(plan: &operator_plan::OperatorPlan, e: &CodegenError) -> Option<(String, u64)> {
    let CodegenError::DoesNotFit {
        op: Some(op),
        need_bytes,
        available_bytes,
        ..
    } = e
    else {
        return None;
    };
    let names: Vec<&str> = plan
        .ops
        .iter()
        .filter(|d| &d.origin == op)
        .map(|d| d.name.as_str())
        .collect();
    let peak = plan
        .finalists
        .iter()
        .filter(|f| names.contains(&f.op.as_str()))
        .map(|f| f.peak_tile_bytes)
        .max()?;
    let short = need_bytes.saturating_sub(*available_bytes);
    let budget = peak.saturating_sub(short + peak / 8);
    (budget > 0).then(|| (op.clone(), budget))
}

/// Compiles `graph` into a package: the phases in order, each a function of the previous
/// phases' results, timed and logged by [`phase`].
pub fn build(graph: &Graph, options: &BuildOptions) -> Result<Build, CodegenError> {
    build_explained(graph, options).map_err(|r| r.error)
}

/// [`build`], with the view of the closest candidate when placement refuses the program or
/// planning refuses an operation for memory.
pub fn build_explained(graph: &Graph, options: &BuildOptions) -> Result<Build, Refusal> {
    build_searched(graph, options, &Search::default())
}

/// How the planner searches: the finalist each operation selects (none: the planner's picks)
/// and the bound of the search.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Search {
    /// The finalists to select.
    pub choices: plan::Choices,
    /// The bound of the search.
    pub budget: plan::SearchBudget,
}

/// Whether a build resumed from a stored search incumbent.
#[derive(Debug, Clone, PartialEq)]
pub struct Resumption {
    /// The incumbent was validated and used.
    pub resuming: bool,
    /// Why not, when it was not.
    pub reason: Option<String>,
}

/// [`build_searched`] from a stored search incumbent: `incumbent` is its choices, or why
/// there is none (no record, a record for another compiler or graph). The incumbent is
/// validated by building with it (the plan re-made under the same constraints must have the
/// chosen mappings, and every checker must pass); a refused one is reported and the build
/// falls back to the planner's picks. Either way the build ends with
/// `validated search incumbent cycles=N resuming=true|false`, N the placed program's cost.
pub fn build_resuming(
    graph: &Graph,
    options: &BuildOptions,
    incumbent: Result<&plan::Choices, &str>,
    budget: plan::SearchBudget,
) -> Result<(Build, Resumption), Refusal> {
    let span = info_span!("ipu_codegen.package.search");
    let _g = span.enter();
    let reason = match incumbent {
        Ok(choices) => {
            let search = Search {
                choices: choices.clone(),
                budget,
            };
            match build_searched(graph, options, &search) {
                Ok(b) => {
                    info!(
                        cycles = b.report.final_cycles,
                        resuming = true,
                        "validated search incumbent"
                    );
                    let r = Resumption {
                        resuming: true,
                        reason: None,
                    };
                    return Ok((b, r));
                }
                Err(refusal) => {
                    let why = format!("the stored incumbent was refused: {}", refusal.error);
                    tracing::warn!(reason = %why, "search incumbent ignored");
                    why
                }
            }
        }
        Err(why) => why.to_string(),
    };
    let search = Search {
        choices: plan::Choices::new(),
        budget,
    };
    let b = build_searched(graph, options, &search)?;
    info!(
        cycles = b.report.final_cycles,
        resuming = false,
        reason = %reason,
        "validated search incumbent"
    );
    Ok((
        b,
        Resumption {
            resuming: false,
            reason: Some(reason),
        },
    ))
}

/// [`build_explained`] selecting the finalists of `search.choices` and bounding the planner's
/// search by `search.budget`; the log says why the search stopped.
pub fn build_searched(
    graph: &Graph,
    options: &BuildOptions,
    search: &Search,
) -> Result<Build, Refusal> {
    graph.verify().map_err(|e| CodegenError::Graph {
        message: e.to_string(),
    })?;
    let target = options.target;
    let span = info_span!(
        "ipu_codegen.package.build",
        tile_count = options.tiles,
        operations = graph.operations().len()
    );
    let _g = span.enter();
    let mut report = BuildReport {
        tiles_used: options.tiles,
        ..Default::default()
    };
    // Planning to placement, again with a tighter budget for an operation whose planned
    // memory did not fit beside what else is live (a bounded, logged fallback).
    let mut budgets: BTreeMap<String, u64> = BTreeMap::new();
    // What matmuls keep free for code and support data: the planner's reserve at first, then
    // the largest that a failed placement measured (vertex states and exchange tables grow
    // with the program, past any fixed reserve).
    let mut support_bytes = plan::SUPPORT_RESERVE_BYTES;
    let mut attempt = 0;
    // A run of identical layers is planned and lowered as one block (`repeat`), unless the
    // plan does not keep it as one; then every layer is compiled.
    let mut repeated = phase(&mut report, "find_repeats", || {
        ipu_graph::repeat::find(graph).map_err(|e| CodegenError::Graph {
            message: e.to_string(),
        })
    })?;
    if let Some((one, r)) = &repeated {
        info!(
            layers = r.count,
            block_operations = r.block.len(),
            frames = r.frames.len(),
            operations = one.operations().len(),
            "planning a run of identical layers once"
        );
    }
    let (plan, dev_repeat, mut lowered, kernels, step_index, sized, placement, support) = loop {
        let planned_graph = repeated.as_ref().map_or(graph, |(g, _)| g);
        // Every layer's weights stay on the tiles besides what the planner sees of the block.
        let layer_bytes = repeated.as_ref().map_or(0, |(_, r)| {
            r.frame_bytes().div_ceil(options.tiles.max(1) as u64)
        });
        // The view of every tile at the operation planning refused for memory, if it did.
        let mut planning_view = None;
        let planned = phase(&mut report, "lower_mid", || {
            // Fused operations (flash attention) are planned and lowered as one operation
            // whose blocks are its sub-operations (`ops::flash`).
            let (p, outcome) = plan::plan_explained(
                planned_graph,
                &target,
                options.tiles,
                &budgets,
                support_bytes + layer_bytes,
                &search.choices,
                search.budget,
            )
            .map_err(|r| {
                planning_view = r.view;
                r.error
            })?;
            info!(
                candidates = outcome.examined,
                budget = %search.budget,
                reason = outcome.stopped.name(),
                "planner search stopped"
            );
            plan::check(&p)?;
            Ok(p)
        });
        let plan = planned.map_err(|error| Refusal {
            error,
            view: planning_view,
        })?;
        phase(&mut report, "select_finalist", || {
            plan::log_finalists(&plan);
            Ok(())
        })?;
        let mut dev_repeat = None;
        if let Some((_, r)) = &repeated {
            match repeat::dev_repeat(&plan, r) {
                Ok(d) => dev_repeat = Some(d),
                Err(why) => {
                    tracing::warn!(reason = %why, "compiling every layer");
                    repeated = None;
                    continue;
                }
            }
        }
        let lowered = phase(&mut report, "lower_program", || {
            lower::lower_repeated(&plan, dev_repeat.as_ref())
        })?;
        lower::log_lowered(&lowered);
        let program = &lowered.program;
        let used = phase(&mut report, "plan_kernels", || {
            Ok(emit::plan_kernels(program))
        })?;
        let kernels = phase(&mut report, "compile_kernels", || {
            emit::compile_kernels(&used)
        })?;
        phase(&mut report, "link_runtime", || {
            emit::check_kernels_fit(&kernels, &target)
        })?;
        let step_index = emit::index(program);
        let sized = phase(&mut report, "size_tile_code", || {
            emit::size_tile_code(program, &step_index, &kernels, &target)
        })?;
        let support = emit::support_areas(&sized);
        match phase(&mut report, "place_storage", || {
            place::place(program, &target, &support)
        }) {
            Ok(placement) => {
                break (
                    plan, dev_repeat, lowered, kernels, step_index, sized, placement, support,
                );
            }
            Err(e) => {
                let Some((op, budget)) =
                    replan_budget(&plan, &e).filter(|_| attempt < PLACEMENT_REPLANS_MAX)
                else {
                    let closest = view::refusal_view(&plan, program, &support, &target);
                    return Err(Refusal {
                        error: e,
                        view: Some(Box::new(closest)),
                    });
                };
                let measured = support
                    .values()
                    .map(|s| s.support_end.saturating_sub(target.memory_base) as u64)
                    .max()
                    .unwrap_or(0);
                support_bytes = support_bytes
                    .max(measured + measured / plan::SUPPORT_MEASURED_HEADROOM_DIVISOR);
                tracing::warn!(
                    operation = %op,
                    budget_bytes = budget,
                    support_bytes,
                    attempt,
                    reason = %e,
                    "re-planning an operation whose memory did not fit at placement"
                );
                report.replans.push((op.clone(), budget));
                budgets.insert(op, budget);
                attempt += 1;
            }
        }
    };
    report.estimated_cycles = plan.estimated_cycles;
    report.estimated_exchange_cycles = plan.estimated_exchange_cycles;
    if let Some(r) = &dev_repeat {
        report.repeated_layers = r.count;
        (report.estimated_cycles, report.estimated_exchange_cycles) = repeat::estimated(&plan, r);
    }
    report.device_operations = plan.ops.len();
    (report.macs, report.amp_mode) = plan.macs();
    report.k_splits = plan
        .ops
        .iter()
        .map(|o| (o.name.clone(), o.kind.k_splits()))
        .filter(|&(_, k_splits)| k_splits > 1)
        .collect();
    if let Some((_, r)) = &repeated {
        report.k_splits = repeat::every_layer(&report.k_splits, r);
    }
    // Placed, the addresses are known: the launches charge the bank conflicts their streams
    // meet where placement could not keep them apart.
    cost::charge_bank_conflicts(&mut lowered.program, &placement.addresses, &target);
    let program = &lowered.program;
    report.program_text = program.summary();
    report.peak_standard_bytes = placement
        .peak_standard_bytes
        .values()
        .copied()
        .max()
        .unwrap_or(0);
    report.peak_interleaved_bytes = placement
        .peak_interleaved_bytes
        .values()
        .copied()
        .max()
        .unwrap_or(0);
    let exchanges = phase(&mut report, "lower_exchanges", || {
        exchange::schedule_program(
            program,
            &step_index.transfers,
            &placement.addresses,
            &target,
        )
    })?;
    let step_cycles = cost::step_cycles(program, &exchanges, &target);
    (report.final_cycles, report.final_exchange_cycles) = cost::final_cycles(program, &step_cycles);
    let mut built = view::view(&plan, program, &support, &placement, &step_cycles, &target);
    built.kernels = kernels
        .entries
        .iter()
        .map(|(k, &entry)| view::KernelView {
            name: format!("{k:?}"),
            entry,
        })
        .collect();
    report.view = Some(Box::new(built));
    info!(
        final_cycles = report.final_cycles,
        final_exchange = report.final_exchange_cycles,
        "costed final placed program"
    );
    let addr = |b: program::BufferId| placement.addresses[b.0 as usize];
    let supervisors = phase(&mut report, "emit_tile_code", || {
        emit::emit_tile_code(program, &kernels, &sized, &addr)
    })?;
    let tiles = phase(&mut report, "build_tile_images", || {
        emit::build_tile_images(
            program,
            &step_index,
            &kernels,
            &sized,
            &supervisors,
            &exchanges,
            &addr,
            &target,
        )
    })?;
    let manifest = manifest::manifest(graph, &lowered, &report, &target);
    let package = Package {
        manifest,
        tiles,
        constants: lowered.constants_page.clone(),
    };
    package
        .validate()
        .map_err(|e| CodegenError::internal(format!("package: {e}")))?;
    Ok(Build { package, report })
}
