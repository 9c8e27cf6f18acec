//! Row operations: data movement (reshape, transpose, slice, concat), broadcasting binary
//! operations, reductions, softmax, layer norm and the unfused attention expansion, in the
//! row layout.

pub mod lower;
pub mod plan;

pub use plan::{GatherKind, RowOp};
