//! The checker of a scheduled phase: the port rules the device enforces, re-derived from the
//! tables alone.

use std::collections::BTreeMap;

use ipu_target::Target;

use super::schedule::Scheduled;
use crate::error::CodegenError;

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
