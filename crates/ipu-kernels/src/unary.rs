//! The unary kernel ([`crate::Kernel::Unary`]): `exp`, `sqrt` and the scale by their
//! instructions, `tanh`, `erf`, `log`, `sin` and `cos` by f32 instruction sequences whose constants and
//! lane-by-lane model are [`ipu_numerics::unary`]'s; and [`crate::Kernel::ScaleHalves`]. Each
//! with its cycle model.

use ipu_isa::{AluOp, ConvOp, FBinOp, FType, FUnOp, Instr, MReg};
use ipu_numerics::UnaryFn;
use ipu_numerics::unary::{
    COS_TAYLOR, ERF_AS_NEG_A, ERF_AS_P, ERF_TAYLOR, LOG_ATANH, LOG_EXPONENT_BIAS_BITS,
    LOG_SUBNORMAL_SCALE_MINUS_ONE, SIN_NEG_HALF_PI, SIN_ROUNDING_SHIFT, SIN_TAYLOR,
    SIN_TWO_OVER_PI, TANH_TAYLOR, THRESHOLD,
};

use crate::code::*;
use crate::state::*;
use crate::types::{Elem, UnOp};

/// How the kernel computes a function on an f32v2 pair: one instruction, or a sequence in
/// `$a0:1` after a set-up of its constants.
enum PairForm {
    /// One f32v2 instruction.
    Instruction(FUnOp),
    /// The set-up (once per launch) and the sequence (per pair) from `$a0:1` to `$a0:1`.
    Sequence(Vec<Instr>, Vec<Instr>),
}

/// The form of `f`: the one place a function's device code is chosen. Its lane-by-lane model
/// is [`UnaryFn::device`], which the differential tests hold it to bit for bit.
fn pair_form(f: UnaryFn) -> PairForm {
    match f {
        UnaryFn::Exp => PairForm::Instruction(FUnOp::Exp),
        UnaryFn::Sqrt => PairForm::Instruction(FUnOp::Sqrt),
        UnaryFn::Tanh | UnaryFn::Erf => PairForm::Sequence(approx_setup(f), approx_pair(f)),
        UnaryFn::Log => PairForm::Sequence(log_setup(), log_pair()),
        UnaryFn::Sin => PairForm::Sequence(sin_cos_setup(), sin_cos_pair(0)),
        UnaryFn::Cos => PairForm::Sequence(sin_cos_setup(), sin_cos_pair(1)),
    }
}

pub(crate) fn unary(c: &mut Code, ty: Elem, op: UnOp) {
    let instruction = match op {
        UnOp::Fn(f) => match pair_form(f) {
            PairForm::Sequence(setup, pair) => return unary_sequence(c, ty, &setup, &pair),
            PairForm::Instruction(i) => Some(i),
        },
        UnOp::Scale => None,
    };
    load_state(c, UnaryState::WORDS); // m1 in, m2 out, m3 vectors, m4 factor bits
    let end = exit_if_zero(c, m(3));
    c.op(Instr::MovToA { d: a(12), a: m(4) });
    c.op(Instr::MovToA { d: a(13), a: m(4) });
    let f32_op = |d: u8, s: u8| match instruction {
        Some(i) => fun(FType::F32v2, i, d, s),
        None => fbin(FType::F32v2, FBinOp::Mul, d, s, 12),
    };
    rpt(c, m(3), |c| {
        c.op(ld64step(ap(0), m(1), 8));
        match ty {
            Elem::F32 => {
                c.op(f32_op(4, 0));
            }
            Elem::F16 => {
                widen4(c, 4, 0);
                c.op(f32_op(4, 4));
                c.op(f32_op(6, 6));
                narrow4(c, 4, 4);
            }
        }
        c.op(st64step(ap(4), m(2), 8));
    });
    exit_at(c, end);
}

