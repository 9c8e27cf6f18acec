//! Vertex states: the words a worker kernel reads at `$m0` when it starts, one typed struct per
//! state layout. Lowering builds these structs; emission turns them into words
//! ([`State::words`]), resolving every address field to the placed buffer's address; the
//! generators read the words at the offsets these structs define ([`BinaryState::WORDS`],
//! [`AmpAllState::BOUNDS_OFFSET`], ...). Passes that look into a vertex state match on the
//! fields, never on word indices.

use std::fmt;

/// A buffer of the compiler's tile program, named by a vertex state (resolved to an address
/// when the program is placed). Displays as `b<index>`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BufferId(pub u32);

impl fmt::Display for BufferId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "b{}", self.0)
    }
}

/// A byte of a buffer: the buffer and the byte offset in it.
pub type Loc = (BufferId, u32);

/// A word of a vertex state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StateWord {
    /// A constant.
    Const(u32),
    /// The address of a byte of a buffer.
    Addr(BufferId, u32),
}

impl fmt::Display for StateWord {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StateWord::Const(c) => write!(f, "{c}"),
            StateWord::Addr(b, 0) => write!(f, "{b}"),
            StateWord::Addr(b, o) => write!(f, "{b}+{o}"),
        }
    }
}

/// A field's state word.
trait Word {
    fn word(self) -> StateWord;
}

impl Word for u32 {
    fn word(self) -> StateWord {
        StateWord::Const(self)
    }
}

impl Word for Loc {
    fn word(self) -> StateWord {
        StateWord::Addr(self.0, self.1)
    }
}

impl Word for StateWord {
    fn word(self) -> StateWord {
        self
    }
}

/// Declares a fixed-layout state struct: its fields in word order, [`StateWord`]s from them,
/// and `WORDS`, the number of words (what the generator loads into `$m1..`).
macro_rules! state {
    ($(#[$meta:meta])* $name:ident { $($(#[$fmeta:meta])* $field:ident: $ty:ty,)* }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub struct $name {
            $($(#[$fmeta])* pub $field: $ty,)*
        }

        impl $name {
            /// Words of the state.
            pub const WORDS: u8 = [$(stringify!($field)),*].len() as u8;

            /// The state's words, in order.
            pub fn words(&self) -> Vec<StateWord> {
                vec![$(Word::word(self.$field)),*]
            }

            /// The number of words.
            pub fn word_count(&self) -> usize {
                Self::WORDS as usize
            }

            /// The fields' names, in word order (for the text form).
            pub const FIELDS: &'static [&'static str] = &[$(stringify!($field)),*];
        }
    };
}

state! {
    /// [`crate::Kernel::Amp`]: one AMP pass over `rows` rows.
    AmpState {
        /// Row 0 of the input rows.
        input: Loc,
        /// Row 0 of the partials-in (`Const(0)` for a first pass, which reads none).
        partials: StateWord,
        /// Row 0 of the output rows.
        out: Loc,
        /// Rows.
        rows: u32,
    }
}

/// [`crate::Kernel::AmpTable`]: the AMP pass on all six workers started together (`runall`)
/// with one state: an [`AmpState`] per worker context, context `c`'s at byte `16 c`, for rows
/// `bounds[c]..bounds[c + 1]` of the pass (held compactly; [`AmpTableState::words`] gives the
/// table).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct AmpTableState {
    /// Row 0 of the input rows.
    pub input: Loc,
    /// Row 0 of the partials-in (`Const(0)` for a first pass), laid out as `out`.
    pub partials: StateWord,
    /// Row 0 of the output rows.
    pub out: Loc,
    /// Bytes of an input row and of an output row.
    pub row_bytes: [u32; 2],
    /// Row bounds per worker context: seven, non-decreasing (a worker may have none).
    pub bounds: [u32; ipu_target::WORKER_CONTEXTS as usize + 1],
}

