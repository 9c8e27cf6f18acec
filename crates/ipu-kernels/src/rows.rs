//! Row kernels: worker code for operations that work along the last axis of values stored
//! row-major (a layout whose column group is the row length rounded up to 4, see
//! `plan::rows`), and the on-tile transpose.
//!
//! Every row kernel computes in f32 and follows the device-precision rules of
//! `ipu_reference` exactly where the order is specified: sums run in f32 in index order (one
//! `f32add` per element), maxima with `f32max`, softmax is `e_j = exp(x_j - max)`,
//! `s = sum e_j`, `e_j / s`, layer norm is `mean = sum x / n`, `var = sum (x - mean)^2 / n`,
//! `(x - mean) / sqrt(var + epsilon)`. The graph's `div` is `a * rcp(b)` in f32; the divisions
//! inside softmax and layer norm are computed as `q = a * rcp(b)` followed by one correction
//! step `q += (a - q b) rcp(b)` with fused multiply-adds, which gives the
//! correctly rounded f32 quotient (Markstein's theorem: `rcp` is correctly rounded and the
//! residual `a - q b` is exact under a fused multiply-add).
//!
//! Elements are processed in pairs (an f32v2 in `$a0:1`): f16 rows load one 32-bit word and
//! widen it, f32 rows load one 64-bit pair. A row of `C` columns has `C / 2` pairs and, when
//! `C` is odd, a last pair whose second lane is padding and is ignored. Kernels that write rows
//! write the padding columns as zeros themselves (the hardware has no sub-word stores, so a row
//! is written in whole words up to its stride).

use ipu_isa::{AluOp, ConvOp, DataReg, FBinOp, FType, FUnOp, Instr, MReg, Width};

use crate::code::*;
use crate::state::*;
use crate::types::{BinOp, Elem};

/// Loads the next pair of elements at `ptr` (advancing it) into `$a0:1` as f32v2; `raw` is a
/// scratch register for the f16 word.
fn ld_pair(c: &mut Code, ty: Elem, ptr: MReg, raw: u8) {
    match ty {
        Elem::F32 => {
            c.op(ld64step(ap(0), ptr, 8));
        }
        Elem::F16 => {
            c.op(ld32step_a(a(raw), ptr, 4));
            c.op(conv(ConvOp::F16v2ToF32v2, 0, raw));
        }
    }
}

/// Stores the f32v2 in pair `src` at `ptr` (advancing it) in the element type.
fn st_pair(c: &mut Code, ty: Elem, src: u8, ptr: MReg) {
    match ty {
        Elem::F32 => {
            c.op(st64step(ap(src), ptr, 8));
        }
        Elem::F16 => {
            c.op(conv(ConvOp::F32v2ToF16v2, src, src));
            c.op(st32step_a(a(src), ptr, 4));
        }
    }
}

/// Stores a row's two statistics, `$a{first}` and `$a{second}`, as the words at `out`.
fn store_stats(c: &mut Code, out: MReg, first: u8, second: u8) {
    c.op(st32_a(first, out, 0));
    c.op(st32_a(second, out, 4));
}

/// Slots of [`ld_pair`] and of [`st_pair`], the same: one 64-bit move for f32, a 32-bit move
/// and a conversion for f16.
fn pair_slots(ty: Elem) -> u32 {
    match ty {
        Elem::F32 => 1,
        Elem::F16 => 2,
    }
}

fn st32step_m(s: MReg, base: MReg) -> Instr {
    Instr::Store {
        width: Width::B32,
        s: DataReg::M(s),
        base,
        mode: ipu_isa::AddrMode::PostInc(4),
    }
}

/// Fills with zero words from `ptr` (advancing) up to `row_end`: `words = (row_end - ptr) / 4`.
/// `zero` holds 0; `tmp` is scratch.
fn zero_to(c: &mut Code, ptr: MReg, row_end: MReg, zero: MReg, tmp: MReg) {
    c.op(alu(AluOp::Sub, tmp, row_end, ptr));
    c.op(alu_imm(AluOp::Shr, tmp, tmp, 2));
    rpt(c, tmp, |c| {
        c.op(st32step_m(zero, ptr));
    });
}

/// Emits the division `q = n / d` in `ty` (f32v2 pairs or one f32), correctly rounded: `r`
/// holds `rcp(d)` and `d` holds `d`; `t` is scratch; `n` is overwritten with the residual.
fn div(c: &mut Code, ty: FType, q: u8, n: u8, r: u8, d: u8, t: u8) {
    // DIV_SLOTS instructions.
    c.op(fbin(ty, FBinOp::Mul, q, n, r));
    c.op(fun(ty, FUnOp::Neg, t, q));
    c.op(fbin(ty, FBinOp::Mac, n, t, d));
    c.op(fbin(ty, FBinOp::Mac, q, n, r));
}

/// Slots of [`div`], on pairs or on one f32.
const DIV_SLOTS: u32 = 4;