/// Issue slots of a unary kernel over `vectors` vectors on one worker.
pub fn unary_slots(ty: Elem, op: UnOp, vectors: u32) -> u32 {
    if vectors == 0 {
        return 6;
    }
    let f = match op {
        UnOp::Fn(f) => match pair_form(f) {
            PairForm::Sequence(setup, pair) => {
                let body = match ty {
                    // ld64, the pair, st64
                    Elem::F32 => 2 + instr_slots(&pair),
                    // per f16v2 half: ld32, widen, the pair, narrow, st32
                    Elem::F16 => 2 * (4 + instr_slots(&pair)),
                };
                // the state, `brz`, the constants, `rpt`, `exit`
                return UnaryState::WORDS as u32 + 1 + instr_slots(&setup) + 1 + 1 + body * vectors;
            }
            PairForm::Instruction(i) => i.slots(),
        },
        UnOp::Scale => 1,
    };
    let per = match ty {
        Elem::F32 => 2 + f,
        Elem::F16 => 2 + 4 + 2 * f,
    };
    9 + per * vectors
}

/// [`Kernel::ScaleHalves`]: f16 vectors times a factor that is exactly an f16, one f16v4
/// multiply a vector. The f16v4 product is the f32 product rounded once to f16, which is what
/// the widened multiplication of [`unary`]'s `Scale` gives when the factor converts exactly.
/// Each vector's load and the previous one's store are one `ldst64pace`, co-issued with the
/// multiply of the vector before; nothing is read past the last vector.
pub(crate) fn scale_halves(c: &mut Code) {
    load_state(c, UnaryState::WORDS); // m1 in, m2 out, m3 vectors, m4 factor bits
    let end = exit_if_zero(c, m(3));
    let one = c.label();
    c.op(Instr::MovToA { d: a(8), a: m(4) });
    c.op(conv(ConvOp::F32ToF16, 8, 8));
    c.op(Instr::Bcast {
        ty: FType::F16v4,
        d: ap(8),
        a: a(8),
    });
    let mul = fbin(FType::F16v4, FBinOp::Mul, 4, 0, 8);
    c.main_ops_ending(
        &[ld64step(ap(0), m(1), 8), alu_imm(AluOp::Sub, m(5), m(3), 1)],
        true,
    );
    c.branch(Instr::Brz { a: m(5), target: 0 }, one);
    c.bundle(ld64step(ap(0), m(1), 8), mul);
    c.op(alu_imm(AluOp::Sub, m(5), m(5), 1));
    c.rpt_bundles(Instr::Rpt {
        count: m(5),
        body: 1,
    });
    c.bundle(
        Instr::LdSt64Pace {
            d: ap(0),
            s: ap(4),
            p: [m(1), m(2)],
        },
        mul,
    );
    c.bundle(st64step(ap(4), m(2), 8), mul);
    c.op(st64step(ap(4), m(2), 8));
    c.op(Instr::Exit);
    c.bind(one);
    c.op(mul);
    c.op(st64step(ap(4), m(2), 8));
    exit_at(c, end);
}

/// Issue slots of [`scale_halves`] over `vectors` vectors.
pub fn scale_halves_slots(vectors: u32) -> u32 {
    match vectors {
        // The state, the check, `exit`.
        0 => 4 + 1 + 1,
        // The factor's pair, the first load, the count and its check, the product, the store.
        1 => 4 + 1 + 3 + 2 + 1 + 1 + 1 + 1,
        // ... then the second load with the first product, the `rpt` of one slot a vector, the
        // last two products' stores.
        n => 4 + 1 + 3 + 2 + 1 + 1 + 1 + 1 + (n - 2) + 1 + 1 + 1,
    }
}

/// Issue slots of a straight-line sequence.
fn instr_slots(seq: &[Instr]) -> u32 {
    seq.iter()
        .map(|i| match i {
            Instr::FUn { op, .. } => op.slots(),
            _ => 1,
        })
        .sum()
}

/// A function computed by a sequence over 64-bit vectors: the constants are set up once, then
/// each f32v2 pair (f32: one vector; f16: each f16v2 half, widened) goes through `pair` in
/// `$a0:1`.
fn unary_sequence(c: &mut Code, ty: Elem, setup: &[Instr], pair: &[Instr]) {
    load_state(c, UnaryState::WORDS); // m1 in, m2 out, m3 vectors
    let end = exit_if_zero(c, m(3));
    for &i in setup {
        c.op(i);
    }
    rpt(c, m(3), |c| match ty {
        Elem::F32 => {
            c.op(ld64step(ap(0), m(1), 8));
            for &i in pair {
                c.op(i);
            }
            c.op(st64step(ap(0), m(2), 8));
        }
        Elem::F16 => {
            for _ in 0..2 {
                c.op(ld32step_a(a(0), m(1), 4));
                c.op(conv(ConvOp::F16v2ToF32v2, 0, 0));
                for &i in pair {
                    c.op(i);
                }
                c.op(conv(ConvOp::F32v2ToF16v2, 0, 0));
                c.op(st32step_a(a(0), m(2), 4));
            }
        }
    });
    exit_at(c, end);
}

