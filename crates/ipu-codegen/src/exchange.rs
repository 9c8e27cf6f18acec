//! Exchange lowering: the copies of an exchange phase become rows of per-tile exchange tables,
//! each with a scheduled start cycle. Two schedules are built and the shorter is kept: the
//! *sender-driven* list schedule (whenever a sender's port frees, it starts the pending copy
//! whose receiver can take it soonest) and the *destination-ordered* one (receivers served one
//! after another, each copy at the earliest cycle both ports allow). The checker re-derives the port rules the device
//! enforces from the rows alone.

use std::collections::BTreeMap;

use ipu_isa::tables::{ExchangeRow, ExchangeTable};
use ipu_target::Target;

use crate::CodegenError;
use crate::program::{Copy, TileProgram};

/// One scheduled exchange phase.
#[derive(Debug, Clone, PartialEq)]
pub struct Scheduled {
    /// The sending tiles' tables (every active tile has one, maybe empty).
    pub tables: BTreeMap<u32, ExchangeTable>,
    /// Cycles of the phase.
    pub horizon: u32,
    /// Horizon of the sender-driven schedule.
    pub sender_horizon: u32,
    /// Horizon of the destination-ordered schedule.
    pub destination_horizon: u32,
    /// Whether the destination-ordered schedule was kept.
    pub use_destination_order: bool,
}

/// A copy resolved to tiles and addresses.
#[derive(Debug, Clone, Copy)]
struct Resolved {
    src_tile: u32,
    dst_tile: u32,
    src_addr: u32,
    dst_addr: u32,
    bytes: u32,
}

/// List scheduling driven by the senders: whenever a sender's port is free, it starts the
/// pending copy whose receiver can take it soonest. Returns the copies in start order with
/// their starts.
fn sender_driven(copies: &[Resolved], target: &Target) -> (Vec<Resolved>, Vec<u32>, u32) {
    use std::cmp::Reverse;
    use std::collections::BinaryHeap;
    let mut pending: BTreeMap<u32, Vec<Resolved>> = BTreeMap::new();
    for c in copies {
        pending.entry(c.src_tile).or_default().push(*c);
    }
    let mut recv_free: BTreeMap<u32, u32> = BTreeMap::new();
    let mut heap: BinaryHeap<Reverse<(u32, u32)>> =
        pending.keys().map(|&s| Reverse((0, s))).collect();
    let (mut order, mut starts, mut horizon) = (Vec::new(), Vec::new(), 0);
    while let Some(Reverse((free, src))) = heap.pop() {
        let queue = pending.get_mut(&src).expect("sender has copies");
        let ready = |c: &Resolved| {
            let l = target.exchange_latency_cycles(c.src_tile, c.dst_tile);
            free.max(
                recv_free
                    .get(&c.dst_tile)
                    .map_or(0, |r| r.saturating_sub(l)),
            )
        };
        let (best, _) = queue
            .iter()
            .enumerate()
            .min_by_key(|(i, c)| (ready(c), *i))
            .expect("non-empty queue");
        let c = queue.swap_remove(best);
        let start = ready(&c);
        let latency = target.exchange_latency_cycles(c.src_tile, c.dst_tile);
        let duration = target.exchange_transfer_cycles(c.bytes);
        recv_free.insert(c.dst_tile, start + latency + duration);
        horizon = horizon.max(start + latency + duration);
        order.push(c);
        starts.push(start);
        if !queue.is_empty() {
            heap.push(Reverse((start + duration, src)));
        }
    }
    (order, starts, horizon)
}

fn greedy(order: &[Resolved], target: &Target) -> (Vec<u32>, u32) {
    let mut send_free: BTreeMap<u32, u32> = BTreeMap::new();
    let mut recv_free: BTreeMap<u32, u32> = BTreeMap::new();
    let mut starts = Vec::with_capacity(order.len());
    let mut horizon = 0;
    for c in order {
        let latency = target.exchange_latency_cycles(c.src_tile, c.dst_tile);
        let duration = target.exchange_transfer_cycles(c.bytes);
        let s = *send_free.get(&c.src_tile).unwrap_or(&0);
        let r = recv_free
            .get(&c.dst_tile)
            .map_or(0, |r| r.saturating_sub(latency));
        let start = s.max(r);
        send_free.insert(c.src_tile, start + duration);
        recv_free.insert(c.dst_tile, start + latency + duration);
        horizon = horizon.max(start + latency + duration);
        starts.push(start);
    }
    (starts, horizon)
}

