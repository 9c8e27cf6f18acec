//! [`Kernel`], what a kernel computes, and its dispatch: [`generate`] calls the kernel's
//! generator in its module (`basic`, `unary`, `convert`, `map`, `gather`, `rows`, `flash`),
//! and [`Kernel::state_kind`] names its vertex state's layout.

use ipu_isa::Fp8Format;
use ipu_numerics::MapFn;

use crate::code::Code;
use crate::convert::ConvType;
use crate::state::*;
use crate::types::{BinOp, CastType, Elem, UnOp};
use crate::{basic, convert, flash, gather, map, rows, unary};

/// What a kernel computes; the key under which it is specialised and linked once per program.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kernel {
    /// One AMP pass over rows: `out = in x W (+ partials)`. State: in, partials, out, rows.
    Amp { partials: bool },
    /// The same pass started on all six workers with one state (`SupOp::RunAll`): worker
    /// context `c` takes rows `b[c]..b[c + 1]`. State: in, partials, out (row 0 each), then
    /// the seven row bounds `b`.
    AmpAll { partials: bool },
    /// The same pass started on all six workers at once (`runall`) with one state: a table of
    /// six [`AmpState`]s, worker context `c` reading entry `c` ([`AmpTableState`]).
    AmpTable { partials: bool },
    /// [`Kernel::AmpTable`] where every worker has at least one row: no check for an empty
    /// share, and no `nop` aligning the loop (`basic::amp_table_dense_slots`).
    AmpTableDense { partials: bool },
    /// A round of a chain of AMP rounds over the same rows, every worker with at least two
    /// ([`AmpChainState`]), launched right after the chain's round before on the same
    /// contexts, whose registers it keeps: with `carry`, the previous round left its last row
    /// in the AMP and this one stores it (a round without finds its table entry, the chain's
    /// first); without `drain`, this one leaves its own there; with `rows` (not 0), every
    /// worker has that many rows and the loop's count is immediate, one state load less;
    /// `odd`, the round's parity in the chain, picks its output pointer's register; with
    /// `zeros`, an earlier round of the chain set the zero partials-in a first pass adds
    /// (`basic::amp_chain_slots`).
    AmpChain {
        partials: bool,
        carry: bool,
        drain: bool,
        rows: u16,
        odd: bool,
        zeros: bool,
    },
    /// `out = a OP b` over 64-bit vectors. State: a, b, out, vectors.
    Binary { ty: Elem, op: BinOp },
    /// `out = f(in)` over 64-bit vectors. State: in, out, vectors, (factor bits).
    Unary { ty: Elem, op: UnOp },
    /// f16 `out = in * factor` by a factor that is exactly an f16 (a power of two in range):
    /// one f16v4 multiply per vector, pipelined (`unary::scale_halves`), the result the same
    /// as [`Kernel::Unary`]'s `Scale`. State: [`UnaryState`].
    ScaleHalves,
    /// Conversion over groups of 4 elements. State: in, out, groups of 4. From f32 to FP8 it
    /// goes through f16 (the conversion unit takes f16v4), so it rounds twice.
    Cast { from: CastType, to: CastType },
    /// f32 to FP8 (`format`, `scale`) rounded once, to the FP8 value nearest the f32 one, ties
    /// to even, saturating: each element is rounded to odd at 6 significant bits in the
    /// integer unit first, which the conversion unit's roundings then keep exact
    /// (`basic::cast_once`). State: [`CastState`].
    CastOnce { format: Fp8Format, scale: i8 },
    /// Conversion between any two element formats, one element at a time through f32, with
    /// its tables after the code (`convert::convert`). State: [`CastState`].
    Convert {
        from: ConvType,
        to: ConvType,
        overflow: ipu_numerics::Overflow,
    },
    /// Integer arithmetic on `bits`-bit elements, one at a time (`convert::int_binary`).
    /// State: [`BinaryState`], `vectors` counting groups of 4 elements.
    IntBinary { op: BinOp, bits: u8, signed: bool },
    /// `out = 0` over 32-bit words. State: out, words.
    Zero,
    /// A predicate, logical operation or selection of operands `a`, `b`, `c` (as many as the
    /// function takes; the others repeat `a`) into `to`, one element at a time through f32
    /// (`map::map`). State: [`MapState`].
    Map {
        f: MapFn,
        a: ConvType,
        b: ConvType,
        c: ConvType,
        to: ConvType,
    },
    /// One row per run-time index from a part of a table, zeros for an index outside the
    /// part (`gather::gather_rows`). State: [`GatherRowsState`].
    GatherRows,
    /// Per index, one column of a transposed table's part (the row of the table's transpose)
    /// or zeros: a tied embedding looked up in the LM head's operand
    /// (`gather::gather_columns`), elements of `elem_bytes` in groups of `group` (a power of
    /// two) entries. State: [`GatherColumnsState`].
    GatherColumns { elem_bytes: u8, group: u8 },
    /// The bitwise OR of runs of words (`gather::or_words`): the merge of the parts' rows of
    /// a lookup. State: [`OrWordsState`].
    OrWords,
    /// Zero the padding columns of `rows` rows of `stride` bytes. State: first pad word,
    /// rows, stride, keep-mask of the first word, full words.
    PadClear,
    /// Causal masking while copying f32 rows: per row, the first `start` valid elements are
    /// copied, the rest of the `valid` ones become the fill value, the padding is copied;
    /// `start` grows by one per row. State: src, dst, rows, start (signed), valid, stride
    /// (elements per row), fill bits, step of `start` per row.
    MaskRows,
    /// [`Kernel::MaskRows`] for f16 rows (`valid` and `stride` even): a word split by the mask
    /// keeps its low half and takes the fill's high half. Same state (fill: two f16 halves).
    MaskRowsF16,
    /// On-tile transpose of a staged block of `bytes`-byte elements (`row_kernels::transpose`).
    Transpose { bytes: u32 },
    /// [`Kernel::Transpose`] of 2-byte elements four output rows at a time
    /// (`row_kernels::transpose_halves`): `rows` a multiple of 4, the input 8-byte aligned.
    TransposeHalves,
    /// Runs of 4x4 blocks of 2-byte elements transposed (`row_kernels::transpose_quads`,
    /// [`state::TransposeQuadsState`](crate::state::TransposeQuadsState)): staged rows
    /// `in_stride` bytes apart, output rows `out_stride` bytes apart, both multiples of 8.
    TransposeQuads { in_stride: u16, out_stride: u16 },
    /// Per-row maximum or sum (`row_kernels::row_reduce`).
    RowReduce { ty: Elem, max: bool },
    /// A row operand combined with one scalar per row (`row_kernels::row_scalar`).
    RowScalar { ty: Elem, op: BinOp, reversed: bool },
    /// Softmax along rows, optionally causal (`row_kernels::softmax`).
    Softmax { ty: Elem },
    /// Layer norm along rows (`row_kernels::layer_norm`).
    LayerNorm { ty: Elem },
    /// Strided two-dimensional copy of 32-bit or 64-bit words (`row_kernels::copy2d`).
    Copy2d { wide: bool },
    /// Per-row softmax statistics: maximum and sum (`row_kernels::softmax`, stats form).
    SoftmaxStats { ty: Elem },
    /// Per-row layer-norm statistics: mean and `sqrt(var + epsilon)`.
    LayerNormStats { ty: Elem },
    /// The last pass of softmax or layer norm over part of a row (`row_kernels::row_apply`).
    RowApply { ty: Elem, softmax: bool },
    /// Flash attention: a block of scores to probabilities and row statistics
    /// (`flash_kernels::flash_softmax`).
    FlashSoftmax {
        s: Elem,
        a: Elem,
        cols: u32,
        kb: u32,
        scaled: bool,
        running: bool,
        /// The scores' group stride built into the maximum pass's loads
        /// ([`flash::baked_stride`]), or 0 to read it from the state only.
        stride: u32,
        /// Whether a row's maximum is floored at the lowest finite value (a row may see no
        /// key: a causal mask or a mask operand); else every maximum is finite.
        floor: bool,
    },
    /// Flash attention: a partial output rescaled by its rows' factors
    /// (`flash_kernels::flash_rescale`).
    FlashRescale { p: Elem },
    /// Flash attention: a mask added to a block of scores, scaling them first with `scaled`
    /// (`flash_kernels::flash_mask`).
    FlashMask {
        s: Elem,
        scaled: bool,
        /// One mask row for every query (its row step is 0).
        broadcast: bool,
    },
    /// Flash attention: a boolean mask (bytes) to the additive mask in `ty`, 0 or the lowest
    /// finite value (`flash_kernels::flash_mask_bool`).
    FlashMaskBool { ty: Elem },
    /// Flash attention: partial results of key blocks merged and normalised
    /// (`flash_kernels::flash_combine`).
    FlashCombine {
        p: Elem,
        out: Elem,
        cols: u32,
        gout: u32,
        dv: u32,
        /// Bytes between the sources after the first, all in one stage buffer, each its
        /// groups of rows (f32 partials; the state's second source starts them); 0: any
        /// sources (`flash_kernels::flash_combine`).
        stage: u32,
    },
}