/// Register pairs of [`approx_pair`]: the operand and result, three temporaries, three
/// resident constants, and the scratch pair the other constants are moved into before use.
const X: u8 = 0;
const A: u8 = 2;
const Z: u8 = 4;
const Q: u8 = 6;
const K_T: u8 = 8;
const K_ONE: u8 = 10;
const K_RES: u8 = 12;
const K_SCRATCH: u8 = 14;

/// The constants of `op`: three resident in `$a8:9` (threshold), `$a10:11` (1) and `$a12:13`
/// (tanh: the x^3 coefficient; erf: `p`), and the rest in `$m5..` in order of use (each moved
/// into `$a14:15` by [`approx_pair`] when needed).
fn approx_constants(op: UnaryFn) -> ([f32; 3], Vec<f32>) {
    let [k3, k5, k7, k9] = TANH_TAYLOR;
    let [c0, c2, c4, c6] = ERF_TAYLOR;
    let [n1, n2, n3, n4, n5] = ERF_AS_NEG_A;
    match op {
        UnaryFn::Tanh => ([THRESHOLD, 1.0, k3], vec![k9, k7, k5]),
        UnaryFn::Erf => (
            [THRESHOLD, 1.0, ERF_AS_P],
            vec![c6, c4, c2, c0, n5, n4, n3, n2, n1],
        ),
        _ => unreachable!("only tanh and erf have constants"),
    }
}

/// The set-up of the constants (`li` through `$m15` and two moves per resident pair).
fn approx_setup(op: UnaryFn) -> Vec<Instr> {
    let li = |d: MReg, v: f32| {
        let bits = v.to_bits();
        [
            setzi(d, bits & 0xFFFF),
            Instr::Orhi {
                d,
                imm: (bits >> 16) as u16,
            },
        ]
    };
    let (resident, moved) = approx_constants(op);
    let mut out = Vec::new();
    for (&v, r) in resident.iter().zip([K_T, K_ONE, K_RES]) {
        out.extend(li(m(15), v));
        out.push(mov_a(r, m(15)));
        out.push(mov_a(r + 1, m(15)));
    }
    for (i, &v) in moved.iter().enumerate() {
        out.extend(li(m(5 + i as u8), v));
    }
    out
}

