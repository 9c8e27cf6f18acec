//! The items, merges and homes of a flash attention mapping ([`FlashPlan`], [`layout`]):
//! which tile computes which block of rows and keys, which items merge into which, and which
//! tiles hold the inputs' homes.

use super::geometry::*;
use crate::layout::{Layout, Piece};

/// One tile's block: rows `q0..q0 + rows` and keys `k0..k0 + keys` of batch entry `batch`
/// (clipped to the sequence lengths).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlashItem {
    /// Tile.
    pub tile: u32,
    /// Batch entry (of `q` and the output; `k` and `v` are at [`FlashGeometry::kv_of`]).
    pub batch: usize,
    /// First query row.
    pub q0: usize,
    /// First key.
    pub k0: usize,
}

/// The merge of some rows of one query block: on the tile of item `own`, rows `r0..r1` of the
/// block (relative to its `q0`), from the partials of `sources` (items, in key order).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FlashCombiner {
    /// The item whose tile merges.
    pub own: usize,
    /// First row (relative).
    pub r0: usize,
    /// One past the last row (relative).
    pub r1: usize,
    /// Items holding partials of these rows, in key order.
    pub sources: Vec<usize>,
    /// Element offset of its rows in its tile's buffer of the output
    /// (`[dv / gout][rows][gout]` from there).
    pub out_local: usize,
}

/// Positions `s0..s1` of batch entry `batch` of `q`, `k` or `v` (kv batch entries for `k` and
/// `v`), held on `tile` from local position `local`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlashHome {
    /// Tile.
    pub tile: u32,
    /// Batch entry.
    pub batch: usize,
    /// First position.
    pub s0: usize,
    /// One past the last position.
    pub s1: usize,
    /// Position index on the tile.
    pub local: usize,
}

/// A planned flash attention.
#[derive(Debug, Clone, PartialEq)]
pub struct FlashPlan {
    /// Shape, types and mapping.
    pub geo: FlashGeometry,
    /// Items, numbered kv-head-major, then by key block, then by query head, then by query
    /// block.
    pub items: Vec<FlashItem>,
    /// Merges.
    pub combiners: Vec<FlashCombiner>,
    /// Homes of q, k, v.
    pub homes: [Vec<FlashHome>; 3],
    /// Positions held per tile, per tensor (for home buffer sizes).
    pub home_positions: [std::collections::BTreeMap<u32, usize>; 3],
    /// Homes of the mask: `batch` is `entry * key groups + key group`, positions are the
    /// mask's rows, each one group of `cols` partials wide.
    pub mask_homes: Vec<FlashHome>,
    /// Mask rows held per tile.
    pub mask_positions: std::collections::BTreeMap<u32, usize>,
    /// Per item, whether its tile holds the `v` of its whole key block as its home and nothing
    /// else of `v`, in the item's layout (`[dv / cols][keys][cols]`), with no cast, in one
    /// chunk: the item reads it there and receives no `v`.
    pub resident_v: Vec<bool>,
}

impl FlashPlan {
    /// The layout of input `x` (0 q, 1 k, 2 v) on its homes, in column group `group`:
    /// per tile `[d / group][positions][group]`.
    pub fn home_layout(&self, x: usize, group: usize) -> Layout {
        let g = &self.geo;
        let (s, d) = if x == 0 {
            (g.sq, g.d)
        } else {
            (g.sk, [g.d, g.d, g.dv][x])
        };
        let dg = d / group;
        let mut pieces = Vec::new();
        for h in &self.homes[x] {
            let n = self.home_positions[x][&h.tile];
            for j in 0..dg {
                let start = ((h.batch * dg + j) * s + h.s0) * group;
                pieces.push(Piece {
                    tile: h.tile,
                    start,
                    end: start + (h.s1 - h.s0) * group,
                    local: (j * n + h.local) * group,
                });
            }
        }
        pieces.sort_by_key(|p| p.start);
        Layout { group, pieces }
    }

