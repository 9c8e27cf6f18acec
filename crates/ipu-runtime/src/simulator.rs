//! The embedded default device: the simulator of `ipu-sim` behind the [`Device`] trait.
//!
//! The simulator has no configuration registers of its own; this device collects the writes
//! and enforces them: `TILE_ACTIVE` tiles must be a prefix `0..n` (the simulator is created
//! with `n` active tiles when loading starts), `EXCHANGE_ID` must equal the tile's index, and
//! `HOST_WINDOW_BYTES` bounds the host pages that may be attached.

use ipu_package::TileImage;
use ipu_sim::{RunLimits, SimError};
use ipu_target::{Target, config};

use crate::RuntimeError;
use crate::device::{
    CallLimits, Device, DeviceCounters, EntryConflicts, ProfileMark, ProfileSample, TileCounters,
};

/// The simulator as a [`Device`].
pub struct SimulatorDevice {
    target: Target,
    /// `TILE_ACTIVE` per tile.
    active: Vec<bool>,
    /// `HOST_WINDOW_BYTES` per tile.
    host_windows: Vec<u64>,
    /// Created when loading starts.
    sim: Option<ipu_sim::Device>,
}

impl std::fmt::Debug for SimulatorDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SimulatorDevice")
            .field("target", &self.target.kind)
            .field("loaded", &self.sim.is_some())
            .finish()
    }
}

impl SimulatorDevice {
    /// What `read` gives of the loaded device; nothing before a package is loaded.
    fn read_loaded<T>(&self, read: impl FnOnce(&ipu_sim::Device) -> Vec<T>) -> Vec<T> {
        self.sim.as_ref().map(read).unwrap_or_default()
    }

    /// A simulated device of `target`, unconfigured.
    pub fn new(target: Target) -> SimulatorDevice {
        SimulatorDevice {
            target,
            active: vec![false; target.tiles as usize],
            host_windows: vec![0; target.tiles as usize],
            sim: None,
        }
    }

    /// The simulator, once loading has started.
    pub fn simulator(&self) -> Option<&ipu_sim::Device> {
        self.sim.as_ref()
    }

    /// The largest host window any active tile was configured with.
    pub fn host_window_bytes(&self) -> u64 {
        self.active
            .iter()
            .zip(&self.host_windows)
            .filter(|(a, _)| **a)
            .map(|(_, w)| *w)
            .max()
            .unwrap_or(0)
    }

    /// Checks the collected configuration and returns the number of active tiles.
    fn active_prefix(&self) -> Result<u32, RuntimeError> {
        let n = self.active.iter().take_while(|a| **a).count() as u32;
        if let Some(t) = self.active.iter().skip(n as usize).position(|a| *a) {
            return Err(RuntimeError::ActiveTilesNotPrefix {
                tile: n + t as u32,
                gap: n,
            });
        }
        if n == 0 {
            return Err(RuntimeError::NoActiveTiles);
        }
        Ok(n)
    }
}

fn sim_error(e: SimError) -> RuntimeError {
    match e {
        SimError::Fault(f) => RuntimeError::Fault {
            program: String::new(),
            fault: Box::new(f),
        },
        other => RuntimeError::Simulator(other),
    }
}

fn tile_counters(tile: u32, c: &ipu_sim::TileCounters) -> TileCounters {
    TileCounters {
        tile,
        cycles: c.cycles,
        compute_cycles: c.compute_cycles,
        exchange_cycles: c.exchange_cycles,
        host_exchange_cycles: c.host_exchange_cycles,
        host_to_device_cycles: c.host_to_device_cycles,
        device_to_host_cycles: c.device_to_host_cycles,
        sync_cycles: c.sync_cycles,
        instructions: c.instructions(),
        worker_instructions: c.worker_instructions,
        worker_launches: c.worker_launches,
        worker_busy_cycles: c.worker_busy_cycles,
        bank_conflicts: c.bank_conflicts,
    }
}

impl Device for SimulatorDevice {
    fn name(&self) -> &str {
        "simulator"
    }

    fn target(&self) -> &Target {
        &self.target
    }

    fn initialize(&mut self) -> Result<(), RuntimeError> {
        *self = SimulatorDevice::new(self.target);
        Ok(())
    }

    fn write_config(&mut self, tile: u32, register: u32, value: u32) -> Result<(), RuntimeError> {
        if tile >= self.target.tiles {
            return Err(RuntimeError::NoSuchTile {
                tile,
                register,
                tiles: self.target.tiles,
            });
        }
        if self.sim.is_some() {
            return Err(RuntimeError::ConfigAfterLoad { tile, register });
        }
        match register {
            config::TILE_ACTIVE => {
                if value > 1 {
                    return Err(RuntimeError::BadRegisterValue {
                        tile,
                        register,
                        value,
                        reason: "TILE_ACTIVE is 0 or 1",
                    });
                }
                self.active[tile as usize] = value == 1;
            }
            config::EXCHANGE_ID => {
                if value != tile {
                    return Err(RuntimeError::ExchangeIdMismatch { tile, id: value });
                }
            }
            config::HOST_WINDOW_BYTES => self.host_windows[tile as usize] = value as u64,
            _ => {
                return Err(RuntimeError::UnknownRegister {
                    tile,
                    register,
                    value,
                });
            }
        }
        Ok(())
    }

