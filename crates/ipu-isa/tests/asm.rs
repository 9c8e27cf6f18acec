//! The assembler and the disassembler: round trips on generated programs, golden error
//! messages and a golden disassembly.

mod common;

use expect_test::{Expect, expect};
use ipu_isa::*;
use proptest::prelude::*;

const BASE: u32 = 0x4C000;

/// The bytes a slot sequence must assemble to: each slot's words, with a `nop` before any
/// bundle that would start at an address that is not 8-byte aligned.
fn expected_bytes(slots: &[Slot]) -> Vec<u8> {
    let mut out = Vec::new();
    for s in slots {
        let words = encode_slot(s).unwrap();
        if words.len() == 2 && !(BASE as usize + out.len()).is_multiple_of(8) {
            out.extend_from_slice(&0u32.to_le_bytes());
        }
        for w in words {
            out.extend_from_slice(&w.to_le_bytes());
        }
    }
    out
}

fn assemble_text(text: &str) -> Object {
    assemble(text, "gen.s", &AsmOptions::default()).unwrap_or_else(|e| panic!("{e}\n{text}"))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn formatted_slots_assemble_to_their_encoding(slots in prop::collection::vec(common::slot(), 1..40)) {
        let text: String = slots.iter().map(|s| format!("    {}\n", format_slot(s))).collect();
        let obj = assemble_text(&text);
        prop_assert_eq!(obj.sections.len(), 1);
        prop_assert_eq!(obj.sections[0].address, BASE);
        prop_assert_eq!(&obj.sections[0].bytes, &expected_bytes(&slots));
    }

    #[test]
    fn assembling_a_disassembly_gives_back_the_bytes(slots in prop::collection::vec(common::slot(), 1..40)) {
        let bytes = expected_bytes(&slots);
        let text = disassemble(&bytes, BASE).unwrap();
        let obj = assemble_text(&text);
        prop_assert_eq!(&obj.sections[0].bytes, &bytes);
        prop_assert_eq!(obj.sections[0].address, BASE);
    }

    #[test]
    fn arbitrary_bytes_disassemble_as_data_and_reassemble(
        bytes in prop::collection::vec(any::<u8>(), 0..200),
        misalign in 0u32..4,
    ) {
        let obj = Object {
            sections: vec![Section { name: "blob".into(), address: BASE + misalign, bytes: bytes.clone() }],
            symbols: Default::default(),
        };
        let text = disassemble_object(&obj).unwrap();
        let back = assemble_text(&text);
        prop_assert_eq!(&back.sections, &obj.sections);
    }

    #[test]
    fn display_parses_back_to_the_same_instruction(i in common::instr()) {
        let obj = assemble_text(&format!("{i}\n"));
        let w = u32::from_le_bytes(obj.sections[0].bytes[..4].try_into().unwrap());
        prop_assert_eq!(decode(w), Ok(i));
    }

    #[test]
    fn the_assembler_never_panics(lines in prop::collection::vec(
        prop::collection::vec(prop::sample::select(vec![
            "add", "ld32step", "{", "}", ";", ",", "$m1", "$a2:3", "$a0:3", "$m", "$a17", "+=", "+", "-",
            "(", ")", "<<", "0x", "99999999999999999999", "-1", "7", "lbl", "lbl:", ".section", ".org",
            ".align", ".word", ".equ", ".float", "1.5", ".zero", "\"", "#", "f16v4mac", "rpt", "bri",
            "amp", ".", "/", "0", "%", "mov", "li", "ld128", "st128", ".byte", "~", "*", "\u{e9}",
        ]), 0..8).prop_map(|w| w.join(" ")),
        0..6,
    )) {
        let _ = assemble(&lines.join("\n"), "fuzz.s", &AsmOptions::default());
    }

    #[test]
    fn corrupt_objects_are_rejected_with_an_offset(
        slots in prop::collection::vec(common::slot(), 1..10),
        at in any::<prop::sample::Index>(),
        flip in 1u8..=255,
    ) {
        let text: String = slots.iter().map(|s| format!("{}\n", format_slot(s))).collect();
        let bytes = assemble_text(&format!("start:\n{text}end:\n")).to_bytes();
        let i = at.index(bytes.len());
        let mut bad = bytes.clone();
        bad[i] ^= flip;
        let e = Object::from_bytes(&bad).unwrap_err();
        prop_assert!(e.offset <= bytes.len());
    }
}

