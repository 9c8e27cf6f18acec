//! `rpt` bodies of paced streams, run as one loop.
//!
//! The AMP rounds of every matmul and attention kernel are `rpt` bodies of four
//! `{ paced load/store ; amp }` bundles: every memory access goes through a pointer register
//! that the paced forms advance by 8, so each register walks one contiguous stream. When a
//! body has only such slots, [`Tile::run_rpt_streams`] checks once, before the loop, what the
//! slot-by-slot path checks at every access (each stream inside memory and aligned, no store
//! on cached code, the cycle limit out of reach even if every paced load pair conflicted), and
//! then runs the iterations without those checks. The race checker's ranges are recorded in
//! closed form where the state they reach is provably the one access-by-access recording
//! reaches ([`RangeList::extend_stream`], [`RangeList::alternate_streams`]), and access by
//! access otherwise. Results, counters, conflicts and faults are the same as the general path.

use ipu_target::BANK_CONFLICT_SLOTS;

use super::amp::amp_run;
use super::decode::FloatOp;
use super::float::{NO_WRITE, decoded_float};
use super::races::{RACE_RANGES_MAX, RangeList, Tracker};
use super::regs::{AWrite, Regs, commit, pair, set_pair};
use super::stream_body::{Record, StreamBody};
use super::worker::WorkerRun;
use super::{SLOT, Tile};

impl RangeList {
    /// Records the accesses of one stream from `addr` to `end` (8 bytes at a time), when they
    /// all extend the current run: the state is the one adding them one by one gives. False
    /// (nothing recorded) when the first does not extend the run.
    pub(super) fn extend_stream(&mut self, addr: u32, end: u32) -> bool {
        if self.count == 0 || addr > self.last.1 || addr + 8 < self.last.0 {
            return false;
        }
        self.add(addr, end)
    }

    /// Records `n` accesses of each of two streams, alternating from `x` (the first) and `y`,
    /// 8 bytes each and contiguous, when the state one-by-one recording reaches is known: the
    /// last access was `y`'s stream's (in `open[0]`), `x`'s stream is `open[1]`, the two
    /// streams' ranges stay apart and the run limit is not reached. Each access then starts a
    /// run that extends its stream's open range. False (nothing recorded) otherwise.
    pub(super) fn alternate_streams(&mut self, x: u32, y: u32, n: u32) -> bool {
        let touches = |a: (u32, u32), b: (u32, u32)| a.0 <= b.1 && a.1 >= b.0;
        let len = 8 * n;
        let (xs, ys) = ((x, x + len), (y, y + len));
        if n == 0
            || self.open_len != 2
            || self.count == 0
            || self.count + 2 * n as usize > RACE_RANGES_MAX
            || !touches((x, x + 8), self.open[1])
            || !touches((y, y + 8), self.open[0])
            || !touches(self.last, self.open[0])
        {
            return false;
        }
        let grow = |o: (u32, u32), s: (u32, u32)| (o.0.min(s.0), o.1.max(s.1));
        let (ox, oy) = (grow(self.open[1], xs), grow(self.open[0], ys));
        if touches(ox, oy) {
            return false;
        }
        self.count += 2 * n as usize;
        self.last = (ys.1 - 8, ys.1);
        self.open = [oy, ox];
        true
    }
}

impl Tracker {
    /// The running launch's list (`write`), unless the tracker is off or the launch overflowed.
    fn list(&mut self, write: bool) -> Option<&mut RangeList> {
        if !self.on {
            return None;
        }
        let l = &mut self.launches[self.used - 1];
        if l.overflow {
            return None;
        }
        Some(if write { &mut l.writes } else { &mut l.reads })
    }
}

