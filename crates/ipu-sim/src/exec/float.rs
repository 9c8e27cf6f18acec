//! Float semantics: f16 conversions, the float pipeline's arithmetic on lanes, and the register
//! writes of float-pipeline instructions, from the instruction ([`float_value`]) and from a
//! decoded float half ([`decoded_float`]).

use ipu_isa::{ConvOp, FBinOp, FType, FUnOp, Fp8Format, Instr, RedOp};

use crate::fault::FaultKind;

use super::decode::FloatOp;
use super::regs::{AWrite, Regs, commit};
use super::trap::{R, Trap, trap};

#[inline(always)]
pub(super) fn f(bits: u32) -> f32 {
    f32::from_bits(bits)
}

/// f16 bits (low 16 of `bits`) to f32, exactly; a NaN keeps its payload and becomes quiet (as
/// the x86 `vcvtph2ps` instruction and the `half` crate do).
#[inline(always)]
pub fn h(bits: u32) -> f32 {
    let sign = (bits & 0x8000) << 16;
    let exp = (bits >> 10) & 0x1F;
    let man = bits & 0x3FF;
    if exp == 0 {
        let v = man as f32 * (1.0 / 16_777_216.0);
        return f32::from_bits(v.to_bits() | sign);
    }
    if exp == 31 {
        let quiet = if man != 0 { 0x0040_0000 } else { 0 };
        return f32::from_bits(sign | 0x7F80_0000 | quiet | man << 13);
    }
    f32::from_bits(sign | (exp + 112) << 23 | man << 13)
}

/// f32 to f16 bits, rounding to nearest even (overflow gives infinity; a NaN stays a quiet
/// NaN with the top of its payload), as `half::f16::from_f32` does.
#[inline(always)]
pub fn to_h(x: f32) -> u32 {
    let b = x.to_bits();
    let sign = (b >> 16) & 0x8000;
    let exp = ((b >> 23) & 0xFF) as i32;
    let man = b & 0x7F_FFFF;
    if exp == 0xFF {
        return if man == 0 {
            sign | 0x7C00
        } else {
            sign | 0x7E00 | man >> 13
        };
    }
    let e = exp - 112;
    if e >= 31 {
        return sign | 0x7C00;
    }
    if e <= 0 {
        if e < -10 {
            return sign;
        }
        let m = man | 0x80_0000;
        let shift = (14 - e) as u32;
        let mut half = m >> shift;
        let rem = m & ((1 << shift) - 1);
        let halfway = 1 << (shift - 1);
        if rem > halfway || (rem == halfway && half & 1 == 1) {
            half += 1;
        }
        return sign | half;
    }
    let mut half = (e as u32) << 10 | man >> 13;
    let rem = man & 0x1FFF;
    if rem > 0x1000 || (rem == 0x1000 && half & 1 == 1) {
        half += 1;
    }
    sign | half
}

pub(super) fn numerics_format(f: Fp8Format) -> ipu_numerics::Fp8Format {
    match f {
        Fp8Format::F143 => ipu_numerics::Fp8Format::F143,
        Fp8Format::F152 => ipu_numerics::Fp8Format::F152,
    }
}

/// f32 binary operation; comparisons give a mask.
#[inline]
pub(crate) fn op_f32(op: FBinOp, x: f32, y: f32, d: f32) -> u32 {
    match op {
        FBinOp::Add => (x + y).to_bits(),
        FBinOp::Sub => (x - y).to_bits(),
        FBinOp::Mul => (x * y).to_bits(),
        FBinOp::Mac => x.mul_add(y, d).to_bits(),
        FBinOp::Max => x.max(y).to_bits(),
        FBinOp::Min => x.min(y).to_bits(),
        FBinOp::CmpLt => mask32(x < y),
        FBinOp::CmpLe => mask32(x <= y),
        FBinOp::CmpEq => mask32(x == y),
    }
}

fn mask32(b: bool) -> u32 {
    if b { u32::MAX } else { 0 }
}

/// f16 binary operation on bit patterns: computed in f32, rounded to f16 once.
#[inline(always)]
pub(crate) fn op_f16(op: FBinOp, x: u32, y: u32, d: u32) -> u32 {
    let (xf, yf, df) = (h(x), h(y), h(d));
    match op {
        FBinOp::CmpLt => mask16(xf < yf),
        FBinOp::CmpLe => mask16(xf <= yf),
        FBinOp::CmpEq => mask16(xf == yf),
        _ => to_h(f(op_f32(op, xf, yf, df))),
    }
}

