//! Operator families: each module holds the planning (candidate mappings, costs, the values'
//! layouts) and the lowering (buffers, transfers, kernel launches) of one family of device
//! operations, as `impl` blocks of the planner ([`crate::plan::Planner`]) and the lowerer
//! ([`crate::lower::Lowerer`]). A family's device operations are its own types, which the
//! plan holds by handle ([`crate::operator_plan::DevOpKind`]) and which lower themselves
//! (`FamilyOp`); the core names none of them. This module is the dispatch table of planning:
//! [`Planner::plan_op`] sends each graph operation to its family. A family may use its own
//! lowering to model its candidates (flash attention models its finalists from their tile
//! programs); the core planner never calls into lowering.
//!
//! | family | graph operations | device operations |
//! |---|---|---|
//! | [`matmul`] | `matmul` | [`matmul::MatMul`], [`matmul::SumSplits`] (a 3-D split's reduction) |
//! | [`elementwise`] | `add`, `sub`, `mul`, `div`, `max` of one shape, `scale`, `unary` (every `UnaryFn`), every `MapFn` (comparisons, logic, `where`), `cast`, `causal_mask` | [`elementwise::Elementwise`] (`Binary`, `Unary`, `Cast`, `Convert`, `IntBinary`, `Map`, `CausalMask`) |
//! | [`rows`] | `reshape`, `transpose`, `slice`, `concat`, broadcasting binary operations, `reduce_max`, `reduce_sum`, `softmax`, `layer_norm`, `attention` | [`rows::RowOp`] |
//! | [`flash`] | `flash_attention` | [`flash::layout::FlashPlan`] |
//! | [`gather`] | `gather` (rows of a 2-D table by run-time indices) | [`gather::Lookup`] |

pub mod elementwise;
pub mod flash;
pub mod gather;
pub mod matmul;
pub mod rows;

use ipu_graph::{OpKind, Operation};

use crate::error::CodegenError;
use crate::operator_plan::DevValueId;
use crate::plan::Planner;

/// The refusal of `op`: its graph operation's name and kind, and why.
pub(crate) fn unsupported<T>(op: &Operation, what: &str) -> Result<T, CodegenError> {
    Err(CodegenError::unsupported(
        format!("%{}", op.name),
        format!("{}: {what}", op.kind.mnemonic()),
    ))
}

impl Planner<'_> {
    /// Plans graph operation `op` with its family.
    pub(crate) fn plan_op(&mut self, op: &Operation) -> Result<(), CodegenError> {
        let out = op.outputs[0];
        let out_val = self.graph.value(out).clone();
        let ins: Vec<DevValueId> = op.inputs.iter().map(|v| self.of_graph[v]).collect();
        match &op.kind {
            OpKind::MatMul {
                partials,
                out: out_dtype,
            } => self.plan_matmul_op(op, &ins, &out_val, partials, out_dtype),
            OpKind::Add | OpKind::Sub | OpKind::Mul | OpKind::Div | OpKind::Max => {
                self.plan_binary(op, &ins, &out_val)
            }
            OpKind::Scale { .. }
            | OpKind::Unary(_)
            | OpKind::CausalMask { .. }
            | OpKind::Map(_)
            | OpKind::Cast { .. } => self.plan_unary(op, &ins, &out_val),
            OpKind::Gather { .. } | OpKind::GatherColumns => self.plan_gather(op, &ins, &out_val),
            OpKind::Reshape { .. }
            | OpKind::Transpose { .. }
            | OpKind::Slice { .. }
            | OpKind::Concat { .. }
            | OpKind::ReduceMax { .. }
            | OpKind::ReduceSum { .. }
            | OpKind::Softmax { .. }
            | OpKind::LayerNorm { .. }
            | OpKind::Attention { .. } => self.plan_rows(op, &ins, &out_val),
            OpKind::FlashAttention {
                scale,
                causal,
                partials,
                out: out_dtype,
                ..
            } => self.plan_flash(op, &ins, &out_val, *scale, *causal, *partials, *out_dtype),
        }
    }
}
