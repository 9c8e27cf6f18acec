//! The text assembler: source lines to an [`Object`].
//!
//! Two passes. Pass 1 lexes and parses every line, assigns each statement its section and
//! offset (sizes never depend on symbol values), defines labels and evaluates `.equ`, `.org`,
//! `.align`, `.zero` and `.section` (which may use only symbols defined above them). Pass 2
//! evaluates the remaining expressions (which may use any label), builds and encodes the
//! instructions and writes the bytes. The syntax is documented in `docs/isa.md`.
//!
//! Pass 1 is `directives` (lines, labels and directives) over `lexer`, `expr` and the operand
//! syntax of `operands`; pass 2 is `mnemonics` (each mnemonic's instructions, from the checked
//! operand values of `operands`) and the loop of [`assemble`]. `error` holds the error and the
//! source position every piece reports at.

mod directives;
mod error;
mod expr;
mod lexer;
mod mnemonics;
mod operands;

use std::collections::{BTreeMap, HashMap};
use std::rc::Rc;

use crate::encoding;
use crate::instr::*;
use crate::object::{Object, Section};

pub use directives::{
    ALIGN_MAX, DEFAULT_SECTION, INCLUDE_BYTES_MAX, INCLUDE_DEPTH_MAX, Include, IncludeResolver,
    LINE_BYTES_MAX,
};
use directives::{Assembler, Body};
pub use error::AsmError;
use error::Loc;
pub use expr::EXPR_DEPTH_MAX;
use expr::{Scope, eval};
use mnemonics::build;
pub use mnemonics::mnemonics;
use operands::Ctx;

/// The default address of the first section: the start of tile memory on every target.
pub const DEFAULT_BASE: u32 = ipu_target::MEMORY_BASE;

/// Assembler options.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AsmOptions {
    /// Address of the default section (`.text`), used until a `.section` directive.
    pub base: u32,
    /// Constants defined before the first line, as if by `.equ`; a `.equ` of the same name in
    /// the source is ignored, so the command line overrides a default in the file.
    pub defines: Vec<(String, i64)>,
}

impl Default for AsmOptions {
    fn default() -> Self {
        AsmOptions {
            base: DEFAULT_BASE,
            defines: Vec::new(),
        }
    }
}

fn encode_at(loc: &Loc, col: usize, i: &Instr) -> Result<u32, AsmError> {
    encoding::encode(i).map_err(|e| loc.err(col, format!("invalid instruction `{i}`: {e}")))
}

/// Assembles `source` (named `file_name` in errors) into an object. `.include` is refused: use
/// [`assemble_with`] to give it files.
pub fn assemble(source: &str, file_name: &str, options: &AsmOptions) -> Result<Object, AsmError> {
    assemble_with(source, file_name, options, &mut |_| {
        Err(
            "includes need a resolver (`assemble` reads no files; `assemble_with` takes one)"
                .into(),
        )
    })
}

