//! The map kernel ([`crate::state::MapState`]): a predicate, logical operation or selection of the graph
//! ([`ipu_numerics::MapFn`]) over one to three operands of one shape, one element at a time
//! through f32, as the conversion kernel walks its elements (groups of four, each operand
//! decoded by [`convert::decode`], the result encoded by [`convert::encode`] and packed into
//! the output's words). A predicate's result is a bool byte; `where`'s is encoded in the
//! output's format.

use ipu_isa::{AReg, AluOp, ConvOp, DataReg, FBinOp, FType, FUnOp, Instr, MReg, Width};
use ipu_numerics::{ByteType, MapFn, Overflow};

use crate::code::*;
use crate::convert::{self, *};

/// `$a` registers of the second and third operands, and of `+inf`.
const Y: u8 = 4;
const Z: u8 = 5;
const INF: u8 = 6;
/// `$m` pointers of the second and third operands.
const B: u8 = 11;
const C: u8 = 12;

/// Whether the map kernel takes operands `ins` and result `to`: integers (one-byte ones
/// included), bool, f32, f16 and bf16, not the one-byte float formats (FP8, FP4, E8M0: cast
/// first).
pub fn map_supported(ins: &[ConvType], to: ConvType) -> bool {
    let table = |t: &ConvType| {
        matches!(
            t,
            ConvType::Byte(b) if !matches!(b, ByteType::Int { .. } | ByteType::Bool)
        )
    };
    !ins.iter().any(table) && !table(&to)
}

/// [`convert::decode`], with one-byte integers and bool read directly (no table).
fn decode(c: &mut Code, from: ConvType, base: MReg, off: i16) {
    match from {
        ConvType::Byte(ByteType::Int { signed, .. }) => {
            let r = m(R);
            c.op(convert::load(Width::B8, DataReg::M(r), base, off));
            if signed {
                c.op(alu_imm(AluOp::Shl, r, r, 24));
                c.op(alu_imm(AluOp::Sar, r, r, 24));
            }
            c.op(mov_a(X, r));
            c.op(conv(ConvOp::I32ToF32, X, X));
        }
        ConvType::Byte(ByteType::Bool) => {
            let r = m(R);
            c.op(convert::load(Width::B8, DataReg::M(r), base, off));
            c.op(mov_a(X, r));
            c.op(conv(ConvOp::I32ToF32, X, X));
        }
        _ => convert::decode(c, from, base, off, 0),
    }
}

/// The result of `f` on `$aX` (and `$aY`, `$aZ`): a predicate's 0 or 1 in `$mR`, `where`'s
/// f32 in `$aX`.
fn compute(c: &mut Code, f: MapFn) {
    let (r, t0, t1, t2) = (m(R), m(T0), m(T1), m(T2));
    let to_m = |c: &mut Code, d: MReg, a: u8| {
        c.op(Instr::MovToM { d, a: AReg(a) });
    };
    // A comparison's all-ones mask in $aFA to 0 or 1 in $mR.
    let bit = |c: &mut Code| {
        to_m(c, r, FA);
        c.op(alu_imm(AluOp::And, r, r, 1));
    };
    // The masks of `a == 0` and `b == 0` in $mT0 and $mT1.
    let zeros = |c: &mut Code| {
        c.op(fbin(FType::F32, FBinOp::CmpEq, FA, X, FZERO));
        to_m(c, t0, FA);
        c.op(fbin(FType::F32, FBinOp::CmpEq, FB, Y, FZERO));
        to_m(c, t1, FB);
    };
    match f {
        MapFn::Equal
        | MapFn::Less
        | MapFn::LessOrEqual
        | MapFn::Greater
        | MapFn::GreaterOrEqual => {
            let (op, a, b) = match f {
                MapFn::Equal => (FBinOp::CmpEq, X, Y),
                MapFn::Less => (FBinOp::CmpLt, X, Y),
                MapFn::LessOrEqual => (FBinOp::CmpLe, X, Y),
                MapFn::Greater => (FBinOp::CmpLt, Y, X),
                _ => (FBinOp::CmpLe, Y, X),
            };
            c.op(fbin(FType::F32, op, FA, a, b));
            bit(c);
        }
        MapFn::Not => {
            c.op(fbin(FType::F32, FBinOp::CmpEq, FA, X, FZERO));
            bit(c);
        }
        MapFn::And | MapFn::Or | MapFn::Xor => {
            zeros(c);
            let op = match f {
                MapFn::And => AluOp::Or,
                MapFn::Or => AluOp::And,
                _ => AluOp::Xor,
            };
            c.op(alu(op, r, t0, t1));
            c.op(alu_imm(AluOp::And, r, r, 1));
            if f != MapFn::Xor {
                // Neither zero (and), not both zero (or).
                c.op(alu_imm(AluOp::Xor, r, r, 1));
            }
        }
        MapFn::IsNaN => {
            c.op(fbin(FType::F32, FBinOp::CmpEq, FA, X, X));
            bit(c);
            c.op(alu_imm(AluOp::Xor, r, r, 1));
        }
        MapFn::IsInf | MapFn::IsPosInf | MapFn::IsNegInf => {
            let a = if f == MapFn::IsInf {
                c.op(fun(FType::F32, FUnOp::Abs, FB, X));
                FB
            } else {
                X
            };
            let inf = if f == MapFn::IsNegInf {
                f32::NEG_INFINITY
            } else {
                f32::INFINITY
            };
            li(c, t2, inf.to_bits());
            c.op(mov_a(INF, t2));
            c.op(fbin(FType::F32, FBinOp::CmpEq, FA, a, INF));
            bit(c);
        }
        MapFn::Where => {
            // The mask of `a == 0` picks `c`, else `b`.
            c.op(fbin(FType::F32, FBinOp::CmpEq, FA, X, FZERO));
            to_m(c, t2, FA);
            to_m(c, t0, Z);
            to_m(c, t1, Y);
            convert::select(c, r, t0, t1, t2);
            c.op(mov_a(X, r));
        }
    }
}

