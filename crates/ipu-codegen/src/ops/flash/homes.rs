//! The homes' preparation of a flash attention (`NAME.prep`, `prep_ops`): `q` cast and
//! scaled, `kᵀ` transposed into the AMP's weight layout, `v` cast and regrouped, the mask
//! made additive in the partials type.

use std::collections::BTreeMap;

use super::layout::FlashPlan;
use crate::lower::*;
use crate::plan::cast_type;
use crate::program::*;
use ipu_kernels::state::*;
use ipu_kernels::{self as kernels, Kernel, OVERREAD_BYTES, UnOp};

/// A buffer of `bytes` on `tile` named `name`: exactly that size (`true`), or rounded up to 8
/// with the kernels' read-past slack (`false`).
pub(crate) type Alloc<'a> = dyn FnMut(u32, u32, String, bool) -> BufferId + 'a;

/// The `NAME.prep` work of every home tile into `prep`: `q` cast and scaled, `kᵀ` transposed
/// into the AMP's weight layout, `v` cast and regrouped, the mask cast to the partials and
/// made additive, from the inputs' `staging` on their homes; returns the buffers holding them
/// per home tile. The lowering allocates with `alloc`; the planner's model passes placeholders
/// and costs the work ([`modelled_cycles`]).
#[allow(clippy::type_complexity)]
pub(crate) fn prep_ops(
    name: &str,
    fp: &FlashPlan,
    staging: &[BTreeMap<u32, BufferId>; 3],
    mask_staging: &BTreeMap<u32, BufferId>,
    alloc_any: &mut Alloc,
    prep: &mut BTreeMap<u32, Vec<SupOp>>,
) -> ([BTreeMap<u32, BufferId>; 3], BTreeMap<u32, BufferId>) {
    let g = fp.geo.clone();
    let amp = g.amp();
    let (kb, cols) = (amp.k as usize, amp.columns as usize);
    let ab = g.ab() as u32;
    let dims = [g.d, g.d, g.dv];
    let hgs = fp.home_groups();
    let kt_quads = fp.kt_quads();
    let mut mask_home: BTreeMap<u32, BufferId> = BTreeMap::new();
    if let Some(m) = &g.mask {
        let from = m.dtype;
        let pb = g.pb() as u32;
        for (&tile, &n) in &fp.mask_positions {
            let src = mask_staging[&tile];
            let elems = (n * cols) as u32;
            if from == g.p {
                mask_home.insert(tile, src);
                continue;
            }
            let ops = prep.entry(tile).or_default();
            let buf = alloc_any(tile, elems * pb, format!("stage:{name}.mask"), false);
            let fb = from.bytes() as u32;
            for (g0, g1) in split(elems.div_ceil(4), WORKERS) {
                if g1 > g0 {
                    let state = CastState {
                        input: (src, g0 * 4 * fb),
                        out: (buf, g0 * 4 * pb),
                        groups: g1 - g0,
                    };
                    ops.push(if from == ipu_graph::DType::Bool {
                        // 0 where a key is visible, the lowest finite value where hidden.
                        SupOp::Run(
                            Kernel::FlashMaskBool { ty: g.p_elem() },
                            state.into(),
                            kernels::flash::flash_mask_bool_slots(g.p_elem(), g1 - g0),
                        )
                    } else {
                        let (f, t) = (cast_type(from), cast_type(g.p));
                        SupOp::Run(
                            Kernel::Cast { from: f, to: t },
                            state.into(),
                            kernels::cast_slots(f, t, g1 - g0),
                        )
                    });
                }
            }
            ops.push(SupOp::WaitW);
            mask_home.insert(tile, buf);
        }
    }
    let mut q_home: BTreeMap<u32, BufferId> = BTreeMap::new();
    let mut kt_home: BTreeMap<u32, BufferId> = BTreeMap::new();
    let mut v_home: BTreeMap<u32, BufferId> = BTreeMap::new();
    let a_cast = cast_type(g.a);
    let (kt_first, kt_per_tile) = fp.kt_groups();
    let mut k_homes: BTreeMap<u32, Vec<usize>> = BTreeMap::new();
    for (hi, h) in fp.homes[1].iter().enumerate() {
        k_homes.entry(h.tile).or_default().push(hi);
    }
    for x in 0..3 {
        for (&tile, &n) in &fp.home_positions[x] {
            let src = staging[x][&tile];
            let from = cast_type(g.inputs[x]);
            let elems = (n * dims[x]) as u32;
            let ops = prep.entry(tile).or_default();
            // Cast FP8 to the operand type, same layout.
            let typed = if g.inputs[x] == g.a {
                src
            } else {
                let buf = alloc_any(tile, elems * ab, format!("stage:{name}.home{x}.a"), false);
                for (g0, g1) in split(elems.div_ceil(4), WORKERS) {
                    if g1 > g0 {
                        ops.push(SupOp::Run(
                            Kernel::Cast { from, to: a_cast },
                            CastState {
                                input: (src, g0 * 4 * from.bytes()),
                                out: (buf, g0 * 4 * ab),
                                groups: g1 - g0,
                            }
                            .into(),
                            kernels::cast_slots(from, a_cast, g1 - g0),
                        ));
                    }
                }
                ops.push(SupOp::WaitW);
                buf
            };
            match x {
                0 if g.prescale() => {
                    // q * scale, exact for a power of two: the scores arrive scaled.
                    let ty = g.a_elem();
                    let qs = alloc_any(tile, elems * ab, format!("stage:{name}.q_scaled"), false);
                    // f16 by an f16-exact factor: one f16v4 multiply a vector, the same bits.
                    let halves = ty == kernels::Elem::F16
                        && half::f16::from_f32(g.scale).to_f32() == g.scale;
                    for (v0, v1) in split(elems * ab / 8, WORKERS) {
                        if v1 > v0 {
                            let (kernel, slots) = if halves {
                                (Kernel::ScaleHalves, kernels::scale_halves_slots(v1 - v0))
                            } else {
                                (
                                    Kernel::Unary {
                                        ty,
                                        op: UnOp::Scale,
                                    },
                                    kernels::unary_slots(ty, UnOp::Scale, v1 - v0),
                                )
                            };
                            ops.push(SupOp::Run(
                                kernel,
                                UnaryState {
                                    input: (typed, v0 * 8),
                                    out: (qs, v0 * 8),
                                    vectors: v1 - v0,
                                    factor_bits: g.scale.to_bits(),
                                }
                                .into(),
                                slots,
                            ));
                        }
                    }
                    ops.push(SupOp::WaitW);
                    q_home.insert(tile, qs);
                }
                0 => {
                    q_home.insert(tile, typed);
                }
                1 => {
                    // kᵀ: per home range, groups of `cols` keys, each [d][cols].
                    let kt = alloc_any(
                        tile,
                        (kt_per_tile[&tile] * g.d * cols) as u32 * ab + OVERREAD_BYTES,
                        format!("stage:{name}.kt"),
                        true,
                    );
                    if kt_quads {
                        ops.extend(kt_quads_calls(fp, &k_homes[&tile], &kt_first, typed, kt));
                        ops.push(SupOp::WaitW);
                        kt_home.insert(tile, kt);
                        continue;
                    }
                    let mut calls = Vec::new();
                    for &hi in &k_homes[&tile] {
                        let (h, base) = (fp.homes[1][hi], kt_first[hi]);
                        let len = h.s1 - h.s0;
                        for kg in 0..len.div_ceil(cols) {
                            let keys = (len - kg * cols).min(cols) as u32;
                            for dg in 0..g.d / kb {
                                let in_off = ((dg * n + h.local + kg * cols) * kb) as u32 * ab;
                                let out_off = (((base + kg) * g.d + dg * kb) * cols) as u32 * ab;
                                let words = (keys * ab).div_ceil(4);
                                // Halves four output rows at a time where the rows and the
                                // staged rows' 8-byte columns allow (every f16 layout).
                                let (kernel, slots) = if ab == 2
                                    && kb.is_multiple_of(4)
                                    && (kb as u32 * ab).is_multiple_of(8)
                                    && in_off.is_multiple_of(8)
                                {
                                    (
                                        Kernel::TransposeHalves,
                                        ipu_kernels::rows::transpose_halves_slots(kb as u32, words),
                                    )
                                } else {
                                    (
                                        Kernel::Transpose { bytes: ab },
                                        ipu_kernels::rows::transpose_slots(ab, kb as u32, words),
                                    )
                                };
                                calls.push(SupOp::Run(
                                    kernel,
                                    TransposeState {
                                        input: (typed, in_off),
                                        out: (kt, out_off),
                                        rows: kb as u32,
                                        in_stride: kb as u32 * ab,
                                        out_stride: cols as u32 * ab,
                                        words,
                                    }
                                    .into(),
                                    slots,
                                ));
                            }
                        }
                    }
                    ops.extend(calls);
                    ops.push(SupOp::WaitW);
                    kt_home.insert(tile, kt);
                }
                _ => {
                    let hg = hgs[2];
                    let va = if hg == cols {
                        typed
                    } else {
                        // Regroup [dv / hg][n][hg] into [dv / cols][n][cols] (64-bit words).
                        let va = alloc_any(tile, elems * ab, format!("stage:{name}.va"), false);
                        for j in 0..g.dv / hg {
                            Copy2d::regroup(
                                Regroup::ToGroups,
                                (typed, (j * n * hg) as u32 * ab),
                                (va, (j * (hg / cols) * n * cols) as u32 * ab),
                                (n as u32, hg as u32 * ab),
                                (hg / cols) as u32,
                                cols as u32 * ab,
                            )
                            .push(1, ops);
                        }
                        ops.push(SupOp::WaitW);
                        va
                    };
                    v_home.insert(tile, va);
                }
            }
        }
    }
    ([q_home, kt_home, v_home], mask_home)
}