impl AmpTableState {
    /// Bytes of one worker's entry (an [`AmpState`]), a power of two.
    pub const ENTRY_BYTES: u32 = 4 * AmpState::WORDS as u32;
    /// The fields' names, in word order: worker 0's, then the other workers' words.
    pub const FIELDS: &'static [&'static str] = &["input", "partials", "out", "rows", "workers"];

    /// Worker context `c`'s pass.
    pub fn part(&self, c: usize) -> AmpState {
        let (r0, r1) = (self.bounds[c], self.bounds[c + 1]);
        let [in_row, out_row] = self.row_bytes;
        AmpState {
            input: (self.input.0, self.input.1 + r0 * in_row),
            partials: match self.partials {
                StateWord::Addr(b, off) => StateWord::Addr(b, off + r0 * out_row),
                w => w,
            },
            out: (self.out.0, self.out.1 + r0 * out_row),
            rows: r1 - r0,
        }
    }

    /// The number of words.
    pub fn word_count(&self) -> usize {
        AmpState::WORDS as usize * (self.bounds.len() - 1)
    }

    /// The state's words, in order.
    pub fn words(&self) -> Vec<StateWord> {
        let mut w = Vec::with_capacity(self.word_count());
        for c in 0..self.bounds.len() - 1 {
            let p = self.part(c);
            w.extend([
                p.input.word(),
                p.partials,
                p.out.word(),
                StateWord::Const(p.rows),
            ]);
        }
        w
    }
}

const _: () = assert!(AmpTableState::ENTRY_BYTES.is_power_of_two());
const _: () = assert!(AmpChainState::ENTRY_BYTES.is_power_of_two());

/// [`crate::Kernel::AmpChain`]: a round of a chain of AMP rounds over the same rows, a table
/// of six entries of [`AmpChainState::ENTRY_WORDS`] words: input, partials, out (row 0 of the
/// context's rows each) and the `rpt` count (rows - 2). The
/// chain's first round finds a worker's entry from its context id; each round then steps the
/// worker's entry pointer to its entry of the next round's table, which follows this one's.
/// Where the previous round's last row of a context goes (`carry`) is not a word: that round
/// left its output pointer there.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct AmpChainState {
    /// Row 0 of the input rows.
    pub input: Loc,
    /// Row 0 of the partials-in (`Const(0)` for a first pass), laid out as `out`.
    pub partials: StateWord,
    /// Row 0 of the output rows.
    pub out: Loc,
    /// Bytes of an input row and of an output row.
    pub row_bytes: [u32; 2],
    /// The round's rows, split evenly over the six workers (the first ones take one more).
    pub rows: u32,
    /// Row 0 of the previous round's output (laid out as `out`), whose last row of each
    /// context this round stores, when the previous round left it in the AMP.
    pub carry: Option<Loc>,
}

impl AmpChainState {
    /// Words of one worker's entry.
    pub const ENTRY_WORDS: u32 = 4;
    /// Bytes of one worker's entry.
    pub const ENTRY_BYTES: u32 = 4 * Self::ENTRY_WORDS;
    /// Bytes of a round's table: a chain's next round's table follows at this offset.
    pub const TABLE_BYTES: u32 = Self::ENTRY_BYTES * ipu_target::WORKER_CONTEXTS;
    /// The fields' names, in word order: worker 0's, then the other workers' words.
    pub const FIELDS: &'static [&'static str] = &["input", "partials", "out", "count", "workers"];

    /// The number of words.
    pub fn word_count(&self) -> usize {
        (Self::ENTRY_WORDS * ipu_target::WORKER_CONTEXTS) as usize
    }

    /// The round as the table form holds it.
    pub fn pass(&self) -> AmpTableState {
        let n = ipu_target::WORKER_CONTEXTS;
        let mut bounds = [0u32; ipu_target::WORKER_CONTEXTS as usize + 1];
        for c in 0..n as usize {
            let (q, r) = (self.rows / n, self.rows % n);
            bounds[c + 1] = bounds[c] + q + u32::from((c as u32) < r);
        }
        AmpTableState {
            input: self.input,
            partials: self.partials,
            out: self.out,
            row_bytes: self.row_bytes,
            bounds,
        }
    }

    /// The state's words, in order.
    pub fn words(&self) -> Vec<StateWord> {
        let t = &self.pass();
        let mut w = Vec::with_capacity(self.word_count());
        for c in 0..t.bounds.len() - 1 {
            let p = t.part(c);
            let rows = p.rows;
            // The `rpt` count: the rows between the first and the last (`amp_chain`).
            let count = rows.saturating_sub(2);
            w.extend([
                p.input.word(),
                p.partials,
                p.out.word(),
                StateWord::Const(count),
            ]);
        }
        w
    }
}

