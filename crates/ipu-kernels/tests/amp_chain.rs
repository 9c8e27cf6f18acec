//! Chains of AMP rounds ([`Kernel::AmpChain`]) on the device: `out = in x W` over several
//! output groups and input blocks, one round per weight block as the flash attention's
//! products run them (the last round of a group writes `out`, earlier ones alternate with a
//! scratch buffer), checked against the host's product. Small integer data, so every sum is
//! exact in f32 whatever its order. The rounds keep the workers' registers from one round to
//! the next: the entry pointer, the carried row's output pointer and the zero partials-in.

use ipu_isa::Instr;
use ipu_kernels::code::{Code, m, setzi};
use ipu_kernels::*;
use ipu_sim::{Device, RunLimits};
use ipu_target::{AmpMode, INTERLEAVED_BASE, MEMORY_BASE, Target};

const CODE: u32 = MEMORY_BASE;
const KERNEL: u32 = 0x4D000;
const STATE: u32 = 0x58000;
const REGION: u32 = 0x8000;
/// Input `[kblocks][rows][16]` f16, weights `[groups][kblocks][16][8]` f16, out
/// `[groups][rows][8]` f32, scratch `[rows][8]` f32.
const INPUT: u32 = INTERLEAVED_BASE;
const WEIGHTS: u32 = INTERLEAVED_BASE + REGION;
const OUT: u32 = INTERLEAVED_BASE + 2 * REGION;
const SCRATCH: u32 = INTERLEAVED_BASE + 3 * REGION;

/// A small integer in -3..=3 from `i` and `seed`.
fn small(i: u32, seed: u32) -> f32 {
    (((i.wrapping_mul(2_654_435_761) ^ seed.wrapping_mul(40_503)) >> 7) % 7) as f32 - 3.0
}