impl Tile {
    /// Runs `count` iterations of the `rpt` body `b` ([`stream_body`]) as streams (see the
    /// module documentation). Returns false, having done nothing, when the body or the loop does not
    /// qualify; the general path then runs it.
    pub(super) fn run_rpt_streams(
        &mut self,
        w: &mut WorkerRun,
        b: &StreamBody,
        count: u32,
        (iter_slots, iter_instrs): (u64, u64),
    ) -> bool {
        if count < 2 {
            return false;
        }
        let mode = self.amp.mode;
        if b.amp && mode.is_none() {
            return false;
        }
        // Every stall a conflict could add, and the cycle limit still out of reach.
        let worst = (iter_slots + (b.pairs * BANK_CONFLICT_SLOTS) as u64) * count as u64;
        if w.time.saturating_add(SLOT.saturating_mul(worst)) > w.deadline {
            return false;
        }
        // Every stream inside memory and aligned; no store on cached code.
        let r = &*w.r;
        for p in 0..16 {
            let u = b.uses[p] as u64;
            if u == 0 {
                continue;
            }
            let (start, len) = (r.m[p], 8 * u * count as u64);
            if len > u32::MAX as u64
                || start & 7 != 0
                || !self.mem.contains(start, len as u32)
                || (b.stored[p] && self.code.may_forget(start, len as u32))
            {
                return false;
            }
        }
        // The first iteration records access by access; the rest in closed form where it
        // holds from the state the first iteration left.
        let mut each = (true, true);
        let mut stalls = 0u64;
        for it in 0..count {
            if it == 1 {
                let (r, n) = (&*w.r, count - 1);
                each = (
                    !self.record_streams(b.reads, &b.uses, r, n, false),
                    !self.record_streams(b.writes, &b.uses, r, n, true),
                );
            }
            for s in &b.slots[..b.len] {
                let r = &mut *w.r;
                let fw = match s.float {
                    FloatOp::None => NO_WRITE,
                    FloatOp::Amp { d, a, p, phase } => {
                        let mode = mode.expect("checked above");
                        let out = amp_run(
                            &self.amp,
                            mode,
                            w.acc,
                            pair(r, a),
                            pair(r, p),
                            phase as usize,
                            (r.fp8_format, r.fp8_scale),
                        );
                        AWrite::new(d, 2, out)
                    }
                    f => decoded_float(&r.a, f),
                };
                let mut values = [[0u32; 2]; 2];
                let mut addrs = [0u32; 2];
                for i in 0..s.loads as usize {
                    let a = r.m[s.load[i].1 as usize];
                    addrs[i] = a;
                    if each.0 {
                        self.tracker.note(a, 8, false);
                    }
                    let m = self.mem.slice(a, 8);
                    values[i] = [
                        u32::from_le_bytes([m[0], m[1], m[2], m[3]]),
                        u32::from_le_bytes([m[4], m[5], m[6], m[7]]),
                    ];
                }
                if let Some((src, p)) = s.store {
                    let a = r.m[p as usize];
                    if each.1 {
                        self.tracker.note(a, 8, true);
                    }
                    let v = pair(r, src);
                    let m = self.mem.slice_mut(a, 8);
                    m[..4].copy_from_slice(&v[0].to_le_bytes());
                    m[4..].copy_from_slice(&v[1].to_le_bytes());
                }
                if s.loads == 2 && self.target.element(addrs[0]) == self.target.element(addrs[1]) {
                    self.conflict(1);
                    stalls += std::mem::take(&mut self.stall) as u64;
                }
                for &(_, p) in &s.load[..s.loads as usize] {
                    r.m[p as usize] = r.m[p as usize].wrapping_add(8);
                }
                if let Some((_, p)) = s.store {
                    r.m[p as usize] = r.m[p as usize].wrapping_add(8);
                }
                for (i, v) in values.iter().enumerate().take(s.loads as usize) {
                    set_pair(r, s.load[i].0, *v);
                }
                if fw.n() != 0 {
                    commit(r, fw);
                }
            }
        }
        *w.time += SLOT * (iter_slots * count as u64 + stalls);
        *w.slots += iter_slots * count as u64 + stalls;
        *w.instrs += iter_instrs * count as u64;
        true
    }

    /// Records in closed form the accesses of the `n` iterations still to run through the
    /// pointers in `r` (`uses` per iteration and register) in the running launch's list
    /// (`write`), as [`Record`] `rec` says; false, recording nothing, where the form does not
    /// hold. A list that is off or overflowed records nothing either way.
    fn record_streams(
        &mut self,
        rec: Record,
        uses: &[u32; 16],
        r: &Regs,
        n: u32,
        write: bool,
    ) -> bool {
        if rec == Record::Each {
            return false;
        }
        let Some(list) = self.tracker.list(write) else {
            return true;
        };
        match rec {
            Record::One(p) => {
                let a = r.m[p as usize];
                list.extend_stream(a, a + 8 * uses[p as usize] * n)
            }
            Record::Two(x, y) => {
                list.alternate_streams(r.m[x as usize], r.m[y as usize], uses[x as usize] * n)
            }
            Record::Each => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::xorshift;
    use super::*;

    /// A list after a few random accesses, as a launch would have it before a loop.
    fn random_list(n: &mut impl FnMut() -> u64) -> RangeList {
        let mut l = RangeList::default();
        for _ in 0..n() % 6 {
            let a = 0x5_0000 + 8 * (n() % 512) as u32;
            l.add(a, a + 8 * (1 + n() % 4) as u32);
        }
        l
    }

    #[test]
    fn closed_forms_leave_the_state_access_by_access_recording_leaves() {
        let mut n = xorshift(0x00C1_05ED);
        let (mut one, mut two) = (0, 0);
        for _ in 0..20_000 {
            let mut l = random_list(&mut n);
            // Two streams (the second sometimes unused), starting near each other so that
            // they touch in some cases, `k` accesses each an iteration, `iters` iterations.
            let x = 0x5_0000 + 8 * (n() % 512) as u32;
            let y = if n().is_multiple_of(3) {
                x + 8 * (n() % 8) as u32
            } else {
                0x5_0000 + 8 * (n() % 512) as u32
            };
            let k = 1 + (n() % 4) as u32;
            let iters = 1 + (n() % 6) as u32;
            let both = n().is_multiple_of(2);
            let access = |l: &mut RangeList, i: u32| {
                l.add(x + 8 * i, x + 8 * i + 8);
                if both {
                    l.add(y + 8 * i, y + 8 * i + 8);
                }
            };
            // The first iteration, access by access.
            for i in 0..k {
                access(&mut l, i);
            }
            let mut each = l.clone();
            for i in k..k * (1 + iters) {
                access(&mut each, i);
            }
            let mut closed = l.clone();
            let held = if both {
                closed.alternate_streams(x + 8 * k, y + 8 * k, k * iters)
            } else {
                closed.extend_stream(x + 8 * k, x + 8 * k * (1 + iters))
            };
            if held {
                assert_eq!(
                    closed, each,
                    "x {x:#x} y {y:#x} k {k} iters {iters} both {both}"
                );
                if both {
                    two += 1;
                } else {
                    one += 1;
                }
            } else {
                assert_eq!(closed, l, "nothing recorded when the form does not hold");
            }
        }
        assert!(
            one > 1000 && two > 1000,
            "{one} single and {two} alternating cases held"
        );
    }
}
