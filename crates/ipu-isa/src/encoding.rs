//! The binary encoding: one 32-bit little-endian word per instruction, two for a co-issued
//! bundle. `docs/isa.md` documents every layout; this module is its implementation.
//!
//! Word layout: bit 31 is the bundle-first flag, bits 30..24 the opcode, bits 23..0 the operands.
//! Register fields are 4 bits wide at fixed positions `R1` = 23..20, `R2` = 19..16,
//! `R3` = 15..12, `R4` = 11..8, `R5` = 7..4, `R6` = 3..0; sub-operations (ALU operation, float
//! operation, conversion) sit in bits 3..0 where `R6` is unused. Every bit an instruction does
//! not use is reserved and must be zero: decoding rejects a word with a reserved bit set, an
//! undefined opcode or sub-operation, or a misaligned register pair or quad, so every word
//! either decodes to exactly one instruction that encodes back to it, or is an error.

use crate::instr::*;

/// The bundle-first flag: set on the first (main-pipeline) word of a co-issued pair.
pub const BUNDLE_FLAG: u32 = 1 << 31;
/// Bits of a word that hold the opcode (30..24).
pub const OPCODE_MASK: u32 = 0x7F << OPCODE_SHIFT;
/// Position of the opcode field.
pub const OPCODE_SHIFT: u32 = 24;
/// Bits of a word that hold the operands (23..0).
pub const OPERAND_MASK: u32 = 0x00FF_FFFF;
/// Bytes per instruction word.
pub const WORD_BYTES: u32 = 4;
/// Bytes per co-issued bundle; bundles are aligned to this in memory.
pub const BUNDLE_BYTES: u32 = 8;
/// Largest `setzi` immediate plus one (a 20-bit field).
pub const SETZI_LIMIT: u32 = 1 << 20;
/// Largest branch target plus one (a 20-bit byte-address field; tile memory ends at 0xE8000).
pub const TARGET_LIMIT: u32 = 1 << 20;
/// Largest `rpt` body, in issue slots (an 8-bit field; 0 is not a valid body).
pub const RPT_BODY_MAX: u8 = 255;
/// Smallest `setfp8` scale (a 6-bit two's complement field).
pub const FP8_SCALE_MIN: i8 = -32;
/// Largest `setfp8` scale.
pub const FP8_SCALE_MAX: i8 = 31;
/// Number of AMP phases per row.
pub const AMP_PHASES: u8 = 4;

/// Opcodes (bits 30..24). Ranges: 0x10..=0x1F `OPi` (ALU operation in the low 4 opcode bits),
/// 0x20..=0x2F loads, 0x30..=0x3F stores (form in bits 3..1, post-increment in bit 0),
/// 0x50..=0x53 / 0x54..=0x57 float binary / unary (type in the low 2 opcode bits).
pub mod opcode {
    /// `nop`
    pub const NOP: u32 = 0x00;
    /// `OP $mD, $mA, $mB`
    pub const ALU: u32 = 0x01;
    /// `setzi`
    pub const SETZI: u32 = 0x02;
    /// `orhi`
    pub const ORHI: u32 = 0x03;
    /// `get`
    pub const GET: u32 = 0x04;
    /// `mov $aD, $mA`
    pub const MOV_TO_A: u32 = 0x05;
    /// `mov $mD, $aA`
    pub const MOV_TO_M: u32 = 0x06;
    /// `setfp8`
    pub const SETFP8: u32 = 0x07;
    /// `ld2x64pace`
    pub const LD2X64PACE: u32 = 0x08;
    /// `ldst64pace`
    pub const LDST64PACE: u32 = 0x09;
    /// `ld2xst64pace`
    pub const LD2XST64PACE: u32 = 0x0A;
    /// `OP $mD, $mA, imm`: 0x10 + ALU operation index.
    pub const ALU_IMM: u32 = 0x10;
    /// Loads: 0x20 + form * 2 + post-increment.
    pub const LOAD: u32 = 0x20;
    /// Stores: 0x30 + form * 2 + post-increment.
    pub const STORE: u32 = 0x30;
    /// `br`
    pub const BR: u32 = 0x40;
    /// `bri`
    pub const BRI: u32 = 0x41;
    /// `brz`
    pub const BRZ: u32 = 0x42;
    /// `brnz`
    pub const BRNZ: u32 = 0x43;
    /// `brnzdec`
    pub const BRNZDEC: u32 = 0x44;
    /// `call`
    pub const CALL: u32 = 0x45;
    /// `rpt $mA, N`
    pub const RPT: u32 = 0x46;
    /// `rpt IMM, N`
    pub const RPTI: u32 = 0x47;
    /// Float binary: 0x50 + type index.
    pub const FBIN: u32 = 0x50;
    /// Float unary: 0x54 + type index.
    pub const FUN: u32 = 0x54;
    /// `f32v2sum` / `f32v2max` (reduction)
    pub const FREDUCE_F32V2: u32 = 0x58;
    /// `f16v4sum` / `f16v4max` (reduction)
    pub const FREDUCE_F16V4: u32 = 0x59;
    /// Conversions.
    pub const CONV: u32 = 0x5A;
    /// `f32v2bcast`
    pub const BCAST_F32V2: u32 = 0x5B;
    /// `f16v4bcast`
    pub const BCAST_F16V4: u32 = 0x5C;
    /// `f16v2pack`
    pub const F16V2PACK: u32 = 0x5D;
    /// `f16v2packhi`.
    pub const F16V2PACKHI: u32 = 0x5F;
    /// `amp`
    pub const AMP: u32 = 0x5E;
    /// `run`
    pub const RUN: u32 = 0x60;
    /// `waitw`
    pub const WAITW: u32 = 0x61;
    /// `sync`
    pub const SYNC: u32 = 0x62;
    /// `exch`
    pub const EXCH: u32 = 0x63;
    /// `hostx`
    pub const HOSTX: u32 = 0x64;
    /// `mark`
    pub const MARK: u32 = 0x65;
    /// `ampcfg`
    pub const AMPCFG: u32 = 0x66;
    /// `ampw`
    pub const AMPW: u32 = 0x67;
    /// `halt`
    pub const HALT: u32 = 0x68;
    /// `runall`
    pub const RUNALL: u32 = 0x69;
    /// `exit`
    pub const EXIT: u32 = 0x70;
}

