//! Tensors known at import time (initializers, `Constant` nodes, folded results) and the
//! evaluator that folds shape-only subgraphs over them.
//!
//! A known tensor keeps its elements as bytes: f32, f16 and FP8 in the graph's device layout
//! (so weights reach the graph bit for bit), f64 as little-endian doubles, and every integer
//! and boolean type widened to a little-endian i64. Data movement (reshape, transpose, slice,
//! concat, gather, broadcast) works on those bytes whatever the type; arithmetic decodes to
//! i64 or f64 and encodes the result back.

use ipu_graph::DType;
pub use ipu_graph::strided::broadcast_shapes;
use ipu_graph::strided::{broadcast_strides, strides, walk};

/// Largest element count of a tensor the importer creates by folding (`ConstantOfShape`,
/// `Expand`, `Range`, broadcasting arithmetic): 2^26 elements, 256 MiB of f32, more than any
/// mask or position table of the models in scope (a 4096 × 4096 mask is 2^24), while a model
/// that asks for more cannot exhaust the host's memory at import.
pub const FOLDED_ELEMENTS_MAX: usize = 1 << 26;

/// The integer element types (all stored as i64).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IntKind {
    /// int8.
    I8,
    /// int16.
    I16,
    /// int32.
    I32,
    /// int64.
    I64,
    /// uint8.
    U8,
    /// uint16.
    U16,
    /// uint32.
    U32,
    /// uint64 (values above `i64::MAX` are refused).
    U64,
}

impl IntKind {
    /// `v` wrapped to this type's range (what a C cast does).
    fn wrap(self, v: i64) -> i64 {
        match self {
            IntKind::I8 => i64::from(v as i8),
            IntKind::I16 => i64::from(v as i16),
            IntKind::I32 => i64::from(v as i32),
            IntKind::I64 | IntKind::U64 => v,
            IntKind::U8 => i64::from(v as u8),
            IntKind::U16 => i64::from(v as u16),
            IntKind::U32 => i64::from(v as u32),
        }
    }
}

/// The element type of a known tensor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Elem {
    /// A type the graph has: f32, f16, F143 or F152 (ONNX FLOAT8E4M3FNUZ and FLOAT8E5M2FNUZ,
    /// at scale 0).
    Float(DType),
    /// ONNX DOUBLE: folded, never graph data.
    Double,
    /// An integer type.
    Int(IntKind),
    /// ONNX BOOL (stored as 0 or 1).
    Bool,
}

/// ONNX `TensorProto.DataType` codes (onnx.proto).
pub mod code {
    /// FLOAT.
    pub const FLOAT: i32 = 1;
    /// UINT8.
    pub const UINT8: i32 = 2;
    /// INT8.
    pub const INT8: i32 = 3;
    /// UINT16.
    pub const UINT16: i32 = 4;
    /// INT16.
    pub const INT16: i32 = 5;
    /// INT32.
    pub const INT32: i32 = 6;
    /// INT64.
    pub const INT64: i32 = 7;
    /// BOOL.
    pub const BOOL: i32 = 9;
    /// FLOAT16.
    pub const FLOAT16: i32 = 10;
    /// DOUBLE.
    pub const DOUBLE: i32 = 11;
    /// UINT32.
    pub const UINT32: i32 = 12;
    /// UINT64.
    pub const UINT64: i32 = 13;
    /// FLOAT8E4M3FNUZ.
    pub const FLOAT8E4M3FNUZ: i32 = 18;
    /// FLOAT8E5M2FNUZ.
    pub const FLOAT8E5M2FNUZ: i32 = 20;
}

/// The name of an ONNX element type code, for messages.
pub fn type_name(code: i32) -> String {
    match crate::proto::tensor_proto::DataType::try_from(code) {
        Ok(t) => t.as_str_name().to_string(),
        Err(_) => format!("code {code}"),
    }
}

