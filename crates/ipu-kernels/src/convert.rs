//! Element-at-a-time kernels for the dtypes the vector units do not handle: conversions
//! between any two element formats ([`Kernel::Convert`](crate::Kernel::Convert)) and integer
//! arithmetic ([`Kernel::IntBinary`](crate::Kernel::IntBinary)).
//!
//! Both walk groups of four elements (a layout piece is a multiple of four, so a group of
//! one-byte elements is one word and there is never a sub-word store): each element is loaded
//! on its own (`ldz8`, `ldz16`, `ld32`), converted in registers, and packed into the output
//! words.
//!
//! A conversion goes through f32, which holds every value of every format exactly. Decoding a
//! one-byte format reads a 256-entry f32 table; encoding a one-byte float format (FP8 of any
//! kind, FP4, E8M0) searches the interval starts of an [`ipu_numerics::EncodeTable`] built
//! from the host's own encoder, so device and host agree by construction. The tables follow
//! the kernel's code in executable memory, where workers read them with ordinary loads.
//! Integers truncate toward zero (`f32toi32` rounds to nearest, so the result is corrected by
//! one where it moved away from zero), then wrap to the width (8 and 16 bits) or become 0
//! out of range (2 and 4 bits), as [`ipu_numerics::IntFormat::from_f32`] defines.

use ipu_isa::{AddrMode, AluOp, ConvOp, DataReg, FBinOp, FType, FUnOp, Instr, Width};
use ipu_numerics::{ByteType, EncodeTable, IntFormat, Overflow};

use crate::code::*;
use crate::state::{BinaryState, CastState};
use crate::types::BinOp;

/// Element formats of [`Kernel::Convert`](crate::Kernel::Convert).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ConvType {
    /// f32.
    F32,
    /// f16.
    F16,
    /// bfloat16.
    Bf16,
    /// A 16-bit integer.
    Int16 {
        /// Two's complement.
        signed: bool,
    },
    /// A 32-bit integer (exact through f32 up to `2^24` in magnitude, the values the graph
    /// admits).
    Int32 {
        /// Two's complement.
        signed: bool,
    },
    /// One byte per element.
    Byte(ByteType),
}

impl ConvType {
    /// Bytes per element.
    pub fn bytes(self) -> u32 {
        match self {
            ConvType::F32 | ConvType::Int32 { .. } => 4,
            ConvType::F16 | ConvType::Bf16 | ConvType::Int16 { .. } => 2,
            ConvType::Byte(_) => 1,
        }
    }
}

/// The encoder's table of a float byte format.
fn encode_table(byte: ByteType, overflow: Overflow) -> Option<EncodeTable> {
    let order = |v: f32| {
        if v.is_nan() {
            f64::MAX
        } else {
            f64::from(v.abs())
        }
    };
    match byte {
        ByteType::Fp8(f, s) => Some(EncodeTable::build(
            |x| ipu_numerics::encode(f, x, i32::from(s), overflow),
            |c| order(ipu_numerics::decode(f, c, i32::from(s))),
        )),
        ByteType::F4E2M1 => Some(EncodeTable::build(ipu_numerics::fp4_code, |c| {
            order(ipu_numerics::fp4_value(c))
        })),
        ByteType::E8M0 => Some(EncodeTable::build(ipu_numerics::e8m0_code, |c| {
            order(ipu_numerics::e8m0_value(c))
        })),
        _ => None,
    }
}

pub(crate) fn load(width: Width, d: DataReg, base: ipu_isa::MReg, off: i16) -> Instr {
    Instr::Load {
        width,
        d,
        base,
        mode: AddrMode::Offset(off),
    }
}

fn int_format(bits: u32, signed: bool) -> IntFormat {
    IntFormat { bits, signed }
}

