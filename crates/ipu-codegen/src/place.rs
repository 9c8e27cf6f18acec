//! Storage placement: every buffer of every tile gets an address. Buffers whose live ranges
//! (in steps) do not overlap may share memory. Code and support data (vertex states, exchange
//! and host tables) sit at the bottom of tile memory, code in the executable region; buffers
//! read by `ampw` sit in interleaved memory.

use std::collections::BTreeMap;

use ipu_target::Target;

use crate::error::{CodegenError, MemoryRegion};
use crate::program::{BufferId, Region, TileProgram};

/// Alignment of every buffer (the strictest access, a 128-bit weight load, needs 16).
pub const BUFFER_ALIGN: u32 = 16;

/// What lies below the buffers on one tile.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TileSupport {
    /// End of code (runtime, kernels, the tile's supervisor programs).
    pub code_end: u32,
    /// End of support data (states, tables); buffers start at or after it.
    pub support_end: u32,
    /// Where the vertex states start (the end of the code) and where the exchange and host
    /// tables start (the end of the states), for messages.
    pub states_start: u32,
    /// See [`TileSupport::states_start`].
    pub tables_start: u32,
}

impl TileSupport {
    /// `code C, vertex states S, tables T` in bytes, from the bottom of tile memory.
    fn parts(&self, memory_base: u32) -> String {
        format!(
            "code {}, vertex states {}, exchange and host tables {}",
            self.states_start.saturating_sub(memory_base),
            self.tables_start.saturating_sub(self.states_start),
            self.support_end.saturating_sub(self.tables_start)
        )
    }
}

/// Addresses of every buffer, plus per-tile figures.
#[derive(Debug, Clone, PartialEq)]
pub struct Placement {
    /// Address of each buffer, by id.
    pub addresses: Vec<u32>,
    /// Peak bytes of standard (non-interleaved) memory per tile, code and support included.
    pub peak_standard_bytes: BTreeMap<u32, u32>,
    /// Peak bytes of interleaved memory per tile.
    pub peak_interleaved_bytes: BTreeMap<u32, u32>,
}

fn align(n: u32, a: u32) -> u32 {
    n.div_ceil(a) * a
}

fn overlaps(a: (usize, usize), b: (usize, usize)) -> bool {
    a.0 <= b.1 && b.0 <= a.1
}

/// A placed buffer: address, bytes, live steps.
type Placed = (u32, u32, (usize, usize));

fn free_at(taken: &[(u32, u32)], at: u32, bytes: u32) -> bool {
    taken.iter().all(|&(s, e)| e <= at || s >= at + bytes)
}

/// The largest free range in `[lo, hi)` between the `taken` ranges (for messages).
fn largest_free(taken: &[(u32, u32)], lo: u32, hi: u32) -> u32 {
    let mut t: Vec<(u32, u32)> = taken.to_vec();
    t.sort_unstable();
    let (mut at, mut best) = (lo, 0);
    for (s, e) in t {
        if s > at {
            best = best.max(s.min(hi) - at.min(hi));
        }
        at = at.max(e);
    }
    best.max(hi.saturating_sub(at))
}

/// The lowest aligned address in `[lo, hi)` where `bytes` fit clear of the `taken` ranges.
fn bottom_fit(taken: &[(u32, u32)], lo: u32, hi: u32, bytes: u32) -> (Option<u32>, u32) {
    let candidates = std::iter::once(lo)
        .chain(taken.iter().map(|t| t.1))
        .map(|a| align(a.max(lo), BUFFER_ALIGN));
    let best = candidates
        .filter(|&a| a as u64 + bytes as u64 <= hi as u64 && free_at(taken, a, bytes))
        .min();
    (best, largest_free(taken, lo, hi))
}

