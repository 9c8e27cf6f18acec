//! The text form of graphs: the file format users write models in.
//!
//! ```text
//! # comments start with '#' or '//' and run to the end of the line
//! graph matmul {
//!   input %a: f16[64, 128]
//!   input %b: f16[128, 32]
//!   %c = matmul(%a, %b) {partials = f32}: f16[64, 32]
//!   output %c
//! }
//! ```
//!
//! Types are `dtype[d0, d1, ...]` with dtype `f32`, `f16`, `f143@S` or `f152@S` (FP8 with its
//! power-of-two scale `S`; `f143` alone means scale 0). Every operation line names its result,
//! the mnemonic, the operands, the attributes in braces (omitted when there are none) and the
//! result type. For `matmul`, `attention` and `flash_attention` the output dtype is the one in
//! the result type; for every other operation the result type must equal the inferred one.
//! Attributes (all required):
//!
//! | mnemonic | attributes |
//! |---|---|
//! | matmul | partials |
//! | transpose | perm = [..] |
//! | reshape | shape = [..] |
//! | slice | axis, start, end |
//! | concat, reduce_max, reduce_sum, softmax | axis |
//! | scale | factor |
//! | cast | to |
//! | layer_norm | epsilon |
//! | attention | scale, causal, partials |
//! | flash_attention | scale, causal, block_q, block_k, partials |
//! | add, sub, mul, div, max, exp, sqrt, tanh, erf | none |
//!
//! Constants are declared like inputs, with their data after `=`: an inline literal of the
//! elements in row-major order for small ones (at most [`INLINE_CONSTANT_ELEMENTS_MAX`]
//! elements), or a reference to a NumPy `.npy` file for large ones:
//!
//! ```text
//! graph linear {
//!   input %x: f32[2, 4]
//!   const %w: f32[4, 3] = file("w.npy")
//!   const %b: f32[1, 3] = [0.5, -1.0, 2.25]
//!   %xw = matmul(%x, %w) {partials = f32}: f32[2, 3]
//!   %y = add(%xw, %b): f32[2, 3]
//!   output %y
//! }
//! ```
//!
//! Literal elements are decimal numbers, `inf`, `-inf` or `nan`; for f16 and FP8 each must be
//! exactly a value of the dtype (FP8 values include the dtype's scale), so the codes survive a
//! round trip exactly. A `.npy` file holds the constant's shape with dtype `<f4` for f32, `<f2`
//! for f16 and `|u1` for FP8 (the codes), C order; file names are relative paths without `..`,
//! resolved by the caller ([`parse_with`] takes the resolver; [`print_with_files`] returns the
//! files to write). A constant holding a NaN other than the dtype's canonical quiet NaN is
//! always written to a file, which keeps its bits.
//!
//! Lines appear in value order: inputs, constants and operations as they were added.
//! [`print`] writes the canonical form; `parse(print(g))` gives back `g` exactly.

use std::collections::HashMap;
use std::fmt::Write as _;

use ipu_numerics::Overflow;

use crate::{
    ConstantData, DType, Graph, GraphBuilder, MapFn, OpKind, TensorType, UnaryFn, ValueId,
    decode_elements, infer,
};

/// Constants with at most this many elements print as inline literals; larger ones print as a
/// `file("NAME.npy")` reference. 16 elements fit on one line of the text form and cover the
/// scalars and small vectors a model carries (epsilons, shifts, masks of a few keys), while a
/// weight matrix goes to a file.
pub const INLINE_CONSTANT_ELEMENTS_MAX: usize = 16;

/// A constant [`print_with_files`] referenced as a file: the caller writes `data` (of type
/// `ty`) as a `.npy` file named `file_name` beside the text.
#[derive(Debug, Clone, PartialEq)]
pub struct ConstantFile {
    /// The file name in the text (`NAME.npy`, NAME the value's name).
    pub file_name: String,
    /// The constant's value.
    pub value: ValueId,
    /// Its type.
    pub ty: TensorType,
    /// Its elements in device layout (see [`crate::Constant`]).
    pub data: ConstantData,
}

/// The text of a graph and the constant files it references.
#[derive(Debug, Clone, PartialEq)]
pub struct PrintedGraph {
    /// The text form.
    pub text: String,
    /// The files the text references, in text order.
    pub files: Vec<ConstantFile>,
}

/// A constant's external reference met by [`parse_with`], handed to the resolver.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ExternalConstant<'a> {
    /// The value name.
    pub value: &'a str,
    /// The file name as written (a relative path without `..`).
    pub file_name: &'a str,
    /// The declared type.
    pub ty: &'a TensorType,
}

/// A syntax or type error in a graph file, with its position.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{file}:{line}:{column}: {reason}")]
pub struct ParseError {
    /// File name as given to [`parse`].
    pub file: String,
    /// 1-based line.
    pub line: usize,
    /// 1-based column (in characters).
    pub column: usize,
    /// What is wrong.
    pub reason: String,
}

