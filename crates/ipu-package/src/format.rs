//! The format's constants, section kinds and errors, and the data a package holds: the
//! manifest and its host tensors (with their storage order), the package itself.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::images::TileImages;

/// First eight bytes of every package.
pub const MAGIC: [u8; 8] = *b"IPUEXE\0\0";
/// Major format version this crate writes; a reader rejects a newer major version. Major 3
/// may store a section deflated (its table entry says how, and how long it is decoded); major 2
/// stores tiles as shared images and patch records. The reader still reads majors 1 (one whole
/// image per tile, identical images once) and 2.
pub const FORMAT_MAJOR: u16 = 3;
/// Minor format version this crate writes; newer minors are readable (additions only).
pub const FORMAT_MINOR: u16 = 0;
/// Bytes of one tile-table entry in format 2: image index, patch record count.
pub const TILE_ENTRY_BYTES: usize = 8;
/// Bytes of the header.
pub const HEADER_BYTES: usize = 32;
/// Bytes of one section-table entry.
pub const SECTION_ENTRY_BYTES: usize = 32;
/// Largest number of sections a reader accepts (a bound on corrupt input).
pub const SECTIONS_MAX: u32 = 64;
/// Most bytes a deflated section may decode to (a bound on corrupt input: deflate expands up
/// to about a thousandfold). The 2048³ matmul's patch records, the largest section of the
/// built-in models, decode to 11 MB.
pub const SECTION_DECODED_BYTES_MAX: u64 = 1 << 30;
/// Deflate level the writer uses: zlib's default, the package of the 2048³ matmul a quarter
/// of its stored size.
pub const DEFLATE_LEVEL: u32 = 6;

/// How a section's payload is stored (format 3; major 1 and 2 store every section as is).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub enum Encoding {
    /// The payload is the section's bytes.
    Stored = 0,
    /// The payload is a raw deflate stream (RFC 1951) of the section's bytes.
    Deflate = 1,
}

/// Section kinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub enum SectionKind {
    /// The manifest, JSON.
    Manifest = 1,
    /// Unique tile images.
    Images = 2,
    /// Per-tile image index.
    TileTable = 3,
    /// The constants page: every constant tensor in its storage order (format 1.1).
    Constants = 4,
    /// Patch records of the tiles, in tile order (format 2, only when a tile has some).
    Patches = 5,
}

impl SectionKind {
    /// Its name in errors.
    pub fn name(self) -> &'static str {
        match self {
            SectionKind::Manifest => "manifest",
            SectionKind::Images => "shared tile images",
            SectionKind::TileTable => "tile table",
            SectionKind::Constants => "constants",
            SectionKind::Patches => "patch records",
        }
    }

    pub(crate) fn from_code(code: u32) -> Option<SectionKind> {
        match code {
            1 => Some(SectionKind::Manifest),
            2 => Some(SectionKind::Images),
            3 => Some(SectionKind::TileTable),
            4 => Some(SectionKind::Constants),
            5 => Some(SectionKind::Patches),
            _ => None,
        }
    }
}

/// Errors writing or reading a package.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum PackageError {
    /// The input ends before a structure does.
    #[error(
        "package truncated at byte offset {offset}: {what} needs {needed} bytes, {available} available"
    )]
    Truncated {
        offset: u64,
        what: &'static str,
        needed: u64,
        available: u64,
    },
    /// The magic bytes are wrong.
    #[error("not an .ipuexe package: bad magic at byte offset 0")]
    BadMagic,
    /// The format is newer than this reader.
    #[error("package format {major}.{minor} is newer than this reader ({FORMAT_MAJOR}.x)")]
    NewerVersion { major: u16, minor: u16 },
    /// A checksum does not match.
    #[error(
        "checksum mismatch in {what} at byte offset {offset}: stored {stored:#010x}, computed {computed:#010x}"
    )]
    Checksum {
        what: String,
        offset: u64,
        stored: u32,
        computed: u32,
    },
    /// A structural field is invalid.
    #[error("invalid package at byte offset {offset}: {reason}")]
    Invalid { offset: u64, reason: String },
    /// A structure inside a deflated section is invalid: `offset` counts the section's decoded
    /// bytes, `section_offset` is where its payload starts in the file.
    #[error(
        "invalid package in the deflated {section} section (payload at byte offset {section_offset}), at decoded byte offset {offset}: {reason}"
    )]
    InvalidDecoded {
        section: &'static str,
        section_offset: u64,
        offset: u64,
        reason: String,
    },
    /// The manifest is not valid.
    #[error("invalid manifest: {0}")]
    Manifest(String),
    /// The package is for another target.
    #[error("package is for target {found}, the device is {expected}")]
    WrongTarget { expected: String, found: String },
}

