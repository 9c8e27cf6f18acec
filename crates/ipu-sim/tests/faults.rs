//! Every fault kind: the fault names the right tile, context, pc and address, and displays as
//! one line.

mod common;

use std::collections::BTreeMap;

use ipu_sim::{Context, Fault, FaultKind, GlobalKind, RunLimits};
use ipu_target::{Target, TargetKind};

fn fault_with(
    target: Target,
    tiles: u32,
    src: &str,
    limits: RunLimits,
) -> (Fault, BTreeMap<String, u32>) {
    let (mut d, o) = common::load(target, tiles, src);
    let err = d
        .run(o.symbols["main"], &limits)
        .expect_err("the program faults");
    let f = err.fault().expect("a fault").clone();
    let line = f.to_string();
    assert!(
        !line.contains('\n') && line.starts_with("device fault: tile "),
        "{line}"
    );
    (f, o.symbols)
}

fn fault(src: &str) -> (Fault, BTreeMap<String, u32>) {
    fault_with(Target::gc200(), 1, src, RunLimits::default())
}

/// A supervisor launching `body` on worker 0.
fn worker(body: &str) -> String {
    format!("main:\n setzi $m1, w\n run $m1, $m2\n waitw\n halt\n .align 8\nw:\n{body}\n exit\n")
}

#[track_caller]
fn check(f: &Fault, ctx: Context, pc: u32, addr: Option<u32>) {
    assert_eq!(
        (f.tile, f.context, f.pc, f.address),
        (0, ctx, pc, addr),
        "{f}"
    );
}

/// The fault of `src` on one GC200 tile: of `kind`, in `ctx` at the instruction labelled
/// `bad`, at `addr`.
#[track_caller]
fn faults_at_bad(src: &str, kind: FaultKind, ctx: Context, addr: Option<u32>) -> Fault {
    let (f, s) = fault(src);
    assert_eq!(f.kind, kind);
    check(&f, ctx, s["bad"], addr);
    f
}

/// [`faults_at_bad`] of `body` run on worker 0.
#[track_caller]
fn worker_faults(body: &str, kind: FaultKind, addr: Option<u32>) -> Fault {
    faults_at_bad(&worker(body), kind, Context::Worker(0), addr)
}

/// [`faults_at_bad`] of the supervisor's program `src`.
#[track_caller]
fn supervisor_faults(src: &str, kind: FaultKind, addr: Option<u32>) -> Fault {
    faults_at_bad(src, kind, Context::Supervisor, addr)
}

/// Runs `src` on `tiles` GC200 tiles, which must end without a fault.
fn runs_clean(tiles: u32, src: &str) {
    let (mut d, o) = common::load(Target::gc200(), tiles, src);
    d.run(o.symbols["main"], &RunLimits::default()).unwrap();
}

/// The kind of fault `body` makes on worker 0.
fn worker_fault_kind(body: &str) -> FaultKind {
    fault(&worker(body)).0.kind
}

/// A race with worker 0, by two writes or a write and a read.
fn race(both_write: bool) -> FaultKind {
    FaultKind::WorkerRace {
        other: 0,
        both_write,
    }
}

#[test]
fn out_of_range_access() {
    let f = worker_faults(
        " setzi $m1, 0x40000\nbad: ld32 $m2, $m1, 0",
        FaultKind::OutOfRange { bytes: 4 },
        Some(0x40000),
    );
    assert_eq!(f.instruction, "ld32 $m2, $m1, 0");
    // Just past the end of memory.
    assert_eq!(
        worker_fault_kind(" li $m1, 0xE7FFC\n ld64 $a0:1, $m1, 0"),
        FaultKind::OutOfRange { bytes: 8 }
    );
}

#[test]
fn misaligned_access() {
    worker_faults(
        " li $m1, 0x80004\nbad: ld64 $a0:1, $m1, 0",
        FaultKind::Misaligned { align: 8 },
        Some(0x80004),
    );
    assert_eq!(
        worker_fault_kind(" li $m1, 0x80001\n ldz16 $m3, $m1, 0"),
        FaultKind::Misaligned { align: 2 }
    );
}

#[test]
fn ld128_outside_interleaved_memory() {
    worker_faults(
        " li $m1, 0x70000\nbad: ld128 $a0:3, $m1, 0",
        FaultKind::NotInterleaved,
        Some(0x70000),
    );
}

