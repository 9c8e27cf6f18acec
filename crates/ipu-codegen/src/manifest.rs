//! The package manifest: the target, the programs with their entries and phases, the host
//! pages and tensors, the configuration register writes every tile needs, and the build's
//! figures.

use std::collections::BTreeMap;

use ipu_graph::Graph;
use ipu_package::{Manifest, Program, RegisterWrite};
use ipu_target::{Target, config};

use crate::lower::Lowered;
use crate::{BuildReport, COMPILER_VERSION, emit};

/// The configuration register writes: every tile of the target says whether it is active and
/// its exchange id; active tiles get the host window of all host pages.
pub fn register_writes(target: &Target, tiles_used: u32, host_window: u64) -> Vec<RegisterWrite> {
    let mut register_writes = Vec::new();
    for t in 0..target.tiles {
        let active = t < tiles_used;
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
    register_writes
}

/// The manifest of `graph`'s package.
pub fn manifest(
    graph: &Graph,
    lowered: &Lowered,
    report: &BuildReport,
    target: &Target,
) -> Manifest {
    let program = &lowered.program;
    let entries = [
        emit::RUNTIME_BASE,
        emit::RUNTIME_BASE + 4,
        emit::RUNTIME_BASE + 8,
    ];
    let register_writes = register_writes(target, program.tiles_used, program.pages.iter().sum());
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
    Manifest {
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
                phases: match *name {
                    "run" => emit::run_phases(program),
                    "initialize" => emit::initialize_phases(program),
                    _ => 1,
                },
            })
            .collect(),
        host_pages: program.pages.clone(),
        tensors: lowered.tensors.clone(),
        register_writes,
        metadata,
        index_bounds: index_bounds(graph),
    }
}

/// The bounds on `graph`'s inputs that index a table (`ipu_graph::index_bounds`), as the
/// manifest records them for the host to check.
pub fn index_bounds(graph: &Graph) -> Vec<ipu_package::IndexBound> {
    ipu_graph::index_bounds(graph)
        .into_iter()
        .map(|b| ipu_package::IndexBound {
            input: graph.value(b.input).name.clone(),
            entries: b.entries as u64,
            operation: b.op,
        })
        .collect()
}