/// A program the host can call by name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Program {
    /// `initialize`, `run`, ...
    pub name: String,
    /// Supervisor entry address, the same on every tile.
    pub entry: u32,
    /// Bulk-synchronous phases (syncs, exchanges and host-exchange points) it goes through.
    pub phases: u32,
}

/// Whether a host tensor goes to the device or comes back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TensorRole {
    /// Written by the host before the call.
    Input,
    /// Read by the host after the call.
    Output,
    /// Carried by the package ([`Package::constants`]), written onto the tiles by
    /// `initialize`.
    Constant,
}

/// A tensor in the host exchange: where its bytes sit in a host page.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostTensor {
    /// The graph value's name.
    pub name: String,
    /// Input or output.
    pub role: TensorRole,
    /// `f32`, `f16`, `f143`, `f152`.
    pub dtype: String,
    /// FP8 scale (0 for other types).
    pub scale: i32,
    /// Logical shape, row-major.
    pub shape: Vec<usize>,
    /// Column group of the storage order (see [`storage_index`]); a multiple of 4.
    pub group: usize,
    /// Host page index.
    pub page: u32,
    /// Byte offset in the page.
    pub offset: u64,
    /// Bytes.
    pub bytes: u64,
}

/// Number of storage elements of a tensor of logical `shape` stored with column group `group`:
/// the shape `[.., R, C]` is stored as `[.., ceil(C / group), R, group]`, the columns beyond `C`
/// in the last group being zero padding. A scalar or 1-D shape counts as one row.
pub fn storage_elements(shape: &[usize], group: usize) -> usize {
    let (outer, rows, cols) = split_shape(shape);
    outer * cols.div_ceil(group) * rows * group
}

/// The storage index of the logical row-major element `index` of a tensor of `shape` stored
/// with column group `group` (see [`storage_elements`]).
pub fn storage_index(shape: &[usize], group: usize, index: usize) -> usize {
    let (_, rows, cols) = split_shape(shape);
    let per_outer = cols.div_ceil(group) * rows * group;
    let (outer, rc) = (index / (rows * cols), index % (rows * cols));
    let (r, c) = (rc / cols, rc % cols);
    outer * per_outer + (c / group) * rows * group + r * group + c % group
}

/// `(outer, rows, cols)` of a shape: the product of the leading dimensions, the second last and
/// the last (a scalar is 1x1x1, a vector one row).
pub fn split_shape(shape: &[usize]) -> (usize, usize, usize) {
    match shape.len() {
        0 => (1, 1, 1),
        1 => (1, 1, shape[0]),
        n => (shape[..n - 2].iter().product(), shape[n - 2], shape[n - 1]),
    }
}

/// A device configuration register write, replayed by the runtime before loading images.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct RegisterWrite {
    /// Tile.
    pub tile: u32,
    /// Register index (see the simulator's documentation of configuration registers).
    pub register: u32,
    /// Value.
    pub value: u32,
}

/// The manifest: what the package is and how to call it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    /// Version of the compiler that wrote the package.
    pub compiler_version: String,
    /// Target name (`gc200`, `bow`, `c600`).
    pub target: String,
    /// Tiles of the target (images cover all of them).
    pub tile_count: u32,
    /// Tiles that take part in the programs (`0..tiles_used`).
    pub tiles_used: u32,
    /// The model's name.
    pub model: String,
    /// Programs, by name.
    pub programs: Vec<Program>,
    /// Sizes of the host pages in bytes, by index.
    pub host_pages: Vec<u64>,
    /// Tensors in the host pages.
    pub tensors: Vec<HostTensor>,
    /// Configuration register writes.
    pub register_writes: Vec<RegisterWrite>,
    /// Free-form figures the compiler recorded (estimated cycles, ...), for reports.
    pub metadata: BTreeMap<String, String>,
    /// The inputs whose values index a table on the device (token ids): the host refuses a
    /// value outside the table before it writes the input (absent when there are none).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub index_bounds: Vec<IndexBound>,
}

