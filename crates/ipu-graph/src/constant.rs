//! Constant tensors of a graph (weights, biases, masks): a value with no producer whose data is
//! part of the graph.
//!
//! The data is stored as the element type's bytes in device layout: row-major, f32 and f16
//! little-endian, FP8 one code per element (the value is `decode(code) * 2^scale` of the
//! value's dtype). Storing bytes keeps every f16 bit pattern and every FP8 code exactly as
//! given.

use std::fmt;
use std::sync::Arc;

use ipu_numerics::{Fp8Format, Overflow};

use crate::{DType, ValueId};

/// The bytes of a constant tensor, shared: cloning a graph does not copy its weights.
#[derive(Clone, PartialEq, Eq)]
pub struct ConstantData(Arc<[u8]>);

impl ConstantData {
    /// The bytes.
    pub fn bytes(&self) -> &[u8] {
        &self.0
    }

    /// Number of bytes.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// True when there are no bytes.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl From<Vec<u8>> for ConstantData {
    fn from(bytes: Vec<u8>) -> ConstantData {
        ConstantData(bytes.into())
    }
}

impl From<&[u8]> for ConstantData {
    fn from(bytes: &[u8]) -> ConstantData {
        ConstantData(bytes.into())
    }
}

impl std::ops::Deref for ConstantData {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.0
    }
}

/// FNV-1a 64-bit offset basis (the published constant of the Fowler–Noll–Vo hash).
const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
/// FNV-1a 64-bit prime.
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

impl fmt::Debug for ConstantData {
    /// A constant can hold megabytes: Debug shows its length and a hash of its bytes, enough to
    /// tell two constants apart in a failed comparison.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let hash = self.0.iter().fold(FNV_OFFSET, |h, &b| {
            (h ^ u64::from(b)).wrapping_mul(FNV_PRIME)
        });
        write!(f, "ConstantData({} bytes, fnv1a {hash:016x})", self.0.len())
    }
}

/// A constant of a graph: the value it defines (whose type is the constant's type) and its
/// data.
#[derive(Debug, Clone, PartialEq)]
pub struct Constant {
    /// The value; it has no producer and is not a graph input.
    pub value: ValueId,
    /// Its elements in device layout (see the module docs); exactly the type's byte count.
    pub data: ConstantData,
}

/// Decodes elements of `dtype` in device layout to f32 values (exact: every f16 and FP8 value
/// is an f32). A trailing partial element is ignored.
pub fn decode_elements(dtype: DType, bytes: &[u8]) -> Vec<f32> {
    match dtype {
        DType::F32 => bytes
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect(),
        DType::F16 | DType::Bf16 | DType::I16 | DType::U16 => bytes
            .chunks_exact(2)
            .map(|c| {
                let b = u16::from_le_bytes([c[0], c[1]]);
                match dtype {
                    DType::F16 => ipu_numerics::f16_value(b),
                    DType::Bf16 => ipu_numerics::bf16_value(b),
                    DType::I16 => f32::from(b as i16),
                    _ => f32::from(b),
                }
            })
            .collect(),
        DType::I32 => bytes
            .chunks_exact(4)
            .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]) as f32)
            .collect(),
        DType::U32 => bytes
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]) as f32)
            .collect(),
        DType::I64 | DType::U64 => bytes
            .chunks_exact(8)
            .map(|c| {
                let v = u64::from_le_bytes(c.try_into().expect("8 bytes"));
                if dtype == DType::I64 {
                    v as i64 as f32
                } else {
                    v as f32
                }
            })
            .collect(),
        _ => {
            let table = byte_values(dtype);
            bytes.iter().map(|&b| table[b as usize]).collect()
        }
    }
}

/// The value of every byte of a one-byte dtype (device layout, see [`encode_elements`]).
pub fn byte_values(dtype: DType) -> [f32; 256] {
    dtype.byte_type().expect("a one-byte dtype").values()
}

/// The device byte of `x` for a one-byte dtype (FP8 saturating, integers as
/// [`ipu_numerics::IntFormat::from_f32`] converts them, sub-byte integers sign-extended).
pub fn byte_code(dtype: DType, x: f32) -> u8 {
    match dtype {
        DType::F143 { scale } | DType::F152 { scale } => {
            let format = dtype.fp8_format().expect("FP8 dtype");
            ipu_numerics::encode(format, x, i32::from(scale), Overflow::Saturate)
        }
        DType::E4M3FN => ipu_numerics::encode(Fp8Format::E4M3FN, x, 0, Overflow::Saturate),
        DType::E5M2 => ipu_numerics::encode(Fp8Format::E5M2, x, 0, Overflow::Saturate),
        DType::F4E2M1 => ipu_numerics::fp4_code(x),
        DType::E8M0 => ipu_numerics::e8m0_code(x),
        DType::Bool => u8::from(x != 0.0),
        _ => match dtype.int_format() {
            Some(f) => f.from_f32(x) as u8,
            None => unreachable!("a one-byte dtype"),
        },
    }
}

/// Encodes f32 values as elements of `dtype` in device layout: f16 rounds to nearest even,
/// FP8 rounds to nearest even at the dtype's scale and saturates; f32 is unchanged.
pub fn encode_elements(dtype: DType, values: &[f32]) -> Vec<u8> {
    match dtype {
        DType::F32 => values.iter().flat_map(|x| x.to_le_bytes()).collect(),
        DType::F16 => values
            .iter()
            .flat_map(|&x| ipu_numerics::f16_bits(x).to_le_bytes())
            .collect(),
        DType::Bf16 => values
            .iter()
            .flat_map(|&x| ipu_numerics::bf16_bits(x).to_le_bytes())
            .collect(),
        DType::I16 | DType::U16 => {
            let f = dtype.int_format().expect("integer");
            values
                .iter()
                .flat_map(|&x| (f.from_f32(x) as u16).to_le_bytes())
                .collect()
        }
        // Truncated toward zero (values are meant to be integers); NaN gives 0.
        DType::I32 | DType::U32 => values
            .iter()
            .flat_map(|&x| (x as i64 as u32).to_le_bytes())
            .collect(),
        DType::I64 | DType::U64 => values
            .iter()
            .flat_map(|&x| (x as i64).to_le_bytes())
            .collect(),
        _ => values.iter().map(|&x| byte_code(dtype, x)).collect(),
    }
}