/// Why an element type is refused, or `None` if the importer handles it.
pub fn elem_of_code(code: i32) -> Result<Elem, &'static str> {
    Ok(match code {
        code::FLOAT => Elem::Float(DType::F32),
        code::FLOAT16 => Elem::Float(DType::F16),
        code::FLOAT8E4M3FNUZ => Elem::Float(DType::F143 { scale: 0 }),
        code::FLOAT8E5M2FNUZ => Elem::Float(DType::F152 { scale: 0 }),
        code::DOUBLE => Elem::Double,
        code::INT8 => Elem::Int(IntKind::I8),
        code::INT16 => Elem::Int(IntKind::I16),
        code::INT32 => Elem::Int(IntKind::I32),
        code::INT64 => Elem::Int(IntKind::I64),
        code::UINT8 => Elem::Int(IntKind::U8),
        code::UINT16 => Elem::Int(IntKind::U16),
        code::UINT32 => Elem::Int(IntKind::U32),
        code::UINT64 => Elem::Int(IntKind::U64),
        code::BOOL => Elem::Bool,
        16 => Elem::Float(DType::Bf16),
        17 => Elem::Float(DType::E4M3FN),
        19 => Elem::Float(DType::E5M2),
        21 => Elem::Float(DType::U4),
        22 => Elem::Float(DType::I4),
        23 => Elem::Float(DType::F4E2M1),
        24 => Elem::Float(DType::E8M0),
        25 => Elem::Float(DType::U2),
        26 => Elem::Float(DType::I2),
        8 => return Err("the graph IR has no strings"),
        14 | 15 => return Err("the graph IR has no complex numbers"),
        _ => return Err("the graph IR has no such dtype"),
    })
}

impl Elem {
    /// Bytes per stored element.
    pub fn width(self) -> usize {
        match self {
            Elem::Float(d) => d.bytes(),
            Elem::Double | Elem::Int(_) | Elem::Bool => 8,
        }
    }

    /// The ONNX code.
    pub fn code(self) -> i32 {
        match self {
            Elem::Float(DType::F32) => code::FLOAT,
            Elem::Float(DType::F16) => code::FLOAT16,
            Elem::Float(DType::F143 { .. }) => code::FLOAT8E4M3FNUZ,
            Elem::Float(DType::F152 { .. }) => code::FLOAT8E5M2FNUZ,
            Elem::Float(DType::Bf16) => 16,
            Elem::Float(DType::E4M3FN) => 17,
            Elem::Float(DType::E5M2) => 19,
            Elem::Float(DType::U4) => 21,
            Elem::Float(DType::I4) => 22,
            Elem::Float(DType::F4E2M1) => 23,
            Elem::Float(DType::E8M0) => 24,
            Elem::Float(DType::U2) => 25,
            Elem::Float(DType::I2) => 26,
            Elem::Float(DType::I8) => code::INT8,
            Elem::Float(DType::U8) => code::UINT8,
            Elem::Float(DType::I16) => code::INT16,
            Elem::Float(DType::U16) => code::UINT16,
            Elem::Float(DType::Bool) => code::BOOL,
            Elem::Float(DType::I32) => code::INT32,
            Elem::Float(DType::U32) => code::UINT32,
            Elem::Float(DType::I64) => code::INT64,
            Elem::Float(DType::U64) => code::UINT64,
            Elem::Double => code::DOUBLE,
            Elem::Int(IntKind::I8) => code::INT8,
            Elem::Int(IntKind::I16) => code::INT16,
            Elem::Int(IntKind::I32) => code::INT32,
            Elem::Int(IntKind::I64) => code::INT64,
            Elem::Int(IntKind::U8) => code::UINT8,
            Elem::Int(IntKind::U16) => code::UINT16,
            Elem::Int(IntKind::U32) => code::UINT32,
            Elem::Int(IntKind::U64) => code::UINT64,
            Elem::Bool => code::BOOL,
        }
    }

    /// The ONNX name.
    pub fn name(self) -> String {
        type_name(self.code())
    }

