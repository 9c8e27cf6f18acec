//! The row kernels against each other on the device.

mod common;

use common::run;
use ipu_kernels::{Elem, Kernel, UnOp};

/// `n` bytes from the xorshift state `x`.
fn random_bytes(x: &mut u32, n: u32) -> Vec<u8> {
    (0..n)
        .map(|_| {
            *x ^= *x << 13;
            *x ^= *x >> 17;
            *x ^= *x << 5;
            *x as u8
        })
        .collect()
}

/// `transpose_halves` writes what the general 2-byte transpose writes, for every quad of
/// output rows, from staged rows of 16 elements with random bits.
#[test]
fn transpose_halves_writes_what_the_general_transpose_writes() {
    let (input, out) = (0x60000u32, 0x64000u32);
    let mut x = 0x9E37_79B9u32;
    for (rows, words, stride) in [(4u32, 1u32, 32u32), (16, 4, 32), (8, 8, 48), (12, 3, 24)] {
        let staged = 2 * words;
        let bytes = random_bytes(&mut x, staged * stride + 8);
        let state = [input, out, rows, stride, 4 * words, words];
        let read = |kernel| {
            run(kernel, &state, &[(input, bytes.clone())])
                .read(0, out, rows * 4 * words)
                .unwrap()
        };
        assert_eq!(
            read(Kernel::TransposeHalves),
            read(Kernel::Transpose { bytes: 2 }),
            "rows={rows} words={words} stride={stride}"
        );
    }
}

/// `transpose_quads` writes, for every run and block, element `i` of each of the block's four
/// staged rows into output row `i`, and nothing else: its output region against the host's
/// transposition of random bits, around a fill pattern.
#[test]
fn transpose_quads_transposes_every_block_of_every_run_and_writes_nothing_else() {
    let (input, out) = (0x60000u32, 0x64000u32);
    let mut x = 0x85EB_CA6Bu32;
    // (in stride, out stride, runs as (staged row, column, output byte, blocks)).
    type Runs = &'static [(u32, u32, u32, u32)];
    let cases: [(u32, u32, Runs); 3] = [
        (128, 16, &[(0, 0, 0, 16)]),
        (128, 16, &[(4, 40, 8, 6), (8, 0, 1024, 16), (0, 0, 0, 1)]),
        (32, 32, &[(0, 0, 0, 4), (4, 0, 8, 4), (8, 8, 16, 2)]),
    ];
    for (s, os, runs) in cases {
        let staged = random_bytes(&mut x, 16 * s + 64);
        let out_bytes = 4096u32;
        let mut state = vec![runs.len() as u32];
        let mut expected = vec![0xA5u8; out_bytes as usize];
        for &(row, col, at, blocks) in runs {
            state.extend([input + row * s + 2 * col, out + at, blocks]);
            for b in 0..blocks {
                for i in 0..4 {
                    for k in 0..4 {
                        let from = ((row + k) * s + 2 * (col + 4 * b + i)) as usize;
                        let to = (at + (4 * b + i) * os + 2 * k) as usize;
                        expected[to..to + 2].copy_from_slice(&staged[from..from + 2]);
                    }
                }
            }
        }
        let got = run(
            Kernel::TransposeQuads {
                in_stride: s as u16,
                out_stride: os as u16,
            },
            &state,
            &[
                (input, staged.clone()),
                (out, vec![0xA5; out_bytes as usize]),
            ],
        )
        .read(0, out, out_bytes)
        .unwrap();
        assert_eq!(got, expected, "in stride {s} out stride {os} runs {runs:?}");
    }
}

/// `scale_halves` writes what the general f16 scale writes, bit for bit, for factors that are
/// exactly f16 (powers of two down to the f16 subnormals), over every vector count from 0.
#[test]
fn scale_halves_writes_what_the_general_f16_scale_writes() {
    let (input, out) = (0x60000u32, 0x64000u32);
    let mut x = 0x2545_F491u32;
    for factor in [0.125f32, 2.0, 0.5, 2f32.powi(-20), 1024.0] {
        for vectors in [0u32, 1, 2, 3, 11] {
            let bytes = random_bytes(&mut x, 8 * vectors);
            let state = [input, out, vectors, factor.to_bits()];
            let read = |kernel| {
                run(
                    kernel,
                    &state,
                    &[
                        (input, bytes.clone()),
                        (out, vec![0xA5; 16 + 8 * vectors as usize]),
                    ],
                )
                .read(0, out, 16 + 8 * vectors)
                .unwrap()
            };
            let general = Kernel::Unary {
                ty: Elem::F16,
                op: UnOp::Scale,
            };
            assert_eq!(
                read(Kernel::ScaleHalves),
                read(general),
                "factor={factor} vectors={vectors}"
            );
        }
    }
}
