//! The simulated IPU: tile memories, contexts, instruction semantics, cycle accounting, the
//! exchange engine, BSP sync, host exchange pages and profile counters.
//!
//! # The model
//!
//! - **Memory**: every tile has memory at the real addresses `[memory_base, memory_end)`,
//!   mapped on first write and zero-filled by the host as its pages are touched (an idle tile
//!   costs nothing). Code is fetched from tile memory, decoded with `ipu_isa::decode_slot` and
//!   cached per pc; stores into the executable range invalidate the cache. Paced `rpt` bodies
//!   and straight runs of slots that only compute take faster paths that give the same
//!   results, counters and faults (`exec::streams`, `exec::blocks`).
//! - **Timing**: every issue slot (an instruction or a co-issued bundle) of a worker costs one
//!   barrel slot, `Target::barrel_slot_cycles` (6) tile cycles; transcendental helpers
//!   (`exp`, `rcp`, `sqrt`, `rsqrt`) cost two. `rpt` bodies run with no overhead beyond the `rpt`
//!   itself. The supervisor is modelled the same way: one barrel slot per instruction, except
//!   `ampw`, which costs one slot plus `bytes / AMP_WEIGHT_LOAD_BYTES_PER_CYCLE` cycles. `run`
//!   starts a worker at the supervisor's current time (waiting for the earliest-finishing
//!   worker when all six are busy); `waitw` advances the supervisor to the latest worker
//!   finish. A compute phase therefore lasts as long as its slowest worker plus the
//!   supervisor's own instructions.
//! - **Workers** are simulated to completion when launched, in launch order; they share the
//!   tile's memory. Two workers whose lifetimes overlap (launched in the same `run`..`waitw`
//!   window) must not write the same bytes, nor may one read bytes the other writes: this is
//!   checked at `waitw` (or the next global instruction) and reported as
//!   [`FaultKind::WorkerRace`]. The supervisor's own accesses in the window are checked the
//!   same way against the workers running when it issued them (it may write a vertex state
//!   before the `run` that uses it, and read results after `waitw`). A worker that touches more
//!   than [`RACE_RANGES_MAX`] disjoint ranges is not checked (a warning says so).
//! - **BSP**: every tile runs its supervisor until it reaches a global instruction (`sync`,
//!   `exch`, `hostx`, `halt`); all active tiles must reach the same kind. Workers must have
//!   finished by then ([`FaultKind::WorkersRunning`]). Waiting for the slowest tile is counted
//!   as sync cycles; `sync` then costs `Target::sync_cycles`; `exch` costs
//!   `EXCHANGE_PHASE_OVERHEAD_CYCLES + horizon` (exchange cycles); `hostx` costs
//!   `HOST_EXCHANGE_OVERHEAD_CYCLES + bytes / HOST_EXCHANGE_BYTES_PER_CYCLE` for the bytes of
//!   all tiles, counted as exchange cycles and also reported separately in
//!   [`TileCounters::host_exchange_cycles`], and by direction in
//!   [`TileCounters::host_to_device_cycles`] and [`TileCounters::device_to_host_cycles`].
//!   `halt` ends the run on a tile without a barrier.
//! - **Determinism**: tiles run in parallel (rayon) between global steps; each tile's
//!   simulation depends only on its own state, and every cross-tile step is serial in tile
//!   order, so results are bit-identical at any thread count.
//!
//! Every hardware rule violation is a [`Fault`] naming tile, context, pc, instruction and
//! address; nothing the program does can panic the simulator.

pub mod bench;
mod exchange;
mod exec;
mod fault;
mod memory;
mod simd;

use rayon::prelude::*;

pub use exec::{RACE_RANGES_MAX, eval_float};
/// f16 bits to f32 (exact) and f32 to f16 bits (round to nearest even): the conversions the
/// device uses, equal to the `half` crate's for every input (tested).
pub fn f16_bits_to_f32(bits: u16) -> f32 {
    exec::h(bits as u32)
}

/// See [`f16_bits_to_f32`].
pub fn f32_to_f16_bits(x: f32) -> u16 {
    exec::to_h(x) as u16
}

pub use fault::{
    Context, ExchangeFault, Fault, FaultKind, GlobalKind, HostExchangeFault, RowSide, SimError,
};
pub use ipu_target::Target;
pub use memory::PAGE_BYTES;

