//! Loading ONNX models (`*.onnx`) for the commands that take a model: the import through
//! `ipu-onnx`, with `--dim NAME=VALUE` bindings and external data read beside the model.

use std::io::{Read as _, Seek as _, SeekFrom};
use std::path::Path;

use anyhow::{Context, bail};
use ipu_graph::{DType, Graph, TensorType};
use ipu_reference::{Tensor, Tolerance};

use crate::npy::FileInputs;
use ipu_onnx::{ExternalData, ImportOptions};

/// True for a model path the ONNX importer reads.
pub fn is_onnx(model: &str) -> bool {
    Path::new(model)
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("onnx"))
}

/// Parses `--dim NAME=VALUE` bindings (VALUE at least 1).
pub fn parse_dims(dims: &[String]) -> anyhow::Result<std::collections::BTreeMap<String, usize>> {
    let mut out = std::collections::BTreeMap::new();
    for d in dims {
        let Some((name, value)) = d.split_once('=') else {
            bail!("--dim expects NAME=VALUE, got `{d}`");
        };
        let value: usize = match value.trim().parse() {
            Ok(v) if v >= 1 => v,
            _ => bail!("--dim {d}: the size must be an integer of at least 1"),
        };
        if out.insert(name.trim().to_string(), value).is_some() {
            bail!("--dim {}: given twice", name.trim());
        }
    }
    Ok(out)
}

/// Reads `length` bytes (to the end when `None`) at `offset` of `dir/location`.
fn read_external(dir: &Path, e: &ExternalData<'_>) -> Result<Vec<u8>, String> {
    let path = dir.join(e.location);
    let mut file =
        std::fs::File::open(&path).map_err(|err| format!("opening {}: {err}", path.display()))?;
    let size = file.metadata().map_err(|err| err.to_string())?.len();
    let length = e.length.unwrap_or(size.saturating_sub(e.offset));
    if e.offset.checked_add(length).is_none_or(|end| end > size) {
        return Err(format!(
            "{} has {size} bytes; the tensor needs {length} at offset {}",
            path.display(),
            e.offset
        ));
    }
    file.seek(SeekFrom::Start(e.offset))
        .map_err(|err| err.to_string())?;
    let mut bytes = vec![0; length as usize];
    file.read_exact(&mut bytes)
        .map_err(|err| format!("reading {}: {err}", path.display()))?;
    Ok(bytes)
}

/// Imports the ONNX model at `path` with the `--dim` bindings `dims`.
pub fn load(path: &str, dims: &[String]) -> anyhow::Result<Graph> {
    let bytes = std::fs::read(path).with_context(|| format!("reading {path}"))?;
    let dir = Path::new(path).parent().unwrap_or(Path::new("."));
    let loader = |e: &ExternalData<'_>| read_external(dir, e);
    let options = ImportOptions {
        dims: parse_dims(dims)?,
        external_data: Some(&loader),
    };
    let imported =
        ipu_onnx::import(&bytes, &options).with_context(|| format!("importing {path}"))?;
    for (onnx, name) in &imported.renamed {
        tracing::info!(onnx = %onnx, graph = %name, "renamed ONNX tensor");
    }
    for note in &imported.notes {
        tracing::info!("{note}");
    }
    tracing::info!(
        model = path,
        operations = imported.graph.operations().len(),
        constants = imported.graph.constants().len(),
        folded_nodes = imported.folded.len(),
        "imported ONNX model"
    );
    Ok(imported.graph)
}

/// The ONNX backend tests' tolerance for an output of `dtype`: `numpy.testing.assert_allclose`
/// with rtol 1e-3 and atol 1e-7 for f32 (the suite's defaults); for f16 and FP8 outputs the
/// format's own rounding dominates, so one unit of the format's precision (relative) and the
/// project's absolute floor for the type (`docs/onnx.md`). No row-cosine criterion: the suite
/// has none.
pub fn onnx_tolerance(dtype: DType) -> Tolerance {
    let own = Tolerance::for_dtype(dtype);
    match dtype {
        DType::F32 => Tolerance {
            atol: 1e-7,
            rtol: 1e-3,
            min_cosine: -1.0,
        },
        _ => Tolerance {
            min_cosine: -1.0,
            ..own
        },
    }
}

