//! Tensors in NumPy's file formats for `ipu run` and `ipu exec`: `--input NAME=FILE.npy`,
//! `--inputs FILE.npz` and `--outputs DIR` (one `NAME.npy` per graph output).
//!
//! What an input of each graph dtype accepts (`docs/numerics.md`, "Tensors in NumPy files"):
//!
//! | graph dtype | file dtype | conversion |
//! |---|---|---|
//! | `f32` | `<f4` | none |
//! | `f16` | `<f2` | none |
//! | `f143@s`, `f152@s` | `<f4` | encoded with the input's scale `s`: round to nearest, ties to even; beyond the largest magnitude (and ±inf) saturate; NaN is the NaN code |
//! | `f143@s`, `f152@s` | `\|u1` | none: the raw codes |
//!
//! Big-endian files (`>f4`, `>f2`) are converted, as are Fortran-order arrays. The shape must
//! be the input's exactly. Every file is read and checked before anything runs on the device;
//! a file of another dtype or shape, a truncated or corrupt file, an unknown input name or a
//! name given twice is an error naming the input, the file, what was expected and what the
//! file holds.
//!
//! Outputs keep their dtype (`<f4`, `<f2`); FP8 outputs are written as their values decoded
//! with the output's scale (`<f4`), or as their raw codes (`|u1`) with `--raw-fp8`. Every file
//! is first written under a temporary name in the same directory and renamed once all are
//! written, so a failure leaves no partial file.

use std::collections::BTreeMap;
use std::fmt;
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use ipu_graph::{DType, TensorType};
use ipu_reference::{Tensor, round_to_dtype};
use npyz::{NpyFile, NpyHeader, Order, TypeChar, TypeStr, WriterBuilder};

/// The options of tensor files, shared by `ipu run` and `ipu exec`.
#[derive(clap::Args, Clone, Debug, Default)]
pub struct TensorFileArgs {
    /// Read the input NAME from a NumPy .npy file (repeatable). f32 inputs take '<f4', f16
    /// inputs '<f2'; FP8 inputs take '<f4' values, encoded with the input's scale (round to
    /// nearest, ties to even, saturating), or '|u1' raw codes. Inputs not given are generated
    /// from --seed.
    #[arg(long = "input", value_name = "NAME=FILE.npy")]
    pub input: Vec<String>,
    /// Read inputs from a NumPy .npz archive (numpy.savez or savez_compressed), one array per
    /// input, named as the input; the same rules as --input.
    #[arg(long = "inputs", value_name = "FILE.npz")]
    pub inputs: Option<PathBuf>,
    /// Write every graph output to DIR/NAME.npy: f32 as '<f4', f16 as '<f2', FP8 as '<f4'
    /// values decoded with the output's scale (see --raw-fp8). With --iterations, the last
    /// iteration's outputs.
    #[arg(long, value_name = "DIR")]
    pub outputs: Option<PathBuf>,
    /// With --outputs: write FP8 outputs as their raw codes ('|u1') instead of decoded values.
    #[arg(long, requires = "outputs")]
    pub raw_fp8: bool,
}

/// Where an input's array comes from.
#[derive(Debug, Clone)]
enum Source {
    /// A `.npy` file.
    File(PathBuf),
    /// Entry `index`, named `entry`, of a `.npz` archive.
    Archive {
        archive: PathBuf,
        entry: String,
        index: usize,
    },
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::File(p) => write!(f, "{}", p.display()),
            Source::Archive { archive, entry, .. } => {
                write!(f, "{} (entry {entry:?})", archive.display())
            }
        }
    }
}

/// The inputs read from files, by the position of the input; `None` for an input to generate.
#[derive(Debug, Clone, Default)]
pub struct FileInputs {
    /// One entry per input, in the order of the inputs given to [`read_inputs`].
    pub tensors: Vec<Option<Tensor>>,
    /// The file each input came from (empty for generated inputs), for logs.
    pub sources: Vec<String>,
}

impl FileInputs {
    /// Whether every input comes from a file (so every iteration sees the same inputs).
    pub fn all_from_files(&self) -> bool {
        self.tensors.iter().all(Option::is_some)
    }
}