    /// The graph dtype of a tensor of this type on the device: the `Float` types as they are,
    /// and the integers of 16 bits or fewer and bool as the graph's `i8`, `u8`, `i16`, `u16`
    /// and `bool` (wider integers and double are folded only).
    pub fn device_dtype(self) -> Option<DType> {
        Some(match self {
            Elem::Float(d) => d,
            Elem::Int(IntKind::I8) => DType::I8,
            Elem::Int(IntKind::U8) => DType::U8,
            Elem::Int(IntKind::I16) => DType::I16,
            Elem::Int(IntKind::U16) => DType::U16,
            Elem::Int(IntKind::I32) => DType::I32,
            Elem::Int(IntKind::U32) => DType::U32,
            Elem::Int(IntKind::I64) => DType::I64,
            Elem::Int(IntKind::U64) => DType::U64,
            Elem::Bool => DType::Bool,
            _ => return None,
        })
    }

    /// The importer's type of a graph value of `dtype`: integers and bool as `Int`/`Bool`
    /// (so folding treats a known one as integers), the rest as `Float`.
    pub fn of_dtype(dtype: DType) -> Elem {
        match dtype {
            DType::I8 => Elem::Int(IntKind::I8),
            DType::U8 => Elem::Int(IntKind::U8),
            DType::I16 => Elem::Int(IntKind::I16),
            DType::U16 => Elem::Int(IntKind::U16),
            DType::Bool => Elem::Bool,
            DType::I32 => Elem::Int(IntKind::I32),
            DType::U32 => Elem::Int(IntKind::U32),
            DType::I64 => Elem::Int(IntKind::I64),
            DType::U64 => Elem::Int(IntKind::U64),
            d => Elem::Float(d),
        }
    }

    /// True for the integer and boolean types.
    pub fn is_integral(self) -> bool {
        matches!(self, Elem::Int(_) | Elem::Bool)
    }
}

/// Why a fold failed (turned into an error naming the node by the caller).
pub type FoldResult<T> = Result<T, String>;

/// Product of `shape`, or an error past [`FOLDED_ELEMENTS_MAX`].
pub fn checked_elements(shape: &[usize]) -> FoldResult<usize> {
    let mut n = 1usize;
    for &d in shape {
        n = n
            .checked_mul(d)
            .filter(|&n| n <= FOLDED_ELEMENTS_MAX)
            .ok_or_else(|| {
                format!("a tensor of shape {shape:?} exceeds {FOLDED_ELEMENTS_MAX} elements")
            })?;
    }
    Ok(n)
}

/// A tensor known at import time.
#[derive(Debug, Clone, PartialEq)]
pub struct Known {
    /// Element type.
    pub elem: Elem,
    /// Shape (may hold zeros: folding passes through empty tensors).
    pub shape: Vec<usize>,
    /// Elements, `elem.width()` bytes each (see the module docs).
    pub bytes: Vec<u8>,
}

impl Known {
    /// A tensor of integers (`elem` integral).
    pub fn from_ints(elem: Elem, shape: Vec<usize>, values: &[i64]) -> Known {
        debug_assert!(elem.is_integral());
        let values = values.iter().map(|&v| match elem {
            Elem::Int(k) => k.wrap(v),
            _ => i64::from(v != 0),
        });
        Known {
            elem,
            shape,
            bytes: values.flat_map(i64::to_le_bytes).collect(),
        }
    }

    /// A 1-D int64 tensor.
    pub fn int64s(values: &[i64]) -> Known {
        Known::from_ints(Elem::Int(IntKind::I64), vec![values.len()], values)
    }

