//! Cycle accounting (barrel slots, rpt, bundles, run/waitw, ampw), memory instructions,
//! control flow and code-cache invalidation.

mod common;

use common::*;
use ipu_isa::{Instr, MReg, encode};
use ipu_sim::{FaultKind, RunLimits, SimError};
use ipu_target::Target;

#[test]
fn a_worker_slot_costs_six_cycles_and_waitw_waits_for_the_slowest() {
    // Supervisor: setzi, setzi, run (worker A: a 10-times repeated nop + exit), run (worker B:
    // 3 nops + exit), waitw, halt. Worker A starts after the two setzi, at 12.
    let src = "main:\n setzi $m1, a\n setzi $m2, b\n run $m1, $m3\n run $m2, $m3\n waitw\n halt\n .align 8\na:\n rpt 10, 1\n nop\n exit\nb:\n nop\n nop\n nop\n exit\n";
    let (d, r) = run(1, src);
    let r = r.unwrap();
    // a: rpt + 10 nops + exit = 12 slots = 72 cycles from 12 -> 84.
    assert_eq!(r.cycles, 84);
    let c = d.counters()[0];
    assert_eq!(c.worker_slots, 12 + 4);
    assert_eq!(c.worker_instructions, 12 + 4);
    assert_eq!(c.supervisor_instructions, 6);
    assert_eq!(c.worker_busy_cycles, 72 + 24);
    assert_eq!(c.worker_launches, 2);
}

#[test]
fn a_seventh_worker_waits_for_a_free_context() {
    let mut src = String::from("main:\n setzi $m1, w\n");
    for _ in 0..7 {
        src += " run $m1, $m2\n";
    }
    src += " waitw\n halt\n .align 8\nw:\n rpt 99, 1\n nop\n exit\n";
    // Each worker: 101 slots = 606 cycles. Worker k (k < 6) starts at 6 + 6k; the seventh
    // waits for worker 0 to finish at 6 + 606 = 612 and ends at 1218.
    let (_, r) = run(1, &src);
    assert_eq!(r.unwrap().cycles, 612 + 606);
}

#[test]
fn runall_starts_six_workers_at_once_with_one_state() {
    // Each worker stores its context id at state + 4 * id (state = 0x80000), after a wait of
    // 10 * id slots, so the last ends 10 * 5 + 5 slots after the start. `runall` first waits
    // for a worker still running from `run`.
    let src = "main:\n setzi $m1, w\n setzi $m3, l\n li $m2, 0x80000\n run $m3, $m2\n runall $m1, $m2\n waitw\n halt\n .align 8\nw:\n get $m4, contextid\n mul $m5, $m4, 10\n add $m5, $m5, 1\n rpt $m5, 1\n nop\n shl $m6, $m4, 2\n add $m6, $m6, $m0\n st32 $m4, $m6, 0\n exit\nl:\n rpt 30, 1\n nop\n exit\n";
    let (d, r) = run(1, src);
    let r = r.unwrap();
    let words = d.read(0, 0x80000, 24).unwrap();
    let ids: Vec<u32> = words
        .chunks(4)
        .map(|w| u32::from_le_bytes(w.try_into().unwrap()))
        .collect();
    assert_eq!(ids, [0, 1, 2, 3, 4, 5]);
    let c = d.counters()[0];
    assert_eq!(c.worker_launches, 7);
    // setzi, setzi, li (2 slots): `run` at 24; the long worker (32 slots) ends at 24 + 192;
    // `runall` starts all six there; worker 5: get, mul, add, rpt + 51 nops, shl, add, st32,
    // exit = 59 slots.
    assert_eq!(r.cycles, 24 + 192 + 59 * 6);
}