use exec::{Arrival, Tile};

const _: () = assert!(ipu_target::BARREL_SLOT_CYCLES as u64 == exec::SLOT);

/// Default cycle limit of a run: 2^32 tile cycles (about 3 s of device time at 1.33 GHz).
pub const DEFAULT_MAX_CYCLES: u64 = 1 << 32;
/// Default profile sampling: a record per tile at every global step.
pub const DEFAULT_PROFILE_EVERY: u32 = 1;
/// Default limit of global steps (sync, exchange, host exchange) in one run.
pub const DEFAULT_MAX_GLOBAL_STEPS: u32 = 1 << 20;

static INTERRUPTED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Asks every simulation of this process to stop: each tile stops within
/// [`INTERRUPT_POLL`] instructions with an [`FaultKind::Interrupted`] fault. Safe to call from a
/// signal handler's thread.
pub fn interrupt() {
    INTERRUPTED.store(true, std::sync::atomic::Ordering::Relaxed);
}

/// Whether [`interrupt`] was called.
pub fn interrupted() -> bool {
    INTERRUPTED.load(std::sync::atomic::Ordering::Relaxed)
}

/// Instructions a tile context executes between two looks at the interrupt flag (about a
/// millisecond of simulation).
pub const INTERRUPT_POLL: u64 = 1 << 16;

/// Bounds on a run: exceeding either is a fault, so every run terminates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunLimits {
    /// Cycles each tile may spend in this run.
    pub max_cycles: u64,
    /// Global steps the run may take.
    pub max_global_steps: u32,
}

impl Default for RunLimits {
    fn default() -> Self {
        RunLimits {
            max_cycles: DEFAULT_MAX_CYCLES,
            max_global_steps: DEFAULT_MAX_GLOBAL_STEPS,
        }
    }
}

/// Per-tile counters, accumulated over every run of the device.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TileCounters {
    /// The tile's cycle counter: `compute + exchange + sync`.
    pub cycles: u64,
    /// Cycles between global steps (supervisor and workers).
    pub compute_cycles: u64,
    /// Cycles in exchange phases and host-exchange points.
    pub exchange_cycles: u64,
    /// The part of `exchange_cycles` spent at host-exchange points.
    pub host_exchange_cycles: u64,
    /// The part of `host_exchange_cycles` spent at points that move bytes only from host pages
    /// into tile memory (a program's inputs).
    pub host_to_device_cycles: u64,
    /// The part of `host_exchange_cycles` spent at points that move bytes only from tile memory
    /// into host pages (a program's outputs). A point moving bytes both ways, or none, counts
    /// in neither part.
    pub device_to_host_cycles: u64,
    /// Cycles waiting for the slowest tile at global steps, plus the sync cost.
    pub sync_cycles: u64,
    /// Worker instructions issued (a bundle counts 2).
    pub worker_instructions: u64,
    /// Supervisor instructions issued (a bundle counts 2).
    pub supervisor_instructions: u64,
    /// Worker issue slots (a bundle counts 1, a transcendental 2), with the slots lost to bank
    /// conflicts (`ipu_target::BANK_CONFLICT_SLOTS` each).
    pub worker_slots: u64,
    /// Supervisor issue slots, with the slots lost to bank conflicts.
    pub supervisor_slots: u64,
    /// Bank conflicts: loads of one issue beyond the first from one memory element
    /// (`ipu_target::Target::bank_conflicts`), all contexts.
    pub bank_conflicts: u64,
    /// Sum over worker launches of their running cycles.
    pub worker_busy_cycles: u64,
    /// Worker launches (`run`).
    pub worker_launches: u64,
}

impl TileCounters {
    /// All instructions issued.
    pub fn instructions(&self) -> u64 {
        self.worker_instructions + self.supervisor_instructions
    }
}

/// A profile mark (`mark id`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProfileMark {
    /// The tile.
    pub tile: u32,
    /// The tile cycle when the mark issued.
    pub cycle: u64,
    /// The mark's id.
    pub id: u16,
}

/// A sampled profile record: one tile's counters when it arrived at a global step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProfileRecord {
    /// Global step index since the device was created.
    pub step: u32,
    /// The kind of step.
    pub kind: GlobalKind,
    /// The tile.
    pub tile: u32,
    /// The tile's counters on arrival (before the step's own cost).
    pub counters: TileCounters,
}

