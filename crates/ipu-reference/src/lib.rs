//! Host evaluation of `ipu-graph` graphs: the ground truth device runs are checked against.
//!
//! Two precisions ([`Precision`]):
//!
//! **Exact** — values decoded to f32, math in f32 with f64 accumulation for matmul (through
//! `matrixmultiply::dgemm`), reductions, softmax and layer norm; no intermediate rounding:
//! casts are the identity and results keep f32 values, whatever the dtype.
//!
//! **Device** — what the device kernels compute, bit for bit where the operation order is
//! specified here (the compiler implements exactly this):
//! - every value is stored in its dtype: each operation's result is rounded once to the output
//!   dtype (f16 by round-to-nearest-even, FP8 by `ipu_numerics::encode` with
//!   round-to-nearest-even and saturation at the dtype's scale; f32 is not rounded);
//! - elementwise operations, scale, exp, softmax, layer norm and reductions compute in f32 from
//!   the decoded operands, then round to the output dtype; sums run in f32 in index order;
//!   softmax is `e_j = exp(x_j - max)`, `s = sum e_j` (index order), `e_j / s`; layer norm is
//!   `mean = sum x / n`, `var = sum (x - mean)^2 / n`, `(x - mean) / sqrt(var + epsilon)`;
//! - matmul follows the AMP exactly ([`gemm::AmpRule`], `docs/isa.md` section 6): per K block
//!   every column's accumulator starts at zero, takes the block's products in k order (f32),
//!   and takes the running partial after the phase of the column's chunk; the block's result,
//!   rounded to f16 for f16 partials, is the next running partial. FP8 operands are first
//!   converted to f16 (exact for F143 at scales -14..=8 and F152 at -7..=0, which covers every
//!   built-in; outside those the conversion rounds as f16 does);
//! - a graph cast from f32 to FP8 rounds once, as ONNX's `Cast` does (the device's
//!   `Kernel::CastOnce`); the casts the compiler inserts itself keep the conversion unit's
//!   path through f16;
//! - attention: `S = q k^T` by the matmul rule with the op's partials, rounded to the partials
//!   dtype; `T = partials(S * scale)` with masked entries `-inf`; `P = partials(softmax_f32(T))`
//!   along keys; `out = out_dtype(P v)` by the matmul rule;
//! - division is `a * (1 / b)` in f32 (the device's `rcp` then `mul`);
//! - the unary functions (`exp`, `sqrt`, `tanh`, `erf`, `log`) are the device's instruction
//!   sequences in f32, [`ipu_numerics::UnaryFn::device`] (exact: [`ipu_numerics::UnaryFn::exact`]);
//! - flash attention is its expansion into blocked operations (`ipu_graph::expand`, a causal
//!   mask included), each evaluated by the rules here: with f32 partials and f16
//!   probabilities, the shifted scores round to f16 before an f16 `exp`, and the row sum adds
//!   those f16 probabilities in f32, as the device's `flash_softmax` does. The exact precision
//!   evaluates the fused operation directly, without blocks.
//!
//! In both precisions a graph constant takes the values its data decodes to (f16 bits and FP8
//! codes at the dtype's scale are exact f32 values).
//!
//! Transcendentals (`exp`, `sqrt`) are Rust's f32 functions; the device's may differ in the
//! last f32 bit, which the f16/FP8 rounding of results almost always hides.

mod compare;
mod eval;
pub mod gemm;
mod inputs;

use ipu_graph::DType;
use ipu_numerics::{Overflow, round_to_f16};

pub use compare::{Comparison, Stats, Tolerance, compare, tolerance_versus_exact};
pub use eval::{DeviceSplits, evaluate, evaluate_split};
pub use gemm::F16_PARTIALS_K_BLOCK;
pub use inputs::{iteration_seed, make_input, make_inputs};

/// Which arithmetic the reference follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Precision {
    /// f32 values, f64 accumulation, no intermediate rounding.
    Exact,
    /// The device's storage types and accumulation order.
    Device,
}

impl std::str::FromStr for Precision {
    type Err = ReferenceError;
    fn from_str(s: &str) -> Result<Precision, ReferenceError> {
        match s {
            "exact" => Ok(Precision::Exact),
            "device" => Ok(Precision::Device),
            _ => Err(ReferenceError::BadPrecision(s.to_string())),
        }
    }
}

impl std::fmt::Display for Precision {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Precision::Exact => "exact",
            Precision::Device => "device",
        })
    }
}

/// Errors of the host reference.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ReferenceError {
    /// The graph does not verify.
    #[error("invalid graph: {0}")]
    Graph(ipu_graph::GraphError),
    /// Wrong number of input tensors.
    #[error("graph {graph} takes {expected} inputs, got {got}")]
    InputCount {
        /// Graph name.
        graph: String,
        /// Inputs of the graph.
        expected: usize,
        /// Tensors given.
        got: usize,
    },
    /// An input tensor does not match the graph input's type.
    #[error("input %{input}: expected {expected}, got {got}")]
    InputType {
        /// Input name.
        input: String,
        /// The graph's type.
        expected: String,
        /// The tensor's type.
        got: String,
    },
    /// A tensor's data or bytes do not match its type.
    #[error("tensor {ty}: {reason}")]
    BadTensor {
        /// Tensor type.
        ty: String,
        /// What is wrong.
        reason: String,
    },
    /// Unknown precision name.
    #[error("unknown precision `{0}` (known: exact, device)")]
    BadPrecision(String),
}

