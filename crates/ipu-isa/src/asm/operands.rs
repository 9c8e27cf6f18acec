//! Operands: their syntax (parsed in pass 1) and their typed, range-checked values as an
//! instruction is built (pass 2).

use super::error::{AsmError, Loc, PResult};
use super::expr::{Expr, Scope, eval, parse_expr_all};
use super::lexer::{Tok, Token, describe};
use crate::encoding::TARGET_LIMIT;
use crate::instr::*;

#[derive(Debug, Clone)]
pub(super) enum Operand {
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
    pub(super) fn col(&self) -> usize {
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
pub(super) struct ParsedInstr {
    pub(super) mnemonic: String,
    pub(super) col: usize,
    pub(super) operands: Vec<Operand>,
}

impl ParsedInstr {
    /// Words the instruction assembles to (pseudo-instruction `li` is two).
    pub(super) fn words(&self) -> u32 {
        if self.mnemonic == "li" { 2 } else { 1 }
    }
}

pub(super) fn split_commas(toks: &[Token]) -> Vec<&[Token]> {
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
pub(super) fn leading_ident(
    toks: &[Token],
    end_col: usize,
) -> Result<(&str, usize), (usize, String)> {
    match toks.first() {
        Some(Token {
            tok: Tok::Ident(name),
            col,
        }) => Ok((name, *col)),
        Some(t) => Err((t.col, describe(&t.tok))),
        None => Err((end_col, "the end of the line".into())),
    }
}

pub(super) fn parse_instr(toks: &[Token], end_col: usize) -> PResult<ParsedInstr> {
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

pub(super) struct Ctx<'a> {
    pub(super) loc: &'a Loc,
    pub(super) scope: Scope<'a>,
}

pub(super) struct Ops<'a, 'b> {
    pub(super) ctx: &'b Ctx<'a>,
    pub(super) p: &'b ParsedInstr,
}

impl Ops<'_, '_> {
    pub(super) fn err(&self, col: usize, m: impl Into<String>) -> AsmError {
        self.ctx.loc.err(col, m)
    }

    /// The value of `e` in the instruction's scope.
    fn eval(&self, e: &Expr) -> Result<i64, AsmError> {
        eval(e, &self.ctx.scope).map_err(|(c, m)| self.err(c, m))
    }

    pub(super) fn count(&self, n: &[usize], form: &str) -> Result<(), AsmError> {
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

    pub(super) fn op(&self, i: usize) -> &Operand {
        &self.p.operands[i]
    }

    pub(super) fn kind_err(&self, i: usize, expected: &str) -> AsmError {
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

    pub(super) fn m(&self, i: usize) -> Result<MReg, AsmError> {
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

    pub(super) fn is_m(&self, i: usize) -> bool {
        matches!(self.op(i), Operand::Reg { a: false, .. })
    }
    pub(super) fn is_reg(&self, i: usize) -> bool {
        matches!(self.op(i), Operand::Reg { .. })
    }
    pub(super) fn a_count(&self, i: usize) -> Option<u32> {
        match *self.op(i) {
            Operand::Reg {
                a: true, lo, hi, ..
            } => Some(hi.map_or(1, |h| h.wrapping_sub(lo).wrapping_add(1))),
            _ => None,
        }
    }

    /// Operands `0..N`, each a float register operand of `n` registers (see [`Self::a`]).
    pub(super) fn a_all<const N: usize>(&self, n: u32) -> Result<[u8; N], AsmError> {
        let mut regs = [0; N];
        for (i, r) in regs.iter_mut().enumerate() {
            *r = self.a(i, n)?;
        }
        Ok(regs)
    }

    /// A float register operand of `n` registers (1, 2 or 4), returning the lowest index.
    pub(super) fn a(&self, i: usize, n: u32) -> Result<u8, AsmError> {
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

    pub(super) fn imm(&self, i: usize, min: i64, max: i64, what: &str) -> Result<i64, AsmError> {
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

    pub(super) fn target(&self, i: usize) -> Result<u32, AsmError> {
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

    pub(super) fn name(&self, i: usize, what: &str, names: &[&str]) -> Result<usize, AsmError> {
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
    pub(super) fn address(&self, i: usize, step: bool) -> Result<(MReg, AddrMode), AsmError> {
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

    pub(super) fn pace(&self, i: usize) -> Result<MReg, AsmError> {
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