#[test]
fn fetch_outside_executable_memory() {
    let (f, _) = fault(&worker(" li $m1, 0x80000\n br $m1"));
    assert_eq!(f.kind, FaultKind::FetchNotExecutable);
    check(&f, Context::Worker(0), 0x80000, Some(0x80000));
}

#[test]
fn invalid_encoding() {
    let (f, s) = fault(&worker("bad: .word 0x7F000000"));
    assert!(matches!(f.kind, FaultKind::InvalidEncoding(_)), "{f}");
    check(&f, Context::Worker(0), s["bad"], Some(s["bad"]));
}

#[test]
fn misaligned_bundle() {
    let bundle = ipu_isa::encode_slot(&ipu_isa::Slot::Bundle(ipu_isa::Bundle {
        main: ipu_isa::Instr::Nop,
        float: ipu_isa::Instr::FUn {
            ty: ipu_isa::FType::F32,
            op: ipu_isa::FUnOp::Mov,
            d: 0,
            a: 1,
        },
    }))
    .unwrap();
    // The worker starts 8-byte aligned; one nop puts the bundle's words at 4 mod 8.
    let (f, s) = fault(&worker(&format!(
        " nop
bad: .word {}, {}",
        bundle[0], bundle[1]
    )));
    assert!(
        matches!(&f.kind, FaultKind::InvalidEncoding(m) if m.contains("8-byte")),
        "{f}"
    );
    check(&f, Context::Worker(0), s["bad"], Some(s["bad"]));
}

#[test]
fn sub_word_store() {
    worker_faults(
        " li $m1, 0x80000\nbad: st8 $m2, $m1, 3",
        FaultKind::SubWordStore,
        Some(0x80003),
    );
    assert_eq!(
        worker_fault_kind(" li $m1, 0x80000\n st16 $m2, $m1, 2"),
        FaultKind::SubWordStore
    );
}

#[test]
fn fp8_amp_on_a_target_without_it() {
    let src = "main:\nbad: ampcfg f8f16\n halt\n";
    let (f, s) = fault_with(TargetKind::Bow.target(), 1, src, RunLimits::default());
    assert_eq!(
        f.kind,
        FaultKind::AmpModeUnsupported(ipu_target::AmpMode::F8F16)
    );
    check(&f, Context::Supervisor, s["bad"], None);
}

#[test]
fn supervisor_only_on_a_worker_and_worker_only_on_the_supervisor() {
    worker_faults("bad: sync", FaultKind::SupervisorOnly, None);
    supervisor_faults("main:\nbad: exit\n", FaultKind::WorkerOnly, None);
}

#[test]
fn run_entry_outside_executable_memory() {
    supervisor_faults(
        "main:\n li $m1, 0x90000\nbad: run $m1, $m2\n halt\n",
        FaultKind::RunEntryNotExecutable,
        Some(0x90000),
    );
}

/// Two workers of one phase: `a` walks paced streams in an `rpt` of 32 (the loop run as
/// streams), `b` touches one word with `access` (`ld32` or `st32` through `$m4`) at `addr`.
fn streams_beside(stream: &str, access: &str, addr: u32) -> String {
    format!(
        "main:\n setzi $m1, a\n setzi $m2, b\n run $m1, $m3\n run $m2, $m3\n waitw\n halt\n .align 8\na:\n li $m1, 0x80000\n li $m2, 0x82000\n li $m3, 0x84000\n rpt 32, 1\n {stream}\n exit\nb:\n li $m4, {addr}\n {access} $m5, $m4, 0\n exit\n"
    )
}

#[test]
fn races_with_the_streams_of_an_rpt_are_found_where_its_accesses_reach() {
    let st = "ldst64pace $a0:1, $a2:3, $m1+=8, $m3+=8";
    let two = "ld2x64pace $a0:1, $a2:3, $m1+=8, $m2+=8";
    // Inside the store stream (0x84000..0x84100), its middle and its last word.
    for addr in [0x84080, 0x840FC] {
        let (f, _) = fault(&streams_beside(st, "ld32", addr));
        assert_eq!((f.kind, f.address), (race(false), Some(addr)));
    }
    // Inside each of two alternating read streams, from their first to their last word.
    for addr in [0x80000, 0x80040, 0x800FC, 0x82000, 0x820FC] {
        let (f, _) = fault(&streams_beside(two, "st32", addr));
        assert_eq!((f.kind, f.address), (race(false), Some(addr)), "{addr:#x}");
    }
    // Just past either end of every stream: no race.
    for addr in [0x84100, 0x83FFC] {
        runs_clean(1, &streams_beside(st, "ld32", addr));
    }
    for addr in [0x80100, 0x82100, 0x81FFC] {
        runs_clean(1, &streams_beside(two, "st32", addr));
    }
}

