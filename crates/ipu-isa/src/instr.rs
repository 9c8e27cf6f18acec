//! The instruction set as data: registers, operations and their operands.
//!
//! This enum is the single definition of the tile ISA. Encoding, decoding, the assembler, the
//! disassembler and the simulator's semantics are all written against it; `docs/isa.md`
//! documents each instruction's text form, encoding and meaning.
//!
//! Classes: a *main-pipeline* (M) instruction does integer, address, memory or control work; a
//! *float-pipeline* (A) instruction does floating-point or AMP work. A co-issued pair
//! ([`Bundle`]) is one M instruction without control flow followed by one A instruction, issued
//! together in one barrel slot; both read their operands before either writes.

use std::fmt;

/// An integer/address register `$m0`..`$m15`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MReg(pub u8);

/// A floating-point register `$a0`..`$a15` (32 bits).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct AReg(pub u8);

/// An aligned pair of floating-point registers `$a0:1`, `$a2:3`, .. (64 bits: f32v2 or f16v4).
/// The field is the index of the lower register and is always even.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct APair(pub u8);

/// An aligned quad of floating-point registers `$a0:3`, `$a4:7`, .. (128 bits). The field is
/// the index of the lowest register and is always a multiple of 4.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct AQuad(pub u8);

/// Number of registers in each register file of a context.
pub const REGISTERS_PER_FILE: u8 = 16;

impl MReg {
    /// Whether the index is in range.
    pub fn is_valid(self) -> bool {
        self.0 < REGISTERS_PER_FILE
    }
}
impl AReg {
    /// Whether the index is in range.
    pub fn is_valid(self) -> bool {
        self.0 < REGISTERS_PER_FILE
    }
}
impl APair {
    /// Whether the index is in range and even.
    pub fn is_valid(self) -> bool {
        self.0 < REGISTERS_PER_FILE && self.0.is_multiple_of(2)
    }
}
impl AQuad {
    /// Whether the index is in range and a multiple of 4.
    pub fn is_valid(self) -> bool {
        self.0 < REGISTERS_PER_FILE && self.0.is_multiple_of(4)
    }
}

impl fmt::Display for MReg {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "$m{}", self.0)
    }
}
impl fmt::Display for AReg {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "$a{}", self.0)
    }
}
impl fmt::Display for APair {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "$a{}:{}", self.0, self.0 + 1)
    }
}
impl fmt::Display for AQuad {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "$a{}:{}", self.0, self.0 + 3)
    }
}

/// Integer ALU operations. Comparisons write 1 or 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum AluOp {
    /// `add`: wrapping addition.
    Add,
    /// `sub`: wrapping subtraction.
    Sub,
    /// `mul`: wrapping multiplication (low 32 bits).
    Mul,
    /// `and`
    And,
    /// `or`
    Or,
    /// `xor`
    Xor,
    /// `shl`: shift left by the low 5 bits of the second operand.
    Shl,
    /// `shr`: logical shift right.
    Shr,
    /// `sar`: arithmetic shift right.
    Sar,
    /// `min`: signed minimum.
    Min,
    /// `max`: signed maximum.
    Max,
    /// `cmpeq`
    CmpEq,
    /// `cmpne`
    CmpNe,
    /// `cmplt`: signed less-than.
    CmpLt,
    /// `cmpult`: unsigned less-than.
    CmpUlt,
    /// `cmple`: signed less-or-equal.
    CmpLe,
}

impl AluOp {
    /// Every operation, in encoding order.
    pub const ALL: [AluOp; 16] = [
        AluOp::Add,
        AluOp::Sub,
        AluOp::Mul,
        AluOp::And,
        AluOp::Or,
        AluOp::Xor,
        AluOp::Shl,
        AluOp::Shr,
        AluOp::Sar,
        AluOp::Min,
        AluOp::Max,
        AluOp::CmpEq,
        AluOp::CmpNe,
        AluOp::CmpLt,
        AluOp::CmpUlt,
        AluOp::CmpLe,
    ];

