//! Exchange lowering: the copies of an exchange phase become rows of per-tile exchange tables,
//! each with a scheduled start cycle.
//!
//! Copies of the same source bytes to buffers of one placement group (which sit at the same
//! address on every member tile) merge into one multicast row per run of consecutive tiles:
//! the sender's port is busy once, every receiver's port for the same span.
//!
//! Four schedules are built and the shortest is kept: the *sender-driven* list schedule
//! (whenever a sender's port frees, it starts the pending row whose receivers can take it
//! soonest, and among those the one whose busiest receiver has the most left to receive), the
//! same rows *backfilled* (in that order, each at the earliest cycle at which all its ports are
//! free for its whole span, gaps included), the *destination-ordered* one (receivers served
//! one after another, each row at the earliest cycle all its ports allow) and *multicasts
//! first* (the multicasts backfilled while the runs are empty, the unicasts after them as a
//! dense list schedule: a multicast waits for every tile of its run, a unicast for two ports).
//! The checker re-derives the port rules the device enforces from the rows alone.
//!
//! Receive ports come in pairs (`Target::pair_tile`): a tile has two receive lanes, a row that
//! also reaches the tile's pair tile takes one of them (the pair hears it on one of its two
//! buses), any other row takes both. So a pair receives two multicasts to both its tiles at
//! once, as the device allows.

use std::collections::BTreeMap;

use ipu_isa::tables::{ExchangeRow, ExchangeTable};
use ipu_target::Target;

use crate::error::CodegenError;
use crate::program::{BufferId, Copy, Step, TileProgram};

/// One row to be: a source range sent to one buffer, or to the buffers of a placement group on
/// consecutive tiles (at the same offset).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transfer {
    /// Source buffer.
    pub src: BufferId,
    /// Byte offset in the source.
    pub src_offset: u32,
    /// Destination buffers, on consecutive tiles in ascending order.
    pub dsts: Vec<BufferId>,
    /// Byte offset in every destination.
    pub dst_offset: u32,
    /// Bytes.
    pub bytes: u32,
    /// Sends the transfer stands for (see [`ExchangeRow`]): send `k` moves `bytes` from
    /// `src_offset + k * src_stride` to `dst_offset + k * dst_stride`.
    pub repeat: u32,
    /// Source step between repeated sends (two's complement).
    pub src_stride: u32,
    /// Destination step between repeated sends (two's complement).
    pub dst_stride: u32,
}

impl Transfer {
    /// Bytes of its table row.
    pub fn row_bytes(&self) -> u32 {
        ipu_isa::tables::EXCHANGE_ROW_BYTES
            + if self.repeat == 1 {
                0
            } else {
                ipu_isa::tables::EXCHANGE_REPEAT_BYTES
            }
    }
}

/// Most sends one repeated row stands for (a bound on a row's port time).
pub const REPEAT_MAX: u32 = 4096;

/// Folds transfers with the same source buffer, destinations and size whose offsets step by
/// constant strides into repeated rows: a scatter or gather of many small pieces becomes one
/// row. Order: by first appearance of each (source, destinations, size), then by offsets.
fn fold_repeats(transfers: Vec<Transfer>) -> Vec<Transfer> {
    // The transfers sorted by (source, destinations, size), then offsets, then appearance:
    // each group's span, then the groups by their first transfer.
    let key = |t: &Transfer| (t.src, t.bytes);
    let mut idx: Vec<u32> = (0..transfers.len() as u32).collect();
    idx.sort_unstable_by(|&a, &b| {
        let (x, y) = (&transfers[a as usize], &transfers[b as usize]);
        (key(x), &x.dsts, x.src_offset, x.dst_offset, a).cmp(&(
            key(y),
            &y.dsts,
            y.src_offset,
            y.dst_offset,
            b,
        ))
    });
    let same = |a: u32, b: u32| {
        let (x, y) = (&transfers[a as usize], &transfers[b as usize]);
        key(x) == key(y) && x.dsts == y.dsts
    };
    let mut groups: Vec<(u32, usize, usize)> = Vec::new();
    let mut g0 = 0;
    while g0 < idx.len() {
        let mut g1 = g0 + 1;
        while g1 < idx.len() && same(idx[g0], idx[g1]) {
            g1 += 1;
        }
        let first = idx[g0..g1].iter().copied().min().expect("a transfer");
        groups.push((first, g0, g1));
        g0 = g1;
    }
    groups.sort_unstable();
    let mut slots: Vec<Option<Transfer>> = transfers.into_iter().map(Some).collect();
    let mut out = Vec::new();
    for (_, g0, g1) in groups {
        let ts = idx[g0..g1]
            .iter()
            .map(|&i| slots[i as usize].take().expect("each transfer once"));
        let mut run: Option<Transfer> = None;
        for t in ts {
            if let Some(r) = run.as_mut() {
                let (ds, dd) = (
                    t.src_offset.wrapping_sub(r.src_offset),
                    t.dst_offset.wrapping_sub(r.dst_offset),
                );
                let fits = if r.repeat == 1 {
                    true
                } else {
                    ds == r.src_stride.wrapping_mul(r.repeat)
                        && dd == r.dst_stride.wrapping_mul(r.repeat)
                };
                if fits && r.repeat < REPEAT_MAX {
                    if r.repeat == 1 {
                        r.src_stride = ds;
                        r.dst_stride = dd;
                    }
                    r.repeat += 1;
                    continue;
                }
                out.push(run.take().expect("a run"));
            }
            run = Some(t);
        }
        out.extend(run);
    }
    out
}

