//! The writer: a package's sections laid out in a file, deflated where that is smaller.

use crate::format::{
    DEFLATE_LEVEL, Encoding, FORMAT_MAJOR, FORMAT_MINOR, HEADER_BYTES, MAGIC, Package,
    PackageError, SECTION_DECODED_BYTES_MAX, SECTION_ENTRY_BYTES, SectionKind, TILE_ENTRY_BYTES,
    align8, crc,
};

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

impl Package {
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
}
