//! The text assembler: source lines to an [`Object`].
//!
//! Two passes. Pass 1 lexes and parses every line, assigns each statement its section and
//! offset (sizes never depend on symbol values), defines labels and evaluates `.equ`, `.org`,
//! `.align`, `.zero` and `.section` (which may use only symbols defined above them). Pass 2
//! evaluates the remaining expressions (which may use any label), builds and encodes the
//! instructions and writes the bytes. The syntax is documented in `docs/isa.md`.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::rc::Rc;

use crate::encoding::{
    self, FP8_SCALE_MAX, FP8_SCALE_MIN, RPT_BODY_MAX, SETZI_LIMIT, TARGET_LIMIT,
};
use crate::instr::*;
use crate::object::{Object, SECTION_BYTES_MAX, Section};
use crate::text;

/// The default address of the first section: the start of tile memory on every target.
pub const DEFAULT_BASE: u32 = ipu_target::MEMORY_BASE;
/// The name of the section used before any `.section` directive.
pub const DEFAULT_SECTION: &str = ".text";
/// How deep `.include` may nest (a bound against include cycles).
pub const INCLUDE_DEPTH_MAX: usize = 16;
/// Largest `.align` argument, in bytes.
pub const ALIGN_MAX: i64 = 1 << 16;
/// Longest source line, in bytes: a bound on the work and the memory a line can ask for.
pub const LINE_BYTES_MAX: usize = 4096;
/// Deepest expression tree (nested parentheses, unary signs and chained operators, counted as
/// the depth of the tree they build): evaluation and the tree's drop recurse to this depth.
pub const EXPR_DEPTH_MAX: u32 = 256;

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

/// An assembly error at a source position. Displays as `file:line:column: message`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{file}:{line}:{column}: {message}")]
pub struct AsmError {
    /// Source file name.
    pub file: String,
    /// Line, from 1.
    pub line: u32,
    /// Column (in characters), from 1.
    pub column: u32,
    /// What is wrong.
    pub message: String,
}

/// A source position.
#[derive(Debug, Clone)]
struct Loc {
    file: Rc<str>,
    line: u32,
    /// The line's text, to turn byte offsets into character columns.
    text: Rc<str>,
}

impl Loc {
    fn err(&self, byte_col: usize, message: impl Into<String>) -> AsmError {
        let column = self
            .text
            .get(..byte_col)
            .map_or(byte_col, |s| s.chars().count()) as u32
            + 1;
        AsmError {
            file: self.file.to_string(),
            line: self.line,
            column,
            message: message.into(),
        }
    }
}

type PResult<T> = Result<T, (usize, String)>;

// ---- lexer ----------------------------------------------------------------------------------

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Ident(String),
    /// `$mN` (`a == false`) or `$aN` / `$aN:M`.
    Reg {
        a: bool,
        lo: u32,
        hi: Option<u32>,
    },
    Int(i64),
    Str(String),
    Punct(&'static str),
}

#[derive(Debug, Clone)]
struct Token {
    tok: Tok,
    col: usize,
}

const PUNCTS: [&str; 20] = [
    "<<", ">>", "+=", ",", ":", ";", "{", "}", "(", ")", "+", "-", "*", "/", "%", "&", "|", "^",
    "~", "=",
];

fn describe(t: &Tok) -> String {
    match t {
        Tok::Ident(s) => format!("`{s}`"),
        Tok::Reg { a, lo, hi } => match hi {
            Some(h) => format!("register `${}{lo}:{h}`", if *a { 'a' } else { 'm' }),
            None => format!("register `${}{lo}`", if *a { 'a' } else { 'm' }),
        },
        Tok::Int(v) => format!("number {v}"),
        Tok::Str(s) => format!("string {s:?}"),
        Tok::Punct(p) => format!("`{p}`"),
    }
}

fn parse_int(text: &str) -> Option<i64> {
    let t: String = text.chars().filter(|&c| c != '_').collect();
    let (digits, radix) = if let Some(h) = t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        (h, 16)
    } else if let Some(b) = t.strip_prefix("0b").or_else(|| t.strip_prefix("0B")) {
        (b, 2)
    } else {
        (t.as_str(), 10)
    };
    if digits.is_empty() {
        return None;
    }
    // Accept up to u64 so that 0xFFFFFFFFFFFFFFFF style bit patterns parse; wrap into i64.
    u64::from_str_radix(digits, radix).ok().map(|v| v as i64)
}

fn is_ident_start(c: char) -> bool {
    c.is_ascii_alphabetic() || c == '_' || c == '.'
}
fn is_ident_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == '.'
}

/// Strips a comment (`#` or `//` to the end of the line), respecting string literals.
fn strip_comment(line: &str) -> &str {
    let bytes = line.as_bytes();
    let mut in_str = false;
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'"' => in_str = !in_str,
            b'\\' if in_str => i += 1,
            b'#' if !in_str => return &line[..i],
            b'/' if !in_str && bytes.get(i + 1) == Some(&b'/') => return &line[..i],
            _ => {}
        }
        i += 1;
    }
    line
}