/// The summary of one run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RunReport {
    /// Cycles of the run: the largest over active tiles of the cycles it spent in this run.
    pub cycles: u64,
    /// That tile's compute cycles in this run.
    pub compute_cycles: u64,
    /// That tile's exchange cycles (including host exchange) in this run.
    pub exchange_cycles: u64,
    /// That tile's sync cycles in this run.
    pub sync_cycles: u64,
    /// The part of that tile's exchange cycles spent at host-exchange points in this run.
    pub host_exchange_cycles: u64,
    /// The part of `host_exchange_cycles` at points moving bytes only into tile memory (see
    /// [`TileCounters::host_to_device_cycles`]).
    pub host_to_device_cycles: u64,
    /// The part of `host_exchange_cycles` at points moving bytes only into host pages (see
    /// [`TileCounters::device_to_host_cycles`]).
    pub device_to_host_cycles: u64,
    /// Instructions issued by all active tiles in this run.
    pub instructions: u64,
    /// Worker instructions issued by all active tiles in this run.
    pub worker_instructions: u64,
    /// Bank conflicts on all active tiles in this run ([`TileCounters::bank_conflicts`]).
    pub bank_conflicts: u64,
    /// Global steps taken (including the final `halt`).
    pub global_steps: u32,
    /// The tile whose cycles are reported.
    pub critical_tile: u32,
}

/// The simulated device.
pub struct Device {
    target: Target,
    active_tiles: u32,
    tiles: Vec<Tile>,
    counters: Vec<TileCounters>,
    profile: Vec<ProfileRecord>,
    marks: Vec<ProfileMark>,
    host_pages: Vec<Vec<u8>>,
    steps: u32,
    profile_every: u32,
    /// Decoded code pages shared between tiles ([`Device::share_code`]).
    code_share: memory::CodeShare,
}

impl Device {
    /// A device of `target` whose tiles `0..active_tiles` take part in programs (clamped to
    /// the chip).
    pub fn new(target: Target, active_tiles: u32) -> Device {
        let tiles = (0..target.tiles).map(|t| Tile::new(t, &target)).collect();
        Device {
            target,
            active_tiles: active_tiles.min(target.tiles),
            tiles,
            counters: vec![TileCounters::default(); target.tiles as usize],
            profile: Vec::new(),
            marks: Vec::new(),
            host_pages: Vec::new(),
            steps: 0,
            profile_every: DEFAULT_PROFILE_EVERY,
            code_share: memory::CodeShare::default(),
        }
    }

    /// The machine description.
    pub fn target(&self) -> &Target {
        &self.target
    }

    /// Tiles taking part in programs.
    pub fn active_tiles(&self) -> u32 {
        self.active_tiles
    }

    fn tile_index(&self, tile: u32) -> Result<usize, SimError> {
        if tile >= self.target.tiles {
            return Err(SimError::NoSuchTile {
                tile,
                tiles: self.target.tiles,
            });
        }
        Ok(tile as usize)
    }

    /// Host write into a tile's memory (loading images).
    pub fn write(&mut self, tile: u32, addr: u32, bytes: &[u8]) -> Result<(), SimError> {
        let t = self.tile_index(tile)?;
        if bytes.len() > u32::MAX as usize || !self.target.in_memory(addr, bytes.len() as u32) {
            return Err(SimError::HostAccess {
                tile,
                addr,
                len: bytes.len() as u64,
            });
        }
        self.tiles[t].host_write(addr, bytes);
        Ok(())
    }

    /// Decodes the code a host has written into `tile` at `ranges` (address, length) once for
    /// all tiles with the same bytes there, instead of each tile decoding its own copy as it
    /// first runs it. Only speed and host memory change: every fetch finds the slot it would
    /// have decoded, and stores into code still take effect.
    pub fn share_code(&mut self, tile: u32, ranges: &[(u32, u32)]) -> Result<(), SimError> {
        let t = self.tile_index(tile)?;
        self.tiles[t].share_code(ranges, &mut self.code_share);
        Ok(())
    }

    /// Distinct pages of decoded code shared so far ([`Device::share_code`]).
    pub fn shared_code_pages(&self) -> usize {
        self.code_share.distinct_pages()
    }

