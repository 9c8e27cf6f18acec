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
use ipu_target::{BARREL_SLOT_CYCLES, EXCHANGE_PHASE_OVERHEAD_CYCLES, SYNC_CYCLES, Target};

use super::geometry::*;
use super::layout::*;
use crate::error::{CodegenError, MemoryRegion};
use crate::operator_plan::{DevOp, DevOpKind, DevValueId, Finalist};
use crate::plan::{FINALISTS, Planner};
use crate::plan::{SUPPORT_RESERVE_BYTES, matmul_mode};
use ipu_kernels::flash::{
    GROUP_ROW_BYTES, flash_combine_slots, flash_rescale_slots, flash_softmax_slots,
};
use ipu_kernels::{self as kernels, OVERREAD_BYTES};

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
    let kk = geo.chunk_keys().div_ceil(amp.k as usize) as u64 * amp.k as u64;
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
    let alpha = if geo.factor_run() { r * 8 + slack } else { 0 };
    let part = (geo.gv() as u64 + 1) * r * GROUP_ROW_BYTES as u64 + slack;
    let rows_c = (geo.rows as u64).div_ceil(merge as u64);
    let stage =
        (merge as u64 - 1) * (geo.gv() as u64 + 1) * rows_c * GROUP_ROW_BYTES as u64 + slack;
    let scratch = 6 * super::programs::combine_scratch_bytes(geo, merge) as u64 + slack;
    let out = rows_c * geo.dv as u64 * geo.out.bytes() as u64 + slack;
    let n = per_tile as u64;
    // The item's mask: its rows (or one) by its keys, in the partials type.
    let mask = if geo.mask.is_some() {
        geo.mask_rows() as u64 * kp * pb + slack
    } else {
        0
    };
    // The placer gives buffers whose live ranges do not meet the same bytes: the item's
    // operands and scores die with its round, before the merge's staging and output live.
    let compute = q + s + p + t + alpha + mask + n * part;
    let merging = n * (part + stage + out) + scratch;
    (compute.max(merging), kt + v)
}

