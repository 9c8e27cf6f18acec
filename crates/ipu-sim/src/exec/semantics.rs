//! What a slot does, in either context: the main pipeline (memory accesses, recorded for the
//! race check and charged for bank conflicts; integer arithmetic; control flow), the float
//! pipeline and the `amp` instruction, each half reading its operands before either writes
//! ([`Tile::exec_slot`]); and a worker's slot that only computes, run from its decoded halves
//! ([`Tile::exec_data_slot`]).

use ipu_isa::{Class, DataReg, Instr, MReg, Slot, SysReg, Width};
use ipu_target::SUPERVISOR_CONTEXT;

use crate::fault::FaultKind;

use super::amp::{AmpAcc, amp_run, amp_step};
use super::decode::{FloatOp, MainOp, Op, SlotAt, float_instr, main_instr};
use super::float::{NO_WRITE, decoded_float, float_trap, float_value};
use super::regs::{AWrite, Regs, commit, pair, set_pair};
use super::trap::{R, Trap, trap};
use super::{Flow, Tile};

/// The trap of an instruction the main pipeline does not execute.
#[cold]
#[inline(never)]
fn not_main(instr: &Instr) -> Trap {
    if instr.class() == Class::Supervisor {
        return trap(FaultKind::SupervisorOnly, None);
    }
    trap(
        FaultKind::IllegalOperands("not a main-pipeline instruction"),
        None,
    )
}

impl Tile {
    #[inline(always)]
    fn check(&self, addr: u32, len: u32) -> R<()> {
        if !self.mem.contains(addr, len) {
            return Err(trap(FaultKind::OutOfRange { bytes: len }, Some(addr)));
        }
        if addr & (len - 1) != 0 {
            return Err(trap(FaultKind::Misaligned { align: len }, Some(addr)));
        }
        Ok(())
    }

    #[inline(always)]
    fn load64(&mut self, addr: u32) -> R<[u32; 2]> {
        self.check(addr, 8)?;
        self.tracker.note(addr, 8, false);
        let s = self.mem.slice(addr, 8);
        Ok([
            u32::from_le_bytes([s[0], s[1], s[2], s[3]]),
            u32::from_le_bytes([s[4], s[5], s[6], s[7]]),
        ])
    }

    #[inline(always)]
    fn load32(&mut self, addr: u32) -> R<u32> {
        self.check(addr, 4)?;
        self.tracker.note(addr, 4, false);
        let s = self.mem.slice(addr, 4);
        Ok(u32::from_le_bytes([s[0], s[1], s[2], s[3]]))
    }

    #[inline(always)]
    fn store_bytes(&mut self, addr: u32, bytes: &[u8]) -> R<()> {
        let len = bytes.len() as u32;
        self.check(addr, len)?;
        self.tracker.note(addr, len, true);
        self.mem.slice_mut(addr, len).copy_from_slice(bytes);
        if addr < self.code.top() {
            self.code.invalidate(addr, len);
        }
        Ok(())
    }

    #[inline(always)]
    fn store64(&mut self, addr: u32, v: [u32; 2]) -> R<()> {
        let mut b = [0u8; 8];
        b[..4].copy_from_slice(&v[0].to_le_bytes());
        b[4..].copy_from_slice(&v[1].to_le_bytes());
        self.store_bytes(addr, &b)
    }

    /// The paced forms: `loads[i]` from `pointers[i]`, then the pair `store` (read before any
    /// load lands) to the pointer after them; then every pointer advances by 8, in order, and
    /// the loaded pairs are written last.
    #[inline(always)]
    fn paced<const L: usize>(
        &mut self,
        r: &mut Regs,
        loads: [ipu_isa::APair; L],
        store: Option<ipu_isa::APair>,
        pointers: &[MReg],
    ) -> R<()> {
        let mut values = [[0u32; 2]; L];
        let mut addrs = [0u32; 3];
        for ((v, p), a) in values.iter_mut().zip(pointers).zip(&mut addrs) {
            *a = r.m[p.0 as usize & 15];
            *v = self.load64(*a)?;
        }
        if let Some(s) = store {
            addrs[L] = r.m[pointers[L].0 as usize & 15];
            self.store64(addrs[L], pair(r, s.0))?;
        }
        // Only the loads can conflict (`ipu_target::BANK_CONFLICT_SLOTS`).
        let n = self.target.bank_conflicts(&addrs[..L]);
        if n != 0 {
            self.conflict(n);
        }
        for p in pointers {
            let p = p.0 as usize & 15;
            r.m[p] = r.m[p].wrapping_add(8);
        }
        for (d, v) in loads.into_iter().zip(values) {
            set_pair(r, d.0, v);
        }
        Ok(())
    }

