//! The tensor graph IR of ipu-stack: typed values, operations with shape and type inference, a
//! verifier, a text form that prints and parses back exactly, a builder, and a library of
//! built-in models.
//!
//! A [`Graph`] is an arena of [`Value`]s and [`Operation`]s addressed by typed ids
//! ([`ValueId`], [`OperationId`]). Operations are stored in definition order, which is also a
//! topological order: every operand of an operation is a graph input or the output of an earlier
//! operation. Every operation has exactly one output value.
//!
//! Architecture invariant: a graph that left [`GraphBuilder::finish`] or [`parse`] has passed
//! [`Graph::verify`]; the verifier re-derives every output type from the operation's inputs and
//! attributes ([`infer`]), so a verified graph never carries a stale annotation.

mod builder;
mod constant;
pub mod expand;
pub mod fuse;
mod index;
mod infer;
pub mod models;
pub mod repeat;
pub mod strided;
mod text;
pub mod tied;

use std::fmt;

pub use builder::GraphBuilder;
pub use constant::{
    Constant, ConstantData, byte_code, byte_values, decode_elements, encode_elements,
};
pub use index::{IndexBound, index_bounds};
pub use infer::{InferError, infer};
use ipu_numerics::Fp8Format;
pub use ipu_numerics::{MapFn, Overflow, UnaryFn};
pub use text::{
    ConstantFile, ExternalConstant, INLINE_CONSTANT_ELEMENTS_MAX, ParseError, PrintedGraph,
    Resolver, parse, parse_with, print, print_with_files,
};

/// Index of a value in its graph. Displays as `v<index>`; the text form names values by their
/// [`Value::name`] instead (`%name`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ValueId(pub u32);

/// Index of an operation in its graph (definition order). Displays as `op<index>`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct OperationId(pub u32);

impl fmt::Display for ValueId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "v{}", self.0)
    }
}

impl fmt::Display for OperationId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "op{}", self.0)
    }
}

/// Element type of a tensor. FP8 types carry their power-of-two scale: a code's value is
/// `decode(code) * 2^scale`, with the scale in [`ipu_numerics::SCALE_MIN`]..=
/// [`ipu_numerics::SCALE_MAX`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DType {
    /// IEEE binary32.
    F32,
    /// IEEE binary16.
    F16,
    /// Graphcore F143 (1-4-3, bias 8, FNUZ) with a tensor scale.
    F143 {
        /// Power-of-two scale of the tensor.
        scale: i8,
    },
    /// Graphcore F152 (1-5-2, bias 16, FNUZ) with a tensor scale.
    F152 {
        /// Power-of-two scale of the tensor.
        scale: i8,
    },
    /// bfloat16 (1-8-7): stored and converted; arithmetic is done in f32.
    Bf16,
    /// OCP FP8 E4M3FN (no infinities, NaN 0x7F/0xFF, negative zero), scale 0.
    E4M3FN,
    /// OCP FP8 E5M2 (IEEE-like, with infinities), scale 0.
    E5M2,
    /// OCP MX FP4 E2M1 (values 0 to 6, no NaN), one code per byte on the device.
    F4E2M1,
    /// OCP MX E8M0 (a power of two, 0xFF NaN).
    E8M0,
    /// 16-bit two's-complement integer.
    I16,
    /// 16-bit unsigned integer.
    U16,
    /// 8-bit two's-complement integer.
    I8,
    /// 8-bit unsigned integer.
    U8,
    /// 4-bit two's-complement integer, one per byte on the device (sign-extended).
    I4,
    /// 4-bit unsigned integer, one per byte on the device.
    U4,
    /// 2-bit two's-complement integer, one per byte on the device (sign-extended).
    I2,
    /// 2-bit unsigned integer, one per byte on the device.
    U2,
    /// Boolean, one byte (0 or 1).
    Bool,
    /// 32-bit two's-complement integer: moved, not computed (shape values and constants).
    I32,
    /// 32-bit unsigned integer: moved, not computed.
    U32,
    /// 64-bit two's-complement integer: moved, not computed (ONNX `Shape` results).
    I64,
    /// 64-bit unsigned integer: moved, not computed.
    U64,
}

