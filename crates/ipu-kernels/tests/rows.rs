//! The row kernels against each other on the device.

mod common;

use common::run;
use ipu_kernels::Kernel;

/// `transpose_halves` writes what the general 2-byte transpose writes, for every quad of
/// output rows, from staged rows of 16 elements with random bits.
#[test]
fn transpose_halves_writes_what_the_general_transpose_writes() {
    let (input, out) = (0x60000u32, 0x64000u32);
    let mut x = 0x9E37_79B9u32;
    for (rows, words, stride) in [(4u32, 1u32, 32u32), (16, 4, 32), (8, 8, 48), (12, 3, 24)] {
        let staged = 2 * words;
        let bytes: Vec<u8> = (0..staged * stride + 8)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                x as u8
            })
            .collect();
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
