//! The exchange engine's rules, host exchange and BSP sync accounting.

mod common;

use common::*;
use ipu_isa::tables::*;
use ipu_sim::{
    Device, ExchangeFault, Fault, FaultKind, HostExchangeFault, RowSide, RunLimits, SimError,
};
use ipu_target::{EXCHANGE_PHASE_OVERHEAD_CYCLES, Target};

const TABLE: u32 = 0x90000;
const PROGRAM: &str = "main:\n li $m1, 0x90000\n exch $m1\n halt\n";

fn row(src: u32, dst: u32, bytes: u32, start: u32, tile: u16, count: u16) -> ExchangeRow {
    ExchangeRow {
        src_addr: src,
        dst_addr: dst,
        bytes,
        start_cycle: start,
        dst_tile: tile,
        dst_tile_count: count,
        repeat: 1,
        src_stride: 0,
        dst_stride: 0,
    }
}

/// Runs one exchange phase with `tables[t]` on tile t; tile t's memory at 0x80000.. holds
/// bytes `t * 16 + i`.
fn exchange(tables: &[ExchangeTable]) -> (Device, Result<ipu_sim::RunReport, SimError>) {
    let n = tables.len() as u32;
    let (mut d, entry) = device_with(Target::gc200(), n, PROGRAM);
    for (t, table) in tables.iter().enumerate() {
        d.write(t as u32, TABLE, &table.to_bytes()).unwrap();
        let data: Vec<u8> = (0..256u32).map(|i| (t as u32 * 16 + i) as u8).collect();
        d.write(t as u32, 0x80000, &data).unwrap();
    }
    let r = d.run(entry, &RunLimits::default());
    (d, r)
}

fn table(horizon: u32, rows: Vec<ExchangeRow>) -> ExchangeTable {
    ExchangeTable {
        horizon_cycles: horizon,
        rows,
    }
}

/// The fault an exchange phase with `tables` (as [`exchange`] runs it) stops with.
#[track_caller]
fn exchange_fault(tables: &[ExchangeTable]) -> Fault {
    let (_, r) = exchange(tables);
    let err = r.expect_err("the exchange is rejected");
    err.fault().cloned().expect("a fault")
}

#[track_caller]
fn rejected(tables: &[ExchangeTable], tile: u32, want: ExchangeFault) {
    let f = exchange_fault(tables);
    assert_eq!(f.kind, FaultKind::Exchange(want), "{f}");
    assert_eq!(f.tile, tile, "{f}");
    assert!(f.instruction.starts_with("exch"), "{f}");
}

#[test]
fn a_valid_exchange_moves_the_bytes_in_the_scheduled_cycles() {
    let tables = vec![
        table(100, vec![row(0x80000, 0x88000, 64, 0, 1, 1)]),
        table(100, vec![row(0x80040, 0x88100, 32, 20, 2, 2)]),
        table(100, vec![]),
        table(100, vec![row(0x80000, 0x88200, 8, 40, 0, 1)]),
    ];
    let (d, r) = exchange(&tables);
    let r = r.unwrap();
    // li (2 slots) then the phase: overhead + horizon.
    assert_eq!(r.cycles, 12 + EXCHANGE_PHASE_OVERHEAD_CYCLES as u64 + 100);
    assert_eq!(
        r.exchange_cycles,
        EXCHANGE_PHASE_OVERHEAD_CYCLES as u64 + 100
    );
    assert_eq!(r.global_steps, 2);
    let src0: Vec<u8> = (0..64u32).map(|i| i as u8).collect();
    assert_eq!(d.read(1, 0x88000, 64).unwrap(), src0);
    let src1: Vec<u8> = (64..96u32).map(|i| (16 + i) as u8).collect();
    assert_eq!(d.read(2, 0x88100, 32).unwrap(), src1);
    assert_eq!(d.read(3, 0x88100, 32).unwrap(), src1);
    let src3: Vec<u8> = (0..8u32).map(|i| (48 + i) as u8).collect();
    assert_eq!(d.read(0, 0x88200, 8).unwrap(), src3);
    // Untouched elsewhere.
    assert_eq!(d.read(0, 0x88000, 4).unwrap(), vec![0; 4]);
    for c in &d.counters()[..4] {
        assert_eq!(c.exchange_cycles, 200);
        assert_eq!(
            c.cycles,
            c.compute_cycles + c.exchange_cycles + c.sync_cycles
        );
    }
}

