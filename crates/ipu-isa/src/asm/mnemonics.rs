//! Pass 2: each mnemonic's instructions built from its operands, and the list of mnemonics.

use super::error::AsmError;
use super::operands::{Ctx, Ops, ParsedInstr};
use crate::encoding::{self, FP8_SCALE_MAX, FP8_SCALE_MIN, RPT_BODY_MAX, SETZI_LIMIT};
use crate::instr::*;
use crate::text;

const SIMPLE: [(&str, Instr); 5] = [
    ("nop", Instr::Nop),
    ("waitw", Instr::WaitW),
    ("sync", Instr::Sync),
    ("halt", Instr::Halt),
    ("exit", Instr::Exit),
];

/// Every mnemonic the assembler accepts (for suggestions and the documentation).
pub fn mnemonics() -> Vec<String> {
    let mut v: Vec<String> = SIMPLE.iter().map(|(m, _)| m.to_string()).collect();
    v.extend(AluOp::ALL.iter().map(|o| o.mnemonic().to_string()));
    for m in [
        "setzi",
        "orhi",
        "get",
        "mov",
        "li",
        "ld2x64pace",
        "ldst64pace",
        "ld2xst64pace",
        "br",
        "bri",
        "brz",
        "brnz",
        "brnzdec",
        "call",
        "rpt",
        "setfp8",
        "f16v2pack",
        "f16v2packhi",
        "amp",
        "run",
        "exch",
        "hostx",
        "mark",
        "ampcfg",
        "ampw",
    ] {
        v.push(m.into());
    }
    for w in [Width::B8, Width::B16, Width::B32, Width::B64, Width::B128] {
        v.push(text::load_mnemonic(w).into());
        v.push(format!("{}step", text::load_mnemonic(w)));
        if w != Width::B128 {
            v.push(text::store_mnemonic(w).into());
            v.push(format!("{}step", text::store_mnemonic(w)));
        }
    }
    for ty in FType::ALL {
        v.extend(
            FBinOp::ALL
                .iter()
                .map(|o| format!("{}{}", ty.prefix(), o.suffix())),
        );
        v.extend(
            FUnOp::ALL
                .iter()
                .map(|o| format!("{}{}", ty.prefix(), o.suffix())),
        );
        if ty.is_pair() {
            v.push(format!("{}sum", ty.prefix()));
            v.push(format!("{}bcast", ty.prefix()));
        }
    }
    v.extend(ConvOp::ALL.iter().map(|o| o.mnemonic().to_string()));
    v.sort();
    v.dedup();
    v
}

fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1];
        for (j, cb) in b.iter().enumerate() {
            let sub = prev[j] + usize::from(ca != *cb);
            cur.push(sub.min(prev[j + 1] + 1).min(cur[j] + 1));
        }
        prev = cur;
    }
    prev[b.len()]
}

fn suggestion(m: &str) -> String {
    let best = mnemonics()
        .into_iter()
        .map(|c| (edit_distance(m, &c), c))
        .min();
    match best {
        Some((d, c)) if d <= 2 => format!(" (did you mean `{c}`?)"),
        _ => String::new(),
    }
}

fn parse_ftype(m: &str) -> Option<(FType, &str)> {
    // Longest prefix first: f32v2 before f32.
    for ty in [FType::F32v2, FType::F16v2, FType::F16v4, FType::F32] {
        if let Some(rest) = m.strip_prefix(ty.prefix()) {
            return Some((ty, rest));
        }
    }
    None
}

