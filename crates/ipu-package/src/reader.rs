//! The reader: every header field, bound, checksum and patch record checked, deflated sections
//! decoded to their stated length, and the package validated before it is returned.

use std::collections::BTreeMap;

use crate::format::{
    Encoding, FORMAT_MAJOR, HEADER_BYTES, MAGIC, Manifest, Package, PackageError,
    SECTION_DECODED_BYTES_MAX, SECTION_ENTRY_BYTES, SECTIONS_MAX, SectionKind, TILE_ENTRY_BYTES,
    align8, crc,
};
use crate::images::{PATCH_HEADER_BYTES, Patch, Segment, TileEntry, TileImage, TileImages};

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

/// The sections of a valid package file: kind code and decoded bytes, in table order (the
/// inverse of [`pack`](crate::pack); an error where [`Package::from_bytes`] would give one).
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

impl Package {
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
    Ok(TileImages::from_parts(shared, tiles))
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
