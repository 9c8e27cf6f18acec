//! A small in-memory assembler for generated code: instructions and bundles with labels,
//! laid out at an address and encoded with `ipu_isa`. Kernels and supervisor programs are built
//! with it; its text form is the disassembly of what it lays out.

use ipu_isa::{
    APair, AReg, AddrMode, AluOp, Bundle, ConvOp, DataReg, FBinOp, FType, FUnOp, Instr, MReg, Slot,
    Width,
};

/// Why generated code could not be laid out: always a bug in a generator.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CodeError {
    /// A branch or `setzi` names a label that was never bound.
    #[error("unbound label {label}")]
    UnboundLabel {
        /// The label's index.
        label: usize,
    },
    /// An instruction does not encode.
    #[error("cannot encode {slot}: {reason}")]
    Encode {
        /// The slot, as text.
        slot: String,
        /// The encoder's reason.
        reason: String,
    },
    /// A label was attached to an instruction that has no target.
    #[error("{instr} takes no label")]
    NoTarget {
        /// The instruction, as text.
        instr: String,
    },
}

/// A position in the code, bound with [`Code::bind`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Label(usize);

#[derive(Debug, Clone)]
enum Item {
    Slot(Slot),
    /// A control instruction whose target is a label.
    Branch(Instr, Label),
    /// `setzi` of a label's address.
    SetziLabel(MReg, Label),
    Bind(Label),
    /// Pad with a `nop` to an 8-byte boundary if needed.
    AlignBundle,
    /// Pad so that the slot after the next single instruction is 8-byte aligned (an `rpt`
    /// whose body is made of bundles).
    AlignRpt,
    /// A data word (a table the code reads; never executed).
    Word(u32),
}

/// A sequence of instructions with labels.
#[derive(Debug, Clone, Default)]
pub struct Code {
    items: Vec<Item>,
    labels: usize,
}

/// Code laid out at an address.
#[derive(Debug, Clone)]
pub struct Laid {
    /// First byte.
    pub address: u32,
    /// The encoded bytes.
    pub bytes: Vec<u8>,
    /// The slots with their addresses (for the text form).
    pub slots: Vec<(u32, Slot)>,
}

/// The float-pipeline no-op used to fill the float half of a bundle.
pub const FLOAT_NOP: Instr = Instr::FUn {
    ty: FType::F32,
    op: FUnOp::Mov,
    d: 15,
    a: 15,
};

impl Code {
    /// An empty sequence.
    pub fn new() -> Code {
        Code::default()
    }

    /// A new unbound label.
    pub fn label(&mut self) -> Label {
        self.labels += 1;
        Label(self.labels - 1)
    }

    /// Binds `label` to the next instruction.
    pub fn bind(&mut self, label: Label) {
        self.items.push(Item::Bind(label));
    }

    /// Appends one instruction.
    pub fn op(&mut self, instr: Instr) -> &mut Self {
        self.items.push(Item::Slot(Slot::Single(instr)));
        self
    }

    /// Appends a co-issued pair.
    pub fn bundle(&mut self, main: Instr, float: Instr) -> &mut Self {
        self.items
            .push(Item::Slot(Slot::Bundle(Bundle { main, float })));
        self
    }

    /// Number of items (instructions, bundles, labels, alignments) so far.
    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// Whether nothing has been added.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// Rewrites the single instruction at item `at`.
    pub fn patch(&mut self, at: usize, f: impl FnOnce(Instr) -> Instr) {
        if let Item::Slot(Slot::Single(i)) = &mut self.items[at] {
            *i = f(*i);
        }
    }

    /// Pads to an 8-byte boundary so the next slot may be a bundle inside an `rpt` body.
    pub fn align_bundle(&mut self) -> &mut Self {
        self.items.push(Item::AlignBundle);
        self
    }

    /// Whether the next slot starts on an 8-byte boundary when the code is laid out at an
    /// 8-byte aligned address (as every kernel is).
    pub fn at_even_word(&self) -> bool {
        self.size_at(0).is_multiple_of(8)
    }

