//! The assembler's bounds: long lines, deep nesting and long chains of operators are refused
//! with a positioned error instead of overflowing the stack (test threads have 2 MiB stacks).

use ipu_isa::asm::{EXPR_DEPTH_MAX, LINE_BYTES_MAX};
use ipu_isa::{AsmOptions, assemble};

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