    /// The mnemonic.
    pub fn mnemonic(self) -> &'static str {
        match self {
            AluOp::Add => "add",
            AluOp::Sub => "sub",
            AluOp::Mul => "mul",
            AluOp::And => "and",
            AluOp::Or => "or",
            AluOp::Xor => "xor",
            AluOp::Shl => "shl",
            AluOp::Shr => "shr",
            AluOp::Sar => "sar",
            AluOp::Min => "min",
            AluOp::Max => "max",
            AluOp::CmpEq => "cmpeq",
            AluOp::CmpNe => "cmpne",
            AluOp::CmpLt => "cmplt",
            AluOp::CmpUlt => "cmpult",
            AluOp::CmpLe => "cmple",
        }
    }

    /// Applies the operation.
    pub fn apply(self, a: u32, b: u32) -> u32 {
        match self {
            AluOp::Add => a.wrapping_add(b),
            AluOp::Sub => a.wrapping_sub(b),
            AluOp::Mul => a.wrapping_mul(b),
            AluOp::And => a & b,
            AluOp::Or => a | b,
            AluOp::Xor => a ^ b,
            AluOp::Shl => a.wrapping_shl(b & 31),
            AluOp::Shr => a.wrapping_shr(b & 31),
            AluOp::Sar => ((a as i32).wrapping_shr(b & 31)) as u32,
            AluOp::Min => (a as i32).min(b as i32) as u32,
            AluOp::Max => (a as i32).max(b as i32) as u32,
            AluOp::CmpEq => (a == b) as u32,
            AluOp::CmpNe => (a != b) as u32,
            AluOp::CmpLt => ((a as i32) < (b as i32)) as u32,
            AluOp::CmpUlt => (a < b) as u32,
            AluOp::CmpLe => ((a as i32) <= (b as i32)) as u32,
        }
    }
}

/// Binary floating-point operations, for every float type.
///
/// Comparisons write an all-ones lane for true and all-zeros for false (a mask). `Mac` is a
/// fused multiply-add into the destination: `d = d + a * b`, rounded once.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum FBinOp {
    /// `add`
    Add,
    /// `sub`
    Sub,
    /// `mul`
    Mul,
    /// `mac`: `d += a * b` (fused).
    Mac,
    /// `max`: IEEE maxNum (a NaN operand yields the other operand).
    Max,
    /// `min`: IEEE minNum.
    Min,
    /// `cmplt`: mask of `a < b`.
    CmpLt,
    /// `cmple`: mask of `a <= b`.
    CmpLe,
    /// `cmpeq`: mask of `a == b`.
    CmpEq,
}

impl FBinOp {
    /// Every operation, in encoding order.
    pub const ALL: [FBinOp; 9] = [
        FBinOp::Add,
        FBinOp::Sub,
        FBinOp::Mul,
        FBinOp::Mac,
        FBinOp::Max,
        FBinOp::Min,
        FBinOp::CmpLt,
        FBinOp::CmpLe,
        FBinOp::CmpEq,
    ];

    /// The operation part of the mnemonic (`f32v2` + `add`).
    pub fn suffix(self) -> &'static str {
        match self {
            FBinOp::Add => "add",
            FBinOp::Sub => "sub",
            FBinOp::Mul => "mul",
            FBinOp::Mac => "mac",
            FBinOp::Max => "max",
            FBinOp::Min => "min",
            FBinOp::CmpLt => "cmplt",
            FBinOp::CmpLe => "cmple",
            FBinOp::CmpEq => "cmpeq",
        }
    }
}

/// Unary floating-point operations.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum FUnOp {
    /// `mov`: copy the bits.
    Mov,
    /// `abs`
    Abs,
    /// `neg`
    Neg,
    /// `exp`: e^x. Costs two barrel slots (see `docs/isa.md`).
    Exp,
    /// `rcp`: 1/x. Costs two barrel slots.
    Rcp,
    /// `sqrt`. Costs two barrel slots.
    Sqrt,
    /// `rsqrt`: 1/sqrt(x). Costs two barrel slots.
    Rsqrt,
}

impl FUnOp {
    /// Every operation, in encoding order.
    pub const ALL: [FUnOp; 7] = [
        FUnOp::Mov,
        FUnOp::Abs,
        FUnOp::Neg,
        FUnOp::Exp,
        FUnOp::Rcp,
        FUnOp::Sqrt,
        FUnOp::Rsqrt,
    ];

