//! Worker kernels of the fused flash-attention lowering (`lower::flash`). They work on the
//! AMP's own layouts, so scores never change layout between the two matmuls:
//!
//! - scores `S` (partials type) are `[keys / cols][R][cols]`: row `r`'s keys of group `j` are
//!   the 32 bytes at `(j R + r) 32`;
//! - probabilities `P` (operand type) are `[keys / kb][R][kb]`, the AMP's input layout for the
//!   `P V` product: again 32 bytes per row and group;
//! - a tile's partial result is `[Gv + 1][R][cols]` (partials type): the `Gv = dv / cols`
//!   groups of the unnormalised output `O`, then one group whose first two f32 words per row are
//!   the row's maximum `m` and sum `l`.
//!
//! [`flash_softmax`] turns a block of scores into probabilities and statistics; [`flash_combine`]
//! merges the partial results of the key blocks of the same rows and normalises them. The
//! arithmetic is f32 (f16 data is widened on load and narrowed on store), but for f16
//! probabilities, whose `exp` takes the shifted score rounded to f16 (see [`flash_softmax`]),
//! and f16 scores, which compute as the expansion's f16 operations round.
//!
//! The kernels by stage, a module each with their cycle models: `softmax` ([`flash_softmax`]),
//! `mask` ([`flash_mask`], [`flash_mask_bool`]), `rescale` ([`flash_rescale`]) and `combine`
//! ([`flash_combine`]).

use ipu_isa::{AluOp, Instr, MReg};

use crate::code::*;
use crate::types::Elem;

mod combine;
mod mask;
mod rescale;
mod softmax;

pub use combine::{combine_stage, flash_combine, flash_combine_slots};
pub use mask::{flash_mask, flash_mask_bool, flash_mask_bool_slots, flash_mask_slots};
pub use rescale::{flash_rescale, flash_rescale_slots};
pub use softmax::{baked_stride, flash_softmax, flash_softmax_slots};

/// Bytes per row of one column group in every flash layout (8 f32 or 16 f16).
pub const GROUP_ROW_BYTES: u32 = 32;

/// f32 bits of `-inf`.
const NEG_INF: u32 = 0xFF80_0000;
/// f32 bits of the most negative finite value: a row whose every key is masked has maximum
/// `-inf`; subtracting this instead keeps `exp(-inf - x) = 0` and never forms `-inf + inf`.
const NEG_MAX: u32 = 0xFF7F_FFFF;
/// f32 bits of the most negative finite f16 (-65504): the same floor for f16 arithmetic.
const NEG_MAX_F16: u32 = 0xC77F_E000;

/// Loads four elements of `ty` at `ptr` (advancing it) as two f32v2 pairs in `$a{dst}:..`,
/// `$a{dst+2}:..` (`$a12:13` is scratch for f16).
fn ld4(c: &mut Code, ty: Elem, dst: u8, ptr: MReg) {
    match ty {
        Elem::F32 => {
            c.op(ld64step(ap(dst), ptr, 8));
            c.op(ld64step(ap(dst + 2), ptr, 8));
        }
        Elem::F16 => {
            c.op(ld64step(ap(12), ptr, 8));
            widen4(c, dst, 12);
        }
    }
}

/// Stores the pairs `$a{src}:..` and `$a{src+2}:..` at `ptr` (advancing it) as four elements
/// of `ty` (`$a12:13` is scratch for f16).
fn st4(c: &mut Code, ty: Elem, src: u8, ptr: MReg) {
    match ty {
        Elem::F32 => {
            c.op(st64step(ap(src), ptr, 8));
            c.op(st64step(ap(src + 2), ptr, 8));
        }
        Elem::F16 => {
            narrow4(c, 12, src);
            c.op(st64step(ap(12), ptr, 8));
        }
    }
}

/// Slots of [`ld4`] and of [`st4`], the same: two 64-bit moves for f32, one and two
/// conversions for f16.
fn ld4_st4_slots(ty: Elem) -> u32 {
    match ty {
        Elem::F32 => 2,
        Elem::F16 => 3,
    }
}

/// Points `ptrs[0]` at `base` and, when `groups` is 2, `ptrs[1]` at `base + stride` (the
/// same row of the next group).
fn group_pointer_ops(ptrs: [MReg; 2], base: MReg, stride: MReg, groups: u32) -> Vec<Instr> {
    let mut ops = vec![alu_imm(AluOp::Add, ptrs[0], base, 0)];
    if groups == 2 {
        ops.push(alu(AluOp::Add, ptrs[1], base, stride));
    }
    ops
}
