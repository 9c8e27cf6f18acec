//! The compiler: from a tensor graph to an `.ipuexe` package.
//!
//! Phases, each a function followed by a checker of its output, each in a `tracing` span that
//! ends with `package build phase finished phase=NAME elapsed_ms=N success=true`:
//!
//! 1. `lower_mid` — [`plan::plan`]: expand the graph into device operations, enumerate and cost
//!    candidate tile mappings; `select_finalist` — keep the finalists, select one per operation.
//! 2. `lower_program` — [`lower::lower`]: the bulk-synchronous [`program::TileProgram`].
//! 3. `plan_kernels` / `compile_kernels` / `link_runtime` — [`emit::compile_kernels`].
//! 4. `size_tile_code` — supervisor programs and support data sized per tile.
//! 5. `place_storage` — [`place::place`] with its checker.
//! 6. `lower_exchanges` — [`exchange::schedule`] per exchange phase, with its checker.
//! 7. `emit_tile_code` / `build_tile_images` — [`emit`], then the package.
//!
//! The crate is sans-IO: it takes values and returns values.

pub mod emit;
pub mod exchange;
pub mod layout;
pub mod lower;
pub mod place;
pub mod plan;
pub mod program;

use std::collections::BTreeMap;
use std::time::Instant;

use ipu_graph::Graph;
use ipu_package::{Manifest, Package, Program, RegisterWrite, TileImage};
use ipu_target::{Target, config};
use rayon::prelude::*;
use tracing::{info, info_span};

/// Errors of the compiler.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum CodegenError {
    /// The options are invalid.
    #[error("{0}")]
    Options(String),
    /// The graph is not valid.
    #[error("invalid graph: {0}")]
    Graph(String),
    /// An operation or type the device lowering does not handle.
    #[error("unsupported: {0}")]
    Unsupported(String),
    /// The graph does not fit in tile memory.
    #[error("does not fit in tile memory: {0}")]
    DoesNotFit(String),
    /// A checker found a broken invariant: a compiler bug.
    #[error("internal compiler error: {0}")]
    Internal(String),
}

impl From<ipu_kernels::code::CodeError> for CodegenError {
    fn from(e: ipu_kernels::code::CodeError) -> CodegenError {
        CodegenError::Internal(e.to_string())
    }
}

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
    /// Device operations.
    pub device_operations: usize,
    /// The tile program's text form.
    pub program_text: String,
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

fn step_name(s: &program::Step) -> &str {
    match s {
        program::Step::Host { name, .. }
        | program::Step::Exchange { name, .. }
        | program::Step::Compute { name, .. } => name,
    }
}

