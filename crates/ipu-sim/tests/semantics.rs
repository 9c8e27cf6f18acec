//! Every instruction's semantics against a Rust reference, through the whole device: a worker
//! loads random register values, executes the instruction, stores the registers back.

mod common;

use common::*;
use half::f16;
use ipu_isa::*;

/// Where the harness keeps the register files (interleaved memory, for `ld128`).
const STATE: u32 = 0x90000;

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    /// A register value: random bits, or a "nice" f32, or a pair of nice f16s.
    fn value(&mut self) -> u32 {
        match self.below(4) {
            0 => self.next() as u32,
            1 => ((self.below(2001) as f32 - 1000.0) / 37.0).to_bits(),
            2 => {
                let lo = f16::from_f32((self.below(201) as f32 - 100.0) / 16.0).to_bits() as u32;
                let hi = f16::from_f32((self.below(201) as f32 - 100.0) / 8.0).to_bits() as u32;
                lo | hi << 16
            }
            _ => self.below(64) as u32,
        }
    }
    fn m(&mut self) -> MReg {
        MReg(self.below(15) as u8)
    }
    fn reg(&mut self, pair: bool) -> u8 {
        if pair {
            2 * self.below(8) as u8
        } else {
            self.below(16) as u8
        }
    }
    /// A register of a group of `n` (1, 2 or 4): its index a multiple of `n`.
    fn reg_n(&mut self, n: u8) -> u8 {
        n * self.below(16 / n as u64) as u8
    }
    /// `N` registers as [`Rng::reg`] draws them, in order.
    fn regs<const N: usize>(&mut self, pair: bool) -> [u8; N] {
        std::array::from_fn(|_| self.reg(pair))
    }
    /// One of `choices`, uniformly.
    fn pick<T: Copy, const N: usize>(&mut self, choices: &[T; N]) -> T {
        choices[self.below(N as u64) as usize]
    }
}

fn hf(bits: u32) -> f32 {
    f16::from_bits(bits as u16).to_f32()
}
fn th(x: f32) -> u32 {
    f16::from_f32(x).to_bits() as u32
}

/// Lane values of a register operand.
fn get_lanes(a: &[u32; 16], ty: FType, r: u8) -> Vec<u32> {
    let r = r as usize;
    match ty {
        FType::F32 => vec![a[r]],
        FType::F32v2 => vec![a[r], a[r + 1]],
        FType::F16v2 => vec![a[r] & 0xFFFF, a[r] >> 16],
        FType::F16v4 => vec![a[r] & 0xFFFF, a[r] >> 16, a[r + 1] & 0xFFFF, a[r + 1] >> 16],
    }
}

fn put_lanes(a: &mut [u32; 16], ty: FType, r: u8, l: &[u32]) {
    let r = r as usize;
    match ty {
        FType::F32 => a[r] = l[0],
        FType::F32v2 => {
            a[r] = l[0];
            a[r + 1] = l[1];
        }
        FType::F16v2 => a[r] = l[0] | l[1] << 16,
        FType::F16v4 => {
            a[r] = l[0] | l[1] << 16;
            a[r + 1] = l[2] | l[3] << 16;
        }
    }
}

fn bin32(op: FBinOp, x: f32, y: f32, d: f32) -> Result<f32, bool> {
    Ok(match op {
        FBinOp::Add => x + y,
        FBinOp::Sub => x - y,
        FBinOp::Mul => x * y,
        FBinOp::Mac => x.mul_add(y, d),
        FBinOp::Max => x.max(y),
        FBinOp::Min => x.min(y),
        FBinOp::CmpLt => return Err(x < y),
        FBinOp::CmpLe => return Err(x <= y),
        FBinOp::CmpEq => return Err(x == y),
    })
}

fn un32(op: FUnOp, x: f32) -> f32 {
    match op {
        FUnOp::Mov | FUnOp::Abs | FUnOp::Neg => unreachable!("bit operations"),
        FUnOp::Exp => x.exp(),
        FUnOp::Rcp => 1.0 / x,
        FUnOp::Sqrt => x.sqrt(),
        FUnOp::Rsqrt => 1.0 / x.sqrt(),
    }
}

fn nf(f: Fp8Format) -> ipu_numerics::Fp8Format {
    match f {
        Fp8Format::F143 => ipu_numerics::Fp8Format::F143,
        Fp8Format::F152 => ipu_numerics::Fp8Format::F152,
    }
}

