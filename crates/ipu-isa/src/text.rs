//! The text form of instructions and slots: what the disassembler prints and the assembler
//! parses. `Display` for [`Instr`] and [`format_slot`] print the canonical form.

use std::fmt;

use crate::instr::*;

/// The mnemonic of a load of this width (`step` appended for post-increment).
pub fn load_mnemonic(width: Width) -> &'static str {
    match width {
        Width::B8 => "ldz8",
        Width::B16 => "ldz16",
        Width::B32 => "ld32",
        Width::B64 => "ld64",
        Width::B128 => "ld128",
    }
}

/// The mnemonic of a store of this width (`step` appended for post-increment). There is no
/// 128-bit store; `st128` is printed for the invalid instruction only.
pub fn store_mnemonic(width: Width) -> &'static str {
    match width {
        Width::B8 => "st8",
        Width::B16 => "st16",
        Width::B32 => "st32",
        Width::B64 => "st64",
        Width::B128 => "st128",
    }
}

/// The text name of a system register for `get`.
pub fn sysreg_name(s: SysReg) -> &'static str {
    match s {
        SysReg::TileId => "tileid",
        SysReg::ContextId => "contextid",
        SysReg::Cycles => "cycles",
    }
}

/// The text name of an FP8 format for `setfp8`.
pub fn fp8_name(f: Fp8Format) -> &'static str {
    match f {
        Fp8Format::F143 => "f143",
        Fp8Format::F152 => "f152",
    }
}

/// The text name of an AMP mode for `ampcfg`.
pub fn amp_mode_name(m: AmpMode) -> &'static str {
    match m {
        AmpMode::F16F16 => "f16f16",
        AmpMode::F16F32 => "f16f32",
        AmpMode::F32F32 => "f32f32",
        AmpMode::F8F16 => "f8f16",
    }
}

/// The reduction mnemonic suffix.
pub fn red_suffix(op: RedOp) -> &'static str {
    match op {
        RedOp::Sum => "sum",
        RedOp::Max => "max",
    }
}

/// A float register operand of `count` registers (1, 2 or 4) starting at `index`.
struct ARegs(u8, u8);

impl fmt::Display for ARegs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.1 <= 1 {
            write!(f, "$a{}", self.0)
        } else {
            write!(f, "$a{}:{}", self.0, self.0 as u32 + self.1 as u32 - 1)
        }
    }
}

fn width_of(pair: bool) -> u8 {
    if pair { 2 } else { 1 }
}

struct Data(DataReg, Width);

impl fmt::Display for Data {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            DataReg::M(r) => write!(f, "{r}"),
            DataReg::A(i) => {
                let n = match self.1 {
                    Width::B64 => 2,
                    Width::B128 => 4,
                    _ => 1,
                };
                write!(f, "{}", ARegs(i, n))
            }
        }
    }
}

fn mem(f: &mut fmt::Formatter<'_>, mn: &str, reg: Data, base: MReg, mode: AddrMode) -> fmt::Result {
    match mode {
        AddrMode::Offset(i) => write!(f, "{mn} {reg}, {base}, {i}"),
        AddrMode::PostInc(i) => write!(f, "{mn}step {reg}, {base}+={i}"),
    }
}

