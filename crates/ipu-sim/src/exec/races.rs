//! The race checker: the byte ranges each worker launch reads and writes ([`RangeList`]), as
//! the [`Tracker`] records them, and the check when the window of launches closes
//! ([`Tile::close_window`]).

use crate::fault::{Context, Fault, FaultKind};

use super::Tile;

/// Most address ranges recorded per worker launch for the race check. A worker that touches
/// more disjoint ranges than this (a scattered gather) is no longer checked; a `tracing`
/// warning says so.
pub const RACE_RANGES_MAX: usize = 1 << 16;

/// A worker launch inside the current `run`..`waitw` window, for the race check.
#[derive(Clone, Debug, Default)]
pub(super) struct Launch {
    pub(super) ctx: u8,
    pub(super) entry: u32,
    pub(super) start: u64,
    pub(super) end: u64,
    pub(super) reads: RangeList,
    pub(super) writes: RangeList,
    pub(super) overflow: bool,
}

/// Most recently touched ranges a [`RangeList`] tries to extend before it adds a new one.
const RECENT: usize = 4;

/// The byte ranges one launch read (or wrote): their union is what the race check uses.
///
/// `count` and `last` follow the list the check used to keep (extend the last range if the
/// access touches it, else start a new one), so that the [`RACE_RANGES_MAX`] limit trips at
/// exactly the same access. The union is `ranges` and the `open` ranges: an access extends the
/// open range it touches (the current run lies in `open[0]`, so extending the run extends it
/// too; two open ranges keep two interleaved streams, as `ld2xst64pace` reads, off the list),
/// and an open range pushed out goes into `ranges`, extending one of the [`RECENT`] most
/// recently touched ranges if it touches it (sorting one range per access when the window
/// closed was a fifth of the simulation's time).
#[derive(Clone, Debug, Default, PartialEq)]
pub(super) struct RangeList {
    ranges: Vec<(u32, u32)>,
    /// Indices into `ranges`, most recent first (`recent_len` valid).
    recent: [u32; RECENT],
    recent_len: usize,
    /// Runs so far, and the current run when `count > 0`.
    pub(super) count: usize,
    pub(super) last: (u32, u32),
    /// Ranges not yet in `ranges`, most recent first (`open_len` valid); `last` lies in
    /// `open[0]`.
    pub(super) open: [(u32, u32); 2],
    pub(super) open_len: usize,
}

impl RangeList {
    /// Adds `[addr, end)`; false when the limit is reached (nothing added).
    #[inline(always)]
    pub(super) fn add(&mut self, addr: u32, end: u32) -> bool {
        if self.count > 0 && addr <= self.last.1 && end >= self.last.0 {
            self.last = (self.last.0.min(addr), self.last.1.max(end));
            let o = &mut self.open[0];
            *o = (o.0.min(addr), o.1.max(end));
            return true;
        }
        self.start_run(addr, end)
    }

    /// Starts a run at `[addr, end)`; false at the limit.
    #[inline(always)]
    fn start_run(&mut self, addr: u32, end: u32) -> bool {
        if self.count >= RACE_RANGES_MAX {
            return false;
        }
        self.count += 1;
        self.last = (addr, end);
        let touches = |r: (u32, u32)| addr <= r.1 && end >= r.0;
        if self.open_len >= 1 && touches(self.open[0]) {
            let o = &mut self.open[0];
            *o = (o.0.min(addr), o.1.max(end));
        } else if self.open_len == 2 && touches(self.open[1]) {
            let o = self.open[1];
            self.open[1] = self.open[0];
            self.open[0] = (o.0.min(addr), o.1.max(end));
        } else {
            if self.open_len == 2 {
                self.keep(self.open[1]);
            }
            self.open[1] = self.open[0];
            self.open[0] = (addr, end);
            self.open_len = (self.open_len + 1).min(2);
        }
        true
    }

