//! The `.ipuexe` package: everything a device needs to run a compiled program.
//!
//! Layout (all integers little-endian; see `docs/package-format.md`):
//!
//! ```text
//! header   (32 B)  magic "IPUEXE\0\0", major u16, minor u16, section count u32,
//!                  header crc32 u32 (of the header with this field zero), reserved 12 B
//! sections (32 B each) kind u32, reserved u32, offset u64, length u64, crc32 u32, reserved u32
//! payloads         each section's bytes at its offset, in table order, 8-byte aligned
//! ```
//!
//! Sections: the manifest (JSON), the tile-image store (unique images), the tile table
//! (one entry for every tile of the target, naming its image) and, when the graph has
//! constants, the constants page (format 1.1): the host page the `initialize` program moves
//! onto the tiles. The reader validates every
//! header field, bound and checksum, and the manifest against the images, before it returns
//! anything.

use std::collections::BTreeMap;

use ipu_target::{Target, TargetKind};
use serde::{Deserialize, Serialize};

/// First eight bytes of every package.
pub const MAGIC: [u8; 8] = *b"IPUEXE\0\0";
/// Major format version this crate writes; a reader rejects a newer major version.
pub const FORMAT_MAJOR: u16 = 1;
/// Minor format version this crate writes for a package with constants; newer minors are
/// readable (additions only). Minor 1 added the constants page; a package without constants
/// is written as 1.0.
pub const FORMAT_MINOR: u16 = 1;
/// Bytes of the header.
pub const HEADER_BYTES: usize = 32;
/// Bytes of one section-table entry.
pub const SECTION_ENTRY_BYTES: usize = 32;
/// Largest number of sections a reader accepts (a bound on corrupt input).
pub const SECTIONS_MAX: u32 = 64;

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
}