/// Merges the copies of one phase into transfers (multicast where the destinations form a
/// placement group on consecutive tiles). Deterministic: ordered by first copy.
pub fn transfers(program: &TileProgram, copies: &[Copy]) -> Vec<Transfer> {
    // (source buffer, source offset, bytes, destination group, destination offset)
    type Key = (u32, u32, u32, u32, u32);
    let mut out: Vec<Transfer> = Vec::new();
    // Copies into a placement group: (key, first copy, destination tile, buffer), grouped by
    // sorting (the copies of one key in tile order), then the keys in order of first copy.
    let mut grouped: Vec<(Key, u32, BufferId, u32)> = Vec::new();
    for (i, c) in copies.iter().enumerate() {
        let dst = &program.buffers[c.dst.0 as usize];
        match dst.group {
            Some(g) => grouped.push((
                (c.src.0, c.src_offset, c.bytes, g, c.dst_offset),
                dst.tile,
                c.dst,
                i as u32,
            )),
            None => out.push(Transfer {
                src: c.src,
                src_offset: c.src_offset,
                dsts: vec![c.dst],
                dst_offset: c.dst_offset,
                bytes: c.bytes,
                repeat: 1,
                src_stride: 0,
                dst_stride: 0,
            }),
        }
    }
    grouped.sort_unstable();
    // Per key: its first copy and its span in `grouped`.
    let mut keys: Vec<(u32, usize, usize)> = Vec::new();
    let mut k0 = 0;
    while k0 < grouped.len() {
        let key = grouped[k0].0;
        let mut k1 = k0;
        let mut first = u32::MAX;
        while k1 < grouped.len() && grouped[k1].0 == key {
            first = first.min(grouped[k1].3);
            k1 += 1;
        }
        keys.push((first, k0, k1));
        k0 = k1;
    }
    keys.sort_unstable();
    for (_, k0, k1) in keys {
        let key = grouped[k0].0;
        let transfer = |dsts: Vec<BufferId>| Transfer {
            src: BufferId(key.0),
            src_offset: key.1,
            dsts,
            dst_offset: key.4,
            bytes: key.2,
            repeat: 1,
            src_stride: 0,
            dst_stride: 0,
        };
        let mut run: Vec<BufferId> = Vec::new();
        let mut last_tile = None;
        for &(_, tile, b, _) in &grouped[k0..k1] {
            if last_tile.is_some_and(|t: u32| t + 1 != tile || run.len() == u16::MAX as usize) {
                out.push(transfer(std::mem::take(&mut run)));
            }
            run.push(b);
            last_tile = Some(tile);
        }
        out.push(transfer(run));
    }
    fold_repeats(out)
}

/// One scheduled exchange phase.
#[derive(Debug, Clone, PartialEq)]
pub struct Scheduled {
    /// The sending tiles' tables (every active tile has one, maybe empty).
    pub tables: BTreeMap<u32, ExchangeTable>,
    /// Cycles of the phase.
    pub horizon: u32,
    /// The cycles the busiest receiver needs at least (rows shared with a pair tile at half).
    pub receive_bound: u32,
    /// Horizon of the sender-driven schedule.
    pub sender_horizon: u32,
    /// Horizon of the destination-ordered schedule.
    pub destination_horizon: u32,
    /// Horizon of the sender-driven order backfilled ([`backfill`]).
    pub backfilled_horizon: u32,
    /// Horizon of the multicasts first and the unicasts after them ([`multicasts_first`]);
    /// `None` when another schedule was already within a hundredth of the busiest port's need.
    pub multicasts_first_horizon: Option<u32>,
    /// Whether the destination-ordered schedule was kept.
    pub use_destination_order: bool,
}

/// A transfer resolved to tiles and addresses.
#[derive(Debug, Clone, Copy)]
struct Resolved {
    src_tile: u32,
    dst_tile: u32,
    dst_count: u32,
    src_addr: u32,
    dst_addr: u32,
    bytes: u32,
    repeat: u32,
    src_stride: u32,
    dst_stride: u32,
}

impl Resolved {
    /// Cycles the sender's port (and each receiver's) is busy: the repeated sends back to back.
    fn duration(&self, target: &Target) -> u32 {
        self.repeat * target.exchange_transfer_cycles(self.bytes)
    }

    fn receivers(&self) -> impl Iterator<Item = u32> {
        self.dst_tile..self.dst_tile + self.dst_count
    }

    /// Whether the row reaches receiver `d`'s pair tile too (then it takes one of `d`'s two
    /// receive lanes, otherwise both).
    fn shared_at(&self, d: u32, target: &Target) -> bool {
        (self.dst_tile..self.dst_tile + self.dst_count).contains(&target.pair_tile(d))
    }

    /// When receiver `d`'s lanes let this row arrive.
    fn lanes_free(&self, d: u32, lanes: &[u32; 2], target: &Target) -> u32 {
        if self.shared_at(d, target) {
            lanes[0].min(lanes[1])
        } else {
            lanes[0].max(lanes[1])
        }
    }

    /// The earliest start at or after `free` that every receiver's port allows.
    fn ready(&self, free: u32, recv_free: &[[u32; 2]], target: &Target) -> u32 {
        self.receivers()
            .map(|d| {
                let l = target.exchange_latency_cycles(self.src_tile, d);
                self.lanes_free(d, &recv_free[d as usize], target)
                    .saturating_sub(l)
            })
            .fold(free, u32::max)
    }

    /// [`Resolved::ready`] when it is below `bound`; `None` when it is not (the receivers are
    /// looked at only until one pushes the start to `bound`).
    fn ready_below(
        &self,
        free: u32,
        recv_free: &[[u32; 2]],
        target: &Target,
        bound: u32,
    ) -> Option<u32> {
        let mut start = free;
        for d in self.receivers() {
            let l = target.exchange_latency_cycles(self.src_tile, d);
            let lanes = self.lanes_free(d, &recv_free[d as usize], target);
            start = start.max(lanes.saturating_sub(l));
            if start >= bound {
                return None;
            }
        }
        (start < bound).then_some(start)
    }

    /// Books the receivers' ports from `start` (a shared row the lane that frees latest
    /// before it arrives, any other both); returns the end of the last arrival.
    fn book(&self, start: u32, recv_free: &mut [[u32; 2]], target: &Target) -> u32 {
        let duration = self.duration(target);
        let mut end = 0;
        for d in self.receivers() {
            let a = start + target.exchange_latency_cycles(self.src_tile, d);
            let e = a + duration;
            let lanes = &mut recv_free[d as usize];
            if self.shared_at(d, target) {
                let fits = |l: u32| l <= a;
                let k = match (fits(lanes[0]), fits(lanes[1])) {
                    (true, true) => usize::from(lanes[1] > lanes[0]),
                    (false, true) => 1,
                    _ => 0,
                };
                lanes[k] = e;
            } else {
                *lanes = [e, e];
            }
            end = end.max(e);
        }
        end
    }
}

/// Bound on the queues [`sender_driven`] compares, once one can start at once, for the one
/// whose busiest receiver has the most left.
const TIES_LOOKED_AT_MAX: u32 = 32;