fn names_of(expected: &[(String, TensorType)]) -> String {
    if expected.is_empty() {
        return "none".into();
    }
    expected
        .iter()
        .map(|(n, _)| n.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

/// Reads the inputs `args` names from their files and checks each against the input of the
/// same name in `expected` (name and type, in the order of the program's inputs).
pub fn read_inputs(
    expected: &[(String, TensorType)],
    args: &TensorFileArgs,
) -> anyhow::Result<FileInputs> {
    let position: BTreeMap<&str, usize> = expected
        .iter()
        .enumerate()
        .map(|(i, (n, _))| (n.as_str(), i))
        .collect();
    let mut sources: BTreeMap<usize, Source> = BTreeMap::new();
    let mut add = |name: &str, source: Source, how: String| -> anyhow::Result<()> {
        let Some(&i) = position.get(name) else {
            bail!(
                "{how}: the model has no input {name:?} (its inputs: {})",
                names_of(expected)
            );
        };
        if let Some(first) = sources.get(&i) {
            bail!("input {name:?} is given twice: from {first} and from {source}");
        }
        sources.insert(i, source);
        Ok(())
    };
    for spec in &args.input {
        let Some((name, file)) = spec
            .split_once('=')
            .filter(|(n, f)| !n.is_empty() && !f.is_empty())
        else {
            bail!("--input expects NAME=FILE.npy, got {spec:?}");
        };
        add(
            name,
            Source::File(PathBuf::from(file)),
            format!("--input {spec}"),
        )?;
    }
    let mut archive = None;
    if let Some(path) = &args.inputs {
        let file = std::fs::File::open(path)
            .with_context(|| format!("--inputs {}: cannot open the archive", path.display()))?;
        let zip = zip::ZipArchive::new(io::BufReader::new(file))
            .with_context(|| format!("--inputs {}: not a readable .npz archive", path.display()))?;
        // In the order of the archive's entries, which `by_index` follows.
        let entries = zip
            .file_names()
            .map(|n| n.map(|n| n.into_owned()))
            .collect::<Result<Vec<String>, _>>()
            .with_context(|| format!("--inputs {}: unreadable entry names", path.display()))?;
        for (index, entry) in entries.into_iter().enumerate() {
            let Some(name) = npyz::npz::array_name_from_file_name(&entry) else {
                bail!(
                    "--inputs {}: entry {entry:?} is not an array (.npy)",
                    path.display()
                );
            };
            let name = name.to_string();
            add(
                &name,
                Source::Archive {
                    archive: path.clone(),
                    entry: entry.clone(),
                    index,
                },
                format!("--inputs {} (entry {entry:?})", path.display()),
            )?;
        }
        archive = Some(zip);
    }
    let mut out = FileInputs {
        tensors: vec![None; expected.len()],
        sources: vec![String::new(); expected.len()],
    };
    for (&i, source) in &sources {
        let (name, ty) = &expected[i];
        let read = match source {
            Source::File(path) => std::fs::File::open(path)
                .and_then(|f| Ok((f.metadata()?.len(), f)))
                .map_err(|e| format!("cannot read the file: {e}"))
                .and_then(|(len, f)| read_array(io::BufReader::new(f), len, ty)),
            Source::Archive { index, .. } => match archive.as_mut().map(|z| z.by_index(*index)) {
                Some(Ok(entry)) => {
                    let len = entry.size();
                    read_array(entry, len, ty)
                }
                Some(Err(e)) => Err(format!("cannot read the entry: {e}")),
                None => Err("the archive is not open".into()),
            },
        };
        match read {
            Ok(t) => {
                out.tensors[i] = Some(t);
                out.sources[i] = source.to_string();
            }
            Err(reason) => bail!("input {name:?} from {source}: {reason}"),
        }
    }
    Ok(out)
}

/// How the elements of an accepted file become the input's values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Encoding {
    /// `f4` into an f32 input.
    F32,
    /// `f2` into an f16 input.
    F16,
    /// `f4` values encoded into an FP8 input.
    Fp8Values,
    /// `u1` raw codes of an FP8 input.
    Fp8Codes,
    /// `u1` raw codes or `u2` raw bits of one of the stored formats (bf16, OCP FP8, FP4, E8M0).
    StoredCodes,
    /// Integers (or `b1`) of the input's own kind and width.
    Ints,
    /// 32- or 64-bit integers, signed or not, into a 32- or 64-bit integer input (the device
    /// holds it as 32-bit; every value is checked against [`ipu_graph::WIDE_INT_MAX`]).
    Wide,
}

impl Encoding {
    fn of(dtype: DType, file: &npyz::DType) -> Option<Encoding> {
        let npyz::DType::Plain(ts) = file else {
            return None;
        };
        match (dtype, ts.type_char(), ts.size_field()) {
            (DType::F32, TypeChar::Float, 4) => Some(Encoding::F32),
            (DType::F16, TypeChar::Float, 2) => Some(Encoding::F16),
            (d, TypeChar::Float, 4) if d.is_fp8() => Some(Encoding::Fp8Values),
            (d, TypeChar::Uint, 1) if d.is_fp8() => Some(Encoding::Fp8Codes),
            (d, TypeChar::Float, 4) if d.class() == ipu_graph::DTypeClass::Stored => {
                Some(Encoding::Fp8Values)
            }
            (d, TypeChar::Uint, n) if d.class() == ipu_graph::DTypeClass::Stored => {
                (n == d.bytes() as u64).then_some(Encoding::StoredCodes)
            }
            (DType::Bool, TypeChar::Bool, 1) => Some(Encoding::Ints),
            (d, TypeChar::Int | TypeChar::Uint, 4 | 8)
                if d.class() == ipu_graph::DTypeClass::Wide =>
            {
                Some(Encoding::Wide)
            }
            (d, TypeChar::Int | TypeChar::Uint, n) => {
                let f = d.int_format()?;
                let signed = ts.type_char() == TypeChar::Int;
                (signed == f.signed && n == d.bytes() as u64).then_some(Encoding::Ints)
            }
            _ => None,
        }
    }

    fn item_bytes(self, dtype: DType) -> u64 {
        match self {
            Encoding::F32 | Encoding::Fp8Values => 4,
            Encoding::F16 => 2,
            Encoding::Fp8Codes => 1,
            Encoding::StoredCodes | Encoding::Ints => dtype.bytes() as u64,
            Encoding::Wide => 0,
        }
    }
}

/// A shape as Python writes a tuple: `()`, `(4,)`, `(4, 8)`.
fn py_shape<T: fmt::Display>(shape: &[T]) -> String {
    match shape {
        [] => "()".into(),
        [d] => format!("({d},)"),
        _ => format!(
            "({})",
            shape
                .iter()
                .map(|d| d.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

/// What a file for an input of type `ty` must hold, in words.
fn expected_text(ty: &TensorType) -> String {
    let shape = py_shape(&ty.shape);
    match ty.dtype {
        DType::F32 => format!("{ty}: '<f4' of shape {shape}"),
        DType::F16 => format!("{ty}: '<f2' of shape {shape}"),
        DType::F143 { scale } | DType::F152 { scale } => format!(
            "{ty}: '<f4' values (encoded at scale {scale}) or '|u1' codes, of shape {shape}"
        ),
        d => format!("{ty}: {} of shape {shape}", npy_kinds(d)),
    }
}

/// The npy element types an input of one of the other dtypes takes.
fn npy_kinds(d: DType) -> String {
    if d == DType::Bool {
        return "'|b1'".into();
    }
    if d.class() == ipu_graph::DTypeClass::Wide {
        return "'<i8', '<i4', '<u8' or '<u4'".into();
    }
    if let Some(f) = d.int_format() {
        let c = if f.signed { 'i' } else { 'u' };
        let order = if d.bytes() == 1 { '|' } else { '<' };
        return format!("'{order}{c}{}'", d.bytes());
    }
    let raw = if d.bytes() == 2 {
        "'<u2' bits"
    } else {
        "'|u1' codes"
    };
    format!("'<f4' values (rounded to {d}) or {raw}")
}

fn given_text(h: &NpyHeader) -> String {
    let order = match h.order() {
        Order::C => "",
        Order::Fortran => " (Fortran order)",
    };
    format!(
        "{} of shape {}{order}",
        h.dtype().descr(),
        py_shape(h.shape())
    )
}

/// Counts the bytes read through it.
struct Counting<R> {
    inner: R,
    bytes: u64,
}

impl<R: Read> Read for Counting<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.bytes += n as u64;
        Ok(n)
    }
}

/// Reads one `.npy` array of `total_bytes` bytes from `reader` as an input of type `ty`;
/// the error is the reason in words.
fn read_array(reader: impl Read, total_bytes: u64, ty: &TensorType) -> Result<Tensor, String> {
    let mut r = Counting {
        inner: reader,
        bytes: 0,
    };
    let header = NpyHeader::from_reader(&mut r).map_err(|e| {
        format!(
            "not a readable .npy file ({e}); expected {}",
            expected_text(ty)
        )
    })?;
    let header_bytes = r.bytes;
    let given = given_text(&header);
    let mismatch = || format!("expected {}; the file holds {given}", expected_text(ty));
    let encoding = Encoding::of(ty.dtype, &header.dtype()).ok_or_else(mismatch)?;
    let file_item_bytes = match header.dtype() {
        npyz::DType::Plain(ts) => ts.size_field(),
        _ => 0,
    };
    let shape_matches = header.shape().len() == ty.shape.len()
        && header
            .shape()
            .iter()
            .zip(&ty.shape)
            .all(|(&a, &b)| a == b as u64);
    if !shape_matches {
        return Err(mismatch());
    }
    // The element count is the input's, bounded by ipu_graph::TENSOR_ELEMENTS_MAX.
    let elements = ty.elements();
    let item_bytes = match encoding {
        Encoding::Wide => file_item_bytes,
        e => e.item_bytes(ty.dtype),
    };
    let data_bytes = elements as u64 * item_bytes;
    let follow = total_bytes.saturating_sub(header_bytes);
    if follow < data_bytes {
        return Err(format!(
            "the file is truncated: {given} needs {data_bytes} bytes of data after the \
             {header_bytes}-byte header, {follow} follow"
        ));
    }
    if follow > data_bytes {
        return Err(format!(
            "the file is corrupt: {} bytes follow the {data_bytes} bytes of data of {given}",
            follow - data_bytes
        ));
    }
    let order = header.order();
    let npy = NpyFile::with_header(header, &mut r);
    let data = |e: io::Error| format!("reading the data of {given}: {e}");
    let mut values: Vec<f32> = match encoding {
        Encoding::F32 => npy.into_vec::<f32>().map_err(data)?,
        Encoding::F16 => npy
            .into_vec::<half::f16>()
            .map_err(data)?
            .into_iter()
            .map(half::f16::to_f32)
            .collect(),
        Encoding::Fp8Values => npy
            .into_vec::<f32>()
            .map_err(data)?
            .into_iter()
            .map(|x| round_to_dtype(ty.dtype, x))
            .collect(),
        Encoding::StoredCodes => {
            let raw: Vec<u8> = if ty.dtype.bytes() == 2 {
                npy.into_vec::<u16>()
                    .map_err(data)?
                    .into_iter()
                    .flat_map(u16::to_le_bytes)
                    .collect()
            } else {
                npy.into_vec::<u8>().map_err(data)?
            };
            ipu_graph::decode_elements(ty.dtype, &raw)
        }
        Encoding::Ints => {
            let f = ty.dtype.int_format();
            let vals: Vec<i64> = match (ty.dtype, f) {
                (DType::Bool, _) => npy
                    .into_vec::<bool>()
                    .map_err(data)?
                    .into_iter()
                    .map(i64::from)
                    .collect(),
                (DType::I16, _) => npy
                    .into_vec::<i16>()
                    .map_err(data)?
                    .into_iter()
                    .map(i64::from)
                    .collect(),
                (DType::U16, _) => npy
                    .into_vec::<u16>()
                    .map_err(data)?
                    .into_iter()
                    .map(i64::from)
                    .collect(),
                (_, Some(f)) if f.signed => npy
                    .into_vec::<i8>()
                    .map_err(data)?
                    .into_iter()
                    .map(i64::from)
                    .collect(),
                _ => npy
                    .into_vec::<u8>()
                    .map_err(data)?
                    .into_iter()
                    .map(i64::from)
                    .collect(),
            };
            if let Some(f) = f
                && let Some(bad) = vals
                    .iter()
                    .find(|&&v| v < i64::from(f.min()) || v > i64::from(f.max()))
            {
                return Err(format!(
                    "the value {bad} is outside the range of {} ({}..={})",
                    ty.dtype,
                    f.min(),
                    f.max()
                ));
            }
            vals.into_iter().map(|v| v as f32).collect()
        }
        Encoding::Wide => {
            let npyz::DType::Plain(ts) = npy.header().dtype() else {
                return Err(mismatch());
            };
            let signed = ts.type_char() == TypeChar::Int;
            let vals: Vec<i128> = match (signed, ts.size_field()) {
                (true, 4) => to_i128(npy.into_vec::<i32>().map_err(data)?),
                (true, _) => to_i128(npy.into_vec::<i64>().map_err(data)?),
                (false, 4) => to_i128(npy.into_vec::<u32>().map_err(data)?),
                (false, _) => to_i128(npy.into_vec::<u64>().map_err(data)?),
            };
            let max = i128::from(ipu_graph::WIDE_INT_MAX);
            let (lo, hi) = match ty.dtype {
                DType::U32 | DType::U64 => (0, max),
                _ => (-max, max),
            };
            if let Some((i, bad)) = vals
                .iter()
                .enumerate()
                .find(|(_, v)| !(lo..=hi).contains(*v))
            {
                return Err(format!(
                    "the value {bad} at {} is outside {lo}..={hi}, the values a {} input holds \
                     on the device (32-bit, and exact in the f32 reference)",
                    position_text(&ty.shape, i, order == Order::Fortran),
                    ty.dtype
                ));
            }
            vals.into_iter().map(|v| v as f32).collect()
        }
        Encoding::Fp8Codes => {
            let (format, scale) = match (ty.dtype.fp8_format(), ty.dtype.scale()) {
                (Some(f), Some(s)) => (f, s),
                _ => return Err(mismatch()),
            };
            let table = ipu_numerics::decode_table(format, scale);
            npy.into_vec::<u8>()
                .map_err(data)?
                .into_iter()
                .map(|c| table[c as usize])
                .collect()
        }
    };
    if values.len() != elements {
        return Err(format!(
            "the file is corrupt: {} of the {elements} elements of {given} could be read",
            values.len()
        ));
    }
    // Reading to the end lets an archive check the entry's checksum; one byte past the data is
    // enough to refuse trailing bytes (a compressed entry could expand to gigabytes).
    let mut rest = Vec::new();
    r.by_ref().take(1).read_to_end(&mut rest).map_err(data)?;
    if !rest.is_empty() {
        return Err(format!(
            "the file is corrupt: bytes follow the data of {given}"
        ));
    }
    if order == Order::Fortran {
        values = fortran_to_c(&values, &ty.shape);
    }
    Tensor::new(ty.dtype, ty.shape.clone(), values).map_err(|e| e.to_string())
}

/// Refuses an input file whose values index a table (a `gather`'s indices: `bounds`, by
/// input name; `expected` the inputs in the order of `files`) when a value lies outside the
/// table, naming the input, its position and value, the operation and the valid range, as
/// onnxruntime refuses an index out of range.
pub fn check_index_bounds(
    bounds: &[ipu_package::IndexBound],
    expected: &[(String, TensorType)],
    files: &FileInputs,
) -> anyhow::Result<()> {
    for bound in bounds {
        let Some(i) = expected.iter().position(|(name, _)| *name == bound.input) else {
            continue;
        };
        let Some(t) = &files.tensors[i] else {
            continue;
        };
        if let Some((at, &bad)) = t
            .data
            .iter()
            .enumerate()
            .find(|(_, x)| !bound.admits(**x as i64))
        {
            let n = bound.entries;
            bail!(
                "input {:?} from {}: the value {bad} at {} indexes a table of {n} entries \
                 (`%{}`); valid indices are -{n}..={}",
                bound.input,
                files.sources[i],
                position_text(&t.shape, at, false),
                bound.operation,
                n - 1
            );
        }
    }
    Ok(())
}

/// Widens integers for range checks.
fn to_i128<T: Into<i128>>(v: Vec<T>) -> Vec<i128> {
    v.into_iter().map(Into::into).collect()
}

/// `[i, j, ..]`, the position of element `flat` of an array of `shape` stored in C order (or
/// Fortran order, first axis fastest).
pub fn position_text(shape: &[usize], flat: usize, fortran: bool) -> String {
    let mut pos = vec![0; shape.len()];
    let mut rest = flat;
    let axes: Vec<usize> = if fortran {
        (0..shape.len()).collect()
    } else {
        (0..shape.len()).rev().collect()
    };
    for a in axes {
        pos[a] = rest % shape[a].max(1);
        rest /= shape[a].max(1);
    }
    format!(
        "[{}]",
        pos.iter()
            .map(|p| p.to_string())
            .collect::<Vec<_>>()
            .join(", ")
    )
}

/// The row-major (C order) copy of `data`, a Fortran-order array of `shape` (first axis
/// fastest).
fn fortran_to_c<T: Copy>(data: &[T], shape: &[usize]) -> Vec<T> {
    if shape.len() < 2 {
        return data.to_vec();
    }
    // Row-major strides of each axis.
    let mut strides = vec![1usize; shape.len()];
    for k in (0..shape.len() - 1).rev() {
        strides[k] = strides[k + 1] * shape[k + 1];
    }
    let mut out = data.to_vec();
    let mut index = vec![0usize; shape.len()];
    for &x in data {
        let c: usize = index.iter().zip(&strides).map(|(i, s)| i * s).sum();
        out[c] = x;
        for (i, &d) in index.iter_mut().zip(shape) {
            *i += 1;
            if *i < d {
                break;
            }
            *i = 0;
        }
    }
    out
}

/// One output read back from the device.
#[derive(Debug, Clone)]
pub struct Output {
    /// The graph output's name.
    pub name: String,
    /// Its values.
    pub tensor: Tensor,
    /// Its dense row-major bytes as the device wrote them (f16 bits, FP8 codes).
    pub dense: Vec<u8>,
}

/// Whether `name` can be a file name as it is: the graph's identifiers (`[A-Za-z0-9_.-]+`).
fn is_file_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'))
}

/// Checks that every output name can name a file, before anything runs.
pub fn check_output_names<'a>(names: impl IntoIterator<Item = &'a str>) -> anyhow::Result<()> {
    for name in names {
        if !is_file_name(name) {
            bail!("output {name:?} cannot name a file in --outputs (only A-Z a-z 0-9 _ . - can)");
        }
    }
    Ok(())
}

fn type_str(text: &str) -> io::Result<npyz::DType> {
    text.parse::<TypeStr>()
        .map(npyz::DType::Plain)
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e.to_string()))
}

