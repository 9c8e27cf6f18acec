//! Bit-identical results at any thread count: counters, profile and memory.

mod common;

use common::*;
use ipu_isa::tables::{ExchangeRow, ExchangeTable};
use ipu_sim::bench::{AMP_KERNEL_FILE, AMP_KERNEL_SOURCE, WEIGHTS_ADDR, X_ADDR, inputs, y_addr};
use ipu_sim::{Device, RunLimits};
use ipu_target::Target;

const TILES: u32 = 12;
const ROWS: u32 = 37;

/// The AMP kernel on every tile, then an exchange that rotates each tile's first output row
/// to the next tile, then a sync.
fn simulate() -> (
    Vec<ipu_sim::TileCounters>,
    Vec<ipu_sim::ProfileRecord>,
    Vec<Vec<u8>>,
) {
    let options = ipu_isa::AsmOptions {
        defines: vec![
            ("ROWS".into(), ROWS as i64),
            ("Y".into(), y_addr(ROWS) as i64),
        ],
        ..Default::default()
    };
    // The kernel ends in `halt`; run it, then a second program with the exchange.
    let kernel = ipu_isa::assemble(AMP_KERNEL_SOURCE, AMP_KERNEL_FILE, &options).unwrap();
    let mut d = Device::new(Target::gc200(), TILES);
    for t in 0..TILES {
        for s in &kernel.sections {
            d.write(t, s.address, &s.bytes).unwrap();
        }
        let (w, x) = inputs(t, ROWS);
        let b = |v: Vec<half::f16>| {
            v.iter()
                .flat_map(|x| x.to_bits().to_le_bytes())
                .collect::<Vec<u8>>()
        };
        d.write(t, WEIGHTS_ADDR, &b(w)).unwrap();
        d.write(t, X_ADDR, &b(x)).unwrap();
    }
    d.run(kernel.symbols["main"], &RunLimits::default())
        .unwrap();
    let exch = ipu_isa::assemble(
        "main:\n li $m1, 0xA0000\n mark 7\n exch $m1\n sync\n halt\n",
        "x.s",
        &Default::default(),
    )
    .unwrap();
    for t in 0..TILES {
        let s = &exch.sections[0];
        d.write(t, 0x70000, &s.bytes).unwrap();
        let table = ExchangeTable {
            horizon_cycles: 200,
            rows: vec![ExchangeRow {
                src_addr: y_addr(ROWS),
                dst_addr: 0xB0000,
                bytes: 32,
                start_cycle: 0,
                dst_tile: ((t + 1) % TILES) as u16,
                dst_tile_count: 1,
                repeat: 1,
                src_stride: 0,
                dst_stride: 0,
            }],
        };
        d.write(t, 0xA0000, &table.to_bytes()).unwrap();
    }
    let _ = exch.symbols["main"];
    d.run(0x70000, &RunLimits::default()).unwrap();
    let mem = (0..TILES)
        .map(|t| {
            let mut v = d.read(t, y_addr(ROWS), 32 * ROWS).unwrap();
            v.extend(d.read(t, 0xB0000, 32).unwrap());
            v
        })
        .collect();
    (
        d.counters()[..TILES as usize].to_vec(),
        d.profile().to_vec(),
        mem,
    )
}

#[test]
fn one_and_two_threads_give_identical_results() {
    let pool = |n| {
        rayon::ThreadPoolBuilder::new()
            .num_threads(n)
            .build()
            .unwrap()
    };
    let a = pool(1).install(simulate);
    let b = pool(2).install(simulate);
    assert_eq!(a.0, b.0, "counters");
    assert_eq!(a.1, b.1, "profile");
    assert_eq!(a.2, b.2, "memory");
    // The exchange delivered tile t's first row to tile t + 1.
    assert_eq!(a.2[1][32 * ROWS as usize..], a.2[0][..32]);
    // Counters accumulate across runs and stay consistent.
    for c in &a.0 {
        assert_eq!(
            c.cycles,
            c.compute_cycles + c.exchange_cycles + c.sync_cycles
        );
        assert!(c.worker_instructions > 0 && c.supervisor_instructions > 0);
    }
}

#[test]
fn running_twice_gives_the_same_results() {
    assert_eq!(simulate(), simulate());
    let _ = word;
}