pub(super) fn build(ctx: &Ctx, p: &ParsedInstr) -> Result<Vec<Instr>, AsmError> {
    use Instr::*;
    let o = Ops { ctx, p };
    let m = p.mnemonic.as_str();
    let one = |i: Instr| Ok(vec![i]);
    if let Some((_, i)) = SIMPLE.iter().find(|(n, _)| *n == m) {
        o.count(&[0], m)?;
        return one(*i);
    }
    if let Some(&op) = AluOp::ALL.iter().find(|a| a.mnemonic() == m) {
        o.count(&[3], &format!("{m} $mD, $mA, $mB|imm"))?;
        let (d, a) = (o.m(0)?, o.m(1)?);
        if o.is_reg(2) {
            return one(Alu {
                op,
                d,
                a,
                b: o.m(2)?,
            });
        }
        let imm = o.imm(2, i16::MIN as i64, i16::MAX as i64, "immediate")? as i16;
        return one(AluImm { op, d, a, imm });
    }
    if let Some(&op) = ConvOp::ALL.iter().find(|c| c.mnemonic() == m) {
        o.count(&[2], m)?;
        return one(Conv {
            op,
            d: o.a(0, op.dst_regs() as u32)?,
            a: o.a(1, op.src_regs() as u32)?,
        });
    }
    // Loads and stores.
    let (base_m, step) = match m.strip_suffix("step") {
        Some(b) => (b, true),
        None => (m, false),
    };
    let load = [Width::B8, Width::B16, Width::B32, Width::B64, Width::B128]
        .into_iter()
        .find(|w| text::load_mnemonic(*w) == base_m);
    let store = [Width::B8, Width::B16, Width::B32, Width::B64]
        .into_iter()
        .find(|w| text::store_mnemonic(*w) == base_m);
    if base_m == "st128" {
        return Err(o.err(p.col, "there is no 128-bit store (`st128`); use two `st64`"));
    }
    if let Some(width) = load.or(store) {
        o.count(&[2, 3], &format!("{m} REG, $mB, imm"))?;
        let reg = match width {
            Width::B8 | Width::B16 => DataReg::M(o.m(0)?),
            Width::B32 if o.is_m(0) => DataReg::M(o.m(0)?),
            Width::B32 => DataReg::A(o.a(0, 1).map_err(|_| o.kind_err(0, "`$mN` or `$aN`"))?),
            Width::B64 => DataReg::A(o.a(0, 2)?),
            Width::B128 => DataReg::A(o.a(0, 4)?),
        };
        let (base, mode) = o.address(1, step)?;
        return one(if load.is_some() {
            Load {
                width,
                d: reg,
                base,
                mode,
            }
        } else {
            Store {
                width,
                s: reg,
                base,
                mode,
            }
        });
    }
    match m {
        "setzi" => {
            o.count(&[2], "setzi $mD, imm")?;
            let imm = o.imm(1, 0, SETZI_LIMIT as i64 - 1, "immediate")? as u32;
            one(Setzi { d: o.m(0)?, imm })
        }
        "orhi" => {
            o.count(&[2], "orhi $mD, imm")?;
            one(Orhi {
                d: o.m(0)?,
                imm: o.imm(1, 0, 0xFFFF, "immediate")? as u16,
            })
        }
        "li" => {
            o.count(&[2], "li $mD, imm")?;
            let d = o.m(0)?;
            let v = o.imm(1, i32::MIN as i64, u32::MAX as i64, "immediate")? as u32;
            Ok(vec![
                Setzi { d, imm: v & 0xFFFF },
                Orhi {
                    d,
                    imm: (v >> 16) as u16,
                },
            ])
        }
        "get" => {
            o.count(&[2], "get $mD, tileid|contextid|cycles")?;
            let names = ["tileid", "contextid", "cycles"];
            let sys = [SysReg::TileId, SysReg::ContextId, SysReg::Cycles];
            one(Get {
                d: o.m(0)?,
                sys: sys[o.name(1, "system register", &names)?],
            })
        }
        "mov" => {
            o.count(
                &[2],
                "mov $aD, $mA | mov $mD, $aA | mov $mD, $mA | mov $aD, $aA",
            )?;
            if let Some(x) = (0..2).find(|&i| !o.is_reg(i)) {
                return Err(o.err(
                    o.op(x).col(),
                    "`mov` copies a register; use `setzi` or `li` to load a value",
                ));
            }
            match (o.is_m(0), o.is_m(1)) {
                (false, true) => one(MovToA {
                    d: AReg(o.a(0, 1)?),
                    a: o.m(1)?,
                }),
                (true, false) => one(MovToM {
                    d: o.m(0)?,
                    a: AReg(o.a(1, 1)?),
                }),
                (true, true) => one(AluImm {
                    op: AluOp::Or,
                    d: o.m(0)?,
                    a: o.m(1)?,
                    imm: 0,
                }),
                (false, false) => {
                    let pair = o.a_count(0) == Some(2);
                    let (ty, n) = if pair {
                        (FType::F32v2, 2)
                    } else {
                        (FType::F32, 1)
                    };
                    let [d, a] = o.a_all(n)?;
                    one(FUn {
                        ty,
                        op: FUnOp::Mov,
                        d,
                        a,
                    })
                }
            }
        }
        "ld2x64pace" | "ldst64pace" => {
            let load2 = m == "ld2x64pace";
            o.count(
                &[4],
                if load2 {
                    "ld2x64pace $aD0:, $aD1:, $mP0+=8, $mP1+=8"
                } else {
                    "ldst64pace $aD:, $aS:, $mP0+=8, $mP1+=8"
                },
            )?;
            let (x, y) = (APair(o.a(0, 2)?), APair(o.a(1, 2)?));
            let (p0, p1) = (o.pace(2)?, o.pace(3)?);
            let p = [p0, p1];
            one(if load2 {
                Ld2x64Pace { d: [x, y], p }
            } else {
                LdSt64Pace { d: x, s: y, p }
            })
        }
        "ld2xst64pace" => {
            o.count(
                &[6],
                "ld2xst64pace $aD0:, $aD1:, $aS:, $mP0+=8, $mP1+=8, $mP2+=8",
            )?;
            one(Ld2xSt64Pace {
                d: [APair(o.a(0, 2)?), APair(o.a(1, 2)?)],
                s: APair(o.a(2, 2)?),
                p: [o.pace(3)?, o.pace(4)?, o.pace(5)?],
            })
        }
        "br" => {
            o.count(&[1], "br $mA")?;
            one(Br { a: o.m(0)? })
        }
        "bri" => {
            o.count(&[1], "bri TARGET")?;
            one(Bri {
                target: o.target(0)?,
            })
        }
        "brz" | "brnz" | "brnzdec" | "call" => {
            o.count(&[2], &format!("{m} $mA, TARGET"))?;
            let (a, target) = (o.m(0)?, o.target(1)?);
            one(match m {
                "brz" => Brz { a, target },
                "brnz" => Brnz { a, target },
                "brnzdec" => Brnzdec { a, target },
                _ => Call { link: a, target },
            })
        }
        "rpt" => {
            o.count(&[2], "rpt $mA|COUNT, BODY_SLOTS")?;
            let body = o.imm(1, 1, RPT_BODY_MAX as i64, "body length")? as u8;
            if o.is_reg(0) {
                return one(Rpt {
                    count: o.m(0)?,
                    body,
                });
            }
            let count = o.imm(0, 0, ipu_target::RPT_COUNT_MAX as i64, "count")? as u16;
            one(Rpti { count, body })
        }
        "setfp8" => {
            o.count(&[2], "setfp8 f143|f152, SCALE")?;
            let f =
                [Fp8Format::F143, Fp8Format::F152][o.name(0, "FP8 format", &["f143", "f152"])?];
            let scale = o.imm(1, FP8_SCALE_MIN as i64, FP8_SCALE_MAX as i64, "scale")? as i8;
            one(SetFp8 { format: f, scale })
        }
        "f16v2pack" => {
            o.count(&[3], "f16v2pack $aD, $aA, $aB")?;
            one(F16v2Pack {
                d: AReg(o.a(0, 1)?),
                a: AReg(o.a(1, 1)?),
                b: AReg(o.a(2, 1)?),
            })
        }
        "f16v2packhi" => {
            o.count(&[3], "f16v2packhi $aD, $aA, $aB")?;
            one(F16v2PackHi {
                d: AReg(o.a(0, 1)?),
                a: AReg(o.a(1, 1)?),
                b: AReg(o.a(2, 1)?),
            })
        }
        "amp" => {
            o.count(&[4], "amp $aD:, $aA:, $aP:, PHASE")?;
            let (d, a, pp) = (o.a(0, 2)?, o.a(1, 2)?, o.a(2, 2)?);
            let phase = o.imm(3, 0, encoding::AMP_PHASES as i64 - 1, "phase")? as u8;
            one(Amp {
                d: APair(d),
                a: APair(a),
                p: APair(pp),
                phase,
            })
        }
        "run" => {
            o.count(&[2], "run $mE, $mS")?;
            one(Run {
                entry: o.m(0)?,
                state: o.m(1)?,
            })
        }
        "runall" => {
            o.count(&[2], "runall $mE, $mS")?;
            one(RunAll {
                entry: o.m(0)?,
                state: o.m(1)?,
            })
        }
        "exch" | "hostx" | "ampw" => {
            o.count(&[1], &format!("{m} $mA"))?;
            let r = o.m(0)?;
            one(match m {
                "exch" => Exch { table: r },
                "hostx" => HostX { table: r },
                _ => AmpW { base: r },
            })
        }
        "mark" => {
            o.count(&[1], "mark ID")?;
            one(Mark {
                id: o.imm(0, 0, 0xFFFF, "mark id")? as u16,
            })
        }
        "ampcfg" => {
            o.count(&[1], "ampcfg f16f16|f16f32|f32f32|f8f16")?;
            let names: Vec<&str> = AmpMode::ALL
                .iter()
                .map(|m| text::amp_mode_name(*m))
                .collect();
            one(AmpCfg {
                mode: AmpMode::ALL[o.name(0, "AMP mode", &names)?],
            })
        }
        _ => {
            if let Some((ty, suffix)) = parse_ftype(m) {
                let n = if ty.is_pair() { 2 } else { 1 };
                // Reductions and broadcasts exist for the pair types only.
                let pair_only = |what: &str| {
                    if ty.is_pair() {
                        Ok(())
                    } else {
                        Err(o.err(
                            p.col,
                            format!("`{m}`: {what} exist for f32v2 and f16v4 only"),
                        ))
                    }
                };
                let red = match suffix {
                    "sum" => Some(RedOp::Sum),
                    "max" if p.operands.len() == 2 && ty.is_pair() => Some(RedOp::Max),
                    _ => None,
                };
                if let Some(op) = red {
                    pair_only("reductions")?;
                    o.count(&[2], &format!("{m} $aD, $aA:B"))?;
                    return one(FReduce {
                        ty,
                        op,
                        d: AReg(o.a(0, 1)?),
                        a: APair(o.a(1, 2)?),
                    });
                }
                if suffix == "bcast" {
                    pair_only("broadcasts")?;
                    o.count(&[2], &format!("{m} $aD:E, $aA"))?;
                    return one(Bcast {
                        ty,
                        d: APair(o.a(0, 2)?),
                        a: AReg(o.a(1, 1)?),
                    });
                }
                if let Some(&op) = FBinOp::ALL.iter().find(|x| x.suffix() == suffix) {
                    o.count(&[3], &format!("{m} D, A, B"))?;
                    let [d, a, b] = o.a_all(n)?;
                    return one(FBin { ty, op, d, a, b });
                }
                if let Some(&op) = FUnOp::ALL.iter().find(|x| x.suffix() == suffix) {
                    o.count(&[2], &format!("{m} D, A"))?;
                    let [d, a] = o.a_all(n)?;
                    return one(FUn { ty, op, d, a });
                }
            }
            Err(o.err(p.col, format!("unknown instruction `{m}`{}", suggestion(m))))
        }
    }
}
