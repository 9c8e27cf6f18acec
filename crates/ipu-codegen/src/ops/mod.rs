//! Operator families: each module holds the planning (candidate mappings, costs, the values'
//! layouts) and the lowering (buffers, transfers, kernel launches) of one family of device
//! operations, as `impl` blocks of the planner ([`crate::plan`]) and the lowerer
//! ([`crate::lower`]). The core phases dispatch to them; a family may use its own lowering
//! to model its candidates (flash attention models its finalists from their tile programs),
//! but the core planner never calls into lowering.

pub mod flash;
pub mod rows;