/// An input's values index a table: each must lie in `-entries..entries` (negative values
/// count from the end, as ONNX's `Gather` defines).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IndexBound {
    /// The input tensor's name.
    pub input: String,
    /// Entries along the table's indexed axis.
    pub entries: u64,
    /// The operation that indexes the table, for messages.
    pub operation: String,
}

impl IndexBound {
    /// Whether `value` is a valid index.
    pub fn admits(&self, value: i64) -> bool {
        let n = self.entries.min(i64::MAX as u64) as i64;
        (-n..n).contains(&value)
    }
}

/// A whole package in memory.
#[derive(Debug, Clone, PartialEq)]
pub struct Package {
    /// The manifest.
    pub manifest: Manifest,
    /// One image per tile of the target, in tile order, stored shared ([`TileImages`]).
    pub tiles: TileImages,
    /// The bytes of the constants page (empty without constants): the page named by the
    /// [`TensorRole::Constant`] tensors, as the host hands it to `initialize`.
    pub constants: Vec<u8>,
}

/// The host page of each role, as the compiler lays them out: inputs, outputs, constants.
pub const INPUT_PAGE: u32 = 0;
/// See [`INPUT_PAGE`].
pub const OUTPUT_PAGE: u32 = 1;
/// See [`INPUT_PAGE`].
pub const CONSTANTS_PAGE: u32 = 2;
/// Alignment of every tensor in its host page, in bytes.
pub const TENSOR_ALIGN: u64 = 8;
/// Largest rank of a host tensor.
pub const RANK_MAX: usize = 16;

/// Bytes of one element of `dtype` (`f32` 4; `f16`, `bf16`, `i16`, `u16` 2; the FP8 formats
/// `f143`, `f152`, `e4m3fn`, `e5m2`, the MX formats `f4e2m1`, `e8m0`, the integers `i8`, `u8`,
/// `i4`, `u4`, `i2`, `u2` (one per byte) and `bool` 1; `i32`, `u32` 4; `i64`, `u64` 8).
pub fn element_bytes(dtype: &str) -> Option<usize> {
    match dtype {
        "f32" => Some(4),
        "f16" | "bf16" | "i16" | "u16" => Some(2),
        "i32" | "u32" => Some(4),
        "i64" | "u64" => Some(8),
        "f143" | "f152" | "e4m3fn" | "e5m2" | "f4e2m1" | "e8m0" | "i8" | "u8" | "i4" | "u4"
        | "i2" | "u2" | "bool" => Some(1),
        _ => None,
    }
}

/// The page a tensor of `role` lives in.
pub fn page_of(role: TensorRole) -> u32 {
    match role {
        TensorRole::Input => INPUT_PAGE,
        TensorRole::Output => OUTPUT_PAGE,
        TensorRole::Constant => CONSTANTS_PAGE,
    }
}

pub(crate) fn crc(bytes: &[u8]) -> u32 {
    crc32fast::hash(bytes)
}

pub(crate) fn align8(n: usize) -> usize {
    n.div_ceil(8) * 8
}

impl Package {
    /// The program named `name`.
    pub fn program(&self, name: &str) -> Option<&Program> {
        self.manifest.programs.iter().find(|p| p.name == name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn storage_order_groups_columns() {
        // [2, 3] with group 4: one group of 4 columns, 2 rows.
        assert_eq!(storage_elements(&[2, 3], 4), 8);
        assert_eq!(storage_index(&[2, 3], 4, 4), 5); // (1, 1)
        // [3, 20] with group 16: two groups, 3 rows each.
        assert_eq!(storage_elements(&[3, 20], 16), 96);
        assert_eq!(storage_index(&[3, 20], 16, 17), 48 + 1); // (0, 17): group 1, row 0, col 1
        assert_eq!(storage_index(&[2, 3, 20], 16, 60 + 17), 96 + 49);
    }
}
