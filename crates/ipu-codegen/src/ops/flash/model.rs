//! The flash attention's cycle model ([`modelled_cycles`]): a mapping's items and merges
//! built as the lowering builds them and costed by the supervisor model (`cost::estimate`),
//! with the receive time of each exchange and the syncs; [`modelled_parts`] says where the
//! cycles go.

use std::collections::{BTreeMap, BTreeSet};

use super::homes::prep_ops;
use super::layout::FlashPlan;
use super::programs::{COSTING_BUFFERS, Source, item_ops, merge_ops};
use crate::cost::estimate;
use crate::ops::matmul::{PAIR_SHARED_DEN, PAIR_SHARED_NUM};
use crate::program::*;
use ipu_kernels::flash::GROUP_ROW_BYTES;

const GRB: u32 = GROUP_ROW_BYTES;

/// The bytes the busiest home tile sends in each round's distribution, per chunk of the items'
/// keys: an item's rows of `q` go to it alone in its first chunk (the items reading them sit
/// on tiles far apart), while the kᵀ and v of one key block go once a round to all its items
/// (consecutive tiles holding them at one address: one multicast row).
fn distribution_sends(fp: &FlashPlan) -> Vec<Vec<u64>> {
    let g = &fp.geo;
    let ab = g.ab() as u64;
    let chunks = g.chunks();
    let rounds = fp.item_rounds();
    let mut per_round: Vec<Vec<BTreeMap<u32, u64>>> = Vec::new();
    let mut kv_sent: BTreeSet<(usize, usize, usize)> = BTreeSet::new();
    for (i, it) in fp.items.iter().enumerate() {
        let r = rounds[i];
        if per_round.len() <= r {
            per_round.resize_with(r + 1, || vec![BTreeMap::new(); chunks.len()]);
        }
        let sends = &mut per_round[r];
        let rows = fp.valid_rows(i);
        for (hi, _, n) in super::layout::home_runs_in(&fp.homes[0], it.batch, it.q0, it.q0 + rows) {
            *sends[0].entry(fp.homes[0][hi].tile).or_insert(0) += (n * g.d) as u64 * ab;
        }
        let kv = g.kv_of(it.batch);
        if kv_sent.insert((r, kv, it.k0)) {
            let keys = fp.valid_keys(i);
            for (c, &(c0, clen)) in chunks.iter().enumerate() {
                let (k0, k1) = (it.k0 + c0, it.k0 + (c0 + clen).min(keys));
                if k1 <= k0 {
                    continue;
                }
                for (x, dim) in [(1, g.d), (2, g.dv)] {
                    for (hi, _, n) in super::layout::home_runs_in(&fp.homes[x], kv, k0, k1) {
                        *sends[c].entry(fp.homes[x][hi].tile).or_insert(0) += (n * dim) as u64 * ab;
                    }
                }
            }
        }
    }
    per_round
        .iter()
        .map(|r| {
            r.iter()
                .map(|s| s.values().copied().max().unwrap_or(0))
                .collect()
        })
        .collect()
}

/// The bytes the busiest tile receives in each round's distribution, per chunk of the items'
/// keys: its item's rows of `q` (first chunk) and the chunk's `kᵀ` and `v`, and the item's
/// mask. In the chunks after the first, which carry the key block's multicast alone, `kᵀ`
/// and `v` count at half when the other tile of the pair (tiles `2i` and `2i + 1`, one
/// exchange bus) takes the same key block in that round: a pair receives one multicast at
/// twice a tile's rate, and the schedules reach that bound (seq 8192's second chunk: 16,445
/// cycles against 16,384). In the first chunk each tile's own rows of `q` (both its receive
/// lanes) meet the key block's multicast (a lane at every tile of the run at once), and the
/// schedules stay above the pairs' bound (the preset: 7,978 cycles against 6,976), so there
/// the shared `kᵀ` and `v` count at two thirds, as the matmul's staging counts its shared
/// operand. An item holding its key block's `v` as its home receives only `kᵀ`.
fn distribution_receives(fp: &FlashPlan, mask_bytes: u64) -> Vec<Vec<u64>> {
    let g = &fp.geo;
    let ab = g.ab() as u64;
    let chunks = g.chunks();
    let rounds = fp.item_rounds();
    let at: BTreeMap<(usize, u32), usize> = fp
        .items
        .iter()
        .enumerate()
        .map(|(i, it)| ((rounds[i], it.tile), i))
        .collect();
    let n_rounds = rounds.iter().max().map_or(0, |r| r + 1);
    let mut most = vec![vec![0u64; chunks.len()]; n_rounds];
    for (&(r, tile), &i) in &at {
        let it = fp.items[i];
        let same_keys = at.get(&(r, tile ^ 1)).is_some_and(|&j| {
            let p = fp.items[j];
            (g.kv_of(p.batch), p.k0) == (g.kv_of(it.batch), it.k0)
        });
        for (c, &(_, clen)) in chunks.iter().enumerate() {
            let q = if c == 0 {
                (g.rows * g.d) as u64 * ab
            } else {
                0
            };
            let dv = if fp.resident_v(i) { 0 } else { g.dv };
            let kv = (clen * (g.d + dv)) as u64 * ab;
            // A pair of the same key block takes its multicast at twice a tile's rate: at
            // half in the later chunks, which carry it alone; in the first, beside each tile's
            // own `q` rows, at the share the matmul's staging counts
            // (`ops::matmul::PAIR_SHARED_NUM / PAIR_SHARED_DEN`).
            let kv = match (same_keys, c) {
                (false, _) => kv,
                (true, 0) => (kv * PAIR_SHARED_NUM).div_ceil(PAIR_SHARED_DEN),
                (true, _) => kv / 2,
            };
            most[r][c] = most[r][c].max(q + kv + mask_bytes);
        }
    }
    most
}