/// Folds a row into the f32 accumulator `$a{acc}` with `op`, in index order: `pairs` pairs
/// loaded from `ptr` (advancing it), then, when `odd` is nonzero, the valid lane of one last
/// pair. `map` first transforms the loaded values in `$a0:1`; it is given `F32v2` for a pair
/// and `F32` for the last lane.
#[allow(clippy::too_many_arguments)]
fn fold_row(
    c: &mut Code,
    ty: Elem,
    ptr: MReg,
    pairs: MReg,
    odd: MReg,
    acc: u8,
    op: FBinOp,
    map: impl Fn(&mut Code, FType),
) {
    let s = FType::F32;
    rpt(c, pairs, |c| {
        ld_pair(c, ty, ptr, 2);
        map(c, FType::F32v2);
        c.op(fbin(s, op, acc, acc, 0));
        c.op(fbin(s, op, acc, acc, 1));
    });
    let done = c.label();
    c.branch(Instr::Brz { a: odd, target: 0 }, done);
    ld_pair(c, ty, ptr, 2);
    map(c, s);
    c.op(fbin(s, op, acc, acc, 0));
    c.bind(done);
}

/// Writes a row of results at `out` (advancing it): `pair` computes each result pair into
/// `$a4:5`; `pairs` full pairs, then, when `odd` is nonzero, one last pair whose second lane
/// is replaced by zero (`zero` holds 0).
fn write_row(
    c: &mut Code,
    ty: Elem,
    out: MReg,
    pairs: MReg,
    odd: MReg,
    zero: MReg,
    pair: impl Fn(&mut Code),
) {
    rpt(c, pairs, |c| {
        pair(c);
        st_pair(c, ty, 4, out);
    });
    let done = c.label();
    c.branch(Instr::Brz { a: odd, target: 0 }, done);
    pair(c);
    c.op(mov_a(5, zero));
    st_pair(c, ty, 4, out);
    c.bind(done);
}

/// The smallest normal f32: the floor of a softmax sum, so that a row whose every score is
/// masked (`-inf`: every `exp` is 0, the sum is 0) divides 0 by it and gives zeros, the
/// result `ipu_reference` and ONNX's Attention define for a fully masked row, instead of
/// `0 * rcp(0)` = NaN. A row with any unmasked score has a sum of at least 1.
const SUM_FLOOR: u32 = 0x0080_0000;
/// The lowest finite f32: the start of a softmax row's maximum, so that a fully masked row's
/// `x - max` is `-inf` (exp 0) rather than `-inf - -inf` = NaN.
const MAX_START: u32 = 0xFF7F_FFFF;
/// Issue slots of [`floor_sum`].
const FLOOR_SUM_SLOTS: u32 = 6;

/// `$a{d} = max($a{d}, SUM_FLOOR)`, a NaN sum kept NaN: `f32max` returns the other operand of
/// a NaN, so the floor adds `d - d` (0, or NaN for a NaN sum: a row with an infinite score,
/// whose softmax is NaN throughout, as the reference's). Through `tmp` and `$a15`.
fn floor_sum(c: &mut Code, d: u8, tmp: MReg) {
    let s = FType::F32;
    li(c, tmp, SUM_FLOOR);
    c.op(mov_a(15, tmp));
    c.op(fbin(s, FBinOp::Max, 15, d, 15));
    c.op(fbin(s, FBinOp::Sub, d, d, d));
    c.op(fbin(s, FBinOp::Add, d, 15, d));
}

/// Sets up the divisor of [`normalize_pair`] from the f32 in `$a{d}`: `rcp(d)` broadcast
/// into `$a6:7` and `d` into `$a12:13` (`$a15` is scratch).
fn normalize_divisor(c: &mut Code, d: u8) {
    c.op(fun(FType::F32, FUnOp::Rcp, 15, d));
    c.op(bcast(6, 15));
    c.op(bcast(12, d));
}

/// The last pass of softmax (`exp`) or layer norm on the pair at `ptr` (advancing it):
/// `$a4:5 = f(x - $a10:11) / $a12:13`, correctly rounded, with `f` = `exp` or the identity
/// and the divisor set up by [`normalize_divisor`].
fn normalize_pair(c: &mut Code, ty: Elem, ptr: MReg, exp: bool) {
    let v = FType::F32v2;
    ld_pair(c, ty, ptr, 2);
    c.op(fbin(v, FBinOp::Sub, 0, 0, 10));
    if exp {
        c.op(fun(v, FUnOp::Exp, 0, 0));
    }
    div(c, FType::F32v2, 4, 0, 6, 12, 8);
}

