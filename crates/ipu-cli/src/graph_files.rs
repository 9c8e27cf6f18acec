//! The `.npy` files of graph constants, beside the text file that references them: read for
//! `ipu_graph::parse_with`, written for `ipu_graph::print_with_files`. The element type of a
//! file follows the text form: `<f4` for f32, `<f2` for f16, `|u1` for FP8 codes, C order.

use std::io::{Read as _, Write as _};
use std::path::Path;

use anyhow::Context;
use ipu_graph::{ConstantFile, DType, ExternalConstant};
use npyz::WriterBuilder as _;

/// The npy element type holding a constant of `dtype` in device layout.
fn npy_type(dtype: DType) -> &'static str {
    match dtype {
        DType::F32 => "<f4",
        DType::F16 => "<f2",
        DType::Bool => "|b1",
        DType::I16 => "<i2",
        DType::U16 | DType::Bf16 => "<u2",
        DType::I8 | DType::I4 | DType::I2 => "|i1",
        DType::I32 => "<i4",
        DType::U32 => "<u4",
        DType::I64 => "<i8",
        DType::U64 => "<u8",
        _ => "|u1",
    }
}

/// A shape as NumPy writes it: `(24,)`, `(1, 24)`.
fn shape_text(shape: &[u64]) -> String {
    let dims: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
    match dims.len() {
        1 => format!("({},)", dims[0]),
        _ => format!("({})", dims.join(", ")),
    }
}

/// Reads the constant `c` from `dir/c.file_name`: the header must give the constant's element
/// type and shape in C order; the data is then the device layout.
pub fn read_constant(dir: &Path, c: ExternalConstant<'_>) -> Result<Vec<u8>, String> {
    let path = dir.join(c.file_name);
    let bytes = std::fs::read(&path).map_err(|e| format!("reading {}: {e}", path.display()))?;
    let npy = npyz::NpyFile::new(&bytes[..])
        .map_err(|e| format!("{} is not a .npy file: {e}", path.display()))?;
    let want = npy_type(c.ty.dtype);
    let got = match npy.dtype() {
        npyz::DType::Plain(t) => t.to_string(),
        other => other.descr(),
    };
    let want_shape: Vec<u64> = c.ty.shape.iter().map(|&d| d as u64).collect();
    if got != want || npy.shape() != want_shape.as_slice() {
        return Err(format!(
            "{} holds {got} {}, the constant {} needs {want} {}",
            path.display(),
            shape_text(npy.shape()),
            c.ty,
            shape_text(&want_shape)
        ));
    }
    if npy.order() != npyz::Order::C && want_shape.iter().filter(|&&d| d > 1).count() > 1 {
        return Err(format!(
            "{} is in Fortran order; write it in C order",
            path.display()
        ));
    }
    let mut data = Vec::with_capacity(c.ty.bytes());
    npy.into_inner()
        .read_to_end(&mut data)
        .map_err(|e| format!("reading {}: {e}", path.display()))?;
    Ok(data)
}

/// Writes every constant file of a printed graph into `dir`.
pub fn write_constants(dir: &Path, files: &[ConstantFile]) -> anyhow::Result<()> {
    for f in files {
        let path = dir.join(&f.file_name);
        let dtype = npyz::DType::Plain(
            npy_type(f.ty.dtype)
                .parse()
                .expect("the element types above are valid npy type strings"),
        );
        let shape: Vec<u64> = f.ty.shape.iter().map(|&d| d as u64).collect();
        let mut bytes = Vec::new();
        npyz::WriteOptions::new_header_only()
            .dtype(dtype)
            .shape(&shape)
            .writer(&mut bytes)
            .write_header_only()
            .and_then(|w| w.write_all(f.data.bytes()))
            .with_context(|| format!("encoding {}", path.display()))?;
        crate::output_file::write_atomically(&path, &bytes)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}