/// The work of element `i` of a group: its result's bits in `$mR` (an f32 in `$aX`).
fn element(c: &mut Code, f: MapFn, ins: &[ConvType], to: ConvType, i: u32, d: &Data) {
    let (r, t0) = (m(R), m(T0));
    let ptrs = [m(IN), m(B), m(C)];
    // Decode the last operand first, so that the first ends in $aX.
    for k in (0..f.arity()).rev() {
        decode(c, ins[k], ptrs[k], (i * ins[k].bytes()) as i16);
        if k > 0 {
            c.op(Instr::MovToM { d: t0, a: AReg(X) });
            c.op(mov_a(if k == 1 { Y } else { Z }, t0));
        }
    }
    compute(c, f);
    if !f.is_predicate() {
        convert::encode(c, to, d);
    }
    let _ = r;
}

/// The map kernel over groups of four.
pub(crate) fn map(c: &mut Code, f: MapFn, ins: &[ConvType], to: ConvType) {
    c.op(ld32m(m(IN), m(0), 0));
    c.op(ld32m(m(B), m(0), 4));
    c.op(ld32m(m(C), m(0), 8));
    c.op(ld32m(m(OUT), m(0), 12));
    c.op(ld32m(m(GROUPS), m(0), 16));
    let d = convert::data(ConvType::F32, to, Overflow::Saturate);
    let (table, end, group) = convert::groups_loop(c);
    body(c, f, ins, to, &d);
    close_rows_and_exit(c, m(GROUPS), group, end);
    c.bind(table);
    c.words(&d.words);
}

/// One group of four: the elements, their packing and the pointers' steps.
fn body(c: &mut Code, f: MapFn, ins: &[ConvType], to: ConvType, d: &Data) {
    c.op(setzi(m(ACC), 0));
    for i in 0..4 {
        element(c, f, ins, to, i, d);
        if to == ConvType::F32 && !f.is_predicate() {
            c.op(st32_a(X, m(OUT), (4 * i) as i16));
        } else {
            convert::pack(c, to, i);
        }
    }
    let ptrs = [m(IN), m(B), m(C)];
    for k in 0..f.arity() {
        c.op(alu_imm(
            AluOp::Add,
            ptrs[k],
            ptrs[k],
            (4 * ins[k].bytes()) as i16,
        ));
    }
    c.op(alu_imm(AluOp::Add, m(OUT), m(OUT), (4 * to.bytes()) as i16));
}

/// Issue slots of the map kernel over `groups` groups of four on one worker.
pub fn map_slots(f: MapFn, ins: &[ConvType], to: ConvType, groups: u32) -> u32 {
    let state = 5;
    if groups == 0 {
        return state + 2;
    }
    let d = convert::data(ConvType::F32, to, Overflow::Saturate);
    let mut c = Code::new();
    body(&mut c, f, ins, to, &d);
    // state, the zero check and decrement, the table's address, 0.0, then per group its body
    // and the loop branch; exit.
    state + 2 + 3 + groups * (c.len() as u32 + 1) + 1
}