/// Why an instruction cannot be encoded (it is not a valid instruction).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EncodeError {
    /// A register index is out of range (16 registers per file).
    #[error("{field}: register index {index} is out of range (0..=15)")]
    RegisterOutOfRange {
        /// The operand.
        field: &'static str,
        /// The index given.
        index: u8,
    },
    /// A pair or quad register index is not aligned.
    #[error(
        "{field}: register {index} is not aligned to {align} (a {what} starts at a multiple of {align})"
    )]
    MisalignedRegister {
        /// The operand.
        field: &'static str,
        /// The index given.
        index: u8,
        /// The required alignment (2 or 4).
        align: u8,
        /// "pair" or "quad".
        what: &'static str,
    },
    /// An immediate is outside its field.
    #[error("{field}: value {value} is out of range {min}..={max}")]
    ImmediateOutOfRange {
        /// The operand.
        field: &'static str,
        /// The value given.
        value: i64,
        /// Smallest allowed value.
        min: i64,
        /// Largest allowed value.
        max: i64,
    },
    /// A branch target is not 4-byte aligned.
    #[error("branch target {target:#x} is not 4-byte aligned")]
    MisalignedTarget {
        /// The target given.
        target: u32,
    },
    /// A load or store width does not match its data register kind.
    #[error("{0}")]
    WidthRegisterMismatch(&'static str),
    /// An operand type this instruction does not have.
    #[error("{instr} has no {ty} form")]
    UnsupportedType {
        /// The instruction.
        instr: &'static str,
        /// The type given.
        ty: &'static str,
    },
    /// The first half of a bundle is not a main-pipeline instruction of class `Main`.
    #[error(
        "the first instruction of a bundle must be a main-pipeline instruction without control flow"
    )]
    BundleMainNotMain,
    /// The second half of a bundle is not a float-pipeline instruction.
    #[error("the second instruction of a bundle must be a float-pipeline instruction")]
    BundleFloatNotFloat,
}