    /// A tensor of `elem` from f64 values: floats round to nearest even (FP8 saturates),
    /// integers truncate toward zero and wrap, booleans are `v != 0`.
    pub fn from_f64(elem: Elem, shape: Vec<usize>, values: &[f64]) -> FoldResult<Known> {
        let bytes = match elem {
            Elem::Float(d) => {
                let f: Vec<f32> = values.iter().map(|&v| v as f32).collect();
                ipu_graph::encode_elements(d, &f)
            }
            Elem::Double => values.iter().flat_map(|v| v.to_le_bytes()).collect(),
            Elem::Int(k) => {
                let mut out = Vec::with_capacity(values.len() * 8);
                for &v in values {
                    if !v.is_finite() {
                        return Err(format!("{v} has no integer value"));
                    }
                    out.extend(k.wrap(v.trunc() as i64).to_le_bytes());
                }
                out
            }
            Elem::Bool => values
                .iter()
                .flat_map(|&v| i64::from(v != 0.0).to_le_bytes())
                .collect(),
        };
        Ok(Known { elem, shape, bytes })
    }

    /// The elements in `dtype`'s device layout (integers are held as i64 values here).
    pub fn device_bytes(&self, dtype: DType) -> Vec<u8> {
        if self.elem.is_integral() {
            let values: Vec<f32> = self
                .ints()
                .unwrap_or_default()
                .iter()
                .map(|&v| v as f32)
                .collect();
            ipu_graph::encode_elements(dtype, &values)
        } else {
            self.bytes.clone()
        }
    }

    /// Number of elements.
    pub fn elements(&self) -> usize {
        self.shape.iter().product()
    }

    /// The integer values (integral types only).
    pub fn ints(&self) -> Option<Vec<i64>> {
        self.elem.is_integral().then(|| {
            self.bytes
                .chunks_exact(8)
                .map(|c| i64::from_le_bytes(c.try_into().expect("8 bytes")))
                .collect()
        })
    }

    /// Every element as f64 (exact for every stored type but i64 beyond 2^53).
    pub fn f64s(&self) -> Vec<f64> {
        match self.elem {
            Elem::Float(d) => ipu_graph::decode_elements(d, &self.bytes)
                .into_iter()
                .map(f64::from)
                .collect(),
            Elem::Double => self
                .bytes
                .chunks_exact(8)
                .map(|c| f64::from_le_bytes(c.try_into().expect("8 bytes")))
                .collect(),
            Elem::Int(_) | Elem::Bool => self
                .ints()
                .expect("integral")
                .into_iter()
                .map(|v| v as f64)
                .collect(),
        }
    }

    /// The same elements under another shape of the same element count.
    pub fn reshaped(&self, shape: Vec<usize>) -> Known {
        debug_assert_eq!(shape.iter().product::<usize>(), self.elements());
        Known {
            shape,
            ..self.clone()
        }
    }

    /// Elements at the given flat offsets, in order.
    fn gather_offsets(&self, shape: Vec<usize>, offsets: impl Iterator<Item = usize>) -> Known {
        let w = self.elem.width();
        let mut bytes = Vec::with_capacity(shape.iter().product::<usize>() * w);
        for o in offsets {
            bytes.extend_from_slice(&self.bytes[o * w..(o + 1) * w]);
        }
        Known {
            elem: self.elem,
            shape,
            bytes,
        }
    }

    /// Output dim `i` is input dim `perm[i]` (`perm` a valid permutation).
    pub fn transposed(&self, perm: &[usize]) -> Known {
        let s = strides(&self.shape);
        let shape: Vec<usize> = perm.iter().map(|&p| self.shape[p]).collect();
        let permuted: Vec<usize> = perm.iter().map(|&p| s[p]).collect();
        let mut offsets = Vec::with_capacity(self.elements());
        walk(&shape, [&permuted], |_, [o]| offsets.push(o));
        self.gather_offsets(shape, offsets.into_iter())
    }

    /// Elements `start, start + step, ..` before `end` along `axis` (NumPy slicing with the
    /// bounds already clamped; `step` non-zero).
    pub fn sliced(&self, axis: usize, start: i64, end: i64, step: i64) -> Known {
        let idx: Vec<usize> = if step > 0 {
            (start..end)
                .step_by(step as usize)
                .map(|i| i as usize)
                .collect()
        } else {
            let mut v = Vec::new();
            let mut i = start;
            while i > end {
                v.push(i as usize);
                i += step;
            }
            v
        };
        self.take(axis, &idx)
            .expect("a slice is no larger than its tensor")
    }