/// Bytes of an item's supervisor code and vertex states: `(code per item, states per item,
/// states per tile)`. Code: 20 bytes per AMP round (`setzi` and `ampw`, `setzi` of the state
/// and `runall`, `waitw`), about 160 per sub-block for the softmax's and rescale's launches and
/// 512 for the rest. States: identical states of a tile are stored once (`emit`), and the
/// items of a tile reuse its buffers, so the `q kᵀ` rounds' states (96 or 40 bytes, see
/// [`FlashGeometry::table`] and [`crate::lower::amp_chains`]) are the same for every sub-block
/// and item: one set per tile (a chain of rounds is stored once as a whole, its tables
/// contiguous). The `P v` rounds write the item's own partial result, a set for
/// the first sub-block and, with more than one, a set for the others; the
/// softmax, rescale and mask launches about 300 bytes per sub-block, and 6 launches of a
/// 32-byte mask state per key group for the sub-blocks a causal diagonal or padding crosses.
pub fn item_code_bytes(geo: &FlashGeometry) -> (u64, u64, u64) {
    let amp = geo.amp();
    let (kb, cols) = (amp.k as usize, amp.columns as usize);
    let rounds = (geo.keys.div_ceil(cols) * (geo.d / kb) + geo.gv() * geo.keys.div_ceil(kb)) as u64;
    let subs = geo.sub_blocks().len() as u64;
    let sk = geo.sub_keys();
    let code = 20 * rounds + 160 * subs + 512;
    let s_states = (sk.div_ceil(cols) * (geo.d / kb)) as u64;
    let pv_states = subs.min(2) * (geo.gv() * sk.div_ceil(kb)) as u64;
    let crossed = if geo.causal { 3 } else { 1 };
    let mask_states = crossed * sk.div_ceil(cols) as u64 * 6 * 32;
    // Six entries of a table, 16 bytes each (a chain's round or not).
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
        crate::lower::amp_chain_middle_slots(rows as u32)
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
/// [`amp_round_cycles`] of each of its rounds (`lower::amp_chain_ends_slots`; 0 without the
/// table pass, whose rounds do not chain).
fn amp_chain_ends_slots(rows: usize, table: bool) -> i64 {
    if table {
        crate::lower::amp_chain_ends_slots(rows as u32)
    } else {
        0
    }
}

/// Worker issue slots a first pass inside a chain spends beyond [`amp_round_cycles`]
/// (`lower::amp_chain_first_pass_slots`; 0 without the table pass).
fn amp_chain_first_pass_slots(rows: usize, table: bool) -> i64 {
    if table {
        crate::lower::amp_chain_first_pass_slots(rows as u32)
    } else {
        0
    }
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
    let elems = rows * geo.amp().columns as u64;
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

/// The bytes the busiest tile receives over an item's distributions (one per chunk of its
/// keys), as the model counts them (`model::distribution_receives`): the first chunk's `q`,
/// `kᵀ` and `v` at a tile's rate; a later chunk's `kᵀ` and `v` at half on the tiles of a
/// pair taking the same key block ([`layout`] puts a key block's run of items on consecutive
/// tiles), whole on a tile whose pair takes another (the last item of a run of odd length,
/// which goes to the end of the order).
fn distribution_bytes(geo: &FlashGeometry) -> u64 {
    let ab = geo.ab() as u64;
    let kblocks = geo.sk.div_ceil(geo.keys);
    let qblocks = geo.sq.div_ceil(geo.rows);
    // Whether some key block has a run of two items or more, and some one of odd length.
    let (mut odd, mut runs) = (false, false);
    for kj in 0..kblocks {
        // Causal: query block `b` reads key block `kj` when its rows reach its first key,
        // i.e. from block `k0 / rows` on (none when the queries end before it).
        let k0 = kj * geo.keys;
        let blocks = match geo.causal {
            true if k0 >= geo.sq => 0,
            true => qblocks - (k0 / geo.rows).min(qblocks),
            false => qblocks,
        };
        let run = geo.group() * blocks;
        odd |= run % 2 == 1;
        runs |= run >= 2;
    }
    geo.chunks()
        .iter()
        .enumerate()
        .map(|(c, &(_, keys))| {
            let kv = (keys * (geo.d + geo.dv)) as u64 * ab;
            if c == 0 {
                (geo.rows * geo.d) as u64 * ab + kv
            } else if odd || !runs {
                kv
            } else {
                kv / 2
            }
        })
        .sum()
}

/// The analytical estimate of a mapping: (cycles, exchange cycles).
pub fn estimate(geo: &FlashGeometry, merge: usize) -> (u64, u64) {
    let amp = geo.amp();
    let (kb, cols) = (amp.k as usize, amp.columns as usize);
    let slot = BARREL_SLOT_CYCLES as u64;
    let (r, nk) = (geo.rows, geo.keys);
    let rounds = nk.div_ceil(cols) * (geo.d / kb) + geo.gv() * nk.div_ceil(kb);
    // Per sub-block, the `q kᵀ` rounds are one chain and the `P v` rounds another; the first
    // pass of each output group but the chain's first is a first pass inside the chain (the
    // `P v` rounds of a running sub-block add to the partial output: none).
    let subs = geo.sub_blocks();
    let chains = 2 * subs.len() as i64;
    let first_passes = subs
        .iter()
        .map(|&(_, keys)| keys.div_ceil(cols) as i64 - 1)
        .sum::<i64>()
        + geo.gv() as i64
        - 1;
    let amp_cycles = (rounds as u64 * amp_round_cycles(r, geo.table)).saturating_add_signed(
        slot as i64
            * (chains * amp_chain_ends_slots(r, geo.table)
                + first_passes * amp_chain_first_pass_slots(r, geo.table)),
    );
    let lkeys = cols.max(kb);
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
                amp.columns,
                amp.k,
                geo.softmax_scaled(),
                running,
                per,
                keys.div_ceil(lkeys) as u32,
                kernels::flash::baked_stride(r as u32 * GROUP_ROW_BYTES) != 0,
                geo.softmax_floored(),
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
            nk.div_ceil(cols) as u32,
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
            amp.columns,
        ) as u64
            * (r.div_ceil(cols) as u64 + 1)
    } else {
        0
    };
    let recv = distribution_bytes(geo) / EXCHANGE_BYTES as u64;
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
            amp.columns,
            geo.gout() as u32,
            geo.dv as u32,
            rows_c.div_ceil(6) as u32,
            merge as u32,
            kernels::flash::combine_stage(
                geo.p_elem(),
                geo.gv() as u32,
                rows_c as u32,
                merge as u32,
            ) != 0,
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
    let cols = mode.geometry().columns as usize;
    let prescaled = geo.prescale();
    let home_bytes: u64 = [(sq, d, 0), (sk, d, 1), (sk, dv, 2)]
        .iter()
        .map(|&(s, width, x)| {
            let entries = if x == 0 { batch } else { kv_batch };
            let unit = home_unit(x, entries * s, tiles as usize, cols);
            let units = (entries * s.div_ceil(unit)) as u64;
            let n = unit as u64 * units.div_ceil(tiles as u64);
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
            // rescales of the partial output the larger they are), each launch form, and the
            // keys streamed in chunks of whole sub-blocks, every chunk and sub-block size: the
            // cheapest that fits (streaming can pay: its smaller `kᵀ` and `v` leave room for
            // larger sub-blocks).
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
        let tiles = self.tiles;
        let model_one = |i: usize, c: &FlashCandidate| {
            let mut geo = base.clone();
            geo.rows = c.rows;
            geo.keys = c.keys;
            geo.sub = c.sub;
            geo.table = c.table;
            geo.chunk = c.chunk;
            let fp = crate::ops::flash::plan::layout(geo, tiles);
            let (modelled, modelled_x) = super::model::modelled_cycles(&fp);
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
            (modelled, modelled_x, fp, i)
        };
        let take = candidates.len().min(crate::ops::flash::plan::MODELLED_MAX);
        let mut modelled_plans = Vec::new();
        if self.search.budget.time_max_ms.is_some() {
            // A time budget is checked between candidates, one after the other.
            for (i, c) in candidates.iter().take(take).enumerate() {
                if self.search.spend() && i > 0 {
                    break;
                }
                modelled_plans.push(model_one(i, c));
            }
        } else {
            // Otherwise the budget decides how many before any is modelled, and they are
            // modelled at once (each deterministic, sorted below).
            let mut n = 0;
            for i in 0..take {
                if self.search.spend() && i > 0 {
                    break;
                }
                n += 1;
            }
            use rayon::prelude::*;
            modelled_plans = candidates[..n]
                .par_iter()
                .enumerate()
                .map(|(i, c)| model_one(i, c))
                .collect();
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
            / (amp.k * amp.columns / 4) as u64;
        let parts = super::model::modelled_parts(&fp);
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
        let hgs = fp.home_groups();
        // A graph input read by this operation alone, once (not an output). `v` is stored in
        // groups of the scores' columns, as the `P v` product reads it, and `k` in whole rows
        // where its homes transpose blocks of them: the host writes them so.
        for x in 0..3 {
            let v = ins[x];
            if self.read_only_here(v, ins, false)
                && (self.values[v].layout.group == hgs[x] || x == 2 || (x == 1 && fp.kt_quads()))
            {
                self.values[v].layout = fp.home_layout(x, hgs[x]);
            }
        }
        // So does a mask only this operation reads, when it is stored in the scores' group.
        if let Some(&v) = ins.get(3) {
            let cols = fp.geo.mode.geometry().columns as usize;
            if self.read_only_here(v, ins, false) && self.values[v].layout.group == cols {
                self.values[v].layout = fp.mask_home_layout();
            }
        }
        let r = self.add_graph_value(op.outputs[0], out_val, out_dtype, fp.output_layout());
        self.ops.push(DevOp {
            origin: self.origin.clone(),
            name: op.name.clone(),
            kind: DevOpKind::new(fp),
            inputs: ins.to_vec(),
            output: r,
            estimated_cycles: modelled,
            estimated_exchange_cycles: modelled_x,
        });
        Ok(())
    }
}
