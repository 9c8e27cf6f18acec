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
    /// Labels to print at their addresses (those inside or at the end of the bytes) and to use
    /// for branch targets.
    pub symbols: Option<&'a BTreeMap<String, u32>>,
    /// More names for branch targets only (labels of other sections), if any.
    pub target_names: Option<&'a BTreeMap<String, u32>>,
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
    disassemble_object_with(object, true)
}

/// Disassembles every section of an object; with `data_as_words` false, a word that is not an
/// instruction is an error (its offset is counted from the start of its section).
///
/// Each label is printed once: in the section that contains its address, or else at the end of
/// the section that ends there. Labels outside every section are listed as comments.
pub fn disassemble_object_with(
    object: &Object,
    data_as_words: bool,
) -> Result<String, DisasmError> {
    let mut own: Vec<BTreeMap<String, u32>> = vec![BTreeMap::new(); object.sections.len()];
    let mut orphans = Vec::new();
    for (name, &a) in &object.symbols {
        let inside = object
            .sections
            .iter()
            .position(|s| s.address <= a && (a as u64) < s.end());
        let at_end = || object.sections.iter().position(|s| s.end() == a as u64);
        match inside.or_else(at_end) {
            Some(i) => {
                own[i].insert(name.clone(), a);
            }
            None => orphans.push((name, a)),
        }
    }
    let printed: BTreeMap<String, u32> =
        own.iter().flatten().map(|(n, &a)| (n.clone(), a)).collect();
    let mut out = String::new();
    for (s, labels) in object.sections.iter().zip(&own) {
        let opts = DisasmOptions {
            data_as_words,
            symbols: Some(labels),
            target_names: Some(&printed),
            section: Some(&s.name),
        };
        if !out.is_empty() {
            out.push('\n');
        }
        out.push_str(&disassemble_with(&s.bytes, s.address, &opts)?);
    }
    for (name, a) in orphans {
        let _ = writeln!(out, "# symbol {name} = {a:#x} is outside every section");
    }
    Ok(out)
}

/// A section name as the assembler reads it: bare when it is a valid name, else quoted.
fn section_name(name: &str) -> String {
    if crate::object::is_symbol_name(name) {
        name.to_string()
    } else {
        let escaped: String = name
            .chars()
            .flat_map(|c| match c {
                '"' | '\\' => vec!['\\', c],
                c => vec![c],
            })
            .collect();
        format!("\"{escaped}\"")
    }
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
    let mut names: BTreeMap<u32, &str> = BTreeMap::new();
    for syms in [opts.target_names, opts.symbols].into_iter().flatten() {
        for (name, &a) in syms {
            names.entry(a).or_insert(name);
        }
    }
    let target = |t: u32| -> String {
        match names.get(&t) {
            Some(name) => name.to_string(),
            None => format!("{t:#x}"),
        }
    };
    let mut out = String::new();
    let _ = writeln!(
        out,
        ".section {}, {address:#x}",
        section_name(opts.section.unwrap_or(".text"))
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
    // Whether a label falls strictly inside [lo, hi).
    let inner_label = |lo: u64, hi: u64| {
        by_addr
            .range((lo + 1).min(u32::MAX as u64) as u32..)
            .next()
            .is_some_and(|(&a, _)| (a as u64) < hi && a as u64 > lo)
    };
    // Bytes as `.byte` runs, with the labels at their places.
    let bytes_split = |out: &mut String, data: &[u8], at: u32| {
        let mut start = 0usize;
        for i in 0..=data.len() {
            let here = at as u64 + i as u64;
            let cut = i == data.len() || (i > start && by_addr.contains_key(&(here as u32)));
            if cut && i > start {
                labels_at(out, at as u64 + start as u64, at as u64 + start as u64 + 1);
                byte_line(out, &data[start..i], at + start as u32);
                start = i;
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
        bytes_split(&mut out, &bytes[..n], address);
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
        if opts.data_as_words
            && inner_label(
                at as u64,
                at as u64 + 4 * decoded.as_ref().map_or(1, |d| d.1) as u64,
            )
        {
            // A label inside the slot: print its first word as bytes around the label.
            bytes_split(&mut out, &bytes[offset..offset + 4], at);
            w += 1;
            continue;
        }
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
                    &format!(
                        "{at:08x}: not an instruction ({})",
                        reason.split_once(": ").map_or(reason.as_str(), |(w, r)| {
                            if w.starts_with("word ") {
                                r
                            } else {
                                reason.as_str()
                            }
                        })
                    ),
                );
                w += 1;
            }
        }
    }
    if words_end != bytes.len() {
        let at = address + words_end as u32;
        bytes_split(&mut out, &bytes[words_end..], at);
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