/// [`crate::Kernel::AmpAll`]: the AMP pass on all six workers with one state; worker context
/// `c` takes rows `bounds[c]..bounds[c + 1]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct AmpAllState {
    /// Row 0 of the input rows.
    pub input: Loc,
    /// Row 0 of the partials-in (`Const(0)` for a first pass).
    pub partials: StateWord,
    /// Row 0 of the output rows.
    pub out: Loc,
    /// Row bounds per worker context: seven, non-decreasing.
    pub bounds: [u32; ipu_target::WORKER_CONTEXTS as usize + 1],
}

impl AmpAllState {
    /// The words before the bounds (input, partials, out).
    pub const WORDS: u8 = 3;
    /// Byte offset of `bounds[0]`.
    pub const BOUNDS_OFFSET: u32 = 4 * Self::WORDS as u32;
    /// The fields' names, in word order.
    pub const FIELDS: &'static [&'static str] = &["input", "partials", "out", "bounds"];

    /// The number of words.
    pub fn word_count(&self) -> usize {
        Self::WORDS as usize + self.bounds.len()
    }

    /// The state's words, in order.
    pub fn words(&self) -> Vec<StateWord> {
        let mut w = vec![self.input.word(), self.partials, self.out.word()];
        w.extend(self.bounds.iter().map(|&b| StateWord::Const(b)));
        w
    }
}

state! {
    /// [`crate::Kernel::Binary`]: `out = a OP b` over 64-bit vectors.
    BinaryState {
        /// First operand.
        a: Loc,
        /// Second operand.
        b: Loc,
        /// Result.
        out: Loc,
        /// 64-bit vectors.
        vectors: u32,
    }
}

state! {
    /// [`crate::Kernel::Unary`]: `out = f(input)` over 64-bit vectors.
    UnaryState {
        /// Operand.
        input: Loc,
        /// Result.
        out: Loc,
        /// 64-bit vectors.
        vectors: u32,
        /// The factor of [`crate::UnOp::Scale`] as f32 bits (unused by `exp`).
        factor_bits: u32,
    }
}

state! {
    /// [`crate::Kernel::Cast`]: conversion over groups of four elements.
    CastState {
        /// Operand.
        input: Loc,
        /// Result.
        out: Loc,
        /// Groups of four elements.
        groups: u32,
    }
}

state! {
    /// [`crate::Kernel::Zero`]: `out = 0` over 32-bit words.
    ZeroState {
        /// First word.
        out: Loc,
        /// 32-bit words.
        words: u32,
    }
}

state! {
    /// [`crate::Kernel::GatherRows`]: one row per index, the table's when the index falls in
    /// the part `first..first + rows`, else zeros.
    GatherRowsState {
        /// Row `first` of the table's part.
        table: Loc,
        /// The first index (32-bit).
        indices: Loc,
        /// The row of the first index.
        out: Loc,
        /// Indices.
        count: u32,
        /// The table row the part starts at.
        first: u32,
        /// Rows in the part.
        rows: u32,
        /// 32-bit words a row.
        row_words: u32,
        /// The table's entries (a negative index counts back from them).
        entries: u32,
    }
}

state! {
    /// [`crate::Kernel::Map`]: a predicate, logical operation or selection over groups of
    /// four elements of up to three operands.
    MapState {
        /// First operand.
        a: Loc,
        /// Second operand (the first when there is none).
        b: Loc,
        /// Third operand (the first when there is none).
        c: Loc,
        /// Result.
        out: Loc,
        /// Groups of four elements.
        groups: u32,
    }
}

