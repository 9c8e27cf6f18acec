//! Decoding: the slot at a pc as the memory holds it ([`decode_at`]), and the halves of a slot
//! that only computes decoded once into the operations a worker dispatches on ([`Op`]).

use ipu_isa::{
    APair, AddrMode, AluOp, Class, ConvOp, DataReg, FBinOp, FType, FUnOp, Instr, MReg, Slot,
    SysReg, Width,
};
use ipu_target::Target;

use crate::fault::FaultKind;
use crate::memory::{Decoded, Memory};

use super::trap::{R, trap};

/// Whether a slot only computes: a single main-pipeline or float instruction, or a bundle whose
/// main half is a main-pipeline instruction (see [`Decoded::data`]).
fn slot_is_data(slot: &Slot) -> bool {
    match slot {
        Slot::Single(i) => matches!(i.class(), Class::Main | Class::Float),
        Slot::Bundle(b) => b.main.class() == Class::Main,
    }
}

/// The float half of a slot, decoded once with it: the frequent forms with their registers
/// resolved, so that a worker dispatches once per half.
#[derive(Clone, Copy, Debug)]
pub(crate) enum FloatOp {
    /// The slot has no float half.
    None,
    /// `amp` of phase at most 3; the pairs' first registers (even).
    Amp { d: u8, a: u8, p: u8, phase: u8 },
    /// f32v2 arithmetic; the pairs' first registers (even).
    F32v2 { op: FBinOp, d: u8, x: u8, y: u8 },
    /// f32v2 unary operations (`exp` and the rest); the pairs' first registers (even).
    F32v2Un { op: FUnOp, d: u8, x: u8 },
    /// f16v4 arithmetic; the pairs' first registers (even).
    F16v4 { op: FBinOp, d: u8, x: u8, y: u8 },
    /// f16v4 unary operations; the pairs' first registers (even).
    F16v4Un { op: FUnOp, d: u8, x: u8 },
    /// `f32v2tof16v2` into `d` (masked) from the pair at `x` (even).
    Narrow { d: u8, x: u8 },
    /// `f16v2tof32v2` into the pair at `d` (even) from `x` (masked).
    Widen { d: u8, x: u8 },
    /// Any other: the slot's float instruction through [`Tile::exec_float`](super::Tile::exec_float).
    Other,
}

/// The main-pipeline half of a slot that only computes, decoded once with it (see
/// [`FloatOp`]).
#[derive(Clone, Copy, Debug)]
pub(crate) enum MainOp {
    /// The slot has no main half.
    None,
    /// A 64-bit load into the pair from `d` (even) at `$m[base] + off`, then `$m[base] += inc`.
    Ld64 { d: u8, base: u8, off: i16, inc: i16 },
    /// A 64-bit store of the pair from `s` (even), addressed as [`MainOp::Ld64`].
    St64 { s: u8, base: u8, off: i16, inc: i16 },
    /// `ldst64pace`.
    LdSt64Pace { d: APair, s: APair, p: [MReg; 2] },
    /// `ld2xst64pace`.
    Ld2xSt64Pace {
        d: [APair; 2],
        s: APair,
        p: [MReg; 3],
    },
    /// `ld2x64pace`.
    Ld2x64Pace { d: [APair; 2], p: [MReg; 2] },
    /// Register-register integer arithmetic (registers masked).
    Alu { op: AluOp, d: u8, a: u8, b: u8 },
    /// Register-immediate integer arithmetic (registers masked, immediate sign-extended).
    AluImm { op: AluOp, d: u8, a: u8, imm: i16 },
    /// A 32-bit load into `$m{d}` (or `$a{d}` with `to_a`), addressed as [`MainOp::Ld64`].
    Ld32 {
        to_a: bool,
        d: u8,
        base: u8,
        off: i16,
        inc: i16,
    },
    /// `setzi` (register masked).
    Setzi { d: u8, imm: u32 },
    /// `mov $aD, $mA` (registers masked).
    MovToA { d: u8, a: u8 },
    /// `get` (register masked).
    Get { d: u8, sys: SysReg },
    /// `nop`.
    Nop,
    /// Any other: the slot's main instruction through [`Tile::exec_data`](super::Tile::exec_data).
    Other,
}