/// How the device handles a dtype's elements.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DTypeClass {
    /// f32 and f16: every operation.
    Float,
    /// F143 and F152: matmul operands (on the AMP), casts and data movement.
    Fp8,
    /// Integers of 16 bits or fewer and bool: elementwise integer arithmetic, casts and data
    /// movement.
    Int(ipu_numerics::IntFormat),
    /// bf16, the OCP FP8 and the MX formats: casts and data movement.
    Stored,
    /// 32- and 64-bit integers: data movement only. The host reference holds every value as
    /// f32, so their values are limited to `±2^24` (checked where they enter a graph).
    Wide,
}

/// The largest magnitude of a 32- or 64-bit integer element: every integer up to it is an f32.
pub const WIDE_INT_MAX: i64 = 1 << 24;

impl DType {
    /// Bytes per element in device memory.
    pub fn bytes(self) -> usize {
        match self {
            DType::F32 => 4,
            DType::F16 | DType::Bf16 | DType::I16 | DType::U16 => 2,
            DType::I32 | DType::U32 => 4,
            DType::I64 | DType::U64 => 8,
            _ => 1,
        }
    }

    /// Every dtype without a scale, in the text form's order.
    pub const UNSCALED: [DType; 20] = [
        DType::F32,
        DType::F16,
        DType::Bf16,
        DType::E4M3FN,
        DType::E5M2,
        DType::F4E2M1,
        DType::E8M0,
        DType::I16,
        DType::U16,
        DType::I8,
        DType::U8,
        DType::I4,
        DType::U4,
        DType::I2,
        DType::U2,
        DType::Bool,
        DType::I32,
        DType::U32,
        DType::I64,
        DType::U64,
    ];

    /// How the device handles this dtype.
    pub fn class(self) -> DTypeClass {
        use ipu_numerics::IntFormat;
        let int = |bits, signed| DTypeClass::Int(IntFormat { bits, signed });
        match self {
            DType::F32 | DType::F16 => DTypeClass::Float,
            DType::F143 { .. } | DType::F152 { .. } => DTypeClass::Fp8,
            DType::I16 => int(16, true),
            DType::U16 => int(16, false),
            DType::I8 => int(8, true),
            DType::U8 | DType::Bool => int(8, false),
            DType::I4 => int(4, true),
            DType::U4 => int(4, false),
            DType::I2 => int(2, true),
            DType::U2 => int(2, false),
            DType::Bf16 | DType::E4M3FN | DType::E5M2 | DType::F4E2M1 | DType::E8M0 => {
                DTypeClass::Stored
            }
            DType::I32 | DType::U32 | DType::I64 | DType::U64 => DTypeClass::Wide,
        }
    }

    /// The integer format of an integer dtype (bool is not one).
    pub fn int_format(self) -> Option<ipu_numerics::IntFormat> {
        match self.class() {
            DTypeClass::Int(f) if self != DType::Bool => Some(f),
            _ => None,
        }
    }

    /// The format of a one-byte dtype's elements (FP8 with its scale, FP4, E8M0, bool, the
    /// integers of 8 bits or fewer).
    pub fn byte_type(self) -> Option<ipu_numerics::ByteType> {
        use ipu_numerics::ByteType as B;
        Some(match self {
            DType::F143 { scale } => B::Fp8(Fp8Format::F143, scale),
            DType::F152 { scale } => B::Fp8(Fp8Format::F152, scale),
            DType::E4M3FN => B::Fp8(Fp8Format::E4M3FN, 0),
            DType::E5M2 => B::Fp8(Fp8Format::E5M2, 0),
            DType::F4E2M1 => B::F4E2M1,
            DType::E8M0 => B::E8M0,
            DType::Bool => B::Bool,
            _ => match self.int_format() {
                Some(f) if f.bits <= 8 => B::Int {
                    bits: f.bits as u8,
                    signed: f.signed,
                },
                _ => return None,
            },
        })
    }

    /// True for f32 and f16, the types the device computes in.
    pub fn is_float(self) -> bool {
        self.class() == DTypeClass::Float
    }