// Registers of the conversion kernel.
pub(crate) const IN: u8 = 1;
pub(crate) const OUT: u8 = 2;
pub(crate) const GROUPS: u8 = 3;
pub(crate) const DATA: u8 = 4;
pub(crate) const ACC: u8 = 5;
pub(crate) const R: u8 = 6;
pub(crate) const T0: u8 = 7;
pub(crate) const T1: u8 = 8;
pub(crate) const T2: u8 = 9;
pub(crate) const T3: u8 = 10;
/// `$a` registers: the element as f32, temporaries, and 0.0.
pub(crate) const X: u8 = 0;
pub(crate) const FA: u8 = 1;
pub(crate) const FB: u8 = 2;
pub(crate) const FC: u8 = 3;
pub(crate) const FZERO: u8 = 14;

/// The layout of the data block after the code: the decode table (1 KiB) if the source is a
/// byte format, then the encode table's starts, codes and NaN word if the target is a float
/// byte format.
pub(crate) struct Data {
    pub(crate) decode_at: u32,
    starts_at: u32,
    codes_at: u32,
    nan_at: u32,
    entries: u32,
    pub(crate) words: Vec<u32>,
}

pub(crate) fn data(from: ConvType, to: ConvType, overflow: Overflow) -> Data {
    let mut words = Vec::new();
    if let ConvType::Byte(b) = from {
        words.extend(b.values().iter().map(|v| v.to_bits()));
    }
    let decode_at = 0;
    let starts_at = 4 * words.len() as u32;
    let mut d = Data {
        decode_at,
        starts_at,
        codes_at: starts_at,
        nan_at: starts_at,
        entries: 0,
        words,
    };
    if let ConvType::Byte(b) = to
        && let Some(t) = encode_table(b, overflow)
    {
        let n = t.starts.len() as u32;
        d.entries = n;
        d.codes_at = starts_at + 4 * n;
        d.nan_at = d.codes_at + 4 * n;
        d.words.extend(t.starts.iter().map(|s| s.to_bits()));
        d.words.extend(&t.codes);
        d.words.push(t.nan);
    }
    d
}

/// The conversion of one element, `i` of its group: loads it, leaves the result's bits in
/// `$m{R}` (or, for an f32 result, in `$a{X}`).
fn convert_element(c: &mut Code, from: ConvType, to: ConvType, i: u32, d: &Data) {
    decode(c, from, m(IN), (i * from.bytes()) as i16, d.decode_at);
    encode(c, to, d);
}

/// Loads the element at `off` bytes from `base` and leaves it as f32 in `$a{X}` (a one-byte
/// float format through its decode table at `decode_at` after the code); clobbers `$m{R}`.
pub(crate) fn decode(c: &mut Code, from: ConvType, base: ipu_isa::MReg, off: i16, decode_at: u32) {
    let r = m(R);
    match from {
        ConvType::F32 => {
            c.op(load(Width::B32, DataReg::A(X), base, off));
        }
        ConvType::Int32 { .. } => {
            c.op(load(Width::B32, DataReg::M(r), base, off));
            c.op(mov_a(X, r));
            c.op(conv(ConvOp::I32ToF32, X, X));
        }
        ConvType::F16 => {
            c.op(load(Width::B16, DataReg::M(r), base, off));
            c.op(mov_a(X, r));
            c.op(conv(ConvOp::F16ToF32, X, X));
        }
        ConvType::Bf16 => {
            c.op(load(Width::B16, DataReg::M(r), base, off));
            c.op(alu_imm(AluOp::Shl, r, r, 16));
            c.op(mov_a(X, r));
        }
        ConvType::Int16 { signed } => {
            c.op(load(Width::B16, DataReg::M(r), base, off));
            if signed {
                c.op(alu_imm(AluOp::Shl, r, r, 16));
                c.op(alu_imm(AluOp::Sar, r, r, 16));
            }
            c.op(mov_a(X, r));
            c.op(conv(ConvOp::I32ToF32, X, X));
        }
        ConvType::Byte(_) => {
            c.op(load(Width::B8, DataReg::M(r), base, off));
            c.op(alu_imm(AluOp::Shl, r, r, 2));
            c.op(alu(AluOp::Add, r, r, m(DATA)));
            c.op(load(Width::B32, DataReg::A(X), r, decode_at as i16));
        }
    }
}