/// List scheduling driven by the senders: whenever a sender's port is free, it starts a
/// pending row whose receivers can take it soonest (rows to the same receivers go in their
/// given order). Returns the rows in start order with their starts.
fn sender_driven(rows: &[Resolved], target: &Target) -> (Vec<Resolved>, Vec<u32>, u32) {
    use std::cmp::Reverse;
    use std::collections::{BinaryHeap, VecDeque};
    // Per sender, per receiver range, the rows in order: every row of one range is ready at
    // the same cycle, so a pick looks at one row per range.
    type Queues = BTreeMap<(u32, u32), VecDeque<Resolved>>;
    let mut pending: BTreeMap<u32, Queues> = BTreeMap::new();
    for c in rows {
        pending
            .entry(c.src_tile)
            .or_default()
            .entry((c.dst_tile, c.dst_count))
            .or_default()
            .push_back(*c);
    }
    // Receive ports by tile: when each is next free.
    let tiles = rows
        .iter()
        .map(|r| r.dst_tile + r.dst_count)
        .max()
        .unwrap_or(0) as usize;
    let mut recv_free = vec![[0u32; 2]; tiles];
    // Cycles each receiver still has to receive.
    let mut left = vec![0u64; tiles];
    for c in rows {
        for d in c.receivers() {
            left[d as usize] += c.duration(target) as u64;
        }
    }
    let mut heap: BinaryHeap<Reverse<(u32, u32)>> =
        pending.keys().map(|&s| Reverse((0, s))).collect();
    let (mut order, mut starts, mut horizon) = (Vec::new(), Vec::new(), 0);
    while let Some(Reverse((free, src))) = heap.pop() {
        let queues = pending.get_mut(&src).expect("sender has rows");
        // The queue whose head is ready soonest, among equals the one whose busiest receiver has
        // the most left to receive, then the first in key order: queues are visited in key
        // order, a later one is looked at only as far as it could start no later, and once one
        // can start at once only a few more.
        let mut best: Option<(u32, u64, (u32, u32))> = None;
        // Queues looked at after the first whose head is ready as soon as the port is free
        // (a bound: a sender may have thousands).
        let mut ties_left = TIES_LOOKED_AT_MAX;
        for (&key, q) in queues.iter() {
            if best.is_some_and(|(r, _, _)| r == free) {
                if ties_left == 0 {
                    break;
                }
                ties_left -= 1;
            }
            let ready = match best {
                None => Some(q[0].ready(free, &recv_free, target)),
                Some((bound, _, _)) => q[0].ready_below(free, &recv_free, target, bound + 1),
            };
            if let Some(r) = ready {
                let load = q[0]
                    .receivers()
                    .map(|d| left[d as usize])
                    .max()
                    .unwrap_or(0);
                if best.is_none_or(|(br, bl, _)| r < br || (r == br && load > bl)) {
                    best = Some((r, load, key));
                }
            }
        }
        let (start, _, key) = best.expect("a non-empty queue");
        let queue = queues.get_mut(&key).expect("chosen queue");
        let c = queue.pop_front().expect("non-empty");
        if queue.is_empty() {
            queues.remove(&key);
        }
        horizon = horizon.max(c.book(start, &mut recv_free, target));
        for d in c.receivers() {
            left[d as usize] -= c.duration(target) as u64;
        }
        order.push(c);
        starts.push(start);
        if !queues.is_empty() {
            heap.push(Reverse((start + c.duration(target), src)));
        }
    }
    (order, starts, horizon)
}

/// One past the highest tile the rows send from or to.
fn tiles_spanned(rows: &[Resolved]) -> usize {
    rows.iter()
        .map(|r| (r.dst_tile + r.dst_count).max(r.src_tile + 1))
        .max()
        .unwrap_or(0) as usize
}

/// Rows in the given order, each at the earliest cycle its ports allow.
fn greedy(order: &[Resolved], target: &Target) -> (Vec<u32>, u32) {
    let tiles = tiles_spanned(order);
    let mut send_free = vec![0u32; tiles];
    let mut recv_free = vec![[0u32; 2]; tiles];
    let mut starts = Vec::with_capacity(order.len());
    let mut horizon = 0;
    for c in order {
        let s = send_free[c.src_tile as usize];
        let start = c.ready(s, &recv_free, target);
        send_free[c.src_tile as usize] = start + c.duration(target);
        horizon = horizon.max(c.book(start, &mut recv_free, target));
        starts.push(start);
    }
    (starts, horizon)
}

/// Busy intervals of one exchange port, sorted and disjoint (touching intervals merged).
#[derive(Debug, Default, Clone)]
struct Port(Vec<(u32, u32)>);

impl Port {
    /// The earliest start at or after `t` of a free span of `dur` cycles.
    fn earliest(&self, mut t: u32, dur: u32) -> u32 {
        let iv = &self.0;
        let mut i = iv.partition_point(|&(_, e)| e <= t);
        while i < iv.len() {
            if iv[i].0 >= t.saturating_add(dur) {
                return t;
            }
            t = t.max(iv[i].1);
            i += 1;
        }
        t
    }

    /// Marks `[s, e)` busy (free before, by construction).
    fn book(&mut self, s: u32, e: u32) {
        let iv = &mut self.0;
        let i = iv.partition_point(|&(a, _)| a < s);
        let joins_prev = i > 0 && iv[i - 1].1 == s;
        let joins_next = i < iv.len() && iv[i].0 == e;
        match (joins_prev, joins_next) {
            (true, true) => {
                iv[i - 1].1 = iv[i].1;
                iv.remove(i);
            }
            (true, false) => iv[i - 1].1 = e,
            (false, true) => iv[i].0 = s,
            (false, false) => iv.insert(i, (s, e)),
        }
    }

    /// The end of its last busy interval.
    fn end(&self) -> u32 {
        self.0.last().map_or(0, |&(_, e)| e)
    }
}

/// A tile's two receive lanes (see the module's notes on pairs).
#[derive(Debug, Default, Clone)]
struct Lanes([Port; 2]);

impl Lanes {
    /// The earliest start at or after `t` of `dur` free cycles on one lane (`shared`) or on
    /// both.
    fn earliest(&self, t: u32, dur: u32, shared: bool) -> u32 {
        let [a, b] = &self.0;
        if shared {
            return a.earliest(t, dur).min(b.earliest(t, dur));
        }
        let mut t = t;
        loop {
            let s = a.earliest(b.earliest(t, dur), dur);
            if s == t {
                return t;
            }
            t = s;
        }
    }

    /// Books `[s, s + dur)` (free by construction) on one lane (`shared`) or on both.
    fn book(&mut self, s: u32, dur: u32, shared: bool) {
        let [a, b] = &mut self.0;
        if !shared {
            a.book(s, s + dur);
            b.book(s, s + dur);
        } else if a.earliest(s, dur) == s {
            a.book(s, s + dur);
        } else {
            b.book(s, s + dur);
        }
    }