    /// The name of an unscaled dtype in the text form (FP8 types with a scale: `f143`, `f152`).
    pub fn text_name(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::F16 => "f16",
            DType::F143 { .. } => "f143",
            DType::F152 { .. } => "f152",
            DType::Bf16 => "bf16",
            DType::E4M3FN => "e4m3fn",
            DType::E5M2 => "e5m2",
            DType::F4E2M1 => "f4e2m1",
            DType::E8M0 => "e8m0",
            DType::I16 => "i16",
            DType::U16 => "u16",
            DType::I8 => "i8",
            DType::U8 => "u8",
            DType::I4 => "i4",
            DType::U4 => "u4",
            DType::I2 => "i2",
            DType::U2 => "u2",
            DType::Bool => "bool",
            DType::I32 => "i32",
            DType::U32 => "u32",
            DType::I64 => "i64",
            DType::U64 => "u64",
        }
    }

    /// The name in the text form: `f32`, `f16`, `f143@-3`, `f152@0`.
    pub fn name(self) -> String {
        self.to_string()
    }

    /// The FP8 format, if this is an FP8 type.
    pub fn fp8_format(self) -> Option<Fp8Format> {
        match self {
            DType::F143 { .. } => Some(Fp8Format::F143),
            DType::F152 { .. } => Some(Fp8Format::F152),
            _ => None,
        }
    }

    /// The FP8 scale, if this is an FP8 type.
    pub fn scale(self) -> Option<i32> {
        match self {
            DType::F143 { scale } | DType::F152 { scale } => Some(i32::from(scale)),
            _ => None,
        }
    }

    /// True for the FP8 types.
    pub fn is_fp8(self) -> bool {
        self.fp8_format().is_some()
    }

    /// Checks the FP8 scale range.
    pub fn check(self) -> Result<(), String> {
        match self.scale() {
            Some(s) if !(ipu_numerics::SCALE_MIN..=ipu_numerics::SCALE_MAX).contains(&s) => {
                Err(format!(
                    "FP8 scale {s} outside {}..={}",
                    ipu_numerics::SCALE_MIN,
                    ipu_numerics::SCALE_MAX
                ))
            }
            _ => Ok(()),
        }
    }

    /// Parses a dtype name (`f32`, `f16`, `f143@-3`, `f152@0`; `f143`/`f152` mean scale 0).
    pub fn from_name(name: &str) -> Option<DType> {
        let (base, scale) = match name.split_once('@') {
            Some((b, s)) => (b, s.parse::<i8>().ok()?),
            None => (name, 0),
        };
        match base {
            "f143" => Some(DType::F143 { scale }),
            "f152" => Some(DType::F152 { scale }),
            _ if !name.contains('@') => DType::UNSCALED.into_iter().find(|d| d.text_name() == base),
            _ => None,
        }
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DType::F143 { scale } => write!(f, "f143@{scale}"),
            DType::F152 { scale } => write!(f, "f152@{scale}"),
            d => f.write_str(d.text_name()),
        }
    }
}

/// Largest element count of any tensor: 2^31, more than twice the memory of a whole GC200
/// (1472 tiles x 624 KiB, about 0.9 GiB) in bytes, so no real model is refused, while element
/// and byte counts stay far from overflow and the host reference stays allocatable.
pub const TENSOR_ELEMENTS_MAX: usize = 1 << 31;
/// Largest rank of a tensor (the package's host tensors have the same bound).
pub const RANK_MAX: usize = 16;

/// A tensor type: element type and shape (row-major; an empty shape is a scalar).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TensorType {
    /// Element type.
    pub dtype: DType,
    /// Dimensions, outermost first.
    pub shape: Vec<usize>,
}

impl TensorType {
    /// A tensor type.
    pub fn new(dtype: DType, shape: impl Into<Vec<usize>>) -> TensorType {
        TensorType {
            dtype,
            shape: shape.into(),
        }
    }

    /// Number of elements (saturating; a verified type has at most [`TENSOR_ELEMENTS_MAX`]).
    pub fn elements(&self) -> usize {
        self.shape.iter().fold(1usize, |n, &d| n.saturating_mul(d))
    }

    /// Checks the dtype, that every dimension is at least 1 and the element-count limit.
    pub fn check(&self) -> Result<(), String> {
        self.dtype.check()?;
        if self.shape.len() > RANK_MAX {
            return Err(format!(
                "a {} tensor of rank {}: the largest rank is {RANK_MAX}",
                self.dtype,
                self.shape.len()
            ));
        }
        if self.shape.contains(&0) {
            return Err(format!("{self} has a dimension of size 0"));
        }
        if self.elements() > TENSOR_ELEMENTS_MAX {
            return Err(format!(
                "{self} has more than {TENSOR_ELEMENTS_MAX} elements"
            ));
        }
        Ok(())
    }