state! {
    /// [`crate::Kernel::GatherColumns`]: one column per index of a transposed table's part
    /// (entries `first..first + rows`), else zeros.
    GatherColumnsState {
        /// The part's first element (entry `first`, the column group's first row).
        table: Loc,
        /// The first index (32-bit).
        indices: Loc,
        /// The row of the first index.
        out: Loc,
        /// Indices.
        count: u32,
        /// The entry the part starts at (a multiple of the group).
        first: u32,
        /// Entries in the part.
        rows: u32,
        /// Data words of a row (pairs of 2-byte elements).
        words: u32,
        /// A lone last 2-byte element (0 or 1).
        tail: u32,
        /// Zero words after a row's data.
        pad: u32,
        /// The table's entries (a negative index counts back from them).
        entries: u32,
        /// Bytes from one block of `group` entries to the next.
        block: u32,
    }
}

state! {
    /// [`crate::Kernel::OrWords`]: `out = stage[0] | stage[1] | ...` over `sources` runs of
    /// `words` words.
    OrWordsState {
        /// The first word of the result.
        out: Loc,
        /// The first run.
        stage: Loc,
        /// Words a run.
        words: u32,
        /// Runs (at least one).
        sources: u32,
        /// Bytes from one run to the next.
        stride: u32,
    }
}

state! {
    /// [`crate::Kernel::PadClear`]: zeroes the padding columns of `rows` rows.
    PadClearState {
        /// The first padding word of row 0.
        first: Loc,
        /// Rows.
        rows: u32,
        /// Bytes from one row to the next.
        stride: u32,
        /// Bits of the first word to keep (the last valid elements share it).
        keep_mask: u32,
        /// Whole padding words after the first.
        full_words: u32,
    }
}

state! {
    /// [`crate::Kernel::MaskRows`] and [`crate::Kernel::MaskRowsF16`]: causal masking while
    /// copying rows.
    MaskRowsState {
        /// Row 0 of the source.
        src: Loc,
        /// Row 0 of the destination.
        dst: Loc,
        /// Rows.
        rows: u32,
        /// Elements of row 0 that are kept (signed).
        start: u32,
        /// Valid elements per row (the rest are padding, copied as they are).
        valid: u32,
        /// Elements from one row to the next.
        stride: u32,
        /// Bits of the fill value (f32, or two f16 halves).
        fill_bits: u32,
        /// Growth of `start` per row.
        start_step: u32,
    }
}

impl MaskRowsState {
    /// Byte offset of `start_step`.
    pub const START_STEP_OFFSET: u32 = 4 * 7;
}

state! {
    /// [`crate::Kernel::Transpose`]: output row `j` takes element `j` of every staged row.
    TransposeState {
        /// Column 0 of staged row 0.
        input: Loc,
        /// Output row 0.
        out: Loc,
        /// Output rows.
        rows: u32,
        /// Bytes between staged rows.
        in_stride: u32,
        /// Bytes between output rows.
        out_stride: u32,
        /// 32-bit words per output row.
        words: u32,
    }
}

state! {
    /// [`crate::Kernel::RowReduce`]: per-row maximum or sum.
    RowReduceState {
        /// Row 0 of the input.
        input: Loc,
        /// Row 0 of the output (one element and three zeros per row).
        out: Loc,
        /// Rows.
        rows: u32,
        /// Bytes between input rows.
        in_stride: u32,
        /// Columns reduced.
        columns: u32,
    }
}

state! {
    /// [`crate::Kernel::RowScalar`]: a row operand combined with one scalar per row.
    RowScalarState {
        /// Row 0 of the row operand.
        x: Loc,
        /// The scalar of row 0.
        y: Loc,
        /// Row 0 of the result.
        out: Loc,
        /// Rows.
        rows: u32,
        /// Bytes between rows of `x` and `out`.
        stride: u32,
        /// Valid columns.
        columns: u32,
        /// Bytes between scalars.
        y_stride: u32,
    }
}