fn write_npy<T: npyz::Serialize>(
    dtype: &str,
    shape: &[usize],
    items: impl IntoIterator<Item = T>,
) -> io::Result<Vec<u8>> {
    let shape: Vec<u64> = shape.iter().map(|&d| d as u64).collect();
    let mut bytes = Vec::new();
    let mut w = npyz::WriteOptions::new()
        .dtype(type_str(dtype)?)
        .shape(&shape)
        .writer(&mut bytes)
        .begin_nd()?;
    w.extend(items)?;
    w.finish()?;
    Ok(bytes)
}

/// The `.npy` bytes of an output (see the module docs for the dtypes).
pub fn output_npy(output: &Output, raw_fp8: bool) -> io::Result<Vec<u8>> {
    let t = &output.tensor;
    match t.dtype {
        DType::F32 => write_npy("<f4", &t.shape, t.data.iter().copied()),
        DType::F16 => write_npy(
            "<f2",
            &t.shape,
            output
                .dense
                .chunks_exact(2)
                .map(|c| half::f16::from_bits(u16::from_le_bytes([c[0], c[1]]))),
        ),
        DType::F143 { .. } | DType::F152 { .. } if raw_fp8 => {
            write_npy("|u1", &t.shape, output.dense.iter().copied())
        }
        DType::F143 { .. } | DType::F152 { .. } => {
            write_npy("<f4", &t.shape, t.data.iter().copied())
        }
        DType::Bool => write_npy("|b1", &t.shape, t.data.iter().map(|&x| x != 0.0)),
        DType::I32 => write_npy("<i4", &t.shape, t.data.iter().map(|&x| x as i32)),
        DType::U32 => write_npy("<u4", &t.shape, t.data.iter().map(|&x| x as u32)),
        DType::I64 => write_npy("<i8", &t.shape, t.data.iter().map(|&x| x as i64)),
        DType::U64 => write_npy("<u8", &t.shape, t.data.iter().map(|&x| x as u64)),
        DType::I16 => write_npy("<i2", &t.shape, t.data.iter().map(|&x| x as i16)),
        DType::U16 => write_npy("<u2", &t.shape, t.data.iter().map(|&x| x as u16)),
        d if d.int_format().is_some_and(|f| f.signed) => {
            write_npy("|i1", &t.shape, t.data.iter().map(|&x| x as i8))
        }
        d if d.int_format().is_some() => {
            write_npy("|u1", &t.shape, t.data.iter().map(|&x| x as u8))
        }
        // bf16, the OCP FP8 and the MX formats: float32 values, or with `--raw-fp8` the raw
        // codes (bf16: its bits).
        d if raw_fp8 && d.bytes() == 2 => write_npy(
            "<u2",
            &t.shape,
            output
                .dense
                .chunks_exact(2)
                .map(|c| u16::from_le_bytes([c[0], c[1]])),
        ),
        _ if raw_fp8 => write_npy("|u1", &t.shape, output.dense.iter().copied()),
        _ => write_npy("<f4", &t.shape, t.data.iter().copied()),
    }
}