    /// The end of the later lane's last busy interval.
    fn end(&self) -> u32 {
        self.0[0].end().max(self.0[1].end())
    }
}

/// Rows in the given order, each at the earliest cycle at which its sender's port and every
/// receiver's port are free for its whole span, gaps left by earlier rows included (a row may
/// start before rows booked ahead of it). A row whose ports stay fragmented after
/// [`BACKFILL_PASSES_MAX`] passes goes after everything its ports have booked.
fn backfill(order: &[Resolved], target: &Target) -> (Vec<u32>, u32) {
    let tiles = tiles_spanned(order);
    let mut send = vec![Port::default(); tiles];
    let mut recv = vec![Lanes::default(); tiles];
    let mut starts = Vec::with_capacity(order.len());
    let mut horizon = 0;
    for c in order {
        let dur = c.duration(target);
        let src = c.src_tile as usize;
        let lat = |d: u32| target.exchange_latency_cycles(c.src_tile, d);
        let mut t = 0;
        let mut passes = 0;
        loop {
            let mut s = send[src].earliest(t, dur);
            for d in c.receivers() {
                let l = lat(d);
                let shared = c.shared_at(d, target);
                s = s.max(recv[d as usize].earliest(s + l, dur, shared) - l);
            }
            if s == t {
                break;
            }
            t = s;
            passes += 1;
            if passes == BACKFILL_PASSES_MAX {
                t = c
                    .receivers()
                    .map(|d| recv[d as usize].end().saturating_sub(lat(d)))
                    .fold(send[src].end(), u32::max);
                break;
            }
        }
        send[src].book(t, t + dur);
        for d in c.receivers() {
            let l = lat(d);
            recv[d as usize].book(t + l, dur, c.shared_at(d, target));
            horizon = horizon.max(t + l + dur);
        }
        starts.push(t);
    }
    (starts, horizon)
}

/// Bound on the pending rows one event of [`dense_unicasts`] looks at.
const DENSE_LOOKED_AT_MAX: usize = 32;

/// The multicasts first, backfilled in the given order, then the unicasts as a dense list
/// schedule: in time order, whenever a sender frees it starts the pending row whose free
/// receiver has the most left to receive, and whenever a receiver frees it takes the pending
/// row whose idle sender has the most left to send. A multicast needs every receiver of its
/// run at once, so it goes where the runs are still empty; the unicasts, each needing two
/// ports only, fill in after them tile by tile. Returns the rows in their new order with
/// their starts.
fn multicasts_first(order: &[Resolved], target: &Target) -> (Vec<Resolved>, Vec<u32>, u32) {
    let (mut multi, uni): (Vec<Resolved>, Vec<Resolved>) =
        order.iter().partition(|r| r.dst_count > 1);
    let (mut starts, mut horizon) = backfill(&multi, target);
    // The same multicasts, the busiest senders' first (stable): a sender with one long stream
    // (a key block's `v` held by one tile) then starts at once on one lane of its receivers,
    // the others' shorter rows filling the other lane beside it. Kept when the multicasts end
    // sooner.
    let tiles = tiles_spanned(order);
    let mut load = vec![0u64; tiles];
    for r in &multi {
        load[r.src_tile as usize] += r.duration(target) as u64;
    }
    let busiest_first = |r: &Resolved| std::cmp::Reverse(load[r.src_tile as usize]);
    keep_if_sooner(
        "busiest senders first",
        &mut multi,
        &mut starts,
        &mut horizon,
        busiest_first,
        target,
    );
    // The longest rows first (stable): a run's two lanes then fill as two machines do under
    // longest-processing-time order (a key block's `v` rows, then its shorter `kᵀ` rows, pack
    // both lanes to the end).
    let longest_first = |r: &Resolved| std::cmp::Reverse(r.duration(target));
    keep_if_sooner(
        "longest first",
        &mut multi,
        &mut starts,
        &mut horizon,
        longest_first,
        target,
    );
    let mut send_free = vec![0u32; tiles];
    let mut recv_free = vec![0u32; tiles];
    for (r, &s) in multi.iter().zip(&starts) {
        let dur = r.duration(target);
        let f = &mut send_free[r.src_tile as usize];
        *f = (*f).max(s + dur);
        for d in r.receivers() {
            let f = &mut recv_free[d as usize];
            *f = (*f).max(s + target.exchange_latency_cycles(r.src_tile, d) + dur);
        }
    }
    let (mut uni_starts, mut h) =
        dense_unicasts(&uni, send_free.clone(), recv_free.clone(), target);
    let mut uni = uni;
    // What the unicasts need at least after the multicasts: the busiest port's rows back to
    // back from when it frees. Within a hundredth of it, the rounds are not tried.
    let mut need = vec![0u64; tiles];
    for r in &uni {
        need[r.src_tile as usize] += r.duration(target) as u64;
    }
    let mut least = (0..tiles)
        .map(|t| send_free[t] as u64 + need[t])
        .max()
        .unwrap_or(0);
    need.iter_mut().for_each(|n| *n = 0);
    for r in &uni {
        need[r.dst_tile as usize] += r.duration(target) as u64;
    }
    least = (0..tiles)
        .map(|t| recv_free[t] as u64 + need[t])
        .fold(least, u64::max);
    let near = (h as u64) <= least + least / 100;
    if let Some(matched) = (!near).then(|| matched_rounds(&uni)).flatten() {
        let rounds: Vec<Resolved> = matched.iter().map(|&i| uni[i]).collect();
        let (m_starts, m_h) = in_order(&rounds, send_free, recv_free, target);
        if m_h < h {
            (uni, uni_starts, h) = (rounds, m_starts, m_h);
        }
    }
    horizon = horizon.max(h);
    starts.extend(uni_starts);
    let mut rows = multi;
    rows.extend(uni);
    (rows, starts, horizon)
}

/// The multicasts `multi` (backfilled at `starts`, ending at `horizon`) stably sorted by
/// `key` and backfilled again, kept when they end sooner; both ends are logged at debug
/// level with the order's `name`.
fn keep_if_sooner<K: Ord>(
    name: &str,
    multi: &mut Vec<Resolved>,
    starts: &mut Vec<u32>,
    horizon: &mut u32,
    key: impl Fn(&Resolved) -> K,
    target: &Target,
) {
    if multi.is_sorted_by_key(&key) {
        return;
    }
    let mut sorted = multi.clone();
    sorted.sort_by_key(&key);
    let (s, h) = backfill(&sorted, target);
    tracing::debug!(
        order = name,
        multicasts_end = h,
        kept_end = *horizon,
        "multicasts backfilled in another order"
    );
    if h < *horizon {
        (*multi, *starts, *horizon) = (sorted, s, h);
    }
}