/// Builds the machine code of `kernel`.
pub fn generate(kernel: Kernel) -> Code {
    let mut c = Code::new();
    match kernel {
        Kernel::Amp { partials } => basic::amp(&mut c, partials, basic::AmpShare::One),
        Kernel::AmpAll { partials } => basic::amp(&mut c, partials, basic::AmpShare::Bounds),
        Kernel::AmpTable { partials } => basic::amp(&mut c, partials, basic::AmpShare::Table),
        Kernel::AmpTableDense { partials } => {
            basic::amp(&mut c, partials, basic::AmpShare::TableDense)
        }
        Kernel::AmpChain {
            partials,
            carry,
            drain,
            rows,
            odd,
            zeros,
        } => basic::amp_chain(
            &mut c,
            partials,
            basic::ChainRound {
                carry,
                drain,
                rows,
                odd,
                zeros,
            },
        ),
        Kernel::Binary { ty, op } => basic::binary(&mut c, ty, op),
        Kernel::Unary { ty, op } => unary::unary(&mut c, ty, op),
        Kernel::ScaleHalves => unary::scale_halves(&mut c),
        Kernel::Cast { from, to } => basic::cast(&mut c, from, to),
        Kernel::CastOnce { format, scale } => basic::cast_once(&mut c, format, scale),
        Kernel::Convert { from, to, overflow } => convert::convert(&mut c, from, to, overflow),
        Kernel::IntBinary { op, bits, signed } => convert::int_binary(&mut c, op, bits, signed),
        Kernel::Zero => basic::zero(&mut c),
        Kernel::GatherRows => gather::gather_rows(&mut c),
        Kernel::GatherColumns { elem_bytes, group } => {
            gather::gather_columns(&mut c, elem_bytes, group)
        }
        Kernel::OrWords => gather::or_words(&mut c),
        Kernel::Map { f, a, b, c: c3, to } => map::map(&mut c, f, &[a, b, c3], to),
        Kernel::PadClear => basic::pad_clear(&mut c),
        Kernel::MaskRows => basic::mask_rows(&mut c, false),
        Kernel::MaskRowsF16 => basic::mask_rows(&mut c, true),
        Kernel::Transpose { bytes } => rows::transpose(&mut c, bytes),
        Kernel::TransposeHalves => rows::transpose_halves(&mut c),
        Kernel::TransposeQuads {
            in_stride,
            out_stride,
        } => rows::transpose_quads(&mut c, in_stride as u32, out_stride as u32),
        Kernel::RowReduce { ty, max } => rows::row_reduce(&mut c, ty, max),
        Kernel::RowScalar { ty, op, reversed } => rows::row_scalar(&mut c, ty, op, reversed),
        Kernel::Softmax { ty } => rows::softmax(&mut c, ty, false),
        Kernel::LayerNorm { ty } => rows::layer_norm(&mut c, ty, false),
        Kernel::SoftmaxStats { ty } => rows::softmax(&mut c, ty, true),
        Kernel::LayerNormStats { ty } => rows::layer_norm(&mut c, ty, true),
        Kernel::RowApply { ty, softmax } => rows::row_apply(&mut c, ty, softmax),
        Kernel::Copy2d { wide } => rows::copy2d(&mut c, wide),
        Kernel::FlashSoftmax {
            s,
            a,
            cols,
            kb,
            scaled,
            running,
            stride,
            floor,
        } => flash::flash_softmax(&mut c, s, a, cols, kb, scaled, running, stride, floor),
        Kernel::FlashRescale { p } => flash::flash_rescale(&mut c, p),
        Kernel::FlashMask {
            s,
            scaled,
            broadcast,
        } => flash::flash_mask(&mut c, s, scaled, broadcast),
        Kernel::FlashMaskBool { ty } => flash::flash_mask_bool(&mut c, ty),
        Kernel::FlashCombine {
            p,
            out,
            cols,
            gout,
            dv,
            stage,
        } => flash::flash_combine(&mut c, p, out, cols, gout, dv, stage),
    }
    c
}