    /// The entries `idx` (each in range) along `axis`, in order; an error if more entries
    /// than the axis has would exceed [`FOLDED_ELEMENTS_MAX`] elements.
    pub fn take(&self, axis: usize, idx: &[usize]) -> FoldResult<Known> {
        let outer: usize = self.shape[..axis].iter().product();
        let len = self.shape[axis];
        let inner: usize = self.shape[axis + 1..].iter().product();
        let mut shape = self.shape.clone();
        shape[axis] = idx.len();
        // Only repeated indices can make the result larger than the tensor.
        if idx.len() > len {
            checked_elements(&shape)?;
        }
        let offsets = (0..outer).flat_map(move |o| {
            idx.iter()
                .flat_map(move |&i| (0..inner).map(move |j| (o * len + i) * inner + j))
        });
        Ok(self.gather_offsets(shape, offsets))
    }

    /// Concatenation along `axis` of tensors of one type and rank, other dims equal.
    pub fn concat(parts: &[&Known], axis: usize) -> FoldResult<Known> {
        let first = parts[0];
        let mut shape = first.shape.clone();
        shape[axis] = 0;
        for p in parts {
            if p.elem != first.elem
                || p.shape.len() != first.shape.len()
                || p.shape
                    .iter()
                    .zip(&first.shape)
                    .enumerate()
                    .any(|(d, (x, y))| d != axis && x != y)
            {
                return Err(format!(
                    "{} {:?} does not concatenate with {} {:?} along axis {axis}",
                    p.elem.name(),
                    p.shape,
                    first.elem.name(),
                    first.shape
                ));
            }
            shape[axis] += p.shape[axis];
        }
        checked_elements(&shape)?;
        let outer: usize = shape[..axis].iter().product();
        let inner: usize = shape[axis + 1..].iter().product();
        let w = first.elem.width();
        let mut bytes = Vec::with_capacity(shape.iter().product::<usize>() * w);
        for o in 0..outer {
            for p in parts {
                let run = p.shape[axis] * inner * w;
                bytes.extend_from_slice(&p.bytes[o * run..(o + 1) * run]);
            }
        }
        Ok(Known {
            elem: first.elem,
            shape,
            bytes,
        })
    }

    /// Broadcast to `shape` (NumPy rules; `shape` is the broadcast result).
    pub fn broadcast_to(&self, shape: &[usize]) -> FoldResult<Known> {
        checked_elements(shape)?;
        let s = broadcast_strides(&self.shape, shape);
        let mut offsets = Vec::with_capacity(shape.iter().product());
        walk(shape, [&s], |_, [o]| offsets.push(o));
        Ok(self.gather_offsets(shape.to_vec(), offsets.into_iter()))
    }
}

/// Elementwise binary operations the evaluator folds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Binary {
    /// `a + b`.
    Add,
    /// `a - b`.
    Sub,
    /// `a * b`.
    Mul,
    /// `a / b` (integers truncate toward zero).
    Div,
    /// `a ^ b`.
    Pow,
    /// Maximum.
    Max,
    /// Minimum.
    Min,
    /// `a == b` (boolean result).
    Equal,
    /// `a < b`.
    Less,
    /// `a > b`.
    Greater,
    /// `a <= b`.
    LessOrEqual,
    /// `a >= b`.
    GreaterOrEqual,
    /// Logical and (booleans).
    And,
    /// Logical or.
    Or,
    /// Logical xor.
    Xor,
}

impl Binary {
    fn compares(self) -> bool {
        matches!(
            self,
            Binary::Equal
                | Binary::Less
                | Binary::Greater
                | Binary::LessOrEqual
                | Binary::GreaterOrEqual
        )
    }

