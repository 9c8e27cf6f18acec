//! A session: a package loaded on a device, its host exchange, and calls by program name.

use std::path::Path;
use std::time::Instant;

use ipu_package::{HostTensor, Package, TensorRole};
use serde::{Deserialize, Serialize};
use tracing::info;

use crate::RuntimeError;
use crate::device::{CallLimits, Device, DeviceCounters};
use crate::layout::{dense_to_storage, storage_to_dense, tensor_sizes};
use crate::lock::DeviceLock;
use crate::profile::{PROFILE_FORMAT_VERSION, Profile};

/// Name of the program every package has: the initial bulk-synchronous sync of every active
/// tile, run once when the application is loaded.
pub const STARTUP_PROGRAM: &str = "startup";

/// Largest total of host page bytes a session attaches: 4 GiB, far beyond the inputs and
/// outputs of any model that fits on a chip (900 MiB of tile memory), small enough that a
/// corrupt manifest cannot make the host allocate without bound.
pub const HOST_PAGES_BYTES_MAX: u64 = 1 << 32;

/// What one call did.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CallReport {
    /// The program's name.
    pub program: String,
    /// The program's index in the package (the command number).
    pub command: usize,
    /// The bulk-synchronous phases the package declares for the program.
    pub phases: u32,
    /// Device counters of the call.
    #[serde(flatten)]
    pub counters: DeviceCounters,
    /// Device time of the call in nanoseconds: cycles at the target's clock.
    pub device_time_ns: u64,
    /// Host wall-clock time of the call in microseconds (simulation time on the simulator).
    pub host_elapsed_us: u64,
}

/// How to open a session.
#[derive(Debug, Default)]
pub struct SessionOptions {
    /// Bounds on every call.
    pub limits: CallLimits,
    /// Ownership of the device, held until the session is dropped.
    pub ownership: Option<DeviceLock>,
}

/// A package loaded on a device.
pub struct Session<'p> {
    device: Box<dyn Device>,
    package: &'p Package,
    limits: CallLimits,
    ownership: Option<DeviceLock>,
    host_started: bool,
    calls: Vec<CallReport>,
}

impl std::fmt::Debug for Session<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("device", &self.device.name())
            .field("model", &self.package.manifest.model)
            .field("host_started", &self.host_started)
            .field("calls", &self.calls.len())
            .finish()
    }
}

fn names<'a>(it: impl Iterator<Item = &'a str>) -> String {
    let v: Vec<&str> = it.collect();
    if v.is_empty() {
        "none".into()
    } else {
        v.join(", ")
    }
}