fn lex(line: &str) -> PResult<Vec<Token>> {
    let mut out = Vec::new();
    let chars: Vec<(usize, char)> = line.char_indices().collect();
    let mut i = 0;
    let at = |i: usize| chars.get(i).map_or(line.len(), |&(b, _)| b);
    while i < chars.len() {
        let (col, c) = chars[i];
        if c.is_whitespace() {
            i += 1;
            continue;
        }
        if c == '$' {
            let kind = chars.get(i + 1).map(|&(_, c)| c);
            let a = match kind {
                Some('m') => false,
                Some('a') => true,
                _ => return Err((col, "expected a register `$mN` or `$aN`".into())),
            };
            let mut j = i + 2;
            while j < chars.len() && chars[j].1.is_ascii_digit() {
                j += 1;
            }
            let digits = &line[at(i + 2)..at(j)];
            let lo: u32 = digits
                .parse()
                .map_err(|_| (col, "expected a register number".into()))?;
            let mut hi = None;
            if a && chars.get(j).map(|c| c.1) == Some(':') {
                let mut k = j + 1;
                while k < chars.len() && chars[k].1.is_ascii_digit() {
                    k += 1;
                }
                let digits = &line[at(j + 1)..at(k)];
                hi = Some(digits.parse().map_err(|_| {
                    (
                        col,
                        "expected the last register of a pair or quad after `:`".to_string(),
                    )
                })?);
                j = k;
            }
            if chars.get(j).is_some_and(|c| is_ident_char(c.1)) {
                return Err((
                    col,
                    format!("malformed register `{}`", &line[col..at(j + 1)]),
                ));
            }
            out.push(Token {
                tok: Tok::Reg { a, lo, hi },
                col,
            });
            i = j;
            continue;
        }
        if c.is_ascii_digit() {
            let mut j = i;
            while j < chars.len() && (chars[j].1.is_ascii_alphanumeric() || chars[j].1 == '_') {
                j += 1;
            }
            let text = &line[col..at(j)];
            let v = parse_int(text)
                .ok_or_else(|| (col, format!("malformed or too large number `{text}`")))?;
            out.push(Token {
                tok: Tok::Int(v),
                col,
            });
            i = j;
            continue;
        }
        if is_ident_start(c) {
            let mut j = i;
            while j < chars.len() && is_ident_char(chars[j].1) {
                j += 1;
            }
            let word = &line[col..at(j)];
            out.push(Token {
                tok: Tok::Ident(word.to_string()),
                col,
            });
            if word.eq_ignore_ascii_case(".float") {
                // Float literals are not expression tokens: `.float` reads its raw text.
                return Ok(out);
            }
            i = j;
            continue;
        }
        if c == '"' {
            let mut s = String::new();
            let mut j = i + 1;
            loop {
                match chars.get(j) {
                    None => return Err((col, "unterminated string".into())),
                    Some((_, '"')) => break,
                    Some((_, '\\')) => {
                        match chars.get(j + 1) {
                            Some((_, c)) => s.push(*c),
                            None => return Err((col, "unterminated string".into())),
                        }
                        j += 2;
                    }
                    Some((_, c)) => {
                        s.push(*c);
                        j += 1;
                    }
                }
            }
            out.push(Token {
                tok: Tok::Str(s),
                col,
            });
            i = j + 1;
            continue;
        }
        let rest = &line[col..];
        match PUNCTS.iter().find(|p| rest.starts_with(**p)) {
            Some(p) => {
                out.push(Token {
                    tok: Tok::Punct(p),
                    col,
                });
                i += p.len();
            }
            None => return Err((col, format!("unexpected character `{c}`"))),
        }
    }
    Ok(out)
}

// ---- expressions ----------------------------------------------------------------------------

#[derive(Debug, Clone)]
enum Expr {
    Num(i64),
    Sym(String, usize),
    Here,
    Unary(char, Box<Expr>),
    Binary(&'static str, Box<Expr>, Box<Expr>, usize),
}

struct Parser<'a> {
    toks: &'a [Token],
    pos: usize,
    /// Byte column just past the end of the line, for "expected .. at end of line".
    end_col: usize,
    /// Open parentheses and pending signs around the current position.
    nesting: u32,
}

impl<'a> Parser<'a> {
    fn peek(&self) -> Option<&'a Tok> {
        self.toks.get(self.pos).map(|t| &t.tok)
    }
    fn col(&self) -> usize {
        self.toks.get(self.pos).map_or(self.end_col, |t| t.col)
    }
    fn is_punct(&self, p: &str) -> bool {
        matches!(self.peek(), Some(Tok::Punct(q)) if *q == p)
    }
    fn found(&self) -> String {
        self.peek().map_or("the end of the line".into(), describe)
    }

    fn expr(&mut self) -> PResult<Expr> {
        Ok(self.binary(0)?.0)
    }

    /// Refuses a tree deeper than [`EXPR_DEPTH_MAX`] at `col`.
    fn deeper(&self, depth: u32, col: usize) -> PResult<u32> {
        if depth > EXPR_DEPTH_MAX {
            return Err((
                col,
                format!(
                    "expression nested deeper than {EXPR_DEPTH_MAX} levels (parentheses, signs or chained operators)"
                ),
            ));
        }
        Ok(depth)
    }

    /// An expression whose operators bind at least as tightly as `min` (an index into
    /// `LEVELS`, loosest first), and the depth of its tree. Precedence climbing: one frame per
    /// operand of a tighter operator, so that parentheses cost three frames a level.
    fn binary(&mut self, min: usize) -> PResult<(Expr, u32)> {
        const LEVELS: [&[&str]; 6] = [
            &["|"],
            &["^"],
            &["&"],
            &["<<", ">>"],
            &["+", "-"],
            &["*", "/", "%"],
        ];
        let (mut lhs, mut depth) = self.unary()?;
        loop {
            let Some((op, level)) = (match self.peek() {
                Some(Tok::Punct(p)) => LEVELS
                    .iter()
                    .position(|ops| ops.contains(p))
                    .filter(|&l| l >= min)
                    .map(|l| (*p, l)),
                _ => None,
            }) else {
                return Ok((lhs, depth));
            };
            let col = self.col();
            self.pos += 1;
            let (rhs, d) = self.binary(level + 1)?;
            depth = self.deeper(depth.max(d) + 1, col)?;
            lhs = Expr::Binary(op, Box::new(lhs), Box::new(rhs), col);
        }
    }

    /// Parses nested signs and parentheses with an explicit count, so that the parser's own
    /// recursion is bounded by [`EXPR_DEPTH_MAX`] before it goes deeper.
    fn unary(&mut self) -> PResult<(Expr, u32)> {
        let mut signs = Vec::new();
        while let Some(c) = [("-", '-'), ("~", '~'), ("+", '+')]
            .iter()
            .find(|(p, _)| self.is_punct(p))
            .map(|(_, c)| *c)
        {
            self.deeper(self.nesting + signs.len() as u32 + 1, self.col())?;
            signs.push(c);
            self.pos += 1;
        }
        let col = self.col();
        self.nesting += signs.len() as u32;
        let (mut e, mut depth) = self.primary()?;
        self.nesting -= signs.len() as u32;
        for c in signs.into_iter().rev() {
            depth += 1;
            e = Expr::Unary(c, Box::new(e));
        }
        Ok((e, self.deeper(depth, col)?))
    }

    /// A number, a symbol, `.` or a parenthesised expression.
    fn primary(&mut self) -> PResult<(Expr, u32)> {
        let col = self.col();
        match self.peek() {
            Some(Tok::Int(v)) => {
                self.pos += 1;
                Ok((Expr::Num(*v), 1))
            }
            Some(Tok::Ident(s)) if s == "." => {
                self.pos += 1;
                Ok((Expr::Here, 1))
            }
            Some(Tok::Ident(s)) => {
                self.pos += 1;
                Ok((Expr::Sym(s.clone(), col), 1))
            }
            Some(Tok::Punct("(")) => {
                self.nesting += 1;
                self.deeper(self.nesting, col)?;
                self.pos += 1;
                let (e, depth) = self.binary(0)?;
                if !self.is_punct(")") {
                    return Err((self.col(), format!("expected `)`, found {}", self.found())));
                }
                self.pos += 1;
                self.nesting -= 1;
                Ok((e, depth))
            }
            _ => Err((
                col,
                format!("expected an expression, found {}", self.found()),
            )),
        }
    }
}