    /// Appends the Main-class `ops`, one issue slot each, so that the next slot starts on an
    /// odd word (`end_odd`) or on an 8-byte boundary, without a padding `nop`: each op goes
    /// alone (one word) but for at most one, issued with [`FLOAT_NOP`] as a bundle (two words)
    /// where that fixes the parity. Needs two ops when the first starts on an odd word and the
    /// parity must change.
    pub fn main_ops_ending(&mut self, ops: &[Instr], end_odd: bool) -> &mut Self {
        let even = self.at_even_word();
        let odd_end_alone = even != ops.len().is_multiple_of(2);
        let bundled = if odd_end_alone == end_odd {
            None
        } else if even {
            Some(0)
        } else {
            assert!(ops.len() >= 2, "no op to bundle on an even word");
            Some(1)
        };
        for (i, &op) in ops.iter().enumerate() {
            if Some(i) == bundled {
                self.bundle(op, FLOAT_NOP);
            } else {
                self.op(op);
            }
        }
        self
    }

    /// Appends `float` in bundles, the Main-class `main` (no more of them than of `float`)
    /// as the first halves in order and `nop`s after them, from an 8-byte boundary: every
    /// float op costs its own slots and the main ops none.
    pub fn bundles(&mut self, main: &[Instr], float: &[Instr]) -> &mut Self {
        assert!(main.len() <= float.len(), "more main ops than float ops");
        for (i, &f) in float.iter().enumerate() {
            self.bundle(main.get(i).copied().unwrap_or(Instr::Nop), f);
        }
        self
    }

    /// `rpt` over a body of bundles: pads so that the body starts 8-byte aligned (a pad
    /// inside the body would be repeated).
    pub fn rpt_bundles(&mut self, rpt: Instr) -> &mut Self {
        self.items.push(Item::AlignRpt);
        self.op(rpt)
    }

    /// A branch (`bri`, `brz`, `brnz`, `brnzdec`, `call`) to `label`; the instruction's target
    /// field is replaced by the label's address.
    pub fn branch(&mut self, instr: Instr, label: Label) -> &mut Self {
        self.items.push(Item::Branch(instr, label));
        self
    }

    /// Appends data words (tables the code reads with loads; control must never reach them).
    pub fn words(&mut self, words: &[u32]) -> &mut Self {
        self.items.extend(words.iter().map(|&w| Item::Word(w)));
        self
    }

    /// `setzi d, address-of(label)`.
    pub fn setzi_label(&mut self, d: MReg, label: Label) -> &mut Self {
        self.items.push(Item::SetziLabel(d, label));
        self
    }

    /// Appends another sequence (its labels are renumbered).
    pub fn append(&mut self, other: &Code) {
        let base = self.labels;
        for item in &other.items {
            self.items.push(match item {
                Item::Branch(i, l) => Item::Branch(*i, Label(l.0 + base)),
                Item::SetziLabel(d, l) => Item::SetziLabel(*d, Label(l.0 + base)),
                Item::Bind(l) => Item::Bind(Label(l.0 + base)),
                other => other.clone(),
            });
        }
        self.labels += other.labels;
    }

    /// Bytes the code occupies when laid out at `address` (alignment depends on it).
    pub fn size_at(&self, address: u32) -> u32 {
        let mut at = address;
        for item in &self.items {
            at += item_size(item, at);
        }
        at - address
    }

