//! The graph's predicates, logic and selection (`OpKind::Map`): comparisons, `not`, `and`,
//! `or`, `xor`, `is_nan`, `is_inf` and `where`, each defined once here by its name in the text
//! form, its operands and its value, which the reference evaluates and the device's map kernel
//! (`ipu-kernels`, one element at a time through f32) computes. Every operand value the graph
//! admits is an f32 exactly (integers within `±2^24`), so the device's result is this one bit
//! for bit.
//!
//! The results of predicates are bool (0 or 1); a comparison with NaN is false, as IEEE and
//! ONNX define it. `where(c, x, y)` is `x` where `c` is not zero, else `y`.

/// A predicate, logical operation or selection of the graph, elementwise over operands of one
/// shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum MapFn {
    /// `a == b`.
    Equal,
    /// `a < b`.
    Less,
    /// `a <= b`.
    LessOrEqual,
    /// `a > b`.
    Greater,
    /// `a >= b`.
    GreaterOrEqual,
    /// `a == 0`.
    Not,
    /// `a != 0 and b != 0`.
    And,
    /// `a != 0 or b != 0`.
    Or,
    /// `(a != 0) != (b != 0)`.
    Xor,
    /// `a` is NaN.
    IsNaN,
    /// `a` is an infinity of either sign.
    IsInf,
    /// `a` is `+inf`.
    IsPosInf,
    /// `a` is `-inf`.
    IsNegInf,
    /// `b` where `a != 0`, else `c`.
    Where,
}

impl MapFn {
    /// Every function, in text order.
    pub const ALL: [MapFn; 14] = [
        MapFn::Equal,
        MapFn::Less,
        MapFn::LessOrEqual,
        MapFn::Greater,
        MapFn::GreaterOrEqual,
        MapFn::Not,
        MapFn::And,
        MapFn::Or,
        MapFn::Xor,
        MapFn::IsNaN,
        MapFn::IsInf,
        MapFn::IsPosInf,
        MapFn::IsNegInf,
        MapFn::Where,
    ];

    /// The mnemonic in the graph's text form.
    pub fn mnemonic(self) -> &'static str {
        match self {
            MapFn::Equal => "equal",
            MapFn::Less => "less",
            MapFn::LessOrEqual => "less_or_equal",
            MapFn::Greater => "greater",
            MapFn::GreaterOrEqual => "greater_or_equal",
            MapFn::Not => "not",
            MapFn::And => "and",
            MapFn::Or => "or",
            MapFn::Xor => "xor",
            MapFn::IsNaN => "is_nan",
            MapFn::IsInf => "is_inf",
            MapFn::IsPosInf => "is_pos_inf",
            MapFn::IsNegInf => "is_neg_inf",
            MapFn::Where => "where",
        }
    }

    /// The function a mnemonic names.
    pub fn from_mnemonic(name: &str) -> Option<MapFn> {
        MapFn::ALL.into_iter().find(|f| f.mnemonic() == name)
    }

    /// Its operands.
    pub fn arity(self) -> usize {
        match self {
            MapFn::Not | MapFn::IsNaN | MapFn::IsInf | MapFn::IsPosInf | MapFn::IsNegInf => 1,
            MapFn::Where => 3,
            _ => 2,
        }
    }

    /// Whether the result is bool (every function but `where`, whose result has the type of
    /// its second and third operands).
    pub fn is_predicate(self) -> bool {
        self != MapFn::Where
    }

    /// Whether the operands must be bool (`not`, `and`, `or`, `xor`), as ONNX types them.
    pub fn takes_bools(self) -> bool {
        matches!(self, MapFn::Not | MapFn::And | MapFn::Or | MapFn::Xor)
    }

    /// The value for operands `x` (as many as [`MapFn::arity`]).
    pub fn eval(self, x: &[f32]) -> f32 {
        let b = |v: bool| f32::from(u8::from(v));
        match self {
            MapFn::Equal => b(x[0] == x[1]),
            MapFn::Less => b(x[0] < x[1]),
            MapFn::LessOrEqual => b(x[0] <= x[1]),
            MapFn::Greater => b(x[0] > x[1]),
            MapFn::GreaterOrEqual => b(x[0] >= x[1]),
            MapFn::Not => b(x[0] == 0.0),
            MapFn::And => b(x[0] != 0.0 && x[1] != 0.0),
            MapFn::Or => b(x[0] != 0.0 || x[1] != 0.0),
            MapFn::Xor => b((x[0] != 0.0) != (x[1] != 0.0)),
            MapFn::IsNaN => b(x[0].is_nan()),
            MapFn::IsInf => b(x[0].is_infinite()),
            MapFn::IsPosInf => b(x[0] == f32::INFINITY),
            MapFn::IsNegInf => b(x[0] == f32::NEG_INFINITY),
            MapFn::Where => {
                if x[0] != 0.0 {
                    x[1]
                } else {
                    x[2]
                }
            }
        }
    }
}
