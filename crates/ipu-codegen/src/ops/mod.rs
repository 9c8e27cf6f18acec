//! Operator families: each module holds the planning (candidate mappings, costs, the values'
//! layouts) and the lowering (buffers, transfers, kernel launches) of one family of device
//! operations, as `impl` blocks of the planner ([`crate::plan::Planner`]) and the lowerer
//! ([`crate::lower::Lowerer`]). This module is the dispatch table: [`Planner::plan_op`] sends
//! each graph operation to its family, [`Lowerer::lower_op`] each device operation. A family
//! may use its own lowering to model its candidates (flash attention models its finalists
//! from their tile programs); the core planner never calls into lowering.
//!
//! | family | graph operations | device operations |
//! |---|---|---|
//! | [`matmul`] | `matmul` | `DevOpKind::MatMul`, `SumSplits` (a 3-D split's reduction) |
//! | [`elementwise`] | `add`, `sub`, `mul`, `div`, `max` of one shape, `scale`, `exp`, `sqrt`, `tanh`, `erf`, `cast`, `causal_mask` | `Binary`, `Unary`, `Cast`, `CausalMask` |
//! | [`rows`] | `reshape`, `transpose`, `slice`, `concat`, broadcasting binary operations, `reduce_max`, `reduce_sum`, `softmax`, `layer_norm`, `attention` | `Rows` |
//! | [`flash`] | `flash_attention` | `Flash` |

pub mod elementwise;
pub mod flash;
pub mod matmul;
pub mod rows;

use ipu_graph::{OpKind, Operation};

use crate::cost::estimate;
use crate::error::CodegenError;
use crate::lower::{Lowerer, OpSteps};
use crate::operator_plan::{DevOpKind, DevValueId};
use crate::plan::Planner;
use crate::program::{Step, SupOp};

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
            | OpKind::Exp
            | OpKind::Sqrt
            | OpKind::Tanh
            | OpKind::Erf
            | OpKind::Log
            | OpKind::CausalMask { .. }
            | OpKind::Cast { .. } => self.plan_unary(op, &ins, &out_val),
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

impl Lowerer<'_> {
    /// Lowers device operation `index` with its family: its exchange step (if it moves
    /// anything) and its compute step.
    pub(crate) fn lower_op(&mut self, index: usize) -> Result<(), CodegenError> {
        let op = &self.plan.ops[index];
        if matches!(op.kind, DevOpKind::Flash(_)) {
            return self.lower_flash(index);
        }
        let mut steps = OpSteps::default();
        match &op.kind {
            DevOpKind::MatMul {
                mode,
                blocks,
                k_chunks,
                k_splits,
                consecutive,
                ..
            } => {
                let splits = (*k_chunks, *k_splits);
                self.lower_matmul(index, *mode, blocks, splits, *consecutive, &mut steps)?;
            }
            DevOpKind::SumSplits { runs } => self.lower_sum_splits(index, *runs, &mut steps)?,
            DevOpKind::Rows(rop) => {
                self.lower_rows(index, rop, &mut steps)?;
            }
            DevOpKind::Binary(bop) => self.lower_binary(index, *bop, &mut steps)?,
            DevOpKind::Unary(uop, factor) => {
                self.lower_unary(index, *uop, *factor, &mut steps.tiles)?
            }
            DevOpKind::CausalMask { key_start } => {
                self.lower_causal_mask(index, *key_start, &mut steps.tiles)?;
            }
            DevOpKind::Cast => self.lower_cast(index, None, &mut steps.tiles)?,
            DevOpKind::Convert(overflow) => {
                self.lower_cast(index, Some(*overflow), &mut steps.tiles)?
            }
            DevOpKind::IntBinary(bop) => self.lower_int_binary(index, *bop, &mut steps)?,
            DevOpKind::Flash(_) => unreachable!("lowered above"),
        }
        let OpSteps { mut tiles, copies } = steps;
        let name = op.name.clone();
        if !copies.is_empty() {
            self.prog.steps.push(Step::Exchange {
                name: name.clone(),
                copies,
            });
        }
        for ops in tiles.values_mut() {
            // One more slot, not a doubling: the vectors hold every tile's supervisor work
            // (80 bytes an operation, millions for a large matmul) until the package is built.
            ops.reserve_exact(1);
            ops.push(SupOp::WaitW);
        }
        let estimated_cycles = tiles.values().map(|o| estimate(o)).max().unwrap_or(0);
        self.prog.steps.push(Step::Compute {
            name,
            tiles,
            estimated_cycles,
        });
        Ok(())
    }
}