/// Symbol values visible to an evaluation.
struct Scope<'a> {
    symbols: &'a HashMap<String, i64>,
    here: i64,
    /// Appended to "undefined symbol" messages.
    hint: &'static str,
}

fn eval(e: &Expr, s: &Scope) -> PResult<i64> {
    Ok(match e {
        Expr::Num(v) => *v,
        Expr::Here => s.here,
        Expr::Sym(name, col) => match s.symbols.get(name) {
            Some(v) => *v,
            None => return Err((*col, format!("undefined symbol `{name}`{}", s.hint))),
        },
        Expr::Unary(op, x) => {
            let v = eval(x, s)?;
            match op {
                '-' => v.wrapping_neg(),
                '~' => !v,
                _ => v,
            }
        }
        Expr::Binary(op, l, r, col) => {
            let a = eval(l, s)?;
            let b = eval(r, s)?;
            match *op {
                "+" => a.wrapping_add(b),
                "-" => a.wrapping_sub(b),
                "*" => a.wrapping_mul(b),
                "/" | "%" if b == 0 => return Err((*col, "division by zero".into())),
                "/" => a.wrapping_div(b),
                "%" => a.wrapping_rem(b),
                "&" => a & b,
                "|" => a | b,
                "^" => a ^ b,
                "<<" | ">>" if !(0..64).contains(&b) => {
                    return Err((*col, format!("shift amount {b} is outside 0..=63")));
                }
                "<<" => a.wrapping_shl(b as u32),
                _ => a.wrapping_shr(b as u32),
            }
        }
    })
}

// ---- statements -----------------------------------------------------------------------------

#[derive(Debug, Clone)]
enum Operand {
    Reg {
        a: bool,
        lo: u32,
        hi: Option<u32>,
        col: usize,
    },
    PostInc {
        reg: u32,
        a: bool,
        inc: Expr,
        col: usize,
    },
    Expr(Expr, usize),
}

impl Operand {
    fn col(&self) -> usize {
        match self {
            Operand::Reg { col, .. } | Operand::PostInc { col, .. } | Operand::Expr(_, col) => *col,
        }
    }
    fn describe(&self) -> String {
        match self {
            Operand::Reg {
                a, lo, hi: Some(h), ..
            } => {
                format!("`${}{lo}:{h}`", if *a { 'a' } else { 'm' })
            }
            Operand::Reg { a, lo, .. } => format!("`${}{lo}`", if *a { 'a' } else { 'm' }),
            Operand::PostInc { .. } => "a post-increment address".into(),
            Operand::Expr(Expr::Sym(s, _), _) => format!("`{s}`"),
            Operand::Expr(..) => "an expression".into(),
        }
    }
}

#[derive(Debug, Clone)]
struct ParsedInstr {
    mnemonic: String,
    col: usize,
    operands: Vec<Operand>,
}

impl ParsedInstr {
    /// Words the instruction assembles to (pseudo-instruction `li` is two).
    fn words(&self) -> u32 {
        if self.mnemonic == "li" { 2 } else { 1 }
    }
}