/// Encodes the f32 in `$a{X}` as `to`: the result's bits in `$m{R}` (an f32 stays in
/// `$a{X}`); clobbers the temporaries.
pub(crate) fn encode(c: &mut Code, to: ConvType, d: &Data) {
    let (r, t0, t1, t2, t3) = (m(R), m(T0), m(T1), m(T2), m(T3));
    // Encode from $aX.
    let int = |c: &mut Code, f: IntFormat| {
        // Truncation: r = rne(x), corrected by one toward zero where |float(r)| > |x|.
        c.op(conv(ConvOp::F32ToI32, FA, X));
        c.op(Instr::MovToM {
            d: r,
            a: ipu_isa::AReg(FA),
        });
        c.op(conv(ConvOp::I32ToF32, FB, FA));
        c.op(fun(FType::F32, FUnOp::Abs, FB, FB));
        c.op(fun(FType::F32, FUnOp::Abs, FC, X));
        c.op(fbin(FType::F32, FBinOp::CmpLt, FC, FC, FB));
        c.op(Instr::MovToM {
            d: t0,
            a: ipu_isa::AReg(FC),
        });
        c.op(Instr::MovToM {
            d: t1,
            a: ipu_isa::AReg(X),
        });
        c.op(alu_imm(AluOp::Sar, t1, t1, 31));
        c.op(alu_imm(AluOp::Shl, t1, t1, 1));
        c.op(alu_imm(AluOp::Add, t1, t1, 1)); // the sign of x: 1 or -1
        c.op(alu(AluOp::And, t0, t0, t1));
        c.op(alu(AluOp::Sub, r, r, t0));
        if f.bits < 8 {
            // Out of range gives 0.
            c.op(alu_imm(AluOp::CmpLt, t0, r, f.min() as i16));
            c.op(alu_imm(AluOp::CmpLe, t1, r, f.max() as i16));
            c.op(alu(AluOp::Sub, t0, t1, t0));
            c.op(setzi(t1, 0));
            c.op(alu(AluOp::Sub, t0, t1, t0));
            c.op(alu(AluOp::And, r, r, t0));
        }
        if f.bits < 32 {
            let mask = if f.bits > 8 { 0xFFFF } else { 0xFF };
            c.op(setzi(t0, mask));
            c.op(alu(AluOp::And, r, r, t0));
        }
    };
    match to {
        ConvType::F32 => {}
        ConvType::F16 => {
            c.op(conv(ConvOp::F32ToF16, FA, X));
            c.op(Instr::MovToM {
                d: r,
                a: ipu_isa::AReg(FA),
            });
        }
        ConvType::Bf16 => {
            // r = (b + 0x7FFF + ((b >> 16) & 1)) >> 16; a NaN gives its sign | 0x7FC0.
            c.op(Instr::MovToM {
                d: r,
                a: ipu_isa::AReg(X),
            });
            c.op(alu_imm(AluOp::Shr, t0, r, 16));
            c.op(alu_imm(AluOp::And, t0, t0, 1));
            c.op(alu(AluOp::Add, t0, t0, r));
            c.op(alu_imm(AluOp::Add, t0, t0, 0x7FFF));
            c.op(alu_imm(AluOp::Shr, t0, t0, 16));
            c.op(alu_imm(AluOp::Shr, t1, r, 16));
            c.op(setzi(t2, 0x8000));
            c.op(alu(AluOp::And, t1, t1, t2));
            c.op(setzi(t2, 0x7FC0));
            c.op(alu(AluOp::Or, t1, t1, t2)); // the NaN result
            c.op(fbin(FType::F32, FBinOp::CmpEq, FA, X, X));
            c.op(Instr::MovToM {
                d: t2,
                a: ipu_isa::AReg(FA),
            }); // all ones unless NaN
            select(c, r, t0, t1, t2);
        }
        ConvType::Int16 { signed } => int(c, int_format(16, signed)),
        ConvType::Int32 { signed } => int(c, int_format(32, signed)),
        ConvType::Byte(ByteType::Int { bits, signed }) => {
            int(c, int_format(u32::from(bits), signed))
        }
        ConvType::Byte(ByteType::Bool) => {
            c.op(fbin(FType::F32, FBinOp::CmpEq, FA, X, FZERO));
            c.op(Instr::MovToM {
                d: r,
                a: ipu_isa::AReg(FA),
            });
            c.op(alu_imm(AluOp::Add, r, r, 1));
        }
        ConvType::Byte(_) => {
            // Binary search of |x| among the interval starts (NaN entries are never reached):
            // t0 = 4 * index.
            c.op(fun(FType::F32, FUnOp::Abs, FA, X));
            c.op(setzi(t0, 0));
            let mut step = d.entries / 2;
            while step > 0 {
                c.op(alu(AluOp::Add, t1, m(DATA), t0));
                c.op(load(
                    Width::B32,
                    DataReg::A(FB),
                    t1,
                    (d.starts_at + 4 * step) as i16,
                ));
                c.op(fbin(FType::F32, FBinOp::CmpLe, FB, FB, FA));
                c.op(Instr::MovToM {
                    d: t2,
                    a: ipu_isa::AReg(FB),
                });
                c.op(alu_imm(AluOp::And, t2, t2, (4 * step) as i16));
                c.op(alu(AluOp::Add, t0, t0, t2));
                step /= 2;
            }
            // The code for x's sign: byte 0 of the entry, or byte 1 if negative.
            c.op(Instr::MovToM {
                d: t3,
                a: ipu_isa::AReg(X),
            });
            c.op(alu_imm(AluOp::Shr, t3, t3, 31));
            c.op(alu_imm(AluOp::Shl, t3, t3, 3));
            c.op(alu(AluOp::Add, t1, m(DATA), t0));
            c.op(ld32m(t0, t1, d.codes_at as i16));
            c.op(alu(AluOp::Shr, t0, t0, t3));
            c.op(ld32m(t1, m(DATA), d.nan_at as i16));
            c.op(alu(AluOp::Shr, t1, t1, t3));
            c.op(fbin(FType::F32, FBinOp::CmpEq, FB, X, X));
            c.op(Instr::MovToM {
                d: t2,
                a: ipu_isa::AReg(FB),
            });
            select(c, r, t0, t1, t2);
            c.op(setzi(t0, 0xFF));
            c.op(alu(AluOp::And, r, r, t0));
        }
    }
}