/// Runs the chain over `rows` rows, `groups` output groups of 8 and `kblocks` input blocks of
/// 16, returns the device's `out` and the host's.
fn chain(rows: u32, groups: u32, kblocks: u32, seed: u32) -> (Vec<f32>, Vec<f32>) {
    let mut dev = Device::new(Target::gc200(), 1);
    let k = 16 * kblocks;
    let x: Vec<f32> = (0..rows * k).map(|i| small(i, seed)).collect();
    let w: Vec<f32> = (0..k * 8 * groups).map(|i| small(i, seed + 1)).collect();
    let f16 = |v: &[f32]| -> Vec<u8> {
        v.iter()
            .flat_map(|&f| ipu_sim::f32_to_f16_bits(f).to_le_bytes())
            .collect()
    };
    // x[r][c] at input[c / 16][r][c % 16]; w[c][n] at weights[n / 8][c / 16][c % 16][n % 8].
    let mut xin = vec![0f32; (rows * k) as usize];
    for r in 0..rows {
        for c in 0..k {
            xin[((c / 16 * rows + r) * 16 + c % 16) as usize] = x[(r * k + c) as usize];
        }
    }
    let mut win = vec![0f32; (k * 8 * groups) as usize];
    for c in 0..k {
        for n in 0..8 * groups {
            win[(((n / 8 * kblocks + c / 16) * 16 + c % 16) * 8 + n % 8) as usize] =
                w[(c * 8 * groups + n) as usize];
        }
    }
    dev.write(0, INPUT, &f16(&xin)).unwrap();
    dev.write(0, WEIGHTS, &f16(&win)).unwrap();
    let same = if rows.is_multiple_of(6) {
        (rows / 6) as u16
    } else {
        0
    };
    // The rounds, as `ops::flash::lower::amp_rounds` issues them.
    let mut launches = Vec::new();
    let mut prev_out = None;
    let mut zeros = false;
    for g in 0..groups {
        for kk in 0..kblocks {
            let n = g * kblocks + kk;
            let last = (kblocks - 1 - kk).is_multiple_of(2);
            let (dst, src) = if last {
                ((BufferId(2), g * rows * 32), (BufferId(3), 0))
            } else {
                ((BufferId(3), 0), (BufferId(2), g * rows * 32))
            };
            let partials = kk > 0;
            let drain = n + 1 == groups * kblocks;
            let state = AmpChainState {
                input: (BufferId(0), kk * rows * 32),
                partials: if partials {
                    StateWord::Addr(src.0, src.1)
                } else {
                    StateWord::Const(0)
                },
                out: dst,
                row_bytes: [32, 32],
                rows,
                carry: prev_out,
            };
            let kernel = Kernel::AmpChain {
                partials,
                carry: n > 0,
                drain,
                rows: same,
                odd: n % 2 == 1,
                zeros: zeros && !partials,
            };
            launches.push((kernel, state, WEIGHTS + (g * kblocks + kk) * 256));
            prev_out = Some(dst);
            zeros |= !partials;
        }
    }
    let mut kernels: Vec<Kernel> = Vec::new();
    for (k, _, _) in &launches {
        if !kernels.contains(k) {
            kernels.push(*k);
        }
    }
    for (i, k) in kernels.iter().enumerate() {
        let at = KERNEL + 0x1000 * i as u32;
        dev.write(0, at, &generate(*k).lay_out(at).unwrap().bytes)
            .unwrap();
    }
    let base = [INPUT, WEIGHTS, OUT, SCRATCH];
    let mut sup = Code::new();
    sup.op(Instr::AmpCfg {
        mode: AmpMode::F16F32,
    });
    // The tables one after another, as `emit::support_layout` stores a chain.
    for (n, (k, st, weights)) in launches.iter().enumerate() {
        let at = STATE + n as u32 * AmpChainState::TABLE_BYTES;
        let words: Vec<u8> = st
            .words()
            .iter()
            .flat_map(|w| {
                match *w {
                    StateWord::Const(v) => v,
                    StateWord::Addr(b, off) => base[b.0 as usize] + off,
                }
                .to_le_bytes()
            })
            .collect();
        assert_eq!(words.len() as u32, AmpChainState::TABLE_BYTES);
        dev.write(0, at, &words).unwrap();
        let entry = KERNEL + 0x1000 * kernels.iter().position(|x| x == k).unwrap() as u32;
        sup.op(setzi(m(4), *weights));
        sup.op(Instr::AmpW { base: m(4) });
        sup.op(setzi(m(2), entry));
        sup.op(setzi(m(3), at));
        sup.op(Instr::RunAll {
            entry: m(2),
            state: m(3),
        });
        sup.op(Instr::WaitW);
    }
    sup.op(Instr::Halt);
    dev.write(0, CODE, &sup.lay_out(CODE).unwrap().bytes)
        .unwrap();
    dev.run(CODE, &RunLimits::default())
        .unwrap_or_else(|e| panic!("rows {rows}: {e}"));
    let bytes = dev.read(0, OUT, groups * rows * 32).unwrap();
    let got: Vec<f32> = bytes
        .chunks(4)
        .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
        .collect();
    // The host's product in the device's layout `[groups][rows][8]`.
    let mut want = vec![0f32; (groups * rows * 8) as usize];
    for g in 0..groups {
        for r in 0..rows {
            for j in 0..8 {
                let n = g * 8 + j;
                want[((g * rows + r) * 8 + j) as usize] = (0..k)
                    .map(|c| x[(r * k + c) as usize] * w[(c * 8 * groups + n) as usize])
                    .sum();
            }
        }
    }
    (got, want)
}

#[test]
fn a_chain_of_rounds_computes_the_product_over_its_groups_and_blocks() {
    // Rows split unevenly (an `rpt` count from the state), evenly with few rows a worker (the
    // rows written out) and evenly with many (an immediate `rpt`); even and odd numbers of
    // input blocks (the first round writing the scratch or `out`); one group (a chain whose
    // only first pass is its first round) and three.
    for (rows, groups, kblocks) in [(17, 3, 2), (12, 3, 3), (90, 2, 4), (102, 3, 1), (13, 1, 3)] {
        let (got, want) = chain(rows, groups, kblocks, rows + groups);
        assert_eq!(got, want, "rows {rows}, groups {groups}, blocks {kblocks}");
    }
}