state! {
    /// [`crate::Kernel::Softmax`] and [`crate::Kernel::SoftmaxStats`]: softmax over the first
    /// `min(columns, l0 + r dl)` columns of row `r`.
    SoftmaxState {
        /// Row 0 of the input.
        input: Loc,
        /// Row 0 of the output (the statistics for the stats form).
        out: Loc,
        /// Rows.
        rows: u32,
        /// Bytes between input rows.
        in_stride: u32,
        /// Bytes between output rows.
        out_stride: u32,
        /// Columns.
        columns: u32,
        /// Valid columns of row 0.
        l0: u32,
        /// Growth of the valid columns per row.
        dl: u32,
    }
}

state! {
    /// [`crate::Kernel::LayerNorm`] and [`crate::Kernel::LayerNormStats`].
    LayerNormState {
        /// Row 0 of the input.
        input: Loc,
        /// Row 0 of the output (the statistics for the stats form).
        out: Loc,
        /// Rows.
        rows: u32,
        /// Bytes between input rows.
        in_stride: u32,
        /// Columns.
        columns: u32,
        /// Epsilon as f32 bits.
        epsilon_bits: u32,
        /// `columns` as f32 bits.
        columns_f32_bits: u32,
        /// Bytes between output rows.
        out_stride: u32,
    }
}

state! {
    /// [`crate::Kernel::Copy2d`]: a strided two-dimensional copy.
    Copy2dState {
        /// Segment 0 of source row 0.
        src: Loc,
        /// Segment 0 of destination row 0.
        dst: Loc,
        /// Rows.
        rows: u32,
        /// Segments per row.
        segments: u32,
        /// Words (64-bit when wide, else 32-bit) per segment.
        words: u32,
        /// Bytes between source rows.
        src_row_stride: u32,
        /// Bytes between source segments.
        src_segment_stride: u32,
        /// Bytes between destination rows.
        dst_row_stride: u32,
        /// Bytes between destination segments.
        dst_segment_stride: u32,
    }
}

state! {
    /// [`crate::Kernel::RowApply`]: the last pass of softmax or layer norm over pairs of one
    /// row.
    RowApplyState {
        /// The first input pair.
        input: Loc,
        /// The first output pair.
        out: Loc,
        /// The row's statistics.
        stats: Loc,
        /// Full pairs.
        full_pairs: u32,
        /// 1 if a last pair with one valid lane follows.
        odd: u32,
        /// Zero words written after.
        zero_words: u32,
    }
}

state! {
    /// [`crate::Kernel::FlashSoftmax`]: a block of scores to probabilities and row statistics.
    FlashSoftmaxState {
        /// Scores, row 0 of group 0.
        s: Loc,
        /// Probabilities, row 0 of group 0.
        p: Loc,
        /// Statistics of row 0.
        stats: Loc,
        /// Rows.
        rows: u32,
        /// Super-groups of keys.
        super_groups: u32,
        /// Bytes between groups (`rows * 32`).
        group_stride: u32,
        /// The score scale as f32 bits.
        scale_bits: u32,
        /// With f32 scores in the running form, row 0's rescaling factor: a run of pairs, 8
        /// bytes a row, as `flash_rescale` of f32 partials reads them (`Const(0)` otherwise;
        /// f16 scores store the factor in the statistics, at byte 8).
        alpha: StateWord,
    }
}

state! {
    /// [`crate::Kernel::FlashMask`]: a mask added to a block of scores.
    FlashMaskState {
        /// Scores, row 0 of group 0.
        s: Loc,
        /// Mask, row 0 of group 0.
        mask: Loc,
        /// Rows.
        rows: u32,
        /// Groups of 32 bytes per row.
        groups: u32,
        /// Bytes between the scores' groups.
        group_stride: u32,
        /// Bytes between the mask's groups.
        mask_group_stride: u32,
        /// Bytes from one row of the mask to the next (0: one row for all).
        mask_row_step: u32,
        /// The score scale as f32 bits.
        scale_bits: u32,
    }
}