/// True for names usable as graph and value names: `[A-Za-z0-9_.-]+` not starting with `-`.
pub(crate) fn is_identifier(s: &str) -> bool {
    !s.is_empty()
        && !s.starts_with('-')
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'))
}

fn fmt_f32(x: f32) -> String {
    format!("{x:?}")
}

fn fmt_list(xs: &[usize]) -> String {
    let items: Vec<String> = xs.iter().map(|x| x.to_string()).collect();
    format!("[{}]", items.join(", "))
}

/// Prints a graph in the canonical text form; large constants appear as file references
/// whose data [`print_with_files`] returns.
pub fn print(graph: &Graph) -> String {
    print_with_files(graph).text
}

/// The canonical-NaN bits of f32 and f16 and the FP8 NaN code: the NaN an inline literal's
/// `nan` stands for.
fn canonical_nan(dtype: DType) -> Vec<u8> {
    match dtype {
        DType::F32 => f32::NAN.to_le_bytes().to_vec(),
        DType::F16 => ipu_numerics::f16_bits(f32::NAN).to_le_bytes().to_vec(),
        _ => crate::encode_elements(dtype, &[f32::NAN]),
    }
}

/// The inline literal of a constant, or `None` if it must go to a file (too many elements, or
/// a NaN whose bits `nan` would not give back).
fn inline_literal(ty: &TensorType, data: &[u8]) -> Option<String> {
    if ty.elements() > INLINE_CONSTANT_ELEMENTS_MAX {
        return None;
    }
    let nan = canonical_nan(ty.dtype);
    let mut items = Vec::with_capacity(ty.elements());
    for (bytes, x) in data
        .chunks_exact(ty.dtype.bytes())
        .zip(decode_elements(ty.dtype, data))
    {
        if x.is_nan() {
            if bytes != nan.as_slice() {
                return None;
            }
            items.push("nan".to_string());
        } else {
            items.push(fmt_f32(x));
        }
    }
    Some(format!("[{}]", items.join(", ")))
}

/// Prints a graph in the canonical text form and lists the constants it references as files.
pub fn print_with_files(graph: &Graph) -> PrintedGraph {
    let mut s = String::new();
    let mut files = Vec::new();
    let _ = writeln!(s, "graph {} {{", graph.name);
    for (index, v) in graph.values().iter().enumerate() {
        let id = ValueId(index as u32);
        if let Some(op) = v.producer {
            print_operation(&mut s, graph, op);
        } else if let Some(c) = graph.constant(id) {
            let data = match inline_literal(&v.ty, &c.data) {
                Some(literal) => literal,
                None => {
                    let file_name = format!("{}.npy", v.name);
                    let text = format!("file(\"{file_name}\")");
                    files.push(ConstantFile {
                        file_name,
                        value: id,
                        ty: v.ty.clone(),
                        data: c.data.clone(),
                    });
                    text
                }
            };
            let _ = writeln!(s, "  const %{}: {} = {data}", v.name, v.ty);
        } else {
            let _ = writeln!(s, "  input %{}: {}", v.name, v.ty);
        }
    }
    for &o in graph.outputs() {
        let _ = writeln!(s, "  output %{}", graph.value(o).name);
    }
    s.push_str("}\n");
    PrintedGraph { text: s, files }
}

fn print_operation(s: &mut String, graph: &Graph, id: crate::OperationId) {
    let op = graph.operation(id);
    let out = graph.value(op.outputs[0]);
    let operands: Vec<String> = op
        .inputs
        .iter()
        .map(|&i| format!("%{}", graph.value(i).name))
        .collect();
    let _ = write!(
        s,
        "  %{} = {}({})",
        out.name,
        op.kind.mnemonic(),
        operands.join(", ")
    );
    // An attribute at its default prints as nothing and is left out.
    let attrs: Vec<_> = attributes(&op.kind)
        .into_iter()
        .filter(|(_, v)| !v.is_empty())
        .collect();
    if !attrs.is_empty() {
        let items: Vec<String> = attrs.iter().map(|(k, v)| format!("{k} = {v}")).collect();
        let _ = write!(s, " {{{}}}", items.join(", "));
    }
    let _ = writeln!(s, ": {}", out.ty);
}

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Ident(String),
    Value(String),
    Int(i64),
    /// The number's text, parsed at the precision of its use (an f32 attribute parses the
    /// text directly, avoiding double rounding through f64).
    Float(String),
    /// A double-quoted string (no escapes; it cannot hold `"` or a line break).
    Str(String),
    Punct(char),
    Eof,
}