    /// Bytes in device memory.
    pub fn bytes(&self) -> usize {
        self.elements() * self.dtype.bytes()
    }
}

impl fmt::Display for TensorType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}[", self.dtype)?;
        for (i, d) in self.shape.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{d}")?;
        }
        f.write_str("]")
    }
}

/// A value: a graph input, a constant or the output of one operation.
#[derive(Debug, Clone, PartialEq)]
pub struct Value {
    /// Name, unique in the graph (written `%name` in the text form).
    pub name: String,
    /// Type.
    pub ty: TensorType,
    /// The operation producing it; `None` for graph inputs and constants.
    pub producer: Option<OperationId>,
}

/// What an operation computes, with its attributes. Shapes are row-major; `axis` counts from
/// the outermost dimension. The numerics of each kind in device precision are specified in the
/// `ipu-reference` crate and in `docs/numerics.md`.
#[derive(Debug, Clone, PartialEq)]
pub enum OpKind {
    /// `[.., m, k] x [.., k, n] -> [.., m, n]`; leading (batch) dimensions are equal or 1
    /// (broadcast), and both operands have rank >= 2. Operands are both f32, both f16, or both
    /// FP8 (any format and scale). `partials` is the accumulation type (f32, or f16 for f16/FP8
    /// operands); `out` the output dtype.
    MatMul {
        /// Accumulation type.
        partials: DType,
        /// Output dtype.
        out: DType,
    },
    /// Permutes the dimensions: output dim `i` is input dim `perm[i]`.
    Transpose {
        /// A permutation of `0..rank`.
        perm: Vec<usize>,
    },
    /// Same elements in row-major order, new shape (same element count).
    Reshape {
        /// The new shape.
        shape: Vec<usize>,
    },
    /// Elements `start..end` along `axis`.
    Slice {
        /// Axis.
        axis: usize,
        /// First index.
        start: usize,
        /// One past the last index.
        end: usize,
    },
    /// Concatenation of one or more operands along `axis` (same dtype, other dims equal).
    Concat {
        /// Axis.
        axis: usize,
    },
    /// Rows of a table looked up by run-time indices: `data[.., indices[..], ..]` along
    /// `axis` of the first operand, with the second operand's (i32) indices; the output's shape
    /// is `data.shape[..axis] ++ indices.shape ++ data.shape[axis + 1..]`. A negative index
    /// counts from the end, as in ONNX; an index outside `-n..n` (for `n` entries along `axis`)
    /// reads zeros on the device and in the reference (`ipu run` refuses such an input before
    /// running: [`crate::index_bounds`]).
    Gather {
        /// The looked-up axis of the table.
        axis: usize,
    },
    /// Columns of a 2-D table `[h, n]` looked up by run-time indices: the rows of the table's
    /// transpose, `out[i.., c] = data[c, indices[i..]]`, of shape `indices.shape ++ [h]` (the
    /// same as `gather` along axis 0 of `data`ᵀ). A tied embedding is held once as the LM
    /// head's `[hidden, vocab]` operand and looked up this way; indices as for `gather`.
    GatherColumns,
    /// Elementwise `a + b`.
    Add,
    /// Elementwise `a - b`.
    Sub,
    /// Elementwise `a * b`.
    Mul,
    /// Elementwise `a / b`.
    Div,
    /// Elementwise maximum.
    Max,
    /// `x * factor`.
    Scale {
        /// The constant factor.
        factor: f32,
    },
    /// A one-operand function applied to every element (`exp`, `sqrt`, `tanh`, `erf`, `log`):
    /// its name, exact value and device value are [`UnaryFn`]'s. f32 and f16.
    Unary(UnaryFn),
    /// A predicate, logical operation or selection ([`MapFn`]: comparisons, `not`, `and`,
    /// `or`, `xor`, `is_nan`, `is_inf`, `where`) over operands of the output's shape: a
    /// predicate's result is bool, `where`'s has the type of its second and third operands.
    /// Operands are floats (not FP8), integers or bool; `not`, `and`, `or` and `xor` take bool.
    Map(MapFn),
    /// The causal mask of a block of attention scores: `x[.., i, j]` becomes `-inf` where key
    /// `key_start + j` comes after query `i`, and is kept otherwise. f32 and f16 only.
    CausalMask {
        /// The key of column 0.
        key_start: usize,
    },
    /// Maximum along `axis`; the axis is kept with size 1.
    ReduceMax {
        /// Axis.
        axis: usize,
    },
    /// Sum along `axis`; the axis is kept with size 1.
    ReduceSum {
        /// Axis.
        axis: usize,
    },
    /// `exp(x - max) / sum(exp(x - max))` along `axis`.
    Softmax {
        /// Axis.
        axis: usize,
    },
    /// Conversion to another dtype (to and from FP8 with its scale): floats round to nearest
    /// even, integers as [`ipu_numerics::IntFormat::from_f32`] converts (NumPy's `astype`),
    /// bool is `x != 0`.
    Cast {
        /// Target dtype.
        to: DType,
        /// What a float target does beyond its largest value: saturate, or NaN/infinity as
        /// ONNX's `saturate = 0` (FP8 targets; others ignore it).
        overflow: ipu_numerics::Overflow,
    },
    /// `(x - mean) / sqrt(var + epsilon)` over the last axis, without affine parameters.
    LayerNorm {
        /// Added to the variance.
        epsilon: f32,
    },
    /// `softmax(scale * q k^T [+ causal mask]) v` with `q: [.., sq, d]`, `k: [.., sk, d]`,
    /// `v: [.., sk, dv]` -> `[.., sq, dv]`; batch dims equal. Causal requires `sq == sk` and
    /// masks keys after the query's position.
    Attention {
        /// Score scale, usually `1/sqrt(d)`.
        scale: f32,
        /// Causal mask.
        causal: bool,
        /// Accumulation and intermediate (scores, probabilities) type.
        partials: DType,
        /// Output dtype.
        out: DType,
    },
    /// Attention computed as one fused operation, in blocks of `block_q` queries and
    /// `block_k` keys with an online softmax. Same types and shapes as [`OpKind::Attention`],
    /// and two extensions:
    /// - grouped-query attention: `k` and `v` may have fewer heads (the dimension before the
    ///   sequence) than `q`, a divisor of `q`'s; query head `h` reads kv head
    ///   `h / (q heads / kv heads)`;
    /// - an optional fourth operand, a mask broadcastable to the scores `[.., sq, sk]`
    ///   (aligned from the right, each dimension equal or 1): an f32 or f16 mask is added to
    ///   the scaled scores, a bool mask hides the keys where it is false (the exact precision
    ///   excludes them; the device precision sets their scores to the lowest finite value of
    ///   the partials type, which is the same unless a row sees no key at all). The causal
    ///   mask, if any, applies after it.
    FlashAttention {
        /// Score scale.
        scale: f32,
        /// Causal mask.
        causal: bool,
        /// Queries per block.
        block_q: usize,
        /// Keys per block.
        block_k: usize,
        /// Accumulation type.
        partials: DType,
        /// Output dtype.
        out: DType,
    },
}