/// A slot as a worker runs it, decoded once: what the interpreter loop copies per slot.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Op {
    /// The main half (when `data`).
    pub main: MainOp,
    /// The float half (when `data`).
    pub float: FloatOp,
    /// Whether the slot only computes (see [`slot_is_data`]).
    pub data: bool,
    /// 4 or 8.
    pub bytes: u8,
    /// Barrel slots.
    pub cost: u8,
    /// Instructions: 2 for a bundle.
    pub instrs: u8,
}

/// The base-plus-offset and post-increment parts of an address mode.
fn offset_and_increment(mode: AddrMode) -> (i16, i16) {
    match mode {
        AddrMode::Offset(i) => (i, 0),
        AddrMode::PostInc(i) => (0, i),
    }
}

/// The float half of a slot, decoded.
pub(super) fn float_op(i: &Instr) -> FloatOp {
    match *i {
        Instr::Amp { d, a, p, phase } if phase <= 3 => FloatOp::Amp {
            d: d.0 & 14,
            a: a.0 & 14,
            p: p.0 & 14,
            phase,
        },
        Instr::FBin {
            ty: FType::F32v2,
            op,
            d,
            a,
            b,
        } => FloatOp::F32v2 {
            op,
            d: d & 14,
            x: a & 14,
            y: b & 14,
        },
        Instr::FBin {
            ty: FType::F16v4,
            op,
            d,
            a,
            b,
        } => FloatOp::F16v4 {
            op,
            d: d & 14,
            x: a & 14,
            y: b & 14,
        },
        Instr::FUn {
            ty: FType::F32v2,
            op,
            d,
            a,
        } => FloatOp::F32v2Un {
            op,
            d: d & 14,
            x: a & 14,
        },
        Instr::FUn {
            ty: FType::F16v4,
            op,
            d,
            a,
        } => FloatOp::F16v4Un {
            op,
            d: d & 14,
            x: a & 14,
        },
        Instr::Conv {
            op: ConvOp::F32v2ToF16v2,
            d,
            a,
        } => FloatOp::Narrow {
            d: d & 15,
            x: a & 14,
        },
        Instr::Conv {
            op: ConvOp::F16v2ToF32v2,
            d,
            a,
        } => FloatOp::Widen {
            d: d & 14,
            x: a & 15,
        },
        _ => FloatOp::Other,
    }
}

/// The main half of a slot that only computes, decoded.
fn main_op(i: &Instr) -> MainOp {
    match *i {
        Instr::Load {
            width: Width::B64,
            d: DataReg::A(x),
            base,
            mode,
        } if x.is_multiple_of(2) && x < 16 => {
            let (off, inc) = offset_and_increment(mode);
            MainOp::Ld64 {
                d: x,
                base: base.0 & 15,
                off,
                inc,
            }
        }
        Instr::Store {
            width: Width::B64,
            s: DataReg::A(x),
            base,
            mode,
        } if x.is_multiple_of(2) && x < 16 => {
            let (off, inc) = offset_and_increment(mode);
            MainOp::St64 {
                s: x,
                base: base.0 & 15,
                off,
                inc,
            }
        }
        Instr::Load {
            width: Width::B32,
            d,
            base,
            mode,
        } => {
            let (off, inc) = offset_and_increment(mode);
            let (to_a, d) = match d {
                DataReg::M(x) => (false, x.0 & 15),
                DataReg::A(x) => (true, x & 15),
            };
            MainOp::Ld32 {
                to_a,
                d,
                base: base.0 & 15,
                off,
                inc,
            }
        }
        Instr::Setzi { d, imm } => MainOp::Setzi { d: d.0 & 15, imm },
        Instr::MovToA { d, a } => MainOp::MovToA {
            d: d.0 & 15,
            a: a.0 & 15,
        },
        Instr::Get { d, sys } => MainOp::Get { d: d.0 & 15, sys },
        Instr::Nop => MainOp::Nop,
        Instr::LdSt64Pace { d, s, p } => MainOp::LdSt64Pace { d, s, p },
        Instr::Ld2xSt64Pace { d, s, p } => MainOp::Ld2xSt64Pace { d, s, p },
        Instr::Ld2x64Pace { d, p } => MainOp::Ld2x64Pace { d, p },
        Instr::Alu { op, d, a, b } => MainOp::Alu {
            op,
            d: d.0 & 15,
            a: a.0 & 15,
            b: b.0 & 15,
        },
        Instr::AluImm { op, d, a, imm } => MainOp::AluImm {
            op,
            d: d.0 & 15,
            a: a.0 & 15,
            imm,
        },
        _ => MainOp::Other,
    }
}