/// `d = mask ? a : b` (mask all ones or zero); clobbers `a`.
pub(crate) fn select(
    c: &mut Code,
    d: ipu_isa::MReg,
    a: ipu_isa::MReg,
    b: ipu_isa::MReg,
    mask: ipu_isa::MReg,
) {
    c.op(alu(AluOp::Xor, a, a, b));
    c.op(alu(AluOp::And, a, a, mask));
    c.op(alu(AluOp::Xor, d, a, b));
}

/// Issue slots of the conversion of one element (the generator's own count). Building the
/// tables takes thousands of encodings, and the planner and lowering ask for every launch, so
/// each conversion's count is computed once per process.
fn element_slots(from: ConvType, to: ConvType, overflow: Overflow) -> u32 {
    use std::collections::HashMap;
    use std::sync::{Mutex, OnceLock};
    type Key = (ConvType, ConvType, Overflow);
    static SLOTS: OnceLock<Mutex<HashMap<Key, u32>>> = OnceLock::new();
    let slots = SLOTS.get_or_init(Default::default);
    let key = (from, to, overflow);
    if let Some(&n) = slots.lock().expect("not poisoned").get(&key) {
        return n;
    }
    let mut c = Code::new();
    let d = data(from, to, overflow);
    convert_element(&mut c, from, to, 0, &d);
    let n = c.len() as u32;
    slots.lock().expect("not poisoned").insert(key, n);
    n
}

/// The start of a loop over `$mGROUPS` groups (none: straight to `end`), with the data after
/// the code at `$mDATA` and 0.0 in `$aFZERO`; returns the labels of the data, the exit and the
/// loop's head, bound here.
pub(crate) fn groups_loop(c: &mut Code) -> (Label, Label, Label) {
    let table = c.label();
    let end = c.label();
    let group = c.label();
    loop_counts(c, &[m(GROUPS)], end);
    c.setzi_label(m(DATA), table);
    c.op(setzi(m(T0), 0));
    c.op(mov_a(FZERO, m(T0)));
    c.bind(group);
    (table, end, group)
}