impl OpKind {
    /// Whether this is a one-operand elementwise arithmetic operation (`scale`, `exp`,
    /// `sqrt`, `tanh`, `erf`, `log`): the same function applied to every element.
    pub fn is_unary_arithmetic(&self) -> bool {
        matches!(self, OpKind::Scale { .. } | OpKind::Unary(_))
    }

    /// A saturating cast to `to`.
    pub fn cast(to: DType) -> OpKind {
        OpKind::Cast {
            to,
            overflow: ipu_numerics::Overflow::Saturate,
        }
    }

    /// The mnemonic in the text form.
    pub fn mnemonic(&self) -> &'static str {
        match self {
            OpKind::MatMul { .. } => "matmul",
            OpKind::Transpose { .. } => "transpose",
            OpKind::Reshape { .. } => "reshape",
            OpKind::Slice { .. } => "slice",
            OpKind::Concat { .. } => "concat",
            OpKind::Gather { .. } => "gather",
            OpKind::GatherColumns => "gather_columns",
            OpKind::Add => "add",
            OpKind::Sub => "sub",
            OpKind::Mul => "mul",
            OpKind::Div => "div",
            OpKind::Max => "max",
            OpKind::Scale { .. } => "scale",
            OpKind::Unary(f) => f.mnemonic(),
            OpKind::Map(f) => f.mnemonic(),
            OpKind::CausalMask { .. } => "causal_mask",
            OpKind::ReduceMax { .. } => "reduce_max",
            OpKind::ReduceSum { .. } => "reduce_sum",
            OpKind::Softmax { .. } => "softmax",
            OpKind::Cast { .. } => "cast",
            OpKind::LayerNorm { .. } => "layer_norm",
            OpKind::Attention { .. } => "attention",
            OpKind::FlashAttention { .. } => "flash_attention",
        }
    }
}