    /// The layout of the mask on its homes, in group `cols`: per tile `[rows][cols]` of each
    /// home in turn (the storage order of the mask in that group).
    pub fn mask_home_layout(&self) -> Layout {
        let cols = self.geo.amp().columns as usize;
        let rows = self.geo.mask.as_ref().map_or(1, |m| m.rows);
        let mut pieces: Vec<Piece> = self
            .mask_homes
            .iter()
            .map(|h| {
                let start = (h.batch * rows + h.s0) * cols;
                Piece {
                    tile: h.tile,
                    start,
                    end: start + (h.s1 - h.s0) * cols,
                    local: h.local * cols,
                }
            })
            .collect();
        pieces.sort_by_key(|p| p.start);
        Layout {
            group: cols,
            pieces,
        }
    }

    /// The layout of the output: per merging tile `[dv / gout][rows][gout]`.
    pub fn output_layout(&self) -> Layout {
        let g = &self.geo;
        let gout = g.gout();
        let dg = g.dv / gout;
        let mut pieces = Vec::new();
        for c in &self.combiners {
            let it = self.items[c.own];
            let n = c.r1 - c.r0;
            for j in 0..dg {
                let start = ((it.batch * dg + j) * g.sq + it.q0 + c.r0) * gout;
                pieces.push(Piece {
                    tile: it.tile,
                    start,
                    end: start + n * gout,
                    local: c.out_local + j * n * gout,
                });
            }
        }
        pieces.sort_by_key(|p| p.start);
        Layout {
            group: gout,
            pieces,
        }
    }

    /// The homes of input `x` holding positions `p0..p1` of batch entry `b`, in order:
    /// `(home index, first position, positions)`.
    pub fn home_runs(
        &self,
        x: usize,
        b: usize,
        p0: usize,
        p1: usize,
    ) -> Vec<(usize, usize, usize)> {
        home_runs_in(&self.homes[x], b, p0, p1)
    }

    /// [`FlashPlan::home_runs`] of the mask's homes (`b`: entry * key groups + key group).
    pub fn mask_runs(&self, b: usize, p0: usize, p1: usize) -> Vec<(usize, usize, usize)> {
        home_runs_in(&self.mask_homes, b, p0, p1)
    }

    /// The column group each input is stored in on its homes (`[d / group][positions][group]`
    /// per tile): `q` in the AMP's input block; `v` in the scores' columns, as the `P v`
    /// product reads it; `k` in whole rows where the homes transpose it in 4x4 blocks
    /// ([`FlashPlan::kt_quads`]), else in the AMP's input block.
    pub fn home_groups(&self) -> [usize; 3] {
        let amp = self.geo.amp();
        let k = if self.kt_quads() {
            self.geo.d
        } else {
            amp.k as usize
        };
        [amp.k as usize, k, amp.columns as usize]
    }

    /// Whether the homes transpose `k` into `kᵀ` in 4x4 blocks (`Kernel::TransposeQuads`):
    /// 2-byte operands, every home a whole number of key quads, and strides the kernel's
    /// immediates reach.
    pub fn kt_quads(&self) -> bool {
        let g = &self.geo;
        let (ab, cols) = (g.ab(), g.amp().columns as usize);
        ab == 2
            && g.d.is_multiple_of(4)
            && cols.is_multiple_of(4)
            && 3 * g.d * ab <= i16::MAX as usize
            && self.homes[1]
                .iter()
                .all(|h| (h.s1 - h.s0).is_multiple_of(4))
    }

    /// Per home of `k`, its first group of `cols` keys in its tile's `kᵀ` buffer (a tile's homes
    /// follow one another there), and the groups per tile.
    pub fn kt_groups(&self) -> (Vec<usize>, std::collections::BTreeMap<u32, usize>) {
        let cols = self.geo.amp().columns as usize;
        let mut per_tile = std::collections::BTreeMap::new();
        let first = self.homes[1]
            .iter()
            .map(|h| {
                let n = per_tile.entry(h.tile).or_insert(0);
                let at = *n;
                *n += (h.s1 - h.s0).div_ceil(cols);
                at
            })
            .collect();
        (first, per_tile)
    }

