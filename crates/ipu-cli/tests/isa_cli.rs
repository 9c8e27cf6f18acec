//! `ipu asm` and `ipu disasm` end to end: assemble, disassemble, reassemble; errors with
//! positions and byte offsets and exit status 2.

mod common;

use common::{assert_contains, ipu_quiet as ipu, succeeded};

use std::path::{Path, PathBuf};

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("ipu-isa-cli-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// Writes `text` to `DIR/NAME.s` and assembles it into `DIR/NAME.bin`, which must succeed;
/// the binary's path and what `ipu asm` printed.
fn assemble(dir: &Path, name: &str, text: &str) -> (PathBuf, String) {
    let (src, bin) = (
        dir.join(format!("{name}.s")),
        dir.join(format!("{name}.bin")),
    );
    std::fs::write(&src, text).unwrap();
    let (out, _) = succeeded(&ipu(&["asm", s(&src), "-o", s(&bin)]));
    (bin, out)
}

const PROGRAM: &str = r#"
        .section code, 0x4C000
main:   setzi $m1, table
        ld32 $m2, $m1, 0
        rpt $m2, 1
        { add $m3, $m3, 1 ; f32add $a0, $a0, $a1 }
loop:   brnzdec $m2, loop
        halt
        .section data, 0x80000
table:  .word 3, 0x12345678
"#;

#[test]
fn asm_then_disasm_then_asm_gives_the_same_binary() {
    let dir = scratch("roundtrip");
    let (bin, out) = assemble(&dir, "p", PROGRAM);
    assert!(out.contains("sections=2"));

    let out = ipu(&["disasm", s(&bin)]);
    succeeded(&out);
    let text = String::from_utf8(out.stdout).unwrap();
    assert_contains(
        &text,
        &[
            "main:",
            "brnzdec $m2, loop",
            "{ add $m3, $m3, 1 ; f32add $a0, $a0, $a1 }",
            "# 0004c000: 02180000",
        ],
    );

    let (bin2, _) = assemble(&dir, "p2", &text);
    assert_eq!(std::fs::read(&bin).unwrap(), std::fs::read(&bin2).unwrap());
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn asm_errors_give_file_line_column_and_exit_2() {
    let dir = scratch("asmerr");
    let src = dir.join("bad.s");
    std::fs::write(&src, "nop\n  ad $m1, $m2, $m3\n").unwrap();
    let out = ipu(&["asm", s(&src)]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!(
            "{}:2:3: unknown instruction `ad` (did you mean `add`?)",
            s(&src)
        )),
        "{err}"
    );
    std::fs::write(&src, "setzi $m1, N\n").unwrap();
    let out = ipu(&["asm", s(&src), "-D", "N=0x200000"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains(":1:12: immediate 2097152"));
    let out = ipu(&["asm", s(&src), "-D", "N=0x20", "-o", s(&dir.join("ok.bin"))]);
    succeeded(&out);
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn asm_and_sim_read_includes_relative_to_the_including_file() {
    let dir = scratch("include");
    std::fs::create_dir_all(dir.join("lib")).unwrap();
    std::fs::write(dir.join("lib/consts.s"), ".equ N, 3\n").unwrap();
    std::fs::write(
        dir.join("lib/body.s"),
        ".include \"consts.s\"\nsetzi $m1, N\n",
    )
    .unwrap();
    let src = dir.join("main.s");
    std::fs::write(&src, "main:\n.include \"lib/body.s\"\nhalt\n").unwrap();
    let bin = dir.join("main.bin");
    let (out, _) = succeeded(&ipu(&["asm", s(&src), "-o", s(&bin)]));
    assert!(out.contains("section_bytes=8"), "{out}");
    succeeded(&ipu(&["sim", s(&src)]));
    // A missing file is named at its `.include`, with the reason.
    std::fs::write(dir.join("lib/body.s"), ".include \"gone.s\"\n").unwrap();
    let out = ipu(&["asm", s(&src)]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    let body = dir.join("lib/body.s");
    let gone = dir.join("lib/gone.s");
    assert!(
        err.contains(&format!(
            "{}:1:10: cannot read `{}`: No such file or directory",
            s(&body),
            s(&gone)
        )),
        "{err}"
    );
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn disasm_reports_a_corrupt_binary_with_the_byte_offset_and_exit_2() {
    let dir = scratch("corrupt");
    let (bin, _) = assemble(&dir, "p", PROGRAM);
    let good = std::fs::read(&bin).unwrap();

    let mut bad = good.clone();
    bad[0] = b'X';
    std::fs::write(&bin, &bad).unwrap();
    let out = ipu(&["disasm", s(&bin)]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("byte offset 0: bad magic"));

    std::fs::write(&bin, &good[..good.len() - 6]).unwrap();
    let out = ipu(&["disasm", s(&bin)]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("byte offset"));

    let mut bad = good.clone();
    bad[30] ^= 1;
    std::fs::write(&bin, &bad).unwrap();
    let out = ipu(&["disasm", s(&bin)]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("corrupt binary") && err.contains("byte offset"),
        "{err}"
    );
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn disasm_raw_and_strict() {
    let dir = scratch("raw");
    let raw = dir.join("r.raw");
    // `halt` then an undefined opcode.
    let words: Vec<u8> = [0x6800_0000u32, 0x7F00_0000]
        .iter()
        .flat_map(|w| w.to_le_bytes())
        .collect();
    std::fs::write(&raw, &words).unwrap();
    let out = ipu(&["disasm", "--raw", "0x4c000", s(&raw)]);
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("halt") && text.contains(".word 0x7f000000"),
        "{text}"
    );
    let out = ipu(&["disasm", "--raw", "0x4c000", "--strict", s(&raw)]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("byte offset 4 (address 0x4c004)"));
    std::fs::remove_dir_all(&dir).ok();
}