    /// Host read of a tile's memory.
    pub fn read(&self, tile: u32, addr: u32, len: u32) -> Result<Vec<u8>, SimError> {
        let t = self.tile_index(tile)?;
        if !self.target.in_memory(addr, len) {
            return Err(SimError::HostAccess {
                tile,
                addr,
                len: len as u64,
            });
        }
        let mut out = vec![0u8; len as usize];
        self.tiles[t].mem.read_into(addr, &mut out);
        Ok(out)
    }

    /// Bytes of tile memory in banks that hold a byte other than zero (all tiles).
    pub fn allocated_bytes(&self) -> usize {
        self.tiles.iter().map(|t| t.mem.nonzero_bank_bytes()).sum()
    }

    /// Attaches the host pages that `hostx` tables refer to by index.
    pub fn attach_host_pages(&mut self, pages: Vec<Vec<u8>>) {
        self.host_pages = pages;
    }

    /// The host pages.
    pub fn host_pages(&self) -> &[Vec<u8>] {
        &self.host_pages
    }

    /// The host pages, writable.
    pub fn host_pages_mut(&mut self) -> &mut [Vec<u8>] {
        &mut self.host_pages
    }

    /// Per-tile counters (every tile of the chip), accumulated across runs.
    pub fn counters(&self) -> &[TileCounters] {
        &self.counters
    }

    /// Bank conflicts per worker entry address, summed over the active tiles, in address order
    /// (`u32::MAX` stands for the supervisors), accumulated across runs.
    pub fn conflicts_by_entry(&self) -> Vec<(u32, u64)> {
        let mut by: std::collections::BTreeMap<u32, u64> = Default::default();
        for t in &self.tiles[..self.active_tiles as usize] {
            for &(e, n) in &t.entry_conflicts {
                *by.entry(e).or_default() += n;
            }
        }
        by.into_iter().collect()
    }

    /// Samples profile records at every `every`-th global step (0 turns sampling off). Each
    /// sample holds one record per active tile (about 100 bytes each).
    pub fn set_profile_interval(&mut self, every: u32) {
        self.profile_every = every;
    }

    /// Forgets the profile records and marks collected so far.
    pub fn clear_profile(&mut self) {
        self.profile.clear();
        self.marks.clear();
    }

    /// Sampled profile records: every active tile's counters at the sampled global steps (by
    /// default every step, see [`Device::set_profile_interval`]).
    pub fn profile(&self) -> &[ProfileRecord] {
        &self.profile
    }

    /// Profile marks, in tile order within each global step.
    pub fn marks(&self) -> &[ProfileMark] {
        &self.marks
    }

    /// Starts every active tile's supervisor at `entry` and runs until all halt.
    pub fn run(&mut self, entry: u32, limits: &RunLimits) -> Result<RunReport, SimError> {
        let entries = vec![entry; self.active_tiles as usize];
        self.run_entries(&entries, limits)
    }

    /// Starts active tile `t`'s supervisor at `entries[t]` and runs until all halt.
    pub fn run_entries(
        &mut self,
        entries: &[u32],
        limits: &RunLimits,
    ) -> Result<RunReport, SimError> {
        let n = self.active_tiles as usize;
        if entries.len() != n {
            return Err(SimError::Entries {
                given: entries.len(),
                active: self.active_tiles,
            });
        }
        let before: Vec<TileCounters> = self.tiles[..n].iter().map(|t| t.counters).collect();
        let deadlines: Vec<u64> = self.tiles[..n]
            .iter()
            .map(|t| t.time.saturating_add(limits.max_cycles))
            .collect();
        for (t, &e) in self.tiles[..n].iter_mut().zip(entries) {
            t.start(e);
        }
        let result = self.run_steps(&deadlines, limits);
        for (c, t) in self.counters.iter_mut().zip(&self.tiles) {
            *c = t.counters;
        }
        let steps = result?;
        let mut report = RunReport {
            global_steps: steps,
            ..RunReport::default()
        };
        for (i, (t, b)) in self.tiles[..n].iter().zip(&before).enumerate() {
            let c = &t.counters;
            let cycles = c.cycles - b.cycles;
            if i == 0 || cycles > report.cycles {
                report.cycles = cycles;
                report.compute_cycles = c.compute_cycles - b.compute_cycles;
                report.exchange_cycles = c.exchange_cycles - b.exchange_cycles;
                report.sync_cycles = c.sync_cycles - b.sync_cycles;
                report.host_exchange_cycles = c.host_exchange_cycles - b.host_exchange_cycles;
                report.host_to_device_cycles = c.host_to_device_cycles - b.host_to_device_cycles;
                report.device_to_host_cycles = c.device_to_host_cycles - b.device_to_host_cycles;
                report.critical_tile = i as u32;
            }
            report.instructions += c.instructions() - b.instructions();
            report.worker_instructions += c.worker_instructions - b.worker_instructions;
            report.bank_conflicts += c.bank_conflicts - b.bank_conflicts;
        }
        Ok(report)
    }

