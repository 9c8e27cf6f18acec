//! Hand-built packages with real tile machine code, for the runtime's tests.
//!
//! The doubling package: input `x` and output `y`, of the same dtype, shape and column group,
//! in host pages 0 and 1. The storage-order elements are split into contiguous chunks (whole
//! 32-bit words) over the active tiles; program `run` reads each tile's chunk into tile memory
//! at a host-exchange point, a worker doubles every f32 of it, and a second host-exchange
//! point writes the chunk into the output page. `echo` does the same without the worker (for
//! any dtype). `startup` and `initialize` are one sync each; `fault` makes tile 1 (or tile 0
//! on one tile) load from an address outside tile memory.

#![allow(dead_code)]

use std::collections::BTreeMap;

use ipu_isa::tables::{HostDirection, HostRow, HostTable};
use ipu_isa::{AsmOptions, assemble};
use ipu_package::{
    HostTensor, Manifest, Package, Program, RegisterWrite, Segment, TensorRole, TileImage,
    storage_elements,
};
use ipu_target::{Target, config};

/// Where the chunk sits in tile memory.
pub const BUF: u32 = 0x80000;
/// The host table of the input exchange point.
pub const IN_TABLE: u32 = 0x60000;
/// The host table of the output exchange point.
pub const OUT_TABLE: u32 = 0x60100;
/// Tile address of the code.
pub const CODE: u32 = 0x4C000;

/// The tile program. Defines: `COUNT` (32-bit words of this tile's chunk), `COUNT_M1`
/// (`COUNT - 1`, at least 0) and `FAULT_ADDR` (where program `fault` loads from).
pub const SOURCE: &str = r#"
# Startup: the initial sync of every active tile.
startup:
        sync
        halt

initialize:
        sync
        halt

run:
        setzi   $m1, IN_TABLE
        hostx   $m1
        setzi   $m4, COUNT
        brz     $m4, done
        setzi   $m2, worker
        setzi   $m3, BUF
        run     $m2, $m3
        waitw
done:
        setzi   $m1, OUT_TABLE
        hostx   $m1
        halt

echo:
        setzi   $m1, IN_TABLE
        hostx   $m1
        setzi   $m1, OUT_TABLE
        hostx   $m1
        halt

# Never halts: stopped by the call's cycle limit.
spin:
        bri     spin

fault:
        setzi   $m1, FAULT_ADDR
fault_load:
        ld32    $m2, $m1, 0
        sync
        halt

# Worker: $m0 = the chunk; doubles COUNT f32 in place.
worker:
        setzi   $m4, COUNT_M1
loop:
        ld32    $a0, $m0, 0
        f32add  $a0, $a0, $a0
        st32step $a0, $m0+=4
        brnzdec $m4, loop
        exit
"#;

/// The byte range `start..end` of the storage order that tile `t` of `tiles` handles: whole
/// 32-bit words.
pub fn chunk(bytes: usize, tiles: u32, t: u32) -> (usize, usize) {
    let words = bytes / 4;
    let per = words.div_ceil(tiles as usize) * 4;
    let start = (t as usize * per).min(bytes);
    (start, (start + per).min(bytes))
}

/// The faulting tile of the `fault` program.
pub fn fault_tile(tiles: u32) -> u32 {
    1.min(tiles - 1)
}

/// Assembles the tile program for one tile.
pub fn assemble_tile(count: usize, fault_addr: u32) -> ipu_isa::Object {
    let options = AsmOptions {
        defines: vec![
            ("COUNT".into(), count as i64),
            ("COUNT_M1".into(), count.saturating_sub(1) as i64),
            ("FAULT_ADDR".into(), fault_addr as i64),
            ("BUF".into(), BUF as i64),
            ("IN_TABLE".into(), IN_TABLE as i64),
            ("OUT_TABLE".into(), OUT_TABLE as i64),
        ],
        ..AsmOptions::default()
    };
    assemble(SOURCE, "double.s", &options).unwrap_or_else(|e| panic!("{e}"))
}

