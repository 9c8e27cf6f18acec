//! Deterministic reference inputs.
//!
//! Input `i` of a graph draws its elements from a SplitMix64 stream seeded with
//! `seed + (i + 1) * 0x9E3779B97F4A7C15`, one 64-bit draw per element in row-major order. The
//! top 24 bits of a draw give `u` uniform on `[-1, 1)` in steps of 2^-23 (exact in f32); the
//! element is `u` rounded to the input's dtype:
//! - f32: `u` itself; f16: `u` rounded to nearest even (uniform on [-1, 1) at f16 resolution);
//! - FP8: `u` quantised at the dtype's scale (RNE, saturating). The built-ins pick scales
//!   (F143 at -4, F152 at 0) at which [-1, 1) spans 11 (F143) and 16 (F152) binades of
//!   normal and subnormal codes, so the quantised inputs exercise most of the codes of each
//!   sign below 1.
//!
//! An input that indexes a table (a `gather`'s indices, [`ipu_graph::index_bounds`]) takes
//! `floor((u + 1) * n) - n` instead, for a table of `n` entries: every index from `-n` to
//! `n - 1` about equally often.
//!
//! Generation is sequential and independent of any thread count.
//!
//! A run that calls the program several times draws iteration `i`'s inputs from
//! [`iteration_seed`]`(seed, i)`: `seed` itself for iteration 0, so a single call sees the
//! inputs it always did.

use ipu_graph::{Graph, TensorType};

use crate::{Tensor, round_to_dtype};

/// Golden-ratio increment of SplitMix64 (Steele, Lea and Flood, "Fast splittable pseudorandom
/// number generators", OOPSLA 2014).
const SPLITMIX_GAMMA: u64 = 0x9E37_79B9_7F4A_7C15;

struct SplitMix64(u64);

/// SplitMix64's output function of a state (it maps 0 to 0).
fn splitmix_mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

impl SplitMix64 {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(SPLITMIX_GAMMA);
        splitmix_mix(self.0)
    }

    /// Uniform on [-1, 1) in steps of 2^-23.
    fn uniform(&mut self) -> f32 {
        let bits = (self.next() >> 40) as u32; // 24 bits
        (bits as f32) * (1.0 / 8_388_608.0) - 1.0
    }
}

/// One tensor per graph input, in order, from `seed` (see the module docs for the
/// distribution).
pub fn make_inputs(graph: &Graph, seed: u64) -> Vec<Tensor> {
    let bounds = ipu_graph::index_bounds(graph);
    graph
        .inputs()
        .iter()
        .enumerate()
        .map(|(i, &id)| {
            let ty = &graph.value(id).ty;
            match bounds.iter().find(|b| b.input == id) {
                Some(b) => make_indices(ty, i, seed, b.entries),
                None => make_input(ty, i, seed),
            }
        })
        .collect()
}

/// The indices of a table of `entries` entries for the graph input at `index` (see the module
/// docs).
fn make_indices(ty: &TensorType, index: usize, seed: u64, entries: usize) -> Tensor {
    let mut rng = SplitMix64(seed.wrapping_add((index as u64 + 1).wrapping_mul(SPLITMIX_GAMMA)));
    let n = entries as f64;
    let data = (0..ty.elements())
        .map(|_| {
            let u = f64::from(rng.uniform());
            (((u + 1.0) * n).floor() - n).clamp(-n, n - 1.0) as f32
        })
        .collect();
    Tensor {
        dtype: ty.dtype,
        shape: ty.shape.clone(),
        data,
    }
}

/// The tensor [`make_inputs`] gives for the graph input at position `index` of type `ty`
/// (for callers that know the inputs' types but not the graph, such as a package's manifest).
pub fn make_input(ty: &TensorType, index: usize, seed: u64) -> Tensor {
    let mut rng = SplitMix64(seed.wrapping_add((index as u64 + 1).wrapping_mul(SPLITMIX_GAMMA)));
    let data = (0..ty.elements())
        .map(|_| round_to_dtype(ty.dtype, rng.uniform()))
        .collect();
    Tensor {
        dtype: ty.dtype,
        shape: ty.shape.clone(),
        data,
    }
}

/// The seed of iteration `iteration`'s inputs in a run of several iterations from `seed`:
/// `seed` plus the `iteration`-th output of a SplitMix64 stream started at state 0, whose 0-th
/// output is 0, so iteration 0 uses `seed` itself. The offsets are spread over the whole 64-bit
/// range, so no iteration's input streams overlap another's in practice.
pub fn iteration_seed(seed: u64, iteration: u64) -> u64 {
    seed.wrapping_add(splitmix_mix(iteration.wrapping_mul(SPLITMIX_GAMMA)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iteration_zero_keeps_the_seed_and_later_ones_differ() {
        for seed in [0, 1, 42, u64::MAX] {
            assert_eq!(iteration_seed(seed, 0), seed);
            let seeds: std::collections::BTreeSet<u64> =
                (0..1000).map(|i| iteration_seed(seed, i)).collect();
            assert_eq!(seeds.len(), 1000, "seed {seed}");
        }
        // The first offset is SplitMix64's first output from state 0.
        assert_eq!(iteration_seed(0, 1), SplitMix64(0).next());
    }
}