#[test]
fn data_moves_as_if_all_reads_precede_all_writes() {
    // Tiles 0 and 1 swap words: each reads its 0x80000 and writes the other's 0x80100.
    let tables = vec![
        table(64, vec![row(0x80000, 0x80100, 4, 0, 1, 1)]),
        table(64, vec![row(0x80000, 0x80100, 4, 0, 0, 1)]),
    ];
    let (d, r) = exchange(&tables);
    r.unwrap();
    assert_eq!(d.read(0, 0x80100, 4).unwrap(), vec![16, 17, 18, 19]);
    assert_eq!(d.read(1, 0x80100, 4).unwrap(), vec![0, 1, 2, 3]);
}

#[test]
fn a_tile_sending_two_rows_at_once_is_rejected() {
    let t = vec![
        table(
            100,
            vec![
                row(0x80000, 0x88000, 64, 0, 1, 1),
                row(0x80040, 0x88040, 64, 10, 1, 1),
            ],
        ),
        table(100, vec![]),
    ];
    rejected(
        &t,
        0,
        ExchangeFault::SendsOverlap {
            first: (0, 0, 16),
            second: (1, 10, 26),
        },
    );
}

#[test]
fn a_tile_receiving_two_streams_at_once_is_rejected() {
    let t = vec![
        table(100, vec![row(0x80000, 0x88000, 16, 0, 2, 1)]),
        table(100, vec![row(0x80000, 0x88100, 16, 2, 2, 1)]),
        table(100, vec![]),
    ];
    let f = exchange_fault(&t);
    assert_eq!(f.tile, 2);
    assert!(
        matches!(
            f.kind,
            FaultKind::Exchange(ExchangeFault::TwoStreams { tile: 2, .. })
        ),
        "{f}"
    );
    // Back to back is fine: 16 bytes = 4 cycles.
    let t = vec![
        table(100, vec![row(0x80000, 0x88000, 16, 0, 2, 1)]),
        table(100, vec![row(0x80000, 0x88100, 16, 4, 2, 1)]),
        table(100, vec![]),
    ];
    exchange(&t).1.unwrap();
}

#[test]
fn a_tile_pair_takes_two_streams_at_once_when_both_reach_both_tiles() {
    // Tiles 2 and 3 each multicast 16 bytes to the pair {0, 1} in the same cycles: the pair's
    // two buses carry one each and both tiles hear both.
    let both = vec![
        table(100, vec![]),
        table(100, vec![]),
        table(100, vec![row(0x80000, 0x88000, 16, 0, 0, 2)]),
        table(100, vec![row(0x80000, 0x88100, 16, 0, 0, 2)]),
    ];
    let (d, r) = exchange(&both);
    r.unwrap();
    for t in 0..2 {
        assert_eq!(d.read(t, 0x88000, 4).unwrap(), vec![32, 33, 34, 35]);
        assert_eq!(d.read(t, 0x88100, 4).unwrap(), vec![48, 49, 50, 51]);
    }
    // One of the two reaching tile 0 only: tile 0 would hear two streams, one not shared.
    let mut one = both.clone();
    one[3] = table(100, vec![row(0x80000, 0x88100, 16, 2, 0, 1)]);
    let f = exchange_fault(&one);
    assert!(
        matches!(
            f.kind,
            FaultKind::Exchange(ExchangeFault::TwoStreams { tile: 0, .. })
        ),
        "{f}"
    );
    assert!(f.to_string().contains("pair tile 1"), "{f}");
    // A multicast to tiles 1 and 2 reaches neither pair whole: with a second one at once,
    // tile 1 hears two streams its pair tile 0 does not.
    let straddling = vec![
        table(100, vec![row(0x80000, 0x88000, 16, 0, 1, 2)]),
        table(100, vec![]),
        table(100, vec![]),
        table(100, vec![row(0x80000, 0x88100, 16, 0, 1, 2)]),
    ];
    let f = exchange_fault(&straddling);
    assert!(
        matches!(
            f.kind,
            FaultKind::Exchange(ExchangeFault::TwoStreams { tile: 1, .. })
        ),
        "{f}"
    );
    // A third stream at once, shared or not, is more than the pair's two buses carry.
    let mut three = both.clone();
    three.push(table(100, vec![row(0x80000, 0x88200, 16, 1, 0, 2)]));
    let f = exchange_fault(&three);
    assert!(
        matches!(
            f.kind,
            FaultKind::Exchange(ExchangeFault::ThreeStreams { tile: 0, .. })
        ),
        "{f}"
    );
    assert!(f.to_string().contains("three streams"), "{f}");
}