#[inline(always)]
fn mask16(b: bool) -> u32 {
    if b { 0xFFFF } else { 0 }
}

/// f32 unary operation.
pub(crate) fn un_f32(op: FUnOp, x: f32) -> f32 {
    match op {
        FUnOp::Mov => x,
        FUnOp::Abs => x.abs(),
        FUnOp::Neg => -x,
        FUnOp::Exp => x.exp(),
        FUnOp::Rcp => 1.0 / x,
        FUnOp::Sqrt => x.sqrt(),
        FUnOp::Rsqrt => 1.0 / x.sqrt(),
    }
}

/// Unary operation on one f16 lane (bit pattern): bit operations for mov/abs/neg, the rest
/// computed in f32 and rounded once.
pub(crate) fn un_f16(op: FUnOp, x: u32) -> u32 {
    let x = x & 0xFFFF;
    match op {
        FUnOp::Mov => x,
        FUnOp::Abs => x & 0x7FFF,
        FUnOp::Neg => x ^ 0x8000,
        _ => to_h(un_f32(op, h(x))),
    }
}

/// Lanes of a float type from registers starting at `r`.
#[inline(always)]
fn lanes(a: &[u32; 16], ty: FType, r: u8) -> ([u32; 4], usize) {
    let r = r as usize & 15;
    match ty {
        FType::F32 => ([a[r], 0, 0, 0], 1),
        FType::F32v2 => {
            let r = r & 14;
            ([a[r], a[r + 1], 0, 0], 2)
        }
        FType::F16v2 => ([a[r] & 0xFFFF, a[r] >> 16, 0, 0], 2),
        FType::F16v4 => {
            let r = r & 14;
            (
                [a[r] & 0xFFFF, a[r] >> 16, a[r + 1] & 0xFFFF, a[r + 1] >> 16],
                4,
            )
        }
    }
}

/// Packs lanes of `ty` into a register write at `d`.
#[inline(always)]
fn pack(ty: FType, d: u8, l: [u32; 4]) -> AWrite {
    match ty {
        FType::F32 => AWrite::new(d & 15, 1, [l[0], 0]),
        FType::F32v2 => AWrite::new(d & 14, 2, [l[0], l[1]]),
        FType::F16v2 => AWrite::new(d & 15, 1, [l[0] | l[1] << 16, 0]),
        FType::F16v4 => AWrite::new(d & 14, 2, [l[0] | l[1] << 16, l[2] | l[3] << 16]),
    }
}

fn is_f16(ty: FType) -> bool {
    matches!(ty, FType::F16v2 | FType::F16v4)
}

/// The semantics of a float-pipeline instruction (other than `amp`): the register write.
fn float_result(a: &[u32; 16], instr: &Instr, fp8: (Fp8Format, i8)) -> R<AWrite> {
    let w = float_value(a, instr, fp8);
    if w.n() == 0 {
        return Err(float_trap(instr));
    }
    Ok(w)
}

/// A write of no registers: what [`float_value`] returns for an instruction that traps.
pub(super) const NO_WRITE: AWrite = AWrite::new(0, 0, [0, 0]);

/// The trap of a float-pipeline instruction (other than `amp`) that [`float_value`] refuses.
#[cold]
#[inline(never)]
pub(super) fn float_trap(instr: &Instr) -> Trap {
    let why = match *instr {
        Instr::FReduce { ty, .. } if !ty.is_pair() => "reduction of a non-pair type",
        Instr::Bcast { .. } => "broadcast type",
        _ => "not a float-pipeline instruction",
    };
    trap(FaultKind::IllegalOperands(why), None)
}