/// The f32v2 sequence of `tanh` or `erf` from `$a0:1` to `$a0:1`; lane by lane it is exactly
/// `ipu_numerics::unary::{tanh_device, erf_device}`. Both branches are computed: `c` =
/// `x` clamped to the threshold `T`, the Taylor polynomial `P(c)`, the sign `s = c / T`
/// (exact at `|x| > T`), `w = min(mask(T < |x|), 1)` (0 or 1), `B = P v + s w` with
/// `v = 1 - w`; then the large-argument formula scaled by `s w` is added to `B`.
fn approx_pair(op: UnaryFn) -> Vec<Instr> {
    let v2 = FType::F32v2;
    let (_, moved) = approx_constants(op);
    let mut next = 0;
    let mut out = Vec::new();
    let bin = |out: &mut Vec<Instr>, o: FBinOp, d: u8, a: u8, b: u8| out.push(fbin(v2, o, d, a, b));
    let un = |out: &mut Vec<Instr>, o: FUnOp, d: u8, a: u8| out.push(fun(v2, o, d, a));
    // The next moved constant, in `$a14:15`.
    let mut k = |out: &mut Vec<Instr>| {
        let r = m(5 + next as u8);
        next += 1;
        out.push(mov_a(K_SCRATCH, r));
        out.push(mov_a(K_SCRATCH + 1, r));
        K_SCRATCH
    };
    use FBinOp::*;
    un(&mut out, FUnOp::Abs, A, X);
    un(&mut out, FUnOp::Neg, Q, K_T);
    bin(&mut out, Min, X, X, K_T);
    bin(&mut out, Max, X, X, Q); // X = c
    bin(&mut out, Mul, Z, X, X); // Z = c^2
    let s = |out: &mut Vec<Instr>| {
        bin(out, Add, Z, X, X);
        bin(out, Add, Z, Z, Z); // Z = 4c = c / T
    };
    match op {
        UnaryFn::Tanh => {
            let kr = k(&mut out);
            bin(&mut out, Mul, Q, Z, kr);
            let kr = k(&mut out);
            bin(&mut out, Add, Q, Q, kr);
            bin(&mut out, Mul, Q, Q, Z);
            let kr = k(&mut out);
            bin(&mut out, Add, Q, Q, kr);
            bin(&mut out, Mul, Q, Q, Z);
            bin(&mut out, Add, Q, Q, K_RES);
            bin(&mut out, Mul, Q, Q, Z);
            s(&mut out);
            bin(&mut out, Mac, X, X, Q); // X = c + c q = P
        }
        UnaryFn::Erf => {
            let kr = k(&mut out);
            bin(&mut out, Mul, Q, Z, kr);
            for last in [false, false, true] {
                let kr = k(&mut out);
                bin(&mut out, Add, Q, Q, kr);
                if !last {
                    bin(&mut out, Mul, Q, Q, Z);
                }
            }
            s(&mut out);
            bin(&mut out, Mul, X, Q, X); // X = q c = P
        }
        _ => unreachable!("only tanh and erf"),
    }
    // The selection: Z = s w, X = B.
    bin(&mut out, CmpLt, Q, K_T, A);
    bin(&mut out, Min, Q, Q, K_ONE);
    bin(&mut out, Mul, Z, Z, Q);
    bin(&mut out, Sub, Q, K_ONE, Q);
    bin(&mut out, Mul, X, X, Q);
    bin(&mut out, Add, X, X, Z);
    match op {
        UnaryFn::Tanh => {
            // B - s w 2 / (e^(2|x|) + 1)
            bin(&mut out, Add, A, A, A);
            un(&mut out, FUnOp::Exp, A, A);
            bin(&mut out, Add, A, A, K_ONE);
            un(&mut out, FUnOp::Rcp, A, A);
            bin(&mut out, Add, A, A, A);
            bin(&mut out, Mul, A, A, Z);
            bin(&mut out, Sub, X, X, A);
        }
        UnaryFn::Erf => {
            // t = 1 / (1 + p |x|); B + (-poly(t)) (s w e^(-x^2))
            un(&mut out, FUnOp::Mov, Q, K_ONE);
            bin(&mut out, Mac, Q, A, K_RES);
            un(&mut out, FUnOp::Rcp, Q, Q);
            bin(&mut out, Mul, A, A, A);
            un(&mut out, FUnOp::Neg, A, A);
            un(&mut out, FUnOp::Exp, A, A);
            bin(&mut out, Mul, A, A, Z);
            let kr = k(&mut out);
            bin(&mut out, Mul, Z, Q, kr);
            for _ in 0..4 {
                let kr = k(&mut out);
                bin(&mut out, Add, Z, Z, kr);
                bin(&mut out, Mul, Z, Z, Q);
            }
            bin(&mut out, Mac, X, Z, A);
        }
        _ => unreachable!("only tanh and erf"),
    }
    debug_assert_eq!(next, moved.len(), "every moved constant is used once");
    out
}

/// Register pairs of [`log_pair`]: the operand, then the correction and the result (`LX`); the
/// clamped input, then the significand `m` (`LA`); the subnormal scale, then `u^2` (`LZ`); the
/// subnormal weight `w`, then the polynomial (`LQ`); the exponent `k`, then `u` (`LK`); the
/// resident constants 1 (`LONE`) and `f32::MIN_POSITIVE` (`LMIN`); the scratch pair the moved
/// constants go through (`LS`).
const LX: u8 = 0;
const LA: u8 = 2;
const LZ: u8 = 4;
const LQ: u8 = 6;
const LK: u8 = 8;
const LONE: u8 = 10;
const LMIN: u8 = 12;
const LS: u8 = 14;