impl Tok {
    fn describe(&self) -> String {
        match self {
            Tok::Ident(s) => format!("`{s}`"),
            Tok::Value(s) => format!("`%{s}`"),
            Tok::Int(i) => format!("`{i}`"),
            Tok::Float(x) => format!("`{x}`"),
            Tok::Str(x) => format!("`\"{x}\"`"),
            Tok::Punct(c) => format!("`{c}`"),
            Tok::Eof => "end of file".into(),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Pos {
    line: usize,
    column: usize,
}

struct Lexer<'a> {
    chars: std::iter::Peekable<std::str::Chars<'a>>,
    pos: Pos,
}

fn ident_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-')
}

impl Lexer<'_> {
    fn bump(&mut self) -> Option<char> {
        let c = self.chars.next()?;
        if c == '\n' {
            self.pos.line += 1;
            self.pos.column = 1;
        } else {
            self.pos.column += 1;
        }
        Some(c)
    }

    fn take_while(&mut self, f: impl Fn(char) -> bool) -> String {
        let mut s = String::new();
        while let Some(&c) = self.chars.peek() {
            if !f(c) {
                break;
            }
            s.push(c);
            self.bump();
        }
        s
    }

    fn next(&mut self) -> Result<(Tok, Pos), (Pos, String)> {
        loop {
            let Some(&c) = self.chars.peek() else {
                return Ok((Tok::Eof, self.pos));
            };
            if c.is_whitespace() {
                self.bump();
            } else if c == '#' {
                self.take_while(|c| c != '\n');
            } else if c == '/' {
                let pos = self.pos;
                self.bump();
                if self.chars.peek() != Some(&'/') {
                    return Err((
                        pos,
                        "unexpected `/` (comments start with `//` or `#`)".into(),
                    ));
                }
                self.take_while(|c| c != '\n');
            } else {
                break;
            }
        }
        let pos = self.pos;
        let c = *self.chars.peek().expect("peeked above");
        if c.is_ascii_alphabetic() || c == '_' {
            return Ok((Tok::Ident(self.take_while(ident_char)), pos));
        }
        if c == '%' {
            self.bump();
            let name = self.take_while(ident_char);
            if !is_identifier(&name) {
                return Err((pos, "expected a value name after `%`".into()));
            }
            return Ok((Tok::Value(name), pos));
        }
        if c.is_ascii_digit() || c == '-' || c == '+' {
            let mut s = String::new();
            s.push(c);
            self.bump();
            let mut prev = c;
            while let Some(&d) = self.chars.peek() {
                let ok = d.is_ascii_alphanumeric()
                    || d == '.'
                    || ((d == '-' || d == '+') && matches!(prev, 'e' | 'E'));
                if !ok {
                    break;
                }
                s.push(d);
                prev = d;
                self.bump();
            }
            if let Ok(i) = s.parse::<i64>() {
                return Ok((Tok::Int(i), pos));
            }
            // Non-finite numbers (`-inf`, `1e999`) are tokens too: constant literals take
            // them, attributes refuse them where they are read.
            return match s.parse::<f64>() {
                Ok(_) => Ok((Tok::Float(s), pos)),
                Err(_) => Err((pos, format!("malformed number `{s}`"))),
            };
        }
        if c == '"' {
            self.bump();
            let text = self.take_while(|c| c != '"' && c != '\n');
            if self.bump() != Some('"') {
                return Err((pos, "unterminated string".into()));
            }
            return Ok((Tok::Str(text), pos));
        }
        if "{}()[],:=@".contains(c) {
            self.bump();
            return Ok((Tok::Punct(c), pos));
        }
        Err((pos, format!("unexpected character `{c}`")))
    }
}

#[derive(Debug, Clone)]
enum AttrValue {
    Int(i64),
    Float(String),
    Word(String),
    DType(DType),
    List(Vec<i64>),
}

struct Attr {
    key: String,
    pos: Pos,
    value: AttrValue,
    used: bool,
}

struct Parser<'a> {
    file: &'a str,
    toks: Vec<(Tok, Pos)>,
    at: usize,
}

type PResult<T> = Result<T, ParseError>;

