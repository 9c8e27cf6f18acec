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
//! Sections: the manifest (JSON), the shared tile images, the tile table (one entry for every
//! tile of the target: its shared image and how many patch records make it the tile's own),
//! the patch records (format 2: the bytes where a tile differs from its shared image) and,
//! when the graph has constants, the constants page: the host page the `initialize` program
//! moves onto the tiles. The reader validates every header field, bound, checksum and patch
//! record, and the manifest against the images, before it returns anything. In memory a
//! package keeps the same shared form ([`TileImages`]); a tile's image is expanded when it is
//! loaded ([`TileImages::image`]).

use std::collections::BTreeMap;

use ipu_target::{Target, TargetKind};
use serde::{Deserialize, Serialize};

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
/// Bytes of a patch record's header: image byte offset, length.
pub const PATCH_HEADER_BYTES: usize = 8;
/// Equal bytes between two differing runs up to which one patch record covers both: a record
/// header costs 8 bytes, so a shorter gap costs less inside a record than as a second one.
pub const PATCH_MERGE_GAP_BYTES: usize = PATCH_HEADER_BYTES;
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

/// A known section of a package being read, decoded.
struct Section<'a> {
    kind: SectionKind,
    /// Where its payload starts in the file.
    offset: u64,
    deflated: bool,
    bytes: std::borrow::Cow<'a, [u8]>,
}

impl Section<'_> {
    /// What offsets in the section's bytes count from in the readers' errors: the payload's
    /// file offset when stored, `kind << 40` (beyond any file) when deflated.
    fn base(&self) -> u64 {
        if self.deflated {
            (self.kind as u64) << 40
        } else {
            self.offset
        }
    }
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

    fn from_code(code: u32) -> Option<SectionKind> {
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

/// Whether the writer deflates a section of `kind`: everything but the constants, which are
/// mostly weights that deflate barely shrinks and the host copies as a page.
fn deflated_kind(kind: u32) -> bool {
    kind != SectionKind::Constants as u32
}

fn deflate(bytes: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut enc = flate2::write::DeflateEncoder::new(
        Vec::with_capacity(bytes.len() / 4),
        flate2::Compression::new(DEFLATE_LEVEL),
    );
    // Writing into a Vec cannot fail.
    enc.write_all(bytes).expect("deflate into memory");
    enc.finish().expect("deflate into memory")
}

/// Inflates a section's payload to exactly `decoded` bytes; the error's reason says how the
/// stream fails to.
fn inflate(payload: &[u8], decoded: u64) -> Result<Vec<u8>, String> {
    use std::io::Read;
    let mut out = Vec::with_capacity((decoded as usize).min(payload.len().saturating_mul(8)));
    let mut dec = flate2::read::DeflateDecoder::new(payload).take(decoded + 1);
    dec.read_to_end(&mut out)
        .map_err(|e| format!("its deflate stream does not decode ({e})"))?;
    if out.len() as u64 != decoded {
        return Err(format!(
            "its deflate stream decodes to {}{} bytes; its entry says {decoded}",
            out.len().min(decoded as usize),
            if out.len() as u64 > decoded { "+" } else { "" },
        ));
    }
    Ok(out)
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

/// Bytes of a tile image that differ from its shared image: `bytes` replace the image's bytes
/// from `offset`, counted in the image's segments laid back to back (a patch never changes
/// where segments are or how long they are).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Patch {
    /// Byte offset in the shared image's bytes (its segments back to back).
    pub offset: u32,
    /// The tile's bytes there (at least one).
    pub bytes: Vec<u8>,
}

/// How one tile's image is stored: a shared image and the patches that make it the tile's.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct TileEntry {
    /// Index of the shared image.
    pub image: u32,
    /// Patches in ascending offset order, not overlapping.
    pub patches: Vec<Patch>,
}

/// The images of every tile of a package, stored shared: tiles whose images have the same
/// segments (addresses and lengths) share the image of the first of them, each with the
/// patches where it differs. Building ([`TileImages::push`]) is deterministic: the same images
/// in the same order give the same store.
#[derive(Debug, Clone, Eq, Default)]
pub struct TileImages {
    /// The shared images, in order of first use.
    pub shared: Vec<TileImage>,
    /// One entry per tile, in tile order.
    pub tiles: Vec<TileEntry>,
    /// Shared image of each segment layout (addresses and lengths).
    layouts: BTreeMap<Vec<(u32, u32)>, u32>,
}

/// The segment layout of an image: each segment's address and length.
fn layout_of(image: &TileImage) -> Vec<(u32, u32)> {
    image
        .segments
        .iter()
        .map(|s| (s.address, s.bytes.len() as u32))
        .collect()
}