/// The `$m` registers of [`log_pair`]: three integer temporaries, the exponent bias, and the
/// moved constants in order of use (`2^24 - 1`, `f32::MAX`, -24, `ln 2`, then the series).
const LOG_INT_TEMPS: [u8; 3] = [5, 6, 7];
const LOG_BIAS_REG: u8 = 8;
const LOG_MOVED_REGS: [u8; 8] = [4, 9, 10, 11, 12, 13, 14, 15];

/// The moved constants of [`log_pair`], in order of use.
fn log_moved() -> [f32; 8] {
    let [c9, c7, c5, c3] = LOG_ATANH;
    [
        LOG_SUBNORMAL_SCALE_MINUS_ONE,
        f32::MAX,
        -24.0,
        std::f32::consts::LN_2,
        c9,
        c7,
        c5,
        c3,
    ]
}

/// The set-up of [`log_pair`]'s constants: the resident pairs through `$m15`, the exponent
/// bias, then the moved constants (`$m15` last).
fn log_setup() -> Vec<Instr> {
    let li = |d: MReg, bits: u32| {
        [
            setzi(d, bits & 0xFFFF),
            Instr::Orhi {
                d,
                imm: (bits >> 16) as u16,
            },
        ]
    };
    let mut out = Vec::new();
    for (v, r) in [(1.0f32, LONE), (f32::MIN_POSITIVE, LMIN)] {
        out.extend(li(m(15), v.to_bits()));
        out.push(mov_a(r, m(15)));
        out.push(mov_a(r + 1, m(15)));
    }
    out.extend(li(m(LOG_BIAS_REG), LOG_EXPONENT_BIAS_BITS));
    for (&v, &r) in log_moved().iter().zip(&LOG_MOVED_REGS) {
        out.extend(li(m(r), v.to_bits()));
    }
    out
}

/// The f32v2 sequence of `log` from `$a0:1` to `$a0:1`; lane by lane it is exactly
/// `ipu_numerics::unary::log_device`: `w = min(mask(x < min), 1)`, `x' = x (1 + w (2^24 -
/// 1))`, `c = clamp(x', min, max)`, the correction `(sqrt(x') - sqrt(c)) max max` (0 for
/// positive normal `x'`; -inf, NaN or +inf at the special inputs); per lane, the bits of `c`
/// give `k` and `m` (integer add, shifts, subtract); `r = correction + (k - 24 w) ln 2`,
/// `u = (m - 1) rcp(m + 1)`, `r + 2 u P(u^2)`.
fn log_pair() -> Vec<Instr> {
    use FBinOp::*;
    let v2 = FType::F32v2;
    let mut out = Vec::new();
    let bin = |out: &mut Vec<Instr>, o: FBinOp, d: u8, a: u8, b: u8| out.push(fbin(v2, o, d, a, b));
    let un = |out: &mut Vec<Instr>, o: FUnOp, d: u8, a: u8| out.push(fun(v2, o, d, a));
    let mut next = 0;
    let mut k = |out: &mut Vec<Instr>| {
        let r = m(LOG_MOVED_REGS[next]);
        next += 1;
        out.push(mov_a(LS, r));
        out.push(mov_a(LS + 1, r));
        LS
    };
    let [t0, t1, t2] = LOG_INT_TEMPS.map(m);
    bin(&mut out, CmpLt, LQ, LX, LMIN);
    bin(&mut out, Min, LQ, LQ, LONE); // w
    let kr = k(&mut out);
    un(&mut out, FUnOp::Mov, LZ, LONE);
    bin(&mut out, Mac, LZ, LQ, kr); // 1 + w (2^24 - 1)
    bin(&mut out, Mul, LX, LX, LZ); // x'
    let kr = k(&mut out);
    bin(&mut out, Min, LA, LX, kr);
    bin(&mut out, Max, LA, LA, LMIN); // c
    un(&mut out, FUnOp::Sqrt, LX, LX);
    un(&mut out, FUnOp::Sqrt, LZ, LA);
    bin(&mut out, Sub, LX, LX, LZ);
    bin(&mut out, Mul, LX, LX, kr);
    bin(&mut out, Mul, LX, LX, kr); // the correction
    for lane in 0..2 {
        out.push(Instr::MovToM {
            d: t0,
            a: a(LA + lane),
        });
        out.push(alu(AluOp::Add, t1, t0, m(LOG_BIAS_REG)));
        out.push(alu_imm(AluOp::Shr, t1, t1, 23));
        out.push(alu_imm(AluOp::Sub, t1, t1, 127)); // k
        out.push(alu_imm(AluOp::Shl, t2, t1, 23));
        out.push(alu(AluOp::Sub, t0, t0, t2)); // the bits of m
        out.push(Instr::MovToA {
            d: a(LA + lane),
            a: t0,
        });
        out.push(Instr::MovToA {
            d: a(LK + lane),
            a: t1,
        });
        out.push(conv(ConvOp::I32ToF32, LK + lane, LK + lane));
    }
    let kr = k(&mut out);
    bin(&mut out, Mac, LK, LQ, kr); // k - 24 w
    let kr = k(&mut out);
    bin(&mut out, Mac, LX, LK, kr); // correction + k ln 2
    bin(&mut out, Sub, LK, LA, LONE);
    bin(&mut out, Add, LA, LA, LONE);
    un(&mut out, FUnOp::Rcp, LA, LA);
    bin(&mut out, Mul, LK, LK, LA); // u
    bin(&mut out, Mul, LZ, LK, LK); // u^2
    let kr = k(&mut out);
    un(&mut out, FUnOp::Mov, LQ, kr);
    for _ in 0..3 {
        bin(&mut out, Mul, LQ, LQ, LZ);
        let kr = k(&mut out);
        bin(&mut out, Add, LQ, LQ, kr);
    }
    bin(&mut out, Mul, LQ, LQ, LZ);
    bin(&mut out, Add, LQ, LQ, LONE);
    bin(&mut out, Mul, LQ, LQ, LK);
    bin(&mut out, Add, LQ, LQ, LQ);
    bin(&mut out, Add, LX, LX, LQ);
    debug_assert_eq!(
        next,
        LOG_MOVED_REGS.len(),
        "every moved constant is used once"
    );
    out
}

