//! Pass 1: lines, labels and directives, each statement placed at its section and offset.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::rc::Rc;

use super::error::{AsmError, Loc};
use super::expr::{Expr, Scope, eval, parse_expr_all};
use super::lexer::{Tok, Token, describe, lex, strip_comment};
use super::operands::{ParsedInstr, leading_ident, parse_instr, split_commas};
use crate::object::SECTION_BYTES_MAX;

/// The name of the section used before any `.section` directive.
pub const DEFAULT_SECTION: &str = ".text";
/// How deep `.include` may nest (a bound against include cycles).
pub const INCLUDE_DEPTH_MAX: usize = 16;
/// Most bytes the files one assembly includes may hold together, counting a file each time it
/// is included: a bound on what `.include` can make the resolver read and the assembler hold,
/// which nesting alone does not give (a file may include another many times).
pub const INCLUDE_BYTES_MAX: usize = 1 << 22;

/// A file named by `.include`, handed to the resolver.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Include<'a> {
    /// The path as written, joined to the directory of the including file's name; errors in the
    /// included file name it so.
    pub path: &'a str,
    /// The most bytes the resolver need read: what is left of [`INCLUDE_BYTES_MAX`]. A longer
    /// answer is refused, so a resolver may stop reading one byte past this.
    pub bytes_max: usize,
}

/// The callback [`super::assemble_with`] asks for an included file's bytes (UTF-8 text), or why
/// they cannot be had; the assembler reports the reason at the `.include` as `cannot read
/// `PATH`: REASON`.
pub type IncludeResolver<'r> = dyn FnMut(Include<'_>) -> Result<Vec<u8>, String> + 'r;
/// Largest `.align` argument, in bytes.
pub const ALIGN_MAX: i64 = 1 << 16;
/// Longest source line, in bytes: a bound on the work and the memory a line can ask for.
pub const LINE_BYTES_MAX: usize = 4096;

#[derive(Debug)]
pub(super) enum Body {
    Instr(ParsedInstr),
    /// A bundle; `pad` when a `nop` is inserted before it for 8-byte alignment.
    Bundle {
        pad: bool,
        main: ParsedInstr,
        float: ParsedInstr,
        col: usize,
    },
    Data {
        unit: u32,
        values: Vec<(Expr, usize)>,
    },
    Bytes(Vec<u8>),
}

#[derive(Debug)]
pub(super) struct Stmt {
    pub(super) loc: Loc,
    pub(super) section: usize,
    pub(super) offset: u32,
    pub(super) body: Body,
}

pub(super) struct SectionState {
    pub(super) name: String,
    pub(super) address: u32,
    pub(super) size: u32,
    pub(super) loc: Option<(Loc, usize)>,
    /// Whether a label was defined in the section.
    pub(super) labelled: bool,
}

pub(super) struct Assembler<'r> {
    pub(super) sections: Vec<SectionState>,
    pub(super) current: Option<usize>,
    pub(super) base: u32,
    pub(super) symbols: HashMap<String, i64>,
    pub(super) labels: BTreeMap<String, u32>,
    /// Where each symbol was defined, for duplicate reports.
    pub(super) defined_at: HashMap<String, String>,
    pub(super) defines: HashMap<String, i64>,
    pub(super) stmts: Vec<Stmt>,
    /// Where `.include` gets a file's bytes.
    pub(super) resolve: &'r mut IncludeResolver<'r>,
    /// Bytes of the files included so far (see [`INCLUDE_BYTES_MAX`]).
    pub(super) included_bytes: usize,
}