/// The conversion kernel: state in, out, groups of 4 ([`CastState`]).
pub(crate) fn convert(c: &mut Code, from: ConvType, to: ConvType, overflow: Overflow) {
    load_state(c, CastState::WORDS); // m1 in, m2 out, m3 groups
    let d = data(from, to, overflow);
    let (table, end, group) = groups_loop(c);
    c.op(setzi(m(ACC), 0));
    for i in 0..4 {
        convert_element(c, from, to, i, &d);
        if to == ConvType::F32 {
            c.op(st32_a(X, m(OUT), (4 * i) as i16));
        } else {
            pack(c, to, i);
        }
    }
    c.op(alu_imm(AluOp::Add, m(IN), m(IN), (4 * from.bytes()) as i16));
    c.op(alu_imm(AluOp::Add, m(OUT), m(OUT), (4 * to.bytes()) as i16));
    close_rows_and_exit(c, m(GROUPS), group, end);
    c.bind(table);
    c.words(&d.words);
}

/// Packs element `i` of a group (its bits in `$mR`) into the output word being built in
/// `$mACC`, storing the word when it is full.
pub(crate) fn pack(c: &mut Code, to: ConvType, i: u32) {
    let per_word = 4 / to.bytes().min(4);
    let lane = i % per_word;
    if lane > 0 {
        c.op(alu_imm(
            AluOp::Shl,
            m(R),
            m(R),
            (lane * 8 * to.bytes()) as i16,
        ));
    }
    c.op(alu(AluOp::Or, m(ACC), m(ACC), m(R)));
    if lane == per_word - 1 {
        c.op(st32m(m(ACC), m(OUT), (4 * (i / per_word)) as i16));
        c.op(setzi(m(ACC), 0));
    }
}

/// Issue slots of [`convert`] over `groups` groups of 4 on one worker.
pub fn convert_slots(from: ConvType, to: ConvType, overflow: Overflow, groups: u32) -> u32 {
    let state = CastState::WORDS as u32;
    if groups == 0 {
        return state + 2;
    }
    let per_word = 4 / to.bytes().min(4);
    let pack = if to == ConvType::F32 {
        4
    } else {
        // shifts (not lane 0), ors, and a store and a reset per word
        (4 - 4 / per_word) + 4 + 2 * (4 / per_word)
    };
    // state, the zero check and decrement, setzi of the table, the 0.0 constant, then per
    // group: the reset, the elements, packing, two pointer steps and the loop branch; exit.
    state + 2 + 3 + groups * (1 + 4 * element_slots(from, to, overflow) + pack + 3) + 1
}

// Registers of the integer kernel.
const XA: u8 = 1;
const YB: u8 = 2;
const OUTP: u8 = 3;
const COUNT: u8 = 4;