    /// The operation part of the mnemonic.
    pub fn suffix(self) -> &'static str {
        match self {
            FUnOp::Mov => "mov",
            FUnOp::Abs => "abs",
            FUnOp::Neg => "neg",
            FUnOp::Exp => "exp",
            FUnOp::Rcp => "rcp",
            FUnOp::Sqrt => "sqrt",
            FUnOp::Rsqrt => "rsqrt",
        }
    }

    /// Barrel slots the operation occupies (transcendental helpers take two).
    pub fn slots(self) -> u32 {
        match self {
            FUnOp::Exp | FUnOp::Rcp | FUnOp::Sqrt | FUnOp::Rsqrt => 2,
            _ => 1,
        }
    }
}

/// Horizontal reductions of a vector register pair into one f32.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum RedOp {
    /// `sum`: the sum of the lanes, computed in f32.
    Sum,
    /// `max`: the largest lane (maxNum).
    Max,
}

/// The floating-point vector shapes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum FType {
    /// One f32 in a single register.
    F32,
    /// Two f32 in a register pair.
    F32v2,
    /// Two f16 in a single register (lane 0 in the low half).
    F16v2,
    /// Four f16 in a register pair (lane 0 in the low half of the lower register).
    F16v4,
}

impl FType {
    /// Every type, in encoding order.
    pub const ALL: [FType; 4] = [FType::F32, FType::F32v2, FType::F16v2, FType::F16v4];

    /// The prefix of the mnemonic.
    pub fn prefix(self) -> &'static str {
        match self {
            FType::F32 => "f32",
            FType::F32v2 => "f32v2",
            FType::F16v2 => "f16v2",
            FType::F16v4 => "f16v4",
        }
    }

    /// Whether operands are register pairs (64-bit) rather than single registers.
    pub fn is_pair(self) -> bool {
        matches!(self, FType::F32v2 | FType::F16v4)
    }
}

/// An FP8 format of the conversion unit and the AMP.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Fp8Format {
    /// 1-4-3, bias 8, FNUZ (Graphcore F143).
    F143,
    /// 1-5-2, bias 16, FNUZ (Graphcore F152).
    F152,
}

/// Conversions. FP8 conversions use the context's FP8 configuration (see [`Instr::SetFp8`]):
/// `value = code_value * 2^scale`; encoding rounds to nearest even and saturates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ConvOp {
    /// `f32tof16 $aD, $aA`: one f32 to f16 in the low half of d (high half zero).
    F32ToF16,
    /// `f16tof32 $aD, $aA`: the low f16 of a to f32.
    F16ToF32,
    /// `f32v2tof16 $aD, $aA:B`: two f32 to f16v2.
    F32v2ToF16v2,
    /// `f16v2tof32 $aD:E, $aA`: f16v2 to two f32.
    F16v2ToF32v2,
    /// `f16v4tof8 $aD, $aA:B`: four f16 to four FP8 codes (byte i = lane i).
    F16v4ToF8v4,
    /// `f8v4tof16 $aD:E, $aA`: four FP8 codes to f16v4.
    F8v4ToF16v4,
    /// `f32toi32 $aD, $aA`: f32 to signed integer bits, rounding to nearest even, saturating.
    F32ToI32,
    /// `i32tof32 $aD, $aA`: signed integer bits to f32.
    I32ToF32,
    /// `f32v4tof16 $aD:E, $aA:A+3`: four f32 (a quad) to f16v4 (a pair).
    F32v4ToF16v4,
}

impl ConvOp {
    /// Every conversion, in encoding order.
    pub const ALL: [ConvOp; 9] = [
        ConvOp::F32ToF16,
        ConvOp::F16ToF32,
        ConvOp::F32v2ToF16v2,
        ConvOp::F16v2ToF32v2,
        ConvOp::F16v4ToF8v4,
        ConvOp::F8v4ToF16v4,
        ConvOp::F32ToI32,
        ConvOp::I32ToF32,
        ConvOp::F32v4ToF16v4,
    ];

