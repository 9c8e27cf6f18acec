//! The AMP in every mode against a host model: two rows through the pipeline, with partials.

mod common;

use common::*;
use half::f16;
use ipu_target::{AmpMode, TargetKind};

const W: u32 = 0x80000;
const X: u32 = 0x81000;
const P: u32 = 0x82000;
const OUT: u32 = 0x83000;
const ROWS: usize = 3; // two real rows and a drain row

impl Rng {
    fn f16(&mut self) -> u16 {
        f16::from_f32((self.next() % 513) as f32 / 64.0 - 4.0).to_bits()
    }
    fn f32(&mut self) -> u32 {
        ((self.next() % 100_001) as f32 / 997.0 - 50.0).to_bits()
    }
    fn fp8(&mut self) -> u8 {
        let c = self.next() as u8;
        if c == 0x80 { 0 } else { c }
    }
}

fn hf(b: u16) -> f32 {
    f16::from_bits(b).to_f32()
}

fn fmt_name(m: AmpMode) -> &'static str {
    match m {
        AmpMode::F16F16 => "f16f16",
        AmpMode::F16F32 => "f16f32",
        AmpMode::F32F32 => "f32f32",
        AmpMode::F8F16 => "f8f16",
    }
}

fn check_mode(mode: AmpMode) {
    let g = mode.geometry();
    let (k_row, lanes, columns) = (g.k as usize, g.lanes as usize, g.columns as usize);
    let mut rng = Rng(0xA11CE + mode as u64);
    let f8w = (ipu_numerics::Fp8Format::F143, -2);
    let f8x = (ipu_numerics::Fp8Format::F152, 1);
    // Weights (k-major) as bytes and values.
    let mut wb = Vec::new();
    let mut wv = Vec::new();
    let mut xb = Vec::new();
    let mut xv = Vec::new();
    let n_w = k_row * columns;
    let n_x = ROWS * k_row;
    match mode {
        AmpMode::F16F16 | AmpMode::F16F32 => {
            for _ in 0..n_w {
                let b = rng.f16();
                wb.extend_from_slice(&b.to_le_bytes());
                wv.push(hf(b));
            }
            for _ in 0..n_x {
                let b = rng.f16();
                xb.extend_from_slice(&b.to_le_bytes());
                xv.push(hf(b));
            }
        }
        AmpMode::F32F32 => {
            for _ in 0..n_w {
                let b = rng.f32();
                wb.extend_from_slice(&b.to_le_bytes());
                wv.push(f32::from_bits(b));
            }
            for _ in 0..n_x {
                let b = rng.f32();
                xb.extend_from_slice(&b.to_le_bytes());
                xv.push(f32::from_bits(b));
            }
        }
        AmpMode::F8F16 => {
            for _ in 0..n_w {
                let c = rng.fp8();
                wb.push(c);
                wv.push(ipu_numerics::decode(f8w.0, c, f8w.1));
            }
            for _ in 0..n_x {
                let c = rng.fp8();
                xb.push(c);
                xv.push(ipu_numerics::decode(f8x.0, c, f8x.1));
            }
        }
    }
    assert_eq!(wb.len() as u32, g.weight_bytes());
    // Partials: one 64-bit chunk per phase.
    let f32_partials = matches!(mode, AmpMode::F16F32 | AmpMode::F32F32);
    let cpp = columns / 4;
    let mut pb = Vec::new();
    let mut pv = Vec::new();
    for _ in 0..ROWS * columns {
        if f32_partials {
            let b = rng.f32();
            pb.extend_from_slice(&b.to_le_bytes());
            pv.push(f32::from_bits(b));
        } else {
            let b = rng.f16();
            pb.extend_from_slice(&b.to_le_bytes());
            pv.push(hf(b));
        }
    }
    // Host model.
    let mut want: Vec<u32> = Vec::new();
    for r in 0..ROWS - 1 {
        let mut acc = vec![0f32; columns];
        for p in 0..4 {
            for (c, a) in acc.iter_mut().enumerate() {
                for j in 0..lanes {
                    let k = p * lanes + j;
                    *a += xv[r * k_row + k] * wv[k * columns + c];
                }
            }
            for i in 0..cpp {
                acc[p * cpp + i] += pv[r * columns + p * cpp + i];
            }
        }
        for a in acc {
            want.push(if f32_partials {
                a.to_bits()
            } else {
                f16::from_f32(a).to_bits() as u32
            });
        }
    }
    // Device program.
    let mut body = format!(" setfp8 f152, 1\n li $m1, {X}\n li $m2, {OUT}\n li $m3, {P}\n");
    for s in 0..4 * ROWS {
        body += &format!(
            " ld64step $a0:1, $m1+=8\n ld64step $a2:3, $m3+=8\n amp $a4:5, $a0:1, $a2:3, {}\n st64step $a4:5, $m2+=8\n",
            s % 4
        );
    }
    let src = format!(
        "main:\n setfp8 f143, -2\n ampcfg {}\n li $m1, {W}\n ampw $m1\n setzi $m1, w\n run $m1, $m2\n waitw\n halt\n .align 8\nw:\n{body} exit\n",
        fmt_name(mode)
    );
    let (mut d, entry) = device_with(TargetKind::C600.target(), 1, &src);
    d.write(0, W, &wb).unwrap();
    d.write(0, X, &xb).unwrap();
    d.write(0, P, &pb).unwrap();
    d.run(entry, &ipu_sim::RunLimits::default())
        .unwrap_or_else(|e| panic!("{mode:?}: {e}"));
    // Output chunks 4.. are rows 0 and 1.
    let out = d.read(0, OUT + 32, 32 * (ROWS as u32 - 1)).unwrap();
    let got: Vec<u32> = if f32_partials {
        out.chunks(4)
            .map(|c| u32::from_le_bytes(c.try_into().unwrap()))
            .collect()
    } else {
        out.chunks(2)
            .map(|c| u16::from_le_bytes(c.try_into().unwrap()) as u32)
            .collect()
    };
    assert_eq!(got, want, "{mode:?}");
}

#[test]
fn every_mode_matches_the_reference() {
    // f16 inputs with f16 or f32 partials, f32 inputs, FP8 inputs with f16 partials (on C600).
    for mode in [
        AmpMode::F16F16,
        AmpMode::F16F32,
        AmpMode::F32F32,
        AmpMode::F8F16,
    ] {
        check_mode(mode);
    }
}

#[test]
fn geometry_matches_the_throughput_of_each_mode() {
    // MACs per amp instruction = lanes x columns; at one amp per tile cycle (six workers, one
    // slot each per six cycles) that is the mode's MACs per cycle.
    for mode in AmpMode::ALL {
        let g = mode.geometry();
        assert_eq!(g.lanes * g.columns, mode.macs_per_cycle(), "{mode:?}");
        assert_eq!(g.k, 4 * g.lanes);
    }
}
