//! Exchange lowering: the copies of an exchange phase become rows of per-tile exchange tables,
//! each with a scheduled start cycle. Two schedules are built (rows taken in source order, and
//! in destination order); the shorter is kept. The checker re-derives the port rules the device
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
    /// Horizon of the source-ordered schedule.
    pub ordinary_horizon: u32,
    /// Horizon of the destination-ordered schedule.
    pub paired_horizon: u32,
    /// Whether the destination-ordered schedule was kept.
    pub use_paired: bool,
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
    let mut by_src = resolved.clone();
    by_src.sort_by_key(|c| (c.src_tile, c.dst_tile, c.src_addr));
    let mut by_dst = resolved;
    by_dst.sort_by_key(|c| (c.dst_tile, c.src_tile, c.dst_addr));
    let (starts_src, h_src) = greedy(&by_src, target);
    let (starts_dst, h_dst) = greedy(&by_dst, target);
    let use_paired = h_dst < h_src;
    let (order, starts, horizon) = if use_paired {
        (by_dst, starts_dst, h_dst)
    } else {
        (by_src, starts_src, h_src)
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
        ordinary_horizon: h_src,
        paired_horizon: h_dst,
        use_paired,
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