    fn int(self, a: i64, b: i64) -> FoldResult<i64> {
        let overflow = || format!("{a} {self:?} {b} overflows int64");
        Ok(match self {
            Binary::Add => a.checked_add(b).ok_or_else(overflow)?,
            Binary::Sub => a.checked_sub(b).ok_or_else(overflow)?,
            Binary::Mul => a.checked_mul(b).ok_or_else(overflow)?,
            Binary::Div => {
                if b == 0 {
                    return Err(format!("integer division of {a} by zero"));
                }
                a.checked_div(b).ok_or_else(overflow)?
            }
            Binary::Pow => {
                let e = u32::try_from(b).map_err(|_| format!("integer power {a}^{b}"))?;
                a.checked_pow(e).ok_or_else(overflow)?
            }
            Binary::Max => a.max(b),
            Binary::Min => a.min(b),
            Binary::Equal => i64::from(a == b),
            Binary::Less => i64::from(a < b),
            Binary::Greater => i64::from(a > b),
            Binary::LessOrEqual => i64::from(a <= b),
            Binary::GreaterOrEqual => i64::from(a >= b),
            Binary::And => i64::from(a != 0 && b != 0),
            Binary::Or => i64::from(a != 0 || b != 0),
            Binary::Xor => i64::from((a != 0) != (b != 0)),
        })
    }

    fn float(self, a: f64, b: f64) -> f64 {
        let bool = |x: bool| f64::from(u8::from(x));
        match self {
            Binary::Add => a + b,
            Binary::Sub => a - b,
            Binary::Mul => a * b,
            Binary::Div => a / b,
            Binary::Pow => a.powf(b),
            Binary::Max => {
                if a.is_nan() || b.is_nan() {
                    f64::NAN
                } else {
                    a.max(b)
                }
            }
            Binary::Min => {
                if a.is_nan() || b.is_nan() {
                    f64::NAN
                } else {
                    a.min(b)
                }
            }
            Binary::Equal => bool(a == b),
            Binary::Less => bool(a < b),
            Binary::Greater => bool(a > b),
            Binary::LessOrEqual => bool(a <= b),
            Binary::GreaterOrEqual => bool(a >= b),
            Binary::And => bool(a != 0.0 && b != 0.0),
            Binary::Or => bool(a != 0.0 || b != 0.0),
            Binary::Xor => bool((a != 0.0) != (b != 0.0)),
        }
    }
}

/// `op(a, b)` elementwise with NumPy broadcasting; both operands of one type. Float results
/// are computed in f64 and rounded once to the type (correctly rounded for `+ - * /` of f32,
/// f16 and FP8 operands, as f64 holds more than twice their precision).
pub fn binary(op: Binary, a: &Known, b: &Known) -> FoldResult<Known> {
    if a.elem != b.elem {
        return Err(format!(
            "operand types {} and {} differ",
            a.elem.name(),
            b.elem.name()
        ));
    }
    let shape = broadcast_shapes(&a.shape, &b.shape)
        .ok_or_else(|| format!("shapes {:?} and {:?} do not broadcast", a.shape, b.shape))?;
    checked_elements(&shape)?;
    let sa = broadcast_strides(&a.shape, &shape);
    let sb = broadcast_strides(&b.shape, &shape);
    let out_elem = if op.compares() { Elem::Bool } else { a.elem };
    if matches!(op, Binary::And | Binary::Or | Binary::Xor) && a.elem != Elem::Bool {
        return Err(format!("{op:?} takes booleans, not {}", a.elem.name()));
    }
    if a.elem.is_integral() {
        let (x, y) = (a.ints().expect("integral"), b.ints().expect("integral"));
        let mut out = Vec::with_capacity(shape.iter().product());
        let mut failed = None;
        walk(&shape, [&sa, &sb], |_, [i, j]| match op.int(x[i], y[j]) {
            Ok(v) => out.push(v),
            Err(e) => {
                failed.get_or_insert(e);
                out.push(0);
            }
        });
        if let Some(e) = failed {
            return Err(e);
        }
        return Ok(Known::from_ints(out_elem, shape, &out));
    }
    let (x, y) = (a.f64s(), b.f64s());
    let mut out = Vec::with_capacity(shape.iter().product());
    walk(&shape, [&sa, &sb], |_, [i, j]| {
        out.push(op.float(x[i], y[j]))
    });
    Known::from_f64(out_elem, shape, &out)
}