impl SectionKind {
    fn from_code(code: u32) -> Option<SectionKind> {
        match code {
            1 => Some(SectionKind::Manifest),
            2 => Some(SectionKind::Images),
            3 => Some(SectionKind::TileTable),
            4 => Some(SectionKind::Constants),
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
    /// The manifest is not valid.
    #[error("invalid manifest: {0}")]
    Manifest(String),
    /// The package is for another target.
    #[error("package is for target {found}, the device is {expected}")]
    WrongTarget { expected: String, found: String },
}

/// A contiguous piece of a tile image.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Segment {
    /// Tile address of the first byte.
    pub address: u32,
    /// The bytes.
    pub bytes: Vec<u8>,
}

/// What to load into one tile's memory.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default, PartialOrd, Ord)]
pub struct TileImage {
    /// Segments in ascending address order, not overlapping.
    pub segments: Vec<Segment>,
}

impl TileImage {
    /// Total bytes of all segments.
    pub fn bytes(&self) -> u64 {
        self.segments.iter().map(|s| s.bytes.len() as u64).sum()
    }
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
}

/// A whole package in memory.
#[derive(Debug, Clone, PartialEq)]
pub struct Package {
    /// The manifest.
    pub manifest: Manifest,
    /// One image per tile of the target, in tile order.
    pub tiles: Vec<TileImage>,
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

/// The FP8 scales a tensor may carry (`ipu_numerics::SCALE_MIN..=SCALE_MAX`).
const FP8_SCALES: std::ops::RangeInclusive<i32> = -32..=31;

/// Programs: unique names, a `run`, entries in executable memory, and a phase count a program
/// can have: at least one, and at most one per supervisor instruction that executable memory
/// holds (every phase ends at a sync instruction).
fn validate_programs(m: &Manifest, target: &Target) -> Result<(), PackageError> {
    let bad = |m: String| Err(PackageError::Manifest(m));
    let phases_max = (target.executable_end - target.executable_base) / 4;
    let mut names = std::collections::BTreeSet::new();
    for p in &m.programs {
        if !names.insert(p.name.as_str()) {
            return bad(format!("program {:?} appears twice", p.name));
        }
        if !target.in_executable(p.entry, 4) || p.entry % 4 != 0 {
            return bad(format!(
                "program {:?} entry {:#x} is not in executable memory",
                p.name, p.entry
            ));
        }
        if p.phases == 0 || p.phases > phases_max {
            return bad(format!(
                "program {:?} has {} phases (1..={phases_max} on {})",
                p.name, p.phases, m.target
            ));
        }
    }
    if !names.contains("run") {
        return bad("no `run` program".into());
    }
    Ok(())
}

/// Tensors: known dtypes and scales, bytes that are the storage size of the shape, unique
/// names, at least one output, each role in its page, and every page packed as the compiler
/// packs it (each tensor at the next 8-byte boundary after the previous, the page ending at
/// the last one's aligned end), no page larger than the tiles in use can hold. A deleted,
/// duplicated, moved or role-swapped tensor breaks one of these.
fn validate_tensors(m: &Manifest, target: &Target) -> Result<(), PackageError> {
    let bad = |m: String| Err(PackageError::Manifest(m));
    let device_bytes = u64::from(m.tiles_used) * u64::from(target.memory_bytes());
    let mut names = std::collections::BTreeSet::new();
    let mut ends = vec![0u64; m.host_pages.len()];
    for t in &m.tensors {
        let name = &t.name;
        if !names.insert(name.as_str()) {
            return bad(format!("tensor {name:?} appears twice"));
        }
        let Some(eb) = element_bytes(&t.dtype) else {
            return bad(format!("tensor {name:?} has unknown dtype {:?}", t.dtype));
        };
        let fp8 = eb == 1;
        if (fp8 && !FP8_SCALES.contains(&t.scale)) || (!fp8 && t.scale != 0) {
            return bad(format!(
                "tensor {name:?} of dtype {} has scale {} (FP8 scales are -32..=31, others 0)",
                t.dtype, t.scale
            ));
        }
        if t.shape.is_empty() || t.shape.len() > RANK_MAX || t.shape.contains(&0) {
            return bad(format!(
                "tensor {name:?} has rank {} or an empty dimension (ranks 1..={RANK_MAX}, dimensions at least 1)",
                t.shape.len()
            ));
        }
        if t.group == 0 || t.group % 4 != 0 {
            return bad(format!(
                "tensor {name:?} has column group {} (a positive multiple of 4 is required)",
                t.group
            ));
        }
        // The storage size, in checked arithmetic: a corrupt shape must not overflow.
        let (n, last) = (t.shape.len(), t.shape[t.shape.len() - 1] as u64);
        let storage = t.shape[..n - 1]
            .iter()
            .try_fold(last.div_ceil(t.group as u64) * t.group as u64, |a, &d| {
                a.checked_mul(d as u64)
            })
            .and_then(|e| e.checked_mul(eb as u64));
        if storage != Some(t.bytes) {
            return bad(format!(
                "tensor {name:?} of shape {:?} and group {} holds {} bytes, not the {} it declares",
                t.shape,
                t.group,
                storage.map_or("more than 2^64".into(), |b| b.to_string()),
                t.bytes
            ));
        }
        if t.page != page_of(t.role) {
            return bad(format!(
                "tensor {name:?} of role {:?} is in page {}; that role's page is {}",
                t.role,
                t.page,
                page_of(t.role)
            ));
        }
        let Some(end) = ends.get_mut(t.page as usize) else {
            return bad(format!("tensor {name:?} names missing page {}", t.page));
        };
        if t.offset != *end {
            return bad(format!(
                "tensor {name:?} is at offset {} of page {}; the previous tensor ends at {}",
                t.offset, t.page, *end
            ));
        }
        *end = (t.offset + t.bytes).div_ceil(TENSOR_ALIGN) * TENSOR_ALIGN;
    }
    if !m.tensors.iter().any(|t| t.role == TensorRole::Output) {
        return bad("no output tensor".into());
    }
    for (page, (&size, &end)) in m.host_pages.iter().zip(&ends).enumerate() {
        if size != end {
            return bad(format!(
                "page {page} has {size} bytes but its tensors end at {end}"
            ));
        }
        if size > device_bytes {
            return bad(format!(
                "page {page} of {size} bytes exceeds the {device_bytes} bytes of the {} tiles in use",
                m.tiles_used
            ));
        }
    }
    Ok(())
}

/// Lays out `sections` (kind code and payload, in table order) as a package file of format
/// `1.minor`, with every checksum: the writer's last step, public for tools that rewrite a
/// package's sections (and for tests that make corrupt packages with valid checksums). It
/// checks nothing; [`Package::from_bytes`] checks everything.
pub fn pack(minor: u16, sections: &[(u32, &[u8])]) -> Vec<u8> {
    let mut out = vec![0u8; HEADER_BYTES + SECTION_ENTRY_BYTES * sections.len()];
    out[..8].copy_from_slice(&MAGIC);
    out[8..10].copy_from_slice(&FORMAT_MAJOR.to_le_bytes());
    out[10..12].copy_from_slice(&minor.to_le_bytes());
    out[12..16].copy_from_slice(&(sections.len() as u32).to_le_bytes());
    for (i, (kind, payload)) in sections.iter().enumerate() {
        out.resize(align8(out.len()), 0);
        let offset = out.len() as u64;
        out.extend_from_slice(payload);
        let e = HEADER_BYTES + i * SECTION_ENTRY_BYTES;
        out[e..e + 4].copy_from_slice(&kind.to_le_bytes());
        out[e + 8..e + 16].copy_from_slice(&offset.to_le_bytes());
        out[e + 16..e + 24].copy_from_slice(&(payload.len() as u64).to_le_bytes());
        out[e + 24..e + 28].copy_from_slice(&crc(payload).to_le_bytes());
    }
    let table_end = HEADER_BYTES + SECTION_ENTRY_BYTES * sections.len();
    let mut head = out[..table_end].to_vec();
    head[16..20].fill(0);
    let c = crc(&head);
    out[16..20].copy_from_slice(&c.to_le_bytes());
    out
}

/// The sections of a valid package file: kind code and payload, in table order (the inverse
/// of [`pack`]; an error where [`Package::from_bytes`] would give one).
pub fn sections(bytes: &[u8]) -> Result<Vec<(u32, Vec<u8>)>, PackageError> {
    Package::from_bytes(bytes)?;
    let u32_at = |at: usize| u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap());
    let u64_at = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap()) as usize;
    Ok((0..u32_at(12) as usize)
        .map(|i| {
            let e = HEADER_BYTES + SECTION_ENTRY_BYTES * i;
            let (offset, len) = (u64_at(e + 8), u64_at(e + 16));
            (u32_at(e), bytes[offset..offset + len].to_vec())
        })
        .collect())
}

