//! One tile: its contexts, the instruction semantics, the supervisor and worker executors.
//!
//! Execution model (see the crate documentation for the timing rules):
//! - the supervisor runs until it reaches a global instruction (`sync`, `exch`, `hostx`,
//!   `halt`); every supervisor issue costs one barrel slot;
//! - `run` simulates the launched worker to completion at once, starting at the supervisor's
//!   current time, and records when it finishes; workers of one tile therefore take effect on
//!   memory in launch order. Races between workers whose lifetimes overlap, and between the
//!   supervisor and the workers running when it accesses memory, are detected when the window
//!   closes (`waitw` or the next global instruction).
//!
//! This module holds the [`Tile`] and the fetch of its code; the rest of the executor is in:
//! - `regs`, a context's registers, and `trap`, the faults raised inside an instruction;
//! - `decode`: the slot at a pc, and the halves of a slot decoded once;
//! - `float` and `amp`: the float pipeline's and the AMP's semantics, on registers alone;
//! - `semantics`: what a slot does, in either context;
//! - `worker` (with its faster paths, `blocks` and `streams`) and `supervisor`: the loops each
//!   kind of context runs;
//! - `races`: the race checker.

use ipu_isa::{Instr, Slot};
use ipu_target::{Target, WORKER_CONTEXTS};

use crate::fault::{Context, Fault, FaultKind, GlobalKind};
use crate::memory::{CodeCache, Decoded, Memory};
use crate::{ProfileMark, TileCounters};

pub use float::{eval_float, h, to_h};
pub use races::RACE_RANGES_MAX;

use amp::{AMP_WEIGHTS_MAX, AmpAcc, AmpUnit};
use decode::{Op, decode_at, slot_text};
use races::Tracker;
use regs::Regs;
use trap::R;

pub(crate) mod amp;
mod blocks;
pub(crate) mod decode;
mod float;
mod races;
mod regs;
mod semantics;
mod stream_body;
mod streams;
mod supervisor;
#[cfg(test)]
mod testing;
mod trap;
mod worker;

/// Tile cycles of a barrel slot, as a u64 (the target's value is checked to match).
pub(crate) const SLOT: u64 = ipu_target::BARREL_SLOT_CYCLES as u64;

/// Where a supervisor stopped.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Arrival {
    pub kind: GlobalKind,
    /// The register operand (`exch`/`hostx` table address).
    pub operand: u32,
    /// The pc of the global instruction.
    pub pc: u32,
}

/// What an instruction does to control flow.
enum Flow {
    Next,
    Jump(u32),
    Rpt { count: u32, body: u8 },
    Exit,
}

/// One tile.
#[derive(Clone, Debug)]
pub(crate) struct Tile {
    pub id: u32,
    pub mem: Memory,
    pub code: CodeCache,
    pub sup: Regs,
    pub workers: [Regs; WORKER_CONTEXTS as usize],
    pub accs: [AmpAcc; 6],
    pub busy_until: [u64; 6],
    pub amp: AmpUnit,
    /// The tile's (supervisor's) current cycle.
    pub time: u64,
    pub counters: TileCounters,
    pub marks: Vec<ProfileMark>,
    tracker: Tracker,
    /// Straight runs of slots that only compute, by their first pc, and `rpt` bodies.
    blocks: blocks::Blocks,
    /// Barrel slots the last executed slot lost to bank conflicts, charged by the loop that
    /// issued it (`ipu_target::BANK_CONFLICT_SLOTS` per conflict).
    stall: u32,
    /// The running worker's entry (`u32::MAX` on the supervisor), to which conflicts are
    /// attributed.
    entry: u32,
    /// Bank conflicts per worker entry (and `u32::MAX` for the supervisor), in first-seen
    /// order.
    pub entry_conflicts: Vec<(u32, u64)>,
    target: Target,
}

impl Tile {
    pub fn new(id: u32, target: &Target) -> Tile {
        Tile {
            id,
            mem: Memory::new(target.memory_base, target.memory_end),
            code: CodeCache::new(target.executable_base, target.executable_end),
            sup: Regs::default(),
            workers: [Regs::default(); WORKER_CONTEXTS as usize],
            accs: [AmpAcc::default(); 6],
            busy_until: [0; 6],
            amp: AmpUnit {
                mode: None,
                simd: crate::simd::available(),
                weights: [0.0; AMP_WEIGHTS_MAX],
            },
            time: 0,
            counters: TileCounters::default(),
            marks: Vec::new(),
            tracker: Tracker::default(),
            blocks: blocks::Blocks::default(),
            stall: 0,
            entry: u32::MAX,
            entry_conflicts: Vec::new(),
            target: *target,
        }
    }