/// Writes every output to `dir/NAME.npy` and returns the paths. All files are written under
/// temporary names first and renamed once every one is complete; on an error the temporary
/// files are removed.
pub fn write_outputs(
    dir: &Path,
    outputs: &[Output],
    raw_fp8: bool,
) -> anyhow::Result<Vec<PathBuf>> {
    check_output_names(outputs.iter().map(|o| o.name.as_str()))?;
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let mut written: Vec<(PathBuf, PathBuf)> = Vec::new();
    let remove = |written: &[(PathBuf, PathBuf)]| {
        for (tmp, _) in written {
            let _ = std::fs::remove_file(tmp);
        }
    };
    for o in outputs {
        let path = dir.join(format!("{}.npy", o.name));
        let tmp = dir.join(format!(".{}.npy.tmp-{}", o.name, std::process::id()));
        let result = output_npy(o, raw_fp8).and_then(|bytes| {
            let mut f = std::fs::File::create(&tmp)?;
            f.write_all(&bytes)?;
            f.sync_all()
        });
        if let Err(e) = result {
            let _ = std::fs::remove_file(&tmp);
            remove(&written);
            return Err(e)
                .with_context(|| format!("output {:?}: writing {}", o.name, tmp.display()));
        }
        written.push((tmp, path));
    }
    for (k, (tmp, path)) in written.iter().enumerate() {
        if let Err(e) = std::fs::rename(tmp, path) {
            remove(&written[k..]);
            return Err(e)
                .with_context(|| format!("renaming {} to {}", tmp.display(), path.display()));
        }
    }
    Ok(written.into_iter().map(|(_, p)| p).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ty(dtype: DType, shape: &[usize]) -> TensorType {
        TensorType::new(dtype, shape.to_vec())
    }

    fn npy_f32(dtype: &str, shape: &[usize], data: &[f32]) -> Vec<u8> {
        write_npy(dtype, shape, data.iter().copied()).unwrap()
    }

    fn read(bytes: &[u8], t: &TensorType) -> Result<Tensor, String> {
        read_array(bytes, bytes.len() as u64, t)
    }

    #[test]
    fn fortran_order_becomes_row_major() {
        // [[0, 1, 2], [3, 4, 5]] in Fortran order is 0 3 1 4 2 5.
        assert_eq!(
            fortran_to_c(&[0, 3, 1, 4, 2, 5], &[2, 3]),
            [0, 1, 2, 3, 4, 5]
        );
        // [2, 3, 2]: element (i, j, k) at i + 2 j + 6 k in Fortran order.
        let shape = [2, 3, 2];
        let mut f = vec![0; 12];
        for i in 0..2 {
            for j in 0..3 {
                for k in 0..2 {
                    f[i + 2 * j + 6 * k] = 100 * i + 10 * j + k;
                }
            }
        }
        let c = fortran_to_c(&f, &shape);
        let expected: Vec<usize> = (0..2)
            .flat_map(|i| (0..3).flat_map(move |j| (0..2).map(move |k| 100 * i + 10 * j + k)))
            .collect();
        assert_eq!(c, expected);
    }

    #[test]
    fn big_endian_and_fortran_files_are_converted() {
        let t = ty(DType::F32, &[2, 3]);
        let data = [0.5f32, -1.0, 2.0, 3.25, 4.0, -5.5];
        let le = read(&npy_f32("<f4", &[2, 3], &data), &t).unwrap();
        let be = read(&npy_f32(">f4", &[2, 3], &data), &t).unwrap();
        assert_eq!(le.data, data);
        assert_eq!(be.data, data);
        let fortran: Vec<u8> = {
            let mut bytes = Vec::new();
            let mut w = npyz::WriteOptions::new()
                .dtype(type_str("<f4").unwrap())
                .shape(&[2, 3])
                .order(Order::Fortran)
                .writer(&mut bytes)
                .begin_nd()
                .unwrap();
            // Column by column.
            w.extend([0.5f32, 3.25, -1.0, 4.0, 2.0, -5.5]).unwrap();
            w.finish().unwrap();
            bytes
        };
        assert_eq!(read(&fortran, &t).unwrap().data, data);
    }

    #[test]
    fn fp8_inputs_take_values_or_codes() {
        let t = ty(DType::F143 { scale: -4 }, &[4]);
        // 1/16 is code 0x40 at scale -4; 0.07 rounds to 0.0703125 (0x41) and 100 saturates.
        let v = read(&npy_f32("<f4", &[4], &[0.0625, 0.07, 100.0, -0.0625]), &t).unwrap();
        assert_eq!(v.data, [0.0625, 0.0703125, 15.0, -0.0625]);
        assert_eq!(v.to_bytes(), [0x40, 0x41, 0x7f, 0xc0]);
        let codes = write_npy("|u1", &[4], [0x40u8, 0x41, 0x7f, 0xc0]).unwrap();
        assert_eq!(read(&codes, &t).unwrap(), v);
        // Every code survives the way through values and back.
        for dtype in [DType::F143 { scale: -4 }, DType::F152 { scale: 0 }] {
            let all: Vec<u8> = (0..=255).collect();
            let t = ty(dtype, &[256]);
            let bytes = write_npy("|u1", &[256], all.iter().copied()).unwrap();
            assert_eq!(read(&bytes, &t).unwrap().to_bytes(), all, "{dtype}");
        }
    }

    #[test]
    fn refusals_say_what_was_expected_and_given() {
        let t = ty(DType::F16, &[2, 3]);
        let e = read(&npy_f32("<f4", &[2, 3], &[0.0; 6]), &t).unwrap_err();
        assert_eq!(
            e,
            "expected f16[2, 3]: '<f2' of shape (2, 3); the file holds '<f4' of shape (2, 3)"
        );
        let f16 = write_npy("<f2", &[3, 2], [half::f16::ZERO; 6]).unwrap();
        let e = read(&f16, &t).unwrap_err();
        assert!(e.ends_with("the file holds '<f2' of shape (3, 2)"), "{e}");
        let good = write_npy("<f2", &[2, 3], [half::f16::ONE; 6]).unwrap();
        let e = read(&good[..good.len() - 1], &t).unwrap_err();
        assert!(
            e.contains("truncated") && e.contains("12 bytes of data"),
            "{e}"
        );
        let mut long = good.clone();
        long.push(0);
        assert!(read(&long, &t).unwrap_err().contains("1 bytes follow"));
        let e = read(b"not numpy at all", &t).unwrap_err();
        assert!(e.starts_with("not a readable .npy file"), "{e}");
        // Dimensions whose product overflows are refused, not a panic.
        let mut huge = good[..10].to_vec();
        let header = format!(
            "{{'descr': '<f2', 'fortran_order': False, 'shape': ({}, {}), }}",
            1u64 << 40,
            1u64 << 40
        );
        let mut text = header.into_bytes();
        while (10 + text.len() + 1) % 64 != 0 {
            text.push(b' ');
        }
        text.push(b'\n');
        huge[8..10].copy_from_slice(&(text.len() as u16).to_le_bytes());
        huge.extend_from_slice(&text);
        let e = read(&huge, &t).unwrap_err();
        assert!(e.contains("(1099511627776, 1099511627776)"), "{e}");
    }

    #[test]
    fn outputs_keep_their_dtype_and_fp8_is_decoded_or_raw() {
        let fp8 = Tensor::new(DType::F152 { scale: 0 }, vec![2], vec![1.0, -0.5]).unwrap();
        let o = Output {
            name: "y".into(),
            dense: fp8.to_bytes(),
            tensor: fp8,
        };
        let values = output_npy(&o, false).unwrap();
        let npy = NpyFile::new(&values[..]).unwrap();
        assert_eq!(npy.dtype().descr(), "'<f4'");
        assert_eq!(npy.into_vec::<f32>().unwrap(), [1.0, -0.5]);
        let raw = output_npy(&o, true).unwrap();
        let npy = NpyFile::new(&raw[..]).unwrap();
        assert_eq!(npy.dtype().descr(), "'|u1'");
        assert_eq!(npy.into_vec::<u8>().unwrap(), o.dense);
    }
}