    /// The mnemonic.
    pub fn mnemonic(self) -> &'static str {
        match self {
            ConvOp::F32ToF16 => "f32tof16",
            ConvOp::F16ToF32 => "f16tof32",
            ConvOp::F32v2ToF16v2 => "f32v2tof16",
            ConvOp::F16v2ToF32v2 => "f16v2tof32",
            ConvOp::F16v4ToF8v4 => "f16v4tof8",
            ConvOp::F8v4ToF16v4 => "f8v4tof16",
            ConvOp::F32ToI32 => "f32toi32",
            ConvOp::I32ToF32 => "i32tof32",
            ConvOp::F32v4ToF16v4 => "f32v4tof16",
        }
    }

    /// Registers of the destination: 1, or 2 for a pair.
    pub fn dst_regs(self) -> u8 {
        match self {
            ConvOp::F16v2ToF32v2 | ConvOp::F8v4ToF16v4 | ConvOp::F32v4ToF16v4 => 2,
            _ => 1,
        }
    }

    /// Registers of the source: 1, 2 for a pair or 4 for a quad.
    pub fn src_regs(self) -> u8 {
        match self {
            ConvOp::F32v2ToF16v2 | ConvOp::F16v4ToF8v4 => 2,
            ConvOp::F32v4ToF16v4 => 4,
            _ => 1,
        }
    }
}

/// Widths of loads and stores.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Width {
    /// 8 bits (loads zero-extend; stores of this width always fault: no sub-word stores).
    B8,
    /// 16 bits (loads zero-extend; stores always fault).
    B16,
    /// 32 bits.
    B32,
    /// 64 bits (a register pair).
    B64,
    /// 128 bits (a register quad); loads only, and only from interleaved memory.
    B128,
}

impl Width {
    /// Bytes moved.
    pub fn bytes(self) -> u32 {
        match self {
            Width::B8 => 1,
            Width::B16 => 2,
            Width::B32 => 4,
            Width::B64 => 8,
            Width::B128 => 16,
        }
    }
}

/// The register a load writes or a store reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DataReg {
    /// An integer register (widths 8, 16, 32).
    M(MReg),
    /// One float register (width 32), a pair (64) or a quad (128). The index is the lowest
    /// register; its alignment must match the width.
    A(u8),
}

/// How a memory instruction forms its address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum AddrMode {
    /// `$mB, imm`: address = base + imm; base unchanged.
    Offset(i16),
    /// `$mB+=imm`: address = base; then base += imm (post-increment).
    PostInc(i16),
}

/// The AMP's input/partials mode, as set by `ampcfg`.
pub use ipu_target::AmpMode;

/// Supervisor-visible counters and identifiers readable with `get`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum SysReg {
    /// The tile's index on the chip.
    TileId,
    /// The context: 0..=5 for workers, 6 for the supervisor.
    ContextId,
    /// The low 32 bits of the tile's cycle counter.
    Cycles,
}