    /// Most items on one tile.
    /// Each item's round: how many items of its tile come before it.
    pub fn item_rounds(&self) -> Vec<usize> {
        let mut n: std::collections::BTreeMap<u32, usize> = Default::default();
        self.items
            .iter()
            .map(|it| {
                let r = n.entry(it.tile).or_insert(0);
                *r += 1;
                *r - 1
            })
            .collect()
    }

    pub fn items_per_tile(&self) -> usize {
        let mut n: std::collections::BTreeMap<u32, usize> = Default::default();
        for it in &self.items {
            *n.entry(it.tile).or_insert(0) += 1;
        }
        n.values().copied().max().unwrap_or(0)
    }

    /// Rows of the item's block that exist (the last block of a sequence is clipped).
    pub fn valid_rows(&self, item: usize) -> usize {
        (self.geo.sq - self.items[item].q0).min(self.geo.rows)
    }

    /// Keys of the item's block that exist.
    pub fn valid_keys(&self, item: usize) -> usize {
        (self.geo.sk - self.items[item].k0).min(self.geo.keys)
    }

    /// See [`FlashPlan::resident_v`](struct.FlashPlan.html#structfield.resident_v).
    pub fn resident_v(&self, item: usize) -> bool {
        self.resident_v[item]
    }
}

/// The homes among `homes` (in (batch, position) order) holding positions `p0..p1` of batch
/// entry `b`: `(home index, first position, positions)`.
pub(crate) fn home_runs_in(
    homes: &[FlashHome],
    b: usize,
    p0: usize,
    p1: usize,
) -> Vec<(usize, usize, usize)> {
    let mut hi = homes.partition_point(|h| (h.batch, h.s1) <= (b, p0));
    let mut runs = Vec::new();
    let mut pos = p0;
    while pos < p1 {
        let h = homes[hi];
        debug_assert!(h.batch == b && h.s0 <= pos && pos < h.s1);
        let run = h.s1.min(p1) - pos;
        runs.push((hi, pos, run));
        pos += run;
        hi += 1;
    }
    runs
}

/// Whether query block `[q0, q1)` needs key block `[k0, ..)`.
fn needed(causal: bool, q1: usize, k0: usize) -> bool {
    !causal || k0 < q1
}