#[derive(Debug)]
enum Body {
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
struct Stmt {
    loc: Loc,
    section: usize,
    offset: u32,
    body: Body,
}

struct SectionState {
    name: String,
    address: u32,
    size: u32,
    loc: Option<(Loc, usize)>,
    /// Whether a label was defined in the section.
    labelled: bool,
}

struct Assembler {
    sections: Vec<SectionState>,
    current: Option<usize>,
    base: u32,
    symbols: HashMap<String, i64>,
    labels: BTreeMap<String, u32>,
    /// Where each symbol was defined, for duplicate reports.
    defined_at: HashMap<String, String>,
    defines: HashMap<String, i64>,
    stmts: Vec<Stmt>,
}

fn split_commas(toks: &[Token]) -> Vec<&[Token]> {
    let mut parts = Vec::new();
    let mut depth = 0i32;
    let mut start = 0;
    for (i, t) in toks.iter().enumerate() {
        match t.tok {
            Tok::Punct("(") => depth += 1,
            Tok::Punct(")") => depth -= 1,
            Tok::Punct(",") if depth == 0 => {
                parts.push(&toks[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&toks[start..]);
    parts
}

fn parse_expr_all(toks: &[Token], end_col: usize) -> PResult<Expr> {
    if toks.is_empty() {
        return Err((end_col, "expected an expression".into()));
    }
    let mut p = Parser {
        toks,
        pos: 0,
        end_col,
        nesting: 0,
    };
    let e = p.expr()?;
    if p.pos != toks.len() {
        return Err((p.col(), format!("unexpected {} in expression", p.found())));
    }
    Ok(e)
}

fn parse_operand(toks: &[Token], end_col: usize) -> PResult<Operand> {
    let Some(first) = toks.first() else {
        return Err((end_col, "missing operand".into()));
    };
    if let Tok::Reg { a, lo, hi } = first.tok {
        if toks.len() == 1 {
            return Ok(Operand::Reg {
                a,
                lo,
                hi,
                col: first.col,
            });
        }
        if matches!(toks[1].tok, Tok::Punct("+=")) && hi.is_none() {
            let inc = parse_expr_all(&toks[2..], end_col)?;
            return Ok(Operand::PostInc {
                reg: lo,
                a,
                inc,
                col: first.col,
            });
        }
        return Err((
            toks[1].col,
            format!(
                "unexpected {} after a register (post-increment is `$mB+=imm`)",
                describe(&toks[1].tok)
            ),
        ));
    }
    Ok(Operand::Expr(parse_expr_all(toks, end_col)?, first.col))
}

/// The identifier `toks` starts with, and its column; otherwise the column to report at (the
/// first token's, or `end_col` on an empty line) and what stands there.
fn leading_ident(toks: &[Token], end_col: usize) -> Result<(&str, usize), (usize, String)> {
    match toks.first() {
        Some(Token {
            tok: Tok::Ident(name),
            col,
        }) => Ok((name, *col)),
        Some(t) => Err((t.col, describe(&t.tok))),
        None => Err((end_col, "the end of the line".into())),
    }
}

fn parse_instr(toks: &[Token], end_col: usize) -> PResult<ParsedInstr> {
    let (m, col) = leading_ident(toks, end_col).map_err(|(col, found)| {
        (
            col,
            format!("expected an instruction mnemonic, found {found}"),
        )
    })?;
    let mut operands = Vec::new();
    if toks.len() > 1 {
        let rest = &toks[1..];
        let parts = split_commas(rest);
        for (i, part) in parts.iter().enumerate() {
            // The column just past this part, for "missing operand".
            let part_end = if part.is_empty() {
                rest.iter()
                    .filter(|t| matches!(t.tok, Tok::Punct(",")))
                    .nth(i)
                    .map_or(end_col, |t| t.col)
            } else {
                end_col
            };
            operands.push(parse_operand(part, part_end)?);
        }
    }
    Ok(ParsedInstr {
        mnemonic: m.to_ascii_lowercase(),
        col,
        operands,
    })
}

impl Assembler {
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

    fn file(&mut self, source: &str, file: Rc<str>, depth: usize) -> Result<(), AsmError> {
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
                let bytes = std::fs::read(&full).map_err(|e| {
                    loc.err(*pcol, format!("cannot read `{}`: {e}", full.display()))
                })?;
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

// ---- instruction building (pass 2) -------------------------------------------------------

struct Ctx<'a> {
    loc: &'a Loc,
    scope: Scope<'a>,
}

struct Ops<'a, 'b> {
    ctx: &'b Ctx<'a>,
    p: &'b ParsedInstr,
}

impl Ops<'_, '_> {
    fn err(&self, col: usize, m: impl Into<String>) -> AsmError {
        self.ctx.loc.err(col, m)
    }

    /// The value of `e` in the instruction's scope.
    fn eval(&self, e: &Expr) -> Result<i64, AsmError> {
        eval(e, &self.ctx.scope).map_err(|(c, m)| self.err(c, m))
    }

    fn count(&self, n: &[usize], form: &str) -> Result<(), AsmError> {
        if !n.contains(&self.p.operands.len()) {
            let col = self
                .p
                .operands
                .get(n.iter().copied().max().unwrap_or(0))
                .map_or(self.p.col, Operand::col);
            return Err(self.err(
                col,
                format!(
                    "`{}` takes {} operand(s), got {}: `{form}`",
                    self.p.mnemonic,
                    n.iter()
                        .map(|x| x.to_string())
                        .collect::<Vec<_>>()
                        .join(" or "),
                    self.p.operands.len()
                ),
            ));
        }
        Ok(())
    }

    fn op(&self, i: usize) -> &Operand {
        &self.p.operands[i]
    }

    fn kind_err(&self, i: usize, expected: &str) -> AsmError {
        let o = self.op(i);
        self.err(
            o.col(),
            format!(
                "operand {} of `{}`: expected {expected}, found {}",
                i + 1,
                self.p.mnemonic,
                o.describe()
            ),
        )
    }

    fn check_index(&self, col: usize, a: bool, lo: u32) -> Result<u8, AsmError> {
        if lo >= REGISTERS_PER_FILE as u32 {
            return Err(self.err(
                col,
                format!(
                    "register ${}{lo} does not exist (0..=15)",
                    if a { 'a' } else { 'm' }
                ),
            ));
        }
        Ok(lo as u8)
    }

    fn m(&self, i: usize) -> Result<MReg, AsmError> {
        match *self.op(i) {
            Operand::Reg {
                a: false,
                lo,
                hi: None,
                col,
            } => Ok(MReg(self.check_index(col, false, lo)?)),
            _ => Err(self.kind_err(i, "an integer register `$mN`")),
        }
    }

    fn is_m(&self, i: usize) -> bool {
        matches!(self.op(i), Operand::Reg { a: false, .. })
    }
    fn is_reg(&self, i: usize) -> bool {
        matches!(self.op(i), Operand::Reg { .. })
    }
    fn a_count(&self, i: usize) -> Option<u32> {
        match *self.op(i) {
            Operand::Reg {
                a: true, lo, hi, ..
            } => Some(hi.map_or(1, |h| h.wrapping_sub(lo).wrapping_add(1))),
            _ => None,
        }
    }

    /// Operands `0..N`, each a float register operand of `n` registers (see [`Self::a`]).
    fn a_all<const N: usize>(&self, n: u32) -> Result<[u8; N], AsmError> {
        let mut regs = [0; N];
        for (i, r) in regs.iter_mut().enumerate() {
            *r = self.a(i, n)?;
        }
        Ok(regs)
    }

    /// A float register operand of `n` registers (1, 2 or 4), returning the lowest index.
    fn a(&self, i: usize, n: u32) -> Result<u8, AsmError> {
        let what = match n {
            1 => "a float register `$aN`",
            2 => "a float register pair `$aN:N+1` (N even)",
            _ => "a float register quad `$aN:N+3` (N a multiple of 4)",
        };
        let Operand::Reg {
            a: true,
            lo,
            hi,
            col,
        } = *self.op(i)
        else {
            return Err(self.kind_err(i, what));
        };
        let lo8 = self.check_index(col, true, lo)?;
        let count = hi.map_or(1, |h| h.wrapping_sub(lo).wrapping_add(1));
        if count != n {
            return Err(self.kind_err(i, what));
        }
        if lo % n != 0 {
            return Err(self.err(
                col,
                format!(
                    "misaligned register {}: `$a{lo}:{}` must start at a multiple of {n}",
                    if n == 2 { "pair" } else { "quad" },
                    lo + n - 1
                ),
            ));
        }
        if lo + n > REGISTERS_PER_FILE as u32 {
            return Err(self.err(
                col,
                format!("register $a{} does not exist (0..=15)", lo + n - 1),
            ));
        }
        Ok(lo8)
    }

    fn value(&self, i: usize) -> Result<(i64, usize), AsmError> {
        match self.op(i) {
            Operand::Expr(e, col) => Ok((self.eval(e)?, *col)),
            _ => Err(self.kind_err(i, "an immediate value")),
        }
    }

    fn imm(&self, i: usize, min: i64, max: i64, what: &str) -> Result<i64, AsmError> {
        let (v, col) = self.value(i)?;
        if v < min || v > max {
            return Err(self.err(
                col,
                format!(
                    "{what} {v} ({v:#x}) is out of range {min}..={max} for `{}`",
                    self.p.mnemonic
                ),
            ));
        }
        Ok(v)
    }

    fn target(&self, i: usize) -> Result<u32, AsmError> {
        let (v, col) = self.value(i)?;
        if !(0..TARGET_LIMIT as i64).contains(&v) {
            return Err(self.err(
                col,
                format!(
                    "branch target {v:#x} is out of range 0..={:#x}",
                    TARGET_LIMIT - 4
                ),
            ));
        }
        if v % 4 != 0 {
            return Err(self.err(col, format!("branch target {v:#x} is not 4-byte aligned")));
        }
        Ok(v as u32)
    }

    fn name(&self, i: usize, what: &str, names: &[&str]) -> Result<usize, AsmError> {
        if let Operand::Expr(Expr::Sym(s, _), col) = self.op(i) {
            if let Some(k) = names.iter().position(|n| n.eq_ignore_ascii_case(s)) {
                return Ok(k);
            }
            return Err(self.err(
                *col,
                format!(
                    "unknown {what} `{s}` (expected one of: {})",
                    names.join(", ")
                ),
            ));
        }
        Err(self.kind_err(i, &format!("{what} ({})", names.join(", "))))
    }

    /// The operand at `i` if it is an integer post-increment `$mN+=imm`: the register's number
    /// (not yet checked), the increment and the column.
    fn m_post_inc(&self, i: usize) -> Option<(u32, &Expr, usize)> {
        match self.op(i) {
            Operand::PostInc {
                reg,
                a: false,
                inc,
                col,
            } => Some((*reg, inc, *col)),
            _ => None,
        }
    }

    /// `$mB, imm` (two operands from `i`), `$mB` alone, or `$mB+=imm`.
    fn address(&self, i: usize, step: bool) -> Result<(MReg, AddrMode), AsmError> {
        let n = self.p.operands.len();
        if let Some((reg, inc, col)) = self.m_post_inc(i) {
            if n != i + 1 {
                return Err(self.err(
                    self.op(i + 1).col(),
                    "unexpected operand after a post-increment address",
                ));
            }
            let base = MReg(self.check_index(col, false, reg)?);
            let v = self.eval(inc)?;
            let v = i16_or_err(self, v, col, "post-increment")?;
            return Ok((base, AddrMode::PostInc(v)));
        }
        match self.op(i) {
            Operand::Reg { a: false, .. } if !step => {
                let base = self.m(i)?;
                let off = if n > i + 1 {
                    if n > i + 2 {
                        return Err(self.err(self.op(i + 2).col(), "too many operands"));
                    }
                    self.imm(i + 1, i16::MIN as i64, i16::MAX as i64, "offset")? as i16
                } else {
                    0
                };
                Ok((base, AddrMode::Offset(off)))
            }
            _ if step => Err(self.kind_err(i, "a post-increment address `$mB+=imm`")),
            _ => Err(self.kind_err(i, "an address `$mB, imm` or `$mB+=imm`")),
        }
    }

    fn pace(&self, i: usize) -> Result<MReg, AsmError> {
        let Some((reg, inc, col)) = self.m_post_inc(i) else {
            return Err(self.kind_err(i, "a post-increment pointer `$mP+=8`"));
        };
        let v = self.eval(inc)?;
        if v != 8 {
            return Err(self.err(
                col,
                format!("paced accesses advance by 8, not {v}: write `$m{reg}+=8`"),
            ));
        }
        Ok(MReg(self.check_index(col, false, reg)?))
    }
}

fn i16_or_err(o: &Ops, v: i64, col: usize, what: &str) -> Result<i16, AsmError> {
    i16::try_from(v).map_err(|_| {
        o.err(
            col,
            format!(
                "{what} {v} is out of range {}..={} for `{}`",
                i16::MIN,
                i16::MAX,
                o.p.mnemonic
            ),
        )
    })
}

const SIMPLE: [(&str, Instr); 5] = [
    ("nop", Instr::Nop),
    ("waitw", Instr::WaitW),
    ("sync", Instr::Sync),
    ("halt", Instr::Halt),
    ("exit", Instr::Exit),
];

/// Every mnemonic the assembler accepts (for suggestions and the documentation).
pub fn mnemonics() -> Vec<String> {
    let mut v: Vec<String> = SIMPLE.iter().map(|(m, _)| m.to_string()).collect();
    v.extend(AluOp::ALL.iter().map(|o| o.mnemonic().to_string()));
    for m in [
        "setzi",
        "orhi",
        "get",
        "mov",
        "li",
        "ld2x64pace",
        "ldst64pace",
        "ld2xst64pace",
        "br",
        "bri",
        "brz",
        "brnz",
        "brnzdec",
        "call",
        "rpt",
        "setfp8",
        "f16v2pack",
        "f16v2packhi",
        "amp",
        "run",
        "exch",
        "hostx",
        "mark",
        "ampcfg",
        "ampw",
    ] {
        v.push(m.into());
    }
    for w in [Width::B8, Width::B16, Width::B32, Width::B64, Width::B128] {
        v.push(text::load_mnemonic(w).into());
        v.push(format!("{}step", text::load_mnemonic(w)));
        if w != Width::B128 {
            v.push(text::store_mnemonic(w).into());
            v.push(format!("{}step", text::store_mnemonic(w)));
        }
    }
    for ty in FType::ALL {
        v.extend(
            FBinOp::ALL
                .iter()
                .map(|o| format!("{}{}", ty.prefix(), o.suffix())),
        );
        v.extend(
            FUnOp::ALL
                .iter()
                .map(|o| format!("{}{}", ty.prefix(), o.suffix())),
        );
        if ty.is_pair() {
            v.push(format!("{}sum", ty.prefix()));
            v.push(format!("{}bcast", ty.prefix()));
        }
    }
    v.extend(ConvOp::ALL.iter().map(|o| o.mnemonic().to_string()));
    v.sort();
    v.dedup();
    v
}

fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1];
        for (j, cb) in b.iter().enumerate() {
            let sub = prev[j] + usize::from(ca != *cb);
            cur.push(sub.min(prev[j + 1] + 1).min(cur[j] + 1));
        }
        prev = cur;
    }
    prev[b.len()]
}

fn suggestion(m: &str) -> String {
    let best = mnemonics()
        .into_iter()
        .map(|c| (edit_distance(m, &c), c))
        .min();
    match best {
        Some((d, c)) if d <= 2 => format!(" (did you mean `{c}`?)"),
        _ => String::new(),
    }
}

fn parse_ftype(m: &str) -> Option<(FType, &str)> {
    // Longest prefix first: f32v2 before f32.
    for ty in [FType::F32v2, FType::F16v2, FType::F16v4, FType::F32] {
        if let Some(rest) = m.strip_prefix(ty.prefix()) {
            return Some((ty, rest));
        }
    }
    None
}

fn build(ctx: &Ctx, p: &ParsedInstr) -> Result<Vec<Instr>, AsmError> {
    use Instr::*;
    let o = Ops { ctx, p };
    let m = p.mnemonic.as_str();
    let one = |i: Instr| Ok(vec![i]);
    if let Some((_, i)) = SIMPLE.iter().find(|(n, _)| *n == m) {
        o.count(&[0], m)?;
        return one(*i);
    }
    if let Some(&op) = AluOp::ALL.iter().find(|a| a.mnemonic() == m) {
        o.count(&[3], &format!("{m} $mD, $mA, $mB|imm"))?;
        let (d, a) = (o.m(0)?, o.m(1)?);
        if o.is_reg(2) {
            return one(Alu {
                op,
                d,
                a,
                b: o.m(2)?,
            });
        }
        let imm = o.imm(2, i16::MIN as i64, i16::MAX as i64, "immediate")? as i16;
        return one(AluImm { op, d, a, imm });
    }
    if let Some(&op) = ConvOp::ALL.iter().find(|c| c.mnemonic() == m) {
        o.count(&[2], m)?;
        return one(Conv {
            op,
            d: o.a(0, op.dst_regs() as u32)?,
            a: o.a(1, op.src_regs() as u32)?,
        });
    }
    // Loads and stores.
    let (base_m, step) = match m.strip_suffix("step") {
        Some(b) => (b, true),
        None => (m, false),
    };
    let load = [Width::B8, Width::B16, Width::B32, Width::B64, Width::B128]
        .into_iter()
        .find(|w| text::load_mnemonic(*w) == base_m);
    let store = [Width::B8, Width::B16, Width::B32, Width::B64]
        .into_iter()
        .find(|w| text::store_mnemonic(*w) == base_m);
    if base_m == "st128" {
        return Err(o.err(p.col, "there is no 128-bit store (`st128`); use two `st64`"));
    }
    if let Some(width) = load.or(store) {
        o.count(&[2, 3], &format!("{m} REG, $mB, imm"))?;
        let reg = match width {
            Width::B8 | Width::B16 => DataReg::M(o.m(0)?),
            Width::B32 if o.is_m(0) => DataReg::M(o.m(0)?),
            Width::B32 => DataReg::A(o.a(0, 1).map_err(|_| o.kind_err(0, "`$mN` or `$aN`"))?),
            Width::B64 => DataReg::A(o.a(0, 2)?),
            Width::B128 => DataReg::A(o.a(0, 4)?),
        };
        let (base, mode) = o.address(1, step)?;
        return one(if load.is_some() {
            Load {
                width,
                d: reg,
                base,
                mode,
            }
        } else {
            Store {
                width,
                s: reg,
                base,
                mode,
            }
        });
    }
    match m {
        "setzi" => {
            o.count(&[2], "setzi $mD, imm")?;
            let imm = o.imm(1, 0, SETZI_LIMIT as i64 - 1, "immediate")? as u32;
            one(Setzi { d: o.m(0)?, imm })
        }
        "orhi" => {
            o.count(&[2], "orhi $mD, imm")?;
            one(Orhi {
                d: o.m(0)?,
                imm: o.imm(1, 0, 0xFFFF, "immediate")? as u16,
            })
        }
        "li" => {
            o.count(&[2], "li $mD, imm")?;
            let d = o.m(0)?;
            let v = o.imm(1, i32::MIN as i64, u32::MAX as i64, "immediate")? as u32;
            Ok(vec![
                Setzi { d, imm: v & 0xFFFF },
                Orhi {
                    d,
                    imm: (v >> 16) as u16,
                },
            ])
        }
        "get" => {
            o.count(&[2], "get $mD, tileid|contextid|cycles")?;
            let names = ["tileid", "contextid", "cycles"];
            let sys = [SysReg::TileId, SysReg::ContextId, SysReg::Cycles];
            one(Get {
                d: o.m(0)?,
                sys: sys[o.name(1, "system register", &names)?],
            })
        }
        "mov" => {
            o.count(
                &[2],
                "mov $aD, $mA | mov $mD, $aA | mov $mD, $mA | mov $aD, $aA",
            )?;
            if let Some(x) = (0..2).find(|&i| !o.is_reg(i)) {
                return Err(o.err(
                    o.op(x).col(),
                    "`mov` copies a register; use `setzi` or `li` to load a value",
                ));
            }
            match (o.is_m(0), o.is_m(1)) {
                (false, true) => one(MovToA {
                    d: AReg(o.a(0, 1)?),
                    a: o.m(1)?,
                }),
                (true, false) => one(MovToM {
                    d: o.m(0)?,
                    a: AReg(o.a(1, 1)?),
                }),
                (true, true) => one(AluImm {
                    op: AluOp::Or,
                    d: o.m(0)?,
                    a: o.m(1)?,
                    imm: 0,
                }),
                (false, false) => {
                    let pair = o.a_count(0) == Some(2);
                    let (ty, n) = if pair {
                        (FType::F32v2, 2)
                    } else {
                        (FType::F32, 1)
                    };
                    let [d, a] = o.a_all(n)?;
                    one(FUn {
                        ty,
                        op: FUnOp::Mov,
                        d,
                        a,
                    })
                }
            }
        }
        "ld2x64pace" | "ldst64pace" => {
            let load2 = m == "ld2x64pace";
            o.count(
                &[4],
                if load2 {
                    "ld2x64pace $aD0:, $aD1:, $mP0+=8, $mP1+=8"
                } else {
                    "ldst64pace $aD:, $aS:, $mP0+=8, $mP1+=8"
                },
            )?;
            let (x, y) = (APair(o.a(0, 2)?), APair(o.a(1, 2)?));
            let (p0, p1) = (o.pace(2)?, o.pace(3)?);
            let p = [p0, p1];
            one(if load2 {
                Ld2x64Pace { d: [x, y], p }
            } else {
                LdSt64Pace { d: x, s: y, p }
            })
        }
        "ld2xst64pace" => {
            o.count(
                &[6],
                "ld2xst64pace $aD0:, $aD1:, $aS:, $mP0+=8, $mP1+=8, $mP2+=8",
            )?;
            one(Ld2xSt64Pace {
                d: [APair(o.a(0, 2)?), APair(o.a(1, 2)?)],
                s: APair(o.a(2, 2)?),
                p: [o.pace(3)?, o.pace(4)?, o.pace(5)?],
            })
        }
        "br" => {
            o.count(&[1], "br $mA")?;
            one(Br { a: o.m(0)? })
        }
        "bri" => {
            o.count(&[1], "bri TARGET")?;
            one(Bri {
                target: o.target(0)?,
            })
        }
        "brz" | "brnz" | "brnzdec" | "call" => {
            o.count(&[2], &format!("{m} $mA, TARGET"))?;
            let (a, target) = (o.m(0)?, o.target(1)?);
            one(match m {
                "brz" => Brz { a, target },
                "brnz" => Brnz { a, target },
                "brnzdec" => Brnzdec { a, target },
                _ => Call { link: a, target },
            })
        }
        "rpt" => {
            o.count(&[2], "rpt $mA|COUNT, BODY_SLOTS")?;
            let body = o.imm(1, 1, RPT_BODY_MAX as i64, "body length")? as u8;
            if o.is_reg(0) {
                return one(Rpt {
                    count: o.m(0)?,
                    body,
                });
            }
            let count = o.imm(0, 0, ipu_target::RPT_COUNT_MAX as i64, "count")? as u16;
            one(Rpti { count, body })
        }
        "setfp8" => {
            o.count(&[2], "setfp8 f143|f152, SCALE")?;
            let f =
                [Fp8Format::F143, Fp8Format::F152][o.name(0, "FP8 format", &["f143", "f152"])?];
            let scale = o.imm(1, FP8_SCALE_MIN as i64, FP8_SCALE_MAX as i64, "scale")? as i8;
            one(SetFp8 { format: f, scale })
        }
        "f16v2pack" => {
            o.count(&[3], "f16v2pack $aD, $aA, $aB")?;
            one(F16v2Pack {
                d: AReg(o.a(0, 1)?),
                a: AReg(o.a(1, 1)?),
                b: AReg(o.a(2, 1)?),
            })
        }
        "f16v2packhi" => {
            o.count(&[3], "f16v2packhi $aD, $aA, $aB")?;
            one(F16v2PackHi {
                d: AReg(o.a(0, 1)?),
                a: AReg(o.a(1, 1)?),
                b: AReg(o.a(2, 1)?),
            })
        }
        "amp" => {
            o.count(&[4], "amp $aD:, $aA:, $aP:, PHASE")?;
            let (d, a, pp) = (o.a(0, 2)?, o.a(1, 2)?, o.a(2, 2)?);
            let phase = o.imm(3, 0, encoding::AMP_PHASES as i64 - 1, "phase")? as u8;
            one(Amp {
                d: APair(d),
                a: APair(a),
                p: APair(pp),
                phase,
            })
        }
        "run" => {
            o.count(&[2], "run $mE, $mS")?;
            one(Run {
                entry: o.m(0)?,
                state: o.m(1)?,
            })
        }
        "runall" => {
            o.count(&[2], "runall $mE, $mS")?;
            one(RunAll {
                entry: o.m(0)?,
                state: o.m(1)?,
            })
        }
        "exch" | "hostx" | "ampw" => {
            o.count(&[1], &format!("{m} $mA"))?;
            let r = o.m(0)?;
            one(match m {
                "exch" => Exch { table: r },
                "hostx" => HostX { table: r },
                _ => AmpW { base: r },
            })
        }
        "mark" => {
            o.count(&[1], "mark ID")?;
            one(Mark {
                id: o.imm(0, 0, 0xFFFF, "mark id")? as u16,
            })
        }
        "ampcfg" => {
            o.count(&[1], "ampcfg f16f16|f16f32|f32f32|f8f16")?;
            let names: Vec<&str> = AmpMode::ALL
                .iter()
                .map(|m| text::amp_mode_name(*m))
                .collect();
            one(AmpCfg {
                mode: AmpMode::ALL[o.name(0, "AMP mode", &names)?],
            })
        }
        _ => {
            if let Some((ty, suffix)) = parse_ftype(m) {
                let n = if ty.is_pair() { 2 } else { 1 };
                // Reductions and broadcasts exist for the pair types only.
                let pair_only = |what: &str| {
                    if ty.is_pair() {
                        Ok(())
                    } else {
                        Err(o.err(
                            p.col,
                            format!("`{m}`: {what} exist for f32v2 and f16v4 only"),
                        ))
                    }
                };
                let red = match suffix {
                    "sum" => Some(RedOp::Sum),
                    "max" if p.operands.len() == 2 && ty.is_pair() => Some(RedOp::Max),
                    _ => None,
                };
                if let Some(op) = red {
                    pair_only("reductions")?;
                    o.count(&[2], &format!("{m} $aD, $aA:B"))?;
                    return one(FReduce {
                        ty,
                        op,
                        d: AReg(o.a(0, 1)?),
                        a: APair(o.a(1, 2)?),
                    });
                }
                if suffix == "bcast" {
                    pair_only("broadcasts")?;
                    o.count(&[2], &format!("{m} $aD:E, $aA"))?;
                    return one(Bcast {
                        ty,
                        d: APair(o.a(0, 2)?),
                        a: AReg(o.a(1, 1)?),
                    });
                }
                if let Some(&op) = FBinOp::ALL.iter().find(|x| x.suffix() == suffix) {
                    o.count(&[3], &format!("{m} D, A, B"))?;
                    let [d, a, b] = o.a_all(n)?;
                    return one(FBin { ty, op, d, a, b });
                }
                if let Some(&op) = FUnOp::ALL.iter().find(|x| x.suffix() == suffix) {
                    o.count(&[2], &format!("{m} D, A"))?;
                    let [d, a] = o.a_all(n)?;
                    return one(FUn { ty, op, d, a });
                }
            }
            Err(o.err(p.col, format!("unknown instruction `{m}`{}", suggestion(m))))
        }
    }
}

fn encode_at(loc: &Loc, col: usize, i: &Instr) -> Result<u32, AsmError> {
    encoding::encode(i).map_err(|e| loc.err(col, format!("invalid instruction `{i}`: {e}")))
}

/// Assembles `source` (named `file_name` in errors and for `.include`) into an object.
pub fn assemble(source: &str, file_name: &str, options: &AsmOptions) -> Result<Object, AsmError> {
    let mut asm = Assembler {
        sections: Vec::new(),
        current: None,
        base: options.base,
        symbols: HashMap::new(),
        labels: BTreeMap::new(),
        defined_at: HashMap::new(),
        defines: HashMap::new(),
        stmts: Vec::new(),
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