    /// Counts `n` bank conflicts of the running context's issue and stalls it.
    #[cold]
    pub(super) fn conflict(&mut self, n: u32) {
        self.counters.bank_conflicts += n as u64;
        self.stall += n * ipu_target::BANK_CONFLICT_SLOTS;
        let e = self.entry;
        match self.entry_conflicts.iter_mut().find(|(x, _)| *x == e) {
            Some((_, c)) => *c += n as u64,
            None => self.entry_conflicts.push((e, n as u64)),
        }
    }

    /// Executes one main-pipeline or control instruction.
    #[inline(always)]
    fn exec_main(&mut self, r: &mut Regs, instr: &Instr, pc: u32, ctx: u32, now: u64) -> R<Flow> {
        if instr.class() == Class::Main {
            self.exec_data(r, instr, ctx, now)?;
            Ok(Flow::Next)
        } else {
            self.exec_control(r, instr, pc, ctx)
        }
    }

    /// Executes one main-pipeline instruction (of class `Main`: it never changes control flow).
    #[inline(always)]
    fn exec_data(&mut self, r: &mut Regs, instr: &Instr, ctx: u32, now: u64) -> R<()> {
        let m = |r: &Regs, x: MReg| r.m[x.0 as usize & 15];
        match *instr {
            Instr::Nop => {}
            Instr::Alu { op, d, a, b } => r.m[d.0 as usize & 15] = op.apply(m(r, a), m(r, b)),
            Instr::AluImm { op, d, a, imm } => {
                r.m[d.0 as usize & 15] = op.apply(m(r, a), imm as i32 as u32)
            }
            Instr::Setzi { d, imm } => r.m[d.0 as usize & 15] = imm,
            Instr::Orhi { d, imm } => r.m[d.0 as usize & 15] |= (imm as u32) << 16,
            Instr::Get { d, sys } => {
                r.m[d.0 as usize & 15] = match sys {
                    SysReg::TileId => self.id,
                    SysReg::ContextId => ctx,
                    SysReg::Cycles => now as u32,
                }
            }
            Instr::MovToA { d, a } => r.a[d.0 as usize & 15] = m(r, a),
            Instr::MovToM { d, a } => r.m[d.0 as usize & 15] = r.a[a.0 as usize & 15],
            Instr::Load {
                width,
                d,
                base,
                mode,
            } => {
                let addr = r.address(base, mode);
                let len = width.bytes();
                self.check(addr, len)?;
                if width == Width::B128 && !self.target.in_interleaved(addr, 16) {
                    return Err(trap(FaultKind::NotInterleaved, Some(addr)));
                }
                self.tracker.note(addr, len, false);
                r.post_increment(base, mode);
                let s = self.mem.slice(addr, len);
                match (width, d) {
                    (Width::B8, DataReg::M(x)) => r.m[x.0 as usize & 15] = s[0] as u32,
                    (Width::B16, DataReg::M(x)) => {
                        r.m[x.0 as usize & 15] = u16::from_le_bytes([s[0], s[1]]) as u32
                    }
                    (Width::B32, DataReg::M(x)) => {
                        r.m[x.0 as usize & 15] = u32::from_le_bytes([s[0], s[1], s[2], s[3]])
                    }
                    (Width::B32, DataReg::A(x)) => {
                        r.a[x as usize & 15] = u32::from_le_bytes([s[0], s[1], s[2], s[3]])
                    }
                    // A pair or a quad, aligned to its size: one register per word.
                    (Width::B64 | Width::B128, DataReg::A(x))
                        if x.is_multiple_of(len as u8 / 4) && x < 16 =>
                    {
                        for (i, w) in s.chunks_exact(4).enumerate() {
                            r.a[x as usize + i] =
                                u32::from_le_bytes(w.try_into().expect("4 bytes"));
                        }
                    }
                    _ => {
                        return Err(trap(
                            FaultKind::IllegalOperands("load register does not fit its width"),
                            Some(addr),
                        ));
                    }
                }
            }
            Instr::Store {
                width,
                s,
                base,
                mode,
            } => {
                let addr = r.address(base, mode);
                match (width, s) {
                    (Width::B8 | Width::B16, _) => {
                        return Err(trap(FaultKind::SubWordStore, Some(addr)));
                    }
                    (Width::B32, DataReg::M(x)) => {
                        self.store_bytes(addr, &r.m[x.0 as usize & 15].to_le_bytes())?
                    }
                    (Width::B32, DataReg::A(x)) => {
                        self.store_bytes(addr, &r.a[x as usize & 15].to_le_bytes())?
                    }
                    (Width::B64, DataReg::A(x)) if x.is_multiple_of(2) && x < 16 => {
                        self.store64(addr, [r.a[x as usize], r.a[x as usize + 1]])?
                    }
                    _ => {
                        return Err(trap(
                            FaultKind::IllegalOperands("store register does not fit its width"),
                            Some(addr),
                        ));
                    }
                }
                r.post_increment(base, mode);
            }
            Instr::Ld2x64Pace { d, p } => self.paced(r, d, None, &p)?,
            Instr::LdSt64Pace { d, s, p } => self.paced(r, [d], Some(s), &p)?,
            Instr::Ld2xSt64Pace { d, s, p } => self.paced(r, d, Some(s), &p)?,
            Instr::SetFp8 { format, scale } => {
                r.fp8_format = format;
                r.fp8_scale = scale;
            }
            _ => return Err(not_main(instr)),
        }
        Ok(())
    }

