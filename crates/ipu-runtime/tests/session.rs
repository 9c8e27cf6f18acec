//! Sessions end to end on the simulator: packages with real machine code loaded, called and
//! read back; every way a package, a configuration or a call can be refused.

mod common;

use common::*;
use ipu_package::Package;
use ipu_runtime::{
    CallLimits, Device, Profile, RuntimeError, STARTUP_PROGRAM, Session, SessionOptions,
    SimulatorDevice,
};
use ipu_target::{Target, TargetKind, config};

fn device(target: Target) -> Box<dyn Device> {
    Box::new(SimulatorDevice::new(target))
}

fn open(package: &Package) -> Session<'_> {
    Session::open(device(Target::gc200()), package).unwrap_or_else(|e| panic!("{e}"))
}

fn inputs(n: usize) -> Vec<f32> {
    (0..n).map(|i| i as f32 * 0.25 - 3.0).collect()
}

#[test]
fn write_call_read_doubles_every_element() {
    let package = doubling_package(Target::gc200(), 3, &[3, 5], 4);
    let mut session = open(&package);
    assert_eq!(session.calls().len(), 1, "startup ran at open");
    assert_eq!(session.calls()[0].program, STARTUP_PROGRAM);
    session.start_host_exchange().unwrap();
    let x = inputs(15);
    session.write_input("x", &f32_bytes(&x)).unwrap();
    let init = session.call("initialize").unwrap();
    assert_eq!(init.command, 1);
    let report = session.call("run").unwrap();
    let y = f32_values(&session.read_output("y").unwrap());
    let expected: Vec<f32> = x.iter().map(|v| 2.0 * v).collect();
    assert_eq!(y, expected);

    assert_eq!(report.program, "run");
    assert_eq!(report.command, 2);
    assert_eq!(report.phases, 2);
    // Two host-exchange points and the final halt.
    assert_eq!(report.counters.global_steps, 3);
    assert!(report.counters.cycles > 0);
    assert!(report.counters.exchange_cycles > 0, "{report:?}");
    assert!(report.counters.compute_cycles > 0, "{report:?}");
    assert_eq!(
        report.counters.cycles,
        report.counters.compute_cycles
            + report.counters.exchange_cycles
            + report.counters.sync_cycles
    );
    assert!(report.counters.instructions > 0);
    // The inputs' point and the outputs' point, each with its own cycles.
    let c = &report.counters;
    assert!(
        c.host_to_device_cycles > 0 && c.device_to_host_cycles > 0,
        "{c:?}"
    );
    assert_eq!(
        c.host_exchange_cycles,
        c.host_to_device_cycles + c.device_to_host_cycles
    );
    assert!(c.host_exchange_cycles <= c.exchange_cycles);
    // 2256 cycles at 1.33 GHz.
    assert_eq!(report.device_time_ns, report.counters.cycles * 1000 / 1330);

    // A second run on new inputs.
    let x2: Vec<f32> = x.iter().map(|v| v + 100.0).collect();
    session.write_input("x", &f32_bytes(&x2)).unwrap();
    let report2 = session.call("run").unwrap();
    assert_eq!(
        report2.counters.host_exchange_cycles,
        c.host_exchange_cycles
    );
    let y2 = f32_values(&session.read_output("y").unwrap());
    assert_eq!(y2, x2.iter().map(|v| 2.0 * v).collect::<Vec<_>>());
}

#[test]
fn groups_and_odd_columns_pass_through_the_device() {
    // [2, 3, 7] with group 8: the storage order pads each row to 8 columns; [1, 13] with group
    // 4 spreads four column groups over five tiles, one tile with nothing to do.
    for (shape, group, tiles) in [(vec![2, 3, 7], 8, 2), (vec![1, 13], 4, 5), (vec![9], 4, 1)] {
        let package = doubling_package(Target::gc200(), tiles, &shape, group);
        let mut session = open(&package);
        session.start_host_exchange().unwrap();
        let n: usize = shape.iter().product();
        let x = inputs(n);
        session.write_input("x", &f32_bytes(&x)).unwrap();
        session.call("run").unwrap();
        let y = f32_values(&session.read_output("y").unwrap());
        assert_eq!(
            y,
            x.iter().map(|v| 2.0 * v).collect::<Vec<_>>(),
            "{shape:?}"
        );
    }
}