    /// Puts a finished run into `ranges`.
    #[inline(always)]
    fn keep(&mut self, (addr, end): (u32, u32)) {
        for i in 0..self.recent_len {
            let k = self.recent[i] as usize;
            let r = &mut self.ranges[k];
            if addr <= r.1 && end >= r.0 {
                r.0 = r.0.min(addr);
                r.1 = r.1.max(end);
                for j in (1..=i).rev() {
                    self.recent[j] = self.recent[j - 1];
                }
                self.recent[0] = k as u32;
                return;
            }
        }
        let n = (self.recent_len + 1).min(RECENT);
        for j in (1..n).rev() {
            self.recent[j] = self.recent[j - 1];
        }
        self.recent[0] = self.ranges.len() as u32;
        self.recent_len = n;
        self.ranges.push((addr, end));
    }

    fn clear(&mut self) {
        self.ranges.clear();
        self.recent_len = 0;
        self.count = 0;
        self.open_len = 0;
    }

    /// Sorts and merges the ranges in place, the open ranges included (the recent and open
    /// ranges are forgotten).
    fn normalize(&mut self) {
        self.ranges.extend_from_slice(&self.open[..self.open_len]);
        self.open_len = 0;
        normalize(&mut self.ranges);
        self.recent_len = 0;
    }
}

/// Records the address ranges workers touch.
#[derive(Clone, Debug, Default)]
pub(super) struct Tracker {
    /// Set while a worker runs.
    pub(super) on: bool,
    pub(super) used: usize,
    pub(super) launches: Vec<Launch>,
    /// The supervisor's accesses while the window is open: range, write, issue cycle, pc.
    pub(super) sup: Vec<(u32, u32, bool, u64, u32)>,
    /// The supervisor's current issue cycle and pc.
    pub(super) now: u64,
    pub(super) pc: u32,
}

impl Tracker {
    #[inline(always)]
    pub(super) fn note(&mut self, addr: u32, len: u32, write: bool) {
        if !self.on {
            if self.used > 0 && self.sup.len() < RACE_RANGES_MAX {
                self.sup.push((addr, addr + len, write, self.now, self.pc));
            }
            return;
        }
        let l = &mut self.launches[self.used - 1];
        if l.overflow {
            return;
        }
        let list = if write { &mut l.writes } else { &mut l.reads };
        if !list.add(addr, addr + len) {
            l.overflow = true;
            tracing::warn!(
                "a worker touched more than {RACE_RANGES_MAX} disjoint ranges; its races are not checked"
            );
        }
    }
}

impl Tile {
    /// Checks the window's worker launches for races and closes it.
    pub(super) fn close_window(&mut self, pc: u32) -> Result<(), Fault> {
        let n = self.tracker.used;
        let ls = &mut self.tracker.launches[..n];
        for l in ls.iter_mut() {
            l.reads.normalize();
            l.writes.normalize();
        }
        let mut found = None;
        'outer: for j in 1..n {
            for i in 0..j {
                let (a, b) = (&ls[i], &ls[j]);
                if a.ctx == b.ctx || a.overflow || b.overflow {
                    continue;
                }
                if !(a.start < b.end && b.start < a.end) {
                    continue;
                }
                if let Some(x) = intersect(&a.writes.ranges, &b.writes.ranges) {
                    found = Some((b.ctx, b.entry, a.ctx, true, x));
                    break 'outer;
                }
                if let Some(x) = intersect(&a.writes.ranges, &b.reads.ranges)
                    .or_else(|| intersect(&a.reads.ranges, &b.writes.ranges))
                {
                    found = Some((b.ctx, b.entry, a.ctx, false, x));
                    break 'outer;
                }
            }
        }
        // The supervisor's accesses against the workers running when it issued them.
        let mut sup_found = None;
        'sup: for &(lo, hi, write, t, spc) in &self.tracker.sup {
            for l in ls.iter() {
                if l.overflow || !(l.start <= t && t < l.end) {
                    continue;
                }
                let hit = intersect(&l.writes.ranges, &[(lo, hi)])
                    .map(|a| (a, true))
                    .or_else(|| {
                        if write {
                            intersect(&l.reads.ranges, &[(lo, hi)]).map(|a| (a, false))
                        } else {
                            None
                        }
                    });
                if let Some((addr, in_writes)) = hit {
                    sup_found = Some((spc, l.ctx, write && in_writes, addr));
                    break 'sup;
                }
            }
        }
        for l in ls.iter_mut() {
            l.reads.clear();
            l.writes.clear();
        }
        self.tracker.used = 0;
        self.tracker.sup.clear();
        if let Some((ctx, entry, other, both_write, addr)) = found {
            let _ = pc;
            return Err(Fault {
                tile: self.id,
                context: Context::Worker(ctx),
                pc: entry,
                instruction: String::new(),
                address: Some(addr),
                kind: FaultKind::WorkerRace { other, both_write },
            });
        }
        if let Some((spc, other, both_write, addr)) = sup_found {
            return Err(Fault {
                tile: self.id,
                context: Context::Supervisor,
                pc: spc,
                instruction: self.text_at(spc),
                address: Some(addr),
                kind: FaultKind::WorkerRace { other, both_write },
            });
        }
        Ok(())
    }
}