/// Items, merges and homes of a mapping.
pub fn layout(geo: FlashGeometry, tiles: u32) -> FlashPlan {
    let mut order = Vec::new();
    let mut deferred = Vec::new();
    let mut deferred_kv = Vec::new();
    let kblocks = geo.sk.div_ceil(geo.keys);
    let group = geo.group();
    for kvb in 0..geo.kv_batch {
        for kj in 0..kblocks {
            // The query entries of one kv entry read the same key blocks: their items follow
            // one another too.
            let start = order.len();
            for b in kvb * group..(kvb + 1) * group {
                for q0 in (0..geo.sq).step_by(geo.rows) {
                    let q1 = (q0 + geo.rows).min(geo.sq);
                    if needed(geo.causal, q1, kj * geo.keys) {
                        order.push((b, q0, kj * geo.keys));
                    }
                }
            }
            // Tiles 2i and 2i + 1 share an exchange bus, and a pair receives a multicast at
            // twice a tile's rate: a key block's run of an odd length would leave the pairs of
            // every run after it straddling two key blocks. Its last item (the last query
            // block) goes to the end instead, where it pairs with the next run's last item:
            // the same query rows, and the same head's next key block.
            if !(order.len() - start).is_multiple_of(2) {
                deferred.push(order.pop().expect("a run of odd length is not empty"));
                deferred_kv.push((kvb, kj * geo.keys));
            }
        }
    }
    // Such a tile's pair takes the other key block, one after the other: the tile holds its
    // key block's `v` as its home instead (the AMP's weights where the host writes them), when
    // the block is whole in one chunk, one round, and `v` needs no cast. Its pair then receives
    // `q` by one multicast and each tile its own `kᵀ`, within the other pairs' bound.
    let resident: std::collections::BTreeMap<(usize, usize), u32> = if order.len() + deferred.len()
        <= tiles as usize
        && geo.chunks().len() == 1
        && geo.inputs[2] == geo.a
        && geo.keys.is_multiple_of(geo.amp().k as usize)
    {
        let first = order.len();
        deferred_kv
            .iter()
            .enumerate()
            .filter(|&(_, &(_, k0))| k0 + geo.keys <= geo.sk)
            .map(|(n, &kv)| (kv, (first + n) as u32))
            .collect()
    } else {
        Default::default()
    };
    order.extend(deferred);
    // Consecutive items on consecutive tiles (multicast of a key block); with more items than
    // tiles, a tile takes every `tiles`-th.
    let items: Vec<FlashItem> = order
        .into_iter()
        .enumerate()
        .map(|(i, (batch, q0, k0))| FlashItem {
            tile: (i % tiles as usize) as u32,
            batch,
            q0,
            k0,
        })
        .collect();
    let mut by_rows: std::collections::BTreeMap<(usize, usize), Vec<usize>> = Default::default();
    for (i, it) in items.iter().enumerate() {
        by_rows.entry((it.batch, it.q0)).or_default().push(i);
    }
    let mut combiners = Vec::new();
    for ((_, q0), srcs) in by_rows {
        let rv = (geo.sq - q0).min(geo.rows);
        let j = srcs.len();
        for (n, &own) in srcs.iter().enumerate() {
            let (r0, r1) = (rv * n / j, rv * (n + 1) / j);
            if r1 > r0 {
                combiners.push(FlashCombiner {
                    own,
                    r0,
                    r1,
                    sources: srcs.clone(),
                    out_local: 0,
                });
            }
        }
    }
    combiners.sort_by_key(|c| (items[c.own].tile, c.own, c.r0));
    // Each merge's rows follow the previous merges' on the same tile in the output's buffer.
    let gout = geo.gout();
    let dgo = geo.dv / gout;
    let mut at: std::collections::BTreeMap<u32, usize> = Default::default();
    for c in &mut combiners {
        let local = at.entry(items[c.own].tile).or_insert(0);
        c.out_local = *local;
        *local += (c.r1 - c.r0) * gout * dgo;
    }
    let mut homes: [Vec<FlashHome>; 3] = Default::default();
    let mut home_positions: [std::collections::BTreeMap<u32, usize>; 3] = Default::default();
    // Tiles holding a key block's `v` for their own item hold no other home: the others
    // spread over the rest.
    let reserved: std::collections::BTreeSet<u32> = resident.values().copied().collect();
    let free: Vec<u32> = (0..tiles).filter(|t| !reserved.contains(t)).collect();
    let free = if free.is_empty() {
        (0..tiles).collect()
    } else {
        free
    };
    let nf = free.len() as u64;
    for x in 0..3 {
        let s = if x == 0 { geo.sq } else { geo.sk };
        let entries = if x == 0 { geo.batch } else { geo.kv_batch };
        let unit = home_unit(x, entries * s, free.len(), geo.amp().columns as usize);
        let per = s.div_ceil(unit);
        let units = per * entries;
        let offset = x as u64 * nf / 3;
        for u in 0..units {
            let (b, s0) = (u / per, (u % per) * unit);
            let s1 = (s0 + unit).min(s);
            let tile = match resident.get(&(b, s0 - s0 % geo.keys)) {
                Some(&t) if x == 2 => t,
                _ => free[((u as u64 * nf / units as u64 + offset) % nf) as usize],
            };
            let n = home_positions[x].entry(tile).or_insert(0);
            let local = *n;
            *n += s1 - s0;
            match homes[x].last_mut() {
                Some(h) if h.tile == tile && h.batch == b && h.s1 == s0 => h.s1 = s1,
                _ => homes[x].push(FlashHome {
                    tile,
                    batch: b,
                    s0,
                    s1,
                    local,
                }),
            }
        }
    }
    // The mask's homes: units of up to 16 rows of one key group of one entry, spread over
    // the tiles like the others' (from a sixth of the way round).
    let mut mask_homes: Vec<FlashHome> = Vec::new();
    let mut mask_positions: std::collections::BTreeMap<u32, usize> = Default::default();
    if let Some(m) = &geo.mask {
        let per = m.rows.div_ceil(HOME_UNIT);
        let units = m.entries * geo.key_groups() * per;
        let offset = tiles as u64 / 6;
        for u in 0..units {
            let tile = ((u as u64 * tiles as u64 / units as u64 + offset) % tiles as u64) as u32;
            let (b, s0) = (u / per, (u % per) * HOME_UNIT);
            let s1 = (s0 + HOME_UNIT).min(m.rows);
            let n = mask_positions.entry(tile).or_insert(0);
            let local = *n;
            *n += s1 - s0;
            match mask_homes.last_mut() {
                Some(h) if h.tile == tile && h.batch == b && h.s1 == s0 => h.s1 = s1,
                _ => mask_homes.push(FlashHome {
                    tile,
                    batch: b,
                    s0,
                    s1,
                    local,
                }),
            }
        }
    }
    // Every tile may have taken another home of `v` only when no other tile was left.
    let resident_v = items
        .iter()
        .map(|it| {
            resident.get(&(geo.kv_of(it.batch), it.k0)) == Some(&it.tile)
                && home_positions[2].get(&it.tile) == Some(&geo.keys)
        })
        .collect();
    FlashPlan {
        geo,
        items,
        combiners,
        homes,
        home_positions,
        mask_homes,
        mask_positions,
        resident_v,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ipu_graph::DType;

    /// The preset's mapping: 4 heads of 2048 f16 positions, 90 rows by 128 keys on 1472 tiles.
    fn preset(inputs: DType) -> FlashGeometry {
        FlashGeometry {
            batch: 4,
            kv_batch: 4,
            sq: 2048,
            sk: 2048,
            d: 64,
            dv: 64,
            mode: ipu_target::AmpMode::F16F32,
            a: DType::F16,
            p: DType::F32,
            out: DType::F16,
            inputs: [inputs; 3],
            scale: 0.125,
            causal: false,
            rows: 90,
            keys: 128,
            sub: usize::MAX,
            table: true,
            chunk: usize::MAX,
            mask: None,
        }
    }

    #[test]
    fn the_last_item_of_an_odd_run_holds_its_key_blocks_v_and_no_other_home() {
        let fp = layout(preset(DType::F16), 1472);
        // 23 query blocks a key block: every run is odd, its last item at the end.
        let resident: Vec<usize> = (0..fp.items.len()).filter(|&i| fp.resident_v(i)).collect();
        assert_eq!(resident, (1408..1472).collect::<Vec<_>>());
        for &i in &resident {
            let tile = fp.items[i].tile;
            assert!(
                !fp.home_positions[0].contains_key(&tile),
                "q home on {tile}"
            );
            assert!(
                !fp.home_positions[1].contains_key(&tile),
                "k home on {tile}"
            );
            assert_eq!(fp.home_positions[2][&tile], 128);
        }
        // `q`'s homes, one unit a tile over the other 1408: at most 6 rows each (8,192 / 1,408),
        // each sent to 16 items.
        assert_eq!(fp.home_positions[0].values().max(), Some(&6));
        // Every position of every input still has exactly one home.
        for x in 0..3 {
            let held: usize = fp.home_positions[x].values().sum();
            assert_eq!(held, 4 * 2048, "input {x}");
        }
        // `v` that needs a cast stays spread and is distributed.
        let fp = layout(preset(DType::F143 { scale: 0 }), 1472);
        assert!((0..fp.items.len()).all(|i| !fp.resident_v(i)));
    }
}
