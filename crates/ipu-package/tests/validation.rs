//! The reader validates the manifest's meaning, not only its checksums: a package edited and
//! re-checksummed is refused when what it says cannot be what the compiler wrote.

use std::collections::BTreeMap;

use ipu_package::{
    HostTensor, Manifest, Package, PackageError, Program, Segment, TensorRole, TileImage,
};
use ipu_target::Target;
use serde_json::{Value, json};

fn tensor(name: &str, role: TensorRole, shape: &[usize], page: u32, offset: u64) -> HostTensor {
    let bytes = (ipu_package::storage_elements(shape, 4) * 4) as u64;
    HostTensor {
        name: name.into(),
        role,
        dtype: "f32".into(),
        scale: 0,
        shape: shape.to_vec(),
        group: 4,
        page,
        offset,
        bytes,
    }
}

fn package() -> Package {
    let target = Target::gc200();
    let mut tiles = vec![TileImage::default(); target.tiles as usize];
    tiles[0].segments.push(Segment {
        address: 0x4C000,
        bytes: vec![1, 2, 3, 4],
    });
    Package {
        manifest: Manifest {
            compiler_version: "0.1.0".into(),
            target: "gc200".into(),
            tile_count: target.tiles,
            tiles_used: 4,
            model: "m".into(),
            programs: vec![
                Program {
                    name: "initialize".into(),
                    entry: 0x4C000,
                    phases: 1,
                },
                Program {
                    name: "run".into(),
                    entry: 0x4C000,
                    phases: 5,
                },
            ],
            // a: 2x3 -> 2*4*4 = 32 bytes; b: 1x4 -> 16 bytes; y: 2x4 -> 32 bytes.
            host_pages: vec![48, 32],
            tensors: vec![
                tensor("a", TensorRole::Input, &[2, 3], 0, 0),
                tensor("b", TensorRole::Input, &[1, 4], 0, 32),
                tensor("y", TensorRole::Output, &[2, 4], 1, 0),
            ],
            register_writes: vec![],
            metadata: BTreeMap::new(),
            index_bounds: Vec::new(),
        },
        tiles: tiles.into(),
        constants: vec![],
    }
}

fn sections(bytes: &[u8]) -> Vec<(u32, Vec<u8>)> {
    ipu_package::sections(bytes).unwrap()
}

fn pack(sections: &[(u32, Vec<u8>)]) -> Vec<u8> {
    let s: Vec<(u32, &[u8])> = sections.iter().map(|(k, p)| (*k, p.as_slice())).collect();
    ipu_package::pack(0, &s)
}

fn rechecksum_header(out: &mut [u8], count: usize) {
    let end = 32 + 32 * count;
    out[16..20].fill(0);
    let c = crc32fast::hash(&out[..end]);
    out[16..20].copy_from_slice(&c.to_le_bytes());
}

/// The package with its manifest edited by `edit` and every checksum recomputed.
fn edited(edit: impl FnOnce(&mut Value)) -> Result<Package, PackageError> {
    let good = package().to_bytes().unwrap();
    let mut s = sections(&good);
    let mut m: Value = serde_json::from_slice(&s[0].1).unwrap();
    edit(&mut m);
    s[0].1 = serde_json::to_vec(&m).unwrap();
    Package::from_bytes(&pack(&s))
}

fn refused(what: &str, edit: impl FnOnce(&mut Value), expected: &str) {
    match edited(edit) {
        Ok(_) => panic!("{what}: accepted"),
        Err(e) => assert!(e.to_string().contains(expected), "{what}: {e}"),
    }
}

#[test]
fn the_repacked_package_is_accepted_unchanged() {
    assert_eq!(edited(|_| {}).unwrap(), package());
    let good = package().to_bytes().unwrap();
    assert_eq!(pack(&sections(&good)), good);
}

#[test]
fn tensor_lists_that_the_compiler_cannot_have_written_are_refused() {
    refused(
        "unaligned offset",
        |m| m["tensors"][1]["offset"] = json!(36),
        "is at offset 36 of page 0; the previous tensor ends at 32",
    );
    refused(
        "empty list",
        |m| m["tensors"] = json!([]),
        "no output tensor",
    );
    refused(
        "deleted input",
        |m| {
            m["tensors"].as_array_mut().unwrap().remove(1);
        },
        "page 0 has 48 bytes but its tensors end at 32",
    );
    refused(
        "deleted output",
        |m| {
            m["tensors"].as_array_mut().unwrap().remove(2);
            m["host_pages"] = json!([48, 0]);
        },
        "no output tensor",
    );
    refused(
        "duplicated",
        |m| {
            let t = m["tensors"][0].clone();
            m["tensors"].as_array_mut().unwrap().insert(1, t);
        },
        "tensor \"a\" appears twice",
    );
    refused(
        "roles swapped",
        |m| {
            m["tensors"][0]["role"] = json!("output");
            m["tensors"][2]["role"] = json!("input");
        },
        "of role Output is in page 0; that role's page is 1",
    );
    refused(
        "absurd shape",
        |m| m["tensors"][2]["shape"] = json!([1u64 << 40, 1u64 << 40]),
        "holds more than 2^64 bytes, not the 32 it declares",
    );
    refused(
        "shape against bytes",
        |m| m["tensors"][2]["shape"] = json!([3, 4]),
        "holds 48 bytes, not the 32 it declares",
    );
    refused(
        "huge consistent page",
        |m| {
            m["tensors"][2]["shape"] = json!([1u64 << 20, 1u64 << 20]);
            m["tensors"][2]["bytes"] = json!(1u64 << 42);
            m["host_pages"][1] = json!(1u64 << 42);
        },
        "exceeds the 2555904 bytes of the 4 tiles in use",
    );
    refused(
        "unknown dtype",
        |m| m["tensors"][0]["dtype"] = json!("f64"),
        "unknown dtype",
    );
    refused(
        "scale on f32",
        |m| m["tensors"][0]["scale"] = json!(3),
        "has scale 3",
    );
    refused("rank 0", |m| m["tensors"][0]["shape"] = json!([]), "rank 0");
}

