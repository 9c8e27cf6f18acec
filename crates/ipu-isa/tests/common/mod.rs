//! Generators of valid instructions, slots and programs for the property tests.
#![allow(dead_code)]

use ipu_isa::*;
use proptest::prelude::*;

pub fn mreg() -> impl Strategy<Value = MReg> {
    (0u8..16).prop_map(MReg)
}
pub fn areg() -> impl Strategy<Value = AReg> {
    (0u8..16).prop_map(AReg)
}
pub fn apair() -> impl Strategy<Value = APair> {
    (0u8..8).prop_map(|i| APair(i * 2))
}
fn aty(regs: u8) -> BoxedStrategy<u8> {
    (0u8..16 / regs).prop_map(move |i| i * regs).boxed()
}
pub fn alu_op() -> impl Strategy<Value = AluOp> {
    prop::sample::select(AluOp::ALL.to_vec())
}
pub fn ftype() -> impl Strategy<Value = FType> {
    prop::sample::select(FType::ALL.to_vec())
}
pub fn pair_type() -> impl Strategy<Value = FType> {
    prop::sample::select(vec![FType::F32v2, FType::F16v4])
}
pub fn target() -> impl Strategy<Value = u32> {
    (0u32..(1 << 18)).prop_map(|t| t * 4)
}
pub fn addr_mode() -> impl Strategy<Value = AddrMode> {
    prop_oneof![
        any::<i16>().prop_map(AddrMode::Offset),
        any::<i16>().prop_map(AddrMode::PostInc)
    ]
}
fn data_reg(store: bool) -> BoxedStrategy<(Width, DataReg)> {
    let mut forms = vec![
        (Width::B8, false, 1u8),
        (Width::B16, false, 1),
        (Width::B32, false, 1),
        (Width::B32, true, 1),
        (Width::B64, true, 2),
    ];
    if !store {
        forms.push((Width::B128, true, 4));
    }
    (prop::sample::select(forms), 0u8..16)
        .prop_map(|((w, is_a, align), r)| {
            let r = r / align * align;
            (
                w,
                if is_a {
                    DataReg::A(r)
                } else {
                    DataReg::M(MReg(r))
                },
            )
        })
        .boxed()
}

/// Valid main-pipeline instructions of class `Main`.
pub fn main_instr() -> BoxedStrategy<Instr> {
    use Instr::*;
    prop_oneof![
        Just(Nop),
        (alu_op(), mreg(), mreg(), mreg()).prop_map(|(op, d, a, b)| Alu { op, d, a, b }),
        (alu_op(), mreg(), mreg(), any::<i16>()).prop_map(|(op, d, a, imm)| AluImm {
            op,
            d,
            a,
            imm
        }),
        (mreg(), 0u32..(1 << 20)).prop_map(|(d, imm)| Setzi { d, imm }),
        (mreg(), any::<u16>()).prop_map(|(d, imm)| Orhi { d, imm }),
        (
            mreg(),
            prop::sample::select(vec![SysReg::TileId, SysReg::ContextId, SysReg::Cycles])
        )
            .prop_map(|(d, sys)| Get { d, sys }),
        (areg(), mreg()).prop_map(|(d, a)| MovToA { d, a }),
        (mreg(), areg()).prop_map(|(d, a)| MovToM { d, a }),
        (data_reg(false), mreg(), addr_mode()).prop_map(|((width, d), base, mode)| Load {
            width,
            d,
            base,
            mode
        }),
        (data_reg(true), mreg(), addr_mode()).prop_map(|((width, s), base, mode)| Store {
            width,
            s,
            base,
            mode
        }),
        (apair(), apair(), mreg(), mreg()).prop_map(|(d0, d1, p0, p1)| Ld2x64Pace {
            d: [d0, d1],
            p: [p0, p1]
        }),
        (apair(), apair(), mreg(), mreg()).prop_map(|(d, s, p0, p1)| LdSt64Pace {
            d,
            s,
            p: [p0, p1]
        }),
        (apair(), apair(), apair(), mreg(), mreg(), mreg()).prop_map(|(d0, d1, s, p0, p1, p2)| {
            Ld2xSt64Pace {
                d: [d0, d1],
                s,
                p: [p0, p1, p2],
            }
        }),
        (
            prop::sample::select(vec![Fp8Format::F143, Fp8Format::F152]),
            -32i8..=31
        )
            .prop_map(|(format, scale)| SetFp8 { format, scale }),
    ]
    .boxed()
}

