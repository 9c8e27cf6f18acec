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

pub mod device;
mod error;
pub mod layout;
pub mod lock;
pub mod profile;
pub mod session;
mod simulator;

pub use device::{
    CallLimits, Device, DeviceCounters, DeviceFault, ProfileMark, ProfileSample, TileCounters,
};
pub use error::RuntimeError;
pub use lock::{DeviceLock, LockOptions, default_lock_path};
pub use profile::Profile;
pub use session::{CallReport, STARTUP_PROGRAM, Session, SessionOptions};
pub use simulator::SimulatorDevice;