#[test]
fn a_stream_leaving_memory_faults_at_its_first_access_outside() {
    // 32 iterations of 8 bytes from 8 words below the end: the ninth access is outside.
    let src = worker(
        " li $m1, 0xE7FC0
 li $m3, 0x80000
 rpt 32, 1
bad: ldst64pace $a0:1, $a2:3, $m1+=8, $m3+=8",
    );
    let (f, s) = fault(&src);
    assert_eq!(f.kind, FaultKind::OutOfRange { bytes: 8 });
    check(&f, Context::Worker(0), s["bad"], Some(0xE8000));
    // Misaligned from the start.
    let src = worker(
        " li $m1, 0x80004
 li $m3, 0x81000
 rpt 32, 1
bad: ldst64pace $a0:1, $a2:3, $m1+=8, $m3+=8",
    );
    let (f, s) = fault(&src);
    assert_eq!(f.kind, FaultKind::Misaligned { align: 8 });
    check(&f, Context::Worker(0), s["bad"], Some(0x80004));
}

#[test]
fn rpt_count_over_the_limit() {
    worker_faults(
        " li $m1, 0x10000\nbad: rpt $m1, 1\n nop",
        FaultKind::RptCountTooLarge(0x10000),
        None,
    );
}

#[test]
fn control_flow_inside_an_rpt_body() {
    worker_faults(" rpt 2, 1\nbad: bri w", FaultKind::ControlInRptBody, None);
}

#[test]
fn cycle_limit() {
    let limits = RunLimits {
        max_cycles: 1000,
        ..RunLimits::default()
    };
    let (f, s) = fault_with(Target::gc200(), 1, &worker("spin: bri spin"), limits);
    assert_eq!(f.kind, FaultKind::CycleLimit(1000));
    check(&f, Context::Worker(0), s["spin"], None);
    let (f, _) = fault_with(Target::gc200(), 1, "main:\nspin: bri spin\n", limits);
    assert_eq!(f.kind, FaultKind::CycleLimit(1000));
}

#[test]
fn step_limit() {
    let limits = RunLimits {
        max_global_steps: 3,
        ..RunLimits::default()
    };
    let (f, _) = fault_with(Target::gc200(), 2, "main:\n sync\n bri main\n", limits);
    assert_eq!(f.kind, FaultKind::StepLimit(3));
}

#[test]
fn global_instruction_while_workers_run() {
    let src = "main:\n setzi $m1, w\n run $m1, $m2\nbad: sync\n halt\n .align 8\nw:\n rpt 100, 1\n nop\n exit\n";
    supervisor_faults(src, FaultKind::WorkersRunning, None);
}

#[test]
fn workers_of_one_phase_writing_the_same_word() {
    let src = "main:\n setzi $m1, w\n run $m1, $m2\n run $m1, $m2\n waitw\n halt\n .align 8\nw:\n li $m3, 0x80010\n st32 $m3, $m3, 0\n exit\n";
    let (f, s) = fault(src);
    assert_eq!(f.kind, race(true));
    check(&f, Context::Worker(1), s["w"], Some(0x80010));
    // Reading what another worker of the phase writes.
    let src = "main:\n setzi $m1, w\n setzi $m2, 0\n run $m1, $m2\n setzi $m2, 1\n run $m1, $m2\n waitw\n halt\n .align 8\nw:\n li $m3, 0x80010\n brz $m0, rd\n st32 $m3, $m3, 0\n exit\nrd:\n ld32 $m4, $m3, 0\n exit\n";
    let (f, _) = fault(src);
    assert_eq!(f.kind, race(false));
    assert_eq!(f.address, Some(0x80010));
    // Disjoint words are fine; so are workers separated by waitw.
    let ok = "main:\n setzi $m1, w\n setzi $m2, 0\n run $m1, $m2\n waitw\n run $m1, $m2\n setzi $m2, 4\n run $m1, $m2\n waitw\n halt\n .align 8\nw:\n li $m3, 0x80010\n add $m3, $m3, $m0\n st32 $m3, $m3, 0\n exit\n";
    runs_clean(1, ok);
}