state! {
    /// [`crate::Kernel::FlashRescale`]: a partial output rescaled by its rows' factors.
    FlashRescaleState {
        /// Partial output, row 0 of group 0.
        o: Loc,
        /// Row 0's factor: f32 partials, a run of pairs, 8 bytes a row (`flash_softmax`'s
        /// `alpha`); f16, the statistics rows, 32 bytes a row with the factor at byte 8.
        factors: Loc,
        /// Rows.
        rows: u32,
        /// Groups of 32 bytes per row.
        groups: u32,
        /// Bytes between groups.
        group_stride: u32,
    }
}

/// One run of [`TransposeQuadsState`]: blocks of four staged rows by four columns, each the
/// next four columns of the same rows and the next four output rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TransposeRun {
    /// The first block's staged row 0.
    pub input: Loc,
    /// The first block's output row 0.
    pub out: Loc,
    /// Blocks (at least one).
    pub blocks: u32,
}

/// [`crate::Kernel::TransposeQuads`]: runs of 4x4 blocks of 2-byte elements transposed.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TransposeQuadsState {
    /// The runs (their count is the first word).
    pub runs: Vec<TransposeRun>,
}

impl TransposeQuadsState {
    /// The fields' names, in word order.
    pub const FIELDS: &'static [&'static str] = &["runs"];

    /// The number of words.
    pub fn word_count(&self) -> usize {
        1 + 3 * self.runs.len()
    }

    /// The state's words, in order.
    pub fn words(&self) -> Vec<StateWord> {
        let mut w = vec![StateWord::Const(self.runs.len() as u32)];
        for r in &self.runs {
            w.extend([r.input.word(), r.out.word(), StateWord::Const(r.blocks)]);
        }
        w
    }
}

/// One source of [`FlashCombineState`]: a key block's partial results.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CombineSource {
    /// Partial output, row 0 of group 0.
    pub o: Loc,
    /// Bytes between its groups.
    pub group_stride: u32,
    /// Statistics of row 0.
    pub stats: Loc,
}

/// [`crate::Kernel::FlashCombine`]: partial results of key blocks merged and normalised.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct FlashCombineState {
    /// Output row 0.
    pub out: Loc,
    /// Bytes between output groups.
    pub out_group_stride: u32,
    /// Rows.
    pub rows: u32,
    /// Scratch of `dv` f32.
    pub scratch: Loc,
    /// The sources (their count is the fifth word).
    pub sources: Vec<CombineSource>,
}

impl FlashCombineState {
    /// The words before the sources (out, out group stride, rows, scratch, source count).
    pub const WORDS: u8 = 5;
    /// Byte offset of the first source.
    pub const SOURCES_OFFSET: u32 = 4 * Self::WORDS as u32;
    /// Bytes per source.
    pub const SOURCE_BYTES: u32 = 12;
    /// Byte offsets of a source's fields.
    pub const SOURCE_O: u32 = 0;
    /// See [`FlashCombineState::SOURCE_O`].
    pub const SOURCE_GROUP_STRIDE: u32 = 4;
    /// See [`FlashCombineState::SOURCE_O`].
    pub const SOURCE_STATS: u32 = 8;
    /// The fields' names, in word order.
    pub const FIELDS: &'static [&'static str] =
        &["out", "out_group_stride", "rows", "scratch", "sources"];

    /// The number of words.
    pub fn word_count(&self) -> usize {
        Self::WORDS as usize + 3 * self.sources.len()
    }

    /// The state's words, in order.
    pub fn words(&self) -> Vec<StateWord> {
        let mut w = vec![
            self.out.word(),
            StateWord::Const(self.out_group_stride),
            StateWord::Const(self.rows),
            self.scratch.word(),
            StateWord::Const(self.sources.len() as u32),
        ];
        for s in &self.sources {
            w.extend([s.o.word(), StateWord::Const(s.group_stride), s.stats.word()]);
        }
        w
    }
}

