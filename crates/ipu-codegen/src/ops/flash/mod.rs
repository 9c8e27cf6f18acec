//! The fused flash attention: its mapping of items over tiles ([`plan`]) and its lowering
//! into homes, distribution, scores and merge ([`lower`]).

pub mod lower;
pub mod plan;