/// The doubling package for `target` on `tiles` tiles, f32 tensors of `shape` with `group`.
pub fn doubling_package(target: Target, tiles: u32, shape: &[usize], group: usize) -> Package {
    package_of(target, tiles, shape, group, "f32")
}

/// The package for `target` on `tiles` tiles, tensors of `dtype`, `shape` and `group`.
pub fn package_of(
    target: Target,
    tiles: u32,
    shape: &[usize],
    group: usize,
    dtype: &str,
) -> Package {
    let element_bytes = ipu_runtime::layout::element_bytes(dtype).unwrap();
    let bytes = (storage_elements(shape, group) * element_bytes) as u64;
    assert!(bytes.is_multiple_of(4));
    let mut images = vec![TileImage::default(); target.tiles as usize];
    let mut symbols = BTreeMap::new();
    for t in 0..tiles {
        let (start, end) = chunk(bytes as usize, tiles, t);
        let count = (end - start) / 4;
        let fault_addr = if t == fault_tile(tiles) { 0x10 } else { BUF };
        let object = assemble_tile(count, fault_addr);
        symbols = object.symbols.clone();
        let code = object.to_flat_image();
        assert_eq!(code.address, CODE);
        let row = |page: u16, direction| HostRow {
            page,
            direction,
            page_offset: start as u32,
            tile_addr: BUF,
            bytes: (count * 4) as u32,
        };
        let table = |page, direction| HostTable {
            rows: if count > 0 {
                vec![row(page, direction)]
            } else {
                vec![]
            },
        };
        images[t as usize].segments = vec![
            Segment {
                address: code.address,
                bytes: code.bytes,
            },
            Segment {
                address: IN_TABLE,
                bytes: table(0, HostDirection::ToDevice).to_bytes(),
            },
            Segment {
                address: OUT_TABLE,
                bytes: table(1, HostDirection::ToHost).to_bytes(),
            },
        ];
    }
    let program = |name: &str, phases| Program {
        name: name.into(),
        entry: symbols[name],
        phases,
    };
    let tensor = |name: &str, role, page| HostTensor {
        name: name.into(),
        role,
        dtype: dtype.into(),
        scale: 0,
        shape: shape.to_vec(),
        group,
        page,
        offset: 0,
        bytes,
    };
    let mut register_writes = Vec::new();
    for t in 0..tiles {
        for (register, value) in [
            (config::TILE_ACTIVE, 1),
            (config::EXCHANGE_ID, t),
            (config::HOST_WINDOW_BYTES, 2 * bytes as u32),
        ] {
            register_writes.push(RegisterWrite {
                tile: t,
                register,
                value,
            });
        }
    }
    let package = Package {
        manifest: Manifest {
            compiler_version: "test".into(),
            target: target.kind.name().into(),
            tile_count: target.tiles,
            tiles_used: tiles,
            model: "double".into(),
            programs: vec![
                program("startup", 1),
                program("initialize", 1),
                program("run", 2),
                program("echo", 2),
                program("fault", 1),
                program("spin", 1),
            ],
            host_pages: vec![bytes.next_multiple_of(8); 2],
            tensors: vec![
                tensor("x", TensorRole::Input, 0),
                tensor("y", TensorRole::Output, 1),
            ],
            register_writes,
            metadata: BTreeMap::new(),
            index_bounds: Vec::new(),
        },
        tiles: images.into(),
        constants: Vec::new(),
    };
    package.validate().expect("the test package is valid");
    package
}

/// The address of a label of the tile program.
pub fn symbol(name: &str) -> u32 {
    assemble_tile(1, BUF).symbols[name]
}

/// Little-endian bytes of f32 values.
pub fn f32_bytes(values: &[f32]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

/// f32 values from little-endian bytes.
pub fn f32_values(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

/// A fresh directory under the system temporary directory.
pub fn temp_dir(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("ipu-runtime-test-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}
