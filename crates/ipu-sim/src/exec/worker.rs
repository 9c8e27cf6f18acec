//! The worker loop: a launched worker runs to its `exit` at once ([`Tile::run_worker`]), slot
//! by slot or, where they apply, through the paths that give the same results, counters and
//! faults faster: straight runs of slots that only compute (`blocks`), and `rpt` bodies from
//! their decoded slots or as streams (`streams`).

use crate::fault::{Context, Fault, FaultKind};
use crate::memory::Decoded;

use super::amp::AmpAcc;
use super::decode::SlotAt;
use super::decode::instructions_of;
use super::regs::Regs;
use super::{Flow, SLOT, Tile, stream_body};

/// A running worker's registers and accounting, lent to the `rpt` loop.
pub(super) struct WorkerRun<'a> {
    pub(super) r: &'a mut Regs,
    pub(super) acc: &'a mut AmpAcc,
    pub(super) ctx: u32,
    pub(super) time: &'a mut u64,
    pub(super) slots: &'a mut u64,
    pub(super) instrs: &'a mut u64,
    pub(super) deadline: u64,
}

impl Tile {
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
        stream: Option<&stream_body::StreamBody>,
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

    /// Charges a running worker (its `time` and `slots`) the slots its last slot lost to bank
    /// conflicts; whether there were any.
    #[inline(always)]
    pub(super) fn worker_stall(&mut self, time: &mut u64, slots: &mut u64) -> bool {
        if self.stall == 0 {
            return false;
        }
        let s = std::mem::take(&mut self.stall) as u64;
        *time += SLOT * s;
        *slots += s;
        true
    }
}