/// [`float_result`] with a trap returned as [`NO_WRITE`] (then [`float_trap`] says which), so
/// that the write comes back in registers.
pub(super) fn float_value(a: &[u32; 16], instr: &Instr, fp8: (Fp8Format, i8)) -> AWrite {
    match *instr {
        Instr::FBin {
            ty,
            op,
            d,
            a: x,
            b: y,
        } => {
            let (la, n) = lanes(a, ty, x);
            let (lb, _) = lanes(a, ty, y);
            let (ld, _) = lanes(a, ty, d);
            let mut out = [0u32; 4];
            for i in 0..n {
                out[i] = if is_f16(ty) {
                    op_f16(op, la[i], lb[i], ld[i])
                } else {
                    op_f32(op, f(la[i]), f(lb[i]), f(ld[i]))
                };
            }
            pack(ty, d, out)
        }
        Instr::FUn { ty, op, d, a: x } => {
            let (la, n) = lanes(a, ty, x);
            let mut out = [0u32; 4];
            for i in 0..n {
                out[i] = if is_f16(ty) {
                    un_f16(op, la[i])
                } else {
                    match op {
                        FUnOp::Mov => la[i],
                        FUnOp::Abs => la[i] & 0x7FFF_FFFF,
                        FUnOp::Neg => la[i] ^ 0x8000_0000,
                        _ => un_f32(op, f(la[i])).to_bits(),
                    }
                };
            }
            pack(ty, d, out)
        }
        Instr::FReduce { ty, op, d, a: x } => {
            if !ty.is_pair() {
                return NO_WRITE;
            }
            let (l, n) = lanes(a, ty, x.0);
            let v = |i: usize| if is_f16(ty) { h(l[i]) } else { f(l[i]) };
            let mut r = v(0);
            for i in 1..n {
                r = match op {
                    RedOp::Sum => r + v(i),
                    RedOp::Max => r.max(v(i)),
                };
            }
            AWrite::new(d.0 & 15, 1, [r.to_bits(), 0])
        }
        Instr::Conv { op, d, a: x } => conv(a, op, d, x, fp8),
        Instr::Bcast { ty, d, a: x } => {
            let v = a[x.0 as usize & 15];
            match ty {
                FType::F32v2 => AWrite::new(d.0 & 14, 2, [v, v]),
                FType::F16v4 => {
                    let l = v & 0xFFFF;
                    AWrite::new(d.0 & 14, 2, [l | l << 16, l | l << 16])
                }
                _ => NO_WRITE,
            }
        }
        Instr::F16v2Pack { d, a: x, b: y } => AWrite::new(
            d.0 & 15,
            1,
            [
                (a[x.0 as usize & 15] & 0xFFFF) | (a[y.0 as usize & 15] << 16),
                0,
            ],
        ),
        Instr::F16v2PackHi { d, a: x, b: y } => AWrite::new(
            d.0 & 15,
            1,
            [
                (a[x.0 as usize & 15] >> 16) | (a[y.0 as usize & 15] & 0xFFFF_0000),
                0,
            ],
        ),
        _ => NO_WRITE,
    }
}

/// The semantics of a conversion.
fn conv(a: &[u32; 16], op: ConvOp, d: u8, x: u8, fp8: (Fp8Format, i8)) -> AWrite {
    let s = x as usize & 15;
    let p = x as usize & 14;
    let (fmt, scale) = (numerics_format(fp8.0), fp8.1 as i32);
    match op {
        ConvOp::F32ToF16 => AWrite::new(d & 15, 1, [to_h(f(a[s])), 0]),
        ConvOp::F16ToF32 => AWrite::new(d & 15, 1, [h(a[s]).to_bits(), 0]),
        ConvOp::F32v2ToF16v2 => {
            AWrite::new(d & 15, 1, [to_h(f(a[p])) | to_h(f(a[p + 1])) << 16, 0])
        }
        ConvOp::F16v2ToF32v2 => {
            AWrite::new(d & 14, 2, [h(a[s]).to_bits(), h(a[s] >> 16).to_bits()])
        }
        ConvOp::F16v4ToF8v4 => {
            let mut out = 0u32;
            for i in 0..4 {
                let lane = a[p + i / 2] >> (16 * (i % 2));
                let code =
                    ipu_numerics::encode(fmt, h(lane), scale, ipu_numerics::Overflow::Saturate);
                out |= (code as u32) << (8 * i);
            }
            AWrite::new(d & 15, 1, [out, 0])
        }
        ConvOp::F8v4ToF16v4 => {
            let mut l = [0u32; 4];
            for (i, lane) in l.iter_mut().enumerate() {
                *lane = to_h(ipu_numerics::decode(fmt, (a[s] >> (8 * i)) as u8, scale));
            }
            AWrite::new(d & 14, 2, [l[0] | l[1] << 16, l[2] | l[3] << 16])
        }
        ConvOp::F32ToI32 => AWrite::new(d & 15, 1, [(f(a[s]).round_ties_even() as i32) as u32, 0]),
        ConvOp::I32ToF32 => AWrite::new(d & 15, 1, [((a[s] as i32) as f32).to_bits(), 0]),
        ConvOp::F32v4ToF16v4 => {
            let q = x as usize & 12;
            AWrite::new(
                d & 14,
                2,
                [
                    to_h(f(a[q])) | to_h(f(a[q + 1])) << 16,
                    to_h(f(a[q + 2])) | to_h(f(a[q + 3])) << 16,
                ],
            )
        }
    }
}