/// The highest aligned address in `[lo, hi)` where `bytes` fit clear of the `taken` ranges.
fn top_fit(taken: &[(u32, u32)], lo: u32, hi: u32, bytes: u32) -> (Option<u32>, u32) {
    let candidates = std::iter::once(hi)
        .chain(taken.iter().map(|t| t.0))
        .filter(|&e| e >= lo + bytes && e <= hi)
        .map(|e| (e - bytes) / BUFFER_ALIGN * BUFFER_ALIGN);
    let best = candidates
        .filter(|&a| a >= lo && free_at(taken, a, bytes))
        .max();
    (best, largest_free(taken, lo, hi))
}

/// [`bottom_fit`], where some address also keeps the buffer out of the `avoid` elements: the
/// lowest such address, else `None`. Besides the ends of the taken ranges it tries every
/// element's start.
fn bottom_fit_apart(
    target: &Target,
    taken: &[(u32, u32)],
    (lo, hi): (u32, u32),
    bytes: u32,
    avoid: u64,
) -> Option<u32> {
    let starts = (0..)
        .map(|i| target.memory_base + i * target.bank_bytes)
        .take_while(|&a| a < hi);
    let mut candidates: Vec<u32> = std::iter::once(lo)
        .chain(taken.iter().map(|t| t.1))
        .chain(starts)
        .map(|a| align(a.max(lo), BUFFER_ALIGN))
        .filter(|&a| a as u64 + bytes as u64 <= hi as u64)
        .collect();
    candidates.sort_unstable();
    candidates.dedup();
    // Lowest first; the element test is cheaper than the free-range one.
    candidates
        .into_iter()
        .find(|&a| target.elements(a, bytes) & avoid == 0 && free_at(taken, a, bytes))
}

/// Every buffer's partners: the buffers a kernel loads from in the same paced issues
/// (`State::co_loaded`), which placement keeps in different memory elements where it can. Both
/// directions of every pair, sorted and without repeats.
struct CoLoaded(Vec<(BufferId, BufferId)>);

impl CoLoaded {
    fn of(program: &TileProgram) -> CoLoaded {
        let mut pairs = Vec::new();
        for step in &program.steps {
            let crate::program::Step::Compute { tiles, .. } = step else {
                continue;
            };
            for op in tiles.values().flatten() {
                if let Some((_, state)) = op.launch() {
                    for (a, b) in state.co_loaded() {
                        // A tile's workers share their buffers: skip the repeats in a row.
                        if pairs.last() != Some(&(b, a)) {
                            pairs.push((a, b));
                            pairs.push((b, a));
                        }
                    }
                }
            }
        }
        pairs.sort_unstable();
        pairs.dedup();
        CoLoaded(pairs)
    }

    /// The partners of `b`.
    fn of_buffer(&self, b: BufferId) -> impl Iterator<Item = BufferId> + '_ {
        let start = self.0.partition_point(|p| p.0 < b);
        self.0[start..]
            .iter()
            .take_while(move |p| p.0 == b)
            .map(|p| p.1)
    }
}