/// The decoded halves of a slot (meaningful when it only computes, see [`slot_is_data`]).
pub(crate) fn slot_ops(slot: &Slot) -> (MainOp, FloatOp) {
    match slot {
        Slot::Single(i) if i.class() == Class::Float => (MainOp::None, float_op(i)),
        Slot::Single(i) => (main_op(i), FloatOp::None),
        Slot::Bundle(b) => (main_op(&b.main), float_op(&b.float)),
    }
}

/// The float instruction of a slot (the single instruction, or a bundle's float half).
pub(super) fn float_instr(slot: &Slot) -> &Instr {
    match slot {
        Slot::Single(i) => i,
        Slot::Bundle(b) => &b.float,
    }
}

/// The main instruction of a slot (the single instruction, or a bundle's main half).
pub(super) fn main_instr(slot: &Slot) -> &Instr {
    match slot {
        Slot::Single(i) => i,
        Slot::Bundle(b) => &b.main,
    }
}

/// Instructions in a slot: 2 for a bundle.
#[inline(always)]
pub(super) fn instructions_of(slot: &Slot) -> u64 {
    if matches!(slot, Slot::Bundle(_)) {
        2
    } else {
        1
    }
}

/// The text of a slot, for faults.
pub(crate) fn slot_text(slot: &Slot) -> String {
    ipu_isa::format_slot(slot)
}

/// The slot at `pc` as the memory holds it now (a fetch's decoding, without its cache).
pub(super) fn decode_at(target: &Target, mem: &Memory, pc: u32) -> R<Decoded> {
    if pc & 3 != 0 || !target.in_executable(pc, 4) {
        return Err(trap(FaultKind::FetchNotExecutable, Some(pc)));
    }
    let w0 = mem.word(pc);
    let two = target.in_executable(pc, 8);
    let words = [w0, if two { mem.word(pc + 4) } else { 0 }];
    let (slot, n) = ipu_isa::decode_slot(&words[..if two { 2 } else { 1 }])
        .map_err(|e| trap(FaultKind::InvalidEncoding(e.to_string()), Some(pc)))?;
    if n == 2 && pc & 7 != 0 {
        return Err(trap(
            FaultKind::InvalidEncoding("a bundle at an address that is not 8-byte aligned".into()),
            Some(pc),
        ));
    }
    let cost = match &slot {
        Slot::Single(Instr::FUn { op, .. }) => op.slots(),
        Slot::Bundle(b) => match b.float {
            Instr::FUn { op, .. } => op.slots(),
            _ => 1,
        },
        _ => 1,
    };
    let (main, float) = slot_ops(&slot);
    let op = Op {
        main,
        float,
        data: slot_is_data(&slot),
        bytes: 4 * n as u8,
        cost: cost as u8,
        instrs: instructions_of(&slot) as u8,
    };
    Ok(Decoded {
        op,
        slot,
        bytes: 4 * n as u32,
        cost,
    })
}

/// Where `Tile::exec_data_slot` finds the instructions of the halves without a decoded form.
#[derive(Clone, Copy)]
pub(super) enum SlotAt<'a> {
    /// In the caller's copy.
    Here(&'a Slot),
    /// In the code cache at this pc (the interpreter loop copies only the `Op`).
    Cached(u32),
}