/// Bound on the steps [`matched_rounds`] walks along alternating paths, and on its pairs
/// times colours (the colour look-ups).
const MATCHING_STEPS_MAX: u64 = 1 << 22;

/// Bound on the (sender, receiver) pairs a tile has for [`matched_rounds`].
const MATCHING_DEGREE_MAX: usize = 256;

/// Rows to one tile each ordered in rounds in which no tile sends or receives twice: the
/// (sender, receiver) pairs edge-coloured with as many colours as the busiest tile has pairs
/// (König's theorem; each colour found by swapping the two colours along an alternating
/// path), then the pairs by colour, each pair's rows together. Equal pairs then go as a
/// round-robin would (an all-to-all among a block's tiles takes one round per partner); a
/// pair's rows stay in their order. `None` beyond [`MATCHING_DEGREE_MAX`] or
/// [`MATCHING_STEPS_MAX`].
fn matched_rounds(rows: &[Resolved]) -> Option<Vec<usize>> {
    const NONE: u32 = u32::MAX;
    // The rows by (sender, receiver), in their order within each pair.
    let mut by_pair: Vec<usize> = (0..rows.len()).collect();
    by_pair.sort_by_key(|&i| (rows[i].src_tile, rows[i].dst_tile));
    let mut keys: Vec<(u32, u32)> = Vec::new();
    // Where each pair's rows start in `by_pair`, and one past the last pair's.
    let mut first: Vec<usize> = Vec::new();
    for (k, &i) in by_pair.iter().enumerate() {
        let key = (rows[i].src_tile, rows[i].dst_tile);
        if keys.last() != Some(&key) {
            keys.push(key);
            first.push(k);
        }
    }
    first.push(by_pair.len());
    let tiles = rows
        .iter()
        .map(|r| r.src_tile.max(r.dst_tile) + 1)
        .max()
        .unwrap_or(0) as usize;
    let mut degree = vec![0usize; 2 * tiles];
    for &(s, d) in &keys {
        degree[s as usize] += 1;
        degree[tiles + d as usize] += 1;
    }
    let colours = degree.iter().copied().max().unwrap_or(0);
    if colours > MATCHING_DEGREE_MAX || (keys.len() * colours) as u64 > MATCHING_STEPS_MAX {
        return None;
    }
    // at[vertex * colours + c]: the pair of colour `c` at a vertex (senders, then receivers).
    let mut at = vec![NONE; 2 * tiles * colours];
    let mut colour = vec![0usize; keys.len()];
    let mut steps = 0u64;
    let free = |at: &[u32], v: usize| (0..colours).find(|&c| at[v * colours + c] == NONE);
    for (e, &(s, d)) in keys.iter().enumerate() {
        let (u, v) = (s as usize, tiles + d as usize);
        let a = free(&at, u).expect("a sender has a free colour");
        if at[v * colours + a] != NONE {
            let b = free(&at, v).expect("a receiver has a free colour");
            if at[u * colours + b] == NONE {
                at[u * colours + b] = e as u32;
                at[v * colours + b] = e as u32;
                colour[e] = b;
                continue;
            }
            // The path from `v` along colours a, b, a, ...: swap them on it.
            let mut path = Vec::new();
            let (mut x, mut c) = (v, a);
            while at[x * colours + c] != NONE {
                let f = at[x * colours + c] as usize;
                path.push(f);
                let (fs, fd) = keys[f];
                let (fu, fv) = (fs as usize, tiles + fd as usize);
                x = if x == fu { fv } else { fu };
                c = if c == a { b } else { a };
                steps += 1;
                if steps > MATCHING_STEPS_MAX {
                    return None;
                }
            }
            for &f in &path {
                let (fs, fd) = keys[f];
                for x in [fs as usize, tiles + fd as usize] {
                    at[x * colours + colour[f]] = NONE;
                }
            }
            for &f in &path {
                colour[f] = if colour[f] == a { b } else { a };
                let (fs, fd) = keys[f];
                for x in [fs as usize, tiles + fd as usize] {
                    at[x * colours + colour[f]] = f as u32;
                }
            }
        }
        at[u * colours + a] = e as u32;
        at[v * colours + a] = e as u32;
        colour[e] = a;
    }
    let mut by_colour: Vec<usize> = (0..keys.len()).collect();
    by_colour.sort_by_key(|&e| (colour[e], keys[e]));
    Some(
        by_colour
            .into_iter()
            .flat_map(|e| by_pair[first[e]..first[e + 1]].iter().copied())
            .collect(),
    )
}

/// Rows to one tile each in the given order, each at the earliest cycle after the rows booked
/// before it on its two ports, from the ports' free cycles.
fn in_order(
    rows: &[Resolved],
    mut send_free: Vec<u32>,
    mut recv_free: Vec<u32>,
    target: &Target,
) -> (Vec<u32>, u32) {
    let mut horizon = 0;
    let starts = rows
        .iter()
        .map(|r| {
            let (s, d) = (r.src_tile as usize, r.dst_tile as usize);
            let l = target.exchange_latency_cycles(r.src_tile, r.dst_tile);
            let dur = r.duration(target);
            let t = send_free[s].max(recv_free[d].saturating_sub(l));
            send_free[s] = t + dur;
            recv_free[d] = t + l + dur;
            horizon = horizon.max(t + l + dur);
            t
        })
        .collect();
    (starts, horizon)
}

