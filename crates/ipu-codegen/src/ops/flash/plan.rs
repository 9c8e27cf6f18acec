//! Planning of the fused `flash_attention` operation.
//!
//! The scores of a `[rows, keys]` block of one batch entry (head) are computed, turned into
//! probabilities and multiplied by `v` on one tile, in the AMP's own layouts, so no score
//! ever changes tile or layout. A mapping is `(R, nk)`: every *item* takes `R` query rows and
//! `nk` keys of one head; the items of the same rows then merge their partial results (row
//! maximum, row sum, unnormalised output) in a second exchange and compute step (the running-
//! max rescaling of flash attention, applied across key blocks). With a causal mask, blocks
//! whose keys all follow their queries are not items at all. An item whose scores would not
//! fit at once walks its keys in sub-blocks of [`SUB_KEYS`] to [`SUB_KEYS_MAX`] keys with a running maximum; an item
//! whose keys' `kᵀ` and `v` would not fit at once receives them in chunks of whole sub-blocks
//! ([`FlashGeometry::chunk`]), each chunk its own distribution and scores step into the same
//! buffers, the running maximum, sum and output staying on the tile between them. A mask
//! operand ([`FlashMask`]) is added to each item's scores in their own layout, so it too
//! never makes the scores change layout.
//!
//! Items are numbered kv-head-major, then by key block, then by query head of that kv head
//! (grouped-query attention: several query heads read one kv head; otherwise one), then by
//! query block, and sit on tiles in that order, so the items sharing a key block are on consecutive tiles and receive `k` and `v`
//! by multicast. With more items than tiles (small tile counts), item `i` goes to tile
//! `i mod tiles` in round `i / tiles`: rounds run one after another and reuse the memory of the
//! operands and scores, only the partial results staying until the merge. `q`, `k` and `v`
//! first land on *home* tiles (16 positions of one head per unit, spread over the chip), which
//! cast FP8 to f16, scale `q` by a power-of-two scale, transpose `k` and regroup `v` once for
//! all items.
//!
//! Cost model (tile cycles): per item, `ceil(nk / cols) * d / kb + dv / cols * nk / kb` AMP
//! rounds of `R` rows (see `plan.rs`), the softmax kernel's slots (and the mask kernel's),
//! the receive time of its operands (and its mask) at 4 bytes per cycle, and for merged rows the receive time of the other items'
//! partials and the merge kernel's slots; the slowest tile counts (items of several rounds add
//! up). Memory: an item's buffers, the partial results of all of a tile's items, the homes'
//! share of the inputs, and the supervisor code and vertex states (code in executable memory).

use ipu_graph::DType;
use ipu_target::EXCHANGE_BYTES_PER_CYCLE as EXCHANGE_BYTES;
use ipu_target::WORKER_CONTEXTS;
use ipu_target::{
    AmpMode, BARREL_SLOT_CYCLES, EXCHANGE_PHASE_OVERHEAD_CYCLES, SYNC_CYCLES, Target,
};

use crate::layout::{Layout, Piece};
use crate::plan::{AmpGeometry, SUPPORT_RESERVE_BYTES, amp_geometry, matmul_mode};
use crate::plan::{DevOp, DevOpKind, DevValueId, FINALISTS, Finalist, Planner};
use crate::{CodegenError, MemoryRegion};
use ipu_kernels::flash::{
    GROUP_ROW_BYTES, flash_combine_slots, flash_rescale_slots, flash_softmax_slots,
};
use ipu_kernels::{self as kernels, Elem, OVERREAD_BYTES};

/// Positions (rows of `q`, `k` or `v`) per home unit.
pub const HOME_UNIT: usize = 16;
/// Positions per home unit of `q`: a `q` home sends its rows to every key block's item of
/// them, one copy each (no multicast), so it is split finer than `k` and `v` (whose homes
/// multicast each key block once) to spread those sends over more tiles.
pub const Q_HOME_UNIT: usize = 4;

/// Positions per home unit of input `x` (0 q, 1 k, 2 v).
pub const fn home_unit(x: usize) -> usize {
    if x == 0 { Q_HOME_UNIT } else { HOME_UNIT }
}
/// Keys per block are multiples of this (the largest `max(cols, kb)` of the AMP modes).
pub const KEY_STEP: usize = 16;
/// Query rows per block are multiples of this. Any even count maps (each worker takes a share
/// of the rows, at least two in a chain of AMP rounds); a finer step than eight lets a block
/// fill the tiles exactly: the preset's 23 blocks of 90 rows by 16 of 128 keys are 1472 items,
/// 15 rows a worker, where multiples of eight give 22 blocks of 96 (1408 items, 16 a worker).
pub const ROW_STEP: usize = 2;
/// Candidates (cheapest estimates first) modelled from their tile programs.
pub const MODELLED_MAX: usize = 8;
/// Bound on the key-block sizes examined.
pub const KEY_CANDIDATES_MAX: usize = 512;

