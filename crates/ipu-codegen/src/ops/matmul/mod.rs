//! Matrix products on the AMP: the planner splits rows, column groups and (when the
//! operands do not fit) k into serial chunks, costs every split and keeps the finalists; the
//! lowering stages each block's rows of `a` and weight blocks of `b` and runs AMP rounds with
//! ping-pong partials.
//!
//! [`plan`] ranks the candidates ([`candidates`]: 2-D splits with the serial k chunks that
//! make them fit, and 3-D splits with chunks of k on separate tiles), costed by [`cost`] (AMP
//! rounds, their support and executable memory, the staging exchange), and deals the chosen
//! split's blocks to the tiles ([`blocks`]: the device operation [`MatMul`]); a 3-D split's
//! partials are summed by the stages of [`reduce`] ([`SumSplits`]: planned, costed and
//! lowered there). [`lower`] lowers the blocks.

pub mod blocks;
pub mod candidates;
pub mod cost;
pub mod lower;
pub mod plan;
pub mod reduce;

pub use blocks::{Block, Consecutive, MatMul};
pub use candidates::{CHUNKED_HEADROOM_DIVISOR, K_CHUNKS_MAX, MATMUL_CANDIDATES_MAX};
pub(crate) use cost::{PAIR_SHARED_DEN, PAIR_SHARED_NUM};
pub use reduce::SumSplits;