/// `where(cond, x, y)` with NumPy broadcasting.
pub fn select(cond: &Known, x: &Known, y: &Known) -> FoldResult<Known> {
    if cond.elem != Elem::Bool {
        return Err(format!("the condition is {}, not BOOL", cond.elem.name()));
    }
    if x.elem != y.elem {
        return Err(format!(
            "branch types {} and {} differ",
            x.elem.name(),
            y.elem.name()
        ));
    }
    let shape = broadcast_shapes(&cond.shape, &x.shape)
        .and_then(|s| broadcast_shapes(&s, &y.shape))
        .ok_or_else(|| "the shapes do not broadcast".to_string())?;
    checked_elements(&shape)?;
    let c = cond.ints().expect("bool");
    let (sc, sx, sy) = (
        broadcast_strides(&cond.shape, &shape),
        broadcast_strides(&x.shape, &shape),
        broadcast_strides(&y.shape, &shape),
    );
    let w = x.elem.width();
    let mut bytes = Vec::with_capacity(shape.iter().product::<usize>() * w);
    walk(&shape, [&sc, &sx, &sy], |_, [i, j, k]| {
        let (src, o) = if c[i] != 0 { (x, j) } else { (y, k) };
        bytes.extend_from_slice(&src.bytes[o * w..(o + 1) * w]);
    });
    Ok(Known {
        elem: x.elem,
        shape,
        bytes,
    })
}

/// Elementwise unary operations the evaluator folds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unary {
    /// `-x`.
    Neg,
    /// `|x|`.
    Abs,
    /// `sqrt(x)`.
    Sqrt,
    /// `1 / x`.
    Reciprocal,
    /// `e^x`.
    Exp,
    /// `ln(x)`.
    Log,
    /// Logical not.
    Not,
    /// `max(x, 0)`.
    Relu,
    /// Round half to even.
    Round,
    /// Floor.
    Floor,
    /// Ceiling.
    Ceil,
}

/// `op(x)` elementwise.
pub fn unary(op: Unary, x: &Known) -> FoldResult<Known> {
    if op == Unary::Not {
        if x.elem != Elem::Bool {
            return Err(format!("Not takes booleans, not {}", x.elem.name()));
        }
        let v: Vec<i64> = x.ints().expect("bool").iter().map(|&b| 1 - b).collect();
        return Ok(Known::from_ints(Elem::Bool, x.shape.clone(), &v));
    }
    if x.elem.is_integral() {
        let mut out = Vec::with_capacity(x.elements());
        for v in x.ints().expect("integral") {
            out.push(match op {
                Unary::Neg => v.checked_neg().ok_or("negation overflows int64")?,
                Unary::Abs => v.checked_abs().ok_or("absolute value overflows int64")?,
                Unary::Relu => v.max(0),
                Unary::Round | Unary::Floor | Unary::Ceil => v,
                _ => return Err(format!("{op:?} of an integer tensor")),
            });
        }
        return Ok(Known::from_ints(x.elem, x.shape.clone(), &out));
    }
    let out: Vec<f64> = x
        .f64s()
        .into_iter()
        .map(|v| match op {
            Unary::Neg => -v,
            Unary::Abs => v.abs(),
            Unary::Sqrt => v.sqrt(),
            Unary::Reciprocal => 1.0 / v,
            Unary::Exp => v.exp(),
            Unary::Log => v.ln(),
            Unary::Relu => {
                if v < 0.0 {
                    0.0
                } else {
                    v
                }
            }
            Unary::Round => v.round_ties_even(),
            Unary::Floor => v.floor(),
            Unary::Ceil => v.ceil(),
            Unary::Not => unreachable!("handled above"),
        })
        .collect();
    Known::from_f64(x.elem, x.shape.clone(), &out)
}