impl Parser<'_> {
    fn error<T>(&self, pos: Pos, reason: impl Into<String>) -> PResult<T> {
        Err(ParseError {
            file: self.file.to_string(),
            line: pos.line,
            column: pos.column,
            reason: reason.into(),
        })
    }

    fn peek(&self) -> &(Tok, Pos) {
        &self.toks[self.at.min(self.toks.len() - 1)]
    }

    fn next(&mut self) -> (Tok, Pos) {
        let t = self.peek().clone();
        if self.at < self.toks.len() {
            self.at += 1;
        }
        t
    }

    fn expect_punct(&mut self, c: char, what: &str) -> PResult<Pos> {
        let (t, pos) = self.next();
        if t != Tok::Punct(c) {
            return self.error(
                pos,
                format!("expected `{c}` {what}, found {}", t.describe()),
            );
        }
        Ok(pos)
    }

    /// A `%name` (`what` names it in the error), and where it stands.
    fn value_name(&mut self, what: &str) -> PResult<(String, Pos)> {
        match self.next() {
            (Tok::Value(v), pos) => Ok((v, pos)),
            (t, pos) => self.error(pos, format!("expected {what}, found {}", t.describe())),
        }
    }

    /// An identifier (`what` names it in the error), and where it stands.
    fn ident(&mut self, what: &str) -> PResult<(String, Pos)> {
        match self.next() {
            (Tok::Ident(w), pos) => Ok((w, pos)),
            (t, pos) => self.error(pos, format!("expected {what}, found {}", t.describe())),
        }
    }

    fn eat_punct(&mut self, c: char) -> bool {
        if self.peek().0 == Tok::Punct(c) {
            self.next();
            true
        } else {
            false
        }
    }

    fn int(&mut self, what: &str) -> PResult<(i64, Pos)> {
        let (t, pos) = self.next();
        match t {
            Tok::Int(i) => Ok((i, pos)),
            t => self.error(
                pos,
                format!("expected an integer {what}, found {}", t.describe()),
            ),
        }
    }

    fn dtype_after(&mut self, base: &str, pos: Pos) -> PResult<DType> {
        let scale = if self.eat_punct('@') {
            let (s, spos) = self.int("(FP8 scale)")?;
            if !(i64::from(ipu_numerics::SCALE_MIN)..=i64::from(ipu_numerics::SCALE_MAX))
                .contains(&s)
            {
                return self.error(
                    spos,
                    format!(
                        "FP8 scale {s} outside {}..={}",
                        ipu_numerics::SCALE_MIN,
                        ipu_numerics::SCALE_MAX
                    ),
                );
            }
            Some(s as i8)
        } else {
            None
        };
        match (base, scale) {
            ("f143", s) => Ok(DType::F143 {
                scale: s.unwrap_or(0),
            }),
            ("f152", s) => Ok(DType::F152 {
                scale: s.unwrap_or(0),
            }),
            (b, s) => match DType::UNSCALED.into_iter().find(|d| d.text_name() == b) {
                Some(_) if s.is_some() => self.error(pos, format!("{base} takes no scale")),
                Some(d) => Ok(d),
                None => {
                    let names: Vec<&str> = DType::UNSCALED.iter().map(|d| d.text_name()).collect();
                    self.error(
                        pos,
                        format!(
                            "unknown dtype `{base}` (known: {}, f143@S, f152@S)",
                            names.join(", ")
                        ),
                    )
                }
            },
        }
    }

    fn tensor_type(&mut self) -> PResult<(TensorType, Pos)> {
        let (base, pos) = self.ident("a type")?;
        let dtype = self.dtype_after(&base, pos)?;
        self.expect_punct('[', "to open the shape")?;
        let mut shape = Vec::new();
        if !self.eat_punct(']') {
            loop {
                let (d, dpos) = self.int("(dimension)")?;
                if d < 0 {
                    return self.error(dpos, format!("negative dimension {d}"));
                }
                if shape.len() == crate::RANK_MAX {
                    return self.error(
                        dpos,
                        format!("a shape has at most {} dimensions", crate::RANK_MAX),
                    );
                }
                shape.push(d as usize);
                if self.eat_punct(']') {
                    break;
                }
                self.expect_punct(',', "or `]` in the shape")?;
            }
        }
        let ty = TensorType::new(dtype, shape);
        if let Err(reason) = ty.check() {
            return self.error(pos, reason);
        }
        Ok((ty, pos))
    }

    /// One element of a constant literal, encoded into `dtype`: exactly a value of the dtype
    /// (f32 takes the nearest f32 of the decimal text).
    fn literal_element(&mut self, dtype: DType, out: &mut Vec<u8>) -> PResult<()> {
        let (t, pos) = self.next();
        let text = match &t {
            Tok::Int(i) => i.to_string(),
            Tok::Float(x) => x.clone(),
            Tok::Ident(w) if w == "inf" || w == "nan" => w.clone(),
            t => {
                return self.error(
                    pos,
                    format!("expected a number, `inf` or `nan`, found {}", t.describe()),
                );
            }
        };
        let Ok(x) = text.parse::<f32>() else {
            return self.error(pos, format!("malformed number `{text}`"));
        };
        if x.is_nan() {
            out.extend(canonical_nan(dtype));
            return Ok(());
        }
        let bytes = crate::encode_elements(dtype, &[x]);
        let back = decode_elements(dtype, &bytes)[0];
        if back.to_bits() != x.to_bits() {
            return self.error(
                pos,
                format!(
                    "{text} is not a value of {dtype} (the nearest is {})",
                    fmt_f32(back)
                ),
            );
        }
        out.extend(bytes);
        Ok(())
    }

    /// The data of a constant after its `=`: a literal or a file reference resolved by
    /// `resolve`.
    fn constant_data(
        &mut self,
        name: &str,
        ty: &TensorType,
        resolve: &mut Resolver<'_>,
    ) -> PResult<Vec<u8>> {
        let (t, pos) = self.next();
        match t {
            Tok::Punct('[') => {
                let mut data = Vec::with_capacity(ty.bytes());
                let mut count = 0usize;
                if !self.eat_punct(']') {
                    loop {
                        if count == ty.elements() {
                            let at = self.peek().1;
                            return self.error(
                                at,
                                format!("%{name}: more than the {} elements of {ty}", count),
                            );
                        }
                        self.literal_element(ty.dtype, &mut data)?;
                        count += 1;
                        if self.eat_punct(']') {
                            break;
                        }
                        self.expect_punct(',', "or `]` in the constant")?;
                    }
                }
                if count != ty.elements() {
                    return self.error(
                        pos,
                        format!(
                            "%{name}: {count} elements given, {ty} has {}",
                            ty.elements()
                        ),
                    );
                }
                Ok(data)
            }
            Tok::Ident(w) if w == "file" => {
                self.expect_punct('(', "after `file`")?;
                let (t, fpos) = self.next();
                let Tok::Str(file_name) = t else {
                    return self.error(
                        fpos,
                        format!("expected a file name in quotes, found {}", t.describe()),
                    );
                };
                self.expect_punct(')', "after the file name")?;
                if !is_relative_file_name(&file_name) {
                    return self.error(
                        fpos,
                        format!(
                            "file name `{file_name}` must be a relative path without `..` \
                             components"
                        ),
                    );
                }
                let data = match resolve(ExternalConstant {
                    value: name,
                    file_name: &file_name,
                    ty,
                }) {
                    Ok(d) => d,
                    Err(reason) => {
                        return self
                            .error(fpos, format!("%{name} = file(\"{file_name}\"): {reason}"));
                    }
                };
                if data.len() != ty.bytes() {
                    return self.error(
                        fpos,
                        format!(
                            "%{name} = file(\"{file_name}\"): {} bytes, {ty} needs {}",
                            data.len(),
                            ty.bytes()
                        ),
                    );
                }
                Ok(data)
            }
            t => self.error(
                pos,
                format!(
                    "expected `[` or `file(\"NAME.npy\")` for the constant's data, found {}",
                    t.describe()
                ),
            ),
        }
    }

    fn attr_value(&mut self) -> PResult<AttrValue> {
        let (t, pos) = self.next();
        Ok(match t {
            Tok::Int(i) => AttrValue::Int(i),
            Tok::Float(x) => AttrValue::Float(x),
            Tok::Ident(w) if w.starts_with('f') && w != "false" => {
                AttrValue::DType(self.dtype_after(&w, pos)?)
            }
            Tok::Ident(w) => AttrValue::Word(w),
            Tok::Punct('[') => {
                let mut xs = Vec::new();
                if !self.eat_punct(']') {
                    loop {
                        xs.push(self.int("(list element)")?.0);
                        if self.eat_punct(']') {
                            break;
                        }
                        self.expect_punct(',', "or `]` in the list")?;
                    }
                }
                AttrValue::List(xs)
            }
            t => {
                return self.error(
                    pos,
                    format!("expected an attribute value, found {}", t.describe()),
                );
            }
        })
    }
}

