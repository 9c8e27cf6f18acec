//! The host's view of an IPU: the [`Device`] trait and the types it speaks.
//!
//! A device is configured (register writes), loaded (one image per tile), given host pages, and
//! called at a supervisor entry address. The simulator ([`crate::SimulatorDevice`]) is the
//! embedded default; a hardware device would implement the same trait.

use ipu_package::TileImage;
use ipu_target::Target;
use serde::{Deserialize, Serialize};

use crate::RuntimeError;

/// Default bound on the cycles of one call: 2^32 tile cycles, about 3.2 s of device time at
/// GC200's 1.33 GHz. Far beyond any program the compiler emits (a 2048x2048x2048 f32 matmul
/// at half of peak needs under 10^6 cycles); it turns a program that never halts into an error
/// instead of a hang.
pub const CALL_CYCLES_MAX: u64 = 1 << 32;

/// Default bound on the bulk-synchronous steps (syncs, exchanges, host-exchange points) of one
/// call: 2^20, far beyond the phases of any compiled program (the seeds' largest have 70).
pub const CALL_GLOBAL_STEPS_MAX: u32 = 1 << 20;

/// Bounds on one call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct CallLimits {
    /// Most tile cycles the call may take.
    pub cycles_max: u64,
    /// Most bulk-synchronous steps the call may take.
    pub global_steps_max: u32,
}

impl Default for CallLimits {
    fn default() -> Self {
        CallLimits {
            cycles_max: CALL_CYCLES_MAX,
            global_steps_max: CALL_GLOBAL_STEPS_MAX,
        }
    }
}

/// What one call cost on the device. Cycle figures are the slowest tile's (the chip's time).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct DeviceCounters {
    /// Tile cycles from the call to the last tile's halt.
    pub cycles: u64,
    /// Cycles spent computing.
    pub compute_cycles: u64,
    /// Cycles spent in exchange phases (including host exchange).
    pub exchange_cycles: u64,
    /// Cycles spent waiting in syncs.
    pub sync_cycles: u64,
    /// The part of `exchange_cycles` spent at host-exchange points.
    #[serde(default)]
    pub host_exchange_cycles: u64,
    /// The part of `host_exchange_cycles` at points that only move bytes from the host pages
    /// into tile memory (the inputs).
    #[serde(default)]
    pub host_to_device_cycles: u64,
    /// The part of `host_exchange_cycles` at points that only move bytes from tile memory into
    /// the host pages (the outputs). A point moving bytes both ways, or none, counts in neither
    /// part.
    #[serde(default)]
    pub device_to_host_cycles: u64,
    /// Instructions issued, all tiles and contexts.
    pub instructions: u64,
    /// The part of `instructions` the worker contexts issued.
    #[serde(default)]
    pub worker_instructions: u64,
    /// Bank conflicts, all tiles: loads of one issue beyond the first from one memory
    /// element, each costing its context a barrel slot (`ipu_target::BANK_CONFLICT_SLOTS`).
    #[serde(default)]
    pub bank_conflicts: u64,
    /// Bulk-synchronous steps the call went through (the final `halt` included).
    pub global_steps: u64,
    /// The tile whose cycles are reported (the slowest).
    pub critical_tile: u32,
}

/// Counters of one tile, accumulated over every call since loading.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct TileCounters {
    /// The tile.
    pub tile: u32,
    /// Tile cycles.
    pub cycles: u64,
    /// Cycles computing.
    pub compute_cycles: u64,
    /// Cycles in exchange phases (host exchange included).
    pub exchange_cycles: u64,
    /// The part of `exchange_cycles` spent at host-exchange points.
    pub host_exchange_cycles: u64,
    /// The part of `host_exchange_cycles` at points that only move bytes into tile memory.
    #[serde(default)]
    pub host_to_device_cycles: u64,
    /// The part of `host_exchange_cycles` at points that only move bytes into the host pages.
    #[serde(default)]
    pub device_to_host_cycles: u64,
    /// Cycles in syncs (waiting for the slowest tile, plus the sync itself).
    pub sync_cycles: u64,
    /// Instructions issued on the tile (all contexts).
    pub instructions: u64,
    /// Instructions issued by workers.
    pub worker_instructions: u64,
    /// Worker launches.
    pub worker_launches: u64,
    /// Sum over worker launches of their running cycles (occupancy: this over the worker
    /// contexts times the compute cycles).
    #[serde(default)]
    pub worker_busy_cycles: u64,
    /// Bank conflicts on the tile (see [`DeviceCounters::bank_conflicts`]).
    #[serde(default)]
    pub bank_conflicts: u64,
}

