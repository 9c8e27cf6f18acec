//! The schedule of one exchange phase: its transfers resolved to rows, ordered by each
//! schedule, the shortest kept and written as the sending tiles' tables.

use std::collections::BTreeMap;

use ipu_isa::tables::{ExchangeRow, ExchangeTable};
use ipu_target::Target;

use super::list::{backfill, greedy, sender_driven};
use super::multicasts::multicasts_first;
use super::rows::{Resolved, receive_bound};
use super::transfers::Transfer;
use crate::error::CodegenError;
use crate::program::TileProgram;

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

/// Schedules the transfers of one phase, given buffer addresses (unchecked: [`check`] is
/// the checker).
///
/// [`check`]: fn@super::check
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
    Ok(s)
}