/// The reference semantics.
fn reference(i: &Instr, m: &mut [u32; 16], a: &mut [u32; 16], fp8: (Fp8Format, i8)) {
    let half = |ty: FType| matches!(ty, FType::F16v2 | FType::F16v4);
    match *i {
        Instr::Alu { op, d, a: x, b } => {
            m[d.0 as usize] = op.apply(m[x.0 as usize], m[b.0 as usize])
        }
        Instr::AluImm { op, d, a: x, imm } => {
            m[d.0 as usize] = op.apply(m[x.0 as usize], imm as i32 as u32)
        }
        Instr::Setzi { d, imm } => m[d.0 as usize] = imm,
        Instr::Orhi { d, imm } => m[d.0 as usize] |= (imm as u32) << 16,
        Instr::MovToA { d, a: x } => a[d.0 as usize] = m[x.0 as usize],
        Instr::MovToM { d, a: x } => m[d.0 as usize] = a[x.0 as usize],
        Instr::FBin { ty, op, d, a: x, b } => {
            let (lx, ly, ld) = (
                get_lanes(a, ty, x),
                get_lanes(a, ty, b),
                get_lanes(a, ty, d),
            );
            let out: Vec<u32> = (0..lx.len())
                .map(|k| {
                    if half(ty) {
                        match bin32(op, hf(lx[k]), hf(ly[k]), hf(ld[k])) {
                            Ok(v) => th(v),
                            Err(c) => {
                                if c {
                                    0xFFFF
                                } else {
                                    0
                                }
                            }
                        }
                    } else {
                        let f = f32::from_bits;
                        match bin32(op, f(lx[k]), f(ly[k]), f(ld[k])) {
                            Ok(v) => v.to_bits(),
                            Err(c) => {
                                if c {
                                    u32::MAX
                                } else {
                                    0
                                }
                            }
                        }
                    }
                })
                .collect();
            put_lanes(a, ty, d, &out);
        }
        Instr::FUn { ty, op, d, a: x } => {
            let sign = if half(ty) { 0x8000 } else { 0x8000_0000 };
            let out: Vec<u32> = get_lanes(a, ty, x)
                .into_iter()
                .map(|v| match op {
                    FUnOp::Mov => v,
                    FUnOp::Abs => v & !sign,
                    FUnOp::Neg => v ^ sign,
                    _ if half(ty) => th(un32(op, hf(v))),
                    _ => un32(op, f32::from_bits(v)).to_bits(),
                })
                .collect();
            put_lanes(a, ty, d, &out);
        }
        Instr::FReduce { ty, op, d, a: x } => {
            let v: Vec<f32> = get_lanes(a, ty, x.0)
                .into_iter()
                .map(|v| if half(ty) { hf(v) } else { f32::from_bits(v) })
                .collect();
            let r = v[1..].iter().fold(v[0], |s, &y| match op {
                RedOp::Sum => s + y,
                RedOp::Max => s.max(y),
            });
            a[d.0 as usize] = r.to_bits();
        }
        Instr::Conv { op, d, a: x } => {
            let (d, x) = (d as usize, x as usize);
            let (fmt, sc) = (nf(fp8.0), fp8.1 as i32);
            match op {
                ConvOp::F32ToF16 => a[d] = th(f32::from_bits(a[x])),
                ConvOp::F16ToF32 => a[d] = hf(a[x]).to_bits(),
                ConvOp::F32v2ToF16v2 => {
                    a[d] = th(f32::from_bits(a[x])) | th(f32::from_bits(a[x + 1])) << 16
                }
                ConvOp::F16v2ToF32v2 => {
                    let v = a[x];
                    a[d] = hf(v).to_bits();
                    a[d + 1] = hf(v >> 16).to_bits();
                }
                ConvOp::F16v4ToF8v4 => {
                    let l = get_lanes(a, FType::F16v4, x as u8);
                    a[d] = (0..4)
                        .map(|k| {
                            (ipu_numerics::encode(
                                fmt,
                                hf(l[k]),
                                sc,
                                ipu_numerics::Overflow::Saturate,
                            ) as u32)
                                << (8 * k)
                        })
                        .sum();
                }
                ConvOp::F8v4ToF16v4 => {
                    let v = a[x];
                    let l: Vec<u32> = (0..4)
                        .map(|k| th(ipu_numerics::decode(fmt, (v >> (8 * k)) as u8, sc)))
                        .collect();
                    put_lanes(a, FType::F16v4, d as u8, &l);
                }
                ConvOp::F32ToI32 => a[d] = f32::from_bits(a[x]).round_ties_even() as i32 as u32,
                ConvOp::I32ToF32 => a[d] = (a[x] as i32 as f32).to_bits(),
                ConvOp::F32v4ToF16v4 => {
                    let l: Vec<u32> = (0..4).map(|k| th(f32::from_bits(a[x + k]))).collect();
                    a[d] = l[0] | l[1] << 16;
                    a[d + 1] = l[2] | l[3] << 16;
                }
            }
        }
        Instr::Bcast { ty, d, a: x } => {
            let v = a[x.0 as usize];
            let w = if ty == FType::F16v4 {
                (v & 0xFFFF) | (v & 0xFFFF) << 16
            } else {
                v
            };
            a[d.0 as usize] = w;
            a[d.0 as usize + 1] = w;
        }
        Instr::F16v2Pack { d, a: x, b } => {
            a[d.0 as usize] = (a[x.0 as usize] & 0xFFFF) | a[b.0 as usize] << 16
        }
        Instr::F16v2PackHi { d, a: x, b } => {
            a[d.0 as usize] = a[x.0 as usize] >> 16 | (a[b.0 as usize] & 0xFFFF_0000)
        }
        _ => unreachable!("not generated"),
    }
}

