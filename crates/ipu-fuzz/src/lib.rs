//! Fuzz targets: each takes arbitrary bytes and must return without panicking, whatever the
//! bytes are. A target returns `Err` for a finding that is not a panic (an internal compiler
//! error, a device result that disagrees with the host reference, a printed form that does not
//! read back); the drivers treat both as crashes.
//!
//! Two drivers run them: `fuzz/` (cargo-fuzz with libFuzzer, coverage guided, for long
//! campaigns: `scripts/fuzz.sh --engine libfuzzer`) and the `ipu-fuzz` binary (a stable
//! mutation loop over the committed corpora, no instrumentation, for CI). See
//! `docs/robustness.md`.

pub mod diff;
pub mod mutate;

use ipu_package::Package;
use ipu_runtime::{CallLimits, Session, SessionOptions, SimulatorDevice};
use ipu_sim::{Device, RunLimits};
use ipu_target::Target;

/// A finding that is not a panic.
pub type Finding = String;

/// A fuzz target.
pub type FuzzTarget = fn(&[u8]) -> Result<(), Finding>;

/// Every target by name, in the order the drivers run them.
pub const TARGETS: &[(&str, FuzzTarget)] = &[
    ("graph_text", graph_text),
    ("graph_diff", diff::graph_diff),
    ("package", package),
    ("manifest", manifest),
    ("asm", asm),
    ("disasm", disasm),
    ("sim", sim),
    ("onnx", onnx),
];

/// The target named `name`.
pub fn target(name: &str) -> Option<FuzzTarget> {
    TARGETS.iter().find(|(n, _)| *n == name).map(|(_, t)| *t)
}

/// Largest graph the text target compiles (elements over all values): a bound on the time an
/// input may take, not a limit of the compiler.
const GRAPH_ELEMENTS_MAX: usize = 1 << 14;

/// The graph text form: parse (with the verifier); what parses prints and reads back to the
/// same graph; a small one is planned and built, and the build either succeeds or refuses
/// with a typed error that is not an internal compiler error.
pub fn graph_text(data: &[u8]) -> Result<(), Finding> {
    let Ok(text) = std::str::from_utf8(data) else {
        return Ok(());
    };
    let Ok(graph) = ipu_graph::parse(text, "fuzz.ipug") else {
        return Ok(());
    };
    let printed = ipu_graph::print(&graph);
    let again = ipu_graph::parse(&printed, "printed.ipug")
        .map_err(|e| format!("the printed graph does not read back: {e}\n{printed}"))?;
    if again != graph {
        return Err(format!("print and parse changed the graph:\n{printed}"));
    }
    let elements: usize = graph
        .values()
        .iter()
        .map(|v| v.ty.elements())
        .fold(0usize, usize::saturating_add);
    if elements > GRAPH_ELEMENTS_MAX {
        return Ok(());
    }
    diff::build_checked(&graph, 4).map(|_| ())
}

/// The package reader; a package it accepts is executed (with a small cycle budget) and must
/// run or fail with a device error, never panic.
pub fn package(data: &[u8]) -> Result<(), Finding> {
    let Ok(p) = Package::from_bytes(data) else {
        return Ok(());
    };
    let Ok(target) = p.validate() else {
        return Err("from_bytes accepted a package that validate refuses".into());
    };
    let options = SessionOptions {
        limits: CallLimits {
            cycles_max: 1 << 20,
            global_steps_max: 1 << 10,
        },
        ..Default::default()
    };
    let Ok(mut s) = Session::open_with(Box::new(SimulatorDevice::new(target)), &p, options) else {
        return Ok(());
    };
    if s.start_host_exchange().is_err() {
        return Ok(());
    }
    for name in ["initialize", "run"] {
        if s.call(name).is_err() {
            return Ok(());
        }
    }
    Ok(())
}

/// The tile images and table of a small package (a two-input graph on 2 tiles), built once.
fn base_package() -> &'static [(u32, Vec<u8>)] {
    static BASE: std::sync::OnceLock<Vec<(u32, Vec<u8>)>> = std::sync::OnceLock::new();
    BASE.get_or_init(|| {
        let g = ipu_graph::parse(
            "graph m {\n  input %a: f32[4, 8]\n  input %b: f32[4, 8]\n  %c = add(%a, %b): f32[4, 8]\n  %d = exp(%c): f32[4, 8]\n  output %d\n}\n",
            "m.ipug",
        )
        .expect("the base graph parses");
        let b = ipu_codegen::build(
            &g,
            &ipu_codegen::BuildOptions {
                target: Target::gc200(),
                tiles: 2,
            },
        )
        .expect("the base graph builds");
        let bytes = b.package.to_bytes().expect("the base package serialises");
        ipu_package::sections(&bytes).expect("the base package reads back")
    })
}