struct AttrSet<'p, 'a> {
    parser: &'p Parser<'a>,
    attrs: Vec<Attr>,
    op_pos: Pos,
    mnemonic: String,
}

impl AttrSet<'_, '_> {
    fn take(&mut self, key: &str) -> PResult<(AttrValue, Pos)> {
        match self.attrs.iter_mut().find(|a| a.key == key) {
            Some(a) => {
                a.used = true;
                Ok((a.value.clone(), a.pos))
            }
            None => self.parser.error(
                self.op_pos,
                format!("{} needs the attribute `{key}`", self.mnemonic),
            ),
        }
    }

    fn bad<T>(&self, key: &str, pos: Pos, want: &str) -> PResult<T> {
        self.parser.error(
            pos,
            format!("attribute `{key}` of {} must be {want}", self.mnemonic),
        )
    }

    fn usize(&mut self, key: &str) -> PResult<usize> {
        match self.take(key)? {
            (AttrValue::Int(i), _) if i >= 0 => Ok(i as usize),
            (AttrValue::Int(i), pos) => {
                self.bad(key, pos, &format!("a non-negative integer, not {i}"))
            }
            (AttrValue::Float(x), pos) if x.bytes().all(|b| b.is_ascii_digit()) => self.bad(
                key,
                pos,
                &format!(
                    "an integer no larger than {}, not {}",
                    i64::MAX,
                    excerpt(&x)
                ),
            ),
            (_, pos) => self.bad(key, pos, "a non-negative integer"),
        }
    }

    fn f32(&mut self, key: &str) -> PResult<f32> {
        match self.take(key)? {
            (AttrValue::Int(i), _) => Ok(i as f32),
            (AttrValue::Float(x), pos) => match x.parse::<f32>() {
                Ok(v) if v.is_finite() => Ok(v),
                _ => self.bad(key, pos, "a number within f32 range"),
            },
            (_, pos) => self.bad(key, pos, "a number"),
        }
    }