/// Places the buffers of `program`, given each tile's support area.
pub fn place(
    program: &TileProgram,
    target: &Target,
    support: &BTreeMap<u32, TileSupport>,
) -> Result<Placement, CodegenError> {
    let mut addresses = vec![0u32; program.buffers.len()];
    let mut by_tile: BTreeMap<u32, Vec<BufferId>> = BTreeMap::new();
    let mut groups: BTreeMap<u32, Vec<usize>> = BTreeMap::new();
    for (i, b) in program.buffers.iter().enumerate() {
        match b.group {
            Some(g) => groups.entry(g).or_default().push(i),
            None => by_tile.entry(b.tile).or_default().push(BufferId(i as u32)),
        }
    }
    let mut preplaced: BTreeMap<u32, Vec<Placed>> = BTreeMap::new();
    // The buffers placed before each tile's own, which its co-loaded buffers keep apart from.
    let mut preplaced_ids: BTreeMap<u32, Vec<BufferId>> = BTreeMap::new();
    let floor = |tile: u32| {
        support
            .get(&tile)
            .map_or(target.memory_base, |s| s.support_end)
            .div_ceil(BUFFER_ALIGN)
            * BUFFER_ALIGN
    };
    // Resident buffers (constants, live over every step) before anything else, packed from the
    // bottom of each tile's data memory: they conflict with every other buffer, so anywhere
    // else they would split the free space of every step.
    for (&tile, ids) in by_tile.iter_mut() {
        let mut at = floor(tile);
        let mut rest = Vec::with_capacity(ids.len());
        for &id in ids.iter() {
            let b = &program.buffers[id.0 as usize];
            if !b.resident || b.region != Region::Any {
                rest.push(id);
                continue;
            }
            if at as u64 + b.bytes as u64 > target.memory_end as u64 {
                return Err(CodegenError::DoesNotFit {
                    op: Some(b.op.clone()),
                    tile: Some(tile),
                    region: MemoryRegion::Any,
                    need_bytes: b.bytes as u64,
                    available_bytes: target.memory_end.saturating_sub(at) as u64,
                    detail: format!(
                        "the constants resident on the tile, up to {} ({} bytes of them before \
                         it), above {} bytes of code, vertex states and exchange tables ({})",
                        b.name,
                        at - floor(tile),
                        floor(tile) - target.memory_base,
                        support
                            .get(&tile)
                            .map_or(String::new(), |s| s.parts(target.memory_base))
                    ),
                });
            }
            addresses[id.0 as usize] = at;
            preplaced
                .entry(tile)
                .or_default()
                .push((at, b.bytes, (b.first, b.last)));
            preplaced_ids.entry(tile).or_default().push(id);
            at = align(at + b.bytes, BUFFER_ALIGN);
        }
        *ids = rest;
    }
    // Placement groups next: one address free on every member's tile.
    for members in groups.values() {
        let b = &program.buffers[members[0]];
        let live = (b.first, b.last);
        let mut conflicts: Vec<(u32, u32)> = members
            .iter()
            .flat_map(|&m| {
                preplaced
                    .get(&program.buffers[m].tile)
                    .into_iter()
                    .flatten()
            })
            .filter(|p| overlaps(p.2, live))
            .map(|p| (p.0, p.0 + p.1))
            .collect();
        conflicts.sort_unstable();
        conflicts.dedup();
        let lo = members
            .iter()
            .map(|&m| floor(program.buffers[m].tile))
            .max()
            .unwrap_or(0);
        let (chosen, best_free) = match b.region {
            Region::Interleaved => top_fit(
                &conflicts,
                target.interleaved_base.max(lo),
                target.memory_end,
                b.bytes,
            ),
            Region::Any => bottom_fit(&conflicts, lo, target.memory_end, b.bytes),
        };
        let Some(addr) = chosen else {
            let first = &program.buffers[members[0]];
            return Err(CodegenError::DoesNotFit {
                op: Some(first.op.clone()),
                tile: Some(first.tile),
                region: b.region.into(),
                need_bytes: b.bytes as u64,
                available_bytes: best_free as u64,
                detail: format!(
                    "buffer {} shared at one address by {} tiles from tile {}: the largest free \
                     range common to them is counted",
                    b.name,
                    members.len(),
                    first.tile
                ),
            });
        };
        for &m in members {
            addresses[m] = addr;
            let mb = &program.buffers[m];
            preplaced
                .entry(mb.tile)
                .or_default()
                .push((addr, mb.bytes, (mb.first, mb.last)));
            preplaced_ids
                .entry(mb.tile)
                .or_default()
                .push(BufferId(m as u32));
            by_tile.entry(mb.tile).or_default();
        }
    }
    let apart = CoLoaded::of(program);
    let mut peak_standard_bytes = BTreeMap::new();
    let mut peak_interleaved_bytes = BTreeMap::new();
    for (tile, mut ids) in by_tile {
        let sup = support.get(&tile).copied().unwrap_or(TileSupport {
            code_end: target.memory_base,
            support_end: target.memory_base,
            states_start: target.memory_base,
            tables_start: target.memory_base,
        });
        // Interleaved-only first, then larger first; ids break ties: deterministic.
        ids.sort_by_key(|id| {
            let b = &program.buffers[id.0 as usize];
            (
                b.region != Region::Interleaved,
                std::cmp::Reverse(b.bytes),
                id.0,
            )
        });
        let std_start = align(sup.support_end, BUFFER_ALIGN);
        // Buffers loaded together go to different memory elements where that fits; if the
        // tile then does not fit, it is placed again without that preference.
        let mut placed: Vec<Placed> = Vec::new();
        for keep_apart in [true, false] {
            placed = preplaced.get(&tile).cloned().unwrap_or_default();
            // Addresses placed so far on this tile (a few buffers, of many on the chip).
            let mut here: BTreeMap<BufferId, u32> = preplaced_ids
                .get(&tile)
                .into_iter()
                .flatten()
                .map(|&id| (id, addresses[id.0 as usize]))
                .collect();
            let mut result = Ok(());
            // Whether the preference moved a buffer (else a second pass would be the same).
            let mut moved = false;
            for &id in &ids {
                let b = &program.buffers[id.0 as usize];
                let live = (b.first, b.last);
                let mut conflicts: Vec<(u32, u32)> = placed
                    .iter()
                    .filter(|p| overlaps(p.2, live))
                    .map(|p| (p.0, p.0 + p.1))
                    .collect();
                conflicts.sort_unstable();
                let avoid = if keep_apart && b.region == Region::Any {
                    apart.of_buffer(id).fold(0u64, |m, o| {
                        let ob = &program.buffers[o.0 as usize];
                        match here.get(&o) {
                            Some(&a) if overlaps((ob.first, ob.last), live) => {
                                m | target.elements(a, ob.bytes)
                            }
                            _ => m,
                        }
                    })
                } else {
                    0
                };
                // Interleaved-only buffers fill interleaved memory from the top down; the
                // others fill from the bottom up (standard and interleaved memory are
                // adjacent, so a buffer may straddle them), leaving the free space in one
                // piece in the middle.
                let (chosen, best_free) = match b.region {
                    Region::Interleaved => top_fit(
                        &conflicts,
                        target.interleaved_base,
                        target.memory_end,
                        b.bytes,
                    ),
                    Region::Any => {
                        let range = (std_start, target.memory_end);
                        let fit = bottom_fit(&conflicts, range.0, range.1, b.bytes);
                        // The lowest fit when it is apart already (the usual case), else the
                        // lowest that is.
                        match fit.0 {
                            Some(a) if target.elements(a, b.bytes) & avoid != 0 => {
                                match bottom_fit_apart(target, &conflicts, range, b.bytes, avoid) {
                                    Some(apart) => {
                                        moved = true;
                                        (Some(apart), fit.1)
                                    }
                                    None => fit,
                                }
                            }
                            _ => fit,
                        }
                    }
                };
                let Some(addr) = chosen else {
                    result = Err((id, best_free));
                    break;
                };
                addresses[id.0 as usize] = addr;
                here.insert(id, addr);
                placed.push((addr, b.bytes, live));
            }
            let Err((id, best_free)) = result else {
                break;
            };
            if keep_apart && moved {
                continue;
            }
            let b = &program.buffers[id.0 as usize];
            return Err(CodegenError::DoesNotFit {
                op: Some(b.op.clone()),
                tile: Some(tile),
                region: b.region.into(),
                need_bytes: b.bytes as u64,
                available_bytes: best_free as u64,
                detail: format!(
                    "buffer {} live at steps {}..={}: the largest free range then is counted",
                    b.name, b.first, b.last
                ),
            });
        }
        // Peak use per region: the most bytes live at any one step.
        let steps = program.steps.len();
        let (mut std_peak, mut il_peak) = (0u32, 0u32);
        for s in 0..steps {
            let (mut st, mut il) = (0u32, 0u32);
            for p in placed.iter().filter(|p| p.2.0 <= s && s <= p.2.1) {
                if p.0 >= target.interleaved_base {
                    il += p.1;
                } else {
                    st += p.1;
                }
            }
            std_peak = std_peak.max(st);
            il_peak = il_peak.max(il);
        }
        peak_standard_bytes.insert(tile, std_peak + (sup.support_end - target.memory_base));
        peak_interleaved_bytes.insert(tile, il_peak);
    }
    let placement = Placement {
        addresses,
        peak_standard_bytes,
        peak_interleaved_bytes,
    };
    check(program, target, support, &placement)?;
    Ok(placement)
}