/// The dense list schedule of [`multicasts_first`] for rows to one tile each, from the ports'
/// free cycles. A row none of the bounded looks ([`DENSE_LOOKED_AT_MAX`]) found goes after
/// everything its ports have booked.
fn dense_unicasts(
    rows: &[Resolved],
    mut send_free: Vec<u32>,
    mut recv_free: Vec<u32>,
    target: &Target,
) -> (Vec<u32>, u32) {
    use std::cmp::Reverse;
    use std::collections::BinaryHeap;
    /// A pending row as the lists hold it (its ports, latency and span at hand).
    #[derive(Clone, Copy)]
    struct Entry {
        row: u32,
        src: u32,
        dst: u32,
        lat: u32,
        dur: u32,
    }
    let tiles = send_free.len();
    let mut send_left = vec![0u64; tiles];
    let mut recv_left = vec![0u64; tiles];
    // Per tile: its rows as a sender, then as a receiver.
    let mut lists: Vec<Vec<Entry>> = vec![Vec::new(); 2 * tiles];
    for (i, r) in rows.iter().enumerate() {
        let e = Entry {
            row: i as u32,
            src: r.src_tile,
            dst: r.dst_tile,
            lat: target.exchange_latency_cycles(r.src_tile, r.dst_tile),
            dur: r.duration(target),
        };
        send_left[e.src as usize] += e.dur as u64;
        recv_left[e.dst as usize] += e.dur as u64;
        lists[e.src as usize].push(e);
        lists[tiles + e.dst as usize].push(e);
    }
    // Rows not yet started in each list, and where its first such one may be.
    let mut live: Vec<usize> = lists.iter().map(Vec::len).collect();
    let mut head = vec![0usize; 2 * tiles];
    // The earliest latency: a receiver's event comes when the nearest sender could start.
    let lat_min = target.exchange_latency_cycles(0, 0);
    // Events (cycle, list): list `t` a sender's, `tiles + t` a receiver's.
    let mut events: BinaryHeap<Reverse<(u32, u32)>> = BinaryHeap::new();
    for t in 0..tiles {
        if !lists[t].is_empty() {
            events.push(Reverse((send_free[t], t as u32)));
        }
        if !lists[tiles + t].is_empty() {
            events.push(Reverse((
                recv_free[t].saturating_sub(lat_min),
                (tiles + t) as u32,
            )));
        }
    }
    let mut starts: Vec<Option<u32>> = vec![None; rows.len()];
    let mut left = rows.len();
    while let Some(Reverse((now, at))) = events.pop() {
        if left == 0 {
            break;
        }
        let (at, as_sender) = (at as usize, (at as usize) < tiles);
        let list = &mut lists[at];
        // Started rows leave from the front as they go, and all at once when more than a
        // look's worth are left among the pending.
        while head[at] < list.len() && starts[list[head[at]].row as usize].is_some() {
            head[at] += 1;
        }
        if list.len() - head[at] - live[at] > DENSE_LOOKED_AT_MAX {
            list.drain(..head[at]);
            list.retain(|e| starts[e.row as usize].is_none());
            head[at] = 0;
        }
        // (the other end's load, entry, start)
        let mut best: Option<(u64, Entry, u32)> = None;
        let pending = list[head[at]..]
            .iter()
            .filter(|e| starts[e.row as usize].is_none());
        for &e in pending.take(DENSE_LOOKED_AT_MAX) {
            let (s, d) = (e.src as usize, e.dst as usize);
            if send_free[s] > now || recv_free[d] > now + e.lat {
                continue;
            }
            let load = if as_sender {
                recv_left[d]
            } else {
                send_left[s]
            };
            if best.is_none_or(|(b, _, _)| load > b) {
                best = Some((
                    load,
                    e,
                    send_free[s].max(recv_free[d].saturating_sub(e.lat)),
                ));
            }
        }
        let Some((_, e, start)) = best else { continue };
        let (s, d) = (e.src as usize, e.dst as usize);
        starts[e.row as usize] = Some(start);
        left -= 1;
        live[s] -= 1;
        live[tiles + d] -= 1;
        send_free[s] = start + e.dur;
        recv_free[d] = start + e.lat + e.dur;
        send_left[s] -= e.dur as u64;
        recv_left[d] -= e.dur as u64;
        events.push(Reverse((send_free[s].max(now), s as u32)));
        events.push(Reverse((
            recv_free[d].saturating_sub(lat_min).max(now),
            (tiles + d) as u32,
        )));
    }
    let mut horizon = 0;
    let starts = rows
        .iter()
        .zip(starts)
        .map(|(r, st)| {
            let (s, d) = (r.src_tile as usize, r.dst_tile as usize);
            let l = target.exchange_latency_cycles(r.src_tile, r.dst_tile);
            let start = st.unwrap_or_else(|| {
                let t = send_free[s].max(recv_free[d].saturating_sub(l));
                send_free[s] = t + r.duration(target);
                recv_free[d] = t + l + r.duration(target);
                t
            });
            horizon = horizon.max(start + l + r.duration(target));
            start
        })
        .collect();
    (starts, horizon)
}

/// The cycles the busiest receiver needs at least: every row it takes alone in full, every row
/// it shares with its pair tile at half (two such at once), latencies left out.
fn receive_bound(rows: &[Resolved], target: &Target) -> u32 {
    let tiles = rows
        .iter()
        .map(|r| r.dst_tile + r.dst_count)
        .max()
        .unwrap_or(0) as usize;
    let mut need = vec![0u64; tiles];
    for r in rows {
        let d2 = 2 * r.duration(target) as u64;
        for d in r.receivers() {
            need[d as usize] += if r.shared_at(d, target) { d2 / 2 } else { d2 };
        }
    }
    (need.into_iter().max().unwrap_or(0).div_ceil(2)) as u32
}

/// Bound on the passes of [`backfill`] over one row's ports.
const BACKFILL_PASSES_MAX: u32 = 64;

