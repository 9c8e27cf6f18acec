//! The runtime's log lines, in the order of the seed logs. In a test binary of its own: the
//! subscriber is installed per thread, and `tracing` caches per-callsite interest globally, so
//! tests running on other threads without a subscriber could hide lines from it.

mod common;

use common::*;
use ipu_runtime::{DeviceLock, LockOptions, Session, SessionOptions, SimulatorDevice};
use ipu_target::Target;

#[test]
fn the_log_follows_the_seed_sequence() {
    use std::sync::{Arc, Mutex};

    #[derive(Clone, Default)]
    struct Buffer(Arc<Mutex<Vec<u8>>>);
    impl std::io::Write for Buffer {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let buffer = Buffer::default();
    let writer = buffer.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .without_time()
        .with_target(false)
        .finish();
    let package = doubling_package(Target::gc200(), 2, &[2, 4], 4);
    let dir = temp_dir("log");
    let lock_path = dir.join("device.lock");
    tracing::subscriber::with_default(subscriber, || {
        let ownership = DeviceLock::acquire(&LockOptions {
            path: lock_path.clone(),
            ..LockOptions::default()
        })
        .unwrap();
        let options = SessionOptions {
            ownership: Some(ownership),
            ..SessionOptions::default()
        };
        let device = Box::new(SimulatorDevice::new(Target::gc200()));
        let mut session = Session::open_with(device, &package, options).unwrap();
        assert_eq!(session.ownership().unwrap().path(), lock_path);
        session.start_host_exchange().unwrap();
        session.call("run").unwrap();
    });
    std::fs::remove_dir_all(&dir).unwrap();
    let log = String::from_utf8(buffer.0.lock().unwrap().clone())
        .unwrap()
        .replace(&lock_path.display().to_string(), "LOCK");
    let lines: Vec<&str> = log
        .lines()
        .map(|l| l.trim_start_matches(" INFO ").trim())
        .collect();
    expect_test::expect![[r#"
        waiting for hardware ownership path=LOCK
        acquired hardware ownership path=LOCK
        opening IPU device device=simulator target=gc200
        IPU device attached
        initializing IPU device
        IPU device initialized
        replaying device configuration register_writes=6
        loading application tile_count=1472
        application loaded and initial synchronization completed tile_count=1472
        starting host exchange session
        attaching host exchange pages pages=2
        host exchange session started
        invoking host exchange call call="run" command=2 phases=2"#]]
    .assert_eq(&lines.join("\n"));
}