/// Transpose of a staged block of `bytes`-byte elements: output row `j` (of `rows`) takes
/// element `j` of every staged row. State: in (column 0 of staged row 0), out, rows, in
/// stride (bytes between staged rows), out stride, 32-bit words per output row.
pub fn transpose(c: &mut Code, bytes: u32) {
    load_state(c, TransposeState::WORDS);
    let (inp, out, rows, stride, out_stride, words) = (m(1), m(2), m(3), m(4), m(5), m(6));
    let end = c.label();
    let row = c.label();
    loop_counts(c, &[rows], end);
    c.bind(row);
    let (p, q) = (m(8), m(9));
    c.op(mov_m(p, inp));
    c.op(mov_m(q, out));
    let per_word = 4 / bytes;
    let width = match bytes {
        1 => Width::B8,
        2 => Width::B16,
        _ => Width::B32,
    };
    rpt(c, words, |c| {
        for k in 0..per_word {
            let d = if k == 0 { m(10) } else { m(11) };
            c.op(Instr::Load {
                width,
                d: DataReg::M(d),
                base: p,
                mode: ipu_isa::AddrMode::Offset(0),
            });
            c.op(alu(AluOp::Add, p, p, stride));
            if k > 0 {
                c.op(alu_imm(AluOp::Shl, m(11), m(11), (8 * bytes * k) as i16));
                c.op(alu(AluOp::Or, m(10), m(10), m(11)));
            }
        }
        c.op(st32step_m(m(10), q));
    });
    c.op(alu_imm(AluOp::Add, inp, inp, bytes as i16));
    c.op(alu(AluOp::Add, out, out, out_stride));
    close_rows_and_exit(c, rows, row, end);
}

/// `f16v2pack $aD, $aX, $aY` (the low halves of X and Y), or `f16v2packhi` (`hi`: the high).
fn pack(d: u8, x: u8, y: u8, hi: bool) -> Instr {
    let (d, x, y) = (a(d), a(x), a(y));
    if hi {
        Instr::F16v2PackHi { d, a: x, b: y }
    } else {
        Instr::F16v2Pack { d, a: x, b: y }
    }
}

/// [`transpose`] of 2-byte elements, four output rows at a time: the 64 bits of four columns
/// of two staged rows give one word of each of the four output rows (`f16v2pack` of the low
/// halves, `f16v2packhi` of the high ones). One issue slot per two elements and stored word,
/// against seven for the general kernel. `rows` must be a multiple of 4 (others are left
/// out), the input and `in_stride` 8-byte aligned; like [`transpose`], an odd number of staged
/// rows reads the row after the last.
pub fn transpose_halves(c: &mut Code) {
    load_state(c, TransposeState::WORDS);
    let (inp, out, quads, stride, out_stride, words) = (m(1), m(2), m(3), m(4), m(5), m(6));
    let (stride2, pe, po, out4) = (m(7), m(8), m(9), m(14));
    let q = [m(10), m(11), m(12), m(13)];
    let end = c.label();
    let quad = c.label();
    c.op(alu_imm(AluOp::Shr, quads, quads, 2));
    loop_counts(c, &[quads], end);
    c.op(alu(AluOp::Add, stride2, stride, stride));
    c.op(alu_imm(AluOp::Shl, out4, out_stride, 2));
    c.bind(quad);
    // The even staged rows through `pe`, the odd ones through `po`; output row i through q[i].
    c.main_ops_ending(
        &[
            mov_m(pe, inp),
            alu(AluOp::Add, po, inp, stride),
            mov_m(q[0], out),
            alu(AluOp::Add, q[1], out, out_stride),
            alu(AluOp::Add, q[2], q[1], out_stride),
            alu(AluOp::Add, q[3], q[2], out_stride),
        ],
        true,
    );
    c.rpt_bundles(Instr::Rpt {
        count: words,
        body: 8,
    });
    c.bundles(
        &[
            ld64_at(0, pe, 0),
            ld64_at(2, po, 0),
            alu(AluOp::Add, pe, pe, stride2),
            alu(AluOp::Add, po, po, stride2),
            st32step_a(a(4), q[0], 4),
            st32step_a(a(5), q[1], 4),
            st32step_a(a(6), q[2], 4),
            st32step_a(a(7), q[3], 4),
        ],
        &[
            FLOAT_NOP,
            FLOAT_NOP,
            pack(4, 0, 2, false),
            pack(5, 0, 2, true),
            pack(6, 1, 3, false),
            pack(7, 1, 3, true),
            FLOAT_NOP,
            FLOAT_NOP,
        ],
    );
    c.op(alu_imm(AluOp::Add, inp, inp, 8));
    c.op(alu(AluOp::Add, out, out, out4));
    close_rows_and_exit(c, quads, quad, end);
}

