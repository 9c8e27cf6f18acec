//! Every kernel's cycle model against the device: each kernel runs on the simulator at several
//! sizes and element types, and the issue slots its worker spent (the device's
//! `worker_slots` counter) are compared with the model the planner and the final costing use.
//!
//! Most models are exact: the kernels' loops have data-independent trip counts, so the model
//! is a formula of the state's counts. Where a kernel's path depends on the data or on a mask
//! position, the model is a bound, and the test checks the documented bound
//! ([`Bound::Within`]).

use ipu_isa::{Fp8Format, Instr};
use ipu_kernels::code::{Code, m, setzi};
use ipu_kernels::flash::{
    GROUP_ROW_BYTES, combine_stage, flash_combine_slots, flash_mask_bool_slots, flash_mask_slots,
    flash_rescale_slots, flash_softmax_slots,
};
use ipu_kernels::rows::*;
use ipu_kernels::*;
use ipu_sim::{Device, RunLimits};
use ipu_target::{AmpMode, INTERLEAVED_BASE, MEMORY_BASE, Target};

const CODE: u32 = MEMORY_BASE;
const KERNEL: u32 = 0x4D000;
const STATE: u32 = 0x58000;
/// Buffer `i` of a case lives at `DATA + i * REGION` (interleaved memory, so AMP weights and
/// 128-bit loads are legal anywhere).
const DATA: u32 = INTERLEAVED_BASE;
const REGION: u32 = 0x8000;
const REGIONS: u32 = 13;

fn at(i: u32, off: u32) -> Loc {
    (BufferId(i), off)
}

/// How far the device may be from the model.
#[derive(Debug, Clone, Copy)]
enum Bound {
    /// The model is the device's figure.
    Exact,
    /// `|device - model| <= model * percent / 100`.
    Within(u32),
}

struct Case {
    name: String,
    kernel: Kernel,
    states: Vec<State>,
    /// The kernel of each launch after the first, when it is not `kernel` (a chain of AMP
    /// rounds).
    more_kernels: Vec<Kernel>,
    /// The model's issue slots, summed over the launches.
    model: u64,
    fill: Elem,
    amp: Option<AmpMode>,
    bound: Bound,
}

fn case(name: String, kernel: Kernel, state: impl Into<State>, model: u32, fill: Elem) -> Case {
    Case {
        name,
        kernel,
        states: vec![state.into()],
        more_kernels: Vec::new(),
        model: model as u64,
        fill,
        amp: None,
        bound: Bound::Exact,
    }
}

/// Deterministic data of small magnitude in the element type (no infinities or NaNs).
fn fill_bytes(seed: u32, elem: Elem) -> Vec<u8> {
    let mut x = seed.wrapping_mul(2_654_435_761) | 1;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        ((x % 2000) as f32 - 1000.0) / 400.0
    };
    match elem {
        Elem::F32 => (0..REGION / 4).flat_map(|_| next().to_le_bytes()).collect(),
        Elem::F16 => (0..REGION / 2)
            .flat_map(|_| ipu_sim::f32_to_f16_bits(next()).to_le_bytes())
            .collect(),
    }
}