impl<'p> Session<'p> {
    /// Opens a session with default options: see [`Session::open_with`].
    pub fn open(
        device: Box<dyn Device>,
        package: &'p Package,
    ) -> Result<Session<'p>, RuntimeError> {
        Session::open_with(device, package, SessionOptions::default())
    }

    /// Checks the package against the device, then initialises the device, replays the
    /// package's configuration register writes, loads every tile image and runs the
    /// [`STARTUP_PROGRAM`] (the initial sync).
    pub fn open_with(
        device: Box<dyn Device>,
        package: &'p Package,
        options: SessionOptions,
    ) -> Result<Session<'p>, RuntimeError> {
        // Everything about the package is checked before the device is touched.
        let target = *device.target();
        let m = &package.manifest;
        if m.target != target.kind.name() {
            return Err(RuntimeError::WrongTarget {
                package: m.target.clone(),
                device: target.kind.name().into(),
            });
        }
        package.validate()?;
        let mut session = Session {
            device,
            package,
            limits: options.limits,
            ownership: options.ownership,
            host_started: false,
            calls: Vec::new(),
        };
        session.program_index(STARTUP_PROGRAM)?;
        for t in &m.tensors {
            tensor_sizes(t)?;
        }
        let page_bytes = m.host_pages.iter().fold(0u64, |a, &b| a.saturating_add(b));
        if page_bytes > HOST_PAGES_BYTES_MAX {
            return Err(RuntimeError::HostPagesTooLarge {
                bytes: page_bytes,
                limit_bytes: HOST_PAGES_BYTES_MAX,
            });
        }

        let device = &mut session.device;
        info!(
            device = %device.name(),
            target = %target.kind,
            "opening IPU device"
        );
        info!("IPU device attached");
        info!("initializing IPU device");
        device.initialize()?;
        info!("IPU device initialized");
        info!(
            register_writes = m.register_writes.len(),
            "replaying device configuration"
        );
        for w in &m.register_writes {
            device.write_config(w.tile, w.register, w.value)?;
        }
        let tile_count = package.tiles.len();
        info!(tile_count, "loading application");
        // Each tile's image is expanded from its shared image and patches as it is loaded,
        // one at a time: the package stays in its shared form.
        for (tile, image) in package.tiles.iter().enumerate() {
            device.load_tile(tile as u32, &image)?;
        }
        let active = device.active_tiles().unwrap_or(0);
        if active != m.tiles_used {
            return Err(RuntimeError::ActiveTilesMismatch {
                device: active,
                package: m.tiles_used,
            });
        }
        session.run(STARTUP_PROGRAM)?;
        info!(
            tile_count,
            "application loaded and initial synchronization completed"
        );
        Ok(session)
    }

    /// The device.
    pub fn device(&self) -> &dyn Device {
        self.device.as_ref()
    }

    /// The package.
    pub fn package(&self) -> &'p Package {
        self.package
    }

    /// The device lock the session holds, if any.
    pub fn ownership(&self) -> Option<&DeviceLock> {
        self.ownership.as_ref()
    }

    /// Every call so far, the startup call first.
    pub fn calls(&self) -> &[CallReport] {
        &self.calls
    }

    fn program_index(&self, name: &str) -> Result<usize, RuntimeError> {
        let programs = &self.package.manifest.programs;
        position_by_name(
            programs,
            name,
            |p| &p.name,
            |name, known| RuntimeError::UnknownProgram { name, known },
        )
    }

    fn tensor(&self, name: &str) -> Result<&'p HostTensor, RuntimeError> {
        let tensors = &self.package.manifest.tensors;
        let i = position_by_name(
            tensors,
            name,
            |t| &t.name,
            |name, known| RuntimeError::UnknownTensor { name, known },
        )?;
        Ok(&tensors[i])
    }

    /// Attaches host pages of the manifest's sizes: zeroed, but for the constants page, which
    /// holds the package's constants for `initialize` to write onto the tiles.
    pub fn start_host_exchange(&mut self) -> Result<(), RuntimeError> {
        info!("starting host exchange session");
        let manifest = &self.package.manifest;
        let sizes = &manifest.host_pages;
        info!(pages = sizes.len(), "attaching host exchange pages");
        let constants_page = manifest
            .tensors
            .iter()
            .find(|t| t.role == TensorRole::Constant)
            .map(|t| t.page as usize);
        let mut pages = Vec::with_capacity(sizes.len());
        for (i, &bytes) in sizes.iter().enumerate() {
            // Bounded by HOST_PAGES_BYTES_MAX at open; still fail softly if memory is short.
            let mut page = Vec::new();
            page.try_reserve_exact(bytes as usize)
                .map_err(|_| RuntimeError::HostPageAllocation { bytes })?;
            if constants_page == Some(i) {
                // Package::validate checked that the constants fill this page exactly.
                page.extend_from_slice(&self.package.constants);
                info!(
                    bytes,
                    tensors = manifest
                        .tensors
                        .iter()
                        .filter(|t| t.role == TensorRole::Constant)
                        .count(),
                    "constants page filled from the package"
                );
            }
            page.resize(bytes as usize, 0u8);
            pages.push(page);
        }
        self.device.attach_host_pages(pages)?;
        self.host_started = true;
        info!("host exchange session started");
        Ok(())
    }

    /// Writes the input `name` from a dense row-major tensor (elements in the tensor's dtype,
    /// little-endian) into its host page, in the tensor's storage order.
    pub fn write_input(&mut self, name: &str, dense: &[u8]) -> Result<(), RuntimeError> {
        let tensor = self.tensor(name)?;
        if tensor.role != TensorRole::Input {
            return Err(RuntimeError::NotAnInput { name: name.into() });
        }
        if !self.host_started {
            return Err(RuntimeError::HostExchangeNotStarted);
        }
        let storage = dense_to_storage(tensor, dense)?;
        let page = self.page_range(tensor)?;
        let pages = self.device.host_pages_mut();
        pages[tensor.page as usize][page].copy_from_slice(&storage);
        Ok(())
    }

    /// Reads the tensor `name` (usually an output) from its host page as a dense row-major
    /// tensor.
    pub fn read_output(&self, name: &str) -> Result<Vec<u8>, RuntimeError> {
        let tensor = self.tensor(name)?;
        if !self.host_started {
            return Err(RuntimeError::HostExchangeNotStarted);
        }
        let range = self.page_range(tensor)?;
        storage_to_dense(
            tensor,
            &self.device.host_pages()[tensor.page as usize][range],
        )
    }

    fn page_range(&self, t: &HostTensor) -> Result<std::ops::Range<usize>, RuntimeError> {
        let pages = self.device.host_pages();
        let page = pages
            .get(t.page as usize)
            .ok_or_else(|| RuntimeError::TensorLayout {
                name: t.name.clone(),
                reason: format!("page {} is not attached ({} pages)", t.page, pages.len()),
            })?;
        let (start, end) = (t.offset, t.offset + t.bytes);
        if end > page.len() as u64 {
            return Err(RuntimeError::TensorLayout {
                name: t.name.clone(),
                reason: format!(
                    "ends at {end} beyond page {} of {} bytes",
                    t.page,
                    page.len()
                ),
            });
        }
        Ok(start as usize..end as usize)
    }

    /// Calls the program `name` and returns what it cost.
    pub fn call(&mut self, name: &str) -> Result<CallReport, RuntimeError> {
        let command = self.program_index(name)?;
        let phases = self.package.manifest.programs[command].phases;
        info!(call = ?name, command, phases, "invoking host exchange call");
        self.run(name)
    }

    fn run(&mut self, name: &str) -> Result<CallReport, RuntimeError> {
        let command = self.program_index(name)?;
        let program = &self.package.manifest.programs[command];
        let start = Instant::now();
        let counters = self
            .device
            .call(program.entry, &self.limits)
            .map_err(|e| match e {
                RuntimeError::Fault { fault, .. } => RuntimeError::Fault {
                    program: name.into(),
                    fault,
                },
                other => other,
            })?;
        let report = CallReport {
            program: name.into(),
            command,
            phases: program.phases,
            counters,
            device_time_ns: (counters.cycles as u128 * 1_000_000_000
                / self.device.target().clock_hz.max(1) as u128) as u64,
            host_elapsed_us: start.elapsed().as_micros() as u64,
        };
        self.calls.push(report.clone());
        Ok(report)
    }

    /// The profile so far: per-tile counters, the calls and the device's samples.
    pub fn profile(&self) -> Profile {
        let target = self.device.target();
        Profile {
            format_version: PROFILE_FORMAT_VERSION,
            model: self.package.manifest.model.clone(),
            target: target.kind.name().into(),
            device: self.device.name().into(),
            clock_hz: target.clock_hz,
            tiles: self.device.counters(),
            calls: self.calls.clone(),
            samples: self.device.profile_samples(),
            marks: self.device.profile_marks(),
            entry_conflicts: self.device.conflicts_by_entry(),
        }
    }

    /// Writes the profile as JSON to `path` (atomically) and returns it, for its figures.
    pub fn write_profile(&self, path: &Path) -> Result<Profile, RuntimeError> {
        let profile = self.profile();
        profile.write(path)?;
        Ok(profile)
    }
}

/// The position of the item of `items` called `name`, or the error `unknown` makes of the name
/// and the known names.
fn position_by_name<T>(
    items: &[T],
    name: &str,
    item_name: impl Fn(&T) -> &str,
    unknown: impl FnOnce(String, String) -> RuntimeError,
) -> Result<usize, RuntimeError> {
    items
        .iter()
        .position(|item| item_name(item) == name)
        .ok_or_else(|| unknown(name.into(), names(items.iter().map(&item_name))))
}