    /// Executes one instruction that is not of class `Main`: control flow, or a fault.
    #[inline(always)]
    fn exec_control(&mut self, r: &mut Regs, instr: &Instr, pc: u32, ctx: u32) -> R<Flow> {
        let m = |r: &Regs, x: MReg| r.m[x.0 as usize & 15];
        match *instr {
            Instr::Br { a } => return Ok(Flow::Jump(m(r, a))),
            Instr::Bri { target } => return Ok(Flow::Jump(target)),
            Instr::Brz { a, target } => {
                if m(r, a) == 0 {
                    return Ok(Flow::Jump(target));
                }
            }
            Instr::Brnz { a, target } => {
                if m(r, a) != 0 {
                    return Ok(Flow::Jump(target));
                }
            }
            Instr::Brnzdec { a, target } => {
                let i = a.0 as usize & 15;
                if r.m[i] != 0 {
                    r.m[i] -= 1;
                    return Ok(Flow::Jump(target));
                }
            }
            Instr::Call { link, target } => {
                r.m[link.0 as usize & 15] = pc + 4;
                return Ok(Flow::Jump(target));
            }
            Instr::Rpt { count, body } => {
                let c = m(r, count);
                if c > ipu_target::RPT_COUNT_MAX {
                    return Err(trap(FaultKind::RptCountTooLarge(c), None));
                }
                return Ok(Flow::Rpt { count: c, body });
            }
            Instr::Rpti { count, body } => {
                return Ok(Flow::Rpt {
                    count: count as u32,
                    body,
                });
            }
            Instr::Exit => {
                if ctx == SUPERVISOR_CONTEXT {
                    return Err(trap(FaultKind::WorkerOnly, None));
                }
                return Ok(Flow::Exit);
            }
            _ => return Err(not_main(instr)),
        }
        Ok(Flow::Next)
    }

    /// Executes one float-pipeline instruction into a pending write.
    #[inline(always)]
    fn exec_float(&self, r: &Regs, acc: &mut AmpAcc, instr: &Instr, ctx: u32) -> R<AWrite> {
        if let Instr::Amp { d, a, p, phase } = *instr {
            if ctx == SUPERVISOR_CONTEXT {
                return Err(trap(FaultKind::WorkerOnly, None));
            }
            let out = amp_step(
                &self.amp,
                acc,
                pair(r, a.0),
                pair(r, p.0),
                phase,
                (r.fp8_format, r.fp8_scale),
            )?;
            return Ok(AWrite::new(d.0 & 14, 2, out));
        }
        let w = float_value(&r.a, instr, (r.fp8_format, r.fp8_scale));
        if w.n() == 0 {
            return Err(float_trap(instr));
        }
        Ok(w)
    }

    /// Executes a non-supervisor slot. Returns the control flow.
    #[inline(always)]
    pub(super) fn exec_slot(
        &mut self,
        r: &mut Regs,
        acc: &mut AmpAcc,
        slot: &Slot,
        pc: u32,
        ctx: u32,
        now: u64,
    ) -> R<Flow> {
        match slot {
            Slot::Single(i) => {
                if i.class() == Class::Float {
                    let w = self.exec_float(r, acc, i, ctx)?;
                    commit(r, w);
                    Ok(Flow::Next)
                } else {
                    self.exec_main(r, i, pc, ctx, now)
                }
            }
            Slot::Bundle(b) => {
                // Both halves read their operands before either writes: the float half is
                // computed first into a pending write, committed after the main half.
                if let Instr::Amp { d, a, p, phase } = b.float {
                    // As `exec_float` then `commit`, with the result kept in registers.
                    if ctx == SUPERVISOR_CONTEXT {
                        return Err(trap(FaultKind::WorkerOnly, None));
                    }
                    let out = amp_step(
                        &self.amp,
                        acc,
                        pair(r, a.0),
                        pair(r, p.0),
                        phase,
                        (r.fp8_format, r.fp8_scale),
                    )?;
                    let flow = self.exec_main(r, &b.main, pc, ctx, now)?;
                    set_pair(r, d.0, out);
                    return Ok(flow);
                }
                let w = self.exec_float(r, acc, &b.float, ctx)?;
                let flow = self.exec_main(r, &b.main, pc, ctx, now)?;
                commit(r, w);
                Ok(flow)
            }
        }
    }