/// One sampled profile record: a tile's counters when it arrived at a bulk-synchronous step.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProfileSample {
    /// Index of the step since loading.
    pub step: u32,
    /// The step: `sync`, `exch`, `hostx` or `halt`.
    pub kind: String,
    /// The tile's counters on arrival (before the step's own cost).
    #[serde(flatten)]
    pub counters: TileCounters,
}

/// A profile mark a tile's program recorded (`mark ID`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProfileMark {
    /// The tile.
    pub tile: u32,
    /// The tile's cycle counter when the mark issued.
    pub cycle: u64,
    /// The mark's id.
    pub id: u16,
}

/// A fault the device reported: where (tile, context, pc, instruction, address) and why, as
/// the simulator reports it.
pub use ipu_sim::Fault as DeviceFault;

/// The host's view of an IPU.
///
/// Order of use: [`Device::initialize`], [`Device::write_config`] for every register write,
/// [`Device::load_tile`] for every tile, [`Device::attach_host_pages`], then any number of
/// [`Device::call`]s. The trait is object-safe: sessions hold a `Box<dyn Device>`; devices are
/// `Send` so that a session can move to another thread.
pub trait Device: Send {
    /// A short name for logs and reports (`simulator`).
    fn name(&self) -> &str;

    /// The target the device is.
    fn target(&self) -> &Target;

    /// Resets the device: no configuration, nothing loaded, no host pages.
    fn initialize(&mut self) -> Result<(), RuntimeError>;

    /// Writes a configuration register of a tile (see `ipu_target::config`).
    fn write_config(&mut self, tile: u32, register: u32, value: u32) -> Result<(), RuntimeError>;

    /// Loads a tile image into a tile's memory. The first load ends configuration.
    fn load_tile(&mut self, tile: u32, image: &TileImage) -> Result<(), RuntimeError>;

    /// Tiles taking part in calls, once loading has started.
    fn active_tiles(&self) -> Option<u32>;

    /// Attaches the host exchange pages, replacing any attached before.
    fn attach_host_pages(&mut self, pages: Vec<Vec<u8>>) -> Result<(), RuntimeError>;

    /// The attached host pages.
    fn host_pages(&self) -> &[Vec<u8>];

    /// The attached host pages, writable.
    fn host_pages_mut(&mut self) -> &mut [Vec<u8>];

    /// Runs every active tile's supervisor from `entry` until all halt.
    fn call(&mut self, entry: u32, limits: &CallLimits) -> Result<DeviceCounters, RuntimeError>;

    /// Reads tile memory.
    fn read(&self, tile: u32, address: u32, len: u32) -> Result<Vec<u8>, RuntimeError>;

    /// Per-tile counters of the active tiles, accumulated since loading.
    fn counters(&self) -> Vec<TileCounters>;

    /// The device's sampled records since loading, in the order they were taken.
    fn profile_samples(&self) -> Vec<ProfileSample>;

    /// The marks the programs recorded since loading, in the order they were taken.
    fn profile_marks(&self) -> Vec<ProfileMark>;

    /// Bank conflicts since loading per worker entry address (the kernel), all tiles, in
    /// address order; `u32::MAX` stands for the supervisors. A device that does not count
    /// them reports none.
    fn conflicts_by_entry(&self) -> Vec<EntryConflicts> {
        Vec::new()
    }
}

/// Bank conflicts attributed to the code entered at one address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct EntryConflicts {
    /// The worker entry address (`u32::MAX`: the supervisors).
    pub entry: u32,
    /// Conflicts, all tiles.
    pub conflicts: u64,
}
