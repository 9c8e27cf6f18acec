//! The list schedules of a phase's rows: sender-driven, the same order backfilled into the
//! gaps its ports leave, and any order greedily (the destination order).

use std::collections::BTreeMap;

use ipu_target::Target;

use super::ports::{Lanes, Port};
use super::rows::{Resolved, tiles_spanned};

/// Bound on the queues [`sender_driven`] compares, once one can start at once, for the one
/// whose busiest receiver has the most left.
const TIES_LOOKED_AT_MAX: u32 = 32;

/// List scheduling driven by the senders: whenever a sender's port is free, it starts a
/// pending row whose receivers can take it soonest (rows to the same receivers go in their
/// given order). Returns the rows in start order with their starts.
pub(super) fn sender_driven(rows: &[Resolved], target: &Target) -> (Vec<Resolved>, Vec<u32>, u32) {
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

/// Rows in the given order, each at the earliest cycle its ports allow.
pub(super) fn greedy(order: &[Resolved], target: &Target) -> (Vec<u32>, u32) {
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

/// Rows in the given order, each at the earliest cycle at which its sender's port and every
/// receiver's port are free for its whole span, gaps left by earlier rows included (a row may
/// start before rows booked ahead of it). A row whose ports stay fragmented after
/// [`BACKFILL_PASSES_MAX`] passes goes after everything its ports have booked.
pub(super) fn backfill(order: &[Resolved], target: &Target) -> (Vec<u32>, u32) {
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

/// Bound on the passes of [`backfill`] over one row's ports.
const BACKFILL_PASSES_MAX: u32 = 64;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exchange::rows::row;

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
}