/// An operation: a kind applied to operands, producing one output value.
#[derive(Debug, Clone, PartialEq)]
pub struct Operation {
    /// Name; the builder and the parser use the output value's name.
    pub name: String,
    /// What it computes.
    pub kind: OpKind,
    /// Operands.
    pub inputs: Vec<ValueId>,
    /// Results (exactly one).
    pub outputs: Vec<ValueId>,
}

/// A tensor graph. Build one with [`GraphBuilder`] or [`parse`].
#[derive(Debug, Clone, PartialEq)]
pub struct Graph {
    /// Name of the graph.
    pub name: String,
    values: Vec<Value>,
    operations: Vec<Operation>,
    inputs: Vec<ValueId>,
    outputs: Vec<ValueId>,
    /// Ordered by value id.
    constants: Vec<Constant>,
}

/// Why a graph is malformed. Messages name the operation and the operand.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum GraphError {
    /// An operation's operands or attributes are invalid, or its output type disagrees with
    /// inference.
    #[error("operation %{operation} ({mnemonic}){}: {reason}", operand.as_ref().map(|o| format!(", operand {o}")).unwrap_or_default())]
    Operation {
        /// Operation name.
        operation: String,
        /// Its mnemonic.
        mnemonic: &'static str,
        /// The operand concerned (`#index %name`), if one.
        operand: Option<String>,
        /// What is wrong.
        reason: String,
    },
    /// A value is malformed or used wrongly.
    #[error("value %{value}: {reason}")]
    Value {
        /// Value name.
        value: String,
        /// What is wrong.
        reason: String,
    },
    /// The graph as a whole is malformed.
    #[error("graph {graph}: {reason}")]
    Graph {
        /// Graph name.
        graph: String,
        /// What is wrong.
        reason: String,
    },
}

impl Graph {
    /// The value with id `id`. Panics on an id from another graph.
    pub fn value(&self, id: ValueId) -> &Value {
        &self.values[id.0 as usize]
    }

    /// The operation with id `id`. Panics on an id from another graph.
    pub fn operation(&self, id: OperationId) -> &Operation {
        &self.operations[id.0 as usize]
    }

    /// All values, indexed by [`ValueId`].
    pub fn values(&self) -> &[Value] {
        &self.values
    }

    /// All operations in definition (topological) order, indexed by [`OperationId`].
    pub fn operations(&self) -> &[Operation] {
        &self.operations
    }

