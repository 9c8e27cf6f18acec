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

pub mod cost;
pub mod emit;
pub mod exchange;
pub mod layout;
pub mod lower;
pub mod ops;
pub mod place;
pub mod plan;
pub mod program;

use std::collections::BTreeMap;
use std::fmt;
use std::time::Instant;

use ipu_graph::Graph;
use ipu_package::{Manifest, Package, Program, RegisterWrite, TileImage};
use ipu_target::{Target, config};
use rayon::prelude::*;
use tracing::{info, info_span};

/// Errors of the compiler. Each names the user's operation (the graph value it computes, never
/// an internal intermediate) and the figures a user needs; `kind` (via [`CodegenError::kind`]
/// and the `serde` form, `{"kind": "does_not_fit", ...}`) is what tools match on.
#[derive(Debug, Clone, PartialEq, thiserror::Error, serde::Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum CodegenError {
    /// The options are invalid.
    #[error("{message}")]
    Options {
        /// What is wrong.
        message: String,
    },
    /// The graph is not valid.
    #[error("invalid graph: {message}")]
    Graph {
        /// The verifier's message.
        message: String,
    },
    /// An operation or type the device lowering does not handle.
    #[error("{op}: unsupported: {reason}")]
    Unsupported {
        /// The user's operation (or value).
        op: String,
        /// Why.
        reason: String,
    },
    /// The graph does not fit in tile memory.
    #[error(
        "{}does not fit in tile memory: {detail} ({}{region} memory: {need_bytes} bytes needed, {available_bytes} available, {} bytes over)",
        op.as_ref().map(|o| format!("{o}: ")).unwrap_or_default(),
        tile.map(|t| format!("tile {t}, ")).unwrap_or_default(),
        need_bytes.saturating_sub(*available_bytes)
    )]
    DoesNotFit {
        /// The user's operation the memory is for (none for program-wide code).
        op: Option<String>,
        /// The tile, when one tile is at fault (planning refusals concern the busiest tile of a
        /// mapping, not a fixed one).
        tile: Option<u32>,
        /// The memory region.
        region: MemoryRegion,
        /// Bytes needed.
        need_bytes: u64,
        /// Bytes available.
        available_bytes: u64,
        /// What needs the memory, in words.
        detail: String,
    },
    /// A checker found a broken invariant: a compiler bug.
    #[error("internal compiler error: {message}")]
    Internal {
        /// The broken invariant.
        message: String,
    },
}

/// The part of tile memory a [`CodegenError::DoesNotFit`] is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum MemoryRegion {
    /// Anywhere in data memory (standard and interleaved).
    Any,
    /// Interleaved memory (AMP weights, 128-bit loads).
    Interleaved,
    /// Executable (non-interleaved) memory, for code.
    Executable,
}

impl fmt::Display for MemoryRegion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            MemoryRegion::Any => "data",
            MemoryRegion::Interleaved => "interleaved",
            MemoryRegion::Executable => "executable",
        })
    }
}

impl From<program::Region> for MemoryRegion {
    fn from(r: program::Region) -> MemoryRegion {
        match r {
            program::Region::Any => MemoryRegion::Any,
            program::Region::Interleaved => MemoryRegion::Interleaved,
        }
    }
}

impl CodegenError {
    /// The error's kind in snake case, as in the JSON form.
    pub fn kind(&self) -> &'static str {
        match self {
            CodegenError::Options { .. } => "options",
            CodegenError::Graph { .. } => "graph",
            CodegenError::Unsupported { .. } => "unsupported",
            CodegenError::DoesNotFit { .. } => "does_not_fit",
            CodegenError::Internal { .. } => "internal",
        }
    }

    /// A compiler bug.
    pub fn internal(message: impl Into<String>) -> CodegenError {
        CodegenError::Internal {
            message: message.into(),
        }
    }

    /// An unsupported operation.
    pub fn unsupported(op: impl Into<String>, reason: impl Into<String>) -> CodegenError {
        CodegenError::Unsupported {
            op: op.into(),
            reason: reason.into(),
        }
    }
}

impl From<ipu_kernels::code::CodeError> for CodegenError {
    fn from(e: ipu_kernels::code::CodeError) -> CodegenError {
        CodegenError::internal(e.to_string())
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
    /// The tile program's summary (one line per step; `TileProgram`'s `Display` is the whole
    /// text form).
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
    report.program_text = program.summary();
    phase(&mut report, "compile_runtime", || Ok(()))?;
    phase(&mut report, "plan_kernels", || Ok(()))?;
    let kernels = phase(&mut report, "compile_kernels", || {
        emit::compile_kernels(program)
    })?;
    phase(&mut report, "link_runtime", || {
        if !target.in_executable(emit::RUNTIME_BASE, kernels.end - emit::RUNTIME_BASE) {
            return Err(CodegenError::DoesNotFit {
                op: None,
                tile: None,
                region: MemoryRegion::Executable,
                need_bytes: (kernels.end - emit::RUNTIME_BASE) as u64,
                available_bytes: (target.executable_end - emit::RUNTIME_BASE) as u64,
                detail: "the program's kernels, linked once for every tile".into(),
            });
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
                        return Err(CodegenError::DoesNotFit {
                            op: None,
                            tile: Some(t),
                            region: MemoryRegion::Executable,
                            need_bytes: (at - emit::RUNTIME_BASE) as u64,
                            available_bytes: (target.executable_end - emit::RUNTIME_BASE) as u64,
                            detail: "the kernels and the tile's supervisor programs".into(),
                        });
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
                final_cycles += tiles.values().map(|o| cost::estimate(o)).max().unwrap_or(0)
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
                        return Err(CodegenError::internal(format!(
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
        .map_err(|e| CodegenError::internal(format!("package: {e}")))?;
    Ok(Build { package, report })
}