/// The `kᵀ` of a tile's `k` homes (`homes`, staged in whole rows in `typed`) into `kt`
/// (`[groups of cols keys][d][cols]`, each home from its first group `kt_first[home]`) as
/// blocks of four keys by four columns, split evenly over the six workers: one
/// `Kernel::TransposeQuads` a worker, a run per stretch of one key quad's blocks.
fn kt_quads_calls(
    fp: &FlashPlan,
    homes: &[usize],
    kt_first: &[usize],
    typed: BufferId,
    kt: BufferId,
) -> Vec<SupOp> {
    let g = &fp.geo;
    let (d, ab, cols) = (g.d as u32, g.ab() as u32, g.amp().columns);
    // Every block: (home, key quad, column quad).
    let blocks: Vec<(usize, u32, u32)> = homes
        .iter()
        .flat_map(|&hi| {
            let h = fp.homes[1][hi];
            let quads = ((h.s1 - h.s0) / 4) as u32;
            (0..quads).flat_map(move |kq| (0..d / 4).map(move |cq| (hi, kq, cq)))
        })
        .collect();
    let kernel = Kernel::TransposeQuads {
        in_stride: (d * ab) as u16,
        out_stride: (cols * ab) as u16,
    };
    let mut calls = Vec::new();
    for (b0, b1) in split(blocks.len() as u32, WORKERS) {
        let mut runs: Vec<TransposeRun> = Vec::new();
        let mut last: Option<(usize, u32, u32)> = None;
        for &(hi, kq, cq) in &blocks[b0 as usize..b1 as usize] {
            match (last, runs.last_mut()) {
                (Some((h, q, c)), Some(run)) if h == hi && q == kq && c + 1 == cq => {
                    run.blocks += 1;
                }
                _ => {
                    let h = fp.homes[1][hi];
                    let key = 4 * kq;
                    let group = kt_first[hi] as u32 + key / cols;
                    runs.push(TransposeRun {
                        input: (typed, ((h.local as u32 + key) * d + 4 * cq) * ab),
                        out: (kt, ((group * d + 4 * cq) * cols + key % cols) * ab),
                        blocks: 1,
                    });
                }
            }
            last = Some((hi, kq, cq));
        }
        if !runs.is_empty() {
            let sizes: Vec<u32> = runs.iter().map(|r| r.blocks).collect();
            calls.push(SupOp::Run(
                kernel,
                TransposeQuadsState { runs }.into(),
                ipu_kernels::rows::transpose_quads_slots(&sizes),
            ));
        }
    }
    calls
}