    fn bool(&mut self, key: &str) -> PResult<bool> {
        match self.take(key)? {
            (AttrValue::Word(w), _) if w == "true" => Ok(true),
            (AttrValue::Word(w), _) if w == "false" => Ok(false),
            (_, pos) => self.bad(key, pos, "true or false"),
        }
    }

    fn dtype(&mut self, key: &str) -> PResult<DType> {
        match self.take(key)? {
            (AttrValue::DType(d), _) => Ok(d),
            // Dtype names that do not start with `f` (`bf16`, `i8`, `bool`, ...) read as words.
            (AttrValue::Word(w), _) if DType::from_name(&w).is_some() => {
                Ok(DType::from_name(&w).expect("checked"))
            }
            (_, pos) => self.bad(key, pos, "a dtype"),
        }
    }

    fn list(&mut self, key: &str) -> PResult<Vec<usize>> {
        match self.take(key)? {
            (AttrValue::List(xs), _) if xs.iter().all(|&x| x >= 0) => {
                Ok(xs.into_iter().map(|x| x as usize).collect())
            }
            (_, pos) => self.bad(key, pos, "a list of non-negative integers"),
        }
    }

    fn finish(&self, known: &[&str]) -> PResult<()> {
        if let Some(a) = self.attrs.iter().find(|a| !a.used) {
            let known = if known.is_empty() {
                "none".to_string()
            } else {
                known.join(", ")
            };
            return self.parser.error(
                a.pos,
                format!(
                    "unknown attribute `{}` for {} (known: {known})",
                    a.key, self.mnemonic
                ),
            );
        }
        Ok(())
    }
}

/// An attribute value's type: how the parser reads it and how the printer writes it.
trait Attribute: Sized {
    fn read(set: &mut AttrSet<'_, '_>, key: &str) -> PResult<Self>;
    fn text(&self) -> String;
}

/// The `Attribute` impls: the type, the `AttrSet` method that reads it, and how it prints.
macro_rules! attribute_types {
    ($($ty:ty: $read:ident, $text:expr;)*) => {$(
        impl Attribute for $ty {
            fn read(set: &mut AttrSet<'_, '_>, key: &str) -> PResult<Self> {
                set.$read(key)
            }
            fn text(&self) -> String {
                $text(self)
            }
        }
    )*};
}

/// A cast's overflow rule: `overflow = nan` (ONNX `Cast` with `saturate = 0`: NaN, or infinity
/// where the format has one); saturation, the default, is left out of the text.
impl Attribute for Overflow {
    fn read(set: &mut AttrSet<'_, '_>, key: &str) -> PResult<Self> {
        if !set.attrs.iter().any(|a| a.key == key) {
            return Ok(Overflow::Saturate);
        }
        match set.take(key)? {
            (AttrValue::Word(w), _) if w == "saturate" => Ok(Overflow::Saturate),
            (AttrValue::Word(w), _) if w == "nan" => Ok(Overflow::Nan),
            (_, pos) => set.bad(key, pos, "saturate or nan"),
        }
    }
    fn text(&self) -> String {
        match self {
            Overflow::Saturate => String::new(),
            Overflow::Nan => "nan".to_string(),
        }
    }
}

attribute_types! {
    usize: usize, usize::to_string;
    f32: f32, |x: &f32| fmt_f32(*x);
    bool: bool, bool::to_string;
    DType: dtype, DType::to_string;
    Vec<usize>: list, |xs: &Vec<usize>| fmt_list(xs);
}

/// The operations of the text form, one line each: mnemonic, `OpKind` variant, its attributes
/// in text order (each named after its field), and `out` where the variant takes the
/// annotated output dtype. Defines `MNEMONICS`, `attributes` (the printer's) and `op_kind`
/// (the parser's).
macro_rules! operations {
    ($($mnemonic:literal => $variant:ident { $($field:ident),* } $($out:ident)?;)*) => {
        /// Every mnemonic but the unary functions', in text order.
        const MNEMONICS: &[&str] = &[$($mnemonic),*];

        /// Every mnemonic: [`MNEMONICS`] with the unary functions' after `scale`.
        fn mnemonics() -> Vec<&'static str> {
            let mut all = MNEMONICS.to_vec();
            let at = all.iter().position(|&m| m == "scale").map_or(all.len(), |i| i + 1);
            all.splice(at..at, UnaryFn::ALL.iter().map(|f| f.mnemonic()));
            all.extend(MapFn::ALL.iter().map(|f| f.mnemonic()));
            all
        }

        /// The attributes of an operation in text order (the output dtype is not among them).
        fn attributes(kind: &OpKind) -> Vec<(&'static str, String)> {
            match kind {
                $(OpKind::$variant { $($field,)* .. } => {
                    vec![$((stringify!($field), Attribute::text($field))),*]
                })*
                OpKind::Unary(_) | OpKind::Map(_) => Vec::new(),
            }
        }

        fn op_kind(set: &mut AttrSet<'_, '_>, out: DType) -> PResult<OpKind> {
            let kind = match set.mnemonic.as_str() {
                m if UnaryFn::from_mnemonic(m).is_some() => {
                    OpKind::Unary(UnaryFn::from_mnemonic(m).expect("checked"))
                }
                m if MapFn::from_mnemonic(m).is_some() => {
                    OpKind::Map(MapFn::from_mnemonic(m).expect("checked"))
                }
                $($mnemonic => OpKind::$variant {
                    $($field: Attribute::read(set, stringify!($field))?,)*
                    $($out: out,)?
                },)*
                other => {
                    return set.parser.error(
                        set.op_pos,
                        format!(
                            "unknown operation `{other}` (known: {})",
                            mnemonics().join(", ")
                        ),
                    );
                }
            };
            let known: Vec<&str> = attributes(&kind).iter().map(|(k, _)| *k).collect();
            set.finish(&known)?;
            Ok(kind)
        }
    };
}