/// One instruction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Instr {
    // ---- main pipeline: integer and address ---------------------------------------------
    /// `nop`
    Nop,
    /// `OP $mD, $mA, $mB`
    Alu {
        op: AluOp,
        d: MReg,
        a: MReg,
        b: MReg,
    },
    /// `OP $mD, $mA, imm` (imm is a signed 16-bit value, sign-extended)
    AluImm {
        op: AluOp,
        d: MReg,
        a: MReg,
        imm: i16,
    },
    /// `setzi $mD, imm`: d = imm (20-bit, zero-extended).
    Setzi { d: MReg, imm: u32 },
    /// `orhi $mD, imm`: d |= imm << 16.
    Orhi { d: MReg, imm: u16 },
    /// `get $mD, SYSREG`
    Get { d: MReg, sys: SysReg },
    /// `mov $aD, $mA`: copy integer bits into a float register.
    MovToA { d: AReg, a: MReg },
    /// `mov $mD, $aA`: copy float register bits into an integer register.
    MovToM { d: MReg, a: AReg },

    // ---- main pipeline: memory -------------------------------------------------------------
    /// `ldW REG, $mB, imm` / `ldWstep REG, $mB+=imm` (W = z8, z16, 32, 64, 128).
    Load {
        width: Width,
        d: DataReg,
        base: MReg,
        mode: AddrMode,
    },
    /// `stW REG, $mB, imm` / `stWstep REG, $mB+=imm` (W = 8, 16, 32, 64).
    Store {
        width: Width,
        s: DataReg,
        base: MReg,
        mode: AddrMode,
    },
    /// `ld2x64pace $aD0:, $aD1:, $mP0+=8, $mP1+=8`: two 64-bit loads, `d[i]` from `p[i]`;
    /// both pointers advance.
    Ld2x64Pace { d: [APair; 2], p: [MReg; 2] },
    /// `ldst64pace $aD:, $aS:, $mP0+=8, $mP1+=8`: a 64-bit load from `p[0]` and a 64-bit
    /// store of s to `p[1]`; both pointers advance.
    LdSt64Pace { d: APair, s: APair, p: [MReg; 2] },
    /// `ld2xst64pace $aD0:, $aD1:, $aS:, $mP0+=8, $mP1+=8, $mP2+=8`: two 64-bit loads (`d[i]`
    /// from `p[i]`) and one 64-bit store of s to `p[2]` in one slot; every pointer advances.
    Ld2xSt64Pace {
        d: [APair; 2],
        s: APair,
        p: [MReg; 3],
    },

    // ---- main pipeline: control --------------------------------------------------------------
    /// `br $mA`: jump to the address in a.
    Br { a: MReg },
    /// `bri TARGET`: jump to an absolute address.
    Bri { target: u32 },
    /// `brz $mA, TARGET`: jump if a == 0.
    Brz { a: MReg, target: u32 },
    /// `brnz $mA, TARGET`: jump if a != 0.
    Brnz { a: MReg, target: u32 },
    /// `brnzdec $mA, TARGET`: if a != 0 { a -= 1; jump }.
    Brnzdec { a: MReg, target: u32 },
    /// `call $mL, TARGET`: l = address of the next instruction; jump.
    Call { link: MReg, target: u32 },
    /// `rpt $mA, N`: execute the next N issue slots (instructions or bundles) a times, with no
    /// loop overhead. a = 0 skips them.
    Rpt { count: MReg, body: u8 },
    /// `rpt IMM, N`: as `Rpt` with an immediate count (at most 0xFFFF).
    Rpti { count: u16, body: u8 },

    // ---- main pipeline: FP8 configuration -------------------------------------------------------
    /// `setfp8 FORMAT, SCALE`: this context's FP8 format and power-of-two scale (-32..=31) for
    /// conversions and AMP inputs.
    SetFp8 { format: Fp8Format, scale: i8 },

    // ---- float pipeline -----------------------------------------------------------------------
    /// `TYOP $aD, $aA, $aB` (`f32add`, `f16v4mac`, `f32v2cmplt`, ..). Register indices are the
    /// lowest register of each operand; pairs for f32v2 and f16v4.
    FBin {
        ty: FType,
        op: FBinOp,
        d: u8,
        a: u8,
        b: u8,
    },
    /// `TYOP $aD, $aA` (`f32exp`, `f16v4abs`, ..).
    FUn { ty: FType, op: FUnOp, d: u8, a: u8 },
    /// `f32v2sum $aD, $aA:B` / `f16v4max $aD, $aA:B`: horizontal reduction into one f32.
    FReduce {
        ty: FType,
        op: RedOp,
        d: AReg,
        a: APair,
    },
    /// Conversions (`f32tof16`, `f8v4tof16`, ..).
    Conv { op: ConvOp, d: u8, a: u8 },
    /// `f32v2bcast $aD:E, $aA` (both lanes = a) / `f16v4bcast $aD:E, $aA` (four lanes = low
    /// f16 of a).
    Bcast { ty: FType, d: APair, a: AReg },
    /// `f16v2pack $aD, $aA, $aB`: d = low16(a) | low16(b) << 16.
    F16v2Pack { d: AReg, a: AReg, b: AReg },
    /// `f16v2packhi $aD, $aA, $aB`: d = high16(a) | high16(b) << 16.
    F16v2PackHi { d: AReg, a: AReg, b: AReg },
    /// `amp $aD:E, $aA:B, $aP:Q, PHASE`: one AMP step of this worker's accumulators. See
    /// `docs/isa.md`: phase p accumulates input lanes a (the next K-chunk of the current row)
    /// against the tile's weights into the 16 (or 8) column accumulators, adds the partials-in
    /// p for columns of chunk p, and returns in d the chunk-p columns of the previously
    /// completed row; phase 3 completes the row.
    Amp {
        d: APair,
        a: APair,
        p: APair,
        phase: u8,
    },

    // ---- supervisor only ---------------------------------------------------------------------
    /// `run $mE, $mS`: start a worker at entry e with vertex state s (the worker's $m0 = s).
    /// Waits for a free worker context.
    Run { entry: MReg, state: MReg },
    /// `runall $mE, $mS`: start all six workers at entry e with the same vertex state s (each
    /// worker's $m0 = s; a worker tells itself apart by its context id). Waits until every
    /// worker context is free.
    RunAll { entry: MReg, state: MReg },
    /// `waitw`: wait until every worker has exited.
    WaitW,
    /// `sync`: bulk-synchronous barrier across all tiles.
    Sync,
    /// `exch $mT`: execute the exchange table at address t (all tiles together).
    Exch { table: MReg },
    /// `hostx $mT`: a host-exchange point running the host-exchange table at t.
    HostX { table: MReg },
    /// `mark IMM`: record a profile mark with this id.
    Mark { id: u16 },
    /// `ampcfg MODE`: set the tile's AMP mode (f16f16, f16f32, f32f32, f8f16).
    AmpCfg { mode: AmpMode },
    /// `ampw $mA`: load the tile's AMP weights from memory at a (512 B for f16f16 and f8f16,
    /// 256 B otherwise) at 16 B/cycle; 16-byte aligned, interleaved memory.
    AmpW { base: MReg },
    /// `halt`: end the current program on this tile.
    Halt,

    // ---- worker only ---------------------------------------------------------------------------
    /// `exit`: end this worker.
    Exit,
}