/// The cycles of the `NAME.prep` step ([`prep_ops`] on every home tile, costed) and its sync.
fn prep_cycles(fp: &FlashPlan) -> u64 {
    let placeholders = |tiles: &BTreeMap<u32, usize>| -> BTreeMap<u32, BufferId> {
        tiles.keys().map(|&t| (t, BufferId(0))).collect()
    };
    let staging = [0, 1, 2].map(|x| placeholders(&fp.home_positions[x]));
    let mask_staging = placeholders(&fp.mask_positions);
    let mut prep = BTreeMap::new();
    let mut alloc = |_: u32, _: u32, _: String, _: bool| BufferId(0);
    prep_ops("", fp, &staging, &mask_staging, &mut alloc, &mut prep);
    let slowest = prep
        .values_mut()
        .map(|ops| {
            ops.push(SupOp::WaitW);
            estimate(ops)
        })
        .max();
    slowest.map_or(0, |c| c + ipu_target::SYNC_CYCLES as u64)
}

/// The parts of [`modelled_cycles`]: the slowest item of each chunk, the merge, the exchanges.
struct FlashModel {
    /// The homes' preparation step with its sync.
    prep: u64,
    /// Per chunk of the keys, its slowest item's cycles and the item.
    per_chunk: Vec<(u64, usize)>,
    /// The slowest merge's compute, times the merges of the busiest tile.
    merge: u64,
    /// The distributions' receive time with their overheads and syncs.
    recv: u64,
    /// The merge exchange with its overhead and sync.
    merge_x: u64,
    /// Items per tile.
    k: u64,
}

impl FlashModel {
    fn compute(&self) -> u64 {
        self.k * self.per_chunk.iter().map(|c| c.0).sum::<u64>()
    }

    fn cycles(&self, chunks: u64) -> u64 {
        let sync = ipu_target::SYNC_CYCLES as u64;
        self.prep
            + self.compute()
            + self.k * chunks * sync
            + self.merge
            + sync
            + self.recv
            + self.merge_x
    }
}

/// The modelled cycles of a plan: the slowest item's and merge's supervisor programs
/// (`estimate`), the receive time of the busiest tile in each exchange, and the syncs.
pub fn modelled_cycles(fp: &FlashPlan) -> (u64, u64) {
    let m = model(fp);
    tracing::debug!(
        prep = m.prep,
        compute = m.compute(),
        merge = m.merge,
        recv = m.recv,
        merge_x = m.merge_x,
        k = m.k,
        "flash model parts"
    );
    (m.cycles(fp.geo.chunks().len() as u64), m.recv + m.merge_x)
}