#[test]
fn programs_that_cannot_run_are_refused() {
    refused(
        "no phases",
        |m| m["programs"][1]["phases"] = json!(0),
        "has 0 phases (1..=",
    );
    refused(
        "too many phases",
        |m| m["programs"][1]["phases"] = json!(950_272),
        "has 950272 phases (1..=",
    );
    refused(
        "no run",
        |m| m["programs"][1]["name"] = json!("go"),
        "no `run` program",
    );
    refused(
        "two runs",
        |m| m["programs"][0]["name"] = json!("run"),
        "program \"run\" appears twice",
    );
}

#[test]
fn bytes_outside_the_sections_are_refused() {
    let good = package().to_bytes().unwrap();
    // Appended bytes.
    let mut b = good.clone();
    b.extend_from_slice(&[0; 8]);
    let e = Package::from_bytes(&b).unwrap_err().to_string();
    assert!(e.contains("8 bytes after the last section"), "{e}");
    // Reserved header bytes, with the header checksum recomputed.
    for at in [20, 24, 31] {
        let mut b = good.clone();
        b[at] = 1;
        rechecksum_header(&mut b, 3);
        let e = Package::from_bytes(&b).unwrap_err().to_string();
        assert!(
            e.contains(&format!(
                "byte offset {at}: the header's reserved bytes must be zero"
            )),
            "{e}"
        );
    }
    // A section entry's encoding and decoded length, with the header checksum recomputed:
    // the manifest is deflated, a section of incompressible bytes (of a kind this reader skips)
    // is stored.
    let word = |b: &[u8], at: usize| u32::from_le_bytes(b[at..at + 4].try_into().unwrap());
    let entry = |i: usize| 32 + 32 * i;
    let (manifest, extra) = (entry(0), entry(3));
    let mut with_extra = sections(&good);
    let noise: Vec<u8> = (0..64u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    with_extra.push((99, noise));
    let with_extra = pack(&with_extra);
    assert_eq!(
        (word(&good, manifest + 4), word(&with_extra, extra + 4)),
        (1, 0)
    );
    let decoded = word(&good, manifest + 28);
    assert_eq!(decoded as usize, sections(&good)[0].1.len());
    let refused_entry = |at: usize, value: u32, expected: &str| {
        let mut b = good.clone();
        b[at..at + 4].copy_from_slice(&value.to_le_bytes());
        rechecksum_header(&mut b, 3);
        let e = Package::from_bytes(&b).unwrap_err().to_string();
        assert!(e.contains(expected), "{at} = {value}: {e}");
    };
    refused_entry(
        manifest + 4,
        2,
        "byte offset 36: section 0 has encoding 2; known: 0 (stored), 1 (deflate)",
    );
    refused_entry(
        manifest + 4,
        0,
        "byte offset 60: a stored section's decoded length must be zero",
    );
    refused_entry(
        manifest + 28,
        0,
        "byte offset 60: section 0 decodes to 0 bytes; a deflated section decodes to 1 to",
    );
    refused_entry(
        manifest + 28,
        decoded + 1,
        &format!(
            "its deflate stream decodes to {decoded} bytes; its entry says {}",
            decoded + 1
        ),
    );
    refused_entry(
        manifest + 28,
        decoded - 1,
        &format!(
            "its deflate stream decodes to {}+ bytes; its entry says {}",
            decoded - 1,
            decoded - 1
        ),
    );
    let mut b = with_extra.clone();
    b[extra + 28] = 4;
    rechecksum_header(&mut b, 4);
    let e = Package::from_bytes(&b).unwrap_err().to_string();
    assert!(
        e.contains("byte offset 156: a stored section's decoded length must be zero"),
        "{e}"
    );
    // Padding between sections.
    let manifest_end = 32 + 32 * 3 + word(&good, manifest + 16) as usize;
    if !manifest_end.is_multiple_of(8) {
        let mut b = good.clone();
        b[manifest_end] = 1;
        let e = Package::from_bytes(&b).unwrap_err().to_string();
        assert!(e.contains("padding before a section must be zero"), "{e}");
    }
    // A section moved past a gap, its offset recomputed.
    let mut b = good.clone();
    let e = 32 + 32 * 2 + 8;
    let off = u64::from_le_bytes(b[e..e + 8].try_into().unwrap()) + 8;
    b[e..e + 8].copy_from_slice(&off.to_le_bytes());
    rechecksum_header(&mut b, 3);
    let e = Package::from_bytes(&b).unwrap_err().to_string();
    assert!(
        e.contains("sections follow each other in table order"),
        "{e}"
    );
}

#[test]
fn index_bounds_must_name_an_input_and_a_table() {
    let bound = |input: &str, entries: u64| json!([{"input": input, "entries": entries, "operation": "embedding"}]);
    refused(
        "bound on an output",
        |m| m["index_bounds"] = bound("y", 10),
        "index bound of \"y\" names no input tensor",
    );
    refused(
        "empty table",
        |m| m["index_bounds"] = bound("a", 0),
        "index bound of \"a\" has no entries",
    );
    let kept = edited(|m| m["index_bounds"] = bound("a", 10)).unwrap();
    assert_eq!(kept.manifest.index_bounds[0].entries, 10);
    assert!(kept.manifest.index_bounds[0].admits(-10) && !kept.manifest.index_bounds[0].admits(10));
}