fn crc(bytes: &[u8]) -> u32 {
    crc32fast::hash(bytes)
}

fn align8(n: usize) -> usize {
    n.div_ceil(8) * 8
}

impl Package {
    /// Validates the package's own consistency against its target.
    pub fn validate(&self) -> Result<Target, PackageError> {
        let m = &self.manifest;
        let kind = TargetKind::from_name(&m.target)
            .ok_or_else(|| PackageError::Manifest(format!("unknown target {:?}", m.target)))?;
        let target = kind.target();
        if m.tile_count != target.tiles {
            return Err(PackageError::Manifest(format!(
                "tile_count {} but target {} has {} tiles",
                m.tile_count, m.target, target.tiles
            )));
        }
        if self.tiles.len() != target.tiles as usize {
            return Err(PackageError::Manifest(format!(
                "{} tile images for {} tiles",
                self.tiles.len(),
                target.tiles
            )));
        }
        if m.tiles_used == 0 || m.tiles_used > target.tiles {
            return Err(PackageError::Manifest(format!(
                "tiles_used {} out of range",
                m.tiles_used
            )));
        }
        for (i, img) in self.tiles.iter().enumerate() {
            let mut end = 0u64;
            for s in &img.segments {
                if !target.in_memory(s.address, s.bytes.len() as u32)
                    || s.bytes.len() > target.memory_bytes() as usize
                {
                    return Err(PackageError::Manifest(format!(
                        "tile {i}: segment at {:#x} of {} bytes is outside tile memory",
                        s.address,
                        s.bytes.len()
                    )));
                }
                if (s.address as u64) < end {
                    return Err(PackageError::Manifest(format!(
                        "tile {i}: segment at {:#x} overlaps the previous one",
                        s.address
                    )));
                }
                end = s.address as u64 + s.bytes.len() as u64;
            }
        }
        validate_programs(m, &target)?;
        validate_tensors(m, &target)?;
        let constant_pages: std::collections::BTreeSet<u32> = m
            .tensors
            .iter()
            .filter(|t| t.role == TensorRole::Constant)
            .map(|t| t.page)
            .collect();
        match (constant_pages.len(), constant_pages.first()) {
            (0, _) if !self.constants.is_empty() => {
                return Err(PackageError::Manifest(format!(
                    "{} bytes of constants but no constant tensor",
                    self.constants.len()
                )));
            }
            (0, _) => {}
            (1, Some(&page)) => {
                let size = m.host_pages[page as usize];
                if self.constants.len() as u64 != size {
                    return Err(PackageError::Manifest(format!(
                        "constants page {page} has {size} bytes but the package carries {}",
                        self.constants.len()
                    )));
                }
            }
            _ => {
                return Err(PackageError::Manifest(format!(
                    "constant tensors in pages {constant_pages:?}: they share one page"
                )));
            }
        }
        for w in &m.register_writes {
            if w.tile >= target.tiles {
                return Err(PackageError::Manifest(format!(
                    "register write to tile {} beyond the chip",
                    w.tile
                )));
            }
        }
        Ok(target)
    }