fn random_instr(r: &mut Rng) -> Instr {
    match r.below(11) {
        0 => Instr::Alu {
            op: r.pick(&AluOp::ALL),
            d: r.m(),
            a: r.m(),
            b: r.m(),
        },
        1 => Instr::AluImm {
            op: r.pick(&AluOp::ALL),
            d: r.m(),
            a: r.m(),
            imm: r.next() as i16,
        },
        2 => Instr::Setzi {
            d: r.m(),
            imm: r.below(1 << 20) as u32,
        },
        3 => Instr::Orhi {
            d: r.m(),
            imm: r.next() as u16,
        },
        4 => {
            if r.below(2) == 0 {
                Instr::MovToA {
                    d: AReg(r.reg(false)),
                    a: r.m(),
                }
            } else {
                Instr::MovToM {
                    d: r.m(),
                    a: AReg(r.reg(false)),
                }
            }
        }
        5 | 6 => {
            let ty = r.pick(&FType::ALL);
            let op = r.pick(&FBinOp::ALL);
            let [d, a, b] = r.regs(ty.is_pair());
            Instr::FBin { ty, op, d, a, b }
        }
        7 => {
            let ty = r.pick(&FType::ALL);
            let op = r.pick(&FUnOp::ALL);
            let [d, a] = r.regs(ty.is_pair());
            Instr::FUn { ty, op, d, a }
        }
        8 => Instr::FReduce {
            ty: r.pick(&[FType::F32v2, FType::F16v4]),
            op: r.pick(&[RedOp::Sum, RedOp::Max]),
            d: AReg(r.reg(false)),
            a: APair(r.reg(true)),
        },
        9 => {
            let op = r.pick(&ConvOp::ALL);
            Instr::Conv {
                op,
                d: r.reg_n(op.dst_regs()),
                a: r.reg_n(op.src_regs()),
            }
        }
        _ => match r.below(4) {
            0 => Instr::Bcast {
                ty: FType::F32v2,
                d: APair(r.reg(true)),
                a: AReg(r.reg(false)),
            },
            1 => Instr::Bcast {
                ty: FType::F16v4,
                d: APair(r.reg(true)),
                a: AReg(r.reg(false)),
            },
            2 => Instr::F16v2Pack {
                d: AReg(r.reg(false)),
                a: AReg(r.reg(false)),
                b: AReg(r.reg(false)),
            },
            _ => Instr::F16v2PackHi {
                d: AReg(r.reg(false)),
                a: AReg(r.reg(false)),
                b: AReg(r.reg(false)),
            },
        },
    }
}

fn harness(instr_text: &str, fp8: Option<(Fp8Format, i8)>) -> String {
    let mut body = String::from("  add $m15, $m0, 0\n");
    for q in 0..4 {
        body += &format!("  ld128 $a{}:{}, $m15, {}\n", 4 * q, 4 * q + 3, 16 * q);
    }
    for k in 0..15 {
        body += &format!("  ld32 $m{k}, $m15, {}\n", 64 + 4 * k);
    }
    if let Some((f, s)) = fp8 {
        body += &format!(
            "  setfp8 {}, {s}\n",
            if f == Fp8Format::F143 { "f143" } else { "f152" }
        );
    }
    body += &format!("  {instr_text}\n");
    for p in 0..8 {
        body += &format!("  st64 $a{}:{}, $m15, {}\n", 2 * p, 2 * p + 1, 128 + 8 * p);
    }
    for k in 0..15 {
        body += &format!("  st32 $m{k}, $m15, {}\n", 192 + 4 * k);
    }
    one_worker(&body, STATE)
}