/// What may issue an instruction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    /// Main pipeline, may be the first half of a bundle.
    Main,
    /// Main pipeline control flow: never in a bundle.
    Control,
    /// Float pipeline, may be the second half of a bundle.
    Float,
    /// Supervisor only, never in a bundle.
    Supervisor,
    /// Worker only, never in a bundle.
    Worker,
}

impl Instr {
    /// The instruction's class.
    pub fn class(&self) -> Class {
        use Instr::*;
        match self {
            Nop
            | Alu { .. }
            | AluImm { .. }
            | Setzi { .. }
            | Orhi { .. }
            | Get { .. }
            | MovToA { .. }
            | MovToM { .. }
            | Load { .. }
            | Store { .. }
            | Ld2x64Pace { .. }
            | LdSt64Pace { .. }
            | Ld2xSt64Pace { .. }
            | SetFp8 { .. } => Class::Main,
            Br { .. }
            | Bri { .. }
            | Brz { .. }
            | Brnz { .. }
            | Brnzdec { .. }
            | Call { .. }
            | Rpt { .. }
            | Rpti { .. } => Class::Control,
            FBin { .. }
            | FUn { .. }
            | FReduce { .. }
            | Conv { .. }
            | Bcast { .. }
            | F16v2Pack { .. }
            | F16v2PackHi { .. }
            | Amp { .. } => Class::Float,
            Run { .. }
            | RunAll { .. }
            | WaitW
            | Sync
            | Exch { .. }
            | HostX { .. }
            | Mark { .. }
            | AmpCfg { .. }
            | AmpW { .. }
            | Halt => Class::Supervisor,
            Exit => Class::Worker,
        }
    }
}

/// One issue slot: a single instruction or a co-issued pair.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Slot {
    /// One instruction (4 bytes).
    Single(Instr),
    /// A co-issued pair (8 bytes, 8-byte aligned).
    Bundle(Bundle),
}

/// A co-issued pair: a main-pipeline instruction of class [`Class::Main`] and a float-pipeline
/// instruction, issued in one barrel slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Bundle {
    /// The main-pipeline half.
    pub main: Instr,
    /// The float-pipeline half.
    pub float: Instr,
}
