//! The binary encoding: every valid instruction round-trips through one word, every word either
//! decodes to an instruction that re-encodes to it or is rejected.

mod common;

use ipu_isa::encoding::{OPCODE_SHIFT, OPERAND_MASK};
use ipu_isa::*;
use proptest::prelude::*;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(10_000))]

    #[test]
    fn every_valid_instruction_round_trips(i in common::instr()) {
        let w = encode(&i).expect("valid instruction encodes");
        prop_assert_eq!(w & BUNDLE_FLAG, 0);
        prop_assert_eq!(decode(w), Ok(i));
        prop_assert_eq!(validate(&i), Ok(()));
    }

    #[test]
    fn every_valid_slot_round_trips(s in common::slot()) {
        let words = encode_slot(&s).expect("valid slot encodes");
        prop_assert_eq!(decode_slot(&words), Ok((s, words.len())));
        // Trailing words are not consumed.
        let mut longer = words.clone();
        longer.push(0);
        prop_assert_eq!(decode_slot(&longer), Ok((s, words.len())));
    }

    #[test]
    fn random_words_decode_canonically_or_fail(w in any::<u32>()) {
        check_word(w);
    }

    #[test]
    fn word_pairs_decode_as_slots_canonically_or_fail(
        main in common::main_instr(),
        float in common::float_instr(),
        w1 in any::<u32>(),
        use_float in any::<bool>(),
    ) {
        let w0 = encode(&main).unwrap() | BUNDLE_FLAG;
        let w1 = if use_float { encode(&float).unwrap() } else { w1 };
        match decode_slot(&[w0, w1]) {
            Ok((slot, n)) => {
                prop_assert_eq!(n, 2);
                prop_assert_eq!(encode_slot(&slot), Ok(vec![w0, w1]));
            }
            Err(_) => prop_assert!(!use_float, "a valid bundle was rejected"),
        }
    }
}

/// A word either fails to decode or decodes to an instruction that encodes back to exactly that
/// word (with the bundle flag only on instructions that may start a bundle).
fn check_word(w: u32) {
    match decode(w) {
        Ok(i) => {
            assert_eq!(
                encode(&i),
                Ok(w & !BUNDLE_FLAG),
                "word {w:#010x} decoded to {i:?}"
            );
            if w & BUNDLE_FLAG != 0 {
                assert_eq!(i.class(), Class::Main, "word {w:#010x}");
            }
        }
        Err(_) => {
            // The unflagged word must also not be the encoding of anything the flag hides.
            if w & BUNDLE_FLAG != 0
                && let Ok(i) = decode(w & !BUNDLE_FLAG)
            {
                assert_ne!(i.class(), Class::Main, "word {w:#010x} rejected");
            }
        }
    }
}

#[test]
fn exhaustive_over_opcodes_and_operand_patterns() {
    let mut patterns = vec![
        0u32,
        OPERAND_MASK,
        0x55_5555,
        0xAA_AAAA,
        0x12_3456,
        0xFE_DCBA,
    ];
    patterns.extend((0..24).map(|b| 1u32 << b));
    patterns.extend((0..24).map(|b| OPERAND_MASK & !(1u32 << b)));
    // Every value of each 4-bit register field, the other fields zero or set.
    for shift in (0..24).step_by(4) {
        for v in 0..16u32 {
            patterns.push(v << shift);
            patterns.push((v << shift) | 0x01);
            patterns.push((v << shift) | 0x0100);
        }
    }
    // Every value of the low 8 bits (sub-operations, phases, rpt bodies).
    patterns.extend(0..256u32);
    let mut decoded = 0usize;
    for flag in [0, BUNDLE_FLAG] {
        for opcode in 0..128u32 {
            for &p in &patterns {
                let w = flag | opcode << OPCODE_SHIFT | p;
                check_word(w);
                decoded += decode(w).is_ok() as usize;
            }
        }
    }
    assert!(decoded > 10_000, "only {decoded} patterns decoded");
}

#[test]
fn sweep_of_the_low_operand_bits_of_every_opcode() {
    // Every operand value of every defined opcode would be 2^31 words; this sweeps the low 16
    // operand bits of every opcode with a fixed pattern in the high register fields.
    for opcode in 0..128u32 {
        for high in [0u32, 0x4D] {
            for low in 0..=0xFFFFu32 {
                check_word(opcode << OPCODE_SHIFT | high << 16 | low);
            }
        }
    }
}

#[test]
fn invalid_instructions_do_not_encode() {
    use Instr::*;
    let cases = [
        Alu {
            op: AluOp::Add,
            d: MReg(16),
            a: MReg(0),
            b: MReg(0),
        },
        Setzi {
            d: MReg(0),
            imm: 1 << 20,
        },
        Bri { target: 0x4C002 },
        Bri { target: 1 << 20 },
        Rpt {
            count: MReg(1),
            body: 0,
        },
        Rpti { count: 5, body: 0 },
        SetFp8 {
            format: Fp8Format::F143,
            scale: 32,
        },
        SetFp8 {
            format: Fp8Format::F143,
            scale: -33,
        },
        Amp {
            d: APair(0),
            a: APair(2),
            p: APair(4),
            phase: 4,
        },
        Amp {
            d: APair(1),
            a: APair(2),
            p: APair(4),
            phase: 0,
        },
        Load {
            width: Width::B64,
            d: DataReg::A(3),
            base: MReg(0),
            mode: AddrMode::Offset(0),
        },
        Load {
            width: Width::B128,
            d: DataReg::A(2),
            base: MReg(0),
            mode: AddrMode::Offset(0),
        },
        Load {
            width: Width::B64,
            d: DataReg::M(MReg(2)),
            base: MReg(0),
            mode: AddrMode::Offset(0),
        },
        Load {
            width: Width::B8,
            d: DataReg::A(2),
            base: MReg(0),
            mode: AddrMode::Offset(0),
        },
        Store {
            width: Width::B128,
            s: DataReg::A(0),
            base: MReg(0),
            mode: AddrMode::Offset(0),
        },
        FBin {
            ty: FType::F32v2,
            op: FBinOp::Add,
            d: 0,
            a: 1,
            b: 2,
        },
        FBin {
            ty: FType::F32,
            op: FBinOp::Add,
            d: 0,
            a: 16,
            b: 2,
        },
        FReduce {
            ty: FType::F32,
            op: RedOp::Sum,
            d: AReg(0),
            a: APair(0),
        },
        Bcast {
            ty: FType::F16v2,
            d: APair(0),
            a: AReg(0),
        },
        Conv {
            op: ConvOp::F16v2ToF32v2,
            d: 1,
            a: 0,
        },
        Conv {
            op: ConvOp::F32v2ToF16v2,
            d: 1,
            a: 3,
        },
    ];
    for c in cases {
        assert!(encode(&c).is_err(), "{c:?} encoded");
        assert!(validate(&c).is_err(), "{c:?} validated");
    }
}