/// Why a word (or a word pair) does not decode.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// The opcode (or a sub-operation field) is not defined.
    #[error("word {word:#010x}: undefined {field} {value:#x}")]
    Undefined {
        /// The word.
        word: u32,
        /// Which field ("opcode", "ALU operation", ..).
        field: &'static str,
        /// Its value.
        value: u32,
    },
    /// Reserved bits are set.
    #[error("word {word:#010x}: reserved bits {bits:#010x} are set")]
    ReservedBits {
        /// The word.
        word: u32,
        /// The reserved bits that are set.
        bits: u32,
    },
    /// A field holds a value that is not a valid instruction (misaligned pair, out-of-range
    /// immediate, misaligned target).
    #[error("word {word:#010x}: {reason}")]
    InvalidField {
        /// The word.
        word: u32,
        /// What is wrong.
        reason: EncodeError,
    },
    /// The bundle-first flag is set on an instruction that cannot start a bundle.
    #[error("word {word:#010x}: bundle flag set on an instruction that cannot start a bundle")]
    BundleFlagNotMain {
        /// The word.
        word: u32,
    },
    /// A bundle's second word is missing.
    #[error("bundle first word {word:#010x} is not followed by a second word")]
    BundleTruncated {
        /// The first word.
        word: u32,
    },
    /// A bundle's second word is not a float-pipeline instruction (or has the bundle flag).
    #[error(
        "bundle second word {word:#010x} is not a float-pipeline instruction without the bundle flag"
    )]
    BundleSecondNotFloat {
        /// The second word.
        word: u32,
    },
    /// No words at all.
    #[error("no instruction words to decode")]
    Empty,
}

// ---- field helpers --------------------------------------------------------------------------

const R1: u32 = 20;
const R2: u32 = 16;
const R3: u32 = 12;
const R4: u32 = 8;
const R5: u32 = 4;
const R6: u32 = 0;

fn check_reg(field: &'static str, index: u8, align: u8) -> Result<u32, EncodeError> {
    if index >= REGISTERS_PER_FILE {
        return Err(EncodeError::RegisterOutOfRange { field, index });
    }
    if !index.is_multiple_of(align) {
        return Err(EncodeError::MisalignedRegister {
            field,
            index,
            align,
            what: if align == 2 { "pair" } else { "quad" },
        });
    }
    Ok(index as u32)
}

fn m(field: &'static str, r: MReg) -> Result<u32, EncodeError> {
    check_reg(field, r.0, 1)
}
fn a1(field: &'static str, r: AReg) -> Result<u32, EncodeError> {
    check_reg(field, r.0, 1)
}
fn a2(field: &'static str, r: APair) -> Result<u32, EncodeError> {
    check_reg(field, r.0, 2)
}
fn aty(field: &'static str, index: u8, pair: bool) -> Result<u32, EncodeError> {
    check_reg(field, index, if pair { 2 } else { 1 })
}