impl Kernel {
    /// The layout of the kernel's vertex state.
    pub fn state_kind(&self) -> StateKind {
        use Kernel as K;
        match self {
            K::Amp { .. } => StateKind::Amp,
            K::AmpAll { .. } => StateKind::AmpAll,
            K::AmpTable { .. } | K::AmpTableDense { .. } => StateKind::AmpTable,
            K::AmpChain { .. } => StateKind::AmpChain,
            K::Binary { .. } => StateKind::Binary,
            K::Unary { .. } | K::ScaleHalves => StateKind::Unary,
            K::Cast { .. } | K::CastOnce { .. } | K::Convert { .. } => StateKind::Cast,
            K::IntBinary { .. } => StateKind::Binary,
            K::Zero => StateKind::Zero,
            K::GatherRows => StateKind::GatherRows,
            K::GatherColumns { .. } => StateKind::GatherColumns,
            K::OrWords => StateKind::OrWords,
            K::Map { .. } => StateKind::Map,
            K::PadClear => StateKind::PadClear,
            K::MaskRows | K::MaskRowsF16 => StateKind::MaskRows,
            K::Transpose { .. } | K::TransposeHalves => StateKind::Transpose,
            K::TransposeQuads { .. } => StateKind::TransposeQuads,
            K::RowReduce { .. } => StateKind::RowReduce,
            K::RowScalar { .. } => StateKind::RowScalar,
            K::Softmax { .. } | K::SoftmaxStats { .. } => StateKind::Softmax,
            K::LayerNorm { .. } | K::LayerNormStats { .. } => StateKind::LayerNorm,
            K::Copy2d { .. } => StateKind::Copy2d,
            K::RowApply { .. } => StateKind::RowApply,
            K::FlashSoftmax { .. } => StateKind::FlashSoftmax,
            K::FlashRescale { .. } => StateKind::FlashRescale,
            K::FlashMask { .. } => StateKind::FlashMask,
            K::FlashMaskBool { .. } => StateKind::Cast,
            K::FlashCombine { .. } => StateKind::FlashCombine,
        }
    }
}