/// Runs the case's launches on tile 0 and returns the worker issue slots they spent.
fn measure(c: &Case) -> u64 {
    let mut dev = Device::new(Target::gc200(), 1);
    // Each distinct kernel 4 KB after the one before.
    let mut kernels: Vec<Kernel> = vec![c.kernel];
    for k in &c.more_kernels {
        if !kernels.contains(k) {
            kernels.push(*k);
        }
    }
    for (i, k) in kernels.iter().enumerate() {
        let at = KERNEL + 0x1000 * i as u32;
        let laid = generate(*k).lay_out(at).expect("kernel lays out");
        assert!(
            laid.bytes.len() <= 0x1000,
            "{}: kernel of {} bytes",
            c.name,
            laid.bytes.len()
        );
        dev.write(0, at, &laid.bytes).unwrap();
    }
    let entry = |k: Kernel| KERNEL + 0x1000 * kernels.iter().position(|&x| x == k).unwrap() as u32;
    for i in 0..REGIONS {
        dev.write(0, DATA + i * REGION, &fill_bytes(i + 1, c.fill))
            .unwrap();
    }
    let mut sup = Code::new();
    if let Some(mode) = c.amp {
        sup.op(Instr::AmpCfg { mode });
        sup.op(setzi(m(4), DATA + 12 * REGION));
        sup.op(Instr::AmpW { base: m(4) });
    }
    let mut state_at = STATE;
    for (i, st) in c.states.iter().enumerate() {
        let k = if i == 0 {
            c.kernel
        } else {
            c.more_kernels.get(i - 1).copied().unwrap_or(c.kernel)
        };
        sup.op(setzi(m(2), entry(k)));
        let words: Vec<u8> = st
            .words()
            .iter()
            .flat_map(|w| {
                match *w {
                    StateWord::Const(v) => v,
                    StateWord::Addr(b, off) => {
                        assert!(
                            b.0 < REGIONS && off < REGION,
                            "{}: buffer {b} offset {off}",
                            c.name
                        );
                        DATA + b.0 * REGION + off
                    }
                }
                .to_le_bytes()
            })
            .collect();
        dev.write(0, state_at, &words).unwrap();
        sup.op(setzi(m(3), state_at));
        if matches!(
            c.kernel.state_kind(),
            StateKind::AmpAll | StateKind::AmpTable | StateKind::AmpChain
        ) {
            sup.op(Instr::RunAll {
                entry: m(2),
                state: m(3),
            });
        } else {
            sup.op(Instr::Run {
                entry: m(2),
                state: m(3),
            });
        }
        sup.op(Instr::WaitW);
        state_at += words.len() as u32;
        state_at = state_at.next_multiple_of(8);
    }
    sup.op(Instr::Halt);
    let s = sup.lay_out(CODE).unwrap();
    dev.write(0, CODE, &s.bytes).unwrap();
    dev.run(CODE, &RunLimits::default())
        .unwrap_or_else(|e| panic!("{}: {e}", c.name));
    dev.counters()[0].worker_slots
}

fn elems() -> [Elem; 2] {
    [Elem::F32, Elem::F16]
}

fn elem_bytes(e: Elem) -> u32 {
    match e {
        Elem::F32 => 4,
        Elem::F16 => 2,
    }
}