macro_rules! states {
    ($($variant:ident($ty:ident),)*) => {
        /// A vertex state of any layout.
        #[derive(Debug, Clone, PartialEq, Eq, Hash)]
        pub enum State {
            $(#[doc = concat!("A [`", stringify!($ty), "`].")] $variant($ty),)*
        }

        /// The layout of a [`State`], for checking it against its kernel.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum StateKind {
            $(#[doc = concat!("[`", stringify!($ty), "`].")] $variant,)*
        }

        impl State {
            /// The state's words, in order.
            pub fn words(&self) -> Vec<StateWord> {
                match self {
                    $(State::$variant(s) => s.words(),)*
                }
            }

            /// The number of words.
            pub fn word_count(&self) -> usize {
                match self {
                    $(State::$variant(s) => s.word_count(),)*
                }
            }

            /// Its layout.
            pub fn kind(&self) -> StateKind {
                match self {
                    $(State::$variant(_) => StateKind::$variant,)*
                }
            }

            /// The fields' names (a variable-length tail is one name).
            pub fn fields(&self) -> &'static [&'static str] {
                match self {
                    $(State::$variant(_) => $ty::FIELDS,)*
                }
            }
        }

        $(impl From<$ty> for State {
            fn from(s: $ty) -> State {
                State::$variant(s)
            }
        })*
    };
}

states! {
    Amp(AmpState),
    AmpAll(AmpAllState),
    AmpTable(AmpTableState),
    AmpChain(AmpChainState),
    Binary(BinaryState),
    Unary(UnaryState),
    Cast(CastState),
    Zero(ZeroState),
    GatherRows(GatherRowsState),
    GatherColumns(GatherColumnsState),
    OrWords(OrWordsState),
    Map(MapState),
    PadClear(PadClearState),
    MaskRows(MaskRowsState),
    Transpose(TransposeState),
    TransposeQuads(TransposeQuadsState),
    RowReduce(RowReduceState),
    RowScalar(RowScalarState),
    Softmax(SoftmaxState),
    LayerNorm(LayerNormState),
    Copy2d(Copy2dState),
    RowApply(RowApplyState),
    FlashSoftmax(FlashSoftmaxState),
    FlashRescale(FlashRescaleState),
    FlashMask(FlashMaskState),
    FlashCombine(FlashCombineState),
}

impl State {
    /// Pairs of different buffers its kernel loads from in one paced issue (`ld2x64pace`,
    /// `ld2xst64pace`): in one memory element they would conflict
    /// (`ipu_target::BANK_CONFLICT_SLOTS`), so storage placement keeps them apart where it can.
    pub fn co_loaded(&self) -> impl Iterator<Item = (BufferId, BufferId)> + '_ {
        fn pair(a: StateWord, b: StateWord) -> Option<(BufferId, BufferId)> {
            match (a, b) {
                (StateWord::Addr(x, _), StateWord::Addr(y, _)) if x != y => Some((x, y)),
                _ => None,
            }
        }
        let one = match self {
            State::Amp(s) => pair(s.input.word(), s.partials),
            State::AmpAll(s) => pair(s.input.word(), s.partials),
            State::AmpTable(s) => pair(s.input.word(), s.partials),
            State::AmpChain(s) => pair(s.input.word(), s.partials),
            State::Binary(s) => pair(s.a.word(), s.b.word()),
            // A full mask streams with the scores (a broadcast one is loaded on its own).
            State::FlashMask(s) if s.mask_row_step != 0 => pair(s.s.word(), s.mask.word()),
            // The f32 rescale loads a pair of the output with the next row's factor.
            State::FlashRescale(s) => pair(s.o.word(), s.factors.word()),
            _ => None,
        };
        // The flash merge's pass B loads each source's `O` with the running sum in the
        // scratch row.
        let (sources, scratch) = match self {
            State::FlashCombine(s) => (&s.sources[..], Some(s.scratch)),
            _ => (&[][..], None),
        };
        one.into_iter().chain(
            sources
                .iter()
                .filter_map(move |src| pair(src.o.word(), scratch?.word())),
        )
    }

    /// The buffers the state points into, in word order (a table of passes names each of its
    /// buffers once).
    pub fn buffers(&self) -> impl Iterator<Item = BufferId> {
        let words = match self {
            State::AmpTable(t) => vec![t.input.word(), t.partials, t.out.word()],
            State::AmpChain(t) => {
                let mut w = vec![t.input.word(), t.partials, t.out.word()];
                w.extend(t.carry.map(|c| c.word()));
                w
            }
            _ => self.words(),
        };
        words.into_iter().filter_map(|w| match w {
            StateWord::Addr(b, _) => Some(b),
            StateWord::Const(_) => None,
        })
    }
}

