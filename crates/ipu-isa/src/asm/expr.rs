//! Expressions: their parser (precedence climbing, depth-bounded) and their evaluation.

use std::collections::HashMap;

use super::error::PResult;
use super::lexer::{Tok, Token, describe};

/// Deepest expression tree (nested parentheses, unary signs and chained operators, counted as
/// the depth of the tree they build): evaluation and the tree's drop recurse to this depth.
pub const EXPR_DEPTH_MAX: u32 = 256;

#[derive(Debug, Clone)]
pub(super) enum Expr {
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

pub(super) fn parse_expr_all(toks: &[Token], end_col: usize) -> PResult<Expr> {
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

/// Symbol values visible to an evaluation.
pub(super) struct Scope<'a> {
    pub(super) symbols: &'a HashMap<String, i64>,
    pub(super) here: i64,
    /// Appended to "undefined symbol" messages.
    pub(super) hint: &'static str,
}

pub(super) fn eval(e: &Expr, s: &Scope) -> PResult<i64> {
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