    /// The program named `name`.
    pub fn program(&self, name: &str) -> Option<&Program> {
        self.manifest.programs.iter().find(|p| p.name == name)
    }

    /// Serialises the package. Identical tile images are stored once.
    pub fn to_bytes(&self) -> Result<Vec<u8>, PackageError> {
        self.validate()?;
        let manifest = serde_json::to_vec_pretty(&self.manifest)
            .map_err(|e| PackageError::Manifest(e.to_string()))?;
        // Unique images in first-use order: deterministic.
        let mut index: BTreeMap<&TileImage, u32> = BTreeMap::new();
        let mut unique: Vec<&TileImage> = Vec::new();
        let mut table = Vec::with_capacity(self.tiles.len() * 4);
        for img in &self.tiles {
            let next = unique.len() as u32;
            let id = *index.entry(img).or_insert_with(|| {
                unique.push(img);
                next
            });
            table.extend_from_slice(&id.to_le_bytes());
        }
        let mut images = Vec::new();
        images.extend_from_slice(&(unique.len() as u32).to_le_bytes());
        for img in unique {
            images.extend_from_slice(&(img.segments.len() as u32).to_le_bytes());
            for s in &img.segments {
                images.extend_from_slice(&s.address.to_le_bytes());
                images.extend_from_slice(&(s.bytes.len() as u32).to_le_bytes());
                images.extend_from_slice(&s.bytes);
                images.resize(align8(images.len()), 0);
            }
        }
        let mut sections: Vec<(u32, &[u8])> = vec![
            (SectionKind::Manifest as u32, &manifest),
            (SectionKind::Images as u32, &images),
            (SectionKind::TileTable as u32, &table),
        ];
        // Packages without constants stay format 1.0, readable by every 1.x reader.
        let minor = if self.constants.is_empty() {
            0
        } else {
            sections.push((SectionKind::Constants as u32, &self.constants));
            FORMAT_MINOR
        };
        Ok(pack(minor, &sections))
    }