/// The register write of a decoded float half that only reads and writes registers
/// (`F32v2` to `Widen`), the same as [`float_value`] of its instruction; [`NO_WRITE`] for the
/// others, which the caller handles.
#[inline(always)]
pub(super) fn decoded_float(a: &[u32; 16], op: FloatOp) -> AWrite {
    match op {
        FloatOp::F32v2 { op, d: z, x, y } => {
            let (x, y, z) = (x as usize, y as usize, z as usize);
            AWrite::new(
                z as u8,
                2,
                [
                    op_f32(op, f(a[x]), f(a[y]), f(a[z])),
                    op_f32(op, f(a[x + 1]), f(a[y + 1]), f(a[z + 1])),
                ],
            )
        }
        FloatOp::F32v2Un { op, d, x } => AWrite::new(d, 2, un_f32v2(a, op, x as usize)),
        FloatOp::F16v4 { op, d: z, x, y } => {
            AWrite::new(z, 2, bin_f16v4(a, op, x as usize, y as usize, z as usize))
        }
        FloatOp::F16v4Un { op, d, x } => AWrite::new(d, 2, un_f16v4(a, op, x as usize)),
        FloatOp::Narrow { d, x } => {
            let x = x as usize;
            AWrite::new(d, 1, [to_h(f(a[x])) | to_h(f(a[x + 1])) << 16, 0])
        }
        FloatOp::Widen { d, x } => {
            let v = a[x as usize];
            AWrite::new(d, 2, [h(v).to_bits(), h(v >> 16).to_bits()])
        }
        FloatOp::None | FloatOp::Amp { .. } | FloatOp::Other => NO_WRITE,
    }
}

/// f32v2 unary operation on the pair at `x` (even), as [`float_value`]'s `FUn` arm.
#[inline(always)]
fn un_f32v2(a: &[u32; 16], op: FUnOp, x: usize) -> [u32; 2] {
    let one = |v: u32| match op {
        FUnOp::Mov => v,
        FUnOp::Abs => v & 0x7FFF_FFFF,
        FUnOp::Neg => v ^ 0x8000_0000,
        _ => un_f32(op, f(v)).to_bits(),
    };
    [one(a[x]), one(a[x + 1])]
}

/// f16v4 binary operation on the pairs at `x`, `y` and `z` (even), as [`float_value`]'s
/// `FBin` arm: lane by lane, packed.
#[inline(always)]
fn bin_f16v4(a: &[u32; 16], op: FBinOp, x: usize, y: usize, z: usize) -> [u32; 2] {
    let word = |i: usize| {
        let lane = |s: u32| {
            op_f16(
                op,
                (a[x + i] >> s) & 0xFFFF,
                (a[y + i] >> s) & 0xFFFF,
                (a[z + i] >> s) & 0xFFFF,
            )
        };
        lane(0) | lane(16) << 16
    };
    [word(0), word(1)]
}

/// f16v4 unary operation on the pair at `x` (even), as [`float_value`]'s `FUn` arm.
#[inline(always)]
fn un_f16v4(a: &[u32; 16], op: FUnOp, x: usize) -> [u32; 2] {
    let word = |v: u32| un_f16(op, v & 0xFFFF) | un_f16(op, v >> 16) << 16;
    [word(a[x]), word(a[x + 1])]
}