    /// Starts a run at `entry`: forgets any worker window a faulted run left open.
    pub fn start(&mut self, entry: u32) {
        self.sup.pc = entry;
        self.tracker.on = false;
        self.tracker.used = 0;
        self.tracker.sup.clear();
        for b in &mut self.busy_until {
            *b = (*b).min(self.time);
        }
    }

    fn fault(&self, ctx: Context, pc: u32, trap: (FaultKind, Option<u32>)) -> Fault {
        let instruction = self
            .code
            .lookup(pc)
            .map(|d| slot_text(&d.slot))
            .unwrap_or_default();
        Fault {
            tile: self.id,
            context: ctx,
            pc,
            instruction,
            address: trap.1,
            kind: trap.0,
        }
    }

    /// The text of the instruction at `pc` (cached or decoded now), or empty.
    pub fn text_at(&mut self, pc: u32) -> String {
        match self.fetch(pc) {
            Ok(d) => slot_text(&d.slot),
            Err(_) => String::new(),
        }
    }

    /// Fetches (and caches) the slot at `pc`.
    #[inline(always)]
    fn fetch(&mut self, pc: u32) -> R<Decoded> {
        if pc & 3 == 0
            && pc >= self.target.executable_base
            && pc < self.code.end()
            && let Some(d) = self.code.get(pc)
        {
            return Ok(*d);
        }
        self.fetch_slow(pc)
    }

    /// Fetches (and caches) the slot at `pc`, as a worker runs it.
    #[inline(always)]
    fn fetch_op(&mut self, pc: u32) -> R<Op> {
        if pc & 3 == 0
            && pc >= self.target.executable_base
            && pc < self.code.end()
            && let Some(d) = self.code.get(pc)
        {
            return Ok(d.op);
        }
        self.fetch_slow(pc).map(|d| d.op)
    }

    /// The slot at `pc`, copied straight from the cache (fetched if it is not there).
    #[inline(always)]
    fn slot_at(&mut self, pc: u32) -> R<Slot> {
        match self.code.lookup(pc) {
            Some(d) => Ok(d.slot),
            None => self.fetch_slow(pc).map(|d| d.slot),
        }
    }

    /// One half of the slot at `pc` (see [`Tile::slot_at`]).
    #[inline(always)]
    fn instr_at(&mut self, pc: u32, half: fn(&Slot) -> &Instr) -> R<Instr> {
        match self.code.lookup(pc) {
            Some(d) => Ok(*half(&d.slot)),
            None => self.fetch_slow(pc).map(|d| *half(&d.slot)),
        }
    }

    #[cold]
    fn fetch_slow(&mut self, pc: u32) -> R<Decoded> {
        let d = decode_at(&self.target, &self.mem, pc)?;
        self.code.put(pc, d);
        Ok(d)
    }

    /// Decodes, ahead of any fetch, the slots at the word addresses of `ranges` (the code and
    /// data a host wrote), sharing each 1 KiB page of decoded slots with every tile whose page
    /// holds the same bytes (`share`). A fetch then finds what it would have decoded; stores
    /// and host writes forget slots as before, copying a shared page first.
    pub fn share_code(&mut self, ranges: &[(u32, u32)], share: &mut crate::memory::CodeShare) {
        let (target, mem) = (&self.target, &self.mem);
        self.code
            .share(mem, ranges, share, |pc| decode_at(target, mem, pc).ok());
    }

    /// Host write into memory: invalidates cached code.
    pub fn host_write(&mut self, addr: u32, bytes: &[u8]) {
        self.mem.write_from(addr, bytes);
        self.code.invalidate(addr, bytes.len() as u32);
    }

    /// Walks `body` slots from `start`; returns the address after them.
    fn rpt_body_end(&mut self, start: u32, body: u8) -> R<u32> {
        let mut p = start;
        for _ in 0..body {
            p += self.fetch(p)?.bytes;
        }
        Ok(p)
    }
}