impl fmt::Display for State {
    /// `{field=word, ...}`; a variable-length tail prints its words after its name.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let words = self.words();
        let fields = self.fields();
        f.write_str("{")?;
        for (i, w) in words.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            match fields.get(i) {
                Some(name) if i + 1 < fields.len() || words.len() == fields.len() => {
                    write!(f, "{name}={w}")?
                }
                Some(name) => write!(f, "{name}=[{w}")?,
                None => write!(f, "{w}")?,
            }
        }
        if words.len() > fields.len() {
            f.write_str("]")?;
        }
        f.write_str("}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(i: u32) -> Loc {
        (BufferId(i), 4 * i)
    }

    #[test]
    fn offsets_name_the_words_the_generators_read() {
        let s = AmpAllState {
            input: at(1),
            partials: StateWord::Const(0),
            out: at(2),
            bounds: [10, 11, 12, 13, 14, 15, 16],
        };
        let w = s.words();
        assert_eq!(w.len(), 10);
        assert_eq!(
            w[(AmpAllState::BOUNDS_OFFSET / 4) as usize],
            StateWord::Const(10)
        );
        let m = MaskRowsState {
            src: at(1),
            dst: at(2),
            rows: 3,
            start: 4,
            valid: 5,
            stride: 6,
            fill_bits: 7,
            start_step: 99,
        };
        assert_eq!(MaskRowsState::WORDS, 8);
        assert_eq!(
            m.words()[(MaskRowsState::START_STEP_OFFSET / 4) as usize],
            StateWord::Const(99)
        );
        let c = FlashCombineState {
            out: at(1),
            out_group_stride: 2,
            rows: 3,
            scratch: at(4),
            sources: vec![
                CombineSource {
                    o: at(5),
                    group_stride: 6,
                    stats: at(7),
                },
                CombineSource {
                    o: at(8),
                    group_stride: 9,
                    stats: at(10),
                },
            ],
        };
        let w = c.words();
        let src1 = (FlashCombineState::SOURCES_OFFSET + FlashCombineState::SOURCE_BYTES) / 4;
        assert_eq!(w[4], StateWord::Const(2));
        assert_eq!(
            w[(src1 + FlashCombineState::SOURCE_O / 4) as usize],
            StateWord::Addr(BufferId(8), 32)
        );
        assert_eq!(
            w[(src1 + FlashCombineState::SOURCE_GROUP_STRIDE / 4) as usize],
            StateWord::Const(9)
        );
        assert_eq!(
            w[(src1 + FlashCombineState::SOURCE_STATS / 4) as usize],
            StateWord::Addr(BufferId(10), 40)
        );
    }

    #[test]
    fn text_form_names_every_field() {
        let s = State::from(BinaryState {
            a: at(1),
            b: (BufferId(2), 0),
            out: at(3),
            vectors: 16,
        });
        assert_eq!(s.to_string(), "{a=b1+4, b=b2, out=b3+12, vectors=16}");
        assert_eq!(
            s.buffers().collect::<Vec<_>>(),
            [BufferId(1), BufferId(2), BufferId(3)]
        );
        let a = State::from(AmpAllState {
            input: at(1),
            partials: StateWord::Const(0),
            out: at(2),
            bounds: [0, 1, 2, 3, 4, 5, 6],
        });
        assert_eq!(
            a.to_string(),
            "{input=b1+4, partials=0, out=b2+8, bounds=[0, 1, 2, 3, 4, 5, 6]}"
        );
    }
}

#[cfg(test)]
mod size {
    /// Every supervisor operation of every tile carries a state: a larger layout grows the
    /// compiler's memory and time in proportion.
    #[test]
    fn a_state_stays_small() {
        let bytes = std::mem::size_of::<super::State>();
        assert!(bytes <= 72, "{bytes} bytes");
    }
}