/// Schedules the transfers of one phase, given buffer addresses.
pub fn schedule(
    program: &TileProgram,
    transfers: &[Transfer],
    addresses: &[u32],
    target: &Target,
) -> Result<Scheduled, CodegenError> {
    let resolved: Vec<Resolved> = transfers
        .iter()
        .map(|t| {
            let s = &program.buffers[t.src.0 as usize];
            let d = &program.buffers[t.dsts[0].0 as usize];
            Resolved {
                src_tile: s.tile,
                dst_tile: d.tile,
                dst_count: t.dsts.len() as u32,
                src_addr: addresses[t.src.0 as usize] + t.src_offset,
                dst_addr: addresses[t.dsts[0].0 as usize] + t.dst_offset,
                bytes: t.bytes,
                repeat: t.repeat,
                src_stride: t.src_stride,
                dst_stride: t.dst_stride,
            }
        })
        .collect();
    let receive_bound = receive_bound(&resolved, target);
    let (by_sender, starts_sender, h_sender) = sender_driven(&resolved, target);
    let mut by_dst = resolved;
    by_dst.sort_by_key(|c| (c.dst_tile, c.src_tile, c.dst_addr));
    let (starts_dst, h_dst) = greedy(&by_dst, target);
    // The sender-driven order again, each row moved into the earliest gap its ports leave.
    let (starts_fill, h_fill) = backfill(&by_sender, target);
    // Multicasts first, unless a schedule is already within a hundredth of the busiest port's
    // need.
    let mut sends: BTreeMap<u32, u64> = BTreeMap::new();
    for r in &by_sender {
        *sends.entry(r.src_tile).or_default() += r.duration(target) as u64;
    }
    let least = sends.values().copied().fold(receive_bound as u64, u64::max);
    let best = h_sender.min(h_fill).min(h_dst) as u64;
    let kind = (best > least + least / 100).then(|| multicasts_first(&by_sender, target));
    let h_kind = kind.as_ref().map(|k| k.2);
    let use_kind = h_kind.is_some_and(|h| (h as u64) < best);
    let use_dst = !use_kind && h_dst < h_sender.min(h_fill);
    let (order, starts, horizon) = if let Some(k) = kind.filter(|_| use_kind) {
        k
    } else if use_dst {
        (by_dst, starts_dst, h_dst)
    } else if h_fill < h_sender {
        (by_sender, starts_fill, h_fill)
    } else {
        (by_sender, starts_sender, h_sender)
    };
    let mut tables: BTreeMap<u32, ExchangeTable> = (0..program.tiles_used)
        .map(|t| {
            (
                t,
                ExchangeTable {
                    horizon_cycles: horizon,
                    rows: Vec::new(),
                },
            )
        })
        .collect();
    for (c, start) in order.iter().zip(starts) {
        let too_wide = |_| CodegenError::internal(format!("tile {} beyond 16 bits", c.dst_tile));
        tables
            .get_mut(&c.src_tile)
            .expect("active tile")
            .rows
            .push(ExchangeRow {
                src_addr: c.src_addr,
                dst_addr: c.dst_addr,
                bytes: c.bytes,
                start_cycle: start,
                dst_tile: u16::try_from(c.dst_tile).map_err(too_wide)?,
                dst_tile_count: u16::try_from(c.dst_count).map_err(too_wide)?,
                repeat: c.repeat,
                src_stride: c.src_stride,
                dst_stride: c.dst_stride,
            });
    }
    let s = Scheduled {
        tables,
        horizon,
        receive_bound,
        sender_horizon: h_sender,
        destination_horizon: h_dst,
        backfilled_horizon: h_fill,
        multicasts_first_horizon: h_kind,
        use_destination_order: use_dst,
    };
    check(&s, target)?;
    Ok(s)
}

/// Checks the rules the device enforces: one send per tile at a time, one receive per tile at a
/// time or two that both also reach its pair tile, every transfer within the horizon,
/// word-aligned addresses and sizes, no destination written twice.
pub fn check(s: &Scheduled, target: &Target) -> Result<(), CodegenError> {
    let bad = |m: String| Err(CodegenError::internal(format!("exchange check: {m}")));
    // Per receiver: arrival, end, whether the row reaches its pair tile too.
    let mut recv: BTreeMap<u32, Vec<(u32, u32, bool)>> = BTreeMap::new();
    let mut writes: BTreeMap<u32, Vec<(u32, u32)>> = BTreeMap::new();
    for (&tile, t) in &s.tables {
        if t.horizon_cycles != s.horizon {
            return bad(format!(
                "tile {tile} horizon {} != {}",
                t.horizon_cycles, s.horizon
            ));
        }
        let mut sends: Vec<(u32, u32)> = Vec::new();
        for r in &t.sends() {
            if r.bytes == 0
                || r.bytes % 4 != 0
                || r.src_addr % 4 != 0
                || r.dst_addr % 4 != 0
                || r.dst_tile_count == 0
            {
                return bad(format!(
                    "tile {tile}: the row of {} bytes from {:#x} to {:#x} on tiles {}+{} is not word aligned or empty",
                    r.bytes, r.src_addr, r.dst_addr, r.dst_tile, r.dst_tile_count
                ));
            }
            let d = target.exchange_transfer_cycles(r.bytes);
            sends.push((r.start_cycle, r.start_cycle + d));
            for dst in r.dst_tile as u32..r.dst_tile as u32 + r.dst_tile_count as u32 {
                let l = target.exchange_latency_cycles(tile, dst);
                if r.start_cycle + l + d > s.horizon {
                    return bad(format!(
                        "tile {tile}: the row of {} bytes to tile {dst} starting at cycle {} ends after the horizon {}",
                        r.bytes, r.start_cycle, s.horizon
                    ));
                }
                let first = r.dst_tile as u32;
                let shared =
                    (first..first + r.dst_tile_count as u32).contains(&target.pair_tile(dst));
                recv.entry(dst).or_default().push((
                    r.start_cycle + l,
                    r.start_cycle + l + d,
                    shared,
                ));
                writes
                    .entry(dst)
                    .or_default()
                    .push((r.dst_addr, r.dst_addr + r.bytes));
            }
        }
        sends.sort_unstable();
        if let Some(w) = sends.windows(2).find(|w| w[1].0 < w[0].1) {
            return bad(format!("tile {tile} sends twice at cycle {}", w[1].0));
        }
    }
    for (tile, mut r) in recv {
        r.sort_unstable();
        let mut active: Vec<(u32, u32, bool)> = Vec::with_capacity(2);
        for &x in &r {
            active.retain(|a| a.1 > x.0);
            let fine = match active[..] {
                [] => true,
                [a] => a.2 && x.2,
                _ => false,
            };
            if !fine {
                let why = if active.len() > 1 {
                    "three streams (a pair has two buses)"
                } else {
                    "two streams, not both also to its pair tile"
                };
                return bad(format!("tile {tile} receives {why} at cycle {}", x.0));
            }
            active.push(x);
        }
    }
    for (tile, mut w) in writes {
        w.sort_unstable();
        if let Some(x) = w.windows(2).find(|x| x[1].0 < x[0].1) {
            return bad(format!("tile {tile}: address {:#x} written twice", x[1].0));
        }
    }
    Ok(())
}

