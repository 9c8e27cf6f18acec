//! The geometry of a fused flash attention mapping ([`FlashGeometry`]): the operation's
//! shapes and types, the mapping's rows and keys per item, its sub-blocks and chunks of keys,
//! and the layouts' constants the planner ([`super::plan`]) and the lowering share.

use ipu_graph::DType;
use ipu_target::{AmpGeometry, AmpMode};

use ipu_kernels::Elem;

/// Positions (rows of `q`, `k` or `v`) per home unit.
pub const HOME_UNIT: usize = 16;
/// The fewest positions per home unit of `q`. A `q` home sends its rows to every key block's
/// item of them, one copy each (no multicast), so its units are as many as the tiles (one a
/// tile, the fewest rows a tile sends), where `k` and `v` (whose homes multicast each key block
/// once) take [`HOME_UNIT`].
pub const Q_HOME_UNIT_MIN: usize = 2;

/// Positions per home unit of input `x` (0 q, 1 k, 2 v) when `positions` of it (over every
/// batch entry) spread over `tiles`, with `cols` columns of scores per group: `k` in one
/// group of keys a unit (its homes transpose it into `kᵀ`, the homes step's longest work,
/// so it spreads over twice the tiles of [`HOME_UNIT`] where a group is 8 keys).
pub fn home_unit(x: usize, positions: usize, tiles: usize, cols: usize) -> usize {
    match x {
        0 => positions.div_ceil(tiles.max(1)).max(Q_HOME_UNIT_MIN),
        1 => cols,
        _ => HOME_UNIT,
    }
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
        self.mode.geometry()
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
        self.dv / self.amp().columns as usize
    }
    /// Whether probabilities overwrite the scores: a row's group of `kb` probabilities takes
    /// the bytes of its group of `cols` scores (the same group stride), and no score is read
    /// after a probability takes its bytes (`kb >= cols`: probability group `j` holds keys
    /// from `j * kb`, score group `j` keys below `(j + 1) * cols`, read by `flash_softmax`
    /// before it stores the probabilities of those keys). f16 probabilities of f32 scores
    /// (the f16 → f32 mode) qualify, as do partials of the AMP's operand type.
    pub fn p_in_place(&self) -> bool {
        let g = self.amp();
        let (kb, cols) = (g.k as usize, g.columns as usize);
        kb * self.ab() == cols * self.pb() && kb >= cols
    }
    /// Keys rounded to the score layout's groups.
    pub fn keys_padded(&self) -> usize {
        let cols = self.amp().columns as usize;
        self.keys.div_ceil(cols) * cols
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
        let cols = self.amp().columns as usize;
        self.chunk_keys().div_ceil(cols) * cols
    }
    /// Whether the running softmax stores its rescaling factors as a run of pairs, 8 bytes a
    /// row, which the f32 rescale loads with the partial output (f32 partials, several
    /// sub-blocks); else they stay in the statistics.
    pub fn factor_run(&self) -> bool {
        self.p_elem() == Elem::F32 && self.sub_blocks().len() > 1
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
    /// Whether the softmax floors a row's maximum: a row may see no key (all `-inf` scores)
    /// only under the causal mask or a mask operand; else every maximum is finite.
    pub fn softmax_floored(&self) -> bool {
        self.causal || self.mask.is_some()
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
        self.sk.div_ceil(self.amp().columns as usize)
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