/// [`modelled_cycles`] by part, in cycles summing to it: the slowest items' compute by
/// kernel (`AmpChain`, `FlashSoftmax`, ...), the syncs, the homes, the distributions, the
/// merge's exchange and compute.
pub fn modelled_parts(fp: &FlashPlan) -> Vec<(String, u64)> {
    let m = model(fp);
    let chunks = fp.geo.chunks().len() as u64;
    let mut by_kernel: BTreeMap<String, u64> = BTreeMap::new();
    for (c, &(_, item)) in m.per_chunk.iter().enumerate() {
        for (name, cycles) in
            crate::cost::estimate_by_kernel(&item_ops(fp, item, &COSTING_BUFFERS, c))
        {
            *by_kernel.entry(name).or_insert(0) += m.k * cycles;
        }
    }
    let sync = ipu_target::SYNC_CYCLES as u64;
    let mut parts: Vec<(String, u64)> = by_kernel.into_iter().collect();
    parts.sort_by_key(|p| std::cmp::Reverse(p.1));
    parts.extend([
        ("homes".to_string(), m.prep),
        ("distribution".to_string(), m.recv),
        ("merge_exchange".to_string(), m.merge_x),
        ("merge".to_string(), m.merge),
        ("syncs".to_string(), m.k * chunks * sync + sync),
    ]);
    debug_assert_eq!(parts.iter().map(|p| p.1).sum::<u64>(), m.cycles(chunks));
    parts
}

fn model(fp: &FlashPlan) -> FlashModel {
    let g = &fp.geo;
    let sync = ipu_target::SYNC_CYCLES as u64;
    let overhead = ipu_target::EXCHANGE_PHASE_OVERHEAD_CYCLES as u64;
    // Items differ by their valid rows and keys and their place on the diagonal. Each chunk of
    // the keys is its own step, which ends with its slowest item.
    let mut seen = BTreeSet::new();
    let mut per_chunk = vec![(0u64, 0usize); g.chunks().len()];
    for i in 0..fp.items.len() {
        let it = fp.items[i];
        let diag = if g.causal {
            // Beyond these bounds every row sees all keys or none.
            (it.q0 as i64 - it.k0 as i64).clamp(-(g.rows as i64), g.keys as i64)
        } else {
            0
        };
        if seen.insert((fp.valid_rows(i), fp.valid_keys(i), diag)) {
            for (c, most) in per_chunk.iter_mut().enumerate() {
                let cycles = estimate(&item_ops(fp, i, &COSTING_BUFFERS, c));
                if cycles > most.0 {
                    *most = (cycles, i);
                }
            }
        }
    }
    let mut merge = 0u64;
    let mut merge_recv = 0u64;
    let mut seen = BTreeSet::new();
    for c in &fp.combiners {
        let rows = (c.r1 - c.r0) as u32;
        if seen.insert((rows, c.sources.len())) {
            let srcs: Vec<Source> = c
                .sources
                .iter()
                .map(|_| (BufferId(0), 0, rows * GRB, 0))
                .collect();
            merge = merge.max(estimate(&merge_ops(
                g,
                rows,
                &srcs,
                BufferId(1),
                0,
                BufferId(2),
            )));
            let recv = (c.sources.len() as u64 - 1) * (g.gv() as u64 + 1) * (rows * GRB) as u64;
            merge_recv = merge_recv.max(recv / 4);
        }
    }
    // A tile with several items computes them and their merges one after another.
    let k = fp.items_per_tile().max(1) as u64;
    let mut merges: BTreeMap<u32, u64> = BTreeMap::new();
    for c in &fp.combiners {
        *merges.entry(fp.items[c.own].tile).or_insert(0) += 1;
    }
    let km = merges.values().copied().max().unwrap_or(1);
    let (merge, merge_recv) = (merge * km, merge_recv * km);
    // Each round has its own distribution and scores step per chunk of the items' keys.
    let chunks = g.chunks();
    let mask_bytes = if g.mask.is_some() {
        (g.mask_rows() * g.chunk_keys_padded() * g.pb()) as u64
    } else {
        0
    };
    // Each step's distribution ends when its busiest receiver has received and its busiest
    // home has sent, whichever is later.
    let sends = distribution_sends(fp);
    let receives = distribution_receives(fp, mask_bytes);
    let recv = (0..k as usize)
        .flat_map(|r| (0..chunks.len()).map(move |c| (r, c)))
        .map(|(r, c)| {
            let sent = sends.get(r).and_then(|s| s.get(c)).copied().unwrap_or(0);
            let received = receives.get(r).and_then(|s| s.get(c)).copied().unwrap_or(0);
            received.max(sent) / 4 + overhead + sync
        })
        .sum::<u64>();
    let merge_x = if merge_recv > 0 {
        merge_recv + overhead + sync
    } else {
        0
    };
    FlashModel {
        prep: prep_cycles(fp),
        per_chunk,
        merge,
        recv,
        merge_x,
        k,
    }
}