    fn load_tile(&mut self, tile: u32, image: &TileImage) -> Result<(), RuntimeError> {
        let sim = match &mut self.sim {
            Some(sim) => sim,
            None => {
                let n = self.active_prefix()?;
                self.sim.insert(ipu_sim::Device::new(self.target, n))
            }
        };
        for s in &image.segments {
            sim.write(tile, s.address, &s.bytes).map_err(sim_error)?;
        }
        let ranges: Vec<(u32, u32)> = image
            .segments
            .iter()
            .map(|s| (s.address, s.bytes.len() as u32))
            .collect();
        sim.share_code(tile, &ranges).map_err(sim_error)?;
        Ok(())
    }

    fn active_tiles(&self) -> Option<u32> {
        self.sim.as_ref().map(|s| s.active_tiles())
    }

    fn attach_host_pages(&mut self, pages: Vec<Vec<u8>>) -> Result<(), RuntimeError> {
        let window = self.host_window_bytes();
        let Some(sim) = &mut self.sim else {
            return Err(RuntimeError::NotLoaded);
        };
        let needed: u64 = pages.iter().map(|p| p.len() as u64).sum();
        if needed > window {
            return Err(RuntimeError::HostWindow {
                needed_bytes: needed,
                window_bytes: window,
            });
        }
        sim.attach_host_pages(pages);
        Ok(())
    }

    fn host_pages(&self) -> &[Vec<u8>] {
        match &self.sim {
            Some(sim) => sim.host_pages(),
            None => &[],
        }
    }

    fn host_pages_mut(&mut self) -> &mut [Vec<u8>] {
        match &mut self.sim {
            Some(sim) => sim.host_pages_mut(),
            None => &mut [],
        }
    }

    fn call(&mut self, entry: u32, limits: &CallLimits) -> Result<DeviceCounters, RuntimeError> {
        let sim = self.sim.as_mut().ok_or(RuntimeError::NotLoaded)?;
        let limits = RunLimits {
            max_cycles: limits.cycles_max,
            max_global_steps: limits.global_steps_max,
        };
        let r = sim.run(entry, &limits).map_err(sim_error)?;
        Ok(DeviceCounters {
            cycles: r.cycles,
            compute_cycles: r.compute_cycles,
            exchange_cycles: r.exchange_cycles,
            sync_cycles: r.sync_cycles,
            host_exchange_cycles: r.host_exchange_cycles,
            host_to_device_cycles: r.host_to_device_cycles,
            device_to_host_cycles: r.device_to_host_cycles,
            instructions: r.instructions,
            worker_instructions: r.worker_instructions,
            bank_conflicts: r.bank_conflicts,
            global_steps: r.global_steps as u64,
            critical_tile: r.critical_tile,
        })
    }

    fn read(&self, tile: u32, address: u32, len: u32) -> Result<Vec<u8>, RuntimeError> {
        let sim = self.sim.as_ref().ok_or(RuntimeError::NotLoaded)?;
        sim.read(tile, address, len).map_err(sim_error)
    }

    fn counters(&self) -> Vec<TileCounters> {
        self.read_loaded(|sim| {
            let n = sim.active_tiles() as usize;
            sim.counters()[..n]
                .iter()
                .enumerate()
                .map(|(t, c)| tile_counters(t as u32, c))
                .collect()
        })
    }

    fn profile_samples(&self) -> Vec<ProfileSample> {
        self.read_loaded(|sim| {
            let sample = |r: &ipu_sim::ProfileRecord| ProfileSample {
                step: r.step,
                kind: r.kind.to_string(),
                counters: tile_counters(r.tile, &r.counters),
            };
            sim.profile().iter().map(sample).collect()
        })
    }

    fn conflicts_by_entry(&self) -> Vec<EntryConflicts> {
        self.read_loaded(|sim| {
            sim.conflicts_by_entry()
                .into_iter()
                .map(|(entry, conflicts)| EntryConflicts { entry, conflicts })
                .collect()
        })
    }

    fn profile_marks(&self) -> Vec<ProfileMark> {
        self.read_loaded(|sim| {
            let mark = |m: &ipu_sim::ProfileMark| ProfileMark {
                tile: m.tile,
                cycle: m.cycle,
                id: m.id,
            };
            sim.marks().iter().map(mark).collect()
        })
    }
}
