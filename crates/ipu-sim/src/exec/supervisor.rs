//! The supervisor loop: the supervisor runs from its pc to the next global instruction
//! ([`Tile::run_supervisor`]), launching workers (each runs to its end at once, see `worker`),
//! closing their window at `waitw` and global instructions, and configuring and loading the AMP.

use ipu_isa::{AmpMode, Class, Fp8Format, Instr, Slot};

use crate::ProfileMark;
use crate::fault::{Context, Fault, FaultKind, GlobalKind};

use super::amp::AmpAcc;
use super::float::{f, h, numerics_format};
use super::races::Launch;
use super::regs::Regs;
use super::{Arrival, Flow, SLOT, Tile};

impl Tile {
    /// Runs the supervisor from its pc until it reaches a global instruction.
    pub fn run_supervisor(&mut self, deadline: u64) -> Result<Arrival, Fault> {
        let mut r = self.sup;
        let start_time = self.time;
        let result = self.supervisor_loop(&mut r, deadline);
        self.sup = r;
        self.counters.compute_cycles += self.time - start_time;
        self.counters.cycles += self.time - start_time;
        result
    }

    /// A fault of `kind` at the supervisor's pc, before it executes.
    pub fn fault_here(&self, kind: FaultKind) -> Fault {
        self.fault(Context::Supervisor, self.sup.pc, (kind, None))
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

    fn workers_running(&self) -> bool {
        self.busy_until.iter().any(|&b| b > self.time)
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
}