    /// Lays the code out at `address` and encodes it.
    pub fn lay_out(&self, address: u32) -> Result<Laid, CodeError> {
        let mut addr_of = vec![None; self.labels];
        let mut at = address;
        for item in &self.items {
            if let Item::Bind(l) = item {
                addr_of[l.0] = Some(at);
            }
            at += item_size(item, at);
        }
        let resolve = |l: Label| addr_of[l.0].ok_or(CodeError::UnboundLabel { label: l.0 });
        let mut bytes = Vec::with_capacity((at - address) as usize);
        let mut slots = Vec::new();
        let mut at = address;
        for item in &self.items {
            let slot = match item {
                Item::Bind(_) => continue,
                Item::Word(w) => {
                    bytes.extend_from_slice(&w.to_le_bytes());
                    at += 4;
                    continue;
                }
                Item::AlignBundle | Item::AlignRpt => {
                    if item_size(item, at) == 0 {
                        continue;
                    }
                    Slot::Single(Instr::Nop)
                }
                Item::Slot(s) => {
                    if matches!(s, Slot::Bundle(_)) && !at.is_multiple_of(8) {
                        push_slot(&mut bytes, &mut slots, &mut at, Slot::Single(Instr::Nop))?;
                    }
                    *s
                }
                Item::Branch(i, l) => Slot::Single(retarget(*i, resolve(*l)?)?),
                Item::SetziLabel(d, l) => Slot::Single(Instr::Setzi {
                    d: *d,
                    imm: resolve(*l)?,
                }),
            };
            push_slot(&mut bytes, &mut slots, &mut at, slot)?;
        }
        Ok(Laid {
            address,
            bytes,
            slots,
        })
    }
}

fn item_size(item: &Item, at: u32) -> u32 {
    match item {
        Item::Bind(_) => 0,
        Item::AlignBundle => at % 8,
        Item::AlignRpt => 4 - at % 8,
        Item::Slot(Slot::Bundle(_)) => 8 + at % 8,
        _ => 4,
    }
}

fn push_slot(
    bytes: &mut Vec<u8>,
    slots: &mut Vec<(u32, Slot)>,
    at: &mut u32,
    slot: Slot,
) -> Result<(), CodeError> {
    let words = ipu_isa::encode_slot(&slot).map_err(|e| CodeError::Encode {
        slot: format!("{slot:?}"),
        reason: e.to_string(),
    })?;
    for w in &words {
        bytes.extend_from_slice(&w.to_le_bytes());
    }
    slots.push((*at, slot));
    *at += 4 * words.len() as u32;
    Ok(())
}

fn retarget(instr: Instr, target: u32) -> Result<Instr, CodeError> {
    Ok(match instr {
        Instr::Bri { .. } => Instr::Bri { target },
        Instr::Brz { a, .. } => Instr::Brz { a, target },
        Instr::Brnz { a, .. } => Instr::Brnz { a, target },
        Instr::Brnzdec { a, .. } => Instr::Brnzdec { a, target },
        Instr::Call { link, .. } => Instr::Call { link, target },
        other => {
            return Err(CodeError::NoTarget {
                instr: format!("{other:?}"),
            });
        }
    })
}

impl Laid {
    /// The text form: one slot per line with its address.
    pub fn text(&self) -> String {
        let mut out = String::new();
        for (addr, slot) in &self.slots {
            out.push_str(&format!("{addr:#07x}  {}\n", slot_text(slot)));
        }
        out
    }
}

/// The text form of a slot.
pub fn slot_text(slot: &Slot) -> String {
    match slot {
        Slot::Single(i) => format!("{i:?}"),
        Slot::Bundle(b) => format!("{{ {:?} ; {:?} }}", b.main, b.float),
    }
}

// ---- shorthand constructors used by the kernels -----------------------------------------------

/// `$mN`
pub const fn m(n: u8) -> MReg {
    MReg(n)
}
/// `$aN`
pub const fn a(n: u8) -> AReg {
    AReg(n)
}
/// `$aN:N+1`
pub const fn ap(n: u8) -> APair {
    APair(n)
}