    /// Executes a worker's slot that only computes ([`Decoded::data`]) from its decoded halves:
    /// as [`Tile::exec_slot`] without the control-flow result (the float half reads its
    /// operands first and writes last; traps in the same order).
    #[inline(always)]
    pub(super) fn exec_data_slot(
        &mut self,
        r: &mut Regs,
        acc: &mut AmpAcc,
        op: &Op,
        slot: SlotAt,
        ctx: u32,
        now: u64,
    ) -> R<()> {
        let w = match op.float {
            FloatOp::None => NO_WRITE,
            FloatOp::Amp { d: o, a, p, phase } => {
                if ctx == SUPERVISOR_CONTEXT {
                    return Err(trap(FaultKind::WorkerOnly, None));
                }
                let Some(mode) = self.amp.mode else {
                    return Err(trap(FaultKind::AmpNotConfigured, None));
                };
                let out = amp_run(
                    &self.amp,
                    mode,
                    acc,
                    pair(r, a),
                    pair(r, p),
                    phase as usize,
                    (r.fp8_format, r.fp8_scale),
                );
                AWrite::new(o, 2, out)
            }
            FloatOp::Other => {
                // The instruction itself (from the cache: the loop copies only the `Op`).
                let i = match slot {
                    SlotAt::Here(s) => *float_instr(s),
                    SlotAt::Cached(pc) => self.instr_at(pc, float_instr)?,
                };
                self.exec_float(r, acc, &i, ctx)?
            }
            f => decoded_float(&r.a, f),
        };
        match op.main {
            MainOp::None => {}
            MainOp::Ld64 {
                d: x,
                base,
                off,
                inc,
            } => {
                let b = base as usize;
                let addr = r.m[b].wrapping_add(off as i32 as u32);
                let v = self.load64(addr)?;
                r.m[b] = r.m[b].wrapping_add(inc as i32 as u32);
                set_pair(r, x, v);
            }
            MainOp::St64 { s, base, off, inc } => {
                let b = base as usize;
                let addr = r.m[b].wrapping_add(off as i32 as u32);
                self.store64(addr, pair(r, s))?;
                r.m[b] = r.m[b].wrapping_add(inc as i32 as u32);
            }
            MainOp::Ld32 {
                to_a,
                d: x,
                base,
                off,
                inc,
            } => {
                // As `exec_data`: checked, recorded, the base advanced, then the register set.
                let b = base as usize;
                let addr = r.m[b].wrapping_add(off as i32 as u32);
                let v = self.load32(addr)?;
                r.m[b] = r.m[b].wrapping_add(inc as i32 as u32);
                if to_a {
                    r.a[x as usize] = v;
                } else {
                    r.m[x as usize] = v;
                }
            }
            MainOp::Setzi { d: x, imm } => r.m[x as usize] = imm,
            MainOp::MovToA { d: x, a } => r.a[x as usize] = r.m[a as usize],
            MainOp::Get { d: x, sys } => {
                r.m[x as usize] = match sys {
                    SysReg::TileId => self.id,
                    SysReg::ContextId => ctx,
                    SysReg::Cycles => now as u32,
                }
            }
            MainOp::Nop => {}
            MainOp::LdSt64Pace { d: x, s, p } => self.paced(r, [x], Some(s), &p)?,
            MainOp::Ld2xSt64Pace { d: x, s, p } => self.paced(r, x, Some(s), &p)?,
            MainOp::Ld2x64Pace { d: x, p } => self.paced(r, x, None, &p)?,
            MainOp::Alu { op, d: x, a, b } => {
                r.m[x as usize] = op.apply(r.m[a as usize], r.m[b as usize]);
            }
            MainOp::AluImm { op, d: x, a, imm } => {
                r.m[x as usize] = op.apply(r.m[a as usize], imm as i32 as u32);
            }
            MainOp::Other => {
                let i = match slot {
                    SlotAt::Here(s) => *main_instr(s),
                    SlotAt::Cached(pc) => self.instr_at(pc, main_instr)?,
                };
                self.exec_data(r, &i, ctx, now)?
            }
        }
        if w.n() != 0 {
            commit(r, w);
        }
        Ok(())
    }
}