    fn run_steps(&mut self, deadlines: &[u64], limits: &RunLimits) -> Result<u32, SimError> {
        let n = self.active_tiles as usize;
        let mut steps = 0u32;
        loop {
            if steps >= limits.max_global_steps {
                let t = &self.tiles[0];
                return Err(Fault {
                    tile: 0,
                    context: Context::Supervisor,
                    pc: t.sup.pc,
                    instruction: String::new(),
                    address: None,
                    kind: FaultKind::StepLimit(limits.max_global_steps),
                }
                .into());
            }
            let arrivals: Vec<Result<Arrival, Fault>> = self.tiles[..n]
                .par_iter_mut()
                .zip(deadlines.par_iter())
                .map(|(t, &d)| {
                    if interrupted() {
                        return Err(t.fault_here(FaultKind::Interrupted));
                    }
                    t.run_supervisor(d)
                })
                .collect();
            let mut arr = Vec::with_capacity(n);
            for a in arrivals {
                arr.push(a?);
            }
            for t in &mut self.tiles[..n] {
                self.marks.append(&mut t.marks);
            }
            steps += 1;
            self.steps += 1;
            let Some(first) = arr.first().copied() else {
                return Ok(steps);
            };
            for (i, a) in arr.iter().enumerate() {
                if a.kind != first.kind {
                    let t = &mut self.tiles[i];
                    let instruction = t.text_at(a.pc);
                    return Err(Fault {
                        tile: i as u32,
                        context: Context::Supervisor,
                        pc: a.pc,
                        instruction,
                        address: None,
                        kind: FaultKind::GlobalMismatch {
                            reached: a.kind,
                            expected: first.kind,
                        },
                    }
                    .into());
                }
            }
            let sampled =
                self.profile_every != 0 && (self.steps - 1).is_multiple_of(self.profile_every);
            for (i, t) in self.tiles[..n].iter().enumerate().filter(|_| sampled) {
                self.profile.push(ProfileRecord {
                    step: self.steps - 1,
                    kind: first.kind,
                    tile: i as u32,
                    counters: t.counters,
                });
            }
            if first.kind == GlobalKind::Halt {
                return Ok(steps);
            }
            let latest = self.tiles[..n].iter().map(|t| t.time).max().unwrap_or(0);
            let (cost, host) = match first.kind {
                GlobalKind::Sync => (self.target.sync_cycles as u64, None),
                GlobalKind::Exch => (
                    exchange::exchange(&mut self.tiles[..n], &arr, &self.target)?,
                    None,
                ),
                GlobalKind::HostX => {
                    let bytes = exchange::host_exchange(
                        &mut self.tiles[..n],
                        &arr,
                        &mut self.host_pages,
                        &self.target,
                    )?;
                    let total = bytes.to_device + bytes.to_host;
                    (
                        ipu_target::HOST_EXCHANGE_OVERHEAD_CYCLES as u64
                            + total.div_ceil(ipu_target::HOST_EXCHANGE_BYTES_PER_CYCLE as u64),
                        Some(bytes),
                    )
                }
                GlobalKind::Halt => unreachable!("handled above"),
            };
            for t in &mut self.tiles[..n] {
                let wait = latest - t.time;
                let c = &mut t.counters;
                c.sync_cycles += wait;
                match first.kind {
                    GlobalKind::Sync => c.sync_cycles += cost,
                    _ => {
                        c.exchange_cycles += cost;
                        if let Some(bytes) = host {
                            c.host_exchange_cycles += cost;
                            match (bytes.to_device > 0, bytes.to_host > 0) {
                                (true, false) => c.host_to_device_cycles += cost,
                                (false, true) => c.device_to_host_cycles += cost,
                                _ => {}
                            }
                        }
                    }
                }
                c.cycles += wait + cost;
                t.time = latest + cost;
            }
        }
    }
}