/// Conversion to `to`: floats round to nearest even (FP8 saturates, as ONNX `Cast` with
/// `saturate = 1`), floats to integers truncate toward zero, integers wrap.
pub fn cast(x: &Known, to: Elem) -> FoldResult<Known> {
    if x.elem == to {
        return Ok(x.clone());
    }
    if x.elem.is_integral() && to.is_integral() {
        return Ok(Known::from_ints(
            to,
            x.shape.clone(),
            &x.ints().expect("integral"),
        ));
    }
    if let (Elem::Float(_), Elem::Float(d)) = (x.elem, to) {
        // Through f32: exact for every source value, then one rounding to the target.
        let f: Vec<f32> = ipu_graph::decode_elements(
            match x.elem {
                Elem::Float(s) => s,
                _ => unreachable!("matched above"),
            },
            &x.bytes,
        );
        return Ok(Known {
            elem: to,
            shape: x.shape.clone(),
            bytes: ipu_graph::encode_elements(d, &f),
        });
    }
    Known::from_f64(to, x.shape.clone(), &x.f64s())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ints(shape: &[usize], v: &[i64]) -> Known {
        Known::from_ints(Elem::Int(IntKind::I64), shape.to_vec(), v)
    }

    #[test]
    fn movement_on_integers() {
        let x = ints(&[2, 3], &[0, 1, 2, 3, 4, 5]);
        assert_eq!(x.transposed(&[1, 0]).ints().unwrap(), [0, 3, 1, 4, 2, 5]);
        assert_eq!(x.sliced(1, 2, -1, -1).ints().unwrap(), [2, 1, 0, 5, 4, 3]);
        assert_eq!(x.sliced(1, 2, 0, -1).ints().unwrap(), [2, 1, 5, 4]);
        assert_eq!(
            x.take(0, &[1, 1]).unwrap().ints().unwrap(),
            [3, 4, 5, 3, 4, 5]
        );
        let c = Known::concat(&[&x, &x.sliced(1, 0, 1, 1)], 1).unwrap();
        assert_eq!(c.shape, [2, 4]);
        assert_eq!(c.ints().unwrap(), [0, 1, 2, 0, 3, 4, 5, 3]);
        let b = ints(&[3], &[7, 8, 9]).broadcast_to(&[2, 3]).unwrap();
        assert_eq!(b.ints().unwrap(), [7, 8, 9, 7, 8, 9]);
    }

    #[test]
    fn arithmetic_broadcasts_and_checks() {
        let x = ints(&[2, 1], &[10, 20]);
        let y = ints(&[3], &[1, 2, 3]);
        let s = binary(Binary::Sub, &x, &y).unwrap();
        assert_eq!(s.shape, [2, 3]);
        assert_eq!(s.ints().unwrap(), [9, 8, 7, 19, 18, 17]);
        assert_eq!(
            binary(Binary::Div, &ints(&[1], &[-7]), &ints(&[1], &[2]))
                .unwrap()
                .ints()
                .unwrap(),
            [-3]
        );
        assert_eq!(
            binary(Binary::Div, &x, &ints(&[1], &[0])),
            Err("integer division of 10 by zero".to_string())
        );
        let e = binary(Binary::Equal, &y, &ints(&[], &[2])).unwrap();
        assert_eq!((e.elem, e.ints().unwrap()), (Elem::Bool, vec![0, 1, 0]));
        let f = Known::from_f64(Elem::Float(DType::F32), vec![2], &[0.5, 3.0]).unwrap();
        let r = cast(&f, Elem::Int(IntKind::I64)).unwrap();
        assert_eq!(r.ints().unwrap(), [0, 3]);
        let h = cast(&f, Elem::Float(DType::F16)).unwrap();
        assert_eq!(h.bytes, [0x00, 0x38, 0x00, 0x42]);
        assert_eq!(
            checked_elements(&[1 << 20, 1 << 20]),
            Err(format!(
                "a tensor of shape [1048576, 1048576] exceeds {FOLDED_ELEMENTS_MAX} elements"
            ))
        );
    }
}