impl TileImages {
    /// An empty store.
    pub fn new() -> TileImages {
        TileImages::default()
    }

    /// Tiles stored.
    pub fn len(&self) -> usize {
        self.tiles.len()
    }

    /// No tile stored.
    pub fn is_empty(&self) -> bool {
        self.tiles.is_empty()
    }

    /// Adds the next tile's image: the shared image of its layout with patches, or a new
    /// shared image when no earlier tile had its layout.
    pub fn push(&mut self, image: TileImage) {
        let layout = layout_of(&image);
        match self.layouts.get(&layout) {
            Some(&i) => {
                let patches = diff(&self.shared[i as usize], &image);
                self.tiles.push(TileEntry { image: i, patches });
            }
            None => {
                let i = self.shared.len() as u32;
                self.layouts.insert(layout, i);
                self.shared.push(image);
                self.tiles.push(TileEntry {
                    image: i,
                    patches: Vec::new(),
                });
            }
        }
    }

    /// Adds the next tiles' images, as [`TileImages::push`] does one at a time, with the
    /// diffs against their shared images computed by `diff_all` (given `(shared, image)` pairs
    /// in tile order, it returns [`diff`] of each, in order: a caller may compute them in
    /// parallel).
    pub fn extend_with(
        &mut self,
        images: Vec<TileImage>,
        diff_all: impl FnOnce(&[(&TileImage, &TileImage)]) -> Vec<Vec<Patch>>,
    ) {
        let mut shared_of = Vec::with_capacity(images.len());
        let mut patched = Vec::new();
        for image in images {
            let layout = layout_of(&image);
            match self.layouts.get(&layout) {
                Some(&i) => {
                    shared_of.push((i, true));
                    patched.push(image);
                }
                None => {
                    let i = self.shared.len() as u32;
                    self.layouts.insert(layout, i);
                    self.shared.push(image);
                    shared_of.push((i, false));
                }
            }
        }
        let pairs: Vec<(&TileImage, &TileImage)> = shared_of
            .iter()
            .filter(|(_, p)| *p)
            .zip(&patched)
            .map(|(&(i, _), image)| (&self.shared[i as usize], image))
            .collect();
        let diffs = diff_all(&pairs);
        assert_eq!(diffs.len(), pairs.len(), "one diff per patched image");
        let mut diffs = diffs.into_iter();
        for (image, is_patched) in shared_of {
            let patches = if is_patched {
                diffs.next().unwrap_or_default()
            } else {
                Vec::new()
            };
            self.tiles.push(TileEntry { image, patches });
        }
    }

    /// The image of `tile`, its patches applied; None past the last tile.
    pub fn image(&self, tile: usize) -> Option<TileImage> {
        let entry = self.tiles.get(tile)?;
        let mut image = self.shared.get(entry.image as usize)?.clone();
        apply(&mut image, &entry.patches);
        Some(image)
    }

    /// Every tile's image, expanded one at a time, in tile order.
    pub fn iter(&self) -> impl Iterator<Item = TileImage> + '_ {
        (0..self.tiles.len()).filter_map(|t| self.image(t))
    }

    /// Bytes of patch records (headers and bytes, unpadded) over all tiles.
    pub fn patch_bytes(&self) -> u64 {
        self.tiles
            .iter()
            .flat_map(|t| &t.patches)
            .map(|p| (PATCH_HEADER_BYTES + p.bytes.len()) as u64)
            .sum()
    }

    /// Bytes of the shared images' segments.
    pub fn shared_bytes(&self) -> u64 {
        self.shared.iter().map(|i| i.bytes()).sum()
    }
}

impl PartialEq for TileImages {
    fn eq(&self, other: &TileImages) -> bool {
        self.shared == other.shared && self.tiles == other.tiles
    }
}

impl From<Vec<TileImage>> for TileImages {
    fn from(images: Vec<TileImage>) -> TileImages {
        let mut store = TileImages::new();
        for image in images {
            store.push(image);
        }
        store
    }
}

/// Where a patch's bytes go: (segment, offset in it, length) pieces of `image`'s bytes
/// `offset .. offset + len`, which must lie inside the image.
fn pieces(image: &TileImage, offset: usize, len: usize) -> Vec<(usize, usize, usize)> {
    let mut out = Vec::new();
    let (mut at, end) = (offset, offset + len);
    let mut base = 0usize;
    for (i, s) in image.segments.iter().enumerate() {
        let seg_end = base + s.bytes.len();
        if at < seg_end && at < end {
            let n = end.min(seg_end) - at;
            out.push((i, at - base, n));
            at += n;
        }
        base = seg_end;
    }
    out
}