#[test]
fn tiles_reaching_different_global_instructions() {
    let src = "main:\n get $m1, tileid\n brnz $m1, other\n sync\n halt\nother:\nbad: halt\n";
    let (f, s) = fault_with(Target::gc200(), 3, src, RunLimits::default());
    assert_eq!(
        f.kind,
        FaultKind::GlobalMismatch {
            reached: GlobalKind::Halt,
            expected: GlobalKind::Sync
        }
    );
    assert_eq!((f.tile, f.pc), (1, s["bad"]));
    assert!(
        f.to_string()
            .contains("tile reached halt while tile 0 reached sync"),
        "{f}"
    );
}

#[test]
fn amp_faults() {
    // amp before ampcfg.
    worker_faults(
        "bad: amp $a0:1, $a2:3, $a4:5, 0",
        FaultKind::AmpNotConfigured,
        None,
    );
    // ampw outside interleaved memory, misaligned.
    supervisor_faults(
        "main:\n ampcfg f16f16\n li $m1, 0x70000\nbad: ampw $m1\n halt\n",
        FaultKind::NotInterleaved,
        Some(0x70000),
    );
    let (f, _) = fault("main:\n ampcfg f16f16\n li $m1, 0x80008\n ampw $m1\n halt\n");
    assert_eq!(f.kind, FaultKind::Misaligned { align: 16 });
    // Changing the AMP while workers run.
    let src = "main:\n setzi $m1, w\n run $m1, $m2\nbad: ampcfg f16f32\n waitw\n halt\n .align 8\nw:\n rpt 10, 1\n nop\n exit\n";
    supervisor_faults(src, FaultKind::AmpBusy, None);
}

#[test]
fn bad_exchange_table() {
    let (f, s) = fault("main:\n li $m1, 0x90000\nbad: exch $m1\n halt\n");
    assert!(matches!(f.kind, FaultKind::BadTable(_)), "{f}");
    check(&f, Context::Supervisor, s["bad"], Some(0x90000));
}

#[test]
fn faults_on_a_later_tile_name_that_tile() {
    let src = "main:\n get $m1, tileid\n shl $m1, $m1, 2\n li $m2, 0x80001\n add $m2, $m2, $m1\n sync\n ld32 $m3, $m2, 3\n halt\n";
    // Tile 0 reads 0x80004 (fine), tile 1 reads 0x80008 (fine)... all aligned: no fault.
    runs_clean(4, src);
    let src = "main:\n get $m1, tileid\n li $m2, 0x80000\n add $m2, $m2, $m1\n sync\nbad: ld32 $m3, $m2, 0\n halt\n";
    let (f, s) = fault_with(Target::gc200(), 4, src, RunLimits::default());
    assert_eq!(
        (f.tile, f.context, f.pc, f.address),
        (1, Context::Supervisor, s["bad"], Some(0x80001))
    );
}

#[test]
fn supervisor_touching_what_a_running_worker_writes() {
    // The supervisor reads the worker's output before waitw.
    let src = "main:\n li $m5, 0x80010\n setzi $m1, w\n run $m1, $m2\nbad: ld32 $m6, $m5, 0\n waitw\n halt\n .align 8\nw:\n li $m3, 0x80010\n st32 $m3, $m3, 0\n exit\n";
    let f = supervisor_faults(src, race(false), Some(0x80010));
    assert_eq!(f.instruction, "ld32 $m6, $m5, 0");
    // After waitw, or before the run, it is fine.
    let ok = "main:\n li $m5, 0x80010\n st32 $m5, $m5, 0\n setzi $m1, w\n run $m1, $m2\n waitw\n ld32 $m6, $m5, 0\n halt\n .align 8\nw:\n li $m3, 0x80010\n st32 $m3, $m3, 0\n exit\n";
    runs_clean(1, ok);
}

#[test]
fn a_device_runs_again_after_a_fault() {
    // The first run faults inside a worker window; the second starts clean.
    let src = "main:\n setzi $m1, w\n run $m1, $m2\n waitw\n halt\n .align 8\nw:\n li $m1, 0x80004\nbad: ld64 $a0:1, $m1, 0\n exit\nok:\n halt\n";
    let (mut d, o) = common::load(Target::gc200(), 1, src);
    let err = d
        .run(o.symbols["main"], &RunLimits::default())
        .expect_err("the worker's misaligned load faults");
    let f = err.fault().expect("a fault");
    assert_eq!(f.kind, FaultKind::Misaligned { align: 8 }, "{f}");
    check(f, Context::Worker(0), o.symbols["bad"], Some(0x80004));
    let r = d.run(o.symbols["ok"], &RunLimits::default()).unwrap();
    assert_eq!(r.global_steps, 1);
}