operations! {
    "matmul" => MatMul { partials } out;
    "transpose" => Transpose { perm };
    "reshape" => Reshape { shape };
    "slice" => Slice { axis, start, end };
    "concat" => Concat { axis };
    "gather" => Gather { axis };
    "gather_columns" => GatherColumns {};
    "add" => Add {};
    "sub" => Sub {};
    "mul" => Mul {};
    "div" => Div {};
    "max" => Max {};
    "scale" => Scale { factor };
    "causal_mask" => CausalMask { key_start };
    "reduce_max" => ReduceMax { axis };
    "reduce_sum" => ReduceSum { axis };
    "softmax" => Softmax { axis };
    "cast" => Cast { to, overflow };
    "layer_norm" => LayerNorm { epsilon };
    "attention" => Attention { scale, causal, partials } out;
    "flash_attention" => FlashAttention { scale, causal, block_q, block_k, partials } out;
}

/// The `%name` an `input` or `const` line defines, and where it stands: not yet defined.
fn new_value_name(p: &mut Parser<'_>, names: &HashMap<String, ValueId>) -> PResult<(String, Pos)> {
    let (v, pos) = p.value_name("`%name`")?;
    if names.contains_key(&v) {
        return p.error(pos, format!("value %{v} is already defined"));
    }
    Ok((v, pos))
}

/// True for a relative path without empty, `.` or `..` components and without characters
/// outside `[A-Za-z0-9_.-/]`.
fn is_relative_file_name(name: &str) -> bool {
    !name.is_empty()
        && name.split('/').all(|part| {
            !part.is_empty()
                && part != "."
                && part != ".."
                && part
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'))
        })
}

/// The callback [`parse_with`] asks for a constant file's data: the elements in device layout
/// (see [`crate::Constant`]), or why they cannot be had.
pub type Resolver<'r> = dyn FnMut(ExternalConstant<'_>) -> Result<Vec<u8>, String> + 'r;

/// Longest line of the text form, in bytes (a bound on corrupt input; printed graphs keep
/// large constants in files, so their lines are short).
pub const LINE_BYTES_MAX: usize = 1 << 16;

/// At most the first 40 characters of `s`, with `…` where it was cut: how an error quotes
/// input.
pub fn excerpt(s: &str) -> String {
    match s.char_indices().nth(40) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s.to_string(),
    }
}

/// Parses a graph from its text form; `file_name` is used in error positions. The result is
/// verified. A constant given as a file reference is an error: use [`parse_with`].
pub fn parse(text: &str, file_name: &str) -> Result<Graph, ParseError> {
    parse_with(text, file_name, &mut |_| {
        Err("constant files need a resolver (this reader takes inline constants only)".into())
    })
}