/// A paced form's word: its pairs (with their field names) in `R1`, `R2`, .., then its
/// pointers `p0`, `p1`, .. in the fields that follow.
fn paced(
    code: u32,
    pairs: &[(&'static str, APair)],
    pointers: &[MReg],
) -> Result<u32, EncodeError> {
    const FIELDS: [u32; 6] = [R1, R2, R3, R4, R5, R6];
    const POINTERS: [&str; 3] = ["p0", "p1", "p2"];
    debug_assert!(pairs.len() + pointers.len() <= FIELDS.len() && pointers.len() <= 3);
    let registers = pairs
        .iter()
        .map(|&(field, r)| a2(field, r))
        .chain(pointers.iter().zip(POINTERS).map(|(&r, field)| m(field, r)));
    let mut word = op(code);
    for (register, shift) in registers.zip(FIELDS) {
        word |= register? << shift;
    }
    Ok(word)
}

/// The refusal of `value` for `field`, whose range is `min..=max`.
fn out_of_range(field: &'static str, value: i64, (min, max): (i64, i64)) -> EncodeError {
    EncodeError::ImmediateOutOfRange {
        field,
        value,
        min,
        max,
    }
}

fn target_field(target: u32) -> Result<u32, EncodeError> {
    if target >= TARGET_LIMIT {
        return Err(out_of_range(
            "target",
            target as i64,
            (0, (TARGET_LIMIT - 4) as i64),
        ));
    }
    if !target.is_multiple_of(4) {
        return Err(EncodeError::MisalignedTarget { target });
    }
    Ok(target)
}

fn op(code: u32) -> u32 {
    code << OPCODE_SHIFT
}

fn ftype_index(ty: FType) -> u32 {
    match ty {
        FType::F32 => 0,
        FType::F32v2 => 1,
        FType::F16v2 => 2,
        FType::F16v4 => 3,
    }
}

fn amp_mode_index(mode: AmpMode) -> u32 {
    match mode {
        AmpMode::F16F16 => 0,
        AmpMode::F16F32 => 1,
        AmpMode::F32F32 => 2,
        AmpMode::F8F16 => 3,
    }
}

fn sysreg_index(s: SysReg) -> u32 {
    match s {
        SysReg::TileId => 0,
        SysReg::ContextId => 1,
        SysReg::Cycles => 2,
    }
}

/// The load/store form index (bits 3..1 of the opcode) and the register field, after checking
/// that the width and the data register agree.
fn mem_form(width: Width, reg: DataReg, store: bool) -> Result<(u32, u32), EncodeError> {
    use EncodeError::WidthRegisterMismatch as Mis;
    match (width, reg) {
        (Width::B8, DataReg::M(r)) => Ok((0, m("data", r)?)),
        (Width::B16, DataReg::M(r)) => Ok((1, m("data", r)?)),
        (Width::B32, DataReg::M(r)) => Ok((2, m("data", r)?)),
        (Width::B32, DataReg::A(i)) => Ok((3, check_reg("data", i, 1)?)),
        (Width::B64, DataReg::A(i)) => Ok((4, check_reg("data", i, 2)?)),
        (Width::B128, DataReg::A(_)) if store => {
            Err(Mis("there is no 128-bit store (st128 does not exist)"))
        }
        (Width::B128, DataReg::A(i)) => Ok((5, check_reg("data", i, 4)?)),
        (Width::B8 | Width::B16, DataReg::A(_)) => Err(Mis(
            "8- and 16-bit memory accesses use an integer register $m",
        )),
        (Width::B64, DataReg::M(_)) => {
            Err(Mis("64-bit memory accesses use a register pair $aN:N+1"))
        }
        (Width::B128, DataReg::M(_)) => Err(Mis("128-bit loads use a register quad $aN:N+3")),
    }
}

fn addr_mode(mode: AddrMode) -> (u32, u32) {
    match mode {
        AddrMode::Offset(i) => (0, i as u16 as u32),
        AddrMode::PostInc(i) => (1, i as u16 as u32),
    }
}

/// Checks that an instruction is valid: registers in range and aligned, immediates in their
/// fields, width and register consistent.
pub fn validate(instr: &Instr) -> Result<(), EncodeError> {
    encode(instr).map(|_| ())
}

/// Encodes one instruction as a single word (without the bundle flag).
pub fn encode(instr: &Instr) -> Result<u32, EncodeError> {
    use Instr::*;
    use opcode::*;
    Ok(match *instr {
        Nop => op(NOP),
        Alu { op: o, d, a, b } => {
            op(ALU) | m("d", d)? << R1 | m("a", a)? << R2 | m("b", b)? << R3 | alu_index(o)
        }
        AluImm { op: o, d, a, imm } => {
            op(ALU_IMM + alu_index(o)) | m("d", d)? << R1 | m("a", a)? << R2 | imm as u16 as u32
        }
        Setzi { d, imm } => {
            if imm >= SETZI_LIMIT {
                return Err(out_of_range(
                    "setzi immediate",
                    imm as i64,
                    (0, (SETZI_LIMIT - 1) as i64),
                ));
            }
            op(SETZI) | m("d", d)? << R1 | imm
        }
        Orhi { d, imm } => op(ORHI) | m("d", d)? << R1 | imm as u32,
        Get { d, sys } => op(GET) | m("d", d)? << R1 | sysreg_index(sys),
        MovToA { d, a } => op(MOV_TO_A) | a1("d", d)? << R1 | m("a", a)? << R2,
        MovToM { d, a } => op(MOV_TO_M) | m("d", d)? << R1 | a1("a", a)? << R2,
        Load {
            width,
            d: reg,
            base,
            mode,
        }
        | Store {
            width,
            s: reg,
            base,
            mode,
        } => {
            let store = matches!(instr, Store { .. });
            let (form, reg) = mem_form(width, reg, store)?;
            let (post, imm) = addr_mode(mode);
            let first = if store { STORE } else { LOAD };
            op(first + form * 2 + post) | reg << R1 | m("base", base)? << R2 | imm
        }
        Ld2x64Pace { d, p } => paced(LD2X64PACE, &[("d0", d[0]), ("d1", d[1])], &p)?,
        LdSt64Pace { d, s, p } => paced(LDST64PACE, &[("d", d), ("s", s)], &p)?,
        Ld2xSt64Pace { d, s, p } => {
            paced(LD2XST64PACE, &[("d0", d[0]), ("d1", d[1]), ("s", s)], &p)?
        }
        Br { a } => op(BR) | m("a", a)? << R1,
        Bri { target } => op(BRI) | target_field(target)?,
        Brz { a, target } => op(BRZ) | m("a", a)? << R1 | target_field(target)?,
        Brnz { a, target } => op(BRNZ) | m("a", a)? << R1 | target_field(target)?,
        Brnzdec { a, target } => op(BRNZDEC) | m("a", a)? << R1 | target_field(target)?,
        Call { link, target } => op(CALL) | m("link", link)? << R1 | target_field(target)?,
        Rpt { count, body } => op(RPT) | m("count", count)? << R1 | rpt_body(body)?,
        Rpti { count, body } => op(RPTI) | (count as u32) << 8 | rpt_body(body)?,
        SetFp8 { format, scale } => {
            if !(FP8_SCALE_MIN..=FP8_SCALE_MAX).contains(&scale) {
                return Err(out_of_range(
                    "FP8 scale",
                    scale as i64,
                    (FP8_SCALE_MIN as i64, FP8_SCALE_MAX as i64),
                ));
            }
            let f = match format {
                Fp8Format::F143 => 0,
                Fp8Format::F152 => 1,
            };
            op(SETFP8) | f << 8 | (scale as u8 as u32 & 0x3F)
        }
        FBin { ty, op: o, d, a, b } => {
            let p = ty.is_pair();
            op(FBIN + ftype_index(ty))
                | aty("d", d, p)? << R1
                | aty("a", a, p)? << R2
                | aty("b", b, p)? << R3
                | fbin_index(o)
        }
        FUn { ty, op: o, d, a } => {
            let p = ty.is_pair();
            op(FUN + ftype_index(ty)) | aty("d", d, p)? << R1 | aty("a", a, p)? << R2 | fun_index(o)
        }
        FReduce { ty, op: o, d, a } => {
            let code = pair_code(ty, [FREDUCE_F32V2, FREDUCE_F16V4], "a reduction")?;
            let o = match o {
                RedOp::Sum => 0,
                RedOp::Max => 1,
            };
            op(code) | a1("d", d)? << R1 | a2("a", a)? << R2 | o
        }
        Conv { op: o, d, a } => {
            op(CONV)
                | check_reg("d", d, o.dst_regs())? << R1
                | check_reg("a", a, o.src_regs())? << R2
                | conv_index(o)
        }
        Bcast { ty, d, a } => {
            let code = pair_code(ty, [BCAST_F32V2, BCAST_F16V4], "bcast")?;
            op(code) | a2("d", d)? << R1 | a1("a", a)? << R2
        }
        F16v2Pack { d, a, b } => {
            op(F16V2PACK) | a1("d", d)? << R1 | a1("a", a)? << R2 | a1("b", b)? << R3
        }
        F16v2PackHi { d, a, b } => {
            op(F16V2PACKHI) | a1("d", d)? << R1 | a1("a", a)? << R2 | a1("b", b)? << R3
        }
        Amp { d, a, p, phase } => {
            if phase >= AMP_PHASES {
                return Err(out_of_range(
                    "AMP phase",
                    phase as i64,
                    (0, (AMP_PHASES - 1) as i64),
                ));
            }
            op(AMP) | a2("d", d)? << R1 | a2("a", a)? << R2 | a2("p", p)? << R3 | phase as u32
        }
        Run { entry, state } => op(RUN) | m("entry", entry)? << R1 | m("state", state)? << R2,
        RunAll { entry, state } => op(RUNALL) | m("entry", entry)? << R1 | m("state", state)? << R2,
        WaitW => op(WAITW),
        Sync => op(SYNC),
        Exch { table } => op(EXCH) | m("table", table)? << R1,
        HostX { table } => op(HOSTX) | m("table", table)? << R1,
        Mark { id } => op(MARK) | id as u32,
        AmpCfg { mode } => op(AMPCFG) | amp_mode_index(mode),
        AmpW { base } => op(AMPW) | m("base", base)? << R1,
        Halt => op(HALT),
        Exit => op(EXIT),
    })
}

/// The opcode of an instruction that exists for the pair types only: `codes` holds its f32v2
/// and f16v4 opcodes; `instr` names it in the error for another type.
fn pair_code(ty: FType, codes: [u32; 2], instr: &'static str) -> Result<u32, EncodeError> {
    match ty {
        FType::F32v2 => Ok(codes[0]),
        FType::F16v4 => Ok(codes[1]),
        _ => Err(EncodeError::UnsupportedType {
            instr,
            ty: ty.prefix(),
        }),
    }
}

fn rpt_body(body: u8) -> Result<u32, EncodeError> {
    if body == 0 {
        return Err(out_of_range("rpt body", 0, (1, RPT_BODY_MAX as i64)));
    }
    Ok(body as u32)
}

fn alu_index(o: AluOp) -> u32 {
    AluOp::ALL.iter().position(|x| *x == o).unwrap_or(0) as u32
}
fn fbin_index(o: FBinOp) -> u32 {
    FBinOp::ALL.iter().position(|x| *x == o).unwrap_or(0) as u32
}
fn fun_index(o: FUnOp) -> u32 {
    FUnOp::ALL.iter().position(|x| *x == o).unwrap_or(0) as u32
}
fn conv_index(o: ConvOp) -> u32 {
    ConvOp::ALL.iter().position(|x| *x == o).unwrap_or(0) as u32
}

/// Encodes one issue slot: one word for a single instruction, two for a bundle (the first with
/// [`BUNDLE_FLAG`]).
pub fn encode_slot(slot: &Slot) -> Result<Vec<u32>, EncodeError> {
    match slot {
        Slot::Single(i) => Ok(vec![encode(i)?]),
        Slot::Bundle(b) => {
            let (w0, w1) = encode_bundle(b)?;
            Ok(vec![w0, w1])
        }
    }
}

/// Encodes a bundle as its two words.
pub fn encode_bundle(b: &Bundle) -> Result<(u32, u32), EncodeError> {
    if b.main.class() != Class::Main {
        return Err(EncodeError::BundleMainNotMain);
    }
    if b.float.class() != Class::Float {
        return Err(EncodeError::BundleFloatNotFloat);
    }
    Ok((encode(&b.main)? | BUNDLE_FLAG, encode(&b.float)?))
}

// ---- decoding -------------------------------------------------------------------------------

fn field(word: u32, shift: u32) -> u8 {
    ((word >> shift) & 0xF) as u8
}

/// The operation that the sub-field (the low four bits) of `word` selects from `all`; `what`
/// names the field when it selects none.
fn sub_op<T: Copy>(word: u32, all: &[T], what: &'static str) -> Result<T, DecodeError> {
    let sub = word & 0xF;
    all.get(sub as usize)
        .copied()
        .ok_or(DecodeError::Undefined {
            word,
            field: what,
            value: sub,
        })
}

/// Decodes one word. A word with the bundle flag decodes as its own (main-pipeline)
/// instruction; use [`decode_slot`] to decode the pair.
pub fn decode(word: u32) -> Result<Instr, DecodeError> {
    let instr = decode_unflagged(word & !BUNDLE_FLAG)?;
    if word & BUNDLE_FLAG != 0 && instr.class() != Class::Main {
        return Err(DecodeError::BundleFlagNotMain { word });
    }
    Ok(instr)
}

/// Decodes one issue slot from the start of `words`: returns the slot and the number of words it
/// used (1 or 2).
pub fn decode_slot(words: &[u32]) -> Result<(Slot, usize), DecodeError> {
    let &w0 = words.first().ok_or(DecodeError::Empty)?;
    let main = decode(w0)?;
    if w0 & BUNDLE_FLAG == 0 {
        return Ok((Slot::Single(main), 1));
    }
    let &w1 = words
        .get(1)
        .ok_or(DecodeError::BundleTruncated { word: w0 })?;
    if w1 & BUNDLE_FLAG != 0 {
        return Err(DecodeError::BundleSecondNotFloat { word: w1 });
    }
    let float = decode(w1)?;
    if float.class() != Class::Float {
        return Err(DecodeError::BundleSecondNotFloat { word: w1 });
    }
    Ok((Slot::Bundle(Bundle { main, float }), 2))
}

/// The operand bits each opcode uses; every other operand bit is reserved.
fn used_bits(code: u32) -> Option<u32> {
    use opcode::*;
    const REG1: u32 = 0xF << R1;
    const REG2: u32 = 0xF << R2;
    const REG3: u32 = 0xF << R3;
    const REG4: u32 = 0xF << R4;
    const SUB: u32 = 0xF;
    Some(match code {
        NOP | WAITW | SYNC | HALT | EXIT => 0,
        ALU => REG1 | REG2 | REG3 | SUB,
        0x10..=0x1F => REG1 | REG2 | 0xFFFF,
        SETZI => REG1 | 0xF_FFFF,
        ORHI => REG1 | 0xFFFF,
        GET => REG1 | 0x3,
        MOV_TO_A | MOV_TO_M | RUN | RUNALL => REG1 | REG2,
        SETFP8 => 0x100 | 0x3F,
        LD2X64PACE | LDST64PACE => REG1 | REG2 | REG3 | REG4,
        LD2XST64PACE => OPERAND_MASK,
        0x20..=0x2B | 0x30..=0x39 => REG1 | REG2 | 0xFFFF,
        BR | EXCH | HOSTX | AMPW => REG1,
        BRI => 0xF_FFFF,
        BRZ | BRNZ | BRNZDEC | CALL => REG1 | 0xF_FFFF,
        RPT => REG1 | 0xFF,
        RPTI => 0xFF_FFFF,
        0x50..=0x53 => REG1 | REG2 | REG3 | SUB,
        0x54..=0x57 | FREDUCE_F32V2 | FREDUCE_F16V4 | CONV => REG1 | REG2 | SUB,
        BCAST_F32V2 | BCAST_F16V4 => REG1 | REG2,
        F16V2PACK | F16V2PACKHI => REG1 | REG2 | REG3,
        AMP => REG1 | REG2 | REG3 | 0x3,
        MARK => 0xFFFF,
        AMPCFG => 0x3,
        _ => return None,
    })
}

fn decode_unflagged(word: u32) -> Result<Instr, DecodeError> {
    use Instr::*;
    use opcode::*;
    let code = (word & OPCODE_MASK) >> OPCODE_SHIFT;
    let used = used_bits(code).ok_or(DecodeError::Undefined {
        word,
        field: "opcode",
        value: code,
    })?;
    let reserved = word & OPERAND_MASK & !used;
    if reserved != 0 {
        return Err(DecodeError::ReservedBits {
            word,
            bits: reserved,
        });
    }
    let r1 = field(word, R1);
    let r2 = field(word, R2);
    let r3 = field(word, R3);
    let r4 = field(word, R4);
    let r5 = field(word, R5);
    let r6 = field(word, R6);
    let sub = word & 0xF;
    let imm16 = (word & 0xFFFF) as u16;
    let imm20 = word & 0xF_FFFF;
    let undefined = |field: &'static str, value: u32| DecodeError::Undefined { word, field, value };
    // The type of an instruction with an f32v2 and an f16v4 opcode, from the f32v2 one.
    let pair_type = |f32v2_code: u32| {
        if code == f32v2_code {
            FType::F32v2
        } else {
            FType::F16v4
        }
    };
    let instr = match code {
        NOP => Nop,
        ALU => Alu {
            op: AluOp::ALL[sub as usize],
            d: MReg(r1),
            a: MReg(r2),
            b: MReg(r3),
        },
        0x10..=0x1F => AluImm {
            op: AluOp::ALL[(code - ALU_IMM) as usize],
            d: MReg(r1),
            a: MReg(r2),
            imm: imm16 as i16,
        },
        SETZI => Setzi {
            d: MReg(r1),
            imm: imm20,
        },
        ORHI => Orhi {
            d: MReg(r1),
            imm: imm16,
        },
        GET => Get {
            d: MReg(r1),
            sys: match sub {
                0 => SysReg::TileId,
                1 => SysReg::ContextId,
                2 => SysReg::Cycles,
                v => return Err(undefined("system register", v)),
            },
        },
        MOV_TO_A => MovToA {
            d: AReg(r1),
            a: MReg(r2),
        },
        MOV_TO_M => MovToM {
            d: MReg(r1),
            a: AReg(r2),
        },
        SETFP8 => SetFp8 {
            format: if word & 0x100 != 0 {
                Fp8Format::F152
            } else {
                Fp8Format::F143
            },
            scale: (((word & 0x3F) as u8) << 2) as i8 >> 2,
        },
        LD2X64PACE => Ld2x64Pace {
            d: [APair(r1), APair(r2)],
            p: [MReg(r3), MReg(r4)],
        },
        LDST64PACE => LdSt64Pace {
            d: APair(r1),
            s: APair(r2),
            p: [MReg(r3), MReg(r4)],
        },
        LD2XST64PACE => Ld2xSt64Pace {
            d: [APair(r1), APair(r2)],
            s: APair(r3),
            p: [MReg(r4), MReg(r5), MReg(r6)],
        },
        0x20..=0x2B | 0x30..=0x39 => {
            let form = (code & 0xF) >> 1;
            let mode = if code & 1 == 0 {
                AddrMode::Offset(imm16 as i16)
            } else {
                AddrMode::PostInc(imm16 as i16)
            };
            let (width, reg) = match form {
                0 => (Width::B8, DataReg::M(MReg(r1))),
                1 => (Width::B16, DataReg::M(MReg(r1))),
                2 => (Width::B32, DataReg::M(MReg(r1))),
                3 => (Width::B32, DataReg::A(r1)),
                4 => (Width::B64, DataReg::A(r1)),
                _ => (Width::B128, DataReg::A(r1)),
            };
            if code < STORE {
                Load {
                    width,
                    d: reg,
                    base: MReg(r2),
                    mode,
                }
            } else {
                Store {
                    width,
                    s: reg,
                    base: MReg(r2),
                    mode,
                }
            }
        }
        BR => Br { a: MReg(r1) },
        BRI => Bri { target: imm20 },
        BRZ => Brz {
            a: MReg(r1),
            target: imm20,
        },
        BRNZ => Brnz {
            a: MReg(r1),
            target: imm20,
        },
        BRNZDEC => Brnzdec {
            a: MReg(r1),
            target: imm20,
        },
        CALL => Call {
            link: MReg(r1),
            target: imm20,
        },
        RPT => Rpt {
            count: MReg(r1),
            body: (word & 0xFF) as u8,
        },
        RPTI => Rpti {
            count: ((word >> 8) & 0xFFFF) as u16,
            body: (word & 0xFF) as u8,
        },
        0x50..=0x53 => FBin {
            ty: FType::ALL[(code & 3) as usize],
            op: sub_op(word, &FBinOp::ALL, "float operation")?,
            d: r1,
            a: r2,
            b: r3,
        },
        0x54..=0x57 => FUn {
            ty: FType::ALL[(code & 3) as usize],
            op: sub_op(word, &FUnOp::ALL, "float unary operation")?,
            d: r1,
            a: r2,
        },
        FREDUCE_F32V2 | FREDUCE_F16V4 => FReduce {
            ty: pair_type(FREDUCE_F32V2),
            op: match sub {
                0 => RedOp::Sum,
                1 => RedOp::Max,
                v => return Err(undefined("reduction", v)),
            },
            d: AReg(r1),
            a: APair(r2),
        },
        CONV => Conv {
            op: sub_op(word, &ConvOp::ALL, "conversion")?,
            d: r1,
            a: r2,
        },
        BCAST_F32V2 | BCAST_F16V4 => Bcast {
            ty: pair_type(BCAST_F32V2),
            d: APair(r1),
            a: AReg(r2),
        },
        F16V2PACK => F16v2Pack {
            d: AReg(r1),
            a: AReg(r2),
            b: AReg(r3),
        },
        F16V2PACKHI => F16v2PackHi {
            d: AReg(r1),
            a: AReg(r2),
            b: AReg(r3),
        },
        AMP => Amp {
            d: APair(r1),
            a: APair(r2),
            p: APair(r3),
            phase: (word & 3) as u8,
        },
        RUN => Run {
            entry: MReg(r1),
            state: MReg(r2),
        },
        RUNALL => RunAll {
            entry: MReg(r1),
            state: MReg(r2),
        },
        WAITW => WaitW,
        SYNC => Sync,
        EXCH => Exch { table: MReg(r1) },
        HOSTX => HostX { table: MReg(r1) },
        MARK => Mark { id: imm16 },
        AMPCFG => AmpCfg {
            mode: AmpMode::ALL[(word & 3) as usize],
        },
        AMPW => AmpW { base: MReg(r1) },
        HALT => Halt,
        EXIT => Exit,
        _ => return Err(undefined("opcode", code)),
    };
    // Field-level validity (alignment, ranges) is exactly what encoding checks; re-encoding
    // also proves the word is the one canonical encoding of the instruction.
    match encode(&instr) {
        Ok(w) if w == word => Ok(instr),
        Ok(w) => Err(DecodeError::ReservedBits {
            word,
            bits: w ^ word,
        }),
        Err(reason) => Err(DecodeError::InvalidField { word, reason }),
    }
}