/// Writes an instruction, printing branch targets with `target` (hex address or a label).
pub(crate) fn write_instr(
    f: &mut fmt::Formatter<'_>,
    instr: &Instr,
    target: &dyn Fn(u32) -> String,
) -> fmt::Result {
    use Instr::*;
    match *instr {
        Nop => write!(f, "nop"),
        Alu { op, d, a, b } => write!(f, "{} {d}, {a}, {b}", op.mnemonic()),
        AluImm { op, d, a, imm } => write!(f, "{} {d}, {a}, {imm}", op.mnemonic()),
        Setzi { d, imm } => write!(f, "setzi {d}, {imm:#x}"),
        Orhi { d, imm } => write!(f, "orhi {d}, {imm:#x}"),
        Get { d, sys } => write!(f, "get {d}, {}", sysreg_name(sys)),
        MovToA { d, a } => write!(f, "mov {d}, {a}"),
        MovToM { d, a } => write!(f, "mov {d}, {a}"),
        Load {
            width,
            d,
            base,
            mode,
        } => mem(f, load_mnemonic(width), Data(d, width), base, mode),
        Store {
            width,
            s,
            base,
            mode,
        } => mem(f, store_mnemonic(width), Data(s, width), base, mode),
        Ld2x64Pace {
            d: [d0, d1],
            p: [p0, p1],
        } => write!(f, "ld2x64pace {d0}, {d1}, {p0}+=8, {p1}+=8"),
        LdSt64Pace { d, s, p: [p0, p1] } => {
            write!(f, "ldst64pace {d}, {s}, {p0}+=8, {p1}+=8")
        }
        Ld2xSt64Pace {
            d: [d0, d1],
            s,
            p: [p0, p1, p2],
        } => write!(f, "ld2xst64pace {d0}, {d1}, {s}, {p0}+=8, {p1}+=8, {p2}+=8"),
        Br { a } => write!(f, "br {a}"),
        Bri { target: t } => write!(f, "bri {}", target(t)),
        Brz { a, target: t } => write!(f, "brz {a}, {}", target(t)),
        Brnz { a, target: t } => write!(f, "brnz {a}, {}", target(t)),
        Brnzdec { a, target: t } => write!(f, "brnzdec {a}, {}", target(t)),
        Call { link, target: t } => write!(f, "call {link}, {}", target(t)),
        Rpt { count, body } => write!(f, "rpt {count}, {body}"),
        Rpti { count, body } => write!(f, "rpt {count}, {body}"),
        SetFp8 { format, scale } => write!(f, "setfp8 {}, {scale}", fp8_name(format)),
        FBin { ty, op, d, a, b } => {
            let n = width_of(ty.is_pair());
            write!(
                f,
                "{}{} {}, {}, {}",
                ty.prefix(),
                op.suffix(),
                ARegs(d, n),
                ARegs(a, n),
                ARegs(b, n)
            )
        }
        FUn { ty, op, d, a } => {
            let n = width_of(ty.is_pair());
            write!(
                f,
                "{}{} {}, {}",
                ty.prefix(),
                op.suffix(),
                ARegs(d, n),
                ARegs(a, n)
            )
        }
        FReduce { ty, op, d, a } => write!(f, "{}{} {d}, {a}", ty.prefix(), red_suffix(op)),
        Conv { op, d, a } => write!(
            f,
            "{} {}, {}",
            op.mnemonic(),
            ARegs(d, op.dst_regs()),
            ARegs(a, op.src_regs())
        ),
        Bcast { ty, d, a } => write!(f, "{}bcast {d}, {a}", ty.prefix()),
        F16v2Pack { d, a, b } => write!(f, "f16v2pack {d}, {a}, {b}"),
        F16v2PackHi { d, a, b } => write!(f, "f16v2packhi {d}, {a}, {b}"),
        Amp { d, a, p, phase } => write!(f, "amp {d}, {a}, {p}, {phase}"),
        Run { entry, state } => write!(f, "run {entry}, {state}"),
        RunAll { entry, state } => write!(f, "runall {entry}, {state}"),
        WaitW => write!(f, "waitw"),
        Sync => write!(f, "sync"),
        Exch { table } => write!(f, "exch {table}"),
        HostX { table } => write!(f, "hostx {table}"),
        Mark { id } => write!(f, "mark {id}"),
        AmpCfg { mode } => write!(f, "ampcfg {}", amp_mode_name(mode)),
        AmpW { base } => write!(f, "ampw {base}"),
        Halt => write!(f, "halt"),
        Exit => write!(f, "exit"),
    }
}

fn hex_target(t: u32) -> String {
    format!("{t:#x}")
}

impl fmt::Display for Instr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_instr(f, self, &hex_target)
    }
}

/// Displays a slot with a custom branch-target printer.
pub(crate) struct SlotText<'a> {
    pub slot: &'a Slot,
    pub target: &'a dyn Fn(u32) -> String,
}

impl fmt::Display for SlotText<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.slot {
            Slot::Single(i) => write_instr(f, i, self.target),
            Slot::Bundle(b) => {
                write!(f, "{{ ")?;
                write_instr(f, &b.main, self.target)?;
                write!(f, " ; ")?;
                write_instr(f, &b.float, self.target)?;
                write!(f, " }}")
            }
        }
    }
}

impl fmt::Display for Slot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        SlotText {
            slot: self,
            target: &hex_target,
        }
        .fmt(f)
    }
}

/// The text form of one slot: an instruction, or `{ MAIN ; FLOAT }` for a bundle. The
/// assembler parses it back to the same slot.
pub fn format_slot(slot: &Slot) -> String {
    slot.to_string()
}