/// Compiles `graph` into a package.
pub fn build(graph: &Graph, options: &BuildOptions) -> Result<Build, CodegenError> {
    graph
        .verify()
        .map_err(|e| CodegenError::Graph(e.to_string()))?;
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
    let plan = phase(&mut report, "lower_mid", || {
        // Fused operations (flash attention) are planned and lowered as one operation whose
        // blocks are its sub-operations (`plan::flash`).
        let p = plan::plan(graph, &target, options.tiles)?;
        plan::check(&p)?;
        Ok(p)
    })?;
    phase(&mut report, "select_finalist", || {
        // Operations that had a choice log their finalists; those whose layout follows their
        // operands have one candidate and log it at debug level.
        for (i, f) in plan.finalists.iter().enumerate() {
            macro_rules! finalist {
                ($level:ident) => {
                    tracing::$level!(
                        finalist = i,
                        operation = %f.op,
                        mapping = %f.mapping,
                        candidates = f.alternatives,
                        estimated_cycles = f.estimated_cycles,
                        estimated_exchange_cycles = f.estimated_exchange_cycles,
                        peak_total_bytes = f.peak_tile_bytes,
                        active_tiles = f.tiles,
                        "retained operator-plan finalist"
                    )
                };
            }
            if f.alternatives > 1 {
                finalist!(info);
            } else {
                finalist!(debug);
            }
        }
        info!(
            operations = plan.ops.len(),
            values = plan.values.len(),
            estimated_cycles = plan.estimated_cycles,
            estimated_exchange_cycles = plan.estimated_exchange_cycles,
            "selected operator plan"
        );
        Ok(())
    })?;
    report.estimated_cycles = plan.estimated_cycles;
    report.estimated_exchange_cycles = plan.estimated_exchange_cycles;
    report.device_operations = plan.ops.len();
    for op in &plan.ops {
        if let plan::DevOpKind::MatMul { mode, .. } = op.kind {
            let (a, c) = (&plan.values[op.inputs[0]], &plan.values[op.output]);
            let k = *a.shape.last().unwrap_or(&1) as u64;
            report.macs += c.shape.iter().product::<usize>() as u64 * k;
            report.amp_mode = Some(mode);
        }
        if let plan::DevOpKind::Flash(fp) = &op.kind {
            let g = &fp.geo;
            // Both products over the (query, key) pairs attention needs: a causal mask hides
            // half of them, whatever the mapping computes.
            let pairs: u64 = if g.causal {
                (0..g.sq).map(|q| (q + 1).min(g.sk) as u64).sum()
            } else {
                (g.sq * g.sk) as u64
            };
            report.macs += g.batch as u64 * pairs * (g.d + g.dv) as u64;
            report.amp_mode = Some(g.mode);
        }
    }
    let lowered = phase(&mut report, "lower_program", || lower::lower(&plan))?;
    let program = &lowered.program;
    if lowered.padding_clears_removed > 0 {
        info!(
            removed = lowered.padding_clears_removed,
            "eliminated unread padding clears"
        );
    }
    let exchange_phases = program
        .steps
        .iter()
        .filter(|s| matches!(s, program::Step::Exchange { .. }))
        .count();
    info!(
        buffers = program.buffers.len(),
        steps = program.steps.len(),
        exchange_phases,
        padding_clears = lowered.padding_clears,
        "lowered graph for package construction"
    );
    report.program_text = program.to_string();
    phase(&mut report, "compile_runtime", || Ok(()))?;
    phase(&mut report, "plan_kernels", || Ok(()))?;
    let kernels = phase(&mut report, "compile_kernels", || {
        emit::compile_kernels(program)
    })?;
    phase(&mut report, "link_runtime", || {
        if !target.in_executable(emit::RUNTIME_BASE, kernels.end - emit::RUNTIME_BASE) {
            return Err(CodegenError::DoesNotFit(format!(
                "kernels end at {:#x}, past executable memory",
                kernels.end
            )));
        }
        Ok(())
    })?;
    let active: Vec<u32> = (0..program.tiles_used).collect();
    let step_index = emit::index(program);
    // Size each tile's code and support data (addresses do not change sizes).
    let sized: BTreeMap<u32, (emit::SupportLayout, [u32; 3])> =
        phase(&mut report, "size_tile_code", || {
            let zero = |_: program::BufferId| 0u32;
            // Tiles are independent: sized in parallel, collected in tile order.
            let sized: Result<Vec<_>, CodegenError> = active
                .par_iter()
                .map(|&t| {
                    // Addresses do not change code sizes: size with a provisional layout.
                    let sizing = emit::support_layout(program, &step_index, t, 0);
                    let (s, i, r) = emit::supervisor_code(program, t, &kernels, &sizing, &zero);
                    let mut at = kernels.end;
                    let mut addrs = [0u32; 3];
                    for (k, c) in [s, i, r].iter().enumerate() {
                        addrs[k] = at;
                        at += c.size_at(at);
                    }
                    if !target.in_executable(emit::RUNTIME_BASE, at - emit::RUNTIME_BASE) {
                        return Err(CodegenError::DoesNotFit(format!(
                            "tile {t}: code ends at {at:#x}, {} bytes past executable memory",
                            at - target.executable_end
                        )));
                    }
                    let support = emit::support_layout(program, &step_index, t, at);
                    Ok((t, (support, addrs)))
                })
                .collect();
            Ok(sized?.into_iter().collect())
        })?;
    if let Some((t, (s, _))) = sized.iter().max_by_key(|(_, (s, _))| s.end) {
        info!(
            tile = t,
            kernel_bytes = kernels.end - emit::RUNTIME_BASE,
            support_bytes = s.end - s.base,
            state_bytes = s.tables.values().next().map_or(s.end, |&t| t) - s.base,
            tables = s.tables.len(),
            support_end = s.end,
            "allocated package support memory"
        );
    }
    let support_area: BTreeMap<u32, place::TileSupport> = sized
        .iter()
        .map(|(t, (s, addrs))| {
            (
                *t,
                place::TileSupport {
                    code_end: addrs[2],
                    support_end: s.end,
                },
            )
        })
        .collect();
    let placement = phase(&mut report, "place_storage", || {
        place::place(program, &target, &support_area)
    })?;
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
    let addr = |b: program::BufferId| placement.addresses[b.0 as usize];
    let exchanges: BTreeMap<usize, exchange::Scheduled> =
        phase(&mut report, "lower_exchanges", || {
            let mut out = BTreeMap::new();
            for (i, s) in program.steps.iter().enumerate() {
                if let program::Step::Exchange { copies, .. } = s {
                    let transfers = &step_index.transfers[i];
                    let sch =
                        exchange::schedule(program, transfers, &placement.addresses, &target)?;
                    let most_rows = sch.tables.values().map(|t| t.rows.len()).max().unwrap_or(0);
                    tracing::debug!(
                        phase = i,
                        name = %step_name(&program.steps[i]),
                        copies = copies.len(),
                        rows = transfers.len(),
                        most_rows,
                        "exchange rows"
                    );
                    info!(
                        phase = i,
                        candidates = copies.len(),
                        sender_horizon = sch.sender_horizon,
                        destination_horizon = sch.destination_horizon,
                        use_destination_order = sch.use_destination_order,
                        "compared sender-driven and destination-ordered exchange schedules"
                    );
                    out.insert(i, sch);
                }
            }
            Ok(out)
        })?;
    // Cost the placed program.
    let mut final_cycles = 0u64;
    let mut final_exchange = 0u64;
    for (i, s) in program.steps.iter().enumerate() {
        match s {
            program::Step::Compute { tiles, .. } => {
                final_cycles += tiles
                    .values()
                    .map(|o| lower::estimate(o))
                    .max()
                    .unwrap_or(0)
                    + target.sync_cycles as u64;
            }
            program::Step::Exchange { .. } => {
                let c = exchanges[&i].horizon as u64
                    + ipu_target::EXCHANGE_PHASE_OVERHEAD_CYCLES as u64;
                final_exchange += c;
                final_cycles += c;
            }
            program::Step::Host { .. } => {}
        }
    }
    report.final_cycles = final_cycles;
    report.final_exchange_cycles = final_exchange;
    info!(final_cycles, final_exchange, "costed final placed program");
    let supervisors: BTreeMap<u32, [ipu_kernels::code::Laid; 3]> =
        phase(&mut report, "emit_tile_code", || {
            let laid: Result<Vec<_>, CodegenError> = active
                .par_iter()
                .map(|&t| {
                    let (support, addrs) = &sized[&t];
                    let (s, i, r) = emit::supervisor_code(program, t, &kernels, support, &addr);
                    let laid = [
                        s.lay_out(addrs[0])?,
                        i.lay_out(addrs[1])?,
                        r.lay_out(addrs[2])?,
                    ];
                    let end = laid[2].address + laid[2].bytes.len() as u32;
                    if end > support.base {
                        return Err(CodegenError::Internal(format!(
                            "tile {t}: code grew past its sizing"
                        )));
                    }
                    Ok((t, laid))
                })
                .collect();
            Ok(laid?.into_iter().collect())
        })?;
    let tiles = phase(&mut report, "build_tile_images", || {
        let built: Result<Vec<TileImage>, CodegenError> = active
            .par_iter()
            .map(|&t| {
                emit::tile_image(
                    program,
                    &step_index,
                    t,
                    &kernels,
                    &sized[&t].0,
                    &supervisors[&t],
                    &exchanges,
                    &addr,
                    &target,
                )
            })
            .collect();
        let mut images = vec![TileImage::default(); target.tiles as usize];
        for (&t, image) in active.iter().zip(built?) {
            images[t as usize] = image;
        }
        Ok(images)
    })?;
    let entries = sized.values().next().map(|_| ()).map_or([0; 3], |_| {
        [
            emit::RUNTIME_BASE,
            emit::RUNTIME_BASE + 4,
            emit::RUNTIME_BASE + 8,
        ]
    });
    let mut register_writes = Vec::new();
    let host_window: u64 = program.pages.iter().sum();
    for t in 0..target.tiles {
        let active = t < program.tiles_used;
        register_writes.push(RegisterWrite {
            tile: t,
            register: config::TILE_ACTIVE,
            value: active as u32,
        });
        register_writes.push(RegisterWrite {
            tile: t,
            register: config::EXCHANGE_ID,
            value: t,
        });
        if active {
            register_writes.push(RegisterWrite {
                tile: t,
                register: config::HOST_WINDOW_BYTES,
                value: host_window as u32,
            });
        }
    }
    let mut metadata = BTreeMap::new();
    metadata.insert(
        "estimated_cycles".into(),
        report.estimated_cycles.to_string(),
    );
    metadata.insert("final_cycles".into(), report.final_cycles.to_string());
    metadata.insert(
        "final_exchange_cycles".into(),
        report.final_exchange_cycles.to_string(),
    );
    let manifest = Manifest {
        compiler_version: COMPILER_VERSION.to_string(),
        target: target.kind.name().to_string(),
        tile_count: target.tiles,
        tiles_used: program.tiles_used,
        model: graph.name.clone(),
        programs: emit::PROGRAMS
            .iter()
            .zip(entries)
            .map(|(name, entry)| Program {
                name: name.to_string(),
                entry,
                phases: if *name == "run" {
                    emit::run_phases(program)
                } else {
                    1
                },
            })
            .collect(),
        host_pages: program.pages.clone(),
        tensors: lowered.tensors.clone(),
        register_writes,
        metadata,
    };
    let package = Package { manifest, tiles };
    package
        .validate()
        .map_err(|e| CodegenError::Internal(format!("package: {e}")))?;
    Ok(Build { package, report })
}
