//! The flash-attention kernels on the simulated device against a host computation.

use ipu_codegen::code::{Code, m, setzi};
use ipu_codegen::kernels::{self, Elem, Kernel};
use ipu_isa::Instr;
use ipu_sim::{Device, RunLimits};
use ipu_target::Target;

const CODE: u32 = 0x4C000;
const KERNEL: u32 = 0x4D000;
const STATE: u32 = 0x50000;

/// Runs `kernel` once on tile 0 with `state` after writing `mem`; returns the device.
fn run(kernel: Kernel, state: &[u32], mem: &[(u32, Vec<u8>)]) -> Device {
    let mut dev = Device::new(Target::gc200(), 1);
    let k = kernels::generate(kernel).lay_out(KERNEL).unwrap();
    dev.write(0, KERNEL, &k.bytes).unwrap();
    let mut sup = Code::new();
    sup.op(setzi(m(2), KERNEL));
    sup.op(setzi(m(3), STATE));
    sup.op(Instr::Run {
        entry: m(2),
        state: m(3),
    });
    sup.op(Instr::WaitW);
    sup.op(Instr::Halt);
    let s = sup.lay_out(CODE).unwrap();
    dev.write(0, CODE, &s.bytes).unwrap();
    let words: Vec<u8> = state.iter().flat_map(|w| w.to_le_bytes()).collect();
    dev.write(0, STATE, &words).unwrap();
    for (addr, bytes) in mem {
        dev.write(0, *addr, bytes).unwrap();
    }
    dev.run(CODE, &RunLimits::default()).unwrap();
    dev
}

fn f32s(dev: &Device, addr: u32, n: usize) -> Vec<f32> {
    dev.read(0, addr, 4 * n as u32)
        .unwrap()
        .chunks(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

fn bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn value(i: usize) -> f32 {
    ((i * 7919 % 1000) as f32 - 500.0) / 250.0
}

#[test]
fn combine_merges_two_sources_like_the_host() {
    // Two sources of 3 rows, dv = 16 (2 groups of 8 f32), f32 output in groups of 8.
    let (rows, dv, cols) = (3usize, 16usize, 8usize);
    let groups = dv / cols;
    let src = [0x60000u32, 0x61000];
    let mut mem = Vec::new();
    let mut o = vec![vec![0f32; (groups + 1) * rows * cols]; 2];
    for (j, oj) in o.iter_mut().enumerate() {
        for (i, x) in oj.iter_mut().enumerate() {
            *x = value(i + 100 * j);
        }
        for r in 0..rows {
            oj[(groups * rows + r) * cols] = value(r + 7 * j); // m
            oj[(groups * rows + r) * cols + 1] = 1.0 + r as f32 + j as f32; // l
        }
        mem.push((src[j], bytes(oj)));
    }
    let out = 0x62000u32;
    let scratch = 0x63000u32;
    let mut state = vec![out, (rows * cols * 4) as u32, rows as u32, scratch, 2];
    for &s in &src {
        state.extend([s, (rows * 32) as u32, s + (groups * rows * 32) as u32]);
    }
    let kernel = Kernel::FlashCombine {
        p: Elem::F32,
        out: Elem::F32,
        cols: 8,
        gout: 8,
        dv: dv as u32,
    };
    let dev = run(kernel, &state, &mem);
    let got = f32s(&dev, out, groups * rows * cols);
    for r in 0..rows {
        let m: Vec<f32> = (0..2).map(|j| o[j][(groups * rows + r) * cols]).collect();
        let l: Vec<f32> = (0..2)
            .map(|j| o[j][(groups * rows + r) * cols + 1])
            .collect();
        let mx = m[0].max(m[1]);
        let w: Vec<f32> = m.iter().map(|x| (x - mx).exp()).collect();
        let big_l = w[0] * l[0] + w[1] * l[1];
        for d in 0..dv {
            let (g, lane) = (d / cols, d % cols);
            let want = (w[0] * o[0][(g * rows + r) * cols + lane]
                + w[1] * o[1][(g * rows + r) * cols + lane])
                / big_l;
            let have = got[(g * rows + r) * cols + lane];
            assert!(
                (want - have).abs() <= 1e-5 * want.abs().max(1.0),
                "row {r} d {d}: {have} vs {want}"
            );
        }
    }
}