/// Schedules the copies of one phase, given buffer addresses.
pub fn schedule(
    program: &TileProgram,
    copies: &[Copy],
    addresses: &[u32],
    target: &Target,
) -> Result<Scheduled, CodegenError> {
    let resolved: Vec<Resolved> = copies
        .iter()
        .map(|c| {
            let (s, d) = (
                &program.buffers[c.src.0 as usize],
                &program.buffers[c.dst.0 as usize],
            );
            Resolved {
                src_tile: s.tile,
                dst_tile: d.tile,
                src_addr: addresses[c.src.0 as usize] + c.src_offset,
                dst_addr: addresses[c.dst.0 as usize] + c.dst_offset,
                bytes: c.bytes,
            }
        })
        .collect();
    let (by_sender, starts_sender, h_sender) = sender_driven(&resolved, target);
    let mut by_dst = resolved;
    by_dst.sort_by_key(|c| (c.dst_tile, c.src_tile, c.dst_addr));
    let (starts_dst, h_dst) = greedy(&by_dst, target);
    let use_dst = h_dst < h_sender;
    let (order, starts, horizon) = if use_dst {
        (by_dst, starts_dst, h_dst)
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
        let dst_tile = u16::try_from(c.dst_tile)
            .map_err(|_| CodegenError::Internal(format!("tile {} beyond 16 bits", c.dst_tile)))?;
        tables
            .get_mut(&c.src_tile)
            .expect("active tile")
            .rows
            .push(ExchangeRow {
                src_addr: c.src_addr,
                dst_addr: c.dst_addr,
                bytes: c.bytes,
                start_cycle: start,
                dst_tile,
                dst_tile_count: 1,
            });
    }
    let s = Scheduled {
        tables,
        horizon,
        sender_horizon: h_sender,
        destination_horizon: h_dst,
        use_destination_order: use_dst,
    };
    check(&s, target)?;
    Ok(s)
}

/// Checks the rules the device enforces: one send and one receive per tile at a time, every
/// transfer within the horizon, word-aligned addresses and sizes, no destination written twice.
pub fn check(s: &Scheduled, target: &Target) -> Result<(), CodegenError> {
    let bad = |m: String| Err(CodegenError::Internal(format!("exchange check: {m}")));
    let mut recv: BTreeMap<u32, Vec<(u32, u32)>> = BTreeMap::new();
    let mut writes: BTreeMap<u32, Vec<(u32, u32)>> = BTreeMap::new();
    for (&tile, t) in &s.tables {
        if t.horizon_cycles != s.horizon {
            return bad(format!(
                "tile {tile} horizon {} != {}",
                t.horizon_cycles, s.horizon
            ));
        }
        let mut sends: Vec<(u32, u32)> = Vec::new();
        for r in &t.rows {
            if r.bytes == 0 || r.bytes % 4 != 0 || r.src_addr % 4 != 0 || r.dst_addr % 4 != 0 {
                return bad(format!("tile {tile}: row {r:?} not word aligned"));
            }
            let d = target.exchange_transfer_cycles(r.bytes);
            let l = target.exchange_latency_cycles(tile, r.dst_tile as u32);
            if r.start_cycle + l + d > s.horizon {
                return bad(format!(
                    "tile {tile}: row {r:?} ends after the horizon {}",
                    s.horizon
                ));
            }
            sends.push((r.start_cycle, r.start_cycle + d));
            recv.entry(r.dst_tile as u32)
                .or_default()
                .push((r.start_cycle + l, r.start_cycle + l + d));
            writes
                .entry(r.dst_tile as u32)
                .or_default()
                .push((r.dst_addr, r.dst_addr + r.bytes));
        }
        sends.sort_unstable();
        if let Some(w) = sends.windows(2).find(|w| w[1].0 < w[0].1) {
            return bad(format!("tile {tile} sends twice at cycle {}", w[1].0));
        }
    }
    for (tile, mut r) in recv {
        r.sort_unstable();
        if let Some(w) = r.windows(2).find(|w| w[1].0 < w[0].1) {
            return bad(format!(
                "tile {tile} receives two streams at cycle {}",
                w[1].0
            ));
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
