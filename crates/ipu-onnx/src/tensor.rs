//! Decoding `TensorProto`s (initializers, `Constant` values, test-data `.pb` files) into known
//! tensors: `raw_data`, the typed fields (`float_data`, `int32_data` (which also carries f16
//! bits, FP8 codes and booleans), `int64_data`, `double_data`, `uint64_data`) and external
//! data read through the caller's loader.

use crate::OnnxError;
use crate::known::{Elem, Known, elem_of_code, type_name};
use crate::options::{ExternalData, ImportOptions};
use crate::proto::TensorProto;

/// `TensorProto.DataLocation.EXTERNAL`.
const DATA_LOCATION_EXTERNAL: i32 = 1;

fn malformed(tensor: &str, reason: impl std::fmt::Display) -> OnnxError {
    OnnxError::Malformed {
        reason: format!("tensor `{tensor}`: {reason}"),
    }
}

/// True for a relative location inside the model's directory: no root, no `..`, no drive or
/// backslash tricks.
fn is_safe_location(location: &str) -> bool {
    !location.is_empty()
        && !location.starts_with('/')
        && !location.contains('\\')
        && !location.contains(':')
        && location
            .split('/')
            .all(|part| !part.is_empty() && part != "..")
}

/// The external data of `t` through the loader of `options`.
fn external_bytes(
    t: &TensorProto,
    name: &str,
    options: &ImportOptions<'_>,
) -> Result<Vec<u8>, OnnxError> {
    let mut location = None;
    let mut offset = 0u64;
    let mut length = None;
    for entry in &t.external_data {
        let value = entry.value.as_deref().unwrap_or("");
        let number = || {
            value.parse::<u64>().map_err(|_| {
                malformed(
                    name,
                    format!(
                        "external data `{}` = `{value}` is not a number",
                        entry.key()
                    ),
                )
            })
        };
        match entry.key() {
            "location" => location = Some(value.to_string()),
            "offset" => offset = number()?,
            "length" => length = Some(number()?),
            _ => {}
        }
    }
    let location = location.ok_or_else(|| malformed(name, "external data without a `location`"))?;
    let missing = |reason: String| OnnxError::MissingExternalData {
        tensor: name.to_string(),
        location: location.clone(),
        reason,
    };
    if !is_safe_location(&location) {
        return Err(missing(
            "the location must be a relative path inside the model's directory".into(),
        ));
    }
    let Some(loader) = options.external_data else {
        return Err(missing("no loader for external data was given".into()));
    };
    let bytes = loader(&ExternalData {
        location: &location,
        offset,
        length,
    })
    .map_err(missing)?;
    if let Some(length) = length
        && bytes.len() as u64 != length
    {
        return Err(missing(format!(
            "the loader gave {} bytes, the model says {length}",
            bytes.len()
        )));
    }
    Ok(bytes)
}