/// The shape, types and mapping of a planned flash attention.
#[derive(Debug, Clone, PartialEq)]
pub struct FlashGeometry {
    /// Batch entries (all leading dimensions, e.g. heads).
    pub batch: usize,
    /// Batch entries of `k` and `v`: fewer than `batch` with grouped-query attention, where
    /// query entry `b` reads kv entry `b / group` (see [`FlashGeometry::group`]).
    pub kv_batch: usize,
    /// Query positions.
    pub sq: usize,
    /// Key positions.
    pub sk: usize,
    /// Head dimension of `q` and `k`.
    pub d: usize,
    /// Head dimension of `v`.
    pub dv: usize,
    /// AMP mode of both products.
    pub mode: AmpMode,
    /// Operand type of the AMP (f16 or f32).
    pub a: DType,
    /// Partials type (scores and the unnormalised output).
    pub p: DType,
    /// Output type.
    pub out: DType,
    /// Input types of q, k, v.
    pub inputs: [DType; 3],
    /// Score scale (positive).
    pub scale: f32,
    /// Causal mask (key `j` hidden from query `i` when `j > i`).
    pub causal: bool,
    /// Query rows per item.
    pub rows: usize,
    /// Keys per item.
    pub keys: usize,
    /// Keys per sub-block (see [`FlashGeometry::sub_blocks`]); at least `keys` for one pass.
    pub sub: usize,
    /// Whether the AMP rounds launch the per-worker table pass (`Kernel::AmpTable`, faster to
    /// start, 96 bytes of state a round) rather than the row-bounds one (`Kernel::AmpAll`, 40).
    pub table: bool,
    /// Keys an item receives at a time (`usize::MAX`: all at once). Smaller, the item's keys
    /// stream through chunks of whole sub-blocks ([`FlashGeometry::chunks`]), each its own
    /// distribution and scores step, reusing one chunk's `kᵀ`, `v` and mask buffers, the
    /// running maximum, sum and output carried from one chunk to the next.
    pub chunk: usize,
    /// The mask operand, if any.
    pub mask: Option<FlashMask>,
}

/// The mask of a flash attention: broadcastable to the scores `[.., sq, sk]`, with every key
/// (its last dimension is `sk`) and a row per query or one row for all.
///
/// On the device it is additive in the partials type (a bool mask becomes 0 or the lowest
/// finite value, `docs/numerics.md`) and lives on its homes in the scores' key-group layout:
/// the storage order in group `cols` (`[entries][sk / cols][rows][cols]`) is exactly the
/// order of the scores' groups, so an item receives one run of rows per key group.
#[derive(Debug, Clone, PartialEq)]
pub struct FlashMask {
    /// The mask operand's type (bool, f32 or f16).
    pub dtype: DType,
    /// Entries of the mask's leading dimensions.
    pub entries: usize,
    /// Rows: `sq`, or 1 for a mask broadcast over the queries.
    pub rows: usize,
    /// Per leading dimension of `q`, its size and the stride of the mask's entries along it
    /// (0 where the mask broadcasts).
    pub batch_strides: Vec<(usize, usize)>,
}

impl FlashMask {
    /// The mask entry that query batch entry `b` reads.
    pub fn entry_of(&self, b: usize) -> usize {
        let mut rest = b;
        let mut e = 0;
        for &(size, stride) in self.batch_strides.iter().rev() {
            e += (rest % size) * stride;
            rest /= size;
        }
        e
    }
}

/// Keys of the sub-blocks an item walks through with a running maximum when its keys' scores
/// do not fit at once: bounds the scores a tile holds, whatever the keys per item.
pub const SUB_KEYS: usize = 128;
/// The largest sub-blocks tried (powers of two from [`SUB_KEYS`]).
pub const SUB_KEYS_MAX: usize = 512;

impl FlashGeometry {
    /// Query batch entries per kv batch entry (1 without grouped-query attention).
    pub fn group(&self) -> usize {
        self.batch / self.kv_batch
    }
    /// The kv batch entry query batch entry `b` reads.
    pub fn kv_of(&self, b: usize) -> usize {
        b / self.group()
    }
    /// The AMP geometry.
    pub fn amp(&self) -> AmpGeometry {
        amp_geometry(self.mode)
    }
    /// Bytes per operand element.
    pub fn ab(&self) -> usize {
        self.a.bytes()
    }
    /// Bytes per partial.
    pub fn pb(&self) -> usize {
        self.p.bytes()
    }
    /// Column group of the output in storage.
    pub fn gout(&self) -> usize {
        crate::plan::default_group(self.out)
    }
    /// Groups of `O` per row (`dv / cols`).
    pub fn gv(&self) -> usize {
        self.dv / self.amp().cols
    }
    /// Whether probabilities overwrite the scores (same type and layout).
    pub fn p_in_place(&self) -> bool {
        let g = self.amp();
        self.a == self.p && g.k_block == g.cols
    }
    /// Keys rounded to the score layout's groups.
    pub fn keys_padded(&self) -> usize {
        self.keys.div_ceil(self.amp().cols) * self.amp().cols
    }
    /// The sub-blocks of an item's keys, `(first key, keys)`: an odd-sized one first (it starts
    /// from zero partials), then whole sub-blocks of `sub` keys (an even number of AMP k
    /// blocks, so their accumulation ping-pongs back into the partial result).
    pub fn sub_blocks(&self) -> Vec<(usize, usize)> {
        if self.keys <= self.sub {
            return vec![(0, self.keys)];
        }
        let n = self.keys.div_ceil(self.sub);
        let first = self.keys - (n - 1) * self.sub;
        std::iter::once((0, first))
            .chain((0..n - 1).map(|j| (first + j * self.sub, self.sub)))
            .collect()
    }
    /// The chunks of an item's keys, `(first key, keys)`: runs of whole sub-blocks, each at
    /// most [`FlashGeometry::chunk`] keys (one sub-block at least); one chunk when unchunked.
    pub fn chunks(&self) -> Vec<(usize, usize)> {
        let subs = self.sub_blocks();
        let per = if self.chunk >= self.keys {
            subs.len()
        } else {
            (self.chunk / self.sub.min(self.keys)).max(1)
        };
        subs.chunks(per)
            .map(|c| (c[0].0, c.iter().map(|s| s.1).sum()))
            .collect()
    }
    /// The most keys of one chunk (what an item's `kᵀ`, `v` and mask buffers hold).
    pub fn chunk_keys(&self) -> usize {
        self.chunks().iter().map(|c| c.1).max().unwrap_or(self.keys)
    }
    /// [`FlashGeometry::chunk_keys`] rounded to the score layout's groups.
    pub fn chunk_keys_padded(&self) -> usize {
        self.chunk_keys().div_ceil(self.amp().cols) * self.amp().cols
    }
    /// The most keys of one sub-block.
    pub fn sub_keys(&self) -> usize {
        self.keys.min(self.sub)
    }
    /// Whether the scale is a power of two, so that the homes multiply `q` by it exactly and
    /// the softmax needs no multiplication (`flash_softmax` without `scaled`).
    pub fn prescale(&self) -> bool {
        let bits = self.scale.to_bits();
        bits & 0x007F_FFFF == 0 && (bits >> 23) & 0xFF != 0
    }
    /// Whether `flash_softmax` multiplies the scores by the scale. Not when `q` was scaled
    /// on its homes, nor with a mask: `flash_mask` scales the scores before adding it, so that
    /// the mask is added to scaled scores as the expansion does.
    pub fn softmax_scaled(&self) -> bool {
        !self.prescale() && self.mask.is_none()
    }
    /// Rows of an item's mask buffer: `R`, or 1 for a mask broadcast over the queries.
    pub fn mask_rows(&self) -> usize {
        match &self.mask {
            Some(m) if m.rows == 1 => 1,
            _ => self.rows,
        }
    }
    /// Key groups of `cols` keys of the whole sequence (the mask's groups per entry).
    pub fn key_groups(&self) -> usize {
        self.sk.div_ceil(self.amp().cols)
    }
    /// Vector element type of the partials.
    pub fn p_elem(&self) -> Elem {
        elem_of(self.p)
    }
    /// Vector element type of the operands.
    pub fn a_elem(&self) -> Elem {
        elem_of(self.a)
    }
    /// Vector element type of the output.
    pub fn out_elem(&self) -> Elem {
        elem_of(self.out)
    }
}