pub fn control_instr() -> BoxedStrategy<Instr> {
    use Instr::*;
    prop_oneof![
        mreg().prop_map(|a| Br { a }),
        target().prop_map(|target| Bri { target }),
        (mreg(), target()).prop_map(|(a, target)| Brz { a, target }),
        (mreg(), target()).prop_map(|(a, target)| Brnz { a, target }),
        (mreg(), target()).prop_map(|(a, target)| Brnzdec { a, target }),
        (mreg(), target()).prop_map(|(link, target)| Call { link, target }),
        (mreg(), 1u8..=255).prop_map(|(count, body)| Rpt { count, body }),
        (any::<u16>(), 1u8..=255).prop_map(|(count, body)| Rpti { count, body }),
    ]
    .boxed()
}

pub fn float_instr() -> BoxedStrategy<Instr> {
    use Instr::*;
    prop_oneof![
        (ftype(), prop::sample::select(FBinOp::ALL.to_vec()))
            .prop_flat_map(|(ty, op)| {
                let p = if ty.is_pair() { 2 } else { 1 };
                (Just(ty), Just(op), aty(p), aty(p), aty(p))
            })
            .prop_map(|(ty, op, d, a, b)| FBin { ty, op, d, a, b }),
        (ftype(), prop::sample::select(FUnOp::ALL.to_vec()))
            .prop_flat_map(|(ty, op)| {
                let p = if ty.is_pair() { 2 } else { 1 };
                (Just(ty), Just(op), aty(p), aty(p))
            })
            .prop_map(|(ty, op, d, a)| FUn { ty, op, d, a }),
        (
            pair_type(),
            prop::sample::select(vec![RedOp::Sum, RedOp::Max]),
            areg(),
            apair()
        )
            .prop_map(|(ty, op, d, a)| FReduce { ty, op, d, a }),
        prop::sample::select(ConvOp::ALL.to_vec())
            .prop_flat_map(|op| (Just(op), aty(op.dst_regs()), aty(op.src_regs())))
            .prop_map(|(op, d, a)| Conv { op, d, a }),
        (pair_type(), apair(), areg()).prop_map(|(ty, d, a)| Bcast { ty, d, a }),
        (areg(), areg(), areg()).prop_map(|(d, a, b)| F16v2Pack { d, a, b }),
        (areg(), areg(), areg()).prop_map(|(d, a, b)| F16v2PackHi { d, a, b }),
        (apair(), apair(), apair(), 0u8..4).prop_map(|(d, a, p, phase)| Amp { d, a, p, phase }),
    ]
    .boxed()
}

pub fn other_instr() -> BoxedStrategy<Instr> {
    use Instr::*;
    prop_oneof![
        (mreg(), mreg()).prop_map(|(entry, state)| Run { entry, state }),
        (mreg(), mreg()).prop_map(|(entry, state)| RunAll { entry, state }),
        Just(WaitW),
        Just(Sync),
        mreg().prop_map(|table| Exch { table }),
        mreg().prop_map(|table| HostX { table }),
        any::<u16>().prop_map(|id| Mark { id }),
        prop::sample::select(AmpMode::ALL.to_vec()).prop_map(|mode| AmpCfg { mode }),
        mreg().prop_map(|base| AmpW { base }),
        Just(Halt),
        Just(Exit),
    ]
    .boxed()
}

/// Every valid instruction.
pub fn instr() -> BoxedStrategy<Instr> {
    prop_oneof![main_instr(), control_instr(), float_instr(), other_instr()].boxed()
}

/// Every valid slot.
pub fn slot() -> BoxedStrategy<Slot> {
    prop_oneof![
        3 => instr().prop_map(Slot::Single),
        1 => (main_instr(), float_instr()).prop_map(|(main, float)| Slot::Bundle(Bundle { main, float })),
    ]
    .boxed()
}