/// Decodes `t` (named `name` in messages) into a known tensor.
pub fn decode(
    t: &TensorProto,
    name: &str,
    options: &ImportOptions<'_>,
) -> Result<Known, OnnxError> {
    let code = t.data_type.unwrap_or(0);
    let elem = elem_of_code(code).map_err(|reason| OnnxError::UnsupportedType {
        tensor: name.to_string(),
        data_type: type_name(code),
        reason: reason.to_string(),
    })?;
    if t.segment.is_some() {
        return Err(malformed(name, "segmented tensors are not supported"));
    }
    let mut shape = Vec::with_capacity(t.dims.len());
    let mut elements = 1usize;
    for &d in &t.dims {
        let d =
            usize::try_from(d).map_err(|_| malformed(name, format!("negative dimension {d}")))?;
        elements = elements
            .checked_mul(d)
            .filter(|&n| n <= ipu_graph::TENSOR_ELEMENTS_MAX)
            .ok_or_else(|| malformed(name, format!("shape {:?} is too large", t.dims)))?;
        shape.push(d);
    }
    let external;
    let raw: Option<&[u8]> = if t.data_location == Some(DATA_LOCATION_EXTERNAL) {
        external = external_bytes(t, name, options)?;
        Some(&external)
    } else {
        t.raw_data.as_deref()
    };
    let count_mismatch = |got: usize| {
        malformed(
            name,
            format!("{got} values for shape {shape:?} ({elements} elements)"),
        )
    };
    if let Some(bits) = sub_byte_bits(elem) {
        // Two 4-bit or four 2-bit elements per byte, the first in the low bits (raw_data, or
        // one packed byte per int32_data entry).
        let packed: Vec<u8> = match raw {
            Some(r) => r.to_vec(),
            None => t.int32_data.iter().map(|&v| v as u8).collect(),
        };
        let want = (elements * bits).div_ceil(8);
        if packed.len() != want {
            return Err(malformed(
                name,
                format!(
                    "{} packed bytes for {} {shape:?} ({want} bytes)",
                    packed.len(),
                    elem.name()
                ),
            ));
        }
        return Ok(Known {
            elem,
            shape,
            bytes: unpack(elem, bits, &packed, elements),
        });
    }
    if let Some(raw) = raw {
        let size = raw_width(elem);
        if raw.len() != elements * size {
            return Err(malformed(
                name,
                format!(
                    "{} bytes of data for {} {shape:?} ({} bytes)",
                    raw.len(),
                    elem.name(),
                    elements * size
                ),
            ));
        }
        return Ok(from_raw(elem, shape, raw));
    }
    let known = match elem {
        Elem::Float(ipu_graph::DType::F32) => {
            if t.float_data.len() != elements {
                return Err(count_mismatch(t.float_data.len()));
            }
            Known {
                elem,
                shape,
                bytes: t.float_data.iter().flat_map(|x| x.to_le_bytes()).collect(),
            }
        }
        Elem::Float(d) => {
            // f16 bits and FP8 codes travel in int32_data.
            if t.int32_data.len() != elements {
                return Err(count_mismatch(t.int32_data.len()));
            }
            let bytes = if d.bytes() == 2 {
                t.int32_data
                    .iter()
                    .flat_map(|&v| (v as u16).to_le_bytes())
                    .collect()
            } else {
                t.int32_data.iter().map(|&v| v as u8).collect()
            };
            Known { elem, shape, bytes }
        }
        Elem::Double => {
            if t.double_data.len() != elements {
                return Err(count_mismatch(t.double_data.len()));
            }
            Known {
                elem,
                shape,
                bytes: t.double_data.iter().flat_map(|x| x.to_le_bytes()).collect(),
            }
        }
        Elem::Int(crate::known::IntKind::I64) => {
            if t.int64_data.len() != elements {
                return Err(count_mismatch(t.int64_data.len()));
            }
            Known::from_ints(elem, shape, &t.int64_data)
        }
        Elem::Int(crate::known::IntKind::U32 | crate::known::IntKind::U64) => {
            if t.uint64_data.len() != elements {
                return Err(count_mismatch(t.uint64_data.len()));
            }
            let mut v = Vec::with_capacity(elements);
            for &x in &t.uint64_data {
                v.push(
                    i64::try_from(x)
                        .map_err(|_| malformed(name, format!("uint64 {x} exceeds int64")))?,
                );
            }
            Known::from_ints(elem, shape, &v)
        }
        Elem::Int(_) | Elem::Bool => {
            if t.int32_data.len() != elements {
                return Err(count_mismatch(t.int32_data.len()));
            }
            let v: Vec<i64> = t.int32_data.iter().map(|&x| i64::from(x)).collect();
            Known::from_ints(elem, shape, &v)
        }
    };
    Ok(known)
}

/// Bytes per element in `raw_data` (little-endian, as onnx.proto specifies).
/// Bits per element of the packed sub-byte types (INT4, UINT4, FLOAT4E2M1, INT2, UINT2).
pub(crate) fn sub_byte_bits(elem: Elem) -> Option<usize> {
    use ipu_graph::DType;
    match elem {
        Elem::Float(DType::I4 | DType::U4 | DType::F4E2M1) => Some(4),
        Elem::Float(DType::I2 | DType::U2) => Some(2),
        _ => None,
    }
}