/// `setzi` and `orhi`: `$mD` = `bits`.
fn li_bits(d: MReg, bits: u32) -> [Instr; 2] {
    [
        setzi(d, bits & 0xFFFF),
        Instr::Orhi {
            d,
            imm: (bits >> 16) as u16,
        },
    ]
}

/// Register pairs of [`sin_cos_pair`]: the operand, then `sin r` and the result (`SX`); `x 2/pi`
/// shifted, then `k`, then `cos r` (`SK`); `r` (`SR`); `r^2` (`SZ`); the polynomials (`SQ`);
/// the weights of the cosine (`SW1`) and of the negation (`SW2`); the scratch pair constants
/// are moved into (`SS`).
const SX: u8 = 0;
const SK: u8 = 2;
const SR: u8 = 4;
const SZ: u8 = 6;
const SQ: u8 = 8;
const SW1: u8 = 10;
const SW2: u8 = 12;
const SS: u8 = 14;

/// The integer temporaries of [`sin_cos_pair`] (the second also sets up the constants that
/// are not resident).
const SIN_INT_TEMPS: [u8; 2] = [4, 5];

/// The constants of [`sin_cos_pair`] resident in `$m6..=$m15`, and the value each holds.
fn sin_cos_resident() -> [(u8, f32); 10] {
    let [p1, p2, p3] = SIN_NEG_HALF_PI;
    let [s3, s5, s7, s9] = SIN_TAYLOR;
    [
        (6, SIN_TWO_OVER_PI),
        (7, SIN_ROUNDING_SHIFT),
        (8, p1),
        (9, p2),
        (10, p3),
        (11, s9),
        (12, s7),
        (13, s5),
        (14, s3),
        (15, 1.0),
    ]
}

/// The set-up of [`sin_cos_pair`]'s resident constants.
fn sin_cos_setup() -> Vec<Instr> {
    sin_cos_resident()
        .iter()
        .flat_map(|&(r, v)| li_bits(m(r), v.to_bits()))
        .collect()
}