    /// Parses and validates a package. Nothing is returned unless every check passes.
    pub fn from_bytes(bytes: &[u8]) -> Result<Package, PackageError> {
        let need = |offset: u64, what: &'static str, needed: u64| {
            if offset
                .checked_add(needed)
                .is_none_or(|end| end > bytes.len() as u64)
            {
                Err(PackageError::Truncated {
                    offset,
                    what,
                    needed,
                    available: (bytes.len() as u64).saturating_sub(offset),
                })
            } else {
                Ok(())
            }
        };
        need(0, "header", HEADER_BYTES as u64)?;
        if bytes[..8] != MAGIC {
            return Err(PackageError::BadMagic);
        }
        let u16_at = |at: usize| u16::from_le_bytes([bytes[at], bytes[at + 1]]);
        let u32_at = |at: usize| u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap());
        let u64_at = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap());
        let (major, minor) = (u16_at(8), u16_at(10));
        if major > FORMAT_MAJOR {
            return Err(PackageError::NewerVersion { major, minor });
        }
        if major == 0 {
            return Err(PackageError::Invalid {
                offset: 8,
                reason: "format major version 0".into(),
            });
        }
        let count = u32_at(12);
        if count > SECTIONS_MAX {
            return Err(PackageError::Invalid {
                offset: 12,
                reason: format!("{count} sections (at most {SECTIONS_MAX})"),
            });
        }
        let table_end = HEADER_BYTES + SECTION_ENTRY_BYTES * count as usize;
        need(
            HEADER_BYTES as u64,
            "section table",
            (table_end - HEADER_BYTES) as u64,
        )?;
        let mut head = bytes[..table_end].to_vec();
        head[16..20].fill(0);
        let (stored, computed) = (u32_at(16), crc(&head));
        if stored != computed {
            return Err(PackageError::Checksum {
                what: "header".into(),
                offset: 16,
                stored,
                computed,
            });
        }
        // Reserved fields are zero; every byte of the file is a header field, a table entry,
        // a payload or zero padding before a payload, so a byte changed anywhere is refused.
        let zero =
            |from: usize, to: usize, what: &str| match bytes[from..to].iter().position(|&b| b != 0)
            {
                Some(i) => Err(PackageError::Invalid {
                    offset: (from + i) as u64,
                    reason: format!("{what} must be zero, found {:#04x}", bytes[from + i]),
                }),
                None => Ok(()),
            };
        zero(20, HEADER_BYTES, "the header's reserved bytes")?;
        let mut end = table_end as u64;
        let mut payloads: BTreeMap<u32, (u64, &[u8])> = BTreeMap::new();
        for i in 0..count as usize {
            let e = HEADER_BYTES + i * SECTION_ENTRY_BYTES;
            let kind = u32_at(e);
            zero(e + 4, e + 8, "a section entry's reserved bytes")?;
            zero(e + 28, e + 32, "a section entry's reserved bytes")?;
            let (offset, length) = (u64_at(e + 8), u64_at(e + 16));
            let expected = align8(end as usize) as u64;
            if offset != expected {
                return Err(PackageError::Invalid {
                    offset: (e + 8) as u64,
                    reason: format!(
                        "section {i} starts at byte offset {offset}; sections follow each other in table order, each at the next 8-byte boundary ({expected})"
                    ),
                });
            }
            need(offset, "section payload", length)?;
            zero(end as usize, offset as usize, "padding before a section")?;
            end = offset + length;
            let payload = &bytes[offset as usize..(offset + length) as usize];
            let (stored, computed) = (u32_at(e + 24), crc(payload));
            if stored != computed {
                return Err(PackageError::Checksum {
                    what: format!("section {i} (kind {kind})"),
                    offset,
                    stored,
                    computed,
                });
            }
            if SectionKind::from_code(kind).is_none() {
                // Unknown sections of a known major version are additions: skip them.
                continue;
            }
            if payloads.insert(kind, (offset, payload)).is_some() {
                return Err(PackageError::Invalid {
                    offset: e as u64,
                    reason: format!("section kind {kind} appears twice"),
                });
            }
        }
        if end != bytes.len() as u64 {
            return Err(PackageError::Invalid {
                offset: end,
                reason: format!(
                    "{} bytes after the last section; a package ends where its last section ends",
                    bytes.len() as u64 - end
                ),
            });
        }
        let section = |kind: SectionKind| {
            payloads
                .get(&(kind as u32))
                .copied()
                .ok_or(PackageError::Invalid {
                    offset: HEADER_BYTES as u64,
                    reason: format!("missing {kind:?} section"),
                })
        };
        let (_, manifest) = section(SectionKind::Manifest)?;
        let manifest: Manifest =
            serde_json::from_slice(manifest).map_err(|e| PackageError::Manifest(e.to_string()))?;
        let (images_at, images) = section(SectionKind::Images)?;
        let unique = read_images(images, images_at)?;
        let (table_at, table) = section(SectionKind::TileTable)?;
        if table.len() % 4 != 0 {
            return Err(PackageError::Invalid {
                offset: table_at,
                reason: format!(
                    "tile table of {} bytes is not a whole number of entries",
                    table.len()
                ),
            });
        }
        let mut tiles = Vec::with_capacity(table.len() / 4);
        for (i, c) in table.chunks_exact(4).enumerate() {
            let id = u32::from_le_bytes(c.try_into().unwrap()) as usize;
            let img = unique.get(id).ok_or_else(|| PackageError::Invalid {
                offset: table_at + 4 * i as u64,
                reason: format!("tile {i} names image {id} of {}", unique.len()),
            })?;
            tiles.push(img.clone());
        }
        let constants = payloads
            .get(&(SectionKind::Constants as u32))
            .map_or_else(Vec::new, |(_, bytes)| bytes.to_vec());
        let package = Package {
            manifest,
            tiles,
            constants,
        };
        package.validate()?;
        Ok(package)
    }

    /// Checks that the package was built for `target`.
    pub fn check_target(&self, target: &Target) -> Result<(), PackageError> {
        if self.manifest.target != target.kind.name() {
            return Err(PackageError::WrongTarget {
                expected: target.kind.name().into(),
                found: self.manifest.target.clone(),
            });
        }
        Ok(())
    }
}