/// `ld32 $mD, $mB, off`
pub fn ld32m(d: MReg, base: MReg, off: i16) -> Instr {
    Instr::Load {
        width: Width::B32,
        d: DataReg::M(d),
        base,
        mode: AddrMode::Offset(off),
    }
}
/// `ld64step $aD:, $mB+=inc`
pub fn ld64step(d: APair, base: MReg, inc: i16) -> Instr {
    Instr::Load {
        width: Width::B64,
        d: DataReg::A(d.0),
        base,
        mode: AddrMode::PostInc(inc),
    }
}
/// `ld32step $aD, $mB+=inc`
pub fn ld32step_a(d: AReg, base: MReg, inc: i16) -> Instr {
    Instr::Load {
        width: Width::B32,
        d: DataReg::A(d.0),
        base,
        mode: AddrMode::PostInc(inc),
    }
}
/// `st64step $aS:, $mB+=inc`
pub fn st64step(s: APair, base: MReg, inc: i16) -> Instr {
    Instr::Store {
        width: Width::B64,
        s: DataReg::A(s.0),
        base,
        mode: AddrMode::PostInc(inc),
    }
}
/// `st32step $aS, $mB+=inc`
pub fn st32step_a(s: AReg, base: MReg, inc: i16) -> Instr {
    Instr::Store {
        width: Width::B32,
        s: DataReg::A(s.0),
        base,
        mode: AddrMode::PostInc(inc),
    }
}
/// `ldz8step $mD, $mB+=inc`
pub fn ldz8step_m(d: MReg, base: MReg, inc: i16) -> Instr {
    Instr::Load {
        width: Width::B8,
        d: DataReg::M(d),
        base,
        mode: AddrMode::PostInc(inc),
    }
}
/// `ldz16step $mD, $mB+=inc`
pub fn ldz16step_m(d: MReg, base: MReg, inc: i16) -> Instr {
    Instr::Load {
        width: Width::B16,
        d: DataReg::M(d),
        base,
        mode: AddrMode::PostInc(inc),
    }
}
/// `ld32step $mD, $mB+=inc`
pub fn ld32step_m(d: MReg, base: MReg, inc: i16) -> Instr {
    Instr::Load {
        width: Width::B32,
        d: DataReg::M(d),
        base,
        mode: AddrMode::PostInc(inc),
    }
}
/// `st32step $mS, $mB+=inc`
pub fn st32step_m(s: MReg, base: MReg, inc: i16) -> Instr {
    Instr::Store {
        width: Width::B32,
        s: DataReg::M(s),
        base,
        mode: AddrMode::PostInc(inc),
    }
}
/// `st32 $mS, $mB, off`
pub fn st32m(s: MReg, base: MReg, off: i16) -> Instr {
    Instr::Store {
        width: Width::B32,
        s: DataReg::M(s),
        base,
        mode: AddrMode::Offset(off),
    }
}
/// `ld32 $mD, $mB, off` into a float register.
pub fn ld32a(d: AReg, base: MReg, off: i16) -> Instr {
    Instr::Load {
        width: Width::B32,
        d: DataReg::A(d.0),
        base,
        mode: AddrMode::Offset(off),
    }
}
/// `setzi $mD, imm`
pub fn setzi(d: MReg, imm: u32) -> Instr {
    Instr::Setzi { d, imm }
}

/// Widens the four halves in `$a{s}`, `$a{s+1}` to the f32v2 pairs `$a{d}:..`, `$a{d+2}:..`.
pub fn widen4(c: &mut Code, d: u8, s: u8) {
    c.op(conv(ConvOp::F16v2ToF32v2, d, s));
    c.op(conv(ConvOp::F16v2ToF32v2, d + 2, s + 1));
}

/// Narrows the f32v2 pairs `$a{s}:..`, `$a{s+2}:..` to four halves in `$a{d}`, `$a{d+1}`.
pub fn narrow4(c: &mut Code, d: u8, s: u8) {
    c.op(conv(ConvOp::F32v2ToF16v2, d, s));
    c.op(conv(ConvOp::F32v2ToF16v2, d + 1, s + 2));
}

/// `alu` register-register integer operation.
pub fn alu(op: AluOp, d: MReg, a: MReg, b: MReg) -> Instr {
    Instr::Alu { op, d, a, b }
}
/// `alu` with an immediate.
/// `$mD = $mS`, as `add $mD, $mS, 0`.
pub fn mov_m(d: MReg, s: MReg) -> Instr {
    alu_imm(AluOp::Add, d, s, 0)
}