/// [`transpose`] of 2-byte elements in blocks of four staged rows by four columns: each
/// block is four 64-bit loads (one per staged row, `in_stride` bytes apart), eight
/// `f16v2pack`/`f16v2packhi` (the low and high halves of rows 0 and 1, then of rows 2 and 3,
/// so that rows 0 and 1 are free for the next block's loads halfway through), and four 64-bit
/// stores (one per output row, `out_stride` bytes apart): ten issue slots per 16 elements,
/// the loads and stores co-issued with the packs, against 16 for [`transpose_halves`].
///
/// State ([`TransposeQuadsState`]): the number of runs, then per run the first block's staged
/// row 0 (8-byte aligned), its output row 0 (8-byte aligned) and its blocks (at least one).
/// Within a run the blocks go along the staged rows: each next block is 8 bytes further in the
/// input and four output rows further in the output. The strides are immediates of the
/// kernel: `3 * in_stride` and `4 * out_stride` must fit an increment. Like [`transpose`],
/// the loads run ahead into the next block (two staged rows, 8 bytes past the run's last
/// column), so the staged rows must continue there.
pub fn transpose_quads(c: &mut Code, in_stride: u32, out_stride: u32) {
    assert!(
        3 * in_stride <= i16::MAX as u32 && 4 * out_stride <= i16::MAX as u32,
        "transpose_quads: strides {in_stride} and {out_stride} past the increments' reach"
    );
    let (runs, cursor, inp, out, blocks) = (m(1), m(2), m(3), m(4), m(5));
    let (s, os) = (in_stride as i16, out_stride as i16);
    let end = c.label();
    let run = c.label();
    c.op(ld32m(runs, m(0), 0));
    c.op(alu_imm(AluOp::Add, cursor, m(0), 4));
    loop_counts(c, &[runs], end);
    c.bind(run);
    c.op(ld32step_m(inp, cursor, 4));
    c.op(ld32step_m(out, cursor, 4));
    c.op(ld32step_m(blocks, cursor, 4));
    c.op(ld64_at(0, inp, 0));
    c.op(ld64_at(2, inp, s));
    c.rpt_bundles(Instr::Rpt {
        count: blocks,
        body: 10,
    });
    // Output row i in $a(8 + 2i):(9 + 2i): its first half from staged rows 0 and 1 ($a0:1,
    // $a2:3), its second from rows 2 and 3 ($a4:5, $a6:7).
    c.bundles(
        &[
            ld64_at(4, inp, 2 * s),
            ld64_at(6, inp, 3 * s),
            alu_imm(AluOp::Add, inp, inp, 8),
            Instr::Nop,
            ld64_at(0, inp, 0),
            ld64_at(2, inp, s),
            st64_at(10, out, os),
            st64_at(12, out, 2 * os),
            st64_at(14, out, 3 * os),
            st64step(ap(8), out, 4 * os),
        ],
        &[
            pack(8, 0, 2, false),
            pack(10, 0, 2, true),
            pack(12, 1, 3, false),
            pack(14, 1, 3, true),
            pack(9, 4, 6, false),
            pack(11, 4, 6, true),
            pack(13, 5, 7, false),
            pack(15, 5, 7, true),
            FLOAT_NOP,
            FLOAT_NOP,
        ],
    );
    close_rows_and_exit(c, runs, run, end);
}

/// Issue slots of [`transpose_quads`] over runs of `blocks` blocks each.
pub fn transpose_quads_slots(blocks: &[u32]) -> u32 {
    // The count and cursor, the count's check and decrement, `exit`; per run its three
    // words, the two first loads, the `rpt` (its body starts aligned: no `nop`), ten slots a
    // block, the branch.
    if blocks.is_empty() {
        return 2 + 1 + 1;
    }
    2 + 2 + 1 + blocks.iter().map(|b| 3 + 2 + 1 + 10 * b + 1).sum::<u32>()
}

/// Issue slots of [`transpose_halves`] over `rows` output rows of `words` words each.
pub fn transpose_halves_slots(rows: u32, words: u32) -> u32 {
    let quads = rows / 4;
    if quads == 0 {
        return TransposeState::WORDS as u32 + 1 + 1 + 1;
    }
    // The state, the quad count, its check and decrement, the two strides, `exit`; per quad
    // the six pointers, the `rpt` and its eight slots per word, the two advances, the branch.
    TransposeState::WORDS as u32 + 1 + 2 + 2 + 1 + quads * (6 + 1 + 8 * words + 2 + 1)
}

/// Issue slots of a transpose of `rows` output rows of `words` words each.
pub fn transpose_slots(bytes: u32, rows: u32, words: u32) -> u32 {
    let per_word = 4 / bytes;
    let per = 2 * per_word + 2 * (per_word - 1) + 1;
    9 + rows * (6 + words * per)
}