/// The independent placement checker: regions, alignment, and no two buffers live at the same
/// step overlapping on a tile; nothing over the support area.
pub fn check(
    program: &TileProgram,
    target: &Target,
    support: &BTreeMap<u32, TileSupport>,
    placement: &Placement,
) -> Result<(), CodegenError> {
    let bad = |m: String| Err(CodegenError::internal(format!("placement check: {m}")));
    let mut by_tile: BTreeMap<u32, Vec<usize>> = BTreeMap::new();
    for (i, b) in program.buffers.iter().enumerate() {
        let a = placement.addresses[i];
        let floor = support
            .get(&b.tile)
            .map_or(target.memory_base, |s| s.support_end);
        if !a.is_multiple_of(BUFFER_ALIGN) || !target.in_memory(a, b.bytes) || a < floor {
            return bad(format!(
                "{} at {a:#x} ({} bytes) on tile {}",
                b.name, b.bytes, b.tile
            ));
        }
        if b.region == Region::Interleaved && !target.in_interleaved(a, b.bytes) {
            return bad(format!("{} at {a:#x} is not interleaved", b.name));
        }
        by_tile.entry(b.tile).or_default().push(i);
    }
    for ids in by_tile.values() {
        let mut spans: Vec<(u32, u32, usize)> = ids
            .iter()
            .map(|&i| {
                (
                    placement.addresses[i],
                    placement.addresses[i] + program.buffers[i].bytes,
                    i,
                )
            })
            .collect();
        spans.sort_unstable();
        for (x, &(s1, e1, i)) in spans.iter().enumerate() {
            for &(s2, _, j) in &spans[x + 1..] {
                if s2 >= e1 {
                    break;
                }
                let (bi, bj) = (&program.buffers[i], &program.buffers[j]);
                if overlaps((bi.first, bi.last), (bj.first, bj.last)) {
                    return bad(format!(
                        "{} [{s1:#x}, {e1:#x}) overlaps {} at {s2:#x} while both live",
                        bi.name, bj.name
                    ));
                }
            }
        }
    }
    let mut group_addr: BTreeMap<u32, u32> = BTreeMap::new();
    for (i, b) in program.buffers.iter().enumerate() {
        if let Some(g) = b.group
            && *group_addr.entry(g).or_insert(placement.addresses[i]) != placement.addresses[i]
        {
            return bad(format!(
                "{} of placement group {g} is not at the group's address",
                b.name
            ));
        }
    }
    for (tile, s) in support {
        if !target.in_executable(target.memory_base, s.code_end - target.memory_base) {
            return bad(format!(
                "tile {tile}: code ends at {:#x}, past executable memory",
                s.code_end
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_buffer_goes_to_the_lowest_address_clear_of_its_partners_elements() {
        let t = Target::gc200();
        let b = t.bank_bytes;
        let mb = t.memory_base;
        // An element's start is tried: the buffer goes to the next bank clear of `avoid`.
        let taken = [(mb, mb + 64)];
        let a = bottom_fit_apart(&t, &taken, (mb, t.memory_end), 256, 1);
        assert_eq!(a, Some(mb + b));
        let a = bottom_fit_apart(&t, &taken, (mb, t.memory_end), 256, 0b10);
        assert_eq!(a, Some(mb + 64));
        // Nowhere clear of every element.
        assert_eq!(
            bottom_fit_apart(&t, &taken, (mb, t.memory_end), 256, u64::MAX),
            None
        );
    }
}
