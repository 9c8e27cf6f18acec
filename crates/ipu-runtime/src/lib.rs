//! The runtime: it takes ownership of a device, loads a package onto it and runs the package's
//! programs through a host exchange session.
//!
//! ```text
//! DeviceLock::acquire ─ Session::open (target check, initialize, replay register writes,
//!   load every tile image, run `startup`) ─ start_host_exchange ─ write_input* ─ call* ─
//!   read_output* ─ profile / write_profile
//! ```
//!
//! The device is a trait ([`Device`]); the simulator ([`SimulatorDevice`]) is the embedded
//! default. Host tensors are dense and row-major at this API; in the host pages they are in
//! the device's storage order ([`layout`]).
//!
//! ```no_run
//! use ipu_runtime::{DeviceLock, LockOptions, Session, SessionOptions, SimulatorDevice};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let package = ipu_package::Package::from_bytes(&std::fs::read("model.ipuexe")?)?;
//! let target = ipu_target::TargetKind::from_name(&package.manifest.target)
//!     .ok_or("unknown target")?
//!     .target();
//! let ownership = DeviceLock::acquire(&LockOptions::default())?;
//! let options = SessionOptions { ownership: Some(ownership), ..SessionOptions::default() };
//! let device = Box::new(SimulatorDevice::new(target));
//! let mut session = Session::open_with(device, &package, options)?;
//! session.start_host_exchange()?;
//! session.write_input("x", &[0u8; 64])?;
//! session.call("initialize")?;
//! let report = session.call("run")?;
//! let y = session.read_output("y")?;
//! let profile = session.write_profile(std::path::Path::new("run.profile.json"))?;
//! println!("cycles={} tiles={} samples={}", report.counters.cycles,
//!     profile.tile_count(), profile.sample_count());
//! # let _ = y;
//! # Ok(())
//! # }
//! ```

pub mod device;
mod error;
pub mod layout;
pub mod lock;
pub mod profile;
pub mod session;
mod simulator;

pub use device::{
    CALL_CYCLES_MAX, CallLimits, Device, DeviceCounters, DeviceFault, ProfileMark, ProfileSample,
    TileCounters,
};
pub use error::RuntimeError;
pub use lock::{DeviceLock, LockOptions, default_lock_path};
pub use profile::Profile;
pub use session::{CallReport, STARTUP_PROGRAM, Session, SessionOptions};
pub use simulator::SimulatorDevice;

// A session (and with it every device) can move between threads.
const _: fn() = || {
    fn send<T: Send>() {}
    send::<Session<'static>>();
    send::<SimulatorDevice>();
};