fn read_images(bytes: &[u8], base: u64) -> Result<Vec<TileImage>, PackageError> {
    let mut at = 0usize;
    let mut take = |n: usize, what: &'static str| -> Result<(usize, &[u8]), PackageError> {
        if at + n > bytes.len() {
            return Err(PackageError::Truncated {
                offset: base + at as u64,
                what,
                needed: n as u64,
                available: (bytes.len() - at) as u64,
            });
        }
        let start = at;
        at += n;
        Ok((start, &bytes[start..start + n]))
    };
    let word = |b: &[u8]| u32::from_le_bytes(b.try_into().unwrap());
    let (_, c) = take(4, "image count")?;
    let count = word(c) as usize;
    // Each image needs at least 4 bytes: a bound against corrupt counts.
    if count > bytes.len() / 4 {
        return Err(PackageError::Invalid {
            offset: base,
            reason: format!("{count} images cannot fit"),
        });
    }
    let mut images = Vec::with_capacity(count);
    for _ in 0..count {
        let (pos, c) = take(4, "segment count")?;
        let segments = word(c) as usize;
        if segments > bytes.len() / 8 {
            return Err(PackageError::Invalid {
                offset: base + pos as u64,
                reason: format!("{segments} segments cannot fit"),
            });
        }
        let mut image = TileImage::default();
        for _ in 0..segments {
            let (_, a) = take(4, "segment address")?;
            let address = word(a);
            let (_, l) = take(4, "segment length")?;
            let len = word(l) as usize;
            let (start, data) = take(len, "segment bytes")?;
            image.segments.push(Segment {
                address,
                bytes: data.to_vec(),
            });
            let pad = align8(start + len) - (start + len);
            take(pad, "segment padding")?;
        }
        images.push(image);
    }
    Ok(images)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Package {
        let target = Target::gc200();
        let mut tiles = vec![TileImage::default(); target.tiles as usize];
        tiles[0].segments.push(Segment {
            address: 0x4C000,
            bytes: vec![1, 2, 3, 4, 5],
        });
        tiles[0].segments.push(Segment {
            address: 0x80000,
            bytes: vec![9; 16],
        });
        tiles[5].segments.push(Segment {
            address: 0x4C000,
            bytes: vec![7; 12],
        });
        Package {
            manifest: Manifest {
                compiler_version: "0.1.0".into(),
                target: "gc200".into(),
                tile_count: target.tiles,
                tiles_used: 8,
                model: "test".into(),
                programs: vec![Program {
                    name: "run".into(),
                    entry: 0x4C000,
                    phases: 3,
                }],
                host_pages: vec![64, 8],
                tensors: vec![
                    HostTensor {
                        name: "x".into(),
                        role: TensorRole::Input,
                        dtype: "f32".into(),
                        scale: 0,
                        shape: vec![4, 4],
                        group: 4,
                        page: 0,
                        offset: 0,
                        bytes: 64,
                    },
                    HostTensor {
                        name: "y".into(),
                        role: TensorRole::Output,
                        dtype: "f16".into(),
                        scale: 0,
                        shape: vec![3],
                        group: 4,
                        page: 1,
                        offset: 0,
                        bytes: 8,
                    },
                ],
                register_writes: vec![RegisterWrite {
                    tile: 0,
                    register: 1,
                    value: 2,
                }],
                metadata: BTreeMap::new(),
            },
            tiles,
            constants: Vec::new(),
        }
    }

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

    #[test]
    fn round_trips() {
        let p = sample();
        let b = p.to_bytes().unwrap();
        assert_eq!(Package::from_bytes(&b).unwrap(), p);
        // Deterministic bytes.
        assert_eq!(b, sample().to_bytes().unwrap());
    }

    /// `sample()` with one constant tensor of 16 bytes in a third page.
    fn with_constants() -> Package {
        let mut p = sample();
        p.manifest.host_pages.push(16);
        let mut t = p.manifest.tensors[0].clone();
        t.name = "w".into();
        t.role = TensorRole::Constant;
        t.page = p.manifest.host_pages.len() as u32 - 1;
        t.shape = vec![1, 4];
        t.offset = 0;
        t.bytes = 16;
        p.manifest.tensors.push(t);
        p.constants = (0..16).collect();
        p
    }

    #[test]
    fn constants_round_trip_in_format_1_1_and_packages_without_stay_1_0() {
        let p = with_constants();
        let b = p.to_bytes().unwrap();
        assert_eq!(u16::from_le_bytes([b[10], b[11]]), 1);
        assert_eq!(Package::from_bytes(&b).unwrap(), p);
        let b = sample().to_bytes().unwrap();
        assert_eq!(u16::from_le_bytes([b[10], b[11]]), 0);
        // Every byte of the constants section is covered by its checksum.
        let b = p.to_bytes().unwrap();
        let at = b.len() - 16;
        for i in at..b.len() {
            let mut c = b.clone();
            c[i] ^= 1;
            assert!(Package::from_bytes(&c).is_err(), "byte {i}");
        }
    }

    #[test]
    fn constants_that_do_not_fill_their_page_are_refused() {
        let mut p = with_constants();
        p.constants.pop();
        let e = p.validate().unwrap_err();
        assert!(
            matches!(e, PackageError::Manifest(ref m) if m.contains("constants page")),
            "{e}"
        );
        let mut p = sample();
        p.constants = vec![0; 8];
        assert!(p.validate().is_err());
    }

    #[test]
    fn every_truncation_is_rejected() {
        let b = sample().to_bytes().unwrap();
        for len in (0..b.len()).step_by(7) {
            assert!(Package::from_bytes(&b[..len]).is_err(), "len {len}");
        }
    }

    #[test]
    fn every_single_byte_corruption_is_rejected() {
        let b = sample().to_bytes().unwrap();
        for i in 0..b.len() {
            let mut c = b.clone();
            c[i] ^= 0x40;
            assert!(Package::from_bytes(&c).is_err(), "byte {i} accepted");
        }
    }

    #[test]
    fn newer_major_is_rejected() {
        let mut b = sample().to_bytes().unwrap();
        b[8] = 2;
        assert_eq!(
            Package::from_bytes(&b),
            Err(PackageError::NewerVersion { major: 2, minor: 0 })
        );
    }

    #[test]
    fn wrong_target_is_named() {
        let p = sample();
        let e = p.check_target(&TargetKind::C600.target()).unwrap_err();
        assert_eq!(
            e.to_string(),
            "package is for target gc200, the device is c600"
        );
    }

    #[test]
    fn segment_outside_memory_is_rejected() {
        let mut p = sample();
        p.tiles[3].segments.push(Segment {
            address: 0xE7FF0,
            bytes: vec![0; 32],
        });
        assert!(matches!(p.to_bytes(), Err(PackageError::Manifest(_))));
    }
}