#[test]
fn a_worker_context_keeps_its_registers_from_one_run_to_the_next() {
    // The first `runall` sets $m7 = 100 + id and $a3 = id in every context; the second, at
    // another entry with another state, stores both at state + 8 * id: each context finds
    // its own values ($m0 is the new state).
    let src = "main:\n setzi $m1, w1\n setzi $m3, w2\n li $m2, 0x80000\n runall $m1, $m2\n li $m2, 0x80100\n runall $m3, $m2\n waitw\n halt\n .align 8\nw1:\n get $m4, contextid\n add $m7, $m4, 100\n mov $a3, $m4\n exit\nw2:\n get $m4, contextid\n shl $m4, $m4, 3\n add $m4, $m4, $m0\n st32 $m7, $m4, 0\n st32 $a3, $m4, 4\n exit\n";
    let (d, r) = run(1, src);
    r.unwrap();
    let words: Vec<u32> = d
        .read(0, 0x80100, 48)
        .unwrap()
        .chunks(4)
        .map(|w| u32::from_le_bytes(w.try_into().unwrap()))
        .collect();
    let want: Vec<u32> = (0..6).flat_map(|id| [100 + id, id]).collect();
    assert_eq!(words, want);
}

#[test]
fn bundles_and_transcendentals() {
    let src = "main:\n setzi $m1, w\n li $m2, 0x80000\n run $m1, $m2\n waitw\n halt\n .align 8\nw:\n { ld32 $m3, $m0, 0 ; f32add $a0, $a1, $a2 }\n f32exp $a3, $a3\n { nop ; f16v4exp $a4:5, $a4:5 }\n exit\n";
    let (d, r) = run(1, src);
    r.unwrap();
    let c = d.counters()[0];
    // Slots: bundle 1, exp 2, the nop the assembler inserts to align the second bundle 1,
    // bundle with exp 2, exit 1. Instructions: 2 + 1 + 1 + 2 + 1.
    assert_eq!(c.worker_slots, 7);
    assert_eq!(c.worker_instructions, 7);
    assert_eq!(c.worker_busy_cycles, 42);
}

#[test]
fn ampw_costs_a_slot_plus_the_weight_bytes_at_16_per_cycle() {
    let (_, r) = run(
        1,
        "main:\n ampcfg f16f16\n li $m1, 0x80000\n ampw $m1\n halt\n",
    );
    // ampcfg 6, li 12, ampw 6 + 512/16.
    assert_eq!(r.unwrap().cycles, 6 + 12 + 6 + 32);
    let (_, r) = run(
        1,
        "main:\n ampcfg f32f32\n li $m1, 0x80000\n ampw $m1\n halt\n",
    );
    assert_eq!(r.unwrap().cycles, 6 + 12 + 6 + 16);
}

#[test]
fn pointers_advance_and_data_lands() {
    let body = "
 li $m1, 0x80000
 li $m2, 0x80100
 li $m6, 0x80300
 ld2x64pace $a2:3, $a4:5, $m1+=8, $m2+=8
 ldst64pace $a6:7, $a2:3, $m1+=8, $m6+=8
 ld2xst64pace $a8:9, $a10:11, $a4:5, $m1+=8, $m2+=8, $m6+=8
 li $m7, 0x80400
 st32 $m1, $m7, 0
 st32 $m2, $m7, 4
 st32 $m6, $m7, 8
 st64 $a6:7, $m7, 16
 st64 $a8:9, $m7, 24
 st64 $a10:11, $m7, 32
 ldz8 $m3, $m1, 1
 ldz16 $m4, $m1, 2
 st32 $m3, $m7, 40
 st32 $m4, $m7, 44
 ld128 $a12:15, $m1, -24
 st64 $a12:13, $m7, 48
 st64 $a14:15, $m7, 56";
    let src = one_worker(body, 0);
    let (mut d, entry) = device_with(ipu_target::Target::gc200(), 1, &src);
    let a: Vec<u8> = (0..=255u8).collect();
    let b: Vec<u8> = (0..=255u8).map(|x| x ^ 0xFF).collect();
    d.write(0, 0x80000, &a).unwrap();
    d.write(0, 0x80100, &b).unwrap();
    d.run(entry, &ipu_sim::RunLimits::default()).unwrap();
    let w = |x| word(&d, 0, x);
    assert_eq!(
        (w(0x80400), w(0x80404), w(0x80408)),
        (0x80018, 0x80110, 0x80310)
    );
    let q = |x: &Vec<u8>, at: usize| u32::from_le_bytes(x[at..at + 4].try_into().unwrap());
    // ldst64pace loaded a[8..16] and stored $a2:3 (= a[0..8]) at 0x80300.
    assert_eq!((w(0x80410), w(0x80414)), (q(&a, 8), q(&a, 12)));
    assert_eq!((w(0x80300), w(0x80304)), (q(&a, 0), q(&a, 4)));
    // ld2xst64pace: a[16..24], b[8..16]; stored $a4:5 (= b[0..8]) at 0x80308.
    assert_eq!((w(0x80418), w(0x8041C)), (q(&a, 16), q(&a, 20)));
    assert_eq!((w(0x80420), w(0x80424)), (q(&b, 8), q(&b, 12)));
    assert_eq!((w(0x80308), w(0x8030C)), (q(&b, 0), q(&b, 4)));
    // Zero-extending sub-word loads at 0x80018 + 1 / + 2.
    assert_eq!((w(0x80428), w(0x8042C)), (0x19, 0x1B1A));
    // ld128 of a[0..16].
    assert_eq!((w(0x80430), w(0x8043C)), (q(&a, 0), q(&a, 12)));
}