#[test]
fn a_transfer_ending_after_the_horizon_is_rejected() {
    // 64 bytes = 16 cycles, latency 8: ends at 24 > 20.
    let t = vec![
        table(20, vec![row(0x80000, 0x88000, 64, 0, 1, 1)]),
        table(20, vec![]),
    ];
    rejected(
        &t,
        0,
        ExchangeFault::PastHorizon {
            row: 0,
            tile: 1,
            end_cycle: 24,
            horizon: 20,
        },
    );
    let t = vec![
        table(24, vec![row(0x80000, 0x88000, 64, 0, 1, 1)]),
        table(24, vec![]),
    ];
    exchange(&t).1.unwrap();
}

#[test]
fn tables_disagreeing_on_the_horizon_are_rejected() {
    rejected(
        &[table(100, vec![]), table(90, vec![])],
        1,
        ExchangeFault::HorizonMismatch {
            horizon: 90,
            expected: 100,
        },
    );
}

#[test]
fn bad_rows_are_rejected() {
    use ExchangeFault as E;
    let bad = |r: ExchangeRow, want: ExchangeFault| {
        rejected(&[table(1000, vec![r]), table(1000, vec![])], 0, want)
    };
    let (source, destination) = (RowSide::Source, RowSide::Destination);
    let misaligned = |side| E::Misaligned { row: 0, side };
    bad(row(0x80002, 0x88000, 4, 0, 1, 1), misaligned(source));
    bad(row(0x80000, 0x88001, 4, 0, 1, 1), misaligned(destination));
    bad(
        row(0x80000, 0x88000, 6, 0, 1, 1),
        E::RowBytes { row: 0, bytes: 6 },
    );
    bad(
        row(0x80000, 0x88000, 0, 0, 1, 1),
        E::RowBytes { row: 0, bytes: 0 },
    );
    let out_of_range = |side| E::OutOfRange {
        row: 0,
        side,
        bytes: 8,
    };
    bad(row(0xE7FFC, 0x88000, 8, 0, 1, 1), out_of_range(source));
    bad(row(0x80000, 0x40000, 8, 0, 1, 1), out_of_range(destination));
    let inactive = |first, end| E::InactiveDestinations {
        row: 0,
        first,
        end,
        active: 2,
    };
    bad(row(0x80000, 0x88000, 8, 0, 2, 1), inactive(2, 3));
    bad(row(0x80000, 0x88000, 8, 0, 1, 0), inactive(1, 1));
    bad(row(0x80000, 0x88000, 8, 0, 1472, 1), inactive(1472, 1473));
}

