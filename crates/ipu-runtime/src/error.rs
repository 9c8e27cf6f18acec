//! The crate's error type.

use std::path::PathBuf;

use ipu_package::PackageError;

use crate::device::DeviceFault;

/// Everything that can go wrong between acquiring a device and reading its outputs back. Each
/// variant carries what a user needs to act on it: the tile, the register, the tensor, the
/// path, the expected and the given sizes.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    /// The package is not valid.
    #[error(transparent)]
    Package(#[from] PackageError),
    /// The package was built for another target than the device's.
    #[error("package is for target {package}, the device is {device}")]
    WrongTarget {
        /// The package's target.
        package: String,
        /// The device's target.
        device: String,
    },
    /// Another process owns the device.
    #[error(
        "device lock {} is held by {} (waited {waited_ms} ms); retry later or raise the lock timeout",
        path.display(),
        match pid { Some(p) => format!("process {p}"), None => "another process".to_string() }
    )]
    LockHeld {
        /// The lock file.
        path: PathBuf,
        /// The owner's process id, as it wrote it into the lock file.
        pid: Option<u32>,
        /// How long this process waited.
        waited_ms: u64,
    },
    /// The lock file could not be opened or locked.
    #[error("device lock {}: {source}", path.display())]
    LockIo {
        /// The lock file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// A configuration register write names a tile beyond the chip.
    #[error("configuration register {register} written on tile {tile}, the chip has {tiles} tiles")]
    NoSuchTile {
        /// The tile.
        tile: u32,
        /// The register.
        register: u32,
        /// Tiles on the chip.
        tiles: u32,
    },
    /// A configuration register that does not exist.
    #[error("tile {tile}: unknown configuration register {register} (value {value})")]
    UnknownRegister {
        /// The tile.
        tile: u32,
        /// The register.
        register: u32,
        /// The value written.
        value: u32,
    },
    /// A value a register does not accept.
    #[error("tile {tile}: configuration register {register} does not accept {value}: {reason}")]
    BadRegisterValue {
        /// The tile.
        tile: u32,
        /// The register.
        register: u32,
        /// The value written.
        value: u32,
        /// Why.
        reason: &'static str,
    },
    /// A tile's exchange id is not its index.
    #[error("tile {tile}: exchange id {id} does not match")]
    ExchangeIdMismatch {
        /// The tile.
        tile: u32,
        /// The exchange id written.
        id: u32,
    },
    /// Active tiles do not form a prefix `0..n`.
    #[error("tile {tile} is active but tile {gap} is not: active tiles must be 0..n")]
    ActiveTilesNotPrefix {
        /// An active tile.
        tile: u32,
        /// An inactive tile below it.
        gap: u32,
    },
    /// No tile was made active before loading.
    #[error("no tile is active: the configuration sets TILE_ACTIVE on no tile")]
    NoActiveTiles,
    /// The device's active tiles differ from the package's.
    #[error("the configuration activates {device} tiles, the package uses {package}")]
    ActiveTilesMismatch {
        /// Active tiles after the configuration.
        device: u32,
        /// The manifest's `tiles_used`.
        package: u32,
    },
    /// The host pages do not fit the configured host window.
    #[error(
        "host pages of {needed_bytes} bytes exceed the host window of {window_bytes} bytes \
         (HOST_WINDOW_BYTES)"
    )]
    HostWindow {
        /// Bytes of all host pages.
        needed_bytes: u64,
        /// The largest window any tile was configured with.
        window_bytes: u64,
    },
    /// The package's host pages are beyond what a session attaches.
    #[error("the package's host pages total {bytes} bytes, more than the limit of {limit_bytes}")]
    HostPagesTooLarge {
        /// Bytes of all host pages.
        bytes: u64,
        /// [`crate::session::HOST_PAGES_BYTES_MAX`].
        limit_bytes: u64,
    },
    /// A program name the package does not have.
    #[error("no program named {name:?} in the package (known: {known})")]
    UnknownProgram {
        /// The name asked for.
        name: String,
        /// The package's programs, comma-separated.
        known: String,
    },
    /// A tensor name the package does not have.
    #[error("no host tensor named {name:?} in the package (known: {known})")]
    UnknownTensor {
        /// The name asked for.
        name: String,
        /// The package's tensors, comma-separated.
        known: String,
    },
    /// A dense tensor of the wrong size.
    #[error("tensor {name:?}: expected {expected_bytes} bytes, given {given_bytes}")]
    TensorSize {
        /// The tensor.
        name: String,
        /// Bytes of the dense row-major tensor.
        expected_bytes: u64,
        /// Bytes given.
        given_bytes: u64,
    },
    /// An output written as if it were an input.
    #[error("tensor {name:?} is an output: the host does not write it")]
    NotAnInput {
        /// The tensor.
        name: String,
    },
    /// A tensor whose layout in the package is inconsistent.
    #[error("tensor {name:?}: {reason}")]
    TensorLayout {
        /// The tensor.
        name: String,
        /// Why.
        reason: String,
    },
    /// Host tensors used before `start_host_exchange`.
    #[error("the host exchange session is not started")]
    HostExchangeNotStarted,
    /// A call before any tile image was loaded.
    #[error("no application is loaded on the device")]
    NotLoaded,
    /// The device faulted during a call.
    #[error("call {program:?} failed: {fault}")]
    Fault {
        /// The program called.
        program: String,
        /// The fault.
        fault: Box<DeviceFault>,
    },
    /// The simulated device refused a host access or a run.
    #[error("device error: {0}")]
    Simulator(ipu_sim::SimError),
    /// A configuration register written after tile images were loaded.
    #[error("tile {tile}: configuration register {register} written after loading started")]
    ConfigAfterLoad {
        /// The tile.
        tile: u32,
        /// The register.
        register: u32,
    },
    /// The host could not allocate a host page.
    #[error("host page of {bytes} bytes could not be allocated")]
    HostPageAllocation {
        /// The page's bytes.
        bytes: u64,
    },
    /// Writing a file failed.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
}

impl RuntimeError {
    /// The device fault, if this is one.
    pub fn fault(&self) -> Option<&DeviceFault> {
        match self {
            RuntimeError::Fault { fault, .. } => Some(fault),
            _ => None,
        }
    }
}

// Not `#[from]`: that would make the device error the source as well, and error chains would
// print it twice.
impl From<ipu_sim::SimError> for RuntimeError {
    fn from(e: ipu_sim::SimError) -> Self {
        RuntimeError::Simulator(e)
    }
}
