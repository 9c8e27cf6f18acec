//! Round trips through the writer and the reader, and the reader's refusals of what the writer
//! cannot have written.

use std::collections::BTreeMap;

use ipu_target::{Target, TargetKind};

use crate::format::crc;
use crate::*;

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
            index_bounds: Vec::new(),
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
    assert_eq!(
        p.validate().unwrap_err(),
        PackageError::Manifest("8 bytes of constants but no constant tensor".into())
    );
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