/// Assembles `source` (named `file_name` in errors and for `.include`) into an object, asking
/// `resolve` for the bytes of every file `.include` names (at most [`INCLUDE_BYTES_MAX`] over
/// all of them, nested at most [`INCLUDE_DEPTH_MAX`] deep).
pub fn assemble_with(
    source: &str,
    file_name: &str,
    options: &AsmOptions,
    resolve: &mut IncludeResolver<'_>,
) -> Result<Object, AsmError> {
    let mut asm = Assembler {
        sections: Vec::new(),
        current: None,
        base: options.base,
        symbols: HashMap::new(),
        labels: BTreeMap::new(),
        defined_at: HashMap::new(),
        defines: HashMap::new(),
        stmts: Vec::new(),
        resolve,
        included_bytes: 0,
    };
    for (name, value) in &options.defines {
        asm.symbols.insert(name.clone(), *value);
        asm.defines.insert(name.clone(), *value);
        asm.defined_at
            .insert(name.clone(), "the command line".into());
    }
    let file: Rc<str> = file_name.into();
    asm.file(source, file.clone(), 0)?;

    // Sections must not overlap.
    for (i, a) in asm.sections.iter().enumerate() {
        for b in &asm.sections[..i] {
            let (a0, a1) = (a.address as u64, a.address as u64 + a.size as u64);
            let (b0, b1) = (b.address as u64, b.address as u64 + b.size as u64);
            if a0 < b1 && b0 < a1 {
                let (loc, col) = a.loc.clone().or(b.loc.clone()).unwrap_or((
                    Loc {
                        file: file.clone(),
                        line: 1,
                        text: "".into(),
                    },
                    0,
                ));
                return Err(loc.err(
                    col,
                    format!(
                        "section `{}` ({a0:#x}..{a1:#x}) overlaps section `{}` ({b0:#x}..{b1:#x})",
                        a.name, b.name
                    ),
                ));
            }
        }
    }

    // Pass 2.
    let mut bytes: Vec<Vec<u8>> = asm
        .sections
        .iter()
        .map(|s| vec![0u8; s.size as usize])
        .collect();
    for st in &asm.stmts {
        let here = asm.sections[st.section].address as i64 + st.offset as i64;
        let ctx = Ctx {
            loc: &st.loc,
            scope: Scope {
                symbols: &asm.symbols,
                here,
                hint: "",
            },
        };
        let out = &mut bytes[st.section];
        let mut at = st.offset as usize;
        let mut put = |w: &[u8]| {
            out[at..at + w.len()].copy_from_slice(w);
            at += w.len();
        };
        match &st.body {
            Body::Instr(p) => {
                for i in build(&ctx, p)? {
                    put(&encode_at(&st.loc, p.col, &i)?.to_le_bytes());
                }
            }
            Body::Bundle {
                pad,
                main,
                float,
                col,
            } => {
                let mut ctx = ctx;
                if *pad {
                    put(&0u32.to_le_bytes());
                    ctx.scope.here += 4;
                }
                let m = build(&ctx, main)?;
                let f = build(&ctx, float)?;
                let ([mi], [fi]) = (m.as_slice(), f.as_slice()) else {
                    return Err(st.loc.err(
                        *col,
                        "a pseudo-instruction that expands to two words cannot be bundled",
                    ));
                };
                if mi.class() != Class::Main {
                    return Err(st.loc.err(
                        main.col,
                        format!("`{}` cannot be the first instruction of a bundle (it must be a main-pipeline instruction without control flow)", main.mnemonic),
                    ));
                }
                if fi.class() != Class::Float {
                    return Err(st.loc.err(
                        float.col,
                        format!("`{}` cannot be the second instruction of a bundle (it must be a float-pipeline instruction)", float.mnemonic),
                    ));
                }
                let (w0, w1) = encoding::encode_bundle(&Bundle {
                    main: *mi,
                    float: *fi,
                })
                .map_err(|e| st.loc.err(*col, e.to_string()))?;
                put(&w0.to_le_bytes());
                put(&w1.to_le_bytes());
            }
            Body::Data { unit, values } => {
                let (min, max) = match unit {
                    4 => (i32::MIN as i64, u32::MAX as i64),
                    2 => (i16::MIN as i64, u16::MAX as i64),
                    _ => (i8::MIN as i64, u8::MAX as i64),
                };
                for (e, col) in values {
                    let v = eval(e, &ctx.scope).map_err(|(c, m)| st.loc.err(c, m))?;
                    if v < min || v > max {
                        return Err(st.loc.err(
                            *col,
                            format!("value {v} does not fit in {} bytes ({min}..={max})", unit),
                        ));
                    }
                    put(&(v as u32).to_le_bytes()[..*unit as usize]);
                }
            }
            Body::Bytes(b) => put(b),
        }
    }
    // The default section is kept only when something was put or labelled in it.
    let sections = asm
        .sections
        .iter()
        .zip(bytes)
        .filter(|(s, b)| s.loc.is_some() || s.labelled || !b.is_empty())
        .map(|(s, b)| Section {
            name: s.name.clone(),
            address: s.address,
            bytes: b,
        })
        .collect();
    Ok(Object {
        sections,
        symbols: asm.labels,
    })
}