/// The device layout of packed sub-byte elements: one byte each, signed integers
/// sign-extended, FP4 its code.
fn unpack(elem: Elem, bits: usize, packed: &[u8], elements: usize) -> Vec<u8> {
    let per = 8 / bits;
    let mask = (1u8 << bits) - 1;
    let signed = matches!(
        elem,
        Elem::Float(ipu_graph::DType::I4 | ipu_graph::DType::I2)
    );
    (0..elements)
        .map(|i| {
            let v = (packed[i / per] >> (bits * (i % per))) & mask;
            if signed && v & (1 << (bits - 1)) != 0 {
                v | !mask
            } else {
                v
            }
        })
        .collect()
}

fn raw_width(elem: Elem) -> usize {
    use crate::known::IntKind::*;
    match elem {
        Elem::Float(d) => d.bytes(),
        Elem::Double => 8,
        Elem::Int(I8 | U8) | Elem::Bool => 1,
        Elem::Int(I16 | U16) => 2,
        Elem::Int(I32 | U32) => 4,
        Elem::Int(I64 | U64) => 8,
    }
}

fn from_raw(elem: Elem, shape: Vec<usize>, raw: &[u8]) -> Known {
    use crate::known::IntKind::*;
    let ints = |v: Vec<i64>| Known::from_ints(elem, shape.clone(), &v);
    match elem {
        // The device layout of f32, f16 and FP8 is raw_data's layout.
        Elem::Float(_) | Elem::Double => Known {
            elem,
            shape,
            bytes: raw.to_vec(),
        },
        Elem::Int(I8) => ints(raw.iter().map(|&b| i64::from(b as i8)).collect()),
        Elem::Int(U8) | Elem::Bool => ints(raw.iter().map(|&b| i64::from(b)).collect()),
        Elem::Int(I16) => ints(
            raw.chunks_exact(2)
                .map(|c| i64::from(i16::from_le_bytes([c[0], c[1]])))
                .collect(),
        ),
        Elem::Int(U16) => ints(
            raw.chunks_exact(2)
                .map(|c| i64::from(u16::from_le_bytes([c[0], c[1]])))
                .collect(),
        ),
        Elem::Int(I32) => ints(
            raw.chunks_exact(4)
                .map(|c| i64::from(i32::from_le_bytes([c[0], c[1], c[2], c[3]])))
                .collect(),
        ),
        Elem::Int(U32) => ints(
            raw.chunks_exact(4)
                .map(|c| i64::from(u32::from_le_bytes([c[0], c[1], c[2], c[3]])))
                .collect(),
        ),
        // uint64 beyond i64::MAX wraps here; shape arithmetic never meets such values.
        Elem::Int(I64 | U64) => ints(
            raw.chunks_exact(8)
                .map(|c| i64::from_le_bytes(c.try_into().expect("8 bytes")))
                .collect(),
        ),
    }
}

/// A tensor of a test-data `.pb` file (`TensorProto`), in the graph's terms.
#[derive(Debug, Clone, PartialEq)]
pub struct TensorData {
    /// The tensor's name in the file (may be empty).
    pub name: String,
    /// Element type.
    pub dtype: ipu_graph::DType,
    /// Shape.
    pub shape: Vec<usize>,
    /// Elements in device layout (see [`ipu_graph::Constant`]).
    pub bytes: Vec<u8>,
}

/// Decodes a serialised `TensorProto` (the `input_*.pb` / `output_*.pb` files of ONNX test
/// data sets) of a dtype the graph has.
pub fn decode_tensor(bytes: &[u8]) -> Result<TensorData, OnnxError> {
    use prost::Message as _;
    let t = TensorProto::decode(bytes).map_err(|e| OnnxError::Malformed {
        reason: format!("not a TensorProto: {e}"),
    })?;
    let name = t.name.clone().unwrap_or_default();
    let known = decode(&t, &name, &ImportOptions::default())?;
    match known.elem.device_dtype() {
        Some(dtype) => {
            let bytes = known.device_bytes(dtype);
            Ok(TensorData {
                name,
                dtype,
                shape: known.shape,
                bytes,
            })
        }
        None => Err(OnnxError::UnsupportedType {
            tensor: name,
            data_type: known.elem.name(),
            reason: "the device holds floats, FP8, the MX formats, integers of 16 bits or fewer \
                     and bool"
                .into(),
        }),
    }
}