/// A host tensor: row-major f32 values of a typed tensor. Inputs and device-precision results
/// hold values exactly representable in `dtype`; exact-precision results hold unrounded f32.
#[derive(Debug, Clone, PartialEq)]
pub struct Tensor {
    /// Element type on the device.
    pub dtype: DType,
    /// Dimensions.
    pub shape: Vec<usize>,
    /// Values, row-major.
    pub data: Vec<f32>,
}

/// Rounds `x` to `dtype` (f16: round-to-nearest-even; FP8: RNE with saturation at the dtype's
/// scale; f32 unchanged; the other dtypes as [`convert`] with saturation).
pub fn round_to_dtype(dtype: DType, x: f32) -> f32 {
    convert(dtype, Overflow::Saturate, x)
}

/// `x` converted to `dtype` and back to f32: what a `cast` to `dtype` holds. Floats round to
/// nearest even (FP8 saturating or, with [`Overflow::Nan`], to NaN or infinity; bf16 and
/// f16 to infinity), FP4 and E8M0 as [`ipu_numerics::fp4_code`] and
/// [`ipu_numerics::e8m0_code`], integers as [`ipu_numerics::IntFormat::from_f32`], bool
/// `x != 0`.
pub fn convert(dtype: DType, overflow: Overflow, x: f32) -> f32 {
    let fp8 = |format, scale: i32| {
        ipu_numerics::decode(
            format,
            ipu_numerics::encode(format, x, scale, overflow),
            scale,
        )
    };
    match dtype {
        DType::F32 => x,
        DType::F16 => round_to_f16(x),
        DType::Bf16 => ipu_numerics::bf16_value(ipu_numerics::bf16_bits(x)),
        DType::F143 { scale } | DType::F152 { scale } => {
            fp8(dtype.fp8_format().expect("FP8"), i32::from(scale))
        }
        DType::E4M3FN => fp8(ipu_numerics::Fp8Format::E4M3FN, 0),
        DType::E5M2 => fp8(ipu_numerics::Fp8Format::E5M2, 0),
        DType::F4E2M1 => ipu_numerics::fp4_value(ipu_numerics::fp4_code(x)),
        DType::E8M0 => ipu_numerics::e8m0_value(ipu_numerics::e8m0_code(x)),
        DType::Bool => f32::from(u8::from(x != 0.0)),
        DType::I32 | DType::U32 | DType::I64 | DType::U64 => x.trunc(),
        _ => match dtype.int_format() {
            Some(f) => f.from_f32(x) as f32,
            None => unreachable!("every dtype is covered"),
        },
    }
}

/// Rounds every element of `data` to `dtype`.
pub fn round_slice(dtype: DType, data: &mut [f32]) {
    match dtype {
        DType::F32 => {}
        DType::F16 => data
            .iter_mut()
            .for_each(|x| *x = gemm::round_to_f16_fast(*x)),
        _ => data.iter_mut().for_each(|x| *x = round_to_dtype(dtype, *x)),
    }
}

impl Tensor {
    /// A tensor; checks that `data` has one value per element.
    pub fn new(dtype: DType, shape: Vec<usize>, data: Vec<f32>) -> Result<Tensor, ReferenceError> {
        let t = Tensor { dtype, shape, data };
        if t.data.len() != t.elements() {
            return Err(ReferenceError::BadTensor {
                ty: t.type_name(),
                reason: format!("{} values for {} elements", t.data.len(), t.elements()),
            });
        }
        Ok(t)
    }

    /// Number of elements.
    pub fn elements(&self) -> usize {
        self.ty().elements()
    }

    /// The graph type of this tensor.
    pub fn ty(&self) -> ipu_graph::TensorType {
        ipu_graph::TensorType::new(self.dtype, self.shape.clone())
    }

    fn type_name(&self) -> String {
        self.ty().to_string()
    }

    /// Device layout: row-major; f32 little-endian, f16 little-endian bits, FP8 one code per
    /// element at the dtype's scale. Values not representable in the dtype are rounded as
    /// [`round_to_dtype`] does.
    pub fn to_bytes(&self) -> Vec<u8> {
        ipu_graph::encode_elements(self.dtype, &self.data)
    }

    /// Reads a tensor from its device layout (see [`Tensor::to_bytes`]).
    pub fn from_bytes(
        dtype: DType,
        shape: Vec<usize>,
        bytes: &[u8],
    ) -> Result<Tensor, ReferenceError> {
        let ty = ipu_graph::TensorType::new(dtype, shape.clone());
        let expected = ty.elements().saturating_mul(dtype.bytes());
        if bytes.len() != expected {
            return Err(ReferenceError::BadTensor {
                ty: ty.to_string(),
                reason: format!("{} bytes, expected {expected}", bytes.len()),
            });
        }
        let data = ipu_graph::decode_elements(dtype, bytes);
        Ok(Tensor { dtype, shape, data })
    }

    /// Output statistics.
    pub fn stats(&self) -> Stats {
        compare::stats(&self.data)
    }
}

// Not `#[from]`: that would make the graph error the source as well, and error chains would
// print it twice.
impl From<ipu_graph::GraphError> for ReferenceError {
    fn from(e: ipu_graph::GraphError) -> Self {
        ReferenceError::Graph(e)
    }
}