/// Enough random cases that every operation at every type comes up.
const CASES: u32 = 2000;

#[test]
fn every_instruction_matches_the_reference() {
    let mut rng = Rng(0x5EED_1234_ABCD_0001);
    let mut seen = std::collections::BTreeSet::new();
    for case in 0..CASES {
        let instr = random_instr(&mut rng);
        let fp8 = if rng.below(2) == 0 {
            (Fp8Format::F143, 0)
        } else {
            (Fp8Format::F152, rng.below(9) as i8 - 4)
        };
        let mut m = [0u32; 16];
        let mut a = [0u32; 16];
        for v in a.iter_mut() {
            *v = rng.value();
        }
        for v in m.iter_mut().take(15) {
            *v = rng.value();
        }
        let text = format_slot(&Slot::Single(instr));
        let src = harness(&text, Some(fp8));
        let (mut d, entry) = device_with(ipu_target::Target::gc200(), 1, &src);
        let mut init = Vec::new();
        for v in a.iter().chain(m.iter().take(15)) {
            init.extend_from_slice(&v.to_le_bytes());
        }
        d.write(0, STATE, &init).unwrap();
        d.run(entry, &ipu_sim::RunLimits::default())
            .unwrap_or_else(|e| panic!("case {case} `{text}`: {e}"));
        let mut want_m = m;
        let mut want_a = a;
        want_m[15] = 0;
        reference(&instr, &mut want_m, &mut want_a, fp8);
        let got_a: Vec<u32> = (0..16).map(|k| word(&d, 0, STATE + 128 + 4 * k)).collect();
        let got_m: Vec<u32> = (0..15).map(|k| word(&d, 0, STATE + 192 + 4 * k)).collect();
        assert_eq!(
            got_a,
            want_a.to_vec(),
            "case {case} `{text}` a-registers, initial {a:08x?}"
        );
        assert_eq!(
            got_m,
            want_m[..15].to_vec(),
            "case {case} `{text}` m-registers, initial {m:08x?}"
        );
        seen.insert(mnemonic(&instr));
    }
    let missing: Vec<_> = generated_mnemonics().difference(&seen).cloned().collect();
    assert!(
        missing.is_empty(),
        "the random cases never tried {missing:?}"
    );
}

/// The first word of an instruction's text form.
fn mnemonic(instr: &Instr) -> String {
    let text = format_slot(&Slot::Single(*instr));
    text.split_whitespace().next().unwrap_or("").to_string()
}

/// Every mnemonic `random_instr` can produce: each operation of each variant, at each type.
fn generated_mnemonics() -> std::collections::BTreeSet<String> {
    let (m, p) = (MReg(1), 2u8);
    let mut all = vec![
        Instr::Setzi { d: m, imm: 1 },
        Instr::Orhi { d: m, imm: 1 },
        Instr::MovToA { d: AReg(1), a: m },
        Instr::MovToM { d: m, a: AReg(1) },
        Instr::F16v2Pack {
            d: AReg(1),
            a: AReg(2),
            b: AReg(3),
        },
        Instr::F16v2PackHi {
            d: AReg(1),
            a: AReg(2),
            b: AReg(3),
        },
    ];
    for op in AluOp::ALL {
        all.push(Instr::Alu {
            op,
            d: m,
            a: m,
            b: m,
        });
        all.push(Instr::AluImm {
            op,
            d: m,
            a: m,
            imm: 1,
        });
    }
    for ty in FType::ALL {
        for op in FBinOp::ALL {
            all.push(Instr::FBin {
                ty,
                op,
                d: p,
                a: p,
                b: p,
            });
        }
        for op in FUnOp::ALL {
            all.push(Instr::FUn { ty, op, d: p, a: p });
        }
    }
    for ty in [FType::F32v2, FType::F16v4] {
        for op in [RedOp::Sum, RedOp::Max] {
            all.push(Instr::FReduce {
                ty,
                op,
                d: AReg(1),
                a: APair(p),
            });
        }
        all.push(Instr::Bcast {
            ty,
            d: APair(p),
            a: AReg(1),
        });
    }
    for op in ConvOp::ALL {
        all.push(Instr::Conv { op, d: p, a: p });
    }
    all.iter().map(mnemonic).collect()
}
