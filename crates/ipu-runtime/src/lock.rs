//! Device ownership: an exclusive lock on a file, held for as long as a process uses the
//! device.
//!
//! The lock is an advisory whole-file lock (`std::fs::File::try_lock`, `flock` on Unix), so
//! it is released by the operating system when the owner exits, however it exits. The owner
//! writes its process id into the file so that a process waiting for the lock can say who
//! holds it.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use tracing::info;

use crate::RuntimeError;

/// Name of the lock file in the temporary directory when no path is given.
pub const DEFAULT_LOCK_FILE_NAME: &str = "ipu-stack-device.lock";

/// How long a process waits for another owner by default: 10 s, long enough to ride out the
/// end of another short run, short enough that a stuck owner is reported promptly.
pub const DEFAULT_LOCK_TIMEOUT: Duration = Duration::from_secs(10);

/// Interval between two attempts to take a held lock: 50 ms, a small fraction of any run.
pub const LOCK_POLL_INTERVAL: Duration = Duration::from_millis(50);

/// The default lock path: `DEFAULT_LOCK_FILE_NAME` in `std::env::temp_dir()` (`$TMPDIR`, or
/// `/tmp`).
pub fn default_lock_path() -> PathBuf {
    std::env::temp_dir().join(DEFAULT_LOCK_FILE_NAME)
}

/// Where the lock is and how long to wait for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockOptions {
    /// The lock file (created if missing; its directory must exist).
    pub path: PathBuf,
    /// How long to wait for another owner before failing.
    pub timeout: Duration,
}

impl Default for LockOptions {
    fn default() -> Self {
        LockOptions {
            path: default_lock_path(),
            timeout: DEFAULT_LOCK_TIMEOUT,
        }
    }
}

/// Ownership of the device, released on drop.
#[derive(Debug)]
pub struct DeviceLock {
    file: File,
    path: PathBuf,
}

impl DeviceLock {
    /// Takes the lock at `options.path`, waiting up to `options.timeout` for another owner.
    pub fn acquire(options: &LockOptions) -> Result<DeviceLock, RuntimeError> {
        let path = options.path.clone();
        let io = |source| RuntimeError::LockIo {
            path: path.clone(),
            source,
        };
        info!(path = %path.display(), "waiting for hardware ownership");
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(io)?;
        let start = Instant::now();
        loop {
            match file.try_lock() {
                Ok(()) => break,
                Err(std::fs::TryLockError::WouldBlock) => {
                    let waited = start.elapsed();
                    if waited >= options.timeout {
                        return Err(RuntimeError::LockHeld {
                            pid: read_pid(&mut file),
                            path,
                            waited_ms: waited.as_millis() as u64,
                        });
                    }
                    std::thread::sleep(LOCK_POLL_INTERVAL.min(options.timeout - waited));
                }
                Err(std::fs::TryLockError::Error(e)) => return Err(io(e)),
            }
        }
        // Record the owner. The lock is held from here on even if this fails.
        let pid = std::process::id();
        file.set_len(0)
            .and_then(|()| file.seek(SeekFrom::Start(0)))
            .and_then(|_| writeln!(file, "{pid}"))
            .and_then(|()| file.flush())
            .map_err(io)?;
        info!(path = %path.display(), "acquired hardware ownership");
        Ok(DeviceLock { file, path })
    }

    /// The lock file.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for DeviceLock {
    fn drop(&mut self) {
        // Clear the owner's pid before releasing; closing the file releases the lock anyway.
        let _ = self.file.set_len(0);
        let _ = self.file.unlock();
    }
}

/// The pid an owner wrote into the lock file, if it is readable yet.
fn read_pid(file: &mut File) -> Option<u32> {
    let mut text = String::new();
    file.seek(SeekFrom::Start(0)).ok()?;
    Read::by_ref(file).take(32).read_to_string(&mut text).ok()?;
    text.trim().parse().ok()
}
