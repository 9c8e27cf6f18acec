//! Golden file tests: every `tests/filetests/NAME.ipug` (a graph in the text form, with the
//! tile count in a `// tiles: N` comment) is compiled, and what each phase made of it is
//! printed and compared with `NAME.expected`: the planner's finalists, the whole tile program
//! (buffers, transfers, every tile's supervisor operations with their vertex states) and the
//! disassembly of tile 0's `run` program, or, for a refused graph, the typed error.
//!
//! After a change that alters the output on purpose, `UPDATE_EXPECT=1 cargo test -p
//! ipu-codegen --test filetests` rewrites the expected files; the diff is the review.

use std::fmt::Write;
use std::path::{Path, PathBuf};

use expect_test::expect_file;
use ipu_codegen::{BuildOptions, build, lower, plan};
use ipu_target::Target;

fn filetests() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/filetests");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("tests/filetests")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "ipug"))
        .collect();
    files.sort();
    files
}

/// The tile count of a `// tiles: N` line.
fn tiles_of(text: &str) -> u32 {
    text.lines()
        .find_map(|l| l.trim().strip_prefix("// tiles:"))
        .map(|n| n.trim().parse().expect("a tile count"))
        .unwrap_or(1)
}

/// The disassembly of tile 0's `run` program (where its entry trampoline branches), up to
/// its `halt`.
fn run_program_text(b: &ipu_codegen::Build) -> String {
    let run = b.package.program("run").expect("a run program");
    let image = &b.package.tiles.image(0).expect("tile 0");
    let disassemble_from = |at: u32| {
        let seg = image
            .segments
            .iter()
            .find(|s| s.address <= at && at < s.address + s.bytes.len() as u32)
            .expect("the address is in a segment");
        let from = (at - seg.address) as usize;
        ipu_isa::disassemble(&seg.bytes[from..], at).expect("disassembles")
    };
    let trampoline = disassemble_from(run.entry);
    let target = trampoline
        .lines()
        .find_map(|l| l.trim().strip_prefix("bri 0x"))
        .and_then(|t| u32::from_str_radix(t.split_whitespace().next()?, 16).ok())
        .expect("the entry trampoline branches to the program");
    let mut out = String::new();
    for line in disassemble_from(target).lines() {
        out += line;
        out.push('\n');
        if line.split_whitespace().next() == Some("halt") {
            break;
        }
    }
    out
}

fn render(text: &str, file: &str) -> String {
    let graph = ipu_graph::parse(text, file).expect("the filetest's graph parses");
    let tiles = tiles_of(text);
    let target = Target::gc200();
    let mut out = format!("== graph (tiles: {tiles})\n{}", ipu_graph::print(&graph));
    let planned = match plan::plan(&graph, &target, tiles) {
        Ok(p) => p,
        Err(e) => {
            // The whole build refuses the same way.
            let whole = build(&graph, &BuildOptions { target, tiles }).unwrap_err();
            assert_eq!(whole, e);
            writeln!(out, "== refused: {}\n{e}\n{e:#?}", e.kind()).unwrap();
            return out;
        }
    };
    out += "== finalists\n";
    for f in &planned.finalists {
        writeln!(
            out,
            "{} {} estimated_cycles={} exchange_cycles={} peak_tile_bytes={} tiles={} candidates={}",
            f.op,
            f.mapping,
            f.estimated_cycles,
            f.estimated_exchange_cycles,
            f.peak_tile_bytes,
            f.tiles,
            f.alternatives
        )
        .unwrap();
    }
    let lowered = lower::lower(&planned).expect("lowers");
    write!(out, "== tile program\n{}", lowered.program).unwrap();
    let b = build(&graph, &BuildOptions { target, tiles }).expect("builds");
    writeln!(
        out,
        "== build: estimated_cycles={} final_cycles={} peak_standard_bytes={} peak_interleaved_bytes={}",
        b.report.estimated_cycles,
        b.report.final_cycles,
        b.report.peak_standard_bytes,
        b.report.peak_interleaved_bytes
    )
    .unwrap();
    write!(out, "== tile 0: run\n{}", run_program_text(&b)).unwrap();
    out
}

#[test]
fn every_filetest_matches_its_expected_output() {
    let files = filetests();
    assert!(files.len() >= 10, "{} filetests", files.len());
    for path in files {
        let text = std::fs::read_to_string(&path).unwrap();
        let expected = path.with_extension("expected");
        let file = path.file_name().unwrap().to_string_lossy().into_owned();
        expect_file![expected].assert_eq(&render(&text, &file));
    }
}