/// Schedules every exchange phase of `program` with the placed buffers' `addresses`, keyed by
/// step index; `transfers` holds each step's transfers ([`transfers`], empty for a step that
/// is no exchange).
pub fn schedule_program(
    program: &TileProgram,
    transfers: &[Vec<Transfer>],
    addresses: &[u32],
    target: &Target,
) -> Result<BTreeMap<usize, Scheduled>, CodegenError> {
    use rayon::prelude::*;
    // The phases are independent: scheduled at once, logged and kept in step order.
    let scheduled: Vec<(usize, Result<Scheduled, CodegenError>)> = program
        .steps
        .par_iter()
        .enumerate()
        .filter(|(_, s)| matches!(s, Step::Exchange { .. }))
        .map(|(i, _)| (i, schedule(program, &transfers[i], addresses, target)))
        .collect();
    let mut out = BTreeMap::new();
    for (i, sch) in scheduled {
        if let Step::Exchange { name, copies } = &program.steps[i] {
            let sch = sch?;
            let most_rows = sch.tables.values().map(|t| t.rows.len()).max().unwrap_or(0);
            tracing::debug!(
                phase = i,
                name = %name,
                copies = copies.len(),
                rows = transfers[i].len(),
                most_rows,
                "exchange rows"
            );
            tracing::info!(
                phase = i,
                candidates = copies.len(),
                receive_bound = sch.receive_bound,
                sender_horizon = sch.sender_horizon,
                backfilled_horizon = sch.backfilled_horizon,
                multicasts_first_horizon = ?sch.multicasts_first_horizon,
                destination_horizon = sch.destination_horizon,
                use_destination_order = sch.use_destination_order,
                "compared sender-driven, backfilled, destination-ordered and multicasts-first exchange schedules"
            );
            out.insert(i, sch);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    #[test]
    fn a_port_finds_the_first_gap_long_enough_and_merges_touching_spans() {
        let mut p = Port::default();
        p.book(10, 20);
        p.book(30, 40);
        assert_eq!(p.earliest(0, 10), 0);
        assert_eq!(p.earliest(0, 11), 40);
        assert_eq!(p.earliest(15, 10), 20);
        assert_eq!(p.earliest(21, 10), 40);
        p.book(20, 30);
        assert_eq!(p.0, [(10, 40)]);
        p.book(0, 10);
        p.book(40, 45);
        assert_eq!(p.0, [(0, 45)]);
        assert_eq!(p.end(), 45);
    }

    fn row(src: u32, dst: u32, count: u32, bytes: u32) -> Resolved {
        Resolved {
            src_tile: src,
            dst_tile: dst,
            dst_count: count,
            src_addr: 0,
            dst_addr: 0,
            bytes,
            repeat: 1,
            src_stride: 0,
            dst_stride: 0,
        }
    }

    #[test]
    fn backfill_moves_a_row_into_a_gap_its_ports_leave() {
        let target = Target::gc200();
        // Tile 2 first sends to tiles 0..2 (a multicast that must wait for tile 1, which
        // receives from tile 3 first); tile 2's short row to tile 4 fits before it.
        let rows = [row(3, 1, 1, 4000), row(2, 0, 2, 4000), row(2, 4, 1, 400)];
        let (in_order, h_in_order) = greedy(&rows, &target);
        let (filled, h_filled) = backfill(&rows, &target);
        assert_eq!(in_order[..2], filled[..2]);
        assert!(filled[2] < filled[1], "{filled:?}");
        assert!(in_order[2] > in_order[1], "{in_order:?}");
        assert!(h_filled <= h_in_order);
    }

    #[test]
    fn a_pair_receives_two_rows_to_both_its_tiles_at_once_and_a_private_row_alone() {
        let target = Target::gc200();
        let one = target.exchange_transfer_cycles(4000);
        // Tiles 2 and 3 each multicast to the pair {0, 1}: every schedule overlaps them.
        let shared = [row(2, 0, 2, 4000), row(3, 0, 2, 4000)];
        let (starts, _) = greedy(&shared, &target);
        assert_eq!(starts, [0, 0]);
        let (filled, _) = backfill(&shared, &target);
        assert_eq!(filled, [0, 0]);
        let (_, starts, h) = sender_driven(&shared, &target);
        assert_eq!(starts, [0, 0]);
        assert!(h < 2 * one, "{h}");
        // A row to tile 0 alone takes both of its lanes: it waits for the multicast.
        let private = [row(2, 0, 2, 4000), row(3, 0, 1, 4000)];
        let (starts, _) = greedy(&private, &target);
        assert!(starts[1] >= one, "{starts:?}");
        let (filled, _) = backfill(&private, &target);
        assert!(filled[1] >= one, "{filled:?}");
        // A third multicast to the pair waits for a lane.
        let three = [row(2, 0, 2, 4000), row(3, 0, 2, 4000), row(4, 0, 2, 4000)];
        let (filled, _) = backfill(&three, &target);
        assert!(filled[2] >= one, "{filled:?}");
        let (starts, _) = greedy(&three, &target);
        assert!(starts[2] >= one, "{starts:?}");
    }

    /// An all-to-all among eight tiles (each sends one equal row to each other) takes one
    /// round per partner in rounds from the edge colouring: seven rows' time and the
    /// latencies, no tile twice in a round.
    #[test]
    fn an_all_to_all_goes_in_rounds_of_a_matching() {
        let target = Target::gc200();
        let tiles = 8;
        let rows: Vec<Resolved> = (0..tiles)
            .flat_map(|s| {
                (0..tiles)
                    .filter(move |&d| d != s)
                    .map(move |d| row(s, d, 1, 4000))
            })
            .collect();
        let order = matched_rounds(&rows).expect("within the bounds");
        let mut seen = order.clone();
        seen.sort_unstable();
        assert_eq!(seen, (0..rows.len()).collect::<Vec<_>>());
        for round in order.chunks(tiles as usize) {
            let senders: BTreeSet<u32> = round.iter().map(|&i| rows[i].src_tile).collect();
            let receivers: BTreeSet<u32> = round.iter().map(|&i| rows[i].dst_tile).collect();
            assert_eq!((senders.len(), receivers.len()), (8, 8), "{round:?}");
        }
        let one = target.exchange_transfer_cycles(4000);
        let (_, _, h) = multicasts_first(&rows, &target);
        assert!(h <= 7 * (one + target.exchange_latency_cycles(0, 7)), "{h}");
        let (_, _, h_sender) = sender_driven(&rows, &target);
        assert!(h <= h_sender, "{h} {h_sender}");
    }

    /// Multicasts to a run first, then the runs' private rows: the private rows wait for the
    /// multicasts, not the other way round, and the device's rules hold.
    #[test]
    fn multicasts_go_first_and_private_rows_fill_in_after_them() {
        let target = Target::gc200();
        let one = target.exchange_transfer_cycles(4000);
        let rows = [
            row(4, 2, 1, 4000),
            row(8, 0, 4, 4000),
            row(9, 0, 4, 4000),
            row(5, 0, 1, 4000),
        ];
        let (order, starts, h) = multicasts_first(&rows, &target);
        assert_eq!(
            order.iter().map(|r| r.dst_count).collect::<Vec<_>>(),
            [4, 4, 1, 1]
        );
        assert_eq!(starts[..2], [0, 0]);
        assert!(starts[2] >= one && starts[3] >= one, "{starts:?}");
        assert!(h < 3 * one, "{h}");
    }
}
