//! The operator plan: what planning makes and lowering reads. Device values with their
//! layouts, device operations with their mappings, and the finalists the planner kept.

use ipu_graph::{DType, ValueId};
use ipu_kernels::{BinOp, UnOp};
use ipu_target::AmpMode;

use crate::layout::Layout;
use crate::ops::rows::RowOp;

/// A value on the device: a graph value or one the expansion introduces.
#[derive(Debug, Clone, PartialEq)]
pub struct DevValue {
    /// Name.
    pub name: String,
    /// Element type.
    pub dtype: DType,
    /// Logical shape.
    pub shape: Vec<usize>,
    /// The graph value it is, if any.
    pub graph: Option<ValueId>,
    /// Where it lives.
    pub layout: Layout,
    /// The user's value or operation it belongs to (`%name`): a graph input, or the graph
    /// operation whose planning made it. Errors and the tile program name this, never an
    /// intermediate.
    pub origin: String,
}

/// Index of a [`DevValue`].
pub type DevValueId = usize;

/// One matmul block: the output rows `m0..m1` and column groups `g0..g1` of batch `b`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Block {
    /// Tile.
    pub tile: u32,
    /// Batch index (over the output's leading dimensions).
    pub batch: usize,
    /// Rows.
    pub m0: usize,
    /// One past the last row.
    pub m1: usize,
    /// First column group.
    pub g0: usize,
    /// One past the last column group.
    pub g1: usize,
    /// The k split it computes (0 unless the matmul splits k over tiles).
    pub split: usize,
}

/// What a device operation does.
#[derive(Debug, Clone, PartialEq)]
pub enum DevOpKind {
    /// A matmul on the AMP with its blocks; the output is the partials type.
    MatMul {
        /// AMP mode.
        mode: AmpMode,
        /// Blocks.
        blocks: Vec<Block>,
        /// Row splits.
        pm: usize,
        /// Column-group splits.
        pn: usize,
        /// Serial chunks of the k blocks: each has its own exchange and compute steps and
        /// stages only its share of the operands; accumulation carries across them.
        k_chunks: usize,
        /// Chunks of the k blocks on separate tiles (a 3-D split): block `split` takes the K
        /// blocks `kb * split / k_splits .. kb * (split + 1) / k_splits` and writes its own
        /// partials, slice `split` of the output `[k_splits, ..]`, which
        /// [`DevOpKind::SumSplits`] then reduces. 1: no split.
        k_splits: usize,
        /// The operand the blocks on consecutive tiles share (the order of `blocks`).
        consecutive: crate::ops::matmul::Consecutive,
    },
    /// The sums of runs of a stacked value `[depth, ..]` (the partials of a k split): run `i`
    /// adds slices `depth * i / runs .. depth * (i + 1) / runs` in index order; the output is
    /// `[runs, ..]`, or the slices' shape for one run. Each slice of the output is spread
    /// over the tiles alike, and each tile adds its share.
    SumSplits {
        /// Runs (the depth after this stage).
        runs: usize,
    },
    /// Elementwise binary.
    Binary(BinOp),
    /// Elementwise unary (`factor` for scale).
    Unary(UnOp, f32),
    /// Conversion on the FP8 conversion unit and the vector units (f32, f16, F143, F152,
    /// saturating).
    Cast,
    /// Conversion between any two element formats, element by element through f32.
    Convert(ipu_numerics::Overflow),
    /// Elementwise integer arithmetic (operands of one shape).
    IntBinary(BinOp),
    /// The causal mask of a block of scores whose column 0 is key `key_start` (f32).
    CausalMask {
        /// Key of column 0.
        key_start: usize,
    },
    /// Data movement or a row operation in the row layout (see [`crate::ops::rows`]).
    Rows(RowOp),
    /// A fused flash attention (see [`crate::ops::flash`]): inputs q, k, v.
    Flash(Box<crate::ops::flash::layout::FlashPlan>),
}

/// A device operation.
#[derive(Debug, Clone, PartialEq)]
pub struct DevOp {
    /// Name (the graph operation's, with a suffix for expansions).
    pub name: String,
    /// The graph operation it belongs to (`%name`).
    pub origin: String,
    /// Kind.
    pub kind: DevOpKind,
    /// Operands.
    pub inputs: Vec<DevValueId>,
    /// Result.
    pub output: DevValueId,
    /// Estimated cycles (compute and exchange).
    pub estimated_cycles: u64,
    /// Estimated exchange cycles.
    pub estimated_exchange_cycles: u64,
}

/// A candidate mapping with its figures, for the log.
#[derive(Debug, Clone, PartialEq)]
pub struct Finalist {
    /// Operation.
    pub op: String,
    /// Description of the mapping.
    pub mapping: String,
    /// Estimated cycles.
    pub estimated_cycles: u64,
    /// Estimated exchange cycles.
    pub estimated_exchange_cycles: u64,
    /// Peak bytes per tile.
    pub peak_tile_bytes: u64,
    /// Tiles used.
    pub tiles: u32,
    /// Candidate mappings the operation had (1: its layout follows its operands).
    pub alternatives: usize,
}

/// The result of planning.
#[derive(Debug, Clone, PartialEq)]
pub struct OperatorPlan {
    /// Device values; graph inputs first, in graph order.
    pub values: Vec<DevValue>,
    /// Device operations in execution order.
    pub ops: Vec<DevOp>,
    /// Device values of the graph's outputs.
    pub outputs: Vec<DevValueId>,
    /// Device values of the graph's inputs.
    pub inputs: Vec<DevValueId>,
    /// Device values of the graph's constants, with their data (row-major, the element
    /// type's bytes).
    pub constants: Vec<(DevValueId, ipu_graph::ConstantData)>,
    /// Retained finalists per operation.
    pub finalists: Vec<Finalist>,
    /// Sum of the operations' estimates.
    pub estimated_cycles: u64,
    /// Sum of the operations' exchange estimates.
    pub estimated_exchange_cycles: u64,
    /// Tiles used.
    pub tiles_used: u32,
}

/// The name of a dtype in the package manifest.
pub fn dtype_name(d: DType) -> &'static str {
    d.text_name()
}