impl Assembler<'_> {
    fn section_mut(&mut self) -> usize {
        if let Some(s) = self.current {
            return s;
        }
        // The default section, created on first use.
        let idx = match self.sections.iter().position(|s| s.name == DEFAULT_SECTION) {
            Some(i) => i,
            None => {
                self.sections.push(SectionState {
                    name: DEFAULT_SECTION.into(),
                    address: self.base,
                    size: 0,
                    loc: None,
                    labelled: false,
                });
                self.sections.len() - 1
            }
        };
        self.current = Some(idx);
        idx
    }

    /// The current address (without creating the default section).
    fn here(&self) -> u64 {
        match self.current {
            Some(s) => self.sections[s].address as u64 + self.sections[s].size as u64,
            None => self.base as u64,
        }
    }

    fn grow(&mut self, loc: &Loc, col: usize, bytes: u64) -> Result<u32, AsmError> {
        let s = self.section_mut();
        let sec = &mut self.sections[s];
        let new = sec.size as u64 + bytes;
        if new > SECTION_BYTES_MAX as u64 || sec.address as u64 + new > 1 << 32 {
            return Err(loc.err(
                col,
                format!(
                    "section `{}` would grow to {new} bytes (at most {SECTION_BYTES_MAX}, within the 32-bit address space)",
                    sec.name
                ),
            ));
        }
        let offset = sec.size;
        sec.size = new as u32;
        Ok(offset)
    }

    fn eval_now(&self, loc: &Loc, e: &Expr) -> Result<i64, AsmError> {
        let scope = Scope {
            symbols: &self.symbols,
            here: self.here() as i64,
            hint: " (`.equ`, `.section`, `.org`, `.align` and `.zero` may use only symbols defined above them)",
        };
        eval(e, &scope).map_err(|(c, m)| loc.err(c, m))
    }

    fn define(
        &mut self,
        loc: &Loc,
        col: usize,
        name: &str,
        value: i64,
        label: bool,
    ) -> Result<(), AsmError> {
        if let Some(prev) = self.defined_at.get(name) {
            return Err(loc.err(
                col,
                format!("duplicate symbol `{name}` (first defined at {prev})"),
            ));
        }
        if label && u32::try_from(value).is_err() {
            return Err(loc.err(
                col,
                format!("label `{name}` at {value:#x} is outside the 32-bit address space"),
            ));
        }
        self.defined_at
            .insert(name.to_string(), format!("{}:{}", loc.file, loc.line));
        self.symbols.insert(name.to_string(), value);
        if label {
            self.labels.insert(name.to_string(), value as u32);
        }
        Ok(())
    }

    fn push(&mut self, loc: &Loc, offset: u32, body: Body) {
        let section = self.section_mut();
        self.stmts.push(Stmt {
            loc: loc.clone(),
            section,
            offset,
            body,
        });
    }

    pub(super) fn file(
        &mut self,
        source: &str,
        file: Rc<str>,
        depth: usize,
    ) -> Result<(), AsmError> {
        for (n, raw) in source.lines().enumerate() {
            let loc = Loc {
                file: file.clone(),
                line: n as u32 + 1,
                text: raw.into(),
            };
            self.line(&loc, depth)?;
        }
        Ok(())
    }

    fn line(&mut self, loc: &Loc, depth: usize) -> Result<(), AsmError> {
        if loc.text.len() > LINE_BYTES_MAX {
            return Err(loc.err(
                0,
                format!(
                    "line is {} bytes long; the longest accepted is {LINE_BYTES_MAX}",
                    loc.text.len()
                ),
            ));
        }
        let text = strip_comment(&loc.text);
        let end_col = text.trim_end().len();
        let toks = lex(text).map_err(|(c, m)| loc.err(c, m))?;
        let mut i = 0;
        // Labels.
        while let (
            Some(Token {
                tok: Tok::Ident(name),
                col,
            }),
            Some(Token {
                tok: Tok::Punct(":"),
                ..
            }),
        ) = (toks.get(i), toks.get(i + 1))
        {
            if name == "." {
                return Err(loc.err(*col, "`.` (the current address) cannot be a label"));
            }
            let s = self.section_mut();
            self.sections[s].labelled = true;
            let here = self.here();
            self.define(loc, *col, name, here as i64, true)?;
            i += 2;
        }
        let toks = &toks[i..];
        let Some(first) = toks.first() else {
            return Ok(());
        };
        match &first.tok {
            Tok::Ident(d) if d.starts_with('.') && d.len() > 1 => self.directive(
                loc,
                &d.to_ascii_lowercase(),
                first.col,
                &toks[1..],
                end_col,
                depth,
            ),
            Tok::Ident(_) if matches!(toks.get(1).map(|t| &t.tok), Some(Tok::Punct("="))) => {
                // `NAME = expr` is `.equ NAME, expr`.
                self.equ(loc, toks, &toks[2..], end_col)
            }
            Tok::Punct("{") => self.bundle(loc, toks),
            _ => {
                let instr = parse_instr(toks, end_col).map_err(|(c, m)| loc.err(c, m))?;
                self.check_instr_alignment(loc, instr.col)?;
                let offset = self.grow(loc, instr.col, 4 * instr.words() as u64)?;
                self.push(loc, offset, Body::Instr(instr));
                Ok(())
            }
        }
    }

    fn check_instr_alignment(&mut self, loc: &Loc, col: usize) -> Result<(), AsmError> {
        let here = self.here();
        if !here.is_multiple_of(4) {
            return Err(loc.err(
                col,
                format!("instruction at unaligned address {here:#x} (use `.align 4` after data)"),
            ));
        }
        Ok(())
    }

    fn bundle(&mut self, loc: &Loc, toks: &[Token]) -> Result<(), AsmError> {
        let open = toks[0].col;
        let semi = toks.iter().position(|t| t.tok == Tok::Punct(";"));
        let close = toks.iter().position(|t| t.tok == Tok::Punct("}"));
        let (Some(semi), Some(close)) = (semi, close) else {
            return Err(loc.err(open, "a bundle is written `{ MAIN ; FLOAT }` on one line"));
        };
        if semi > close {
            return Err(loc.err(
                toks[close].col,
                "expected `;` between the two instructions of a bundle",
            ));
        }
        if let Some(extra) = toks.get(close + 1) {
            return Err(loc.err(
                extra.col,
                format!("unexpected {} after a bundle", describe(&extra.tok)),
            ));
        }
        let main = parse_instr(&toks[1..semi], toks[semi].col).map_err(|(c, m)| loc.err(c, m))?;
        let float =
            parse_instr(&toks[semi + 1..close], toks[close].col).map_err(|(c, m)| loc.err(c, m))?;
        self.check_instr_alignment(loc, open)?;
        let pad = !self.here().is_multiple_of(8);
        let offset = self.grow(loc, open, if pad { 12 } else { 8 })?;
        self.push(
            loc,
            offset,
            Body::Bundle {
                pad,
                main,
                float,
                col: open,
            },
        );
        Ok(())
    }

    fn equ(
        &mut self,
        loc: &Loc,
        name_toks: &[Token],
        value: &[Token],
        end_col: usize,
    ) -> Result<(), AsmError> {
        let (name, col) = leading_ident(name_toks, end_col)
            .map_err(|(col, _)| loc.err(col, "expected a constant name"))?;
        if name == "." {
            return Err(loc.err(col, "`.` (the current address) cannot be redefined"));
        }
        let e = parse_expr_all(value, end_col).map_err(|(c, m)| loc.err(c, m))?;
        if self.defines.contains_key(name) {
            return Ok(());
        }
        let v = self.eval_now(loc, &e)?;
        self.define(loc, col, name, v, false)
    }

    fn directive(
        &mut self,
        loc: &Loc,
        name: &str,
        col: usize,
        args: &[Token],
        end_col: usize,
        depth: usize,
    ) -> Result<(), AsmError> {
        let parts = if args.is_empty() {
            Vec::new()
        } else {
            split_commas(args)
        };
        let expect_n = |n: usize| -> Result<(), AsmError> {
            if parts.len() != n {
                return Err(loc.err(
                    col,
                    format!("`{name}` takes {n} argument(s), got {}", parts.len()),
                ));
            }
            Ok(())
        };
        let expr_at = |i: usize| -> Result<Expr, AsmError> {
            parse_expr_all(parts[i], end_col).map_err(|(c, m)| loc.err(c, m))
        };
        match name {
            ".equ" | ".set" => {
                expect_n(2)?;
                self.equ(loc, parts[0], parts[1], end_col)
            }
            ".section" => {
                if parts.is_empty() || parts.len() > 2 {
                    return Err(loc.err(col, "`.section` takes a name and an address: `.section NAME, ADDRESS`"));
                }
                let (sname, ncol) = match parts[0] {
                    [Token { tok: Tok::Ident(s), col }] => (s.clone(), *col),
                    [Token { tok: Tok::Str(s), col }] => (s.clone(), *col),
                    other => {
                        let c = other.first().map_or(end_col, |t| t.col);
                        return Err(loc.err(c, "expected a section name"));
                    }
                };
                if sname.is_empty() || sname.len() > crate::object::NAME_BYTES_MAX {
                    return Err(loc.err(ncol, "a section name has 1 to 255 bytes"));
                }
                let existing = self.sections.iter().position(|s| s.name == sname);
                match (existing, parts.len()) {
                    (Some(i), 1) => {
                        self.current = Some(i);
                        Ok(())
                    }
                    (Some(_), _) => Err(loc.err(
                        ncol,
                        format!("section `{sname}` already exists (write `.section {sname}` to continue it)"),
                    )),
                    (None, 1) => Err(loc.err(
                        ncol,
                        format!("new section `{sname}` needs an address: `.section {sname}, ADDRESS`"),
                    )),
                    (None, _) => {
                        let e = expr_at(1)?;
                        let addr = self.eval_now(loc, &e)?;
                        let Ok(addr) = u32::try_from(addr) else {
                            return Err(loc.err(parts[1][0].col, format!("section address {addr:#x} is outside 0..=0xffffffff")));
                        };
                        self.sections.push(SectionState {
                            name: sname,
                            address: addr,
                            size: 0,
                            loc: Some((loc.clone(), ncol)),
                            labelled: false,
                        });
                        self.current = Some(self.sections.len() - 1);
                        Ok(())
                    }
                }
            }
            ".org" => {
                expect_n(1)?;
                let e = expr_at(0)?;
                let target = self.eval_now(loc, &e)?;
                let s = self.section_mut();
                let here = self.here();
                let start = self.sections[s].address as i64;
                if target < here as i64 {
                    return Err(loc.err(
                        parts[0][0].col,
                        format!("`.org {target:#x}` is below the current address {here:#x} of section `{}` (which starts at {start:#x})", self.sections[s].name),
                    ));
                }
                self.grow(loc, col, (target - here as i64) as u64)?;
                Ok(())
            }
            ".align" => {
                expect_n(1)?;
                let e = expr_at(0)?;
                let n = self.eval_now(loc, &e)?;
                if !(1..=ALIGN_MAX).contains(&n) || n & (n - 1) != 0 {
                    return Err(loc.err(parts[0][0].col, format!("alignment {n} is not a power of two in 1..={ALIGN_MAX}")));
                }
                let here = self.here();
                let pad = (n as u64 - here % n as u64) % n as u64;
                self.grow(loc, col, pad)?;
                Ok(())
            }
            ".zero" | ".space" => {
                expect_n(1)?;
                let e = expr_at(0)?;
                let n = self.eval_now(loc, &e)?;
                if n < 0 || n > SECTION_BYTES_MAX as i64 {
                    return Err(loc.err(parts[0][0].col, format!("`.zero {n}`: byte count outside 0..={SECTION_BYTES_MAX}")));
                }
                self.grow(loc, col, n as u64)?;
                Ok(())
            }
            ".word" | ".half" | ".byte" => {
                if parts.is_empty() {
                    return Err(loc.err(col, format!("`{name}` needs at least one value")));
                }
                let unit = match name {
                    ".word" => 4,
                    ".half" => 2,
                    _ => 1,
                };
                let mut values = Vec::new();
                for p in &parts {
                    let c = p.first().map_or(end_col, |t| t.col);
                    values.push((parse_expr_all(p, end_col).map_err(|(c, m)| loc.err(c, m))?, c));
                }
                let offset = self.grow(loc, col, unit as u64 * values.len() as u64)?;
                self.push(loc, offset, Body::Data { unit, values });
                Ok(())
            }
            ".float" => {
                // Float literals are not expression tokens: take the raw text.
                let text = strip_comment(&loc.text);
                let start = col + ".float".len();
                let rest = text.get(start..).unwrap_or("");
                let mut bytes = Vec::new();
                let mut at = start;
                for piece in rest.split(',') {
                    let trimmed = piece.trim();
                    let pcol = at + (piece.len() - piece.trim_start().len());
                    at += piece.len() + 1;
                    let v: f32 = trimmed.parse().map_err(|_| {
                        loc.err(pcol.min(end_col), format!("expected a floating-point number, found `{trimmed}`"))
                    })?;
                    bytes.extend_from_slice(&v.to_le_bytes());
                }
                let offset = self.grow(loc, col, bytes.len() as u64)?;
                self.push(loc, offset, Body::Bytes(bytes));
                Ok(())
            }
            ".include" => {
                let [Token { tok: Tok::Str(path), col: pcol }] = args else {
                    return Err(loc.err(col, "expected `.include \"FILE\"`"));
                };
                if depth >= INCLUDE_DEPTH_MAX {
                    return Err(loc.err(*pcol, format!("includes nested more than {INCLUDE_DEPTH_MAX} deep (an include cycle?)")));
                }
                let dir = Path::new(&*loc.file).parent().unwrap_or(Path::new(""));
                let full = dir.join(path);
                let left = INCLUDE_BYTES_MAX - self.included_bytes;
                let bytes = (self.resolve)(Include {
                    path: &full.to_string_lossy(),
                    bytes_max: left,
                })
                .map_err(|e| loc.err(*pcol, format!("cannot read `{}`: {e}", full.display())))?;
                if bytes.len() > left {
                    return Err(loc.err(
                        *pcol,
                        format!(
                            "`{}` is longer than the {left} bytes left for includes (the files one assembly includes hold at most {INCLUDE_BYTES_MAX} bytes together)",
                            full.display()
                        ),
                    ));
                }
                self.included_bytes += bytes.len();
                let source = String::from_utf8(bytes).map_err(|e| {
                    let offset = e.utf8_error().valid_up_to();
                    let line = e.as_bytes()[..offset].iter().filter(|&&b| b == b'\n').count() + 1;
                    loc.err(
                        *pcol,
                        format!(
                            "`{}` is not UTF-8 text: line {line}, byte offset {offset} does not begin a valid UTF-8 character",
                            full.display()
                        ),
                    )
                })?;
                let name: Rc<str> = full.to_string_lossy().into();
                self.file(&source, name, depth + 1)
            }
            _ => Err(loc.err(
                col,
                format!(
                    "unknown directive `{name}` (known: .section .org .align .equ .word .half .byte .float .zero .include)"
                ),
            )),
        }
    }
}