/// Assembles each source on its own; the snapshot shows each source (quoted) with its error
/// under it.
fn check_errors(sources: &[&str], expect: Expect) {
    let mut out = String::new();
    for src in sources {
        let err = assemble(src, "t.s", &AsmOptions::default()).expect_err(src);
        out += &format!("{src:?}\n    {err}\n");
    }
    expect.assert_eq(&out);
}

#[test]
fn error_unknown_mnemonic_suggests_the_nearest() {
    check_errors(
        &[
            "  ad $m1, $m2, $m3",
            "f32v2ad $a0:1, $a0:1, $a0:1",
            "frobnicate",
        ],
        expect![[r#"
        "  ad $m1, $m2, $m3"
            t.s:1:3: unknown instruction `ad` (did you mean `add`?)
        "f32v2ad $a0:1, $a0:1, $a0:1"
            t.s:1:1: unknown instruction `f32v2ad` (did you mean `f32v2add`?)
        "frobnicate"
            t.s:1:1: unknown instruction `frobnicate`
    "#]],
    );
}

#[test]
fn error_operand_kinds_and_counts() {
    check_errors(
        &[
            "add $m1, $a2, $m3",
            "add $m1, $m2",
            "ld64 $a1, $m2, 0",
            "ld32step $m1, $m2, 4",
            "get $m1, tile",
            "ld2x64pace $a0:1, $a2:3, $m1+=4, $m2+=8",
            "st128 $a0:3, $m1, 0",
            "mov $m1, 5",
        ],
        expect![[r#"
        "add $m1, $a2, $m3"
            t.s:1:10: operand 2 of `add`: expected an integer register `$mN`, found `$a2`
        "add $m1, $m2"
            t.s:1:1: `add` takes 3 operand(s), got 2: `add $mD, $mA, $mB|imm`
        "ld64 $a1, $m2, 0"
            t.s:1:6: operand 1 of `ld64`: expected a float register pair `$aN:N+1` (N even), found `$a1`
        "ld32step $m1, $m2, 4"
            t.s:1:15: operand 2 of `ld32step`: expected a post-increment address `$mB+=imm`, found `$m2`
        "get $m1, tile"
            t.s:1:10: unknown system register `tile` (expected one of: tileid, contextid, cycles)
        "ld2x64pace $a0:1, $a2:3, $m1+=4, $m2+=8"
            t.s:1:26: paced accesses advance by 8, not 4: write `$m1+=8`
        "st128 $a0:3, $m1, 0"
            t.s:1:1: there is no 128-bit store (`st128`); use two `st64`
        "mov $m1, 5"
            t.s:1:10: `mov` copies a register; use `setzi` or `li` to load a value
    "#]],
    );
}

#[test]
fn error_immediates_out_of_range() {
    check_errors(
        &[
            "add $m1, $m2, 40000",
            "setzi $m1, 0x100000",
            "rpt $m1, 0",
            "rpt 70000, 2",
            "setfp8 f143, -33",
            "amp $a0:1, $a2:3, $a4:5, 4",
            "bri 0x4c002",
            "bri 0x100000",
            ".byte 256",
        ],
        expect![[r#"
        "add $m1, $m2, 40000"
            t.s:1:15: immediate 40000 (0x9c40) is out of range -32768..=32767 for `add`
        "setzi $m1, 0x100000"
            t.s:1:12: immediate 1048576 (0x100000) is out of range 0..=1048575 for `setzi`
        "rpt $m1, 0"
            t.s:1:10: body length 0 (0x0) is out of range 1..=255 for `rpt`
        "rpt 70000, 2"
            t.s:1:5: count 70000 (0x11170) is out of range 0..=65535 for `rpt`
        "setfp8 f143, -33"
            t.s:1:14: scale -33 (0xffffffffffffffdf) is out of range -32..=31 for `setfp8`
        "amp $a0:1, $a2:3, $a4:5, 4"
            t.s:1:26: phase 4 (0x4) is out of range 0..=3 for `amp`
        "bri 0x4c002"
            t.s:1:5: branch target 0x4c002 is not 4-byte aligned
        "bri 0x100000"
            t.s:1:5: branch target 0x100000 is out of range 0..=0xffffc
        ".byte 256"
            t.s:1:7: value 256 does not fit in 1 bytes (-128..=255)
    "#]],
    );
}

#[test]
fn error_symbols() {
    check_errors(
        &[
            "bri nowhere",
            "a: nop\n  a: nop",
            ".equ X, Y\nY: nop",
            "setzi $m1, 1/0",
        ],
        expect![[r#"
        "bri nowhere"
            t.s:1:5: undefined symbol `nowhere`
        "a: nop\n  a: nop"
            t.s:2:3: duplicate symbol `a` (first defined at t.s:1)
        ".equ X, Y\nY: nop"
            t.s:1:9: undefined symbol `Y` (`.equ`, `.section`, `.org`, `.align` and `.zero` may use only symbols defined above them)
        "setzi $m1, 1/0"
            t.s:1:13: division by zero
    "#]],
    );
}

#[test]
fn error_registers() {
    check_errors(
        &[
            "f32v2add $a1:2, $a2:3, $a4:5",
            "ld128 $a2:5, $m1, 0",
            "add $m16, $m1, $m2",
            "add $m1x, $m1, $m2",
        ],
        expect![[r#"
        "f32v2add $a1:2, $a2:3, $a4:5"
            t.s:1:10: misaligned register pair: `$a1:2` must start at a multiple of 2
        "ld128 $a2:5, $m1, 0"
            t.s:1:7: misaligned register quad: `$a2:5` must start at a multiple of 4
        "add $m16, $m1, $m2"
            t.s:1:5: register $m16 does not exist (0..=15)
        "add $m1x, $m1, $m2"
            t.s:1:5: malformed register `$m1x`
    "#]],
    );
}

#[test]
fn error_bundles_layout_and_directives() {
    check_errors(
        &[
            "{ bri 0 ; f32add $a0, $a1, $a2 }",
            "{ nop ; add $m1, $m1, 1 }",
            "{ nop f32add $a0, $a1, $a2 }",
            ".byte 1\nnop",
            ".section a, 0x80000\n.word 1, 2\n.section b, 0x80004\n.word 3",
            ".frob 1",
            ".align 3",
            ".float 1.5, x",
            ".include \"nonexistent.s\"",
            "setzi $m1, (1 + 2",
            "nop @",
        ],
        expect![[r#"
        "{ bri 0 ; f32add $a0, $a1, $a2 }"
            t.s:1:3: `bri` cannot be the first instruction of a bundle (it must be a main-pipeline instruction without control flow)
        "{ nop ; add $m1, $m1, 1 }"
            t.s:1:9: `add` cannot be the second instruction of a bundle (it must be a float-pipeline instruction)
        "{ nop f32add $a0, $a1, $a2 }"
            t.s:1:1: a bundle is written `{ MAIN ; FLOAT }` on one line
        ".byte 1\nnop"
            t.s:2:1: instruction at unaligned address 0x4c001 (use `.align 4` after data)
        ".section a, 0x80000\n.word 1, 2\n.section b, 0x80004\n.word 3"
            t.s:3:10: section `b` (0x80004..0x80008) overlaps section `a` (0x80000..0x80008)
        ".frob 1"
            t.s:1:1: unknown directive `.frob` (known: .section .org .align .equ .word .half .byte .float .zero .include)
        ".align 3"
            t.s:1:8: alignment 3 is not a power of two in 1..=65536
        ".float 1.5, x"
            t.s:1:13: expected a floating-point number, found `x`
        ".include \"nonexistent.s\""
            t.s:1:10: cannot read `nonexistent.s`: includes need a resolver (`assemble` reads no files; `assemble_with` takes one)
        "setzi $m1, (1 + 2"
            t.s:1:18: expected `)`, found the end of the line
        "nop @"
            t.s:1:5: unexpected character `@`
    "#]],
    );
}

#[test]
fn expressions_constants_and_defines() {
    let src = "
        .equ A, 3
        B = A * 4 + (1 << 4)      # 28
        .word A, B, -1, ~0, 0b101, 0x10 | 1, 7 % 4, 100 / 7, -8 >> 1, 6 ^ 3, 6 & 3, C
        .word end - start
    start: nop
    end:
    ";
    let opts = AsmOptions {
        base: 0x1000,
        defines: vec![("C".into(), 42), ("A".into(), 5)],
    };
    let obj = assemble(src, "e.s", &opts).unwrap();
    let words: Vec<i32> = obj.sections[0]
        .bytes
        .chunks(4)
        .map(|c| i32::from_le_bytes(c.try_into().unwrap()))
        .collect();
    // A comes from the defines (5), overriding the file's default.
    assert_eq!(words, [5, 36, -1, -1, 5, 17, 3, 14, -4, 5, 2, 42, 4, 0]);
    assert_eq!(obj.symbols["start"], 0x1000 + 13 * 4);
}

#[test]
fn bundles_are_aligned_with_a_nop() {
    let obj =
        assemble_text("nop\n{ nop ; f32add $a0, $a1, $a2 }\n{ nop ; f32add $a0, $a1, $a2 }\n");
    assert_eq!(obj.sections[0].bytes.len(), 4 + 4 + 8 + 8);
    assert_eq!(&obj.sections[0].bytes[4..8], &[0, 0, 0, 0]);
    assert_eq!(obj.sections[0].bytes[11], 0x80);
}

#[test]
fn pseudo_instructions_expand() {
    let obj = assemble_text("li $m1, 0xDEADBEEF\nli $m2, -1\nmov $m3, $m4\nmov $a0:1, $a2:3\n");
    let text = disassemble(&obj.sections[0].bytes, BASE).unwrap();
    let ops: Vec<&str> = text
        .lines()
        .skip(1)
        .map(|l| l.split('#').next().unwrap().trim())
        .collect();
    assert_eq!(
        ops,
        [
            "setzi $m1, 0xbeef",
            "orhi $m1, 0xdead",
            "setzi $m2, 0xffff",
            "orhi $m2, 0xffff",
            "or $m3, $m4, 0",
            "f32v2mov $a0:1, $a2:3"
        ]
    );
}

/// A resolver over files held in memory, which records the requests it gets.
fn files<'a>(
    files: &'a [(&'a str, &'a str)],
    asked: &'a mut Vec<(String, usize)>,
) -> impl FnMut(Include<'_>) -> Result<Vec<u8>, String> + 'a {
    move |inc| {
        asked.push((inc.path.to_string(), inc.bytes_max));
        files
            .iter()
            .find(|(name, _)| *name == inc.path)
            .map(|(_, text)| text.as_bytes().to_vec())
            .ok_or_else(|| "no such file".to_string())
    }
}

#[test]
fn includes_are_read_relative_to_the_including_file() {
    let mut asked = Vec::new();
    let obj = assemble_with(
        ".include \"inc.s\"\nsetzi $m1, K\n",
        "dir/main.s",
        &AsmOptions::default(),
        &mut files(&[("dir/inc.s", ".equ K, 7\nhelper: halt\n")], &mut asked),
    )
    .unwrap();
    assert_eq!(obj.symbols["helper"], BASE);
    assert_eq!(obj.sections[0].bytes.len(), 8);
    assert_eq!(asked, [("dir/inc.s".to_string(), asm::INCLUDE_BYTES_MAX)]);
    // Errors in an included file name it; a file the resolver cannot give is named with its
    // reason at the `.include`.
    let mut asked = Vec::new();
    let e = assemble_with(
        ".include \"inc.s\"\n",
        "dir/main.s",
        &AsmOptions::default(),
        &mut files(
            &[("dir/inc.s", "nop\n.include \"sub/gone.s\"\n")],
            &mut asked,
        ),
    )
    .unwrap_err();
    assert_eq!(
        e.to_string(),
        "dir/inc.s:2:10: cannot read `dir/sub/gone.s`: no such file"
    );
    // An include cycle is bounded.
    let mut asked = Vec::new();
    let e = assemble_with(
        ".include \"self.s\"\n",
        "main.s",
        &AsmOptions::default(),
        &mut files(&[("self.s", ".include \"self.s\"\n")], &mut asked),
    )
    .unwrap_err();
    assert!(e.message.contains("nested more than"), "{e}");
    assert_eq!(asked.len(), asm::INCLUDE_DEPTH_MAX);
}

#[test]
fn golden_disassembly_of_a_small_program() {
    let src = r#"
        .section code, 0x4C000
main:   setzi $m1, table
        ld32 $m2, $m1, 0            # row count
        rpt $m2, 2
        ld64step $a0:1, $m1+=8
        { add $m3, $m3, 1 ; f16v4mac $a2:3, $a0:1, $a4:5 }
loop:   brnzdec $m2, loop
        f32v2sum $a6, $a2:3
        call $m10, main
        halt
        .section data, 0x80000
table:  .word 2, 0x3c003c00
        .float 1.0
end:
"#;
    let obj = assemble(src, "p.s", &AsmOptions::default()).unwrap();
    let text = disassemble_object(&obj).unwrap();
    expect![[r#"
        .section code, 0x4c000
        main:
            setzi $m1, 0x80000                       # 0004c000: 02180000
            ld32 $m2, $m1, 0                         # 0004c004: 24210000
            rpt $m2, 2                               # 0004c008: 46200002
            ld64step $a0:1, $m1+=8                   # 0004c00c: 29010008
            { add $m3, $m3, 1 ; f16v4mac $a2:3, $a0:1, $a4:5 } # 0004c010: 90330001 53204003
        loop:
            brnzdec $m2, loop                        # 0004c018: 4424c018
            f32v2sum $a6, $a2:3                      # 0004c01c: 58620000
            call $m10, main                          # 0004c020: 45a4c000
            halt                                     # 0004c024: 68000000

        .section data, 0x80000
        table:
            .word 0x00000002                         # 00080000: not an instruction (reserved bits 0x00000002 are set)
            .word 0x3c003c00                         # 00080004: not an instruction (undefined opcode 0x3c)
            .word 0x3f800000                         # 00080008: not an instruction (undefined opcode 0x3f)
        end:
    "#]]
    .assert_eq(&text);
    // The disassembly reassembles to the same object, labels included.
    let back = assemble(&text, "p.dis.s", &AsmOptions::default()).unwrap();
    assert_eq!(back, obj);
}

#[test]
fn strict_disassembly_reports_the_byte_offset() {
    let mut bytes = assemble_text("nop\nhalt\n").sections[0].bytes.clone();
    bytes.extend_from_slice(&0x7F00_0000u32.to_le_bytes());
    let e = disassemble(&bytes, BASE).unwrap_err();
    assert_eq!(e.offset, 8);
    assert_eq!(
        e.to_string(),
        "byte offset 8 (address 0x4c008): word 0x7f000000: undefined opcode 0x7f"
    );
    let e = disassemble(&bytes[..9], BASE).unwrap_err();
    assert_eq!(e.offset, 8);
    // A bundle at an address that is not 8-byte aligned.
    let b = encode_slot(&Slot::Bundle(Bundle {
        main: Instr::Nop,
        float: Instr::FBin {
            ty: FType::F32,
            op: FBinOp::Add,
            d: 0,
            a: 1,
            b: 2,
        },
    }))
    .unwrap();
    let bytes: Vec<u8> = [b[0], b[1]].iter().flat_map(|w| w.to_le_bytes()).collect();
    assert!(disassemble(&bytes, BASE).is_ok());
    let e = disassemble(&bytes, BASE + 4).unwrap_err();
    assert_eq!(
        e.to_string(),
        "byte offset 0 (address 0x4c004): bundle at 0x4c004 is not 8-byte aligned"
    );
}

/// Objects with adjacent, empty, misaligned and oddly named sections and labels anywhere in or
/// at the end of them.
fn object() -> impl Strategy<Value = Object> {
    let names = vec![".text", "data", "a b", "x\"y", "w\\z", "s.1", "_k"];
    (
        prop::collection::vec(
            (0u32..3, 0u32..5, prop::collection::vec(any::<u8>(), 0..24)),
            1..5,
        ),
        prop::sample::subsequence(names, 5),
        prop::collection::vec(
            (any::<prop::sample::Index>(), any::<prop::sample::Index>()),
            0..6,
        ),
    )
        .prop_map(|(parts, names, syms)| {
            let mut address = 0x4C000u32;
            let mut sections = Vec::new();
            for ((gap_words, misalign, bytes), name) in parts.into_iter().zip(names) {
                address += gap_words * 4 + misalign;
                sections.push(Section {
                    name: name.to_string(),
                    address,
                    bytes: bytes.clone(),
                });
                address += bytes.len() as u32;
            }
            let mut symbols = std::collections::BTreeMap::new();
            for (i, (s, off)) in syms.into_iter().enumerate() {
                let sec: &Section = &sections[s.index(sections.len())];
                symbols.insert(
                    format!("l{i}"),
                    sec.address + off.index(sec.bytes.len() + 1) as u32,
                );
            }
            Object { sections, symbols }
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn objects_survive_disassembly_and_reassembly(obj in object()) {
        let text = disassemble_object(&obj).unwrap();
        let back = assemble(&text, "o.s", &AsmOptions::default()).map_err(|e| TestCaseError::fail(format!("{e}\n{text}")))?;
        prop_assert_eq!(&back, &obj, "{}", text);
        prop_assert_eq!(Object::from_bytes(&obj.to_bytes()), Ok(obj));
    }
}