/// Per-row maximum or sum of the first `C` columns, in f32 in index order, written as one
/// element and three zeros per output row. State: in, out, rows, in stride, columns.
pub fn row_reduce(c: &mut Code, ty: Elem, max: bool) {
    load_state(c, RowReduceState::WORDS);
    let (inp, out, rows, stride, cols) = (m(1), m(2), m(3), m(4), m(5));
    let end = c.label();
    let row = c.label();
    loop_counts(c, &[rows], end);
    let (pairs, odd, init, zero, p) = (m(6), m(7), m(10), m(11), m(8));
    c.op(alu_imm(AluOp::Shr, pairs, cols, 1));
    c.op(alu_imm(AluOp::And, odd, cols, 1));
    li(c, init, if max { 0xFF80_0000 } else { 0 });
    c.op(setzi(zero, 0));
    let op = if max { FBinOp::Max } else { FBinOp::Add };
    c.bind(row);
    c.op(mov_m(p, inp));
    c.op(mov_a(8, init));
    fold_row(c, ty, p, pairs, odd, 8, op, |_, _| {});
    emit_scalar_row(c, ty, out, zero);
    c.op(alu(AluOp::Add, inp, inp, stride));
    close_rows_and_exit(c, rows, row, end);
}

/// Writes `$a8` (f32) as one element of `ty` followed by three zero elements at `out`
/// (advancing it by the row: 16 bytes for f32, 8 for f16).
fn emit_scalar_row(c: &mut Code, ty: Elem, out: MReg, zero: MReg) {
    match ty {
        Elem::F32 => {
            c.op(st32step_a(a(8), out, 4));
            for _ in 0..3 {
                c.op(st32step_m(zero, out));
            }
        }
        Elem::F16 => {
            c.op(conv(ConvOp::F32ToF16, 8, 8));
            c.op(st32step_a(a(8), out, 4));
            c.op(st32step_m(zero, out));
        }
    }
}

/// Issue slots of a row reduction over `rows` rows of `cols` columns.
pub fn row_reduce_slots(ty: Elem, rows: u32, cols: u32) -> u32 {
    let l = pair_slots(ty);
    // Per row: pointer, initial value, `rpt`, the odd branch, the scalar row's stores, the
    // stride and the loop branch.
    let store = match ty {
        Elem::F32 => 4,
        Elem::F16 => 3,
    };
    13 + rows * (6 + store + (cols / 2) * (l + 2) + (cols % 2) * (l + 1))
}

/// `out[r][c] = x[r][c] OP y[r]` (or `y[r] OP x[r][c]` when `reversed`) for the first `C`
/// columns, zeros up to the row stride; a division is `a * rcp(b)` (the graph's `div`). State: x, y, out, rows, stride (x and out), columns,
/// y stride.
pub fn row_scalar(c: &mut Code, ty: Elem, op: BinOp, reversed: bool) {
    load_state(c, RowScalarState::WORDS);
    let (x, y, out, rows, stride, cols, ystride) = (m(1), m(2), m(3), m(4), m(5), m(6), m(7));
    let end = c.label();
    let row = c.label();
    loop_counts(c, &[rows], end);
    let (pairs, odd, zero, p, q, row_end, tmp) = (m(12), m(13), m(11), m(8), m(9), m(10), m(14));
    c.op(alu_imm(AluOp::Shr, pairs, cols, 1));
    c.op(alu_imm(AluOp::And, odd, cols, 1));
    c.op(setzi(zero, 0));
    let v = FType::F32v2;
    c.bind(row);
    // y[r] to f32, broadcast into $a10:11; for a division by y, rcp(y) into $a6:7.
    c.op(ld32a(a(15), y, 0));
    if ty == Elem::F16 {
        c.op(conv(ConvOp::F16ToF32, 15, 15));
    }
    c.op(bcast(10, 15));
    if op == BinOp::Div && !reversed {
        c.op(fun(FType::F32, FUnOp::Rcp, 15, 15));
        c.op(bcast(6, 15));
    }
    c.op(mov_m(p, x));
    c.op(mov_m(q, out));
    c.op(alu(AluOp::Add, row_end, out, stride));
    let body = |c: &mut Code| {
        ld_pair(c, ty, p, 2);
        // Result in $a4:5.
        match (op.float_op(), reversed) {
            // Division is `a * (1 / b)` in f32, as the graph's `div` is defined in device
            // precision (the reference's rule; the same as the elementwise kernel).
            (None, false) => {
                c.op(fbin(v, FBinOp::Mul, 4, 0, 6));
            }
            (None, true) => {
                c.op(fun(v, FUnOp::Rcp, 6, 0));
                c.op(fbin(v, FBinOp::Mul, 4, 10, 6));
            }
            (Some(f), true) => {
                c.op(fbin(v, f, 4, 10, 0));
            }
            (Some(f), false) => {
                c.op(fbin(v, f, 4, 0, 10));
            }
        }
    };
    write_row(c, ty, q, pairs, odd, zero, body);
    zero_to(c, q, row_end, zero, tmp);
    c.op(alu(AluOp::Add, x, x, stride));
    c.op(alu(AluOp::Add, out, out, stride));
    c.op(alu(AluOp::Add, y, y, ystride));
    close_rows_and_exit(c, rows, row, end);
}

