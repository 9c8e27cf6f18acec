//! The multicasts-first schedule: the multicasts backfilled while the runs are empty (in
//! the given order, by sender load, longest first: the earliest end kept), then the unicasts
//! as a dense list schedule or in rounds from an edge colouring of the (sender, receiver)
//! pairs, whichever ends sooner.

use ipu_target::Target;

use super::list::backfill;
use super::rows::{Resolved, tiles_spanned};

/// Bound on the pending rows one event of [`dense_unicasts`] looks at.
const DENSE_LOOKED_AT_MAX: usize = 32;

/// The multicasts first, backfilled in the given order, then the unicasts as a dense list
/// schedule: in time order, whenever a sender frees it starts the pending row whose free
/// receiver has the most left to receive, and whenever a receiver frees it takes the pending
/// row whose idle sender has the most left to send. A multicast needs every receiver of its
/// run at once, so it goes where the runs are still empty; the unicasts, each needing two
/// ports only, fill in after them tile by tile. Returns the rows in their new order with
/// their starts.
pub(super) fn multicasts_first(
    order: &[Resolved],
    target: &Target,
) -> (Vec<Resolved>, Vec<u32>, u32) {
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
        // A vertex has at most `colours` pairs and this one is not coloured yet, so each end
        // has a free colour (swaps keep one colour per coloured pair at each end); were that
        // ever broken, the schedule falls back to the others instead of stopping the build.
        let a = free(&at, u)?;
        if at[v * colours + a] != NONE {
            let b = free(&at, v)?;
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

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;
    use crate::exchange::list::sender_driven;
    use crate::exchange::rows::row;

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
