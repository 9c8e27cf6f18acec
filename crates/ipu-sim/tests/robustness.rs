//! Random programs never panic the simulator: every outcome is a report or a fault.

mod common;

use common::Rng;
use ipu_isa::{Slot, decode_slot, encode_slot};
use ipu_sim::{Device, RunLimits};
use ipu_target::{Target, TargetKind};

/// A random valid slot (random words until one decodes), re-encoded.
fn random_slot(rng: &mut Rng) -> Vec<u32> {
    loop {
        let w0 = rng.next() as u32;
        // Bias towards defined opcodes: keep the low 7 opcode bits in the used range.
        let w0 = (w0 & 0x80FF_FFFF) | (((rng.next() % 0x71) as u32) << 24);
        let w1 = ((rng.next() as u32) & 0x00FF_FFFF) | (((0x50 + rng.next() % 15) as u32) << 24);
        if let Ok((slot, _)) = decode_slot(&[w0, w1]) {
            use ipu_isa::Instr::*;
            let main = match slot {
                Slot::Single(i) => i,
                Slot::Bundle(b) => b.main,
            };
            if main == Halt {
                continue;
            }
            // Most random memory accesses fault at once; keep one in eight so that programs
            // get further (runs, exchanges, loops, the AMP).
            let memory = matches!(
                main,
                Load { .. }
                    | Store { .. }
                    | Ld2x64Pace { .. }
                    | LdSt64Pace { .. }
                    | Ld2xSt64Pace { .. }
            );
            if memory && !rng.next().is_multiple_of(8) {
                continue;
            }
            return encode_slot(&slot).expect("a decoded slot encodes");
        }
    }
}

fn program(rng: &mut Rng, slots: usize) -> Vec<u8> {
    let mut words: Vec<u32> = Vec::new();
    // Point $m1..$m8 at plausible addresses: interleaved, standard, code, odd.
    let addrs = [
        0x80000u32, 0x90010, 0x4C000, 0x60008, 0x80001, 0xE7FF0, 0x4C100, 0xA0000,
    ];
    for (i, a) in addrs.iter().enumerate() {
        let li = format!("li $m{}, {a}", i + 1);
        let o = ipu_isa::assemble(&li, "p.s", &Default::default()).unwrap();
        for c in o.sections[0].bytes.chunks(4) {
            words.push(u32::from_le_bytes(c.try_into().unwrap()));
        }
    }
    for _ in 0..slots {
        let s = random_slot(rng);
        if s.len() == 2 && words.len() % 2 == 1 {
            words.push(0); // nop to align the bundle
        }
        words.extend(s);
    }
    words.push(ipu_isa::encode(&ipu_isa::Instr::Halt).unwrap());
    words.iter().flat_map(|w| w.to_le_bytes()).collect()
}

#[test]
fn random_programs_fault_or_halt_but_never_panic() {
    let mut rng = Rng(0xDEAD_BEEF_1234_5678);
    let mut faults = 0;
    for case in 0..300 {
        let target = TargetKind::ALL[case % 3].target();
        let tiles = 1 + (case % 3) as u32;
        let mut d = Device::new(target, tiles);
        for t in 0..tiles {
            let code = program(&mut rng, 40);
            d.write(t, 0x4C000, &code).unwrap();
            // A second random routine where random `run`s and branches may land.
            let code = program(&mut rng, 40);
            d.write(t, 0x4C100, &code).unwrap();
        }
        let limits = RunLimits {
            max_cycles: 200_000,
            max_global_steps: 20,
        };
        match d.run(0x4C000, &limits) {
            Ok(r) => assert!(r.cycles <= 200_000 * 2 + 10_000, "{r:?}"),
            Err(e) => {
                faults += 1;
                let line = e.to_string();
                assert!(!line.contains('\n'), "{line}");
            }
        }
    }
    assert!(faults > 0);
    let _ = Target::gc200();
}