#[test]
fn branches_calls_and_loops() {
    let body = "
 setzi $m1, 5
 setzi $m2, 0
loop:
 add $m2, $m2, 3
 brnzdec $m1, loop
 call $m9, sub
 li $m7, 0x80000
 st32 $m2, $m7, 0
 st32 $m3, $m7, 4
 brz $m1, skip
 setzi $m4, 99
skip:
 brnz $m4, bad
 st32 $m1, $m7, 8
 exit
bad:
 st32 $m7, $m7, 8
 exit
sub:
 setzi $m3, 77
 br $m9";
    let (d, r) = run(1, &one_worker(body, 0));
    r.unwrap();
    // The loop body runs 6 times (brnzdec decrements 5 -> 0 then falls through).
    assert_eq!(word(&d, 0, 0x80000), 18);
    assert_eq!(word(&d, 0, 0x80004), 77);
    assert_eq!(word(&d, 0, 0x80008), 0);
}

#[test]
fn stores_into_code_invalidate_the_decoded_slot() {
    let new = encode(&Instr::Setzi { d: MReg(6), imm: 2 }).unwrap();
    let src = format!(
        "main:\n li $m2, 0x80000\n call $m10, f\n st32 $m6, $m2, 0\n setzi $m3, f\n li $m4, {new}\n st32 $m4, $m3, 0\n call $m10, f\n st32 $m6, $m2, 4\n halt\nf:\n setzi $m6, 1\n br $m10\n"
    );
    let (d, r) = run(1, &src);
    r.unwrap();
    assert_eq!((word(&d, 0, 0x80000), word(&d, 0, 0x80004)), (1, 2));
}

#[test]
fn a_tile_that_changes_shared_code_changes_only_its_own() {
    // Both tiles decode `f` and the worker from one shared page; tile 1 patches `f` and its
    // worker patches its own `rpt` body, tile 0 stores elsewhere. Shared or not, the results and every counter are the same.
    let new = encode(&Instr::Setzi { d: MReg(6), imm: 2 }).unwrap();
    let src = format!(
        "main:\n li $m2, 0x80000\n get $m5, tileid\n brz $m5, go\n setzi $m3, f\n li $m4, {new}\n st32 $m4, $m3, 0\ngo:\n call $m10, f\n st32 $m6, $m2, 0\n setzi $m1, w\n run $m1, $m2\n waitw\n halt\nf:\n setzi $m6, 1\n br $m10\n .align 8\nw:\n get $m5, tileid\n li $m3, 0x80010\n brz $m5, body\n setzi $m3, patch\nbody:\n li $m4, {new}\n setzi $m7, 0\n rpt 3, 3\n st32 $m4, $m3, 0\npatch:\n setzi $m6, 1\n add $m7, $m7, $m6\n st32 $m7, $m0, 4\n exit\n"
    );
    let run = |shared: bool| {
        let (mut d, object) = load_shared(ipu_target::Target::gc200(), 2, &src, shared);
        let entry = object.symbols["main"];
        let r = d
            .run(
                entry,
                &ipu_sim::RunLimits {
                    max_cycles: 1_000_000,
                    ..ipu_sim::RunLimits::default()
                },
            )
            .unwrap();
        let words: Vec<(u32, u32)> = (0..2)
            .map(|t| (word(&d, t, 0x80000), word(&d, t, 0x80004)))
            .collect();
        (
            r.cycles,
            words,
            d.counters().to_vec(),
            d.shared_code_pages(),
        )
    };
    let (cycles, words, counters, pages) = run(true);
    assert!(pages > 0, "nothing shared");
    assert_eq!(words, [(1, 3), (2, 6)]);
    let (cycles_lazy, words_lazy, counters_lazy, _) = run(false);
    assert_eq!(
        (cycles, words, counters),
        (cycles_lazy, words_lazy, counters_lazy)
    );
}