/// Parses a graph from its text form, asking `resolve` for the data of every constant given as
/// a file reference; `file_name` is used in error positions. The result is verified.
pub fn parse_with(
    text: &str,
    file_name: &str,
    resolve: &mut Resolver<'_>,
) -> Result<Graph, ParseError> {
    if let Some((n, line)) = text
        .lines()
        .enumerate()
        .find(|(_, l)| l.len() > LINE_BYTES_MAX)
    {
        return Err(ParseError {
            file: file_name.to_string(),
            line: n + 1,
            column: 1,
            reason: format!(
                "line is {} bytes long; the longest accepted is {LINE_BYTES_MAX}",
                line.len()
            ),
        });
    }
    let mut lexer = Lexer {
        chars: text.chars().peekable(),
        pos: Pos { line: 1, column: 1 },
    };
    let mut toks = Vec::new();
    loop {
        match lexer.next() {
            Ok((Tok::Eof, pos)) => {
                toks.push((Tok::Eof, pos));
                break;
            }
            Ok(t) => toks.push(t),
            Err((pos, reason)) => {
                return Err(ParseError {
                    file: file_name.to_string(),
                    line: pos.line,
                    column: pos.column,
                    reason,
                });
            }
        }
    }
    let mut p = Parser {
        file: file_name,
        toks,
        at: 0,
    };
    let (t, pos) = p.next();
    if t != Tok::Ident("graph".into()) {
        return p.error(pos, format!("expected `graph`, found {}", t.describe()));
    }
    let (name, _) = p.ident("the graph name")?;
    p.expect_punct('{', "after the graph name")?;
    let mut b = GraphBuilder::new(name);
    let mut names: HashMap<String, ValueId> = HashMap::new();
    let mut outputs = 0usize;
    loop {
        let (t, pos) = p.next();
        match t {
            Tok::Punct('}') => break,
            Tok::Ident(w) if w == "input" => {
                let (v, _) = new_value_name(&mut p, &names)?;
                p.expect_punct(':', "before the input type")?;
                let (ty, _) = p.tensor_type()?;
                let id = b.input(v.clone(), ty);
                names.insert(v, id);
            }
            Tok::Ident(w) if w == "const" => {
                let (v, vpos) = new_value_name(&mut p, &names)?;
                p.expect_punct(':', "before the constant's type")?;
                let (ty, _) = p.tensor_type()?;
                p.expect_punct('=', "before the constant's data")?;
                let data = p.constant_data(&v, &ty, resolve)?;
                let id = match b.constant(v.clone(), ty, data) {
                    Ok(id) => id,
                    Err(e) => return p.error(vpos, e.to_string()),
                };
                names.insert(v, id);
            }
            Tok::Ident(w) if w == "output" => loop {
                let (v, vpos) = p.value_name("`%name`")?;
                let Some(&id) = names.get(&v) else {
                    return p.error(vpos, format!("unknown value %{v}"));
                };
                b.output(id);
                outputs += 1;
                if !p.eat_punct(',') {
                    break;
                }
            },
            Tok::Value(result) => {
                if names.contains_key(&result) {
                    return p.error(pos, format!("value %{result} is already defined"));
                }
                p.expect_punct('=', "after the result name")?;
                let (mnemonic, op_pos) = p.ident("an operation")?;
                p.expect_punct('(', "to open the operands")?;
                let mut operands = Vec::new();
                let mut operand_pos = Vec::new();
                if !p.eat_punct(')') {
                    loop {
                        let (v, vpos) = p.value_name("an operand `%name`")?;
                        let Some(&id) = names.get(&v) else {
                            return p.error(vpos, format!("unknown value %{v}"));
                        };
                        operands.push(id);
                        operand_pos.push(vpos);
                        if p.eat_punct(')') {
                            break;
                        }
                        p.expect_punct(',', "or `)` after an operand")?;
                    }
                }
                let mut attrs = Vec::new();
                if p.eat_punct('{') && !p.eat_punct('}') {
                    loop {
                        let (key, kpos) = p.ident("an attribute name")?;
                        if attrs.iter().any(|a: &Attr| a.key == key) {
                            return p.error(kpos, format!("attribute `{key}` given twice"));
                        }
                        p.expect_punct('=', "after the attribute name")?;
                        let value = p.attr_value()?;
                        attrs.push(Attr {
                            key,
                            pos: kpos,
                            value,
                            used: false,
                        });
                        if p.eat_punct('}') {
                            break;
                        }
                        p.expect_punct(',', "or `}` after an attribute")?;
                    }
                }
                p.expect_punct(':', "before the result type")?;
                let (annotated, ty_pos) = p.tensor_type()?;
                let mut set = AttrSet {
                    parser: &p,
                    attrs,
                    op_pos,
                    mnemonic: mnemonic.clone(),
                };
                let kind = op_kind(&mut set, annotated.dtype)?;
                let types: Vec<&TensorType> = operands.iter().map(|&i| b.ty(i)).collect();
                let inferred = match infer(&kind, &types) {
                    Ok(t) => t,
                    Err(e) => {
                        let at = e.operand.map_or(op_pos, |n| operand_pos[n]);
                        return p.error(at, format!("{mnemonic}: {}", e.reason));
                    }
                };
                if inferred != annotated {
                    return p.error(
                        ty_pos,
                        format!("result %{result} is annotated {annotated} but {mnemonic} gives {inferred}"),
                    );
                }
                let id = match b.op(result.clone(), kind, &operands) {
                    Ok(id) => id,
                    Err(e) => return p.error(op_pos, e.to_string()),
                };
                names.insert(result, id);
            }
            t => {
                return p.error(
                    pos,
                    format!(
                        "expected `input`, `const`, `output`, `%name = ...` or `}}`, found {}",
                        t.describe()
                    ),
                );
            }
        }
    }
    let (t, pos) = p.next();
    if t != Tok::Eof {
        return p.error(
            pos,
            format!(
                "expected end of file after the graph, found {}",
                t.describe()
            ),
        );
    }
    if outputs == 0 {
        return p.error(pos, "the graph has no `output`");
    }
    b.finish().or_else(|e| p.error(pos, e.to_string()))
}