#[test]
fn every_dtype_round_trips_through_the_device() {
    // `echo` moves the storage order to tile memory and back: whatever the dtype, the dense
    // tensor read back is the one written, padding and all.
    for (dtype, shape, group, tiles) in [
        ("f16", vec![3, 7], 4, 3),
        ("f143", vec![5, 9], 8, 2),
        ("f152", vec![2, 1, 3], 4, 4),
        ("f32", vec![11], 12, 2),
    ] {
        let package = package_of(Target::gc200(), tiles, &shape, group, dtype);
        let mut session = open(&package);
        session.start_host_exchange().unwrap();
        let bytes =
            shape.iter().product::<usize>() * ipu_runtime::layout::element_bytes(dtype).unwrap();
        let x: Vec<u8> = (0..bytes).map(|i| (i * 37 % 251) as u8 + 1).collect();
        session.write_input("x", &x).unwrap();
        let report = session.call("echo").unwrap();
        assert_eq!(report.counters.global_steps, 3);
        assert_eq!(session.read_output("y").unwrap(), x, "{dtype} {shape:?}");
    }
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(24))]

    /// Any shape, group and tile count: the device doubles every element of the dense tensor.
    #[test]
    fn doubling_through_the_device_for_any_layout(
        shape in proptest::collection::vec(1usize..9, 1..4),
        group in proptest::sample::select(vec![4usize, 8, 16]),
        tiles in 1u32..6,
    ) {
        let package = doubling_package(Target::gc200(), tiles, &shape, group);
        let mut session = open(&package);
        session.start_host_exchange().unwrap();
        let x = inputs(shape.iter().product());
        session.write_input("x", &f32_bytes(&x)).unwrap();
        session.call("run").unwrap();
        let y = f32_values(&session.read_output("y").unwrap());
        proptest::prop_assert_eq!(y, x.iter().map(|v| 2.0 * v).collect::<Vec<_>>());
    }
}