/// Sorts `v` and merges overlapping and adjacent ranges, in place.
fn normalize(v: &mut Vec<(u32, u32)>) {
    v.sort_unstable();
    let mut n = 0usize;
    for i in 0..v.len() {
        let (s, e) = v[i];
        if n > 0 && s <= v[n - 1].1 {
            v[n - 1].1 = v[n - 1].1.max(e);
        } else {
            v[n] = (s, e);
            n += 1;
        }
    }
    v.truncate(n);
}

/// The first address in both sorted, merged range lists.
fn intersect(a: &[(u32, u32)], b: &[(u32, u32)]) -> Option<u32> {
    let (mut i, mut j) = (0, 0);
    while i < a.len() && j < b.len() {
        let lo = a[i].0.max(b[j].0);
        let hi = a[i].1.min(b[j].1);
        if lo < hi {
            return Some(lo);
        }
        if a[i].1 < b[j].1 {
            i += 1;
        } else {
            j += 1;
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::super::testing::xorshift;
    use super::*;

    /// The race check's range list against a plain model: the union of every access added, and
    /// the extend-the-last-or-append list whose length trips `RACE_RANGES_MAX`.
    #[test]
    fn range_list_keeps_the_union_and_trips_the_limit_at_the_same_access() {
        let mut next = xorshift(0x5EED_0F2A_11CE);
        for case in 0..60 {
            let mut list = RangeList::default();
            let mut model: Vec<(u32, u32)> = Vec::new();
            let mut added: Vec<(u32, u32)> = Vec::new();
            let mut pointers = [0x5_0000u32, 0x6_0000, 0x7_0000];
            // Some cases walk interleaved streams long enough to reach the limit.
            let accesses = if case % 10 == 0 {
                3 * RACE_RANGES_MAX
            } else {
                2000
            };
            let streams = 1 + (case % 3) as usize;
            for i in 0..accesses {
                let r = next();
                let (addr, len) = if r.is_multiple_of(50) {
                    ((0x4_0000 + (r >> 8) as u32 % 0x4_0000) & !3, 4)
                } else {
                    let s = (r >> 16) as usize % streams;
                    let a = pointers[s];
                    pointers[s] += if r.is_multiple_of(7) { 16 } else { 8 };
                    (a, 8)
                };
                let end = addr + len;
                let n = model.len();
                let want = match model.last_mut() {
                    Some(l) if addr <= l.1 && end >= l.0 => {
                        *l = (l.0.min(addr), l.1.max(end));
                        true
                    }
                    _ if n >= RACE_RANGES_MAX => false,
                    _ => {
                        model.push((addr, end));
                        true
                    }
                };
                assert_eq!(list.add(addr, end), want, "case {case} access {i}");
                if !want {
                    break;
                }
                added.push((addr, end));
            }
            list.normalize();
            normalize(&mut added);
            assert_eq!(list.ranges, added, "case {case}");
        }
    }
}