pub fn alu_imm(op: AluOp, d: MReg, a: MReg, imm: i16) -> Instr {
    Instr::AluImm { op, d, a, imm }
}
/// A binary float operation on registers `d`, `a`, `b`.
pub fn fbin(ty: FType, op: FBinOp, d: u8, a: u8, b: u8) -> Instr {
    Instr::FBin { ty, op, d, a, b }
}
/// A unary float operation.
pub fn fun(ty: FType, op: FUnOp, d: u8, a: u8) -> Instr {
    Instr::FUn { ty, op, d, a }
}
/// A conversion.
pub fn conv(op: ConvOp, d: u8, a: u8) -> Instr {
    Instr::Conv { op, d, a }
}
/// `$aD = $mS`.
pub fn mov_a(d: u8, s: MReg) -> Instr {
    Instr::MovToA { d: a(d), a: s }
}
/// `$aD:D+1 = ($aS, $aS)`.
pub fn bcast(d: u8, s: u8) -> Instr {
    Instr::Bcast {
        ty: FType::F32v2,
        d: ap(d),
        a: a(s),
    }
}
/// `st32 $aS, $mB, off`
pub fn st32_a(s: u8, base: MReg, off: i16) -> Instr {
    Instr::Store {
        width: Width::B32,
        s: DataReg::A(s),
        base,
        mode: AddrMode::Offset(off),
    }
}
/// `ld64 $aD:, $mB, off`
pub fn ld64_at(d: u8, base: MReg, off: i16) -> Instr {
    Instr::Load {
        width: Width::B64,
        d: DataReg::A(d),
        base,
        mode: AddrMode::Offset(off),
    }
}
/// `st64 $aS:, $mB, off`
pub fn st64_at(s: u8, base: MReg, off: i16) -> Instr {
    Instr::Store {
        width: Width::B64,
        s: DataReg::A(s),
        base,
        mode: AddrMode::Offset(off),
    }
}
/// `li d, value`: two words.
pub fn li(c: &mut Code, d: MReg, value: u32) {
    c.op(setzi(d, value & 0xFFFF));
    c.op(Instr::Orhi {
        d,
        imm: (value >> 16) as u16,
    });
}
/// Loads vertex-state words `0..n` into `$m1..=$mn`.
pub fn load_state(c: &mut Code, n: u8) {
    for i in 0..n {
        c.op(ld32m(m(i + 1), m(0), 4 * i as i16));
    }
}
/// Branches to `end` if any of `counts` is zero, then decrements each, so that a loop closed
/// by `brnzdec` on a count runs that many times.
pub fn loop_counts(c: &mut Code, counts: &[MReg], end: Label) {
    for &count in counts {
        c.branch(
            Instr::Brz {
                a: count,
                target: 0,
            },
            end,
        );
    }
    for &count in counts {
        c.op(alu_imm(AluOp::Sub, count, count, 1));
    }
}
/// Closes a loop over `rows` rows begun at `row` (counted as [`loop_counts`] sets up), then
/// binds `end` and ends the worker.
pub fn close_rows_and_exit(c: &mut Code, rows: MReg, row: Label, end: Label) {
    c.branch(Instr::Brnzdec { a: rows, target: 0 }, row);
    exit_at(c, end);
}

/// A new label `end` that a zero `count` branches to, for [`exit_at`] to bind.
pub fn exit_if_zero(c: &mut Code, count: MReg) -> Label {
    let end = c.label();
    c.branch(
        Instr::Brz {
            a: count,
            target: 0,
        },
        end,
    );
    end
}

/// Binds `end` and ends the worker there.
pub fn exit_at(c: &mut Code, end: Label) {
    c.bind(end);
    c.op(Instr::Exit);
}
/// An `rpt` over the single instructions `body` emits; returns the body's slot count.
pub fn rpt(c: &mut Code, count: MReg, body: impl FnOnce(&mut Code)) -> u32 {
    c.op(Instr::Rpt { count, body: 0 });
    let at = c.len() - 1;
    body(c);
    let n = (c.len() - at - 1) as u8;
    c.patch(at, |i| match i {
        Instr::Rpt { count, .. } => Instr::Rpt { count, body: n },
        other => other,
    });
    n as u32
}