fn elem_of(d: DType) -> Elem {
    if d == DType::F32 {
        Elem::F32
    } else {
        Elem::F16
    }
}

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
        let cols = self.geo.amp().cols;
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

    /// Per home of `k`, its first group of `cols` keys in its tile's `kᵀ` buffer (a tile's homes
    /// follow one another there), and the groups per tile.
    pub fn kt_groups(&self) -> (Vec<usize>, std::collections::BTreeMap<u32, usize>) {
        let cols = self.geo.amp().cols;
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

/// The figures of one candidate mapping.
#[derive(Debug, Clone, PartialEq)]
pub struct FlashCandidate {
    /// Query rows per item.
    pub rows: usize,
    /// Keys per item.
    pub keys: usize,
    /// Keys per sub-block.
    pub sub: usize,
    /// The AMP rounds' launch ([`FlashGeometry::table`]).
    pub table: bool,
    /// Keys received at a time ([`FlashGeometry::chunk`]).
    pub chunk: usize,
    /// Items (tiles computing scores).
    pub items: usize,
    /// Most key blocks merged into one query block.
    pub merge: usize,
    /// Estimated cycles.
    pub estimated_cycles: u64,
    /// Estimated exchange cycles.
    pub estimated_exchange_cycles: u64,
    /// Peak bytes on an item tile.
    pub peak_bytes: u64,
}

/// Whether query block `[q0, q1)` needs key block `[k0, ..)`.
fn needed(causal: bool, q1: usize, k0: usize) -> bool {
    !causal || k0 < q1
}

/// Key blocks of query block `[q0, q0 + rows)`.
fn key_blocks(geo: &FlashGeometry, q0: usize) -> usize {
    let q1 = (q0 + geo.rows).min(geo.sq);
    let total = geo.sk.div_ceil(geo.keys);
    if geo.causal {
        q1.min(geo.sk).div_ceil(geo.keys).clamp(1, total)
    } else {
        total
    }
}

fn count_items(geo: &FlashGeometry) -> (usize, usize) {
    let mut items = 0;
    let mut most = 0;
    for q0 in (0..geo.sq).step_by(geo.rows) {
        let j = key_blocks(geo, q0);
        items += j;
        most = most.max(j);
    }
    (items * geo.batch, most)
}

/// Bytes of a tile's buffers (each with the kernels' read slack) when it takes `per_tile`
/// items in turn, with `merge` key blocks per query block: (standard, interleaved). The
/// operands and scores of an item live only during its round; its partial result lives until
/// the merge.
pub fn item_bytes(geo: &FlashGeometry, merge: usize, per_tile: usize) -> (u64, u64) {
    let amp = geo.amp();
    let (r, ab, pb) = (geo.rows as u64, geo.ab() as u64, geo.pb() as u64);
    let slack = OVERREAD_BYTES as u64;
    let kp = geo.chunk_keys_padded() as u64;
    let kk = geo.chunk_keys().div_ceil(amp.k_block) as u64 * amp.k_block as u64;
    let sub = geo.sub_keys() as u64;
    let q = r * geo.d as u64 * ab + slack;
    let kt = kp * geo.d as u64 * ab;
    let v = kk * geo.dv as u64 * ab;
    let s = r * sub * pb + slack;
    let p = if geo.p_in_place() {
        0
    } else {
        r * sub * ab + slack
    };
    let t = r * GROUP_ROW_BYTES as u64 + slack;
    let part = (geo.gv() as u64 + 1) * r * GROUP_ROW_BYTES as u64 + slack;
    let rows_c = (geo.rows as u64).div_ceil(merge as u64);
    let stage =
        (merge as u64 - 1) * (geo.gv() as u64 + 1) * rows_c * GROUP_ROW_BYTES as u64 + slack;
    let scratch = 6 * geo.dv as u64 * 4 + slack;
    let out = rows_c * geo.dv as u64 * geo.out.bytes() as u64 + slack;
    let n = per_tile as u64;
    // The item's mask: its rows (or one) by its keys, in the partials type.
    let mask = if geo.mask.is_some() {
        geo.mask_rows() as u64 * kp * pb + slack
    } else {
        0
    };
    (
        q + s + p + t + mask + n * (part + stage + out) + scratch,
        kt + v,
    )
}

/// Bytes of an item's supervisor code and vertex states: `(code per item, states per item,
/// states per tile)`. Code: 20 bytes per AMP round (`setzi` and `ampw`, `setzi` of the state
/// and `runall`, `waitw`), about 160 per sub-block for the softmax's and rescale's launches and
/// 512 for the rest. States: identical states of a tile are stored once (`emit`), and the
/// items of a tile reuse its buffers, so the `q kᵀ` rounds' states (120, 96 or 40 bytes, see
/// [`FlashGeometry::table`] and [`crate::lower::amp_chains`]) are the same for every sub-block
/// and item: one set per tile. The `P v` rounds write the item's own partial result, a set for
/// the first sub-block and, with more than one, a set for the others; the
/// softmax, rescale and mask launches about 300 bytes per sub-block, and 6 launches of a
/// 32-byte mask state per key group for the sub-blocks a causal diagonal or padding crosses.
pub fn item_code_bytes(geo: &FlashGeometry) -> (u64, u64, u64) {
    let amp = geo.amp();
    let rounds = (geo.keys.div_ceil(amp.cols) * (geo.d / amp.k_block)
        + geo.gv() * geo.keys.div_ceil(amp.k_block)) as u64;
    let subs = geo.sub_blocks().len() as u64;
    let sk = geo.sub_keys();
    let code = 20 * rounds + 160 * subs + 512;
    let s_states = (sk.div_ceil(amp.cols) * (geo.d / amp.k_block)) as u64;
    let pv_states = subs.min(2) * (geo.gv() * sk.div_ceil(amp.k_block)) as u64;
    let crossed = if geo.causal { 3 } else { 1 };
    let mask_states = crossed * sk.div_ceil(amp.cols) as u64 * 6 * 32;
    // Six entries of a table: 20 bytes each in a chain of rounds, 16 otherwise.
    let amp_state = if geo.table && crate::lower::amp_chains(geo.rows as u32) {
        6 * kernels::AmpChainState::ENTRY_BYTES as u64
    } else if geo.table {
        96
    } else {
        40
    };
    (
        code,
        amp_state * pv_states + 300 * subs + mask_states + 512,
        amp_state * s_states,
    )
}

/// Worker issue slots of an AMP round over `rows` rows (the slowest worker) and the
/// supervisor's part, in cycles.
fn amp_round_cycles(rows: usize, table: bool) -> u64 {
    let slot = BARREL_SLOT_CYCLES as u64;
    let per = (rows as u32).div_ceil(6);
    let worker = if table && crate::lower::amp_chains(rows as u32) {
        // A round inside a chain: it stores the last row of the one before and leaves its own
        // in the AMP (the chain's ends: `amp_chain_ends_slots`).
        kernels::amp_chain_slots(per, true, true, false)
    } else if table && rows >= 6 {
        kernels::amp_table_dense_slots(per, true)
    } else if table {
        kernels::amp_table_slots(per, true)
    } else {
        kernels::amp_all_slots(per, true)
    };
    // The slowest worker of the `runall`, the supervisor's `setzi` and `ampw` (and the weight
    // load), `setzi` of the state and `runall` (the `waitw` issues while the workers run); a
    // dense round's two `setzi`s issue while the round before it runs.
    let setzi = if table && rows >= 6 { 0 } else { 2 };
    slot * (worker as u64 + 1 + setzi) + 32
}

/// Worker issue slots that a chain of AMP rounds over `rows` rows spends at its ends beyond
/// [`amp_round_cycles`] of each of its rounds: its first round stores no carry and its last
/// drains (0 when the rounds do not chain).
fn amp_chain_ends_slots(rows: usize, table: bool) -> u64 {
    if !(table && crate::lower::amp_chains(rows as u32)) {
        return 0;
    }
    let per = (rows as u32).div_ceil(6);
    let middle = kernels::amp_chain_slots(per, true, true, false);
    let ends = kernels::amp_chain_slots(per, true, false, false)
        + kernels::amp_chain_slots(per, true, true, true);
    (ends - 2 * middle) as u64
}

/// Cycles of the preparation of a mask home holding `rows` rows: the cast to the partials
/// type (for a bool mask, `flash_mask_bool`: the additive mask at once), over six workers (0 without a mask
/// or when the mask is already in the partials type).
pub fn mask_prep_cycles(geo: &FlashGeometry, rows: u64) -> u64 {
    let Some(m) = &geo.mask else {
        return 0;
    };
    if m.dtype == geo.p {
        return 0;
    }
    let elems = rows * geo.amp().cols as u64;
    let groups = elems.div_ceil(4).div_ceil(WORKER_CONTEXTS as u64) as u32;
    let slots = if m.dtype == DType::Bool {
        kernels::flash::flash_mask_bool_slots(geo.p_elem(), groups)
    } else {
        let (f, t) = (
            crate::plan::cast_type(m.dtype),
            crate::plan::cast_type(geo.p),
        );
        kernels::cast_slots(f, t, groups)
    };
    BARREL_SLOT_CYCLES as u64 * slots as u64 + SYNC_CYCLES as u64
}

/// The analytical estimate of a mapping: (cycles, exchange cycles).
pub fn estimate(geo: &FlashGeometry, merge: usize) -> (u64, u64) {
    let amp = geo.amp();
    let slot = BARREL_SLOT_CYCLES as u64;
    let (r, nk) = (geo.rows, geo.keys);
    let rounds =
        nk.div_ceil(amp.cols) * (geo.d / amp.k_block) + geo.gv() * nk.div_ceil(amp.k_block);
    // Per sub-block, the `q kᵀ` rounds are one chain and the `P v` rounds another.
    let chains = 2 * geo.sub_blocks().len() as u64;
    let amp_cycles = rounds as u64 * amp_round_cycles(r, geo.table)
        + chains * slot * amp_chain_ends_slots(r, geo.table);
    let lkeys = amp.cols.max(amp.k_block);
    // The softmax of each sub-block (after the first, a running one), and after it the
    // partial output rescaled to the new maxima.
    let per = r.div_ceil(6) as u32;
    let stats: u64 = geo
        .sub_blocks()
        .iter()
        .enumerate()
        .map(|(si, &(_, keys))| {
            let running = si > 0;
            let softmax = flash_softmax_slots(
                geo.p_elem(),
                geo.a_elem(),
                amp.cols as u32,
                amp.k_block as u32,
                geo.softmax_scaled(),
                running,
                per,
                keys.div_ceil(lkeys) as u32,
                kernels::flash::baked_stride(r as u32 * GROUP_ROW_BYTES) != 0,
            );
            let rescale = if running {
                flash_rescale_slots(geo.p_elem(), per, geo.gv() as u32)
            } else {
                0
            };
            slot * (softmax + rescale) as u64
        })
        .sum();
    // The mask's add (with the scaling when `q` is not prescaled), and its receive time.
    let (mask, mask_recv) = if geo.mask.is_some() {
        let slots = kernels::flash::flash_mask_slots(
            geo.p_elem(),
            !geo.prescale(),
            geo.mask_rows() == 1,
            r.div_ceil(6) as u32,
            nk.div_ceil(amp.cols) as u32,
        );
        let bytes = geo.mask_rows() * geo.keys_padded() * geo.pb();
        (
            slot * slots as u64,
            (bytes / EXCHANGE_BYTES as usize) as u64,
        )
    } else {
        (0, 0)
    };
    let causal_mask = if geo.causal {
        slot * kernels::mask_rows_bound_slots(
            geo.p != DType::F32,
            r.div_ceil(WORKER_CONTEXTS as usize) as u32,
            amp.cols as u32,
        ) as u64
            * (r.div_ceil(amp.cols) as u64 + 1)
    } else {
        0
    };
    let recv = ((r * geo.d + nk * (geo.d + geo.dv)) * geo.ab()) as u64 / EXCHANGE_BYTES as u64;
    // Each chunk of streamed keys is its own distribution and scores step.
    let chunks = geo.chunks().len() as u64;
    let distribute = recv
        + mask_recv
        + chunks * (EXCHANGE_PHASE_OVERHEAD_CYCLES as u64 + 2 * SYNC_CYCLES as u64)
        - SYNC_CYCLES as u64;
    let rows_c = r.div_ceil(merge);
    let merge_recv = if merge > 1 {
        ((merge - 1) * (geo.gv() + 1) * rows_c * GROUP_ROW_BYTES as usize) as u64
            / EXCHANGE_BYTES as u64
            + EXCHANGE_PHASE_OVERHEAD_CYCLES as u64
            + SYNC_CYCLES as u64
    } else {
        0
    };
    let combine = slot
        * flash_combine_slots(
            geo.p_elem(),
            geo.out_elem(),
            amp.cols as u32,
            geo.gout() as u32,
            geo.dv as u32,
            rows_c.div_ceil(6) as u32,
            merge as u32,
        ) as u64;
    // Homes: one transpose of their k positions (about 4 slots per element over 6 workers).
    let prep = (HOME_UNIT * geo.d) as u64 * 4 + SYNC_CYCLES as u64;
    let exchange = distribute + merge_recv;
    (
        amp_cycles
            + stats
            + mask
            + causal_mask
            + combine
            + prep
            + 2 * SYNC_CYCLES as u64
            + exchange,
        exchange,
    )
}

/// Plans a flash attention of `q [.., sq, d]`, `k [.., sk, d]`, `v [.., sk, dv]` over
/// `tiles` tiles: every candidate `(R, nk)` is costed; the candidates are returned cheapest
/// first, with the geometry (whose `rows` and `keys` each candidate sets).
#[allow(clippy::too_many_arguments)]
pub fn plan_flash(
    name: &str,
    shapes: [&[usize]; 3],
    inputs: [DType; 3],
    mask: Option<(&[usize], DType)>,
    scale: f32,
    causal: bool,
    partials: DType,
    out: DType,
    target: &Target,
    tiles: u32,
) -> Result<(Vec<FlashCandidate>, FlashGeometry), CodegenError> {
    let unsupported = |why: String| Err(CodegenError::unsupported(format!("%{name}"), why));
    let [qs, ks, vs] = shapes;
    let rank = qs.len();
    if rank < 2 || ks.len() != rank || vs.len() != rank {
        return unsupported("q, k and v must have the same rank, at least 2".into());
    }
    let batch: usize = qs[..rank - 2].iter().product();
    let kv_batch: usize = ks[..rank - 2].iter().product();
    if kv_batch == 0 || !batch.is_multiple_of(kv_batch) || vs[..rank - 2] != ks[..rank - 2] {
        return unsupported(format!(
            "k and v need the same batch entries, a divisor of q's {batch} (got {kv_batch})"
        ));
    }
    let (sq, d) = (qs[rank - 2], qs[rank - 1]);
    let (sk, dv) = (ks[rank - 2], vs[rank - 1]);
    if !(scale > 0.0 && scale.is_finite()) {
        return unsupported(format!(
            "the device lowering needs a positive finite scale (got {scale})"
        ));
    }
    let a = if inputs.iter().all(|t| *t == DType::F32) {
        DType::F32
    } else {
        DType::F16
    };
    if inputs.contains(&DType::F32) && a != DType::F32 {
        return unsupported("q, k and v must all be f32 or none".into());
    }
    let Some(mode) = matmul_mode(a, partials) else {
        return unsupported(format!(
            "partials {partials} with {a} operands have no AMP mode"
        ));
    };
    if !target.supports_amp(mode) {
        return unsupported(format!("AMP mode {mode:?} not on {}", target.kind));
    }
    if d % KEY_STEP != 0 || dv % KEY_STEP != 0 || d == 0 || dv == 0 {
        return unsupported(format!(
            "head_dim {d} (v: {dv}) is not a multiple of {KEY_STEP}, which the AMP's blocks \
             and the output layout need"
        ));
    }
    if out.is_fp8() {
        return unsupported("an FP8 output is not lowered; use f16 or f32".into());
    }
    let mask = match mask {
        None => None,
        Some((ms, dtype)) => {
            // The verifier has checked that the mask broadcasts to the scores.
            let mr = ms.len();
            let (rows, keys) = match mr {
                0 => (1, 1),
                1 => (1, ms[0]),
                _ => (ms[mr - 2], ms[mr - 1]),
            };
            if keys != sk {
                return unsupported(format!(
                    "a mask broadcast over the keys (its last dimension {keys}, the keys {sk}) \
                     is not lowered to the device; give it every key"
                ));
            }
            if rows != sq && rows != 1 {
                return unsupported(format!(
                    "the mask's rows ({rows}) are neither the queries ({sq}) nor 1"
                ));
            }
            let lead = &ms[..mr.saturating_sub(2)];
            let qlead = &qs[..rank - 2];
            if lead.len() > qlead.len() {
                return unsupported("the mask has more leading dimensions than q".into());
            }
            let mut batch_strides = vec![(0, 0); qlead.len()];
            let mut stride = 1;
            for (i, &size) in qlead.iter().enumerate().rev() {
                let from_end = qlead.len() - 1 - i;
                let m = if from_end < lead.len() {
                    lead[lead.len() - 1 - from_end]
                } else {
                    1
                };
                if m != 1 && m != size {
                    return unsupported(format!(
                        "the mask's leading dimension {m} does not broadcast to q's {size}"
                    ));
                }
                batch_strides[i] = (size, if m == 1 { 0 } else { stride });
                stride *= m;
            }
            Some(FlashMask {
                dtype,
                entries: lead.iter().product(),
                rows,
                batch_strides,
            })
        }
    };
    let mut geo = FlashGeometry {
        batch,
        kv_batch,
        sq,
        sk,
        d,
        dv,
        mode,
        a,
        p: partials,
        out,
        inputs,
        scale,
        causal,
        rows: ROW_STEP,
        keys: KEY_STEP,
        sub: usize::MAX,
        table: true,
        chunk: usize::MAX,
        mask,
    };
    let available = target.memory_bytes() as u64 - SUPPORT_RESERVE_BYTES;
    let interleaved = target.interleaved_bytes() as u64 - 8 * 1024;
    // Supervisor code shares executable memory with the kernels and the runtime.
    let executable = (target.executable_end - target.executable_base) as u64 - 32 * 1024;
    let mut candidates = Vec::new();
    // The mapping closest to fitting: bytes over, rows, keys, and the constraint it misses
    // most (region, bytes needed, bytes available).
    let mut closest: Option<(u64, usize, usize, MemoryRegion, u64, u64)> = None;
    let key_max = sk.div_ceil(KEY_STEP) * KEY_STEP;
    let row_max = sq.div_ceil(ROW_STEP) * ROW_STEP;
    let mut nk = KEY_STEP;
    let step = (key_max / KEY_STEP).div_ceil(KEY_CANDIDATES_MAX).max(1) * KEY_STEP;
    // What the homes hold for the whole operation: each tensor's positions in the input type,
    // its FP8 cast, and `q` scaled, `kᵀ`, `v` regrouped.
    let cols = amp_geometry(mode).cols;
    let prescaled = geo.prescale();
    let home_bytes: u64 = [(sq, d, 0), (sk, d, 1), (sk, dv, 2)]
        .iter()
        .map(|&(s, width, x)| {
            let entries = if x == 0 { batch } else { kv_batch };
            let units = (entries * s.div_ceil(home_unit(x))) as u64;
            let n = home_unit(x) as u64 * units.div_ceil(tiles as u64);
            let copies = usize::from(inputs[x] != a)
                + match x {
                    0 => usize::from(prescaled),
                    1 => 1,
                    _ => 0,
                };
            n * width as u64 * (inputs[x].bytes() + copies * a.bytes()) as u64
        })
        .sum::<u64>()
        + geo.mask.as_ref().map_or(0, |m| {
            // The mask's rows per key group, in its type and in the partials type.
            let units = (m.entries * sk.div_ceil(cols) * m.rows.div_ceil(HOME_UNIT)) as u64;
            let n = HOME_UNIT as u64 * units.div_ceil(tiles as u64);
            let copies = usize::from(m.dtype != partials);
            n * cols as u64 * (m.dtype.bytes() + copies * partials.bytes()) as u64
        });
    // The busiest mask home's preparation (the homes do not depend on the mapping).
    let mask_prep = geo.mask.as_ref().map_or(0, |m| {
        let units = (m.entries * sk.div_ceil(cols) * m.rows.div_ceil(HOME_UNIT)) as u64;
        mask_prep_cycles(&geo, HOME_UNIT as u64 * units.div_ceil(tiles as u64))
    });
    while nk <= key_max {
        geo.keys = nk;
        // Rows per item: the fewest whose items fit on the tiles one per tile, and, for small
        // tile counts, powers of two that take several rounds of items per tile.
        let mut rows_options = Vec::new();
        let (mut lo, mut hi) = (1, row_max / ROW_STEP);
        geo.rows = hi * ROW_STEP;
        if count_items(&geo).0 <= tiles as usize {
            while lo < hi {
                let mid = (lo + hi) / 2;
                geo.rows = mid * ROW_STEP;
                if count_items(&geo).0 <= tiles as usize {
                    hi = mid;
                } else {
                    lo = mid + 1;
                }
            }
            rows_options.push(lo * ROW_STEP);
        }
        let mut r = ROW_STEP;
        while r < row_max && !rows_options.contains(&r) {
            rows_options.push(r);
            r *= 2;
        }
        if !rows_options.contains(&row_max) {
            rows_options.push(row_max);
        }
        for rows in rows_options {
            geo.rows = rows;
            let (items, merge) = count_items(&geo);
            let per_tile = items.div_ceil(tiles as usize);
            // One pass over the keys, or sub-blocks of SUB_KEYS keys up to SUB_KEYS_MAX (fewer
            // rescales of the partial output the larger they are), each launch form: the
            // cheapest that fits. Only when none fits, the keys streamed in chunks of whole
            // sub-blocks, every chunk and sub-block size: again the cheapest that fits.
            let mut subs = vec![usize::MAX];
            let mut sub = SUB_KEYS_MAX;
            while sub >= SUB_KEYS {
                if nk > sub {
                    subs.push(sub);
                }
                sub /= 2;
            }
            let mut options: Vec<(usize, bool, usize)> = subs
                .iter()
                .flat_map(|&sub| [(sub, true, usize::MAX), (sub, false, usize::MAX)])
                .collect();
            let mut chunk = SUB_KEYS;
            let mut chunks = Vec::new();
            while chunk < nk {
                chunks.push(chunk);
                chunk *= 2;
            }
            for &c in chunks.iter().rev() {
                for &sub in subs.iter().filter(|&&sub| sub <= c) {
                    options.extend([(sub, true, c), (sub, false, c)]);
                }
            }
            let mut best: Option<FlashCandidate> = None;
            for (sub, table, chunk) in options {
                if chunk != usize::MAX && best.as_ref().is_some_and(|b| b.chunk == usize::MAX) {
                    break;
                }
                geo.sub = sub;
                geo.table = table;
                geo.chunk = chunk;
                let (std_bytes, il_bytes) = item_bytes(&geo, merge, per_tile);
                let (code, states, shared_states) = item_code_bytes(&geo);
                let code = code * per_tile as u64;
                let need = std_bytes
                    + il_bytes
                    + home_bytes
                    + code
                    + states * per_tile as u64
                    + shared_states;
                if need > available || il_bytes > interleaved || code > executable {
                    let (over, region, need, have) = [
                        (MemoryRegion::Any, need, available),
                        (MemoryRegion::Interleaved, il_bytes, interleaved),
                        (MemoryRegion::Executable, code, executable),
                    ]
                    .into_iter()
                    .map(|(r, n, a)| (n.saturating_sub(a), r, n, a))
                    .fold(
                        (0, MemoryRegion::Any, 0, 0),
                        |w, o| if o.0 > w.0 { o } else { w },
                    );
                    if closest.is_none_or(|c| over < c.0) {
                        closest = Some((over, geo.rows, nk, region, need, have));
                    }
                    continue;
                }
                let (cycles, exchange) = estimate(&geo, merge);
                let (cycles, exchange) = (
                    cycles * per_tile as u64 + mask_prep,
                    exchange * per_tile as u64,
                );
                let candidate = FlashCandidate {
                    rows: geo.rows,
                    keys: nk,
                    sub,
                    table,
                    chunk,
                    items,
                    merge,
                    estimated_cycles: cycles,
                    estimated_exchange_cycles: exchange,
                    peak_bytes: need,
                };
                if best
                    .as_ref()
                    .is_none_or(|b| candidate.estimated_cycles < b.estimated_cycles)
                {
                    best = Some(candidate);
                }
            }
            candidates.extend(best);
        }
        nk += step;
    }
    if candidates.is_empty() {
        return Err(match closest {
            Some((_, rows, keys, region, need, have)) => CodegenError::DoesNotFit {
                op: Some(format!("%{name}")),
                tile: None,
                region,
                need_bytes: need,
                available_bytes: have,
                detail: format!(
                    "flash attention [{batch} x {sq} x {d}] over {tiles} tiles: the closest \
                     mapping ({rows} rows x {keys} keys per tile, with the inputs' share of the \
                     homes) is counted, with {SUPPORT_RESERVE_BYTES} bytes reserved per tile"
                ),
            },
            None => CodegenError::unsupported(
                format!("%{name}"),
                format!(
                    "flash attention [{batch} x {sq} x {d}] has no mapping of at least \
                     {KEY_STEP} keys per tile"
                ),
            ),
        });
    }
    candidates.sort_by_key(|c| (c.estimated_cycles, c.keys));
    Ok((candidates, geo))
}

/// Items, merges and homes of a mapping.
pub fn layout(geo: FlashGeometry, tiles: u32) -> FlashPlan {
    let mut order = Vec::new();
    let mut deferred = Vec::new();
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
            }
        }
    }
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
    for x in 0..3 {
        let s = if x == 0 { geo.sq } else { geo.sk };
        let unit = home_unit(x);
        let per = s.div_ceil(unit);
        let units = per * if x == 0 { geo.batch } else { geo.kv_batch };
        let offset = x as u64 * tiles as u64 / 3;
        for u in 0..units {
            let tile = ((u as u64 * tiles as u64 / units as u64 + offset) % tiles as u64) as u32;
            let (b, s0) = (u / per, (u % per) * unit);
            let s1 = (s0 + unit).min(s);
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
    FlashPlan {
        geo,
        items,
        combiners,
        homes,
        home_positions,
        mask_homes,
        mask_positions,
    }
}

impl Planner<'_> {
    /// A fused flash attention: candidates `(rows, keys)` per tile are costed
    /// (`crate::ops::flash::plan::plan_flash`), the finalists modelled from their tile programs, the best
    /// selected. Inputs that only this operation reads are laid out on their homes.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn plan_flash(
        &mut self,
        op: &ipu_graph::Operation,
        ins: &[DevValueId],
        out_val: &ipu_graph::Value,
        scale: f32,
        causal: bool,
        partials: DType,
        out_dtype: DType,
    ) -> Result<(), CodegenError> {
        let shapes = [
            &self.values[ins[0]].shape[..],
            &self.values[ins[1]].shape[..],
            &self.values[ins[2]].shape[..],
        ];
        let dtypes = [
            self.values[ins[0]].dtype,
            self.values[ins[1]].dtype,
            self.values[ins[2]].dtype,
        ];
        let mask = ins
            .get(3)
            .map(|&m| (&self.values[m].shape[..], self.values[m].dtype));
        let (candidates, base) = crate::ops::flash::plan::plan_flash(
            &op.name,
            shapes,
            dtypes,
            mask,
            scale,
            causal,
            partials,
            out_dtype,
            self.target,
            self.tiles,
        )?;
        tracing::info!(
            operation = %op.name,
            candidates = candidates.len(),
            "screened flash attention mappings"
        );
        // The cheapest estimates are modelled from their tile programs; the best modelled are
        // the finalists, and the first is selected.
        let mut modelled_plans = Vec::new();
        for (i, c) in candidates
            .iter()
            .take(crate::ops::flash::plan::MODELLED_MAX)
            .enumerate()
        {
            if self.search.spend() && i > 0 {
                break;
            }
            let mut geo = base.clone();
            geo.rows = c.rows;
            geo.keys = c.keys;
            geo.sub = c.sub;
            geo.table = c.table;
            geo.chunk = c.chunk;
            let fp = crate::ops::flash::plan::layout(geo, self.tiles);
            let (modelled, modelled_x) = crate::ops::flash::lower::modelled_cycles(&fp);
            tracing::info!(
                candidate = i,
                rows = c.rows,
                keys = c.keys,
                sub_block_keys = c.sub.min(c.keys),
                items = c.items,
                merged_blocks = c.merge,
                modelled_cycles = modelled,
                modelled_exchange_cycles = modelled_x,
                estimated_cycles = c.estimated_cycles,
                estimated_exchange_cycles = c.estimated_exchange_cycles,
                peak_total_bytes = c.peak_bytes,
                "modelled expanded operator plan"
            );
            modelled_plans.push((modelled, modelled_x, fp, i));
        }
        modelled_plans.sort_by_key(|m| (m.0, m.3));
        for (modelled, _, _, i) in modelled_plans.iter().take(FINALISTS) {
            let c = &candidates[*i];
            self.finalists.push(Finalist {
                op: op.name.clone(),
                mapping: format!(
                    "flash rows={} keys={}{} items={} merged_blocks={} modelled_cycles={modelled}",
                    c.rows,
                    c.keys,
                    if c.chunk < c.keys {
                        format!(" streamed_keys={}", c.chunk)
                    } else {
                        String::new()
                    },
                    c.items,
                    c.merge
                ),
                estimated_cycles: c.estimated_cycles,
                estimated_exchange_cycles: c.estimated_exchange_cycles,
                peak_tile_bytes: c.peak_bytes,
                tiles: c.items as u32,
                alternatives: candidates.len(),
            });
        }
        let chosen = self.chosen(&op.name, modelled_plans.len().min(FINALISTS));
        let best = modelled_plans.into_iter().nth(chosen);
        let (modelled, modelled_x, fp, chosen) = best.expect("at least one candidate");
        tracing::info!(
            selected = chosen,
            rows = fp.geo.rows,
            keys = fp.geo.keys,
            sub_block_keys = fp.geo.sub_keys(),
            modelled_cycles = modelled,
            "selected flash attention mapping"
        );
        // Where its modelled cycles go, and the products' multiply-accumulates at the AMP's
        // peak (one `amp` a cycle), the floor under the AMP rounds.
        let g = &fp.geo;
        let amp = g.amp();
        let mac_floor = (fp.items_per_tile().max(1) * g.rows * g.keys * (g.d + g.dv)) as u64
            / (amp.k_block * amp.cols / 4) as u64;
        let parts = super::lower::modelled_parts(&fp);
        tracing::info!(
            mac_floor,
            parts = %parts
                .iter()
                .map(|(name, cycles)| format!("{name}={cycles}"))
                .collect::<Vec<_>>()
                .join(" "),
            "flash attention modelled cycles by part"
        );
        // Inputs only this operation reads sit on their homes.
        let kb = amp_geometry(fp.geo.mode).k_block;
        let cols = amp_geometry(fp.geo.mode).cols;
        let hgs = [kb, kb, cols];
        // A graph input read by this operation alone, once (not an output). `v` is stored in
        // groups of the scores' columns, as the `P v` product reads it: the host writes it so.
        for x in 0..3 {
            let v = ins[x];
            if self.read_only_here(v, ins, false)
                && (self.values[v].layout.group == hgs[x] || x == 2)
            {
                self.values[v].layout = fp.home_layout(x, hgs[x]);
            }
        }
        // So does a mask only this operation reads, when it is stored in the scores' group.
        if let Some(&v) = ins.get(3) {
            let cols = amp_geometry(fp.geo.mode).cols;
            if self.read_only_here(v, ins, false) && self.values[v].layout.group == cols {
                self.values[v].layout = fp.mask_home_layout();
            }
        }
        let r = self.add_graph_value(op.outputs[0], out_val, out_dtype, fp.output_layout());
        self.ops.push(DevOp {
            origin: self.origin.clone(),
            name: op.name.clone(),
            kind: DevOpKind::Flash(Box::new(fp)),
            inputs: ins.to_vec(),
            output: r,
            estimated_cycles: modelled,
            estimated_exchange_cycles: modelled_x,
        });
        Ok(())
    }
}
