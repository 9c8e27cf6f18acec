//! The disassembler: bytes at an address to assembly text that the assembler turns back into
//! the same bytes. Each line carries the address and the words as a comment.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use crate::encoding::{BUNDLE_BYTES, BUNDLE_FLAG, decode_slot};
use crate::instr::Slot;
use crate::object::Object;
use crate::text::SlotText;

/// Column at which the address comment starts.
const COMMENT_COLUMN: usize = 44;

/// Why bytes could not be disassembled (strict mode).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("byte offset {offset} (address {address:#x}): {reason}")]
pub struct DisasmError {
    /// Offset from the start of the bytes given.
    pub offset: usize,
    /// The address of that byte.
    pub address: u32,
    /// What is wrong.
    pub reason: String,
}

/// Disassembler options.
#[derive(Debug, Clone, Default)]
pub struct DisasmOptions<'a> {
    /// Print words that are not valid instructions (data) as `.word` lines instead of failing.
    pub data_as_words: bool,
    /// Labels to print at their addresses and to use for branch targets.
    pub symbols: Option<&'a BTreeMap<String, u32>>,
    /// The section name for the `.section` line.
    pub section: Option<&'a str>,
}

/// Disassembles `bytes` loaded at `address`, strictly: every word must be an instruction (or a
/// bundle at an 8-byte aligned address). The text starts with `.section .text, ADDRESS`.
pub fn disassemble(bytes: &[u8], address: u32) -> Result<String, DisasmError> {
    disassemble_with(bytes, address, &DisasmOptions::default())
}

/// Disassembles every section of an object with its labels. Data words that are not valid
/// instructions are printed as `.word` (so the text always reassembles to the same bytes).
pub fn disassemble_object(object: &Object) -> Result<String, DisasmError> {
    let mut out = String::new();
    for s in &object.sections {
        let opts = DisasmOptions {
            data_as_words: true,
            symbols: Some(&object.symbols),
            section: Some(&s.name),
        };
        if !out.is_empty() {
            out.push('\n');
        }
        out.push_str(&disassemble_with(&s.bytes, s.address, &opts)?);
    }
    Ok(out)
}

fn line(out: &mut String, text: &str, comment: &str) {
    let _ = writeln!(
        out,
        "    {text:<width$} # {comment}",
        width = COMMENT_COLUMN - 4
    );
}

/// Disassembles with options (see [`DisasmOptions`]).
pub fn disassemble_with(
    bytes: &[u8],
    address: u32,
    opts: &DisasmOptions,
) -> Result<String, DisasmError> {
    let err = |offset: usize, reason: String| DisasmError {
        offset,
        address: address.wrapping_add(offset as u32),
        reason,
    };
    if address as u64 + bytes.len() as u64 > 1 << 32 {
        return Err(err(0, "the bytes run past the 32-bit address space".into()));
    }
    let mut by_addr: BTreeMap<u32, Vec<&str>> = BTreeMap::new();
    if let Some(syms) = opts.symbols {
        for (name, &a) in syms {
            by_addr.entry(a).or_default().push(name);
        }
    }
    let target = |t: u32| -> String {
        match by_addr.get(&t).and_then(|v| v.first()) {
            Some(name) => name.to_string(),
            None => format!("{t:#x}"),
        }
    };
    let mut out = String::new();
    let _ = writeln!(
        out,
        ".section {}, {address:#x}",
        opts.section.unwrap_or(".text")
    );
    let end = address as u64 + bytes.len() as u64;
    let labels_at = |out: &mut String, lo: u64, hi: u64| {
        for (&a, names) in by_addr.range(lo.min(u32::MAX as u64) as u32..) {
            if a as u64 >= hi {
                break;
            }
            for n in names {
                if a as u64 == lo {
                    let _ = writeln!(out, "{n}:");
                } else {
                    let _ = writeln!(out, "    # label {n} = {a:#x} (inside the slot below)");
                }
            }
        }
    };
    let mut off = 0usize;
    // Leading bytes up to a 4-byte boundary, and trailing bytes.
    let lead = ((4 - address % 4) % 4) as usize;
    if lead != 0 && !bytes.is_empty() {
        if !opts.data_as_words {
            return Err(err(
                0,
                format!("address {address:#x} is not 4-byte aligned"),
            ));
        }
        let n = lead.min(bytes.len());
        labels_at(&mut out, address as u64, address as u64 + n as u64);
        byte_line(&mut out, &bytes[..n], address);
        off = n;
    }
    let words_end = off + (bytes.len() - off) / 4 * 4;
    if words_end != bytes.len() && !opts.data_as_words {
        return Err(err(
            words_end,
            format!(
                "{} trailing bytes after the last word",
                bytes.len() - words_end
            ),
        ));
    }
    let words: Vec<u32> = bytes[off..words_end]
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    let mut w = 0usize;
    while w < words.len() {
        let at = address + (off + 4 * w) as u32;
        let offset = off + 4 * w;
        let decoded = decode_slot(&words[w..]).and_then(|(slot, n)| {
            if n == 2 && !at.is_multiple_of(BUNDLE_BYTES) {
                Err(crate::DecodeError::BundleFlagNotMain { word: words[w] })
            } else {
                Ok((slot, n))
            }
        });
        match decoded {
            Ok((slot, n)) => {
                labels_at(&mut out, at as u64, at as u64 + 4 * n as u64);
                let text = SlotText {
                    slot: &slot,
                    target: &target,
                }
                .to_string();
                let enc = match slot {
                    Slot::Single(_) => format!("{at:08x}: {:08x}", words[w]),
                    Slot::Bundle(_) => format!("{at:08x}: {:08x} {:08x}", words[w], words[w + 1]),
                };
                line(&mut out, &text, &enc);
                w += n;
            }
            Err(e) => {
                let reason = if words[w] & BUNDLE_FLAG != 0
                    && !at.is_multiple_of(BUNDLE_BYTES)
                    && decode_slot(&words[w..]).is_ok()
                {
                    format!("bundle at {at:#x} is not 8-byte aligned")
                } else {
                    e.to_string()
                };
                if !opts.data_as_words {
                    return Err(err(offset, reason));
                }
                labels_at(&mut out, at as u64, at as u64 + 4);
                line(
                    &mut out,
                    &format!(".word {:#010x}", words[w]),
                    &format!("{at:08x}: not an instruction: {reason}"),
                );
                w += 1;
            }
        }
    }
    if words_end != bytes.len() {
        let at = address + words_end as u32;
        labels_at(&mut out, at as u64, end);
        byte_line(&mut out, &bytes[words_end..], at);
    }
    // Labels at the end of the bytes.
    labels_at(&mut out, end, end + 1);
    Ok(out)
}

fn byte_line(out: &mut String, bytes: &[u8], at: u32) {
    let list: Vec<String> = bytes.iter().map(|b| format!("{b:#04x}")).collect();
    line(
        out,
        &format!(".byte {}", list.join(", ")),
        &format!("{at:08x}"),
    );
}
