//! Loading ONNX models (`*.onnx`) for the commands that take a model: the import through
//! `ipu-onnx`, with `--dim NAME=VALUE` bindings and external data read beside the model.

use std::io::{Read as _, Seek as _, SeekFrom};
use std::path::Path;

use anyhow::{Context, bail};
use ipu_graph::Graph;
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