    /// Ids of all operations in topological order.
    pub fn operation_ids(&self) -> impl Iterator<Item = OperationId> + '_ {
        (0..self.operations.len() as u32).map(OperationId)
    }

    /// Graph inputs in order.
    pub fn inputs(&self) -> &[ValueId] {
        &self.inputs
    }

    /// Graph outputs in order.
    pub fn outputs(&self) -> &[ValueId] {
        &self.outputs
    }

    /// Constants, ordered by value id.
    pub fn constants(&self) -> &[Constant] {
        &self.constants
    }

    /// The constant defining value `id`, if `id` is a constant.
    pub fn constant(&self, id: ValueId) -> Option<&Constant> {
        self.constants
            .binary_search_by_key(&id, |c| c.value)
            .ok()
            .map(|i| &self.constants[i])
    }

    /// Looks a value up by name.
    pub fn value_by_name(&self, name: &str) -> Option<ValueId> {
        self.values
            .iter()
            .position(|v| v.name == name)
            .map(|i| ValueId(i as u32))
    }

    /// Checks every structural rule and re-infers every operation's output type.
    pub fn verify(&self) -> Result<(), GraphError> {
        let graph_err = |reason: String| GraphError::Graph {
            graph: self.name.clone(),
            reason,
        };
        if self.outputs.is_empty() {
            return Err(graph_err("the graph has no outputs".into()));
        }
        let mut names = std::collections::BTreeSet::new();
        for v in &self.values {
            if !names.insert(v.name.as_str()) {
                return Err(GraphError::Value {
                    value: v.name.clone(),
                    reason: "defined more than once".into(),
                });
            }
            if !text::is_identifier(&v.name) {
                return Err(GraphError::Value {
                    value: v.name.clone(),
                    reason: "the name is not an identifier ([A-Za-z0-9_.-]+)".into(),
                });
            }
            v.ty.check().map_err(|reason| GraphError::Value {
                value: v.name.clone(),
                reason,
            })?;
        }
        // Which values are available so far (inputs, then each operation's output in order).
        let mut defined = vec![false; self.values.len()];
        for &i in &self.inputs {
            let v = self
                .values
                .get(i.0 as usize)
                .ok_or_else(|| graph_err(format!("input {i} does not exist")))?;
            if v.producer.is_some() || defined[i.0 as usize] {
                return Err(GraphError::Value {
                    value: v.name.clone(),
                    reason: "a graph input must be listed once and have no producer".into(),
                });
            }
            defined[i.0 as usize] = true;
        }
        for (n, c) in self.constants.iter().enumerate() {
            let v = self
                .values
                .get(c.value.0 as usize)
                .ok_or_else(|| graph_err(format!("constant {} does not exist", c.value)))?;
            let value_err = |reason: String| GraphError::Value {
                value: v.name.clone(),
                reason,
            };
            if n > 0 && self.constants[n - 1].value >= c.value {
                return Err(value_err(
                    "constants must be listed once, ordered by value id".into(),
                ));
            }
            if v.producer.is_some() || defined[c.value.0 as usize] {
                return Err(value_err(
                    "a constant must not be a graph input or have a producer".into(),
                ));
            }
            if c.data.len() != v.ty.bytes() {
                return Err(value_err(format!(
                    "constant data has {} bytes but {} needs {}",
                    c.data.len(),
                    v.ty,
                    v.ty.bytes()
                )));
            }
            defined[c.value.0 as usize] = true;
        }
        for (index, op) in self.operations.iter().enumerate() {
            let op_err = |operand: Option<String>, reason: String| GraphError::Operation {
                operation: op.name.clone(),
                mnemonic: op.kind.mnemonic(),
                operand,
                reason,
            };
            let mut types = Vec::with_capacity(op.inputs.len());
            for (n, &i) in op.inputs.iter().enumerate() {
                let Some(v) = self.values.get(i.0 as usize) else {
                    return Err(op_err(Some(format!("#{n}")), format!("unknown value {i}")));
                };
                if !defined[i.0 as usize] {
                    return Err(op_err(
                        Some(format!("#{n} %{}", v.name)),
                        "used before it is defined".into(),
                    ));
                }
                types.push(&v.ty);
            }
            let inferred = infer(&op.kind, &types).map_err(|e| {
                op_err(
                    e.operand
                        .map(|n| format!("#{n} %{}", self.values[op.inputs[n].0 as usize].name)),
                    e.reason,
                )
            })?;
            let [out] = op.outputs[..] else {
                return Err(op_err(
                    None,
                    format!("has {} results, expected 1", op.outputs.len()),
                ));
            };
            let Some(v) = self.values.get(out.0 as usize) else {
                return Err(op_err(None, format!("result {out} does not exist")));
            };
            if v.producer != Some(OperationId(index as u32)) || defined[out.0 as usize] {
                return Err(op_err(None, format!("result %{} is defined twice", v.name)));
            }
            if v.ty != inferred {
                return Err(op_err(
                    None,
                    format!(
                        "result %{} is annotated {} but the operation gives {inferred}",
                        v.name, v.ty
                    ),
                ));
            }
            defined[out.0 as usize] = true;
        }
        if let Some(i) = defined.iter().position(|d| !d) {
            return Err(GraphError::Value {
                value: self.values[i].name.clone(),
                reason: "is neither a graph input, a constant nor produced by an operation".into(),
            });
        }
        for (n, &o) in self.outputs.iter().enumerate() {
            if o.0 as usize >= self.values.len() {
                return Err(graph_err(format!("output {o} does not exist")));
            }
            // Outputs are named host tensors: each value once.
            if self.outputs[..n].contains(&o) {
                return Err(GraphError::Value {
                    value: self.values[o.0 as usize].name.clone(),
                    reason: "is listed as an output twice".into(),
                });
            }
        }
        Ok(())
    }
}
