//! Helpers shared by the simulator's tests.
#![allow(dead_code)]

use ipu_isa::{AsmOptions, Object, assemble};
use ipu_sim::{Device, RunLimits, RunReport, SimError};
use ipu_target::Target;

/// Assembles `source` and loads it onto tiles `0..tiles` of a fresh device, its code decoded
/// once for all tiles as the runtime loads packages ([`Device::share_code`]); returns the
/// device and the object (for its symbols).
pub fn load(target: Target, tiles: u32, source: &str) -> (Device, Object) {
    load_shared(target, tiles, source, true)
}

/// [`load`], with the code decoded ahead and shared between tiles or (`shared` false) decoded
/// by each tile as it first runs it.
pub fn load_shared(target: Target, tiles: u32, source: &str, shared: bool) -> (Device, Object) {
    let object = assemble(source, "test.s", &AsmOptions::default())
        .unwrap_or_else(|e| panic!("test program does not assemble: {e}"));
    let mut d = Device::new(target, tiles);
    let ranges: Vec<(u32, u32)> = object
        .sections
        .iter()
        .map(|s| (s.address, s.bytes.len() as u32))
        .collect();
    for t in 0..tiles {
        for s in &object.sections {
            d.write(t, s.address, &s.bytes).expect("load");
        }
        if shared {
            d.share_code(t, &ranges).expect("share");
        }
    }
    (d, object)
}

/// Assembles `source` and loads it onto tiles `0..tiles` of a fresh device; returns the
/// device and the entry point (`main`, else the first section).
pub fn device_with(target: Target, tiles: u32, source: &str) -> (Device, u32) {
    let (d, object) = load(target, tiles, source);
    let entry = object
        .symbols
        .get("main")
        .copied()
        .unwrap_or(object.sections[0].address);
    (d, entry)
}

/// Assembles and runs `source` on `tiles` tiles of GC200.
pub fn run(tiles: u32, source: &str) -> (Device, Result<RunReport, SimError>) {
    run_on(Target::gc200(), tiles, source)
}

/// Assembles and runs `source` on `tiles` tiles of `target`.
pub fn run_on(target: Target, tiles: u32, source: &str) -> (Device, Result<RunReport, SimError>) {
    let (mut d, entry) = device_with(target, tiles, source);
    let r = d.run(
        entry,
        &RunLimits {
            max_cycles: 10_000_000,
            ..RunLimits::default()
        },
    );
    (d, r)
}

/// A program whose supervisor runs `worker_body` on one worker (with `$m0` = `state`), waits
/// and halts.
pub fn one_worker(worker_body: &str, state: u32) -> String {
    format!(
        "main:\n  setzi $m1, worker\n  li $m2, {state}\n  run $m1, $m2\n  waitw\n  halt\n  .align 8\nworker:\n{worker_body}\n  exit\n"
    )
}

pub fn word(d: &Device, tile: u32, addr: u32) -> u32 {
    u32::from_le_bytes(d.read(tile, addr, 4).unwrap().try_into().unwrap())
}

/// A xorshift generator: the tests' deterministic random values (tests add their own
/// samplers in `impl Rng` blocks).
pub struct Rng(pub u64);

impl Rng {
    /// The next 64 random bits.
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}
