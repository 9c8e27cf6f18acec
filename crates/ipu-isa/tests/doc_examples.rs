//! The encoding examples in `docs/isa.md` (section 11) are what the assembler produces, and the
//! disassembler prints them back in the same text.

use ipu_isa::*;

#[test]
fn encoding_examples_in_the_spec_are_true() {
    let doc = include_str!("../../../docs/isa.md");
    let section = doc
        .split("## 11. Encoding examples")
        .nth(1)
        .expect("section 11");
    let mut checked = 0;
    for line in section.lines().filter(|l| l.starts_with("| `")) {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        let text = cells[1].trim_matches('`');
        let words: Vec<u32> = cells[2]
            .split_whitespace()
            .map(|w| u32::from_str_radix(w.trim_matches('`').trim_start_matches("0x"), 16).unwrap())
            .collect();
        let obj = assemble(text, "doc", &AsmOptions::default()).unwrap_or_else(|e| panic!("{e}"));
        let got: Vec<u32> = obj.sections[0]
            .bytes
            .chunks(4)
            .map(|c| u32::from_le_bytes(c.try_into().unwrap()))
            .collect();
        assert_eq!(got, words, "{text}");
        let (slot, _) = decode_slot(&words).unwrap();
        assert_eq!(format_slot(&slot), text, "the canonical text form");
        checked += 1;
    }
    assert!(checked >= 25, "only {checked} examples found");
}