#[test]
fn get_reads_tile_context_and_cycles() {
    let body = " get $m1, tileid\n get $m2, contextid\n get $m3, cycles\n li $m7, 0x80000\n st32 $m1, $m7, 0\n st32 $m2, $m7, 4\n st32 $m3, $m7, 8";
    let (d, r) = run(3, &one_worker(body, 0));
    r.unwrap();
    assert_eq!(word(&d, 2, 0x80000), 2);
    assert_eq!(word(&d, 2, 0x80004), 0);
    // The worker starts at 18 (setzi, li = 3 supervisor slots); its third slot issues at 36.
    assert_eq!(word(&d, 2, 0x80008), 18 + 18);
}

#[test]
fn marks_are_recorded_with_their_cycle() {
    let (d, r) = run(2, "main:\n nop\n mark 5\n sync\n mark 6\n halt\n");
    r.unwrap();
    let m: Vec<_> = d.marks().iter().map(|m| (m.tile, m.cycle, m.id)).collect();
    assert_eq!(
        m,
        vec![(0, 6, 5), (1, 6, 5), (0, 12 + 90, 6), (1, 12 + 90, 6)]
    );
}

#[test]
fn stores_into_an_rpt_body_take_effect_in_the_same_loop() {
    let new = encode(&Instr::Setzi { d: MReg(6), imm: 2 }).unwrap();
    let body = format!(
        " setzi $m3, patch\n li $m4, {new}\n setzi $m7, 0\n rpt 3, 3\n st32 $m4, $m3, 0\npatch:\n setzi $m6, 1\n add $m7, $m7, $m6\n li $m1, 0x80000\n st32 $m7, $m1, 0"
    );
    let (d, r) = run(1, &one_worker(&body, 0));
    r.unwrap();
    // The store precedes the patched instruction in every iteration: 2 + 2 + 2.
    assert_eq!(word(&d, 0, 0x80000), 6);
}

#[test]
fn profile_records_are_sampled_at_the_chosen_interval() {
    let (mut d, entry) = device_with(
        ipu_target::Target::gc200(),
        2,
        "main:\n sync\n sync\n sync\n sync\n halt\n",
    );
    d.set_profile_interval(2);
    let r = d.run(entry, &ipu_sim::RunLimits::default()).unwrap();
    assert_eq!(r.global_steps, 5);
    let steps: Vec<(u32, u32)> = d.profile().iter().map(|p| (p.step, p.tile)).collect();
    assert_eq!(steps, vec![(0, 0), (0, 1), (2, 0), (2, 1), (4, 0), (4, 1)]);
    assert_eq!(d.profile()[5].kind, ipu_sim::GlobalKind::Halt);
    d.clear_profile();
    assert!(d.profile().is_empty());
}

/// A worker issuing `n` `ld2xst64pace` (each followed by a `nop`) from pointers `p` (in an `rpt` when `rpt`), under a
/// cycle limit of `limit`; returns the run's cycles (or the fault's kind) and the counters.
fn paced_run(
    p: [u32; 3],
    n: u32,
    rpt: bool,
    limit: u64,
) -> (Result<u64, FaultKind>, ipu_sim::TileCounters) {
    // Two slots per iteration, so that a stall can land inside one.
    let paced = " ld2xst64pace $a0:1, $a2:3, $a4:5, $m1+=8, $m2+=8, $m3+=8\n nop\n";
    let body = if rpt {
        format!(" rpt {n}, 2\n{paced}")
    } else {
        // A `nop` in the `rpt`'s place: the same slots at the same times.
        format!(" nop\n{}", paced.repeat(n as usize))
    };
    let src = one_worker(
        &format!(
            " li $m1, {}\n li $m2, {}\n li $m3, {}\n{body}",
            p[0], p[1], p[2]
        ),
        0,
    );
    let (mut d, entry) = device_with(Target::gc200(), 1, &src);
    let r = d.run(
        entry,
        &RunLimits {
            max_cycles: limit,
            ..RunLimits::default()
        },
    );
    let r = r.map(|r| r.cycles).map_err(|e| match e {
        SimError::Fault(f) => f.kind,
        e => panic!("{e}"),
    });
    (r, d.counters()[0])
}