#[test]
fn overlapping_destinations_and_writes_into_memory_the_phase_reads_are_rejected() {
    use RowSide::{Destination, Source};
    let cases = [
        // Two senders write overlapping bytes on tile 2.
        (
            vec![
                table(200, vec![row(0x80000, 0x88000, 16, 0, 2, 1)]),
                table(200, vec![row(0x80000, 0x88008, 16, 50, 2, 1)]),
                table(200, vec![]),
            ],
            2,
            (1, 0, Destination),
            (0, 0, Destination),
        ),
        // Tile 1 sends from 0x80000 while tile 0 writes into 0x80008 on tile 1.
        (
            vec![
                table(200, vec![row(0x80000, 0x80008, 16, 0, 1, 1)]),
                table(200, vec![row(0x80000, 0x88000, 16, 0, 0, 1)]),
            ],
            1,
            (0, 0, Destination),
            (1, 0, Source),
        ),
    ];
    for (tables, tile, range, overlaps) in cases {
        let want = ExchangeFault::MemoryHazard {
            tile,
            range,
            overlaps,
        };
        rejected(&tables, tile, want);
    }
}

#[test]
fn host_exchange_moves_pages_both_ways() {
    let src = "main:\n li $m1, 0x90000\n hostx $m1\n halt\n";
    let (mut d, entry) = device_with(Target::gc200(), 2, src);
    for t in 0..2u32 {
        let h = HostTable {
            rows: vec![
                HostRow {
                    page: 0,
                    direction: HostDirection::ToDevice,
                    page_offset: 16 * t,
                    tile_addr: 0x80000,
                    bytes: 16,
                },
                HostRow {
                    page: 1,
                    direction: HostDirection::ToHost,
                    page_offset: 8 * t,
                    tile_addr: 0x81000,
                    bytes: 8,
                },
            ],
        };
        d.write(t, TABLE, &h.to_bytes()).unwrap();
        d.write(t, 0x81000, &[t as u8 + 100; 8]).unwrap();
    }
    d.attach_host_pages(vec![(0..32).collect(), vec![0; 16]]);
    let r = d.run(entry, &RunLimits::default()).unwrap();
    assert_eq!(
        d.read(1, 0x80000, 16).unwrap(),
        (16..32).collect::<Vec<u8>>()
    );
    assert_eq!(d.host_pages()[1], [vec![100u8; 8], vec![101u8; 8]].concat());
    // 1000 + (2 * 24 bytes) / 16.
    let cost = ipu_target::HOST_EXCHANGE_OVERHEAD_CYCLES as u64 + 3;
    assert_eq!(r.exchange_cycles, cost);
    assert_eq!(d.counters()[0].host_exchange_cycles, cost);
    // A point moving bytes both ways counts in neither direction.
    assert_eq!((r.host_to_device_cycles, r.device_to_host_cycles), (0, 0));
}

#[test]
fn host_exchange_cycles_are_split_by_direction() {
    // One point moves 64 bytes in, the next 32 bytes out.
    let src = "main:\n li $m1, 0x90000\n hostx $m1\n li $m1, 0x90100\n hostx $m1\n halt\n";
    let (mut d, entry) = device_with(Target::gc200(), 1, src);
    let host_row = |direction, page, tile_addr, bytes| HostTable {
        rows: vec![HostRow {
            page,
            direction,
            page_offset: 0,
            tile_addr,
            bytes,
        }],
    };
    let inputs = host_row(HostDirection::ToDevice, 0, 0x80000, 64);
    let outputs = host_row(HostDirection::ToHost, 1, 0x81000, 32);
    d.write(0, TABLE, &inputs.to_bytes()).unwrap();
    d.write(0, TABLE + 0x100, &outputs.to_bytes()).unwrap();
    d.attach_host_pages(vec![vec![7; 64], vec![0; 32]]);
    let r = d.run(entry, &RunLimits::default()).unwrap();
    let overhead = ipu_target::HOST_EXCHANGE_OVERHEAD_CYCLES as u64;
    let per_cycle = ipu_target::HOST_EXCHANGE_BYTES_PER_CYCLE as u64;
    let (cost_in, cost_out) = (overhead + 64 / per_cycle, overhead + 32 / per_cycle);
    assert_eq!(r.host_to_device_cycles, cost_in);
    assert_eq!(r.device_to_host_cycles, cost_out);
    assert_eq!(r.host_exchange_cycles, cost_in + cost_out);
    let c = d.counters()[0];
    assert_eq!(
        (c.host_to_device_cycles, c.device_to_host_cycles),
        (cost_in, cost_out)
    );
    // A second run adds the same again to the counters; the report covers its own run.
    let r2 = d.run(entry, &RunLimits::default()).unwrap();
    assert_eq!(r2.host_exchange_cycles, cost_in + cost_out);
    assert_eq!(d.counters()[0].host_to_device_cycles, 2 * cost_in);
}