/// Words of zeros a row kernel writes after `pairs` pairs of `ty` up to a stride of
/// `stride_words` words.
fn zero_words(ty: Elem, pairs: u32, stride_words: u32) -> u32 {
    let pair_words = match ty {
        Elem::F32 => 2,
        Elem::F16 => 1,
    };
    stride_words.saturating_sub(pairs * pair_words)
}

/// Issue slots of [`row_scalar`] over `rows` rows of `cols` columns and `stride_words` words
/// per row.
pub fn row_scalar_slots(
    ty: Elem,
    op: BinOp,
    reversed: bool,
    rows: u32,
    cols: u32,
    stride_words: u32,
) -> u32 {
    if rows == 0 {
        return RowScalarState::WORDS as u32 + 2;
    }
    let (l, st) = (pair_slots(ty), pair_slots(ty));
    let divide_by_y = op == BinOp::Div && !reversed;
    // The operation on a pair: `rcp` (two slots) and a multiply for `y / x`.
    let f = if op == BinOp::Div && reversed { 3 } else { 1 };
    // Per row: y loaded (widened for f16) and broadcast, its reciprocal for `x / y`.
    let y = 2 + u32::from(ty == Elem::F16) + if divide_by_y { 3 } else { 0 };
    let (pairs, odd) = (cols / 2, cols % 2);
    let per_row = y
        + 12
        + pairs * (l + f + st)
        + odd * (l + f + 1 + st)
        + zero_words(ty, pairs + odd, stride_words);
    RowScalarState::WORDS as u32 + 6 + rows * per_row
}

/// Softmax over the first `L` columns of each row, `L = min(C, L0 + r dL)` for row `r`
/// (`dL = 1` and `L0` = the query index + 1 gives the causal mask); the masked columns and the
/// padding are written as zeros. State: in, out, rows, in stride, out stride, columns, L0,
/// dL.
pub fn softmax(c: &mut Code, ty: Elem, stats: bool) {
    load_state(c, SoftmaxState::WORDS);
    let (inp, out, rows, stride, out_stride, cols, l0, dl) =
        (m(1), m(2), m(3), m(4), m(5), m(6), m(7), m(8));
    let end = c.label();
    let row = c.label();
    loop_counts(c, &[rows], end);
    let (len, pairs, odd, p, zero) = (m(9), m(10), m(11), m(14), m(13));
    c.op(setzi(zero, 0));
    c.bind(row);
    c.op(alu(AluOp::Min, len, l0, cols));
    c.op(alu_imm(AluOp::Shr, pairs, len, 1));
    c.op(alu_imm(AluOp::And, odd, len, 1));
    // Pass 1: the maximum, in $a8.
    li(c, m(12), MAX_START);
    c.op(mov_a(8, m(12)));
    c.op(mov_m(p, inp));
    fold_row(c, ty, p, pairs, odd, 8, FBinOp::Max, |_, _| {});
    c.op(bcast(10, 8));
    // Pass 2: the sum of exp(x - max) in index order, in $a9.
    c.op(mov_a(9, zero));
    c.op(mov_m(p, inp));
    fold_row(c, ty, p, pairs, odd, 9, FBinOp::Add, |c, t| {
        c.op(fbin(t, FBinOp::Sub, 0, 0, 10));
        c.op(fun(t, FUnOp::Exp, 0, 0));
    });
    if stats {
        // The row's maximum and sum, for `row_apply`.
        store_stats(c, out, 8, 9);
    } else {
        // rcp(s) in $a6:7, s in $a12:13.
        floor_sum(c, 9, m(12));
        normalize_divisor(c, 9);
        // Pass 3: e / s.
        let (q, row_end, tmp) = (m(15), m(12), m(10));
        c.op(mov_m(p, inp));
        c.op(mov_m(q, out));
        write_row(c, ty, q, pairs, odd, zero, |c| {
            normalize_pair(c, ty, p, true)
        });
        c.op(alu(AluOp::Add, row_end, out, out_stride));
        zero_to(c, q, row_end, zero, tmp);
    }
    c.op(alu(AluOp::Add, inp, inp, stride));
    c.op(alu(AluOp::Add, out, out, out_stride));
    c.op(alu(AluOp::Add, l0, l0, dl));
    close_rows_and_exit(c, rows, row, end);
}

/// Slots of the normalising pass of [`softmax`] and [`layer_norm`]: `rcp` and broadcasts,
/// then per pair (and per last lane, one more) the load, `extra` slots, the correctly rounded
/// division and the store, then the zeros up to `out_stride_words`.
fn normalize_pass_slots(ty: Elem, extra: u32, pairs: u32, odd: u32, out_stride_words: u32) -> u32 {
    let (l, st) = (pair_slots(ty), pair_slots(ty));
    12 + pairs * (l + extra + DIV_SLOTS + st)
        + odd * (l + extra + 1 + DIV_SLOTS + st)
        + zero_words(ty, pairs + odd, out_stride_words)
}

