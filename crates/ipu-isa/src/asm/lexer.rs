//! The lexer: one source line to tokens, each with its byte column.

use super::error::PResult;

#[derive(Debug, Clone, PartialEq)]
pub(super) enum Tok {
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
pub(super) struct Token {
    pub(super) tok: Tok,
    pub(super) col: usize,
}

const PUNCTS: [&str; 20] = [
    "<<", ">>", "+=", ",", ":", ";", "{", "}", "(", ")", "+", "-", "*", "/", "%", "&", "|", "^",
    "~", "=",
];

pub(super) fn describe(t: &Tok) -> String {
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
pub(super) fn strip_comment(line: &str) -> &str {
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

pub(super) fn lex(line: &str) -> PResult<Vec<Token>> {
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