/// Applies `patches` to `image` (each inside its bytes: the reader and [`diff`] ensure it).
fn apply(image: &mut TileImage, patches: &[Patch]) {
    for p in patches {
        let mut from = 0usize;
        for (seg, at, n) in pieces(image, p.offset as usize, p.bytes.len()) {
            image.segments[seg].bytes[at..at + n].copy_from_slice(&p.bytes[from..from + n]);
            from += n;
        }
    }
}

/// The patches that make `shared` into `image` (both of the same layout): the runs of
/// differing bytes of each segment, runs closer than [`PATCH_MERGE_GAP_BYTES`] merged into one
/// record.
pub fn diff(shared: &TileImage, image: &TileImage) -> Vec<Patch> {
    let mut patches: Vec<Patch> = Vec::new();
    let mut base = 0usize;
    for (a, b) in shared.segments.iter().zip(&image.segments) {
        let (a, b) = (&a.bytes, &b.bytes);
        let mut i = 0usize;
        while i < b.len() {
            // Skip equal bytes eight at a time.
            if i + 8 <= b.len() && a[i..i + 8] == b[i..i + 8] {
                i += 8;
                continue;
            }
            if a[i] == b[i] {
                i += 1;
                continue;
            }
            // A differing run, extended over gaps shorter than a record header.
            let start = i;
            let mut end = i + 1;
            let mut j = end;
            while j < b.len() && j - end < PATCH_MERGE_GAP_BYTES {
                if a[j] != b[j] {
                    end = j + 1;
                }
                j += 1;
            }
            patches.push(Patch {
                offset: (base + start) as u32,
                bytes: b[start..end].to_vec(),
            });
            i = end;
        }
        base += b.len();
    }
    patches
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

/// Lays out `sections` (kind code and decoded bytes, in table order) as a package file of
/// format [`FORMAT_MAJOR`]`.minor`, each section deflated when that makes it smaller (but the
/// constants), with every checksum: the writer's last step, public for tools that rewrite a
/// package's sections (and for tests that make corrupt packages with valid checksums). It
/// checks nothing; [`Package::from_bytes`] checks everything.
pub fn pack(minor: u16, sections: &[(u32, &[u8])]) -> Vec<u8> {
    pack_version(FORMAT_MAJOR, minor, sections)
}

/// [`pack`] with the format's major version given: below 3, every section is stored as is
/// (what a writer of that version wrote, for the readers' tests of older packages).
pub fn pack_version(major: u16, minor: u16, sections: &[(u32, &[u8])]) -> Vec<u8> {
    let mut out = vec![0u8; HEADER_BYTES + SECTION_ENTRY_BYTES * sections.len()];
    out[..8].copy_from_slice(&MAGIC);
    out[8..10].copy_from_slice(&major.to_le_bytes());
    out[10..12].copy_from_slice(&minor.to_le_bytes());
    out[12..16].copy_from_slice(&(sections.len() as u32).to_le_bytes());
    for (i, (kind, bytes)) in sections.iter().enumerate() {
        // Deflated when that is smaller (and the decoded length fits its field).
        let deflated = (major >= 3
            && deflated_kind(*kind)
            && (bytes.len() as u64) <= SECTION_DECODED_BYTES_MAX)
            .then(|| deflate(bytes))
            .filter(|d| d.len() < bytes.len());
        let (encoding, payload, decoded) = match &deflated {
            Some(d) => (Encoding::Deflate, &d[..], bytes.len() as u32),
            None => (Encoding::Stored, &bytes[..], 0),
        };
        out.resize(align8(out.len()), 0);
        let offset = out.len() as u64;
        out.extend_from_slice(payload);
        let e = HEADER_BYTES + i * SECTION_ENTRY_BYTES;
        out[e..e + 4].copy_from_slice(&kind.to_le_bytes());
        out[e + 4..e + 8].copy_from_slice(&(encoding as u32).to_le_bytes());
        out[e + 8..e + 16].copy_from_slice(&offset.to_le_bytes());
        out[e + 16..e + 24].copy_from_slice(&(payload.len() as u64).to_le_bytes());
        out[e + 24..e + 28].copy_from_slice(&crc(payload).to_le_bytes());
        out[e + 28..e + 32].copy_from_slice(&decoded.to_le_bytes());
    }
    let table_end = HEADER_BYTES + SECTION_ENTRY_BYTES * sections.len();
    let mut head = out[..table_end].to_vec();
    head[16..20].fill(0);
    let c = crc(&head);
    out[16..20].copy_from_slice(&c.to_le_bytes());
    out
}

/// The sections of a valid package file: kind code and decoded bytes, in table order (the
/// inverse of [`pack`]; an error where [`Package::from_bytes`] would give one).
pub fn sections(bytes: &[u8]) -> Result<Vec<(u32, Vec<u8>)>, PackageError> {
    Package::from_bytes(bytes)?;
    let u32_at = |at: usize| u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap());
    let u64_at = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap()) as usize;
    let major = u16::from_le_bytes([bytes[8], bytes[9]]);
    (0..u32_at(12) as usize)
        .map(|i| {
            let e = HEADER_BYTES + SECTION_ENTRY_BYTES * i;
            let (offset, len) = (u64_at(e + 8), u64_at(e + 16));
            let payload = &bytes[offset..offset + len];
            let decoded = if major >= 3 && u32_at(e + 4) == Encoding::Deflate as u32 {
                inflate(payload, u32_at(e + 28) as u64).map_err(|reason| PackageError::Invalid {
                    offset: offset as u64,
                    reason,
                })?
            } else {
                payload.to_vec()
            };
            Ok((u32_at(e), decoded))
        })
        .collect()
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
                "{} tile entries for {} tiles",
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
        for (i, img) in self.tiles.shared.iter().enumerate() {
            let mut end = 0u64;
            for s in &img.segments {
                if !target.in_memory(s.address, s.bytes.len() as u32)
                    || s.bytes.len() > target.memory_bytes() as usize
                {
                    return Err(PackageError::Manifest(format!(
                        "shared image {i}: segment at {:#x} of {} bytes is outside tile memory",
                        s.address,
                        s.bytes.len()
                    )));
                }
                if (s.address as u64) < end {
                    return Err(PackageError::Manifest(format!(
                        "shared image {i}: segment at {:#x} overlaps the previous one",
                        s.address
                    )));
                }
                end = s.address as u64 + s.bytes.len() as u64;
            }
        }
        for (t, entry) in self.tiles.tiles.iter().enumerate() {
            let Some(img) = self.tiles.shared.get(entry.image as usize) else {
                return Err(PackageError::Manifest(format!(
                    "tile {t} names shared image {} of {}",
                    entry.image,
                    self.tiles.shared.len()
                )));
            };
            let image_bytes = img.bytes();
            let mut end = 0u64;
            for (k, p) in entry.patches.iter().enumerate() {
                let (offset, len) = (u64::from(p.offset), p.bytes.len() as u64);
                if len == 0 || offset < end || offset + len > image_bytes {
                    return Err(PackageError::Manifest(format!(
                        "tile {t}: patch {k} of {len} bytes at image offset {offset} is empty, overlaps the previous one or ends past the {image_bytes} bytes of its image"
                    )));
                }
                end = offset + len;
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
        let mut images = Vec::new();
        images.extend_from_slice(&(self.tiles.shared.len() as u32).to_le_bytes());
        for img in &self.tiles.shared {
            images.extend_from_slice(&(img.segments.len() as u32).to_le_bytes());
            for s in &img.segments {
                images.extend_from_slice(&s.address.to_le_bytes());
                images.extend_from_slice(&(s.bytes.len() as u32).to_le_bytes());
                images.extend_from_slice(&s.bytes);
                images.resize(align8(images.len()), 0);
            }
        }
        let mut table = Vec::with_capacity(self.tiles.len() * TILE_ENTRY_BYTES);
        let mut patches = Vec::new();
        for entry in &self.tiles.tiles {
            table.extend_from_slice(&entry.image.to_le_bytes());
            table.extend_from_slice(&(entry.patches.len() as u32).to_le_bytes());
            for p in &entry.patches {
                patches.extend_from_slice(&p.offset.to_le_bytes());
                patches.extend_from_slice(&(p.bytes.len() as u32).to_le_bytes());
                patches.extend_from_slice(&p.bytes);
                patches.resize(patches.len().div_ceil(4) * 4, 0);
            }
        }
        let mut sections: Vec<(u32, &[u8])> = vec![
            (SectionKind::Manifest as u32, &manifest),
            (SectionKind::Images as u32, &images),
            (SectionKind::TileTable as u32, &table),
        ];
        // The patch records only when a tile has some, the constants only with constants.
        if !patches.is_empty() {
            sections.push((SectionKind::Patches as u32, &patches));
        }
        if !self.constants.is_empty() {
            sections.push((SectionKind::Constants as u32, &self.constants));
        }
        Ok(pack(FORMAT_MINOR, &sections))
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
        // Known sections: file offset, payload, decoded length when deflated.
        let mut payloads: BTreeMap<u32, (u64, &[u8], Option<u64>)> = BTreeMap::new();
        for i in 0..count as usize {
            let e = HEADER_BYTES + i * SECTION_ENTRY_BYTES;
            let kind = u32_at(e);
            let deflated = if major < 3 {
                zero(e + 4, e + 8, "a section entry's reserved bytes")?;
                zero(e + 28, e + 32, "a section entry's reserved bytes")?;
                None
            } else {
                let (encoding, decoded) = (u32_at(e + 4), u32_at(e + 28) as u64);
                match encoding {
                    0 => {
                        zero(e + 28, e + 32, "a stored section's decoded length")?;
                        None
                    }
                    1 if (1..=SECTION_DECODED_BYTES_MAX).contains(&decoded) => Some(decoded),
                    1 => {
                        return Err(PackageError::Invalid {
                            offset: (e + 28) as u64,
                            reason: format!(
                                "section {i} decodes to {decoded} bytes; a deflated section decodes to 1 to {SECTION_DECODED_BYTES_MAX}"
                            ),
                        });
                    }
                    _ => {
                        return Err(PackageError::Invalid {
                            offset: (e + 4) as u64,
                            reason: format!(
                                "section {i} has encoding {encoding}; known: 0 (stored), 1 (deflate)"
                            ),
                        });
                    }
                }
            };
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
            if payloads.insert(kind, (offset, payload, deflated)).is_some() {
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
        // Deflated sections are decoded in table order, each to exactly its stated length.
        let mut decoded: BTreeMap<u32, Section> = BTreeMap::new();
        for (&kind, &(offset, payload, length)) in &payloads {
            let bytes = match length {
                None => std::borrow::Cow::Borrowed(payload),
                Some(length) => {
                    std::borrow::Cow::Owned(inflate(payload, length).map_err(|reason| {
                        PackageError::Invalid {
                            offset,
                            reason: format!("section kind {kind}: {reason}"),
                        }
                    })?)
                }
            };
            let kind = SectionKind::from_code(kind).expect("only known kinds are kept");
            decoded.insert(
                kind as u32,
                Section {
                    kind,
                    offset,
                    deflated: length.is_some(),
                    bytes,
                },
            );
        }
        let section = |kind: SectionKind| {
            decoded.get(&(kind as u32)).ok_or(PackageError::Invalid {
                offset: HEADER_BYTES as u64,
                reason: format!("missing {kind:?} section"),
            })
        };
        // The readers count offsets from a section's base: its file offset when stored, a
        // base of its own beyond any file when deflated, which `locate` turns into an offset in
        // the section's decoded bytes.
        let locate = |e: PackageError| {
            let (offset, reason) = match &e {
                PackageError::Invalid { offset, reason } => (*offset, reason.clone()),
                PackageError::Truncated {
                    offset,
                    what,
                    needed,
                    available,
                } => (
                    *offset,
                    format!("{what} needs {needed} bytes, {available} available"),
                ),
                _ => return e,
            };
            match decoded.values().find(|s| {
                s.deflated && s.base() <= offset && offset - s.base() <= s.bytes.len() as u64
            }) {
                Some(s) => PackageError::InvalidDecoded {
                    section: s.kind.name(),
                    section_offset: s.offset,
                    offset: offset - s.base(),
                    reason,
                },
                None => e,
            }
        };
        let manifest = section(SectionKind::Manifest)?;
        let manifest: Manifest = serde_json::from_slice(&manifest.bytes)
            .map_err(|e| PackageError::Manifest(e.to_string()))?;
        let images = section(SectionKind::Images)?;
        let unique = read_images(&images.bytes, images.base()).map_err(locate)?;
        let table = section(SectionKind::TileTable)?;
        let patches = decoded
            .get(&(SectionKind::Patches as u32))
            .map(|p| (p.base(), &p.bytes[..]));
        let tiles = if major == 1 {
            read_tile_table_1(unique, &table.bytes, table.base())
        } else {
            read_tile_table(unique, &table.bytes, table.base(), patches)
        }
        .map_err(locate)?;
        let constants = decoded
            .get(&(SectionKind::Constants as u32))
            .map_or_else(Vec::new, |c| c.bytes.to_vec());
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

/// The tile table of format 1: one u32 per tile naming its (whole) image.
fn read_tile_table_1(
    unique: Vec<TileImage>,
    table: &[u8],
    table_at: u64,
) -> Result<TileImages, PackageError> {
    if !table.len().is_multiple_of(4) {
        return Err(PackageError::Invalid {
            offset: table_at,
            reason: format!(
                "tile table of {} bytes is not a whole number of entries",
                table.len()
            ),
        });
    }
    let mut store = TileImages::new();
    for (i, c) in table.chunks_exact(4).enumerate() {
        let id = u32::from_le_bytes(c.try_into().unwrap()) as usize;
        let img = unique.get(id).ok_or_else(|| PackageError::Invalid {
            offset: table_at + 4 * i as u64,
            reason: format!("tile {i} names image {id} of {}", unique.len()),
        })?;
        store.push(img.clone());
    }
    Ok(store)
}

/// The tile table of format 2 (image index and patch record count per tile) and the patch
/// records it counts, in tile order: every record inside its image, ascending and not
/// overlapping, its padding zero, the records filling their section exactly, every shared image
/// used by a tile.
fn read_tile_table(
    shared: Vec<TileImage>,
    table: &[u8],
    table_at: u64,
    patches: Option<(u64, &[u8])>,
) -> Result<TileImages, PackageError> {
    let invalid = |offset: u64, reason: String| Err(PackageError::Invalid { offset, reason });
    if !table.len().is_multiple_of(TILE_ENTRY_BYTES) {
        return invalid(
            table_at,
            format!(
                "tile table of {} bytes is not a whole number of {TILE_ENTRY_BYTES}-byte entries",
                table.len()
            ),
        );
    }
    let (patches_at, records) = patches.unwrap_or((0, &[]));
    if patches.is_some() && records.is_empty() {
        return invalid(patches_at, "an empty patch section".into());
    }
    let word = |b: &[u8], at: usize| u32::from_le_bytes(b[at..at + 4].try_into().unwrap());
    let sizes: Vec<u64> = shared.iter().map(|i| i.bytes()).collect();
    let mut used = vec![false; shared.len()];
    let mut tiles = Vec::with_capacity(table.len() / TILE_ENTRY_BYTES);
    let mut at = 0usize;
    for (t, e) in table.chunks_exact(TILE_ENTRY_BYTES).enumerate() {
        let entry_at = table_at + (t * TILE_ENTRY_BYTES) as u64;
        let (image, count) = (word(e, 0), word(e, 4) as usize);
        let Some(&image_bytes) = sizes.get(image as usize) else {
            return invalid(
                entry_at,
                format!("tile {t} names shared image {image} of {}", shared.len()),
            );
        };
        used[image as usize] = true;
        // Each record takes at least a header and one padded word: a bound on corrupt counts.
        if count > (records.len() - at) / (PATCH_HEADER_BYTES + 4) {
            return invalid(
                entry_at + 4,
                format!(
                    "tile {t} has {count} patch records; {} bytes of records are left",
                    records.len() - at
                ),
            );
        }
        let mut list = Vec::with_capacity(count);
        let mut end = 0u64;
        for k in 0..count {
            let record_at = patches_at + at as u64;
            if records.len() - at < PATCH_HEADER_BYTES {
                return Err(PackageError::Truncated {
                    offset: record_at,
                    what: "patch record header",
                    needed: PATCH_HEADER_BYTES as u64,
                    available: (records.len() - at) as u64,
                });
            }
            let (offset, len) = (word(records, at), word(records, at + 4) as usize);
            let padded = len.div_ceil(4) * 4;
            if len == 0 {
                return invalid(
                    record_at + 4,
                    format!("tile {t}: patch record {k} is empty"),
                );
            }
            if u64::from(offset) < end || u64::from(offset) + len as u64 > image_bytes {
                return invalid(
                    record_at,
                    format!(
                        "tile {t}: patch record {k} of {len} bytes at image offset {offset} overlaps the previous record (which ends at {end}) or ends past the {image_bytes} bytes of shared image {image}"
                    ),
                );
            }
            let data_at = at + PATCH_HEADER_BYTES;
            if records.len() - data_at < padded {
                return Err(PackageError::Truncated {
                    offset: patches_at + data_at as u64,
                    what: "patch record bytes",
                    needed: padded as u64,
                    available: (records.len() - data_at) as u64,
                });
            }
            if let Some(i) = records[data_at + len..data_at + padded]
                .iter()
                .position(|&b| b != 0)
            {
                return invalid(
                    patches_at + (data_at + len + i) as u64,
                    format!("tile {t}: patch record {k}'s padding must be zero"),
                );
            }
            list.push(Patch {
                offset,
                bytes: records[data_at..data_at + len].to_vec(),
            });
            end = u64::from(offset) + len as u64;
            at = data_at + padded;
        }
        tiles.push(TileEntry {
            image,
            patches: list,
        });
    }
    if at != records.len() {
        return invalid(
            patches_at + at as u64,
            format!(
                "{} bytes of patch records after the last tile's",
                records.len() - at
            ),
        );
    }
    if let Some(i) = used.iter().position(|u| !u) {
        return invalid(table_at, format!("shared image {i} is used by no tile"));
    }
    let mut store = TileImages {
        shared,
        tiles,
        layouts: BTreeMap::new(),
    };
    for (i, img) in store.shared.iter().enumerate() {
        store.layouts.entry(layout_of(img)).or_insert(i as u32);
    }
    Ok(store)
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
            tiles: tiles.into(),
            constants: Vec::new(),
        }
    }

    /// `sample()` with tiles 1..=4 of tile 0's layout, each differing from it in a few bytes
    /// (one run in each segment, and tile 4 equal to tile 0).
    fn with_patches() -> Package {
        let mut p = sample();
        let mut tiles: Vec<TileImage> = p.tiles.iter().collect();
        for t in 1..=4usize {
            let mut img = tiles[0].clone();
            if t < 4 {
                img.segments[0].bytes[t] = 100 + t as u8;
                img.segments[1].bytes[3..3 + t].fill(t as u8);
            }
            tiles[t] = img;
        }
        p.tiles = tiles.into();
        p
    }

    #[test]
    fn tiles_of_one_layout_share_an_image_and_expand_to_their_own() {
        let p = with_patches();
        assert_eq!(p.tiles.shared.len(), 3); // tile 0's layout, the empty image, tile 5's
        assert_eq!(p.tiles.tiles[2].image, 0);
        assert_eq!(p.tiles.tiles[2].patches.len(), 2);
        assert!(p.tiles.tiles[4].patches.is_empty());
        let img = p.tiles.image(2).unwrap();
        assert_eq!(img.segments[0].bytes, vec![1, 2, 102, 4, 5]);
        assert_eq!(&img.segments[1].bytes[..6], &[9, 9, 9, 2, 2, 9]);
        let b = p.to_bytes().unwrap();
        assert_eq!(u16::from_le_bytes([b[8], b[9]]), FORMAT_MAJOR);
        let q = Package::from_bytes(&b).unwrap();
        assert_eq!(q, p);
        assert_eq!(q.tiles.image(3), p.tiles.image(3));
        // Every byte of the patch section is covered: by its checksum, or by a check.
        for i in 0..b.len() {
            let mut c = b.clone();
            c[i] ^= 0x21;
            assert!(Package::from_bytes(&c).is_err(), "byte {i} accepted");
        }
    }

    /// Repacks `p`'s sections with the patch section (kind 5) replaced by `records` and the
    /// tile table's entry of `tile` counting `count` records.
    fn repacked(p: &Package, tile: usize, count: u32, records: &[u8]) -> Vec<u8> {
        let mut s = sections(&p.to_bytes().unwrap()).unwrap();
        for (kind, payload) in &mut s {
            if *kind == 3 {
                for e in payload.chunks_exact_mut(8).skip(1) {
                    e[4..8].fill(0);
                }
                payload[tile * 8 + 4..tile * 8 + 8].copy_from_slice(&count.to_le_bytes());
            }
            if *kind == 5 {
                *payload = records.to_vec();
            }
        }
        let refs: Vec<(u32, &[u8])> = s.iter().map(|(k, b)| (*k, b.as_slice())).collect();
        pack(FORMAT_MINOR, &refs)
    }

    #[test]
    fn patch_records_the_compiler_cannot_have_written_are_refused() {
        let p = with_patches();
        let record = |offset: u32, bytes: &[u8]| {
            let mut r = offset.to_le_bytes().to_vec();
            r.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
            r.extend_from_slice(bytes);
            r.resize(r.len().div_ceil(4) * 4, 0);
            r
        };
        // Accepted: one record on tile 1.
        let ok = repacked(&p, 1, 1, &record(2, &[7]));
        let q = Package::from_bytes(&ok).unwrap();
        assert_eq!(q.tiles.image(1).unwrap().segments[0].bytes[2], 7);
        let refuse = |b: Vec<u8>, what: &str| {
            let e = Package::from_bytes(&b).unwrap_err().to_string();
            assert!(e.contains(what), "{e}");
        };
        // Past the image (5 + 16 bytes), spanning its end.
        refuse(
            repacked(&p, 1, 1, &record(20, &[1, 2])),
            "tile 1: patch record 0",
        );
        // Empty.
        let mut empty = record(0, &[]);
        empty.extend_from_slice(&[0; 4]);
        refuse(
            repacked(&p, 1, 1, &empty),
            "tile 1: patch record 0 is empty",
        );
        // Overlapping, out of order.
        let mut two = record(4, &[1, 2]);
        two.extend(record(5, &[3]));
        refuse(repacked(&p, 2, 2, &two), "tile 2: patch record 1");
        // Nonzero padding.
        let mut r = record(0, &[1]);
        r[9] = 1;
        refuse(repacked(&p, 1, 1, &r), "padding must be zero");
        // More records counted than the section holds, and bytes left over.
        refuse(
            repacked(&p, 1, 9, &record(0, &[1])),
            "tile 1 has 9 patch records",
        );
        let mut extra = record(0, &[1]);
        extra.extend_from_slice(&[0; 12]);
        refuse(repacked(&p, 1, 1, &extra), "after the last tile's");
    }

    #[test]
    fn a_bad_record_in_a_deflated_section_is_named_by_its_decoded_offset() {
        let p = with_patches();
        // Twenty records of one byte each on tile 1, the last overlapping the one before:
        // repetitive enough to be stored deflated.
        let mut records = Vec::new();
        for k in 0..20u32 {
            records.extend_from_slice(&k.min(18).to_le_bytes());
            records.extend_from_slice(&1u32.to_le_bytes());
            records.extend_from_slice(&[7, 0, 0, 0]);
        }
        let b = repacked(&p, 1, 20, &records);
        let e = 32 + 32 * 3; // the patch section's entry
        assert_eq!(u32::from_le_bytes(b[e..e + 4].try_into().unwrap()), 5);
        assert_eq!(u32::from_le_bytes(b[e + 4..e + 8].try_into().unwrap()), 1);
        let err = Package::from_bytes(&b).unwrap_err();
        assert!(
            matches!(
                err,
                PackageError::InvalidDecoded {
                    section: "patch records",
                    offset: 228,
                    ..
                }
            ),
            "{err}"
        );
        assert!(err.to_string().contains("tile 1: patch record 19"), "{err}");
    }

    #[test]
    fn a_corrupt_deflate_stream_is_refused_with_its_section() {
        let b = with_patches().to_bytes().unwrap();
        let e = HEADER_BYTES; // the manifest's entry
        assert_eq!(u32::from_le_bytes(b[e + 4..e + 8].try_into().unwrap()), 1);
        let at = u64::from_le_bytes(b[e + 8..e + 16].try_into().unwrap()) as usize;
        let mut c = b.clone();
        // The stream's first block header: a reserved block type, then the checksums redone.
        c[at] |= 0b110;
        let len = u64::from_le_bytes(b[e + 16..e + 24].try_into().unwrap()) as usize;
        let sum = crc(&c[at..at + len]);
        c[e + 24..e + 28].copy_from_slice(&sum.to_le_bytes());
        let count = u32::from_le_bytes(c[12..16].try_into().unwrap()) as usize;
        c[16..20].fill(0);
        let head = crc(&c[..HEADER_BYTES + SECTION_ENTRY_BYTES * count]);
        c[16..20].copy_from_slice(&head.to_le_bytes());
        let err = Package::from_bytes(&c).unwrap_err().to_string();
        assert!(
            err.contains(&format!(
                "byte offset {at}: section kind 1: its deflate stream does not decode"
            )),
            "{err}"
        );
    }

    #[test]
    fn packages_of_format_2_still_read() {
        let p = with_patches();
        let s = sections(&p.to_bytes().unwrap()).unwrap();
        let refs: Vec<(u32, &[u8])> = s.iter().map(|(k, b)| (*k, b.as_slice())).collect();
        let old = pack_version(2, 0, &refs);
        assert_eq!(u16::from_le_bytes([old[8], old[9]]), 2);
        assert_eq!(Package::from_bytes(&old).unwrap(), p);
        // Format 2 has no encodings: its entries' reserved words stay zero.
        let mut bad = old.clone();
        bad[HEADER_BYTES + 4] = 1;
        bad[16..20].fill(0);
        let count = s.len();
        let head = crc(&bad[..HEADER_BYTES + SECTION_ENTRY_BYTES * count]);
        bad[16..20].copy_from_slice(&head.to_le_bytes());
        let err = Package::from_bytes(&bad).unwrap_err().to_string();
        assert!(err.contains("reserved bytes must be zero"), "{err}");
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
    fn constants_round_trip() {
        let p = with_constants();
        let b = p.to_bytes().unwrap();
        assert_eq!(u16::from_le_bytes([b[8], b[9]]), FORMAT_MAJOR);
        assert_eq!(Package::from_bytes(&b).unwrap(), p);
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
        b[8] = 4;
        assert_eq!(
            Package::from_bytes(&b),
            Err(PackageError::NewerVersion { major: 4, minor: 0 })
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
        let mut tiles: Vec<TileImage> = p.tiles.iter().collect();
        tiles[3].segments.push(Segment {
            address: 0xE7FF0,
            bytes: vec![0; 32],
        });
        p.tiles = tiles.into();
        assert!(matches!(p.to_bytes(), Err(PackageError::Manifest(_))));
    }
}
