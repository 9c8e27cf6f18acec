//! Tile images, the patches that make one image another, and the store that keeps every tile's
//! image as a shared image and its patches ([`TileImages`]), in memory as in the file.

use std::collections::BTreeMap;

/// Bytes of a patch record's header: image byte offset, length.
pub const PATCH_HEADER_BYTES: usize = 8;
/// Equal bytes between two differing runs up to which one patch record covers both: a record
/// header costs 8 bytes, so a shorter gap costs less inside a record than as a second one.
pub const PATCH_MERGE_GAP_BYTES: usize = PATCH_HEADER_BYTES;

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

    /// The store of `shared` images and the `tiles` entries a reader found (each layout's
    /// shared image the first of that layout, as [`TileImages::push`] would have it).
    pub(crate) fn from_parts(shared: Vec<TileImage>, tiles: Vec<TileEntry>) -> TileImages {
        let mut store = TileImages {
            shared,
            tiles,
            layouts: BTreeMap::new(),
        };
        for (i, img) in store.shared.iter().enumerate() {
            store.layouts.entry(layout_of(img)).or_insert(i as u32);
        }
        store
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