/// Elementwise integer arithmetic on groups of 4 elements of `bits` bits (one byte each below
/// 16): `out = wrap(x OP y)`, division truncating toward zero. State: [`BinaryState`] with
/// `vectors` the number of groups of 4.
pub(crate) fn int_binary(c: &mut Code, op: BinOp, bits: u8, signed: bool) {
    load_state(c, BinaryState::WORDS); // m1 a, m2 b, m3 out, m4 groups
    let end = c.label();
    let group = c.label();
    loop_counts(c, &[m(COUNT)], end);
    c.bind(group);
    let eb = if bits > 8 { 2u32 } else { 1 };
    let width = if eb == 2 { Width::B16 } else { Width::B8 };
    let per_word = 4 / eb;
    let (acc, x, y) = (m(5), m(6), m(7));
    c.op(setzi(acc, 0));
    for i in 0..4u32 {
        let off = (i * eb) as i16;
        c.op(load(width, DataReg::M(x), m(XA), off));
        c.op(load(width, DataReg::M(y), m(YB), off));
        if signed {
            let sh = 32 - 8 * eb as i16;
            for v in [x, y] {
                c.op(alu_imm(AluOp::Shl, v, v, sh));
                c.op(alu_imm(AluOp::Sar, v, v, sh));
            }
        }
        match op {
            BinOp::Add => {
                c.op(alu(AluOp::Add, x, x, y));
            }
            BinOp::Sub => {
                c.op(alu(AluOp::Sub, x, x, y));
            }
            BinOp::Mul => {
                c.op(alu(AluOp::Mul, x, x, y));
            }
            BinOp::Max => {
                c.op(alu(AluOp::Max, x, x, y));
            }
            BinOp::Div => divide(c, u32::from(bits)),
        }
        // Wrap to the width.
        let sh = 32 - i16::from(bits);
        c.op(alu_imm(AluOp::Shl, x, x, sh));
        c.op(alu_imm(
            if signed { AluOp::Sar } else { AluOp::Shr },
            x,
            x,
            sh,
        ));
        c.op(setzi(y, if eb == 2 { 0xFFFF } else { 0xFF }));
        c.op(alu(AluOp::And, x, x, y));
        let lane = i % per_word;
        if lane > 0 {
            c.op(alu_imm(AluOp::Shl, x, x, (lane * 8 * eb) as i16));
        }
        c.op(alu(AluOp::Or, acc, acc, x));
        if lane == per_word - 1 {
            c.op(st32m(acc, m(OUTP), (4 * (i / per_word)) as i16));
            c.op(setzi(acc, 0));
        }
    }
    for p in [XA, YB, OUTP] {
        c.op(alu_imm(AluOp::Add, m(p), m(p), (4 * eb) as i16));
    }
    close_rows_and_exit(c, m(COUNT), group, end);
}

/// `$m6 = $m6 / $m7`, both sign-extended, truncating: the magnitudes divided by `bits` steps
/// of shift and subtract (a zero divisor gives all ones), then the sign applied.
fn divide(c: &mut Code, bits: u32) {
    let (x, y) = (m(6), m(7));
    let (sx, sy, q, r, t, u) = (m(8), m(9), m(10), m(11), m(12), m(13));
    c.op(alu_imm(AluOp::Sar, sx, x, 31));
    c.op(alu_imm(AluOp::Sar, sy, y, 31));
    c.op(alu(AluOp::Xor, x, x, sx));
    c.op(alu(AluOp::Sub, x, x, sx));
    c.op(alu(AluOp::Xor, y, y, sy));
    c.op(alu(AluOp::Sub, y, y, sy));
    c.op(setzi(q, 0));
    c.op(setzi(r, 0));
    for bit in (0..bits).rev() {
        c.op(alu_imm(AluOp::Shr, t, x, bit as i16));
        c.op(alu_imm(AluOp::And, t, t, 1));
        c.op(alu_imm(AluOp::Shl, r, r, 1));
        c.op(alu(AluOp::Or, r, r, t));
        c.op(alu(AluOp::CmpUlt, t, r, y));
        c.op(alu_imm(AluOp::Sub, t, t, 1)); // all ones if r >= y
        c.op(alu(AluOp::And, u, y, t));
        c.op(alu(AluOp::Sub, r, r, u));
        c.op(alu_imm(AluOp::And, t, t, 1));
        c.op(alu_imm(AluOp::Shl, q, q, 1));
        c.op(alu(AluOp::Or, q, q, t));
    }
    c.op(alu(AluOp::Xor, sx, sx, sy));
    c.op(alu(AluOp::Xor, q, q, sx));
    c.op(alu(AluOp::Sub, x, q, sx));
}

/// Issue slots of [`int_binary`] over `groups` groups of 4 on one worker.
pub fn int_binary_slots(op: BinOp, bits: u8, signed: bool, groups: u32) -> u32 {
    let state = BinaryState::WORDS as u32;
    if groups == 0 {
        return state + 2;
    }
    let eb = if bits > 8 { 2 } else { 1 };
    let per_word = 4 / eb;
    let arith = match op {
        BinOp::Div => 8 + 11 * u32::from(bits) + 3,
        _ => 1,
    };
    let element = 2 + if signed { 4 } else { 0 } + arith + 4 + 1;
    let shifts = 4 - 4 / per_word;
    let stores = 2 * (4 / per_word);
    state + 2 + groups * (1 + 4 * element + shifts + stores + 3 + 1) + 1
}