#[test]
fn host_exchange_checks_pages_and_memory() {
    let src = "main:\n li $m1, 0x90000\n hostx $m1\n halt\n";
    let case = |r: HostRow, pages: Vec<Vec<u8>>, want: HostExchangeFault| {
        let (mut d, entry) = device_with(Target::gc200(), 1, src);
        d.write(0, TABLE, &HostTable { rows: vec![r] }.to_bytes())
            .unwrap();
        d.attach_host_pages(pages);
        let e = d.run(entry, &RunLimits::default()).expect_err("rejected");
        let f = e.fault().unwrap();
        assert_eq!(f.kind, FaultKind::HostExchange(want), "{f}");
    };
    use HostExchangeFault as H;
    let r = HostRow {
        page: 0,
        direction: HostDirection::ToDevice,
        page_offset: 0,
        tile_addr: 0x80000,
        bytes: 16,
    };
    case(
        HostRow { page: 3, ..r },
        vec![vec![0; 16]],
        H::NoPage { row: 0, page: 3 },
    );
    case(
        r,
        vec![vec![0; 8]],
        H::BeyondPage {
            row: 0,
            page: 0,
            start: 0,
            end: 16,
            page_bytes: 8,
        },
    );
    let at = |tile_addr| HostRow { tile_addr, ..r };
    let unaligned = H::Unaligned { row: 0, bytes: 16 };
    case(at(0x80002), vec![vec![0; 16]], unaligned);
    let out_of_range = H::OutOfRange { row: 0, bytes: 16 };
    case(at(0xE7FF8), vec![vec![0; 16]], out_of_range);
}

#[test]
fn sync_advances_every_tile_to_the_slowest_plus_the_sync_cost() {
    // Tile t spins 10 * t slots before the sync.
    let src = "main:\n get $m1, tileid\n mul $m1, $m1, 10\n rpt $m1, 1\n nop\n sync\n halt\n";
    let (d, r) = run(3, src);
    let r = r.unwrap();
    let c = d.counters();
    // get, mul, rpt = 3 slots; tile 2 spins 20 more.
    assert_eq!(c[2].compute_cycles, 6 * 23);
    assert_eq!(c[0].compute_cycles, 6 * 3);
    for (t, ct) in c.iter().enumerate().take(3) {
        assert_eq!(ct.cycles, 6 * 23 + 90, "tile {t}");
        assert_eq!(ct.sync_cycles, 6 * 23 + 90 - ct.compute_cycles);
    }
    assert_eq!(r.cycles, 6 * 23 + 90);
    // The report shows the first tile with the most cycles: tile 0, which waited longest.
    assert_eq!((r.critical_tile, r.sync_cycles), (0, 6 * 20 + 90));
    assert_eq!(d.profile().len(), 6);
}

