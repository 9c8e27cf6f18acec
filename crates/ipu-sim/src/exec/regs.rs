//! A context's registers, and the float pipeline's writes into them.

use ipu_isa::{AddrMode, Fp8Format, MReg};

/// A context's registers.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Regs {
    pub m: [u32; 16],
    pub a: [u32; 16],
    pub pc: u32,
    pub fp8_format: Fp8Format,
    pub fp8_scale: i8,
}

impl Regs {
    /// The address a load or store through `base` accesses.
    #[inline]
    pub(super) fn address(&self, base: MReg, mode: AddrMode) -> u32 {
        let b = self.m[base.0 as usize & 15];
        match mode {
            AddrMode::Offset(i) => b.wrapping_add(i as i32 as u32),
            AddrMode::PostInc(_) => b,
        }
    }

    /// The base register's update after the access.
    #[inline]
    pub(super) fn post_increment(&mut self, base: MReg, mode: AddrMode) {
        if let AddrMode::PostInc(i) = mode {
            let b = base.0 as usize & 15;
            self.m[b] = self.m[b].wrapping_add(i as i32 as u32);
        }
    }
}

impl Default for Regs {
    fn default() -> Self {
        Regs {
            m: [0; 16],
            a: [0; 16],
            pc: 0,
            fp8_format: Fp8Format::F143,
            fp8_scale: 0,
        }
    }
}

/// A pending float-register write: `n` registers from `d`. Two scalars (the values, then `d`
/// and `n`), so that it is returned in registers.
#[derive(Clone, Copy)]
pub(super) struct AWrite {
    /// The first register's value in the low half, the second's in the high half.
    pub(super) v: u64,
    /// `d | n << 8`.
    pub(super) dn: u32,
}

impl AWrite {
    #[inline(always)]
    pub(super) const fn new(d: u8, n: u8, v: [u32; 2]) -> AWrite {
        AWrite {
            v: v[0] as u64 | (v[1] as u64) << 32,
            dn: d as u32 | (n as u32) << 8,
        }
    }

    #[inline(always)]
    pub(super) fn d(self) -> u8 {
        self.dn as u8
    }

    #[inline(always)]
    pub(super) fn n(self) -> u8 {
        (self.dn >> 8) as u8
    }
}

#[inline(always)]
pub(super) fn pair(r: &Regs, i: u8) -> [u32; 2] {
    let i = i as usize & 14;
    [r.a[i], r.a[i + 1]]
}

/// Writes the pair from `i`, as one 64-bit value: the next read of the pair is usually one
/// 64-bit load (a store), which two 32-bit writes would stall.
#[inline(always)]
pub(super) fn set_pair(r: &mut Regs, i: u8, v: [u32; 2]) {
    let i = i as usize & 14;
    let w = v[0] as u64 | (v[1] as u64) << 32;
    r.a[i] = w as u32;
    r.a[i + 1] = (w >> 32) as u32;
}

#[inline(always)]
pub(super) fn commit(r: &mut Regs, w: AWrite) {
    let d = w.d() as usize;
    if w.n() == 2 && d & 1 == 0 {
        // As `set_pair`: one 64-bit write.
        r.a[d & 14] = w.v as u32;
        r.a[(d & 14) + 1] = (w.v >> 32) as u32;
        return;
    }
    r.a[d] = w.v as u32;
    if w.n() == 2 {
        r.a[(d + 1) & 15] = (w.v >> 32) as u32;
    }
}