/// Issue slots of [`softmax`] over `rows` rows of `cols` columns, row `r` valid up to
/// `min(cols, l0 + r dl)`, with `out_stride_words` words per output row (the `stats` form
/// writes two words per row instead of the row).
pub fn softmax_slots(
    ty: Elem,
    stats: bool,
    rows: u32,
    cols: u32,
    l0: u32,
    dl: u32,
    out_stride_words: u32,
) -> u32 {
    if rows == 0 {
        return SoftmaxState::WORDS as u32 + 2;
    }
    let l = pair_slots(ty);
    let row = |len: u32| {
        let (pairs, odd) = (len / 2, len % 2);
        // The length, pass 1 (maximum; `exp` costs two slots), pass 2 (sum), the loop.
        let passes =
            3 + (7 + pairs * (l + 2) + odd * (l + 1)) + (4 + pairs * (l + 5) + odd * (l + 4)) + 4;
        passes
            + if stats {
                2
            } else {
                // The sum's floor; pass 3: `exp` (two slots) after the subtraction, then the
                // division.
                FLOOR_SUM_SLOTS + normalize_pass_slots(ty, 3, pairs, odd, out_stride_words)
            }
    };
    let mut total = SoftmaxState::WORDS as u32 + 4;
    let mut len = l0;
    for _ in 0..rows {
        total += row(len.min(cols));
        len = len.wrapping_add(dl);
    }
    total
}

/// Layer norm over the first `C` columns of each row; padding written as zeros. State: in,
/// out, rows, in stride, columns, epsilon (f32 bits), `C` as f32 bits, out stride.
pub fn layer_norm(c: &mut Code, ty: Elem, stats: bool) {
    load_state(c, LayerNormState::WORDS);
    let (inp, out, rows, stride, cols, eps, n) = (m(1), m(2), m(3), m(4), m(5), m(6), m(7));
    let out_stride = m(8);
    let end = c.label();
    let row = c.label();
    loop_counts(c, &[rows], end);
    let (pairs, odd, p, q, zero, row_end, tmp) = (m(9), m(10), m(11), m(12), m(13), m(14), m(15));
    let s = FType::F32;
    c.op(alu_imm(AluOp::Shr, pairs, cols, 1));
    c.op(alu_imm(AluOp::And, odd, cols, 1));
    c.op(setzi(zero, 0));
    c.bind(row);
    // $a3 = n, $a15 = rcp(n) (reloaded per row: the pair registers are reused below).
    c.op(mov_a(3, n));
    c.op(fun(s, FUnOp::Rcp, 15, 3));
    // Pass 1: sum in $a14, then the mean in $a9 and broadcast in $a10:11.
    c.op(mov_a(14, zero));
    c.op(mov_m(p, inp));
    fold_row(c, ty, p, pairs, odd, 14, FBinOp::Add, |_, _| {});
    div(c, FType::F32, 9, 14, 15, 3, 8);
    c.op(bcast(10, 9));
    // Pass 2: sum of squared deviations in $a14; var = that / n; inv = sqrt(var + eps).
    c.op(mov_a(14, zero));
    c.op(mov_m(p, inp));
    fold_row(c, ty, p, pairs, odd, 14, FBinOp::Add, |c, t| {
        c.op(fbin(t, FBinOp::Sub, 0, 0, 10));
        c.op(fbin(t, FBinOp::Mul, 0, 0, 0));
    });
    div(c, FType::F32, 9, 14, 15, 3, 8); // var in $a9
    c.op(mov_a(8, eps));
    c.op(fbin(s, FBinOp::Add, 9, 9, 8));
    c.op(fun(s, FUnOp::Sqrt, 9, 9));
    if stats {
        // The row's mean and sqrt(var + epsilon), for `row_apply`.
        store_stats(c, out, 10, 9);
    } else {
        // inv in $a12:13, rcp(inv) in $a6:7.
        normalize_divisor(c, 9);
        // Pass 3: (x - mean) / inv.
        c.op(mov_m(p, inp));
        c.op(mov_m(q, out));
        c.op(alu(AluOp::Add, row_end, out, out_stride));
        write_row(c, ty, q, pairs, odd, zero, |c| {
            normalize_pair(c, ty, p, false)
        });
        zero_to(c, q, row_end, zero, tmp);
    }
    c.op(alu(AluOp::Add, inp, inp, stride));
    c.op(alu(AluOp::Add, out, out, out_stride));
    close_rows_and_exit(c, rows, row, end);
}