#[test]
fn paced_loads_from_one_memory_element_lose_a_slot_each() {
    const I: u32 = 0x80000;
    // Two loads in the two elements of one interleaved pair, the store in the next pair:
    // as the pointers advance the loads alternate between the elements together.
    let (free, c) = paced_run([I, I + 8, I + 0x8000], 16, true, 1_000_000);
    assert_eq!(c.bank_conflicts, 0);
    // The store in a load's element conflicts with nothing.
    let (_, c1) = paced_run([I, I + 8, I + 16], 16, true, 1_000_000);
    assert_eq!(c1.bank_conflicts, 0);
    // The two loads 16 bytes apart: in one element at every issue.
    let (same, c2) = paced_run([I, I + 16, I + 32], 16, true, 1_000_000);
    assert_eq!(c2.bank_conflicts, 16);
    assert_eq!(c2.worker_slots, c.worker_slots + 16);
    assert_eq!(same, free.map(|c| c + 16 * 6));
    // In different pairs, the same parity: apart.
    let (_, c3) = paced_run([I, I + 0x8000, I + 8], 16, true, 1_000_000);
    assert_eq!(c3.bank_conflicts, 0);
    // Non-interleaved memory: one element per 16 KiB bank.
    let (_, c4) = paced_run([0x70000, 0x70108, 0x74000], 16, true, 1_000_000);
    assert_eq!(c4.bank_conflicts, 16);
    let (_, c4) = paced_run([0x70000, 0x74000, 0x70008], 16, true, 1_000_000);
    assert_eq!(c4.bank_conflicts, 0);
    // Outside an `rpt`, the same.
    let (unrolled, c5) = paced_run([I, I + 16, I + 32], 16, false, 1_000_000);
    assert_eq!(c5.bank_conflicts, 16);
    assert_eq!(c5.worker_slots, c2.worker_slots);
    assert_eq!(unrolled, same);
}

#[test]
fn a_cycle_limit_inside_a_conflicting_rpt_fires_where_slot_by_slot_would() {
    const I: u32 = 0x80000;
    // Limits landing before, inside and after an iteration's stall; the `rpt` (accounted an
    // iteration at a time) and the unrolled body (slot by slot) must stop at the same count.
    for limit in [400, 403, 406, 409, 500, 1234] {
        let (r, c) = paced_run([I, I + 16, I + 32], 200, true, limit);
        let (u, cu) = paced_run([I, I + 16, I + 32], 200, false, limit);
        assert_eq!(r, Err(FaultKind::CycleLimit(limit)));
        assert_eq!(u, Err(FaultKind::CycleLimit(limit)));
        assert_eq!(c.bank_conflicts, cu.bank_conflicts, "limit {limit}");
        assert_eq!(c.worker_slots, cu.worker_slots, "limit {limit}");
    }
}

#[test]
fn conflicts_are_attributed_to_the_entry_of_the_worker_that_issued_them() {
    // Worker `a` loads two streams 16 bytes apart (one element), `b` two in one pair's two
    // elements; 8 issues each.
    let src = "main:\n setzi $m1, a\n setzi $m2, b\n run $m1, $m3\n run $m2, $m3\n waitw\n halt\n .align 8\na:\n li $m1, 0x80000\n li $m2, 0x80010\n rpt 8, 1\n ld2x64pace $a0:1, $a2:3, $m1+=8, $m2+=8\n exit\nb:\n li $m1, 0x80000\n li $m2, 0x80008\n rpt 8, 1\n ld2x64pace $a0:1, $a2:3, $m1+=8, $m2+=8\n exit\n";
    let (d, object) = load(Target::gc200(), 2, src);
    let mut d = d;
    d.run(object.symbols["main"], &RunLimits::default())
        .unwrap();
    assert_eq!(d.conflicts_by_entry(), vec![(object.symbols["a"], 16)]);
    assert_eq!(d.counters()[0].bank_conflicts, 8);
}
