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
//!
//! `format` holds the constants, section kinds, errors and the types a package is made of,
//! `images` the tile images and their shared store, `writer` and `reader` the two directions,
//! and `validation` what both require of a package.

mod format;
mod images;
mod reader;
mod validation;
mod writer;

#[cfg(test)]
mod tests;

pub use format::{
    CONSTANTS_PAGE, DEFLATE_LEVEL, Encoding, FORMAT_MAJOR, FORMAT_MINOR, HEADER_BYTES, HostTensor,
    INPUT_PAGE, IndexBound, MAGIC, Manifest, OUTPUT_PAGE, Package, PackageError, Program, RANK_MAX,
    RegisterWrite, SECTION_DECODED_BYTES_MAX, SECTION_ENTRY_BYTES, SECTIONS_MAX, SectionKind,
    TENSOR_ALIGN, TILE_ENTRY_BYTES, TensorRole, element_bytes, page_of, split_shape,
    storage_elements, storage_index,
};
pub use images::{
    PATCH_HEADER_BYTES, PATCH_MERGE_GAP_BYTES, Patch, Segment, TileEntry, TileImage, TileImages,
    diff,
};
pub use reader::sections;
pub use writer::{pack, pack_version};
