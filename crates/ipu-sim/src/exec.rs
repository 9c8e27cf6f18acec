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
use decode::{Op, decode_at, instructions_of, slot_text};
use float::{f, numerics_format};
use races::{Launch, Tracker};
use regs::Regs;
use semantics::SlotAt;
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

/// A running worker's registers and accounting, lent to the `rpt` loop.
struct WorkerRun<'a> {
    r: &'a mut Regs,
    acc: &'a mut AmpAcc,
    ctx: u32,
    time: &'a mut u64,
    slots: &'a mut u64,
    instrs: &'a mut u64,
    deadline: u64,
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

    /// Runs worker context `w` from `entry` with vertex state `state`, starting at `start`.
    /// Returns the cycle at which it exits.
    pub fn run_worker(
        &mut self,
        w: usize,
        entry: u32,
        state: u32,
        start: u64,
        deadline: u64,
    ) -> Result<u64, Fault> {
        // A context keeps its `$m` and `$a` registers from its previous run (as the device's
        // worker contexts do: PopLibs' `_retained` worker entries rely on it); `run` sets the
        // pc, `$m0` and the FP8 configuration.
        let defaults = Regs::default();
        let mut r = Regs {
            pc: entry,
            fp8_format: defaults.fp8_format,
            fp8_scale: defaults.fp8_scale,
            ..self.workers[w]
        };
        r.m[0] = state;
        let mut acc = self.accs[w];
        self.stall = 0;
        self.entry = entry;
        let ctx = w as u32;
        let cx = Context::Worker(w as u8);
        let mut time = start;
        let mut instrs = 0u64;
        let mut slots = 0u64;
        self.tracker.on = true;
        let result = (|| -> Result<(), Fault> {
            // Whether control just arrived at `r.pc` (a straight run may start there).
            let mut head = true;
            loop {
                let pc = r.pc;
                if head {
                    head = false;
                    let run = self.run_block(
                        &mut r,
                        &mut acc,
                        ctx,
                        pc,
                        &mut time,
                        &mut slots,
                        &mut instrs,
                        deadline,
                    )?;
                    if let Some(after) = run {
                        r.pc = after.pc;
                        head = after.head;
                        continue;
                    }
                }
                let op = self.fetch_op(pc).map_err(|t| self.fault(cx, pc, *t))?;
                time += SLOT * op.cost as u64;
                slots += op.cost as u64;
                instrs += op.instrs as u64;
                if time > deadline {
                    return Err(self.fault(cx, pc, (FaultKind::CycleLimit(deadline), None)));
                }
                if instrs % crate::INTERRUPT_POLL < 2 && crate::interrupted() {
                    return Err(self.fault(cx, pc, (FaultKind::Interrupted, None)));
                }
                if op.data {
                    self.exec_data_slot(&mut r, &mut acc, &op, SlotAt::Cached(pc), ctx, time)
                        .map_err(|t| self.fault(cx, pc, *t))?;
                    self.worker_stall(&mut time, &mut slots);
                    r.pc = pc + op.bytes as u32;
                    continue;
                }
                let slot = self.slot_at(pc).map_err(|t| self.fault(cx, pc, *t))?;
                let flow = self
                    .exec_slot(&mut r, &mut acc, &slot, pc, ctx, time)
                    .map_err(|t| self.fault(cx, pc, *t))?;
                self.worker_stall(&mut time, &mut slots);
                head = true;
                match flow {
                    Flow::Next => r.pc = pc + op.bytes as u32,
                    Flow::Jump(t) => r.pc = t,
                    Flow::Exit => return Ok(()),
                    Flow::Rpt { count, body } => {
                        // The body's decoded slots, resolved once per tile and code epoch;
                        // refetched from the cache whenever a store may have changed code.
                        let b = self.take_body(pc, body, cx)?;
                        let end = b.end;
                        let mut w = WorkerRun {
                            r: &mut r,
                            acc: &mut acc,
                            ctx,
                            time: &mut time,
                            slots: &mut slots,
                            instrs: &mut instrs,
                            deadline,
                        };
                        let result = self.run_rpt(&mut w, &b.buf, b.stream.as_ref(), count, end);
                        self.keep_body(pc, b);
                        result?;
                        r.pc = end;
                    }
                }
            }
        })();
        self.tracker.on = false;
        self.entry = u32::MAX;
        self.counters.worker_instructions += instrs;
        self.counters.worker_slots += slots;
        result?;
        self.workers[w] = r;
        self.accs[w] = acc;
        Ok(time)
    }

    /// Runs `count` iterations of an `rpt` body whose decoded slots are `buf` (ending at
    /// `end`). An iteration whose slots only compute and which ends by the deadline is
    /// accounted at once (the per-slot cycle-limit checks cannot fire); any other runs slot by
    /// slot. Counters are the same as slot by slot at every fault.
    fn run_rpt(
        &mut self,
        w: &mut WorkerRun,
        buf: &[(u32, Decoded)],
        stream: Option<&streams::StreamBody>,
        count: u32,
        end: u32,
    ) -> Result<(), Fault> {
        let cx = Context::Worker(w.ctx as u8);
        let epoch = self.code.epoch();
        let sums = |ds: &[(u32, Decoded)]| {
            ds.iter().fold((0u64, 0u64), |(s, i), (_, d)| {
                (s + d.cost as u64, i + instructions_of(&d.slot))
            })
        };
        let (iter_slots, iter_instrs) = sums(buf);
        if let Some(b) = stream
            && self.run_rpt_streams(w, b, count, (iter_slots, iter_instrs))
        {
            return Ok(());
        }
        let all_data = buf.iter().all(|(_, d)| d.op.data);
        for _ in 0..count {
            let mut done = 0;
            if all_data && *w.time + SLOT * iter_slots <= w.deadline {
                done = buf.len();
                let mut used = 0u64;
                for (k, (q, d)) in buf.iter().enumerate() {
                    if self.code.epoch() != epoch {
                        done = k;
                        break;
                    }
                    *w.time += SLOT * d.cost as u64;
                    used += d.cost as u64;
                    if let Err(t) = self.exec_data_slot(
                        w.r,
                        w.acc,
                        &d.op,
                        SlotAt::Here(&d.slot),
                        w.ctx,
                        *w.time,
                    ) {
                        let (s, i) = sums(&buf[..=k]);
                        *w.slots += s;
                        *w.instrs += i;
                        return Err(self.fault(cx, *q, *t));
                    }
                    // Past the deadline before the iteration ends after a stall: the rest slot
                    // by slot, so that the limit fires where it would.
                    if self.worker_stall(w.time, w.slots)
                        && *w.time + SLOT * (iter_slots - used) > w.deadline
                    {
                        done = k + 1;
                        break;
                    }
                }
                let (s, i) = if done == buf.len() {
                    (iter_slots, iter_instrs)
                } else {
                    sums(&buf[..done])
                };
                *w.slots += s;
                *w.instrs += i;
            } else {
                for (q, d) in buf.iter() {
                    if self.code.epoch() != epoch {
                        break;
                    }
                    self.rpt_step(w, *q, d)?;
                    done += 1;
                }
            }
            // Code changed under the loop: finish from the cache.
            let mut p = buf.get(done).map_or(end, |(q, _)| *q);
            while p < end {
                let d = self.fetch(p).map_err(|t| self.fault(cx, p, *t))?;
                self.rpt_step(w, p, &d)?;
                p += d.bytes;
            }
        }
        Ok(())
    }

    /// One slot of an `rpt` body, accounted and checked against the cycle limit.
    #[inline(always)]
    fn rpt_step(&mut self, w: &mut WorkerRun, p: u32, d: &Decoded) -> Result<(), Fault> {
        let cx = Context::Worker(w.ctx as u8);
        *w.time += SLOT * d.cost as u64;
        *w.slots += d.cost as u64;
        *w.instrs += instructions_of(&d.slot);
        if *w.time > w.deadline {
            return Err(self.fault(cx, p, (FaultKind::CycleLimit(w.deadline), None)));
        }
        let flow = if d.op.data {
            self.exec_data_slot(w.r, w.acc, &d.op, SlotAt::Here(&d.slot), w.ctx, *w.time)
                .map_err(|t| self.fault(cx, p, *t))?;
            Flow::Next
        } else {
            self.exec_slot(w.r, w.acc, &d.slot, p, w.ctx, *w.time)
                .map_err(|t| self.fault(cx, p, *t))?
        };
        self.worker_stall(w.time, w.slots);
        match flow {
            Flow::Next => Ok(()),
            _ => Err(self.fault(cx, p, (FaultKind::ControlInRptBody, None))),
        }
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

    /// Charges a running worker (its `time` and `slots`) the slots its last slot lost to bank
    /// conflicts; whether there were any.
    #[inline(always)]
    fn worker_stall(&mut self, time: &mut u64, slots: &mut u64) -> bool {
        if self.stall == 0 {
            return false;
        }
        let s = std::mem::take(&mut self.stall) as u64;
        *time += SLOT * s;
        *slots += s;
        true
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