fn cases() -> Vec<Case> {
    let mut out = Vec::new();
    // The AMP pass, one worker and all six.
    for mode in [AmpMode::F16F16, AmpMode::F16F32, AmpMode::F32F32] {
        for partials in [false, true] {
            // The partials operand, when there is one, is buffer 1.
            let partials_word = if partials {
                StateWord::Addr(BufferId(1), 0)
            } else {
                StateWord::Const(0)
            };
            for rows in [0u32, 1, 5, 40] {
                let st = AmpState {
                    input: at(0, 0),
                    partials: partials_word,
                    out: at(2, 0),
                    rows,
                };
                let mut c = case(
                    format!("amp {mode:?} partials={partials} rows={rows}"),
                    Kernel::Amp { partials },
                    st,
                    amp_slots(rows, partials),
                    if mode == AmpMode::F32F32 {
                        Elem::F32
                    } else {
                        Elem::F16
                    },
                );
                c.amp = Some(mode);
                out.push(c);
            }
            let bounds = [0, 7, 14, 20, 27, 33, 40];
            let mut c = case(
                format!("amp_all {mode:?} partials={partials} rows=40"),
                Kernel::AmpAll { partials },
                AmpAllState {
                    input: at(0, 0),
                    partials: partials_word,
                    out: at(2, 0),
                    bounds,
                },
                0,
                Elem::F16,
            );
            c.model = bounds
                .windows(2)
                .map(|b| amp_all_slots(b[1] - b[0], partials) as u64)
                .sum();
            c.amp = Some(mode);
            out.push(c);
            // The table form, with a worker that has no rows, and the dense one: every worker
            // has rows (one of them a single row).
            for dense in [false, true] {
                let rows = [7u32, u32::from(dense), 9, 6, 7, 11];
                let mut bounds = [0u32; 7];
                for (i, r) in rows.iter().enumerate() {
                    bounds[i + 1] = bounds[i] + r;
                }
                let table = AmpTableState {
                    input: at(0, 0),
                    partials: partials_word,
                    out: at(2, 0),
                    row_bytes: [32, 32],
                    bounds,
                };
                let (name, kernel, slots): (_, _, fn(u32, bool) -> u32) = if dense {
                    (
                        "amp_table_dense",
                        Kernel::AmpTableDense { partials },
                        amp_table_dense_slots,
                    )
                } else {
                    ("amp_table", Kernel::AmpTable { partials }, amp_table_slots)
                };
                let mut c = case(
                    format!("{name} {mode:?} partials={partials} rows={rows:?}"),
                    kernel,
                    table,
                    rows.iter().map(|&r| slots(r, partials)).sum(),
                    Elem::F16,
                );
                c.amp = Some(mode);
                out.push(c);
            }
            // Chains of AMP rounds, whose rounds keep the registers of the one before: four
            // rounds (the first a first pass unless `partials`, then a pass with partials, a
            // first pass inside the chain, the last draining), and a chain of one round;
            // every worker with two rows at least, some with one more. With rows a multiple
            // of six, also the form with the count immediate (written out up to 16 rows a
            // worker, an `rpt` above). A chain's tables follow one another (96 bytes each, a
            // multiple of 8).
            for (rows, same) in [
                (12u32, false),
                (12, true),
                (17, false),
                (96, false),
                (96, true),
                (102, true),
            ] {
                let four = [partials, true, false, true];
                for len in [4usize, 1] {
                    let mut kernels = Vec::new();
                    let mut states = Vec::new();
                    let mut model = 0u64;
                    let mut zeros = false;
                    for (n, &p) in four[..len].iter().enumerate() {
                        let (carry, drain) = (n > 0, n + 1 == len);
                        let z = zeros && !p;
                        states.push(State::from(AmpChainState {
                            input: at(0, 0),
                            partials: if p {
                                StateWord::Addr(BufferId(1), 0)
                            } else {
                                StateWord::Const(0)
                            },
                            out: at(2 + n as u32 % 2, 0),
                            row_bytes: [32, 32],
                            rows,
                            carry: carry.then_some(at(2 + (n as u32 + 1) % 2, 0)),
                        }));
                        kernels.push(Kernel::AmpChain {
                            partials: p,
                            carry,
                            drain,
                            rows: if same { (rows / 6) as u16 } else { 0 },
                            odd: n % 2 == 1,
                            zeros: z,
                        });
                        let (q, r) = (rows / 6, rows % 6);
                        model += (0..6)
                            .map(|w| {
                                amp_chain_slots(q + u32::from(w < r), p, carry, drain, same, z)
                                    as u64
                            })
                            .sum::<u64>();
                        zeros |= !p;
                    }
                    let c = Case {
                        name: format!(
                            "amp_chain {mode:?} first partials={partials} rows={rows} same={same} rounds={len}"
                        ),
                        kernel: kernels[0],
                        states,
                        more_kernels: kernels[1..].to_vec(),
                        model,
                        fill: Elem::F16,
                        amp: Some(mode),
                        bound: Bound::Exact,
                    };
                    out.push(c);
                }
            }
        }
    }
    for ty in elems() {
        for op in [BinOp::Add, BinOp::Sub, BinOp::Mul, BinOp::Max, BinOp::Div] {
            for vectors in [0, 1, 7, 64] {
                out.push(case(
                    format!("binary {ty:?} {op:?} vectors={vectors}"),
                    Kernel::Binary { ty, op },
                    BinaryState {
                        a: at(0, 0),
                        b: at(1, 0),
                        out: at(2, 0),
                        vectors,
                    },
                    binary_slots(ty, op, vectors),
                    ty,
                ));
            }
        }
        // Every function of the graph's, and the scale.
        let ops = UnaryFn::ALL.map(UnOp::Fn);
        for op in ops.into_iter().chain([UnOp::Scale]) {
            for vectors in [0, 1, 7, 64] {
                out.push(case(
                    format!("unary {ty:?} {op:?} vectors={vectors}"),
                    Kernel::Unary { ty, op },
                    UnaryState {
                        input: at(0, 0),
                        out: at(2, 0),
                        vectors,
                        factor_bits: 0.5f32.to_bits(),
                    },
                    unary_slots(ty, op, vectors),
                    ty,
                ));
            }
        }
    }
    let casts = [
        CastType::F32,
        CastType::F16,
        CastType::Fp8(Fp8Format::F143, -3),
        CastType::Fp8(Fp8Format::F152, 0),
    ];
    for from in casts {
        for to in casts {
            if from == to {
                continue;
            }
            for groups in [1, 9, 64] {
                out.push(case(
                    format!("cast {from:?}->{to:?} groups={groups}"),
                    Kernel::Cast { from, to },
                    CastState {
                        input: at(0, 0),
                        out: at(2, 0),
                        groups,
                    },
                    cast_slots(from, to, groups),
                    if from == CastType::F32 {
                        Elem::F32
                    } else {
                        Elem::F16
                    },
                ));
            }
        }
    }
    for (format, scale) in [
        (Fp8Format::F143, 0),
        (Fp8Format::F143, -3),
        (Fp8Format::F152, 5),
    ] {
        for groups in [0, 1, 9, 64] {
            out.push(case(
                format!("cast_once {format:?} scale={scale} groups={groups}"),
                Kernel::CastOnce { format, scale },
                CastState {
                    input: at(0, 0),
                    out: at(2, 0),
                    groups,
                },
                cast_once_slots(scale, groups),
                Elem::F32,
            ));
        }
    }
    for words in [0, 1, 13, 100] {
        out.push(case(
            format!("zero words={words}"),
            Kernel::Zero,
            ZeroState {
                out: at(2, 0),
                words,
            },
            zero_slots(words),
            Elem::F32,
        ));
    }
    for rows in [1, 4] {
        for full in [0, 3] {
            out.push(case(
                format!("pad_clear rows={rows} full={full}"),
                Kernel::PadClear,
                PadClearState {
                    first: at(2, 8),
                    rows,
                    stride: 64,
                    keep_mask: 0xFFFF,
                    full_words: full,
                },
                pad_clear_slots(rows, full),
                Elem::F32,
            ));
        }
    }
    for f16 in [false, true] {
        for (rows, start, step) in [
            (1u32, 3i32, 1u32),
            (8, 0, 1),
            (8, -4, 1),
            (5, 6, 0),
            (3, 40, 0),
        ] {
            let stride = 16;
            let state = MaskRowsState {
                src: at(0, 0),
                dst: at(2, 0),
                rows,
                start: start as u32,
                valid: 12,
                stride,
                fill_bits: if f16 {
                    0xFC00_FC00
                } else {
                    f32::NEG_INFINITY.to_bits()
                },
                start_step: step,
            };
            let kernel = if f16 {
                Kernel::MaskRowsF16
            } else {
                Kernel::MaskRows
            };
            let c = case(
                format!("mask_rows f16={f16} rows={rows} start={start} step={step}"),
                kernel,
                state,
                mask_rows_slots(f16, &state),
                if f16 { Elem::F16 } else { Elem::F32 },
            );
            out.push(c);
        }
    }
    for bytes in [1u32, 2, 4] {
        for (rows, words) in [(1, 1), (16, 4), (8, 16)] {
            out.push(case(
                format!("transpose bytes={bytes} rows={rows} words={words}"),
                Kernel::Transpose { bytes },
                TransposeState {
                    input: at(0, 0),
                    out: at(2, 0),
                    rows,
                    in_stride: words * 4 / bytes * bytes,
                    out_stride: words * 4,
                    words,
                },
                transpose_slots(bytes, rows, words),
                Elem::F16,
            ));
        }
    }
    for vectors in [0u32, 1, 2, 7] {
        out.push(case(
            format!("scale_halves vectors={vectors}"),
            Kernel::ScaleHalves,
            UnaryState {
                input: at(0, 0),
                out: at(2, 0),
                vectors,
                factor_bits: 0.125f32.to_bits(),
            },
            scale_halves_slots(vectors),
            Elem::F16,
        ));
    }
    for (rows, words) in [(4, 1), (16, 4), (8, 16), (3, 2)] {
        out.push(case(
            format!("transpose_halves rows={rows} words={words}"),
            Kernel::TransposeHalves,
            TransposeState {
                input: at(0, 0),
                out: at(2, 0),
                rows,
                in_stride: 32,
                out_stride: words * 4,
                words,
            },
            transpose_halves_slots(rows, words),
            Elem::F16,
        ));
    }
    for runs in [&[][..], &[1u32][..], &[16][..], &[11, 5, 3][..]] {
        out.push(case(
            format!("transpose_quads runs={runs:?}"),
            Kernel::TransposeQuads {
                in_stride: 128,
                out_stride: 16,
            },
            TransposeQuadsState {
                runs: runs
                    .iter()
                    .enumerate()
                    .map(|(i, &blocks)| TransposeRun {
                        input: at(0, 512 * i as u32),
                        out: at(2, 1024 * i as u32),
                        blocks,
                    })
                    .collect(),
            },
            transpose_quads_slots(runs),
            Elem::F16,
        ));
    }
    for ty in elems() {
        let eb = elem_bytes(ty);
        for max in [false, true] {
            for (rows, cols) in [(1, 8), (3, 20), (6, 64), (2, 7)] {
                out.push(case(
                    format!("row_reduce {ty:?} max={max} rows={rows} cols={cols}"),
                    Kernel::RowReduce { ty, max },
                    RowReduceState {
                        input: at(0, 0),
                        out: at(2, 0),
                        rows,
                        in_stride: 64 * eb,
                        columns: cols,
                    },
                    row_reduce_slots(ty, rows, cols),
                    ty,
                ));
            }
        }
        for op in [BinOp::Add, BinOp::Mul, BinOp::Div, BinOp::Sub] {
            for reversed in [false, true] {
                for (rows, cols) in [(1, 8), (4, 20)] {
                    let stride = 32 * eb;
                    out.push(case(
                        format!(
                            "row_scalar {ty:?} {op:?} reversed={reversed} rows={rows} cols={cols}"
                        ),
                        Kernel::RowScalar { ty, op, reversed },
                        RowScalarState {
                            x: at(0, 0),
                            y: at(1, 0),
                            out: at(2, 0),
                            rows,
                            stride,
                            columns: cols,
                            y_stride: 4 * eb,
                        },
                        row_scalar_slots(ty, op, reversed, rows, cols, stride / 4),
                        ty,
                    ));
                }
            }
        }
        for (rows, cols, causal) in [
            (1u32, 8u32, false),
            (4, 20, false),
            (4, 16, true),
            (3, 7, true),
        ] {
            let out_stride = 32 * eb;
            let (l0, dl) = if causal { (1, 1) } else { (cols, 0) };
            let mut c = case(
                format!("softmax {ty:?} rows={rows} cols={cols} causal={causal}"),
                Kernel::Softmax { ty },
                SoftmaxState {
                    input: at(0, 0),
                    out: at(2, 0),
                    rows,
                    in_stride: 32 * eb,
                    out_stride,
                    columns: cols,
                    l0,
                    dl,
                },
                softmax_slots(ty, false, rows, cols, l0, dl, out_stride / 4),
                ty,
            );
            if causal {
                // The model charges every row its whole length; masked rows cost less.
                c.bound = Bound::Within(60);
            }
            out.push(c);
            for l0 in [l0, cols] {
                out.push(case(
                    format!("softmax_stats {ty:?} cols={cols} l0={l0}"),
                    Kernel::SoftmaxStats { ty },
                    SoftmaxState {
                        input: at(0, 0),
                        out: at(3, 0),
                        rows: 1,
                        in_stride: 32 * eb,
                        out_stride: 8,
                        columns: cols,
                        l0,
                        dl: 0,
                    },
                    softmax_slots(ty, true, 1, cols, l0, 0, 0),
                    ty,
                ));
            }
            out.push(case(
                format!("layer_norm_stats {ty:?} cols={cols}"),
                Kernel::LayerNormStats { ty },
                LayerNormState {
                    input: at(0, 0),
                    out: at(3, 0),
                    rows: 1,
                    in_stride: 32 * eb,
                    columns: cols,
                    epsilon_bits: 1e-5f32.to_bits(),
                    columns_f32_bits: (cols as f32).to_bits(),
                    out_stride: 8,
                },
                layer_norm_slots(ty, true, 1, cols, 0),
                ty,
            ));
            out.push(case(
                format!("layer_norm {ty:?} rows={rows} cols={cols}"),
                Kernel::LayerNorm { ty },
                LayerNormState {
                    input: at(0, 0),
                    out: at(2, 0),
                    rows,
                    in_stride: 32 * eb,
                    columns: cols,
                    epsilon_bits: 1e-5f32.to_bits(),
                    columns_f32_bits: (cols as f32).to_bits(),
                    out_stride,
                },
                layer_norm_slots(ty, false, rows, cols, out_stride / 4),
                ty,
            ));
        }
        for softmax in [false, true] {
            for (pairs, odd, zero_words) in [(1u32, 0u32, 0u32), (10, 1, 3), (32, 0, 8)] {
                out.push(case(
                    format!("row_apply {ty:?} softmax={softmax} pairs={pairs} odd={odd} zeros={zero_words}"),
                    Kernel::RowApply { ty, softmax },
                    RowApplyState {
                        input: at(0, 0),
                        out: at(2, 0),
                        stats: at(3, 0),
                        full_pairs: pairs,
                        odd,
                        zero_words,
                    },
                    row_apply_slots(ty, softmax, pairs, odd, zero_words),
                    ty,
                ));
            }
        }
    }
    for wide in [false, true] {
        for (rows, segs, words) in [(1, 1, 1), (4, 3, 2), (8, 2, 8)] {
            let seg_bytes = words * if wide { 8 } else { 4 };
            out.push(case(
                format!("copy2d wide={wide} rows={rows} segs={segs} words={words}"),
                Kernel::Copy2d { wide },
                Copy2dState {
                    src: at(0, 0),
                    dst: at(2, 0),
                    rows,
                    segments: segs,
                    words,
                    src_row_stride: segs * seg_bytes,
                    src_segment_stride: seg_bytes,
                    dst_row_stride: seg_bytes,
                    dst_segment_stride: rows * seg_bytes,
                },
                copy2d_slots(rows, segs, words),
                Elem::F32,
            ));
        }
    }
    // Flash attention: scores in the AMP's layouts of each mode.
    for mode in [AmpMode::F16F16, AmpMode::F16F32, AmpMode::F32F32] {
        let g = mode.geometry();
        let (s, a) = match mode {
            AmpMode::F16F16 => (Elem::F16, Elem::F16),
            AmpMode::F16F32 => (Elem::F32, Elem::F16),
            _ => (Elem::F32, Elem::F32),
        };
        let (cols, kb) = (g.columns, g.k);
        for scaled in [false, true] {
            for running in [false, true] {
                for (((rows, super_groups), baked), floor) in [(1u32, 1u32), (6, 4)]
                    .into_iter()
                    .flat_map(|shape| [(shape, false), (shape, true)])
                    .flat_map(|case| [(case, true), (case, false)])
                {
                    let c = case(
                        format!(
                            "flash_softmax {mode:?} scaled={scaled} running={running} rows={rows} sg={super_groups} baked={baked} floor={floor}"
                        ),
                        Kernel::FlashSoftmax {
                            s,
                            a,
                            cols,
                            kb,
                            scaled,
                            running,
                            stride: if baked { rows * GROUP_ROW_BYTES } else { 0 },
                            floor,
                        },
                        FlashSoftmaxState {
                            s: at(0, 0),
                            p: at(2, 0),
                            stats: at(3, 0),
                            rows,
                            super_groups,
                            group_stride: rows * GROUP_ROW_BYTES,
                            scale_bits: 0.125f32.to_bits(),
                            alpha: StateWord::Addr(BufferId(1), 0),
                        },
                        flash_softmax_slots(
                            s,
                            a,
                            cols,
                            kb,
                            scaled,
                            running,
                            rows,
                            super_groups,
                            baked,
                            floor,
                        ),
                        s,
                    );
                    out.push(c);
                }
            }
        }
        if mode != AmpMode::F16F32 {
            // The scores' types: f32 (f32f32) and f16 (f16f16).
            for scaled in [false, true] {
                for (rows, groups, step) in [(1u32, 1u32, 32u32), (5, 8, 32), (5, 8, 0)] {
                    out.push(case(
                        format!(
                            "flash_mask {s:?} scaled={scaled} rows={rows} groups={groups} step={step}"
                        ),
                        Kernel::FlashMask {
                            s,
                            scaled,
                            broadcast: step == 0,
                        },
                        FlashMaskState {
                            s: at(0, 0),
                            mask: at(2, 0),
                            rows,
                            groups,
                            group_stride: rows * GROUP_ROW_BYTES,
                            mask_group_stride: if step == 0 { 32 } else { rows * 32 },
                            mask_row_step: step,
                            scale_bits: 0.125f32.to_bits(),
                        },
                        flash_mask_slots(s, scaled, step == 0, rows, groups),
                        s,
                    ));
                }
            }
            for groups in [0u32, 1, 37] {
                out.push(case(
                    format!("flash_mask_bool {s:?} groups={groups}"),
                    Kernel::FlashMaskBool { ty: s },
                    CastState {
                        input: at(0, 0),
                        out: at(2, 0),
                        groups,
                    },
                    flash_mask_bool_slots(s, groups),
                    s,
                ));
            }
        }
        for (rows, groups) in [(0u32, 2u32), (2, 0), (1, 1), (2, 3), (5, 8)] {
            out.push(case(
                format!("flash_rescale {s:?} rows={rows} groups={groups}"),
                Kernel::FlashRescale { p: s },
                FlashRescaleState {
                    o: at(0, 0),
                    factors: at(3, 0),
                    rows,
                    groups,
                    group_stride: rows * GROUP_ROW_BYTES,
                },
                flash_rescale_slots(s, rows, groups),
                s,
            ));
        }
        for out_ty in [Elem::F32, Elem::F16] {
            let gout = if out_ty == Elem::F32 { 8 } else { 16 };
            for (rows, sources) in [(1u32, 1u32), (4, 3)] {
                let dv = 64;
                let gs = rows * GROUP_ROW_BYTES;
                let mut c = case(
                    format!("flash_combine {s:?}->{out_ty:?} rows={rows} sources={sources}"),
                    Kernel::FlashCombine {
                        p: s,
                        out: out_ty,
                        cols,
                        gout,
                        dv,
                        stage: 0,
                    },
                    FlashCombineState {
                        out: at(2, 0),
                        out_group_stride: rows * gout * elem_bytes(out_ty),
                        rows,
                        scratch: at(4, 0),
                        sources: (0..sources)
                            .map(|j| CombineSource {
                                o: at(5 + j, 0),
                                group_stride: gs,
                                stats: at(9 + j, 0),
                            })
                            .collect(),
                    },
                    flash_combine_slots(s, out_ty, cols, gout, dv, rows, sources, false),
                    s,
                );
                // The formula leaves out a few pointer updates per source and group for f16
                // partials (it leans low) and the `nop` that may align the f32 loop's bundles.
                c.bound = Bound::Within(5);
                out.push(c);
            }
            // f32 partials with the sources after the first in one stage buffer: exact.
            for (rows, sources) in [(1u32, 2u32), (1, 3), (4, 5)] {
                if s != Elem::F32 {
                    continue;
                }
                let dv = 64;
                let groups = dv / cols;
                let stage = combine_stage(s, groups, rows, sources);
                assert_ne!(stage, 0);
                let gs = rows * GROUP_ROW_BYTES;
                out.push(case(
                    format!("flash_combine {s:?}->{out_ty:?} staged rows={rows} sources={sources}"),
                    Kernel::FlashCombine {
                        p: s,
                        out: out_ty,
                        cols,
                        gout,
                        dv,
                        stage,
                    },
                    FlashCombineState {
                        out: at(2, 0),
                        out_group_stride: rows * gout * elem_bytes(out_ty),
                        rows,
                        scratch: at(4, 0),
                        sources: (0..sources)
                            .map(|j| {
                                if j == 0 {
                                    CombineSource {
                                        o: at(5, 0),
                                        group_stride: gs,
                                        stats: at(9, 0),
                                    }
                                } else {
                                    let base = (j - 1) * stage;
                                    CombineSource {
                                        o: at(6, base),
                                        group_stride: gs,
                                        stats: at(6, base + groups * gs),
                                    }
                                }
                            })
                            .collect(),
                    },
                    flash_combine_slots(s, out_ty, cols, gout, dv, rows, sources, true),
                    s,
                ));
            }
        }
    }
    out
}

#[test]
fn every_cycle_model_matches_the_device() {
    let cases = cases();
    let mut failures = Vec::new();
    let mut table = Vec::new();
    let mut kinds = std::collections::BTreeSet::new();
    for c in &cases {
        kinds.insert(format!("{:?}", c.kernel.state_kind()));
        let device = measure(c);
        table.push(format!("{:<78} {:>6} {:>6}", c.name, c.model, device));
        let ok = match c.bound {
            Bound::Exact => device == c.model,
            Bound::Within(p) => device.abs_diff(c.model) * 100 <= c.model * p as u64,
        };
        if !ok {
            failures.push(format!(
                "{:<70} model {:>6} device {:>6} ({:+})",
                c.name,
                c.model,
                device,
                device as i64 - c.model as i64
            ));
        }
    }
    // `cargo test -p ipu-kernels --test cycle_models -- --nocapture` prints the whole table.
    println!(
        "{:<78} {:>6} {:>6}\n{}",
        "case",
        "model",
        "device",
        table.join("\n")
    );
    // Every state layout, so every kernel family, is covered.
    assert_eq!(kinds.len(), 22, "{kinds:?}");
    assert!(
        failures.is_empty(),
        "{} of {} cases off their model:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
}
