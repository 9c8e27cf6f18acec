//! The plain types the kernels are specialised by and the generators read: element types
//! ([`Elem`], [`CastType`]), elementwise operations ([`BinOp`], [`UnOp`]), and the sizes every
//! kernel shares ([`OVERREAD_BYTES`], [`vector_elements`]). Nothing here calls a generator.

use ipu_isa::{FBinOp, FType, Fp8Format};
use ipu_numerics::UnaryFn;

/// Bytes a kernel may read past the end of an input range.
pub const OVERREAD_BYTES: u32 = 32;

/// Elements per vector for a 64-bit register pair of each element size (bytes).
pub const fn vector_elements(element_bytes: u32) -> u32 {
    8 / element_bytes
}

/// Element types of vector kernels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Elem {
    /// f32 in f32v2 vectors.
    F32,
    /// f16 in f16v4 vectors.
    F16,
}

impl Elem {
    /// The float type of a 64-bit vector of this element type.
    pub(crate) fn vector_type(self) -> FType {
        match self {
            Elem::F32 => FType::F32v2,
            Elem::F16 => FType::F16v4,
        }
    }
}

/// Binary elementwise operations.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum BinOp {
    /// `a + b`
    Add,
    /// `a - b`
    Sub,
    /// `a * b`
    Mul,
    /// `a / b`, as `a * (1/b)` computed in f32.
    Div,
    /// `max(a, b)`
    Max,
}

impl BinOp {
    /// The float operation that computes this one in a single instruction; `None` for a
    /// division, which kernels compute as `a * rcp(b)`.
    pub(crate) fn float_op(self) -> Option<FBinOp> {
        match self {
            BinOp::Add => Some(FBinOp::Add),
            BinOp::Sub => Some(FBinOp::Sub),
            BinOp::Mul => Some(FBinOp::Mul),
            BinOp::Max => Some(FBinOp::Max),
            BinOp::Div => None,
        }
    }
}

/// Unary elementwise operations: a function of the graph's, or the scale by a factor.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub enum UnOp {
    /// `f(x)`, computed in f32 (`unary`: one instruction for `exp` and `sqrt`, a sequence for
    /// the others, lane by lane [`UnaryFn::device`]).
    Fn(UnaryFn),
    /// `x * factor`, computed in f32 (the factor's f32 bits are state word 3).
    Scale,
}

impl UnOp {
    /// The rank that orders operations: `exp`, the scale, then the other functions in
    /// [`UnaryFn`]'s order. Kernels are laid out in this order (`Kernel`'s `Ord`), so it stays
    /// as it was when the functions were variants of this type.
    fn rank(self) -> u8 {
        match self {
            UnOp::Fn(UnaryFn::Exp) => 0,
            UnOp::Scale => 1,
            UnOp::Fn(f) => 2 + f as u8,
        }
    }
}

impl Ord for UnOp {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.rank().cmp(&other.rank())
    }
}

impl PartialOrd for UnOp {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl std::fmt::Debug for UnOp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            UnOp::Fn(func) => write!(f, "{func:?}"),
            UnOp::Scale => f.write_str("Scale"),
        }
    }
}

/// Element types of casts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum CastType {
    /// f32
    F32,
    /// f16
    F16,
    /// FP8 with its format and scale.
    Fp8(Fp8Format, i8),
}

impl CastType {
    /// Bytes per element.
    pub fn bytes(self) -> u32 {
        match self {
            CastType::F32 => 4,
            CastType::F16 => 2,
            CastType::Fp8(..) => 1,
        }
    }
}