/// The f32v2 sequence of `sin` (`quadrant_offset` 0) or `cos` (1) from `$a0:1` to `$a0:1`;
/// lane by lane it is exactly [`ipu_numerics::unary::sin_cos_device`]: `x 2/pi` plus the
/// rounding shift, whose bits (per lane, integer arithmetic) give the quadrant's two
/// weights; `k`; `r` in three fused steps; the sine and cosine polynomials; the selection and
/// the sign.
fn sin_cos_pair(quadrant_offset: u32) -> Vec<Instr> {
    use FBinOp::*;
    let v2 = FType::F32v2;
    let mut out = Vec::new();
    let bin = |out: &mut Vec<Instr>, o: FBinOp, d: u8, a: u8, b: u8| out.push(fbin(v2, o, d, a, b));
    let un = |out: &mut Vec<Instr>, o: FUnOp, d: u8, a: u8| out.push(fun(v2, o, d, a));
    let [t0, t1] = SIN_INT_TEMPS.map(m);
    // A constant in the scratch pair: moved from its resident register, or set up in `t1`.
    let k = |out: &mut Vec<Instr>, v: f32| {
        let r = match sin_cos_resident()
            .iter()
            .find(|(_, c)| c.to_bits() == v.to_bits())
        {
            Some(&(r, _)) => m(r),
            None => {
                out.extend(li_bits(t1, v.to_bits()));
                t1
            }
        };
        out.push(mov_a(SS, r));
        out.push(mov_a(SS + 1, r));
        SS
    };
    let kr = k(&mut out, SIN_TWO_OVER_PI);
    bin(&mut out, Mul, SK, SX, kr);
    let kr = k(&mut out, SIN_ROUNDING_SHIFT);
    bin(&mut out, Add, SK, SK, kr); // shifted
    for lane in 0..2 {
        out.push(Instr::MovToM {
            d: t0,
            a: a(SK + lane),
        });
        if quadrant_offset != 0 {
            out.push(alu_imm(AluOp::Add, t0, t0, quadrant_offset as i16));
        }
        out.push(alu_imm(AluOp::And, t1, t0, 1));
        out.push(alu_imm(AluOp::Shr, t0, t0, 1));
        out.push(alu_imm(AluOp::And, t0, t0, 1));
        out.push(Instr::MovToA {
            d: a(SW1 + lane),
            a: t1,
        });
        out.push(conv(ConvOp::I32ToF32, SW1 + lane, SW1 + lane));
        out.push(Instr::MovToA {
            d: a(SW2 + lane),
            a: t0,
        });
        out.push(conv(ConvOp::I32ToF32, SW2 + lane, SW2 + lane));
    }
    bin(&mut out, Sub, SK, SK, SS); // k (the scratch still holds the shift)
    un(&mut out, FUnOp::Mov, SR, SX);
    for p in SIN_NEG_HALF_PI {
        let kr = k(&mut out, p);
        bin(&mut out, Mac, SR, SK, kr);
    }
    bin(&mut out, Mul, SZ, SR, SR);
    let [s3, s5, s7, s9] = SIN_TAYLOR;
    let kr = k(&mut out, s9);
    bin(&mut out, Mul, SQ, SZ, kr);
    for c in [s7, s5, s3] {
        let kr = k(&mut out, c);
        bin(&mut out, Add, SQ, SQ, kr);
        bin(&mut out, Mul, SQ, SQ, SZ);
    }
    un(&mut out, FUnOp::Mov, SX, SR);
    bin(&mut out, Mac, SX, SR, SQ); // sin r
    let [c2, c4, c6, c8, c10] = COS_TAYLOR;
    let kr = k(&mut out, c10);
    bin(&mut out, Mul, SQ, SZ, kr);
    for (i, c) in [c8, c6, c4, c2].into_iter().enumerate() {
        let kr = k(&mut out, c);
        bin(&mut out, Add, SQ, SQ, kr);
        if i < 3 {
            bin(&mut out, Mul, SQ, SQ, SZ);
        }
    }
    let one = k(&mut out, 1.0);
    un(&mut out, FUnOp::Mov, SK, one);
    bin(&mut out, Mac, SK, SZ, SQ); // cos r
    bin(&mut out, Sub, SQ, one, SW1);
    bin(&mut out, Mul, SX, SX, SQ);
    bin(&mut out, Mul, SK, SK, SW1);
    bin(&mut out, Add, SX, SX, SK);
    un(&mut out, FUnOp::Mov, SQ, one);
    let kr = k(&mut out, -2.0);
    bin(&mut out, Mac, SQ, SW2, kr); // 1 - 2 w2
    bin(&mut out, Mul, SX, SX, SQ);
    out
}