/// Issue slots of [`layer_norm`] over `rows` rows of `cols` columns with `out_stride_words`
/// words per output row (the `stats` form writes two words per row instead of the row).
pub fn layer_norm_slots(ty: Elem, stats: bool, rows: u32, cols: u32, out_stride_words: u32) -> u32 {
    if rows == 0 {
        return LayerNormState::WORDS as u32 + 2;
    }
    let l = pair_slots(ty);
    let (pairs, odd) = (cols / 2, cols % 2);
    // `n` and its `rcp`, pass 1 (sum, mean), pass 2 (variance, `sqrt(var + epsilon)`), the loop.
    let passes = 3
        + (5 + DIV_SLOTS + pairs * (l + 2) + odd * (l + 1))
        + (8 + DIV_SLOTS + pairs * (l + 4) + odd * (l + 3))
        + 3;
    let per_row = passes
        + if stats {
            2
        } else {
            // Pass 3: the subtraction, then the division.
            normalize_pass_slots(ty, 1, pairs, odd, out_stride_words)
        };
    LayerNormState::WORDS as u32 + 6 + rows * per_row
}

/// Strided two-dimensional copy: for row `i` and segment `j`, `words` words (64-bit when
/// `wide`, else 32-bit) from `src + i src_row + j src_seg` to `dst + i dst_row + j dst_seg`.
/// Regroups staged rows between the column-grouped order and row-major rows on tile. State:
/// src, dst, rows, segments, words per segment, src row stride, src segment stride, dst row
/// stride, dst segment stride (strides in bytes).
pub fn copy2d(c: &mut Code, wide: bool) {
    load_state(c, Copy2dState::WORDS);
    let (src, dst, rows, segs, words) = (m(1), m(2), m(3), m(4), m(5));
    let (src_row, src_seg, dst_row, dst_seg) = (m(6), m(7), m(8), m(9));
    let (s, d, left, p, q) = (m(10), m(11), m(12), m(13), m(14));
    let end = c.label();
    let row = c.label();
    let seg = c.label();
    c.branch(Instr::Brz { a: rows, target: 0 }, end);
    c.branch(Instr::Brz { a: segs, target: 0 }, end);
    c.op(alu_imm(AluOp::Sub, rows, rows, 1));
    c.bind(row);
    c.op(mov_m(s, src));
    c.op(mov_m(d, dst));
    c.op(alu_imm(AluOp::Sub, left, segs, 1));
    c.bind(seg);
    c.op(mov_m(p, s));
    c.op(mov_m(q, d));
    rpt(c, words, |c| {
        if wide {
            c.op(ld64step(ap(0), p, 8));
            c.op(st64step(ap(0), q, 8));
        } else {
            c.op(ld32step_a(a(0), p, 4));
            c.op(st32step_a(a(0), q, 4));
        }
    });
    c.op(alu(AluOp::Add, s, s, src_seg));
    c.op(alu(AluOp::Add, d, d, dst_seg));
    c.branch(Instr::Brnzdec { a: left, target: 0 }, seg);
    c.op(alu(AluOp::Add, src, src, src_row));
    c.op(alu(AluOp::Add, dst, dst, dst_row));
    close_rows_and_exit(c, rows, row, end);
}

/// Issue slots of [`copy2d`].
pub fn copy2d_slots(rows: u32, segs: u32, words: u32) -> u32 {
    13 + rows * (6 + segs * (6 + 2 * words))
}

/// The last pass of softmax (`softmax`) or layer norm (`layer_norm`) over a range of pairs of
/// one row, from the row's statistics written by the `stats` form of those kernels (maximum
/// and sum, or mean and `sqrt(var + epsilon)`): the same arithmetic as the fused kernels, so
/// several workers can share a row. State: in (first pair), out (first pair), statistics,
/// full pairs, odd (1 if a last pair with one valid lane follows), zero words after.
pub fn row_apply(c: &mut Code, ty: Elem, softmax: bool) {
    load_state(c, RowApplyState::WORDS);
    let (inp, out, st, full, odd, zeros) = (m(1), m(2), m(3), m(4), m(5), m(6));
    let zero = m(13);
    c.op(setzi(zero, 0));
    c.op(ld32a(a(8), st, 0));
    c.op(ld32a(a(9), st, 4));
    c.op(bcast(10, 8));
    if softmax {
        floor_sum(c, 9, m(12));
    }
    normalize_divisor(c, 9);
    write_row(c, ty, out, full, odd, zero, |c| {
        normalize_pair(c, ty, inp, softmax)
    });
    rpt(c, zeros, |c| {
        c.op(st32step_m(zero, out));
    });
    c.op(Instr::Exit);
}

/// Issue slots of [`row_apply`] over `full` full pairs, `odd` (0 or 1) pairs with one valid
/// lane and `zero_words` words.
pub fn row_apply_slots(ty: Elem, softmax: bool, full: u32, odd: u32, zero_words: u32) -> u32 {
    let per = pair_slots(ty) + 1 + 2 * softmax as u32 + DIV_SLOTS + pair_slots(ty);
    18 + FLOOR_SUM_SLOTS * softmax as u32 + (full + odd) * per + odd + zero_words
}