#[test]
fn profile_has_every_active_tile_and_is_written_whole() {
    let package = doubling_package(Target::gc200(), 4, &[4, 8], 4);
    let mut session = open(&package);
    session.start_host_exchange().unwrap();
    session.write_input("x", &f32_bytes(&inputs(32))).unwrap();
    let run = session.call("run").unwrap();
    let profile = session.profile();
    assert_eq!(profile.tile_count(), 4);
    assert_eq!(profile.target, "gc200");
    assert_eq!(profile.device, "simulator");
    assert_eq!(profile.calls.len(), 2);
    // Startup: sync + halt; run: 2 hostx + halt; one sample per active tile and step.
    assert_eq!(profile.sample_count(), 4 * (2 + 3));
    for t in &profile.tiles {
        assert_eq!(
            t.cycles,
            t.compute_cycles + t.exchange_cycles + t.sync_cycles,
            "tile {}",
            t.tile
        );
        assert!(t.instructions > 0);
    }
    let slowest = profile.tiles.iter().map(|t| t.cycles).max().unwrap();
    let calls: u64 = profile.calls.iter().map(|c| c.counters.cycles).sum();
    assert!(slowest <= calls && run.counters.cycles <= slowest);

    let dir = temp_dir("profile");
    let path = dir.join("run.profile.json");
    let written = session.write_profile(&path).unwrap();
    let text = std::fs::read_to_string(&path).unwrap();
    assert_eq!(Profile::from_json(&text).unwrap(), written);
    // Only the profile is left in the directory: the temporary file was renamed.
    let names: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, vec![std::ffi::OsString::from("run.profile.json")]);
    // A profile into a missing directory is an error naming the path, and leaves nothing.
    let missing = dir.join("no/such/dir/p.json");
    let err = session.write_profile(&missing).unwrap_err();
    assert!(err.to_string().contains("no/such/dir"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_package_for_another_target_is_refused() {
    let package = doubling_package(Target::gc200(), 2, &[2, 4], 4);
    let err = Session::open(device(TargetKind::C600.target()), &package).unwrap_err();
    assert!(matches!(err, RuntimeError::WrongTarget { .. }), "{err:?}");
    assert_eq!(
        err.to_string(),
        "package is for target gc200, the device is c600"
    );
}

fn open_err(package: &Package) -> RuntimeError {
    Session::open(device(Target::gc200()), package).unwrap_err()
}

fn write(package: &mut Package, tile: u32, register: u32, value: u32) {
    package
        .manifest
        .register_writes
        .push(ipu_package::RegisterWrite {
            tile,
            register,
            value,
        });
}

#[test]
fn configuration_register_errors_name_the_tile() {
    let base = doubling_package(Target::gc200(), 2, &[2, 4], 4);

    let mut p = base.clone();
    write(&mut p, 17, config::EXCHANGE_ID, 18);
    let e = open_err(&p);
    assert_eq!(e.to_string(), "tile 17: exchange id 18 does not match");

    let mut p = base.clone();
    write(&mut p, 3, 7, 1);
    let e = open_err(&p);
    assert!(
        matches!(
            e,
            RuntimeError::UnknownRegister {
                tile: 3,
                register: 7,
                ..
            }
        ),
        "{e:?}"
    );

    let mut p = base.clone();
    write(&mut p, 5, config::TILE_ACTIVE, 1);
    let e = open_err(&p);
    assert!(
        matches!(e, RuntimeError::ActiveTilesNotPrefix { tile: 5, gap: 2 }),
        "{e:?}"
    );
    assert!(e.to_string().contains("tile 5"), "{e}");

    let mut p = base.clone();
    write(&mut p, 0, config::TILE_ACTIVE, 2);
    let e = open_err(&p);
    assert!(
        matches!(e, RuntimeError::BadRegisterValue { tile: 0, .. }),
        "{e:?}"
    );

    // Tile 1 deactivated: one active tile, the package uses two.
    let mut p = base.clone();
    write(&mut p, 1, config::TILE_ACTIVE, 0);
    let e = open_err(&p);
    assert!(
        matches!(
            e,
            RuntimeError::ActiveTilesMismatch {
                device: 1,
                package: 2
            }
        ),
        "{e:?}"
    );

    let mut p = base.clone();
    p.manifest
        .register_writes
        .retain(|w| w.register != config::TILE_ACTIVE);
    assert!(matches!(open_err(&p), RuntimeError::NoActiveTiles));

    // A host window smaller than the pages: refused when the pages are attached.
    let mut p = base.clone();
    p.manifest
        .register_writes
        .retain(|w| w.register != config::HOST_WINDOW_BYTES);
    write(&mut p, 0, config::HOST_WINDOW_BYTES, 16);
    let mut s = Session::open(device(Target::gc200()), &p).unwrap();
    let e = s.start_host_exchange().unwrap_err();
    assert!(
        matches!(
            e,
            RuntimeError::HostWindow {
                needed_bytes: 64,
                window_bytes: 16
            }
        ),
        "{e:?}"
    );
}

#[test]
fn configuration_on_a_tile_beyond_the_chip_is_refused() {
    let mut d = SimulatorDevice::new(Target::gc200());
    let e = d.write_config(1472, config::TILE_ACTIVE, 1).unwrap_err();
    assert!(
        matches!(e, RuntimeError::NoSuchTile { tile: 1472, .. }),
        "{e:?}"
    );
}

#[test]
fn unknown_names_and_wrong_sizes_are_errors_listing_what_exists() {
    let package = doubling_package(Target::gc200(), 2, &[2, 3], 4);
    let mut session = open(&package);
    let e = session.write_input("x", &[0; 24]).unwrap_err();
    assert!(matches!(e, RuntimeError::HostExchangeNotStarted), "{e:?}");
    session.start_host_exchange().unwrap();

    let e = session.call("nope").unwrap_err();
    assert_eq!(
        e.to_string(),
        "no program named \"nope\" in the package (known: startup, initialize, run, echo, fault, spin)"
    );
    let e = session.write_input("z", &[]).unwrap_err();
    assert_eq!(
        e.to_string(),
        "no host tensor named \"z\" in the package (known: x, y)"
    );
    let e = session.read_output("z").unwrap_err();
    assert!(matches!(e, RuntimeError::UnknownTensor { .. }));
    let e = session.write_input("x", &[0; 20]).unwrap_err();
    assert_eq!(e.to_string(), "tensor \"x\": expected 24 bytes, given 20");
    let e = session.write_input("y", &[0; 24]).unwrap_err();
    assert!(matches!(e, RuntimeError::NotAnInput { .. }), "{e:?}");

    // A package without `startup` is refused before the device is touched.
    let mut p = package.clone();
    p.manifest.programs.retain(|p| p.name != "startup");
    let e = open_err(&p);
    assert!(matches!(e, RuntimeError::UnknownProgram { .. }), "{e:?}");

    // A tensor whose recorded size disagrees with its storage order.
    let mut p = package.clone();
    p.manifest.tensors[0].shape = vec![2, 5];
    let e = open_err(&p);
    assert!(e.to_string().contains("tensor \"x\""), "{e}");
    let mut p = package.clone();
    p.manifest.host_pages = vec![u64::MAX, u64::MAX];
    let e = open_err(&p);
    assert!(
        e.to_string()
            .contains("page 0 has 18446744073709551615 bytes but its tensors end at 32"),
        "{e}"
    );
    let mut p = package.clone();
    p.manifest.tensors[1].dtype = "i7".into();
    let e = open_err(&p);
    assert!(e.to_string().contains("unknown dtype"), "{e}");
}

#[test]
fn a_device_fault_names_tile_pc_and_address() {
    let package = doubling_package(Target::gc200(), 3, &[2, 4], 4);
    let mut session = open(&package);
    session.start_host_exchange().unwrap();
    let e = session.call("fault").unwrap_err();
    let fault = e.fault().unwrap_or_else(|| panic!("not a fault: {e:?}"));
    assert_eq!(fault.tile, fault_tile(3));
    assert_eq!(fault.context, ipu_sim::Context::Supervisor);
    assert_eq!(fault.pc, symbol("fault_load"));
    assert_eq!(fault.address, Some(0x10));
    assert!(fault.instruction.starts_with("ld32"), "{fault:?}");
    let text = e.to_string();
    assert!(
        text.starts_with("call \"fault\" failed: device fault: tile 1, supervisor, pc 0x"),
        "{text}"
    );
    assert!(!text.contains('\n'));
}

#[test]
fn a_program_that_never_halts_is_stopped_by_the_cycle_limit() {
    let package = doubling_package(Target::gc200(), 2, &[2, 4], 4);
    let options = SessionOptions {
        limits: CallLimits {
            cycles_max: 6_000,
            ..CallLimits::default()
        },
        ..SessionOptions::default()
    };
    let mut session = Session::open_with(device(Target::gc200()), &package, options).unwrap();
    let e = session.call("spin").unwrap_err();
    let fault = e.fault().unwrap_or_else(|| panic!("not a fault: {e:?}"));
    assert_eq!(fault.pc, symbol("spin"));
    assert!(
        matches!(fault.kind, ipu_sim::FaultKind::CycleLimit(_)),
        "{fault}"
    );
}

#[test]
fn every_tile_of_the_chip_takes_part() {
    let package = doubling_package(Target::gc200(), 1472, &[64, 92], 4);
    let mut session = open(&package);
    session.start_host_exchange().unwrap();
    let x = inputs(64 * 92);
    session.write_input("x", &f32_bytes(&x)).unwrap();
    let report = session.call("run").unwrap();
    let y = f32_values(&session.read_output("y").unwrap());
    assert_eq!(y, x.iter().map(|v| 2.0 * v).collect::<Vec<_>>());
    assert_eq!(session.profile().tile_count(), 1472);
    assert!(report.counters.instructions > 1472 * 10);
}