/// Runs one float-pipeline instruction on a register file, for tests of the semantics: the
/// returned file is `a` after the instruction. `amp` is not supported here.
pub fn eval_float(
    a: [u32; 16],
    instr: &Instr,
    fp8: (Fp8Format, i8),
) -> Result<[u32; 16], FaultKind> {
    let w = float_result(&a, instr, fp8).map_err(|t| t.0)?;
    let mut r = Regs {
        a,
        ..Regs::default()
    };
    commit(&mut r, w);
    Ok(r.a)
}

#[cfg(test)]
mod tests {
    use half::f16;

    use super::super::decode::float_op;
    use super::super::testing::xorshift;
    use super::*;

    #[test]
    fn decoded_float_halves_write_what_the_general_path_writes() {
        // Every float instruction with a decoded form, on every register (odd ones too: the
        // decoder masks them as the general path does), against `float_value`, over random
        // registers with f16 and f32 specials mixed in.
        let mut n = xorshift(0x5EED_F10A7);
        let specials = [
            0u32,
            0x8000_0000,
            0x7F80_0000,
            0xFF80_0000,
            0x7FC0_0001,
            0x7C00_FC00,
        ];
        let fp8 = (Fp8Format::F143, 0);
        let mut decoded = 0;
        for round in 0..64 {
            let mut a = [0u32; 16];
            for (i, r) in a.iter_mut().enumerate() {
                *r = if (round + i) % 5 == 0 {
                    specials[(n() % specials.len() as u64) as usize]
                } else {
                    let bits = n() as u32;
                    // f16 lanes of moderate exponent most of the time, so `exp` stays finite.
                    if round % 2 == 0 {
                        bits & 0xBBFF_BBFF
                    } else {
                        bits
                    }
                };
            }
            let mut instrs = Vec::new();
            for d in 0..16u8 {
                let x = (d * 7 + round as u8) % 16;
                let y = (d * 3 + 5) % 16;
                for ty in [FType::F32v2, FType::F16v4] {
                    for op in FBinOp::ALL {
                        instrs.push(Instr::FBin {
                            ty,
                            op,
                            d,
                            a: x,
                            b: y,
                        });
                    }
                    for op in FUnOp::ALL {
                        instrs.push(Instr::FUn { ty, op, d, a: x });
                    }
                }
                for op in [ConvOp::F32v2ToF16v2, ConvOp::F16v2ToF32v2] {
                    instrs.push(Instr::Conv { op, d, a: x });
                }
            }
            for i in instrs {
                let op = float_op(&i);
                if matches!(op, FloatOp::Other) {
                    continue;
                }
                decoded += 1;
                let (want, got) = (float_value(&a, &i, fp8), decoded_float(&a, op));
                assert_eq!((want.v, want.dn), (got.v, got.dn), "{i:?} on {a:08x?}");
            }
        }
        assert!(decoded > 10_000, "{decoded} decoded instructions checked");
    }

    #[test]
    fn f16_to_f32_matches_half_for_every_code() {
        for code in 0..=u16::MAX {
            let want = f16::from_bits(code).to_f32();
            assert_eq!(h(code as u32).to_bits(), want.to_bits(), "{code:#06x}");
        }
    }

    #[test]
    fn f32_to_f16_matches_half() {
        // Every f32 with a stride that hits every exponent and many roundings, plus the
        // boundaries: halfway cases, subnormals, overflow, NaN payloads.
        let mut bits = 0u32;
        loop {
            let x = f32::from_bits(bits);
            assert_eq!(to_h(x), f16::from_f32(x).to_bits() as u32, "{bits:#010x}");
            let (next, overflow) = bits.overflowing_add(4093);
            if overflow {
                break;
            }
            bits = next;
        }
        for code in 0..=u16::MAX {
            let v = f16::from_bits(code).to_f32();
            for d in [-1i32, 0, 1] {
                let x = f32::from_bits(v.to_bits().wrapping_add(d as u32));
                assert_eq!(
                    to_h(x),
                    f16::from_f32(x).to_bits() as u32,
                    "{:#010x}",
                    x.to_bits()
                );
            }
            // Halfway between this code and the next.
            let next = f16::from_bits(code.wrapping_add(1)).to_f32();
            let mid = (v as f64 + next as f64) / 2.0;
            let x = mid as f32;
            assert_eq!(
                to_h(x),
                f16::from_f32(x).to_bits() as u32,
                "{:#010x}",
                x.to_bits()
            );
        }
    }
}
