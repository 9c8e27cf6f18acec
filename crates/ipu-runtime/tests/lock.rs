//! Device ownership between processes: the test binary re-executes itself as the owner.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use ipu_runtime::{DeviceLock, LockOptions, RuntimeError};

/// Environment variable that gives [`lock_owner_process`] the lock path.
const OWNER_ENV: &str = "IPU_RUNTIME_TEST_LOCK_OWNER";

/// Not a test of its own: run by [`spawn_owner`] in a child process (ignored tests run only
/// when asked for), it takes the lock, says so on stdout, and holds it until its stdin closes.
/// Run any other way, without the lock path, it fails.
#[test]
#[ignore = "the lock owner of the other tests' child process, run by spawn_owner"]
fn lock_owner_process() {
    let path = std::env::var(OWNER_ENV)
        .unwrap_or_else(|_| panic!("{OWNER_ENV} is not set: only spawn_owner runs the lock owner"));
    let lock = DeviceLock::acquire(&LockOptions {
        path: path.into(),
        timeout: Duration::from_secs(30),
    })
    .unwrap();
    println!("OWNER-LOCKED {}", std::process::id());
    std::io::stdout().flush().unwrap();
    let mut line = String::new();
    let _ = std::io::stdin().read_line(&mut line);
    drop(lock);
}

/// Starts a child process that owns the lock at `path`; returns once it holds it.
fn spawn_owner(path: &std::path::Path) -> Child {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--ignored",
            "--exact",
            "lock_owner_process",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(OWNER_ENV, path)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    loop {
        line.clear();
        assert!(
            out.read_line(&mut line).unwrap() > 0,
            "the owner exited early"
        );
        if line.contains("OWNER-LOCKED") {
            break;
        }
    }
    // Keep reading so that the owner's later output never meets a closed pipe.
    std::thread::spawn(move || std::io::copy(&mut out, &mut std::io::sink()));
    child
}

#[test]
fn a_second_process_fails_with_the_owner_then_succeeds_after_it_exits() {
    let dir = common::temp_dir("lock-two");
    let path = dir.join("device.lock");
    let mut owner = spawn_owner(&path);
    let options = LockOptions {
        path: path.clone(),
        timeout: Duration::from_millis(200),
    };
    let err = DeviceLock::acquire(&options).unwrap_err();
    match &err {
        RuntimeError::LockHeld { path: p, pid, .. } => {
            assert_eq!(p, &path);
            assert_eq!(*pid, Some(owner.id()));
        }
        other => panic!("not LockHeld: {other:?}"),
    }
    let text = err.to_string();
    assert!(text.contains(&path.display().to_string()), "{text}");
    assert!(text.contains(&format!("process {}", owner.id())), "{text}");

    // The owner exits (closing its stdin lets it go); the lock is free again.
    drop(owner.stdin.take());
    assert!(owner.wait().unwrap().success());
    let lock = DeviceLock::acquire(&options).unwrap();
    let recorded = std::fs::read_to_string(&path).unwrap();
    assert_eq!(recorded.trim(), std::process::id().to_string());
    drop(lock);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_waiting_process_gets_the_lock_when_the_owner_exits() {
    let dir = common::temp_dir("lock-wait");
    let path = dir.join("device.lock");
    let mut owner = spawn_owner(&path);
    let stdin = owner.stdin.take();
    // Release the owner shortly after this process starts waiting.
    let releaser = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(150));
        drop(stdin);
        owner.wait().unwrap()
    });
    let lock = DeviceLock::acquire(&LockOptions {
        path: path.clone(),
        timeout: Duration::from_secs(60),
    })
    .unwrap();
    assert!(releaser.join().unwrap().success());
    assert_eq!(lock.path(), path);
    drop(lock);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn the_lock_is_released_on_drop_and_exclusive_while_held() {
    let dir = common::temp_dir("lock-drop");
    let options = LockOptions {
        path: dir.join("device.lock"),
        timeout: Duration::ZERO,
    };
    let first = DeviceLock::acquire(&options).unwrap();
    // Another open file description in this process is refused too.
    let err = DeviceLock::acquire(&options).unwrap_err();
    assert!(
        matches!(err, RuntimeError::LockHeld { pid: Some(p), .. } if p == std::process::id()),
        "{err:?}"
    );
    drop(first);
    drop(DeviceLock::acquire(&options).unwrap());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_lock_in_a_missing_directory_is_an_error_naming_the_path() {
    let options = LockOptions {
        path: "/nonexistent-ipu-dir/device.lock".into(),
        timeout: Duration::ZERO,
    };
    let err = DeviceLock::acquire(&options).unwrap_err();
    assert!(matches!(err, RuntimeError::LockIo { .. }), "{err:?}");
    assert!(
        err.to_string().contains("/nonexistent-ipu-dir/device.lock"),
        "{err}"
    );
}

#[test]
fn the_default_path_is_in_the_temporary_directory() {
    let options = LockOptions::default();
    assert_eq!(
        options.path,
        std::env::temp_dir().join("ipu-stack-device.lock")
    );
}