/// A 32- or 64-bit integer tensor's `bytes` as the device's i32 input, every value checked
/// against the graph's `±2^24` (the position and value of the first beyond it named).
fn wide_ints(bytes: &[u8], dtype: DType, shape: &[usize]) -> Result<Tensor, String> {
    let width = dtype.bytes();
    let signed = matches!(dtype, DType::I32 | DType::I64);
    let max = i128::from(ipu_graph::WIDE_INT_MAX);
    let mut values = Vec::with_capacity(bytes.len() / width);
    for (i, w) in bytes.chunks_exact(width).enumerate() {
        let mut b = [0u8; 8];
        b[..width].copy_from_slice(w);
        let raw = u64::from_le_bytes(b);
        let v: i128 = match (signed, width) {
            (true, 4) => i128::from(raw as u32 as i32),
            (true, _) => i128::from(raw as i64),
            (false, _) => i128::from(raw),
        };
        if !(-max..=max).contains(&v) {
            return Err(format!(
                "the value {v} at {} is outside -{max}..={max}, the values a 32- or 64-bit \
                 integer input holds on the device",
                crate::npy::position_text(shape, i, false)
            ));
        }
        values.push(v as f32);
    }
    Tensor::new(DType::I32, shape.to_vec(), values).map_err(|e| e.to_string())
}

/// An ONNX test data set (`DIR/input_N.pb`, `DIR/output_N.pb`, as the ONNX backend node tests
/// store them): the inputs, matched to the graph's inputs by position and checked against
/// their type, and the expected outputs, matched to the graph's outputs likewise.
pub fn read_data_set(
    dir: &Path,
    inputs: &[(String, TensorType)],
    outputs: &[(String, TensorType)],
) -> anyhow::Result<(FileInputs, Vec<Tensor>)> {
    let read = |kind: &str, i: usize, want: &(String, TensorType)| -> anyhow::Result<Tensor> {
        let path = dir.join(format!("{kind}_{i}.pb"));
        let bytes = std::fs::read(&path).with_context(|| {
            format!(
                "--data {}: {kind} {i} ({:?}) needs {}",
                dir.display(),
                want.0,
                path.display()
            )
        })?;
        let t = ipu_onnx::decode_tensor(&bytes).with_context(|| format!("{}", path.display()))?;
        let (name, ty) = want;
        // A scalar is held as the one-element vector [1] (the device has no rank-0 tensors).
        let mut t = t;
        if t.shape.is_empty() && ty.shape == [1] {
            t.shape = vec![1];
        }
        if ty.dtype == DType::I32
            && t.shape == ty.shape
            && matches!(t.dtype, DType::I32 | DType::I64 | DType::U32 | DType::U64)
        {
            return wide_ints(&t.bytes, t.dtype, &t.shape)
                .map_err(|e| anyhow::anyhow!("{}: {kind} {name:?}: {e}", path.display()));
        }
        if t.dtype != ty.dtype || t.shape != ty.shape {
            bail!(
                "{}: {kind} {name:?} expects {ty}, the file holds {}{:?}",
                path.display(),
                t.dtype,
                t.shape
            );
        }
        Tensor::from_bytes(t.dtype, t.shape, &t.bytes)
            .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))
    };
    let mut files = FileInputs {
        tensors: Vec::with_capacity(inputs.len()),
        sources: Vec::with_capacity(inputs.len()),
    };
    for (i, want) in inputs.iter().enumerate() {
        files.tensors.push(Some(read("input", i, want)?));
        files
            .sources
            .push(dir.join(format!("input_{i}.pb")).display().to_string());
    }
    if dir.join(format!("input_{}.pb", inputs.len())).exists() {
        bail!(
            "--data {}: more input files than the model's {} inputs",
            dir.display(),
            inputs.len()
        );
    }
    let expected = outputs
        .iter()
        .enumerate()
        .map(|(i, want)| read("output", i, want))
        .collect::<anyhow::Result<Vec<_>>>()?;
    Ok((files, expected))
}