/// Structure-aware package input: the bytes are a manifest (JSON) put into a small valid
/// package with every checksum recomputed, so that mutations reach the manifest's checks
/// instead of stopping at a checksum; what the reader accepts is executed as in [`package`].
pub fn manifest(data: &[u8]) -> Result<(), Finding> {
    let base = base_package();
    let sections: Vec<(u32, &[u8])> = base
        .iter()
        .map(|(kind, payload)| {
            if *kind == 1 {
                (1, data)
            } else {
                (*kind, payload.as_slice())
            }
        })
        .collect();
    // Stored as format 2 writes sections: the manifest's checks are the same in every format,
    // and deflating each input would cost most of the target's time.
    package(&ipu_package::pack_version(2, 0, &sections))
}

/// The assembler, with the default options.
pub fn asm(data: &[u8]) -> Result<(), Finding> {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = ipu_isa::assemble(text, "fuzz.s", &ipu_isa::AsmOptions::default());
    }
    Ok(())
}

/// The disassembler, on raw words and on object containers: what it prints reassembles to the
/// same bytes.
pub fn disasm(data: &[u8]) -> Result<(), Finding> {
    let base = ipu_isa::asm::DEFAULT_BASE;
    if let Ok(text) = ipu_isa::disassemble(data, base) {
        let words = &data[..data.len() / 4 * 4];
        let object = ipu_isa::assemble(&text, "disasm.s", &ipu_isa::AsmOptions::default())
            .map_err(|e| format!("the disassembly does not assemble: {e}\n{text}"))?;
        let bytes: Vec<u8> = object.sections.into_iter().flat_map(|s| s.bytes).collect();
        if bytes != words {
            return Err(format!(
                "the disassembly reassembles to other bytes:\n{text}"
            ));
        }
    }
    if let Ok(object) = ipu_isa::Object::from_bytes(data) {
        let _ = ipu_isa::disassemble_object(&object);
    }
    Ok(())
}

/// Cycles and global steps a random program may take.
const SIM_FUEL: RunLimits = RunLimits {
    max_cycles: 200_000,
    max_global_steps: 64,
};

/// The simulator on a random program: an object container's sections at their addresses
/// (entry `main` or the first section), or else the bytes (up to 4 KiB) as raw code at the
/// start of memory; two tiles, run with fuel. Any fault is fine, a panic is not.
pub fn sim(data: &[u8]) -> Result<(), Finding> {
    let target = Target::gc200();
    let (pieces, entry) = match ipu_isa::Object::from_bytes(data) {
        Ok(o) if !o.sections.is_empty() => {
            let entry = o
                .symbols
                .get("main")
                .copied()
                .unwrap_or(o.sections[0].address);
            let pieces: Vec<(u32, Vec<u8>)> = o
                .sections
                .into_iter()
                .map(|s| (s.address, s.bytes))
                .collect();
            (pieces, entry)
        }
        _ => {
            let code = &data[..data.len().min(4096) / 4 * 4];
            if code.is_empty() {
                return Ok(());
            }
            (
                vec![(target.memory_base, code.to_vec())],
                target.memory_base,
            )
        }
    };
    let mut device = Device::new(target, 2);
    for tile in 0..2 {
        for (address, bytes) in &pieces {
            if device.write(tile, *address, bytes).is_err() {
                return Ok(());
            }
        }
    }
    let _ = device.run(entry, &SIM_FUEL);
    Ok(())
}

/// The ONNX reader: a model it imports is a verified graph.
pub fn onnx(data: &[u8]) -> Result<(), Finding> {
    if let Ok(imported) = ipu_onnx::import(data, &ipu_onnx::ImportOptions::default()) {
        imported
            .graph
            .verify()
            .map_err(|e| format!("an imported graph does not verify: {e}"))?;
    }
    Ok(())
}

/// Runs `target` on `data` and panics with the finding if there is one: how the libFuzzer
/// driver reports findings that are not panics.
pub fn expect_clean(target: FuzzTarget, data: &[u8]) {
    if let Err(finding) = target(data) {
        panic!("{finding}");
    }
}
