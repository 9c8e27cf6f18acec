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

use ipu_isa::{AmpMode, Class, Fp8Format, Instr, Slot};
use ipu_target::{Target, WORKER_CONTEXTS};

use crate::fault::{Context, Fault, FaultKind, GlobalKind};
use crate::memory::{CodeCache, Decoded, Memory};
use crate::{ProfileMark, TileCounters};

pub use float::{eval_float, h, to_h};
pub use races::RACE_RANGES_MAX;

use amp::{AMP_WEIGHTS_MAX, AmpAcc, AmpUnit};
use decode::{Op, decode_at, slot_text};
use float::{f, numerics_format};
use races::{Launch, Tracker};
use regs::Regs;
use trap::R;

pub(crate) mod amp;
mod blocks;
pub(crate) mod decode;
mod float;
pub(crate) mod races;
mod regs;
mod semantics;
mod streams;
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

    fn workers_running(&self) -> bool {
        self.busy_until.iter().any(|&b| b > self.time)
    }

    /// Runs the supervisor from its pc until it reaches a global instruction.
    /// A fault of `kind` at the supervisor's pc, before it executes.
    pub fn fault_here(&self, kind: FaultKind) -> Fault {
        self.fault(Context::Supervisor, self.sup.pc, (kind, None))
    }

    /// Starts worker context `w` at `entry` with `$m0 = state` at cycle `start` and runs it to
    /// its end (recording the launch for the race checker and the counters).
    fn launch(
        &mut self,
        w: usize,
        entry: u32,
        state: u32,
        start: u64,
        deadline: u64,
    ) -> Result<(), Fault> {
        if self.tracker.used == self.tracker.launches.len() {
            self.tracker.launches.push(Launch::default());
        }
        let l = &mut self.tracker.launches[self.tracker.used];
        l.ctx = w as u8;
        l.entry = entry;
        l.start = start;
        l.overflow = false;
        self.tracker.used += 1;
        let end = self.run_worker(w, entry, state, start, deadline)?;
        self.tracker.launches[self.tracker.used - 1].end = end;
        self.busy_until[w] = end;
        self.counters.worker_busy_cycles += end - start;
        self.counters.worker_launches += 1;
        Ok(())
    }

    pub fn run_supervisor(&mut self, deadline: u64) -> Result<Arrival, Fault> {
        let mut r = self.sup;
        let start_time = self.time;
        let result = self.supervisor_loop(&mut r, deadline);
        self.sup = r;
        self.counters.compute_cycles += self.time - start_time;
        self.counters.cycles += self.time - start_time;
        result
    }

    fn supervisor_loop(&mut self, r: &mut Regs, deadline: u64) -> Result<Arrival, Fault> {
        let cx = Context::Supervisor;
        let mut dummy_acc = AmpAcc::default();
        loop {
            let pc = r.pc;
            let d = self.fetch(pc).map_err(|t| self.fault(cx, pc, *t))?;
            if self.time > deadline {
                return Err(self.fault(cx, pc, (FaultKind::CycleLimit(deadline), None)));
            }
            let n_instr = if matches!(d.slot, Slot::Bundle(_)) {
                2
            } else {
                1
            };
            self.counters.supervisor_instructions += n_instr;
            self.counters.supervisor_slots += d.cost as u64;
            if self.counters.supervisor_instructions % crate::INTERRUPT_POLL < 2
                && crate::interrupted()
            {
                return Err(self.fault(cx, pc, (FaultKind::Interrupted, None)));
            }
            if let Slot::Single(i) = d.slot
                && i.class() == Class::Supervisor
            {
                let fault = |t: &Tile, k: FaultKind, a: Option<u32>| t.fault(cx, pc, (k, a));
                match i {
                    Instr::Run { entry, state } | Instr::RunAll { entry, state } => {
                        let e = r.m[entry.0 as usize & 15];
                        let s = r.m[state.0 as usize & 15];
                        if e & 3 != 0 || !self.target.in_executable(e, 4) {
                            return Err(fault(self, FaultKind::RunEntryNotExecutable, Some(e)));
                        }
                        let all = matches!(i, Instr::RunAll { .. });
                        let workers = if all {
                            // Every context must be free: wait for the last to finish.
                            self.time = self
                                .time
                                .max(self.busy_until.iter().copied().max().unwrap_or(0));
                            0..6
                        } else {
                            let mut w = (0..6).find(|&w| self.busy_until[w] <= self.time);
                            if w.is_none() {
                                let (iw, t) = (0..6)
                                    .map(|w| (w, self.busy_until[w]))
                                    .min_by_key(|&(w, t)| (t, w))
                                    .expect("six workers");
                                self.time = t;
                                w = Some(iw);
                            }
                            let w = w.expect("a free worker");
                            w..w + 1
                        };
                        let start = self.time;
                        for w in workers {
                            self.launch(w, e, s, start, deadline)?;
                        }
                        self.time += SLOT;
                    }
                    Instr::WaitW => {
                        self.time += SLOT;
                        self.time = self
                            .time
                            .max(self.busy_until.iter().copied().max().unwrap_or(0));
                        self.close_window(pc)?;
                    }
                    Instr::Sync | Instr::Exch { .. } | Instr::HostX { .. } | Instr::Halt => {
                        if self.workers_running() {
                            return Err(fault(self, FaultKind::WorkersRunning, None));
                        }
                        self.close_window(pc)?;
                        let (kind, operand) = match i {
                            Instr::Sync => (GlobalKind::Sync, 0),
                            Instr::Exch { table } => (GlobalKind::Exch, r.m[table.0 as usize & 15]),
                            Instr::HostX { table } => {
                                (GlobalKind::HostX, r.m[table.0 as usize & 15])
                            }
                            _ => (GlobalKind::Halt, 0),
                        };
                        r.pc = pc + 4;
                        return Ok(Arrival { kind, operand, pc });
                    }
                    Instr::Mark { id } => {
                        self.marks.push(ProfileMark {
                            tile: self.id,
                            cycle: self.time,
                            id,
                        });
                        self.time += SLOT;
                    }
                    Instr::AmpCfg { mode } => {
                        if !self.target.supports_amp(mode) {
                            return Err(fault(self, FaultKind::AmpModeUnsupported(mode), None));
                        }
                        if self.workers_running() {
                            return Err(fault(self, FaultKind::AmpBusy, None));
                        }
                        self.amp.mode = Some(mode);
                        self.time += SLOT;
                    }
                    Instr::AmpW { base } => {
                        let addr = r.m[base.0 as usize & 15];
                        let Some(mode) = self.amp.mode else {
                            return Err(fault(self, FaultKind::AmpNotConfigured, Some(addr)));
                        };
                        let bytes = mode.geometry().weight_bytes();
                        if !self.mem.contains(addr, bytes) {
                            return Err(fault(self, FaultKind::OutOfRange { bytes }, Some(addr)));
                        }
                        if !addr.is_multiple_of(16) {
                            return Err(fault(
                                self,
                                FaultKind::Misaligned { align: 16 },
                                Some(addr),
                            ));
                        }
                        if !self.target.in_interleaved(addr, bytes) {
                            return Err(fault(self, FaultKind::NotInterleaved, Some(addr)));
                        }
                        if self.workers_running() {
                            return Err(fault(self, FaultKind::AmpBusy, None));
                        }
                        self.load_weights(mode, addr, (r.fp8_format, r.fp8_scale));
                        self.time +=
                            SLOT + (bytes / ipu_target::AMP_WEIGHT_LOAD_BYTES_PER_CYCLE) as u64;
                    }
                    _ => unreachable!("supervisor class"),
                }
                r.pc = pc + 4;
                continue;
            }
            self.tracker.now = self.time;
            self.tracker.pc = pc;
            self.time += SLOT * d.cost as u64;
            let now = self.time;
            let flow = self
                .exec_slot(r, &mut dummy_acc, &d.slot, pc, 6, now)
                .map_err(|t| self.fault(cx, pc, *t))?;
            self.supervisor_stall();
            match flow {
                Flow::Next => r.pc = pc + d.bytes,
                Flow::Jump(t) => r.pc = t,
                Flow::Exit => unreachable!("exit faults on the supervisor"),
                Flow::Rpt { count, body } => {
                    let body_start = pc + 4;
                    let end = self
                        .rpt_body_end(body_start, body)
                        .map_err(|t| self.fault(cx, body_start, *t))?;
                    for _ in 0..count {
                        let mut p = body_start;
                        while p < end {
                            let d = self.fetch(p).map_err(|t| self.fault(cx, p, *t))?;
                            if matches!(d.slot, Slot::Single(i) if i.class() == Class::Supervisor) {
                                return Err(self.fault(cx, p, (FaultKind::ControlInRptBody, None)));
                            }
                            self.tracker.now = self.time;
                            self.tracker.pc = p;
                            self.time += SLOT * d.cost as u64;
                            self.counters.supervisor_instructions +=
                                if matches!(d.slot, Slot::Bundle(_)) {
                                    2
                                } else {
                                    1
                                };
                            self.counters.supervisor_slots += d.cost as u64;
                            if self.time > deadline {
                                return Err(self.fault(
                                    cx,
                                    p,
                                    (FaultKind::CycleLimit(deadline), None),
                                ));
                            }
                            let now = self.time;
                            let flow = self
                                .exec_slot(r, &mut dummy_acc, &d.slot, p, 6, now)
                                .map_err(|t| self.fault(cx, p, *t))?;
                            self.supervisor_stall();
                            match flow {
                                Flow::Next => {}
                                _ => {
                                    return Err(self.fault(
                                        cx,
                                        p,
                                        (FaultKind::ControlInRptBody, None),
                                    ));
                                }
                            }
                            p += d.bytes;
                        }
                    }
                    r.pc = end;
                }
            }
        }
    }

    /// Charges the supervisor the slots its last slot lost to bank conflicts.
    #[inline(always)]
    fn supervisor_stall(&mut self) {
        if self.stall != 0 {
            let s = std::mem::take(&mut self.stall) as u64;
            self.time += SLOT * s;
            self.counters.supervisor_slots += s;
        }
    }

    fn load_weights(&mut self, mode: AmpMode, addr: u32, fp8: (Fp8Format, i8)) {
        let g = mode.geometry();
        let mut bytes = [0u8; 512];
        let n = g.weight_bytes() as usize;
        self.mem.read_into(addr, &mut bytes[..n]);
        let count = (g.k * g.columns) as usize;
        for i in 0..count {
            self.amp.weights[i] = match mode {
                AmpMode::F16F16 | AmpMode::F16F32 => {
                    h(u16::from_le_bytes([bytes[2 * i], bytes[2 * i + 1]]) as u32)
                }
                AmpMode::F32F32 => f(u32::from_le_bytes(
                    bytes[4 * i..4 * i + 4].try_into().expect("4 bytes"),
                )),
                AmpMode::F8F16 => {
                    ipu_numerics::decode(numerics_format(fp8.0), bytes[i], fp8.1 as i32)
                }
            };
        }
    }
}