#[test]
fn random_permutation_exchanges_move_every_byte() {
    let mut rng = Rng(0x0123_4567_89AB_CDEF);
    let mut next = move || rng.next();
    for _ in 0..20 {
        let n = 2 + (next() % 15) as usize;
        // A random permutation: tile t sends to perm[t].
        let mut perm: Vec<usize> = (0..n).collect();
        for i in (1..n).rev() {
            perm.swap(i, (next() % (i as u64 + 1)) as usize);
        }
        let bytes: Vec<u32> = (0..n).map(|_| 4 * (1 + (next() % 64) as u32)).collect();
        let starts: Vec<u32> = (0..n).map(|_| (next() % 50) as u32).collect();
        // The cycle at which tile t's transfer ends on its destination.
        let ends: Vec<u32> = (0..n)
            .map(|t| {
                starts[t]
                    + Target::gc200().exchange_latency_cycles(t as u32, perm[t] as u32)
                    + bytes[t] / 4
            })
            .collect();
        let horizon = *ends.iter().max().unwrap();
        let tables: Vec<ExchangeTable> = (0..n)
            .map(|t| {
                table(
                    horizon,
                    vec![row(
                        0x80000,
                        0x90000,
                        bytes[t],
                        starts[t],
                        perm[t] as u16,
                        1,
                    )],
                )
            })
            .collect();
        let (d, r) = exchange(&tables);
        let r = r.unwrap();
        assert_eq!(
            r.exchange_cycles,
            EXCHANGE_PHASE_OVERHEAD_CYCLES as u64 + horizon as u64
        );
        for t in 0..n {
            let want: Vec<u8> = (0..bytes[t]).map(|i| (t as u32 * 16 + i) as u8).collect();
            assert_eq!(d.read(perm[t] as u32, 0x90000, bytes[t]).unwrap(), want);
        }
        // One cycle less of horizon is rejected.
        let short: Vec<ExchangeTable> = tables
            .iter()
            .map(|x| ExchangeTable {
                horizon_cycles: horizon - 1,
                rows: x.rows.clone(),
            })
            .collect();
        // The first tile whose transfer ends at the old horizon is refused.
        let late = ends.iter().position(|&e| e == horizon).unwrap();
        rejected(
            &short,
            late as u32,
            ExchangeFault::PastHorizon {
                row: 0,
                tile: perm[late] as u32,
                end_cycle: horizon as u64,
                horizon: horizon - 1,
            },
        );
    }
}

#[test]
fn a_repeated_row_is_its_sends_back_to_back() {
    // Tile 0 scatters four 8-byte pieces of its memory to tile 1 with a destination stride of
    // 32 bytes: one row with repeat 4.
    let scatter = ExchangeRow {
        repeat: 4,
        src_stride: 8,
        dst_stride: 32,
        ..row(0x80000, 0x88000, 8, 0, 1, 1)
    };
    let tables = vec![table(60, vec![scatter]), table(60, vec![])];
    let (d, r) = exchange(&tables);
    r.unwrap();
    for k in 0..4u32 {
        let want: Vec<u8> = (0..8u32).map(|i| (k * 8 + i) as u8).collect();
        assert_eq!(d.read(1, 0x88000 + 32 * k, 8).unwrap(), want, "piece {k}");
    }
    // The four sends take 4 x 2 cycles from cycle 0: a second row at cycle 4 overlaps them.
    let clash = vec![
        table(60, vec![scatter, row(0x80040, 0x89000, 8, 4, 1, 1)]),
        table(60, vec![]),
    ];
    let f = exchange_fault(&clash);
    assert!(
        matches!(
            f.kind,
            FaultKind::Exchange(ExchangeFault::SendsOverlap { .. })
        ),
        "{f}"
    );
    // The last send ends at 6 + 2 + latency: a horizon of 10 is too short.
    let f = exchange_fault(&[table(10, vec![scatter]), table(10, vec![])]);
    assert!(
        matches!(
            f.kind,
            FaultKind::Exchange(ExchangeFault::PastHorizon { horizon: 10, .. })
        ),
        "{f}"
    );
}
