//! The assembler's bounds: long lines, deep nesting and long chains of operators are refused
//! with a positioned error instead of overflowing the stack (test threads have 2 MiB stacks);
//! included files are refused past their byte bound.

use ipu_isa::asm::{EXPR_DEPTH_MAX, INCLUDE_BYTES_MAX, LINE_BYTES_MAX};
use ipu_isa::{AsmOptions, Include, assemble, assemble_with};

fn asm(source: &str) -> Result<Vec<u8>, String> {
    assemble(source, "t.s", &AsmOptions::default())
        .map(|o| o.sections.into_iter().flat_map(|s| s.bytes).collect())
        .map_err(|e| e.to_string())
}

fn word(v: u32) -> Vec<u8> {
    v.to_le_bytes().to_vec()
}

#[test]
fn nesting_up_to_the_bound_assembles() {
    let n = EXPR_DEPTH_MAX as usize - 1;
    let parens = format!(".word {}7{}", "(".repeat(n), ")".repeat(n));
    assert_eq!(asm(&parens).unwrap(), word(7));
    let signs = format!(".word {}5", "-".repeat(n - 1));
    // An even count of minus signs: 5; odd: -5.
    let expected = if (n - 1).is_multiple_of(2) {
        5
    } else {
        (-5i32) as u32
    };
    assert_eq!(asm(&signs).unwrap(), word(expected));
    let sum = format!(".word {}", vec!["1"; n].join("+"));
    assert_eq!(asm(&sum).unwrap(), word(n as u32));
}

#[test]
fn nesting_past_the_bound_is_refused_with_its_position() {
    let n = EXPR_DEPTH_MAX as usize + 1;
    for (what, line) in [
        (
            "parentheses",
            format!(".word {}1{}", "(".repeat(n), ")".repeat(n)),
        ),
        ("signs", format!(".word {}1", "-".repeat(n))),
        (
            "chained operators",
            format!(".word {}", vec!["1"; n + 1].join("+")),
        ),
        (
            "mixed",
            format!(".word {}", vec!["-(1"; n].join("+") + &")".repeat(n)),
        ),
    ] {
        let e = asm(&line).expect_err(what);
        assert!(e.starts_with("t.s:1:"), "{what}: {e}");
        assert!(e.contains("nested deeper than 256 levels"), "{what}: {e}");
    }
}

#[test]
fn long_lines_are_refused_before_they_are_lexed() {
    for line in [
        format!(".word {}", vec!["1"; LINE_BYTES_MAX].join("+")),
        format!(".word {}1{}", "(".repeat(20_000), ")".repeat(20_000)),
        format!(".word {}1", "-".repeat(100_000)),
    ] {
        let e = asm(&format!("nop\n{line}\n")).unwrap_err();
        assert!(
            e.starts_with("t.s:2:1: line is") && e.contains("longest accepted is 4096"),
            "{e}"
        );
        assert!(e.len() < 200, "the message quotes no input: {e}");
    }
}

/// Assembles `source` (as `t.s`), every `.include` answered with `include`'s bytes; the
/// `bytes_max` of each request, in order.
fn asm_including(source: &str, include: &[u8]) -> (Result<usize, String>, Vec<usize>) {
    let mut asked = Vec::new();
    let r = assemble_with(
        source,
        "t.s",
        &AsmOptions::default(),
        &mut |inc: Include<'_>| {
            asked.push(inc.bytes_max);
            Ok(include.to_vec())
        },
    )
    .map(|o| o.sections.iter().map(|s| s.bytes.len()).sum())
    .map_err(|e| e.to_string());
    (r, asked)
}

#[test]
fn included_bytes_are_bounded_over_all_includes() {
    // Each include counts against what is left, and the resolver is told how much that is.
    let (r, asked) = asm_including(".include \"a.s\"\n.include \"a.s\"\n", b"nop\n");
    assert_eq!(r, Ok(8));
    assert_eq!(asked, [INCLUDE_BYTES_MAX, INCLUDE_BYTES_MAX - 4]);
    // One file past the bound is refused at its `.include`, before any of it is assembled.
    let big = vec![b'\n'; INCLUDE_BYTES_MAX + 1];
    let (r, _) = asm_including("nop\n.include \"big.s\"\n", &big);
    assert_eq!(
        r.unwrap_err(),
        format!(
            "t.s:2:10: `big.s` is longer than the {INCLUDE_BYTES_MAX} bytes left for includes \
             (the files one assembly includes hold at most {INCLUDE_BYTES_MAX} bytes together)"
        )
    );
    // Files that fit one by one are refused when together they do not.
    let half = vec![b'\n'; INCLUDE_BYTES_MAX / 2 + 1];
    let (r, asked) = asm_including(".include \"h.s\"\n.include \"h.s\"\n", &half);
    let e = r.unwrap_err();
    assert!(e.starts_with("t.s:2:10: `h.s` is longer than the "), "{e}");
    assert_eq!(asked, [INCLUDE_BYTES_MAX, INCLUDE_BYTES_MAX / 2 - 1]);
}

#[test]
fn an_included_file_that_is_not_utf8_is_refused_with_its_offset() {
    let (r, _) = asm_including(".include \"bad.s\"\n", b"nop\n\xffnop\n");
    assert_eq!(
        r.unwrap_err(),
        "t.s:1:10: `bad.s` is not UTF-8 text: line 2, byte offset 4 does not begin a valid UTF-8 \
         character"
    );
}