#[test]
fn bundles_need_a_main_then_a_float_instruction() {
    let add = Instr::FBin {
        ty: FType::F32,
        op: FBinOp::Add,
        d: 0,
        a: 1,
        b: 2,
    };
    let bad = [
        Bundle {
            main: Instr::Bri { target: 0x4C000 },
            float: add,
        },
        Bundle {
            main: Instr::Halt,
            float: add,
        },
        Bundle {
            main: Instr::Nop,
            float: Instr::Nop,
        },
        Bundle {
            main: add,
            float: add,
        },
    ];
    for b in bad {
        assert!(encode_slot(&Slot::Bundle(b)).is_err(), "{b:?}");
    }
    let good = Bundle {
        main: Instr::Nop,
        float: add,
    };
    let w = encode_slot(&Slot::Bundle(good)).unwrap();
    assert_eq!(w[0], BUNDLE_FLAG);
    // A truncated bundle, a flagged second word, a non-float second word.
    assert!(matches!(
        decode_slot(&w[..1]),
        Err(DecodeError::BundleTruncated { .. })
    ));
    assert_eq!(
        decode_slot(&[w[0], w[1] | BUNDLE_FLAG]),
        Err(DecodeError::BundleSecondNotFloat {
            word: w[1] | BUNDLE_FLAG
        })
    );
    // Word 0 is a `nop`, not a float instruction.
    assert_eq!(decode(0), Ok(Instr::Nop));
    assert_eq!(
        decode_slot(&[w[0], 0]),
        Err(DecodeError::BundleSecondNotFloat { word: 0 })
    );
    assert!(matches!(decode_slot(&[]), Err(DecodeError::Empty)));
    // The flag on a control, supervisor or float instruction is rejected.
    for i in [Instr::Bri { target: 0 }, Instr::Halt, Instr::Exit, add] {
        let w = encode(&i).unwrap() | BUNDLE_FLAG;
        assert!(
            matches!(decode(w), Err(DecodeError::BundleFlagNotMain { .. })),
            "{i:?}"
        );
    }
}

#[test]
fn specific_words_are_rejected_with_the_reason() {
    // Undefined opcode.
    assert!(matches!(
        decode(0x7F00_0000),
        Err(DecodeError::Undefined {
            field: "opcode",
            ..
        })
    ));
    // A reserved bit in `nop`.
    assert!(matches!(
        decode(0x0000_0001),
        Err(DecodeError::ReservedBits { bits: 1, .. })
    ));
    // `ld64` with an odd register pair.
    let ld64 = encode(&Instr::Load {
        width: Width::B64,
        d: DataReg::A(2),
        base: MReg(1),
        mode: AddrMode::Offset(8),
    })
    .unwrap();
    let invalid_field = |w| matches!(decode(w), Err(DecodeError::InvalidField { .. }));
    let undefined = |w| matches!(decode(w), Err(DecodeError::Undefined { .. }));
    assert!(invalid_field(ld64 | 1 << 20));
    // An undefined float operation and conversion.
    assert!(undefined(0x5000_000F));
    assert!(undefined(0x5A00_0009));
    // `f32v4tof16` from a quad that does not start at a multiple of 4.
    assert!(decode(0x5A00_0008).is_ok());
    assert!(invalid_field(0x5A02_0008));
    // `rpt` with a zero body.
    assert!(invalid_field(0x4600_0000));
    // A misaligned branch target.
    assert!(invalid_field(0x4100_0002));
}

#[test]
fn known_encodings() {
    use Instr::*;
    assert_eq!(encode(&Nop), Ok(0));
    assert_eq!(encode(&Halt), Ok(0x6800_0000));
    assert_eq!(
        encode(&AluImm {
            op: AluOp::Add,
            d: MReg(1),
            a: MReg(2),
            imm: -1
        }),
        Ok(0x1012_FFFF)
    );
    assert_eq!(
        encode(&Setzi {
            d: MReg(3),
            imm: 0x4C000
        }),
        Ok(0x0234_C000)
    );
    assert_eq!(
        encode(&Alu {
            op: AluOp::CmpLe,
            d: MReg(1),
            a: MReg(2),
            b: MReg(3)
        }),
        Ok(0x0112_300F)
    );
    assert_eq!(
        encode(&SetFp8 {
            format: Fp8Format::F152,
            scale: -1
        }),
        Ok(0x0700_013F)
    );
    assert_eq!(
        encode(&Amp {
            d: APair(0),
            a: APair(2),
            p: APair(4),
            phase: 3
        }),
        Ok(0x5E02_4003)
    );
}
