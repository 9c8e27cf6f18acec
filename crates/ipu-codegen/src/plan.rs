//! Operator planning: expands the graph into device operations, enumerates candidate tile
//! mappings for each, costs them with the analytical model below, keeps finalists and selects
//! one. The plan fixes every value's layout.
//!
//! Cost model (documented formulas, all in tile cycles):
//! - a worker issue slot costs `BARREL_SLOT_CYCLES` (6); a wave of workers costs its slowest
//!   worker plus 6 cycles per supervisor instruction (3 per launch: two `setzi` and `run`);
//! - an AMP round (one weight block) costs `6 + bytes / 16` for `ampw`, one wave of `amp`
//!   passes (see `kernels::amp_slots`) and a `waitw`;
//! - exchange costs `ceil(bytes / 4)` per receiving tile (its port's bandwidth), plus the
//!   fixed exchange overhead and a sync;
//! - memory is the sum of a tile's staging, output and ping-pong buffers per block.

use ipu_graph::{DType, Graph, OpKind, ValueId};
use ipu_target::{AmpMode, BARREL_SLOT_CYCLES, EXCHANGE_PHASE_OVERHEAD_CYCLES, Target};

use crate::CodegenError;
use crate::kernels::{self, BinOp, CastType, UnOp};
use crate::layout::{Layout, PIECE_GRAIN};

pub mod flash;
pub mod rows;
pub use rows::{GatherKind, RowOp};

/// Finalists kept per operation for the log.
pub const FINALISTS: usize = 3;
/// Bytes per tile kept free of data for code, vertex states, tables and the runtime when
/// screening candidates (the placement later checks the real figure).
pub const SUPPORT_RESERVE_BYTES: u64 = 96 * 1024;
/// A matmul split into k chunks must fit with `1 / CHUNKED_HEADROOM_DIVISOR` of its bytes to
/// spare (12.5 %): the memory model sees neither fragmentation nor the real support area, and
/// an unsplit mapping that needs chunking is already close to the limit.
pub const CHUNKED_HEADROOM_DIVISOR: u64 = 8;
/// Most serial k chunks a matmul is split into (each costs an exchange phase and a sync).
pub const K_CHUNKS_MAX: u64 = 64;
/// Bound on matmul candidates examined per operation.
pub const MATMUL_CANDIDATES_MAX: usize = 200_000;

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
}

/// Geometry of an AMP mode: K block, columns, input and output element bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AmpGeometry {
    /// K elements per weight block (one row of input per 4 phases).
    pub k_block: usize,
    /// Output columns per weight block.
    pub cols: usize,
    /// Bytes per input element.
    pub in_bytes: usize,
    /// Bytes per partial.
    pub out_bytes: usize,
}

/// The geometry of `mode` (see `docs/isa.md`, AMP).
pub fn amp_geometry(mode: AmpMode) -> AmpGeometry {
    match mode {
        AmpMode::F16F16 => AmpGeometry {
            k_block: 16,
            cols: 16,
            in_bytes: 2,
            out_bytes: 2,
        },
        AmpMode::F16F32 => AmpGeometry {
            k_block: 16,
            cols: 8,
            in_bytes: 2,
            out_bytes: 4,
        },
        AmpMode::F32F32 => AmpGeometry {
            k_block: 8,
            cols: 8,
            in_bytes: 4,
            out_bytes: 4,
        },
        AmpMode::F8F16 => AmpGeometry {
            k_block: 32,
            cols: 16,
            in_bytes: 1,
            out_bytes: 2,
        },
    }
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
    },
    /// Elementwise binary.
    Binary(BinOp),
    /// Elementwise unary (`factor` for scale).
    Unary(UnOp, f32),
    /// Conversion.
    Cast,
    /// The causal mask of a block of scores whose column 0 is key `key_start` (f32).
    CausalMask {
        /// Key of column 0.
        key_start: usize,
    },
    /// Data movement or a row operation in the row layout (see [`rows`]).
    Rows(RowOp),
    /// A fused flash attention (see [`flash`]): inputs q, k, v.
    Flash(Box<flash::FlashPlan>),
}

/// A device operation.
#[derive(Debug, Clone, PartialEq)]
pub struct DevOp {
    /// Name (the graph operation's, with a suffix for expansions).
    pub name: String,
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
    /// Retained finalists per operation.
    pub finalists: Vec<Finalist>,
    /// Sum of the operations' estimates.
    pub estimated_cycles: u64,
    /// Sum of the operations' exchange estimates.
    pub estimated_exchange_cycles: u64,
    /// Tiles used.
    pub tiles_used: u32,
}

/// Default column group of a value of `dtype`: the AMP's K block and column count for its
/// type, so matmul operands and results need no regrouping.
pub fn default_group(dtype: DType) -> usize {
    match dtype {
        DType::F32 => 8,
        _ => 16,
    }
}

/// The vector-kernel element type of `dtype`, if it has one.
pub fn elem(dtype: DType) -> Option<kernels::Elem> {
    match dtype {
        DType::F32 => Some(kernels::Elem::F32),
        DType::F16 => Some(kernels::Elem::F16),
        _ => None,
    }
}

/// The cast-kernel type of `dtype`.
pub fn cast_type(dtype: DType) -> CastType {
    match dtype {
        DType::F32 => CastType::F32,
        DType::F16 => CastType::F16,
        DType::F143 { scale } => CastType::Fp8(ipu_isa::Fp8Format::F143, scale),
        DType::F152 { scale } => CastType::Fp8(ipu_isa::Fp8Format::F152, scale),
    }
}

/// The AMP mode of a matmul with operands of `dtype` and `partials`.
pub fn matmul_mode(dtype: DType, partials: DType) -> Option<AmpMode> {
    match (dtype, partials) {
        (DType::F32, DType::F32) => Some(AmpMode::F32F32),
        (DType::F32, _) => None,
        (_, DType::F32) => Some(AmpMode::F16F32),
        (_, DType::F16) => Some(AmpMode::F16F16),
        _ => None,
    }
}

/// The column group a graph input should be stored in so that its first matmul consumer
/// reads it without regrouping: the AMP's K block for the left operand, its column count for
/// the right.
fn input_group(graph: &Graph, v: ValueId) -> Option<usize> {
    let op = graph.operations().iter().find(|o| o.inputs.contains(&v))?;
    let OpKind::MatMul { partials, .. } = op.kind else {
        return None;
    };
    let dtype = graph.value(op.inputs[0]).ty.dtype;
    let geo = amp_geometry(matmul_mode(dtype, partials)?);
    Some(if op.inputs[0] == v {
        geo.k_block
    } else {
        geo.cols
    })
}

struct Planner<'a> {
    graph: &'a Graph,
    target: &'a Target,
    tiles: u32,
    values: Vec<DevValue>,
    ops: Vec<DevOp>,
    finalists: Vec<Finalist>,
    of_graph: std::collections::HashMap<ValueId, DevValueId>,
}

/// Plans every operation of `graph` over tiles `0..tiles` of `target`.
pub fn plan(graph: &Graph, target: &Target, tiles: u32) -> Result<OperatorPlan, CodegenError> {
    // Constants are not lowered yet: their data would need a home on the tiles.
    if let Some(c) = graph.constants().first() {
        return Err(CodegenError::Unsupported(format!(
            "constant %{}: graph constants are not lowered to the device yet",
            graph.value(c.value).name
        )));
    }
    if tiles == 0 || tiles > target.tiles {
        return Err(CodegenError::Options(format!(
            "--tiles {tiles} is outside 1..={} for {}",
            target.tiles, target.kind
        )));
    }
    let mut p = Planner {
        graph,
        target,
        tiles,
        values: Vec::new(),
        ops: Vec::new(),
        finalists: Vec::new(),
        of_graph: Default::default(),
    };
    let mut inputs = Vec::new();
    for &v in graph.inputs() {
        let val = graph.value(v);
        let group = input_group(graph, v).unwrap_or_else(|| default_group(val.ty.dtype));
        let layout = Layout::balanced(&val.ty.shape, group, tiles);
        let id = p.add_value(
            val.name.clone(),
            val.ty.dtype,
            val.ty.shape.clone(),
            Some(v),
            layout,
        );
        inputs.push(id);
    }
    for op in graph.operations() {
        p.plan_op(op)?;
    }
    let outputs = graph
        .outputs()
        .iter()
        .map(|v| p.of_graph[v])
        .collect::<Vec<_>>();
    for &o in &outputs {
        if p.values[o]
            .graph
            .is_some_and(|g| graph.inputs().contains(&g))
        {
            return Err(CodegenError::Unsupported(format!(
                "output %{} is a graph input; nothing to compute",
                p.values[o].name
            )));
        }
    }
    let estimated_cycles = p.ops.iter().map(|o| o.estimated_cycles).sum();
    let estimated_exchange_cycles = p.ops.iter().map(|o| o.estimated_exchange_cycles).sum();
    Ok(OperatorPlan {
        values: p.values,
        ops: p.ops,
        outputs,
        inputs,
        finalists: p.finalists,
        estimated_cycles,
        estimated_exchange_cycles,
        tiles_used: tiles,
    })
}

/// Checks a plan: every layout covers its value, every operation's operands precede it.
pub fn check(plan: &OperatorPlan) -> Result<(), CodegenError> {
    for v in &plan.values {
        let total = ipu_package::storage_elements(&v.shape, v.layout.group);
        v.layout
            .check(total)
            .map_err(|e| CodegenError::Internal(format!("value %{}: {e}", v.name)))?;
        if v.layout.pieces.iter().any(|p| p.tile >= plan.tiles_used) {
            return Err(CodegenError::Internal(format!(
                "value %{} on an unused tile",
                v.name
            )));
        }
    }
    for (i, op) in plan.ops.iter().enumerate() {
        let produced_before =
            |v: DevValueId| plan.inputs.contains(&v) || plan.ops[..i].iter().any(|o| o.output == v);
        if let Some(v) = op.inputs.iter().find(|v| !produced_before(**v)) {
            return Err(CodegenError::Internal(format!(
                "{} reads %{} before it exists",
                op.name, plan.values[*v].name
            )));
        }
    }
    Ok(())
}

impl Planner<'_> {
    fn add_value(
        &mut self,
        name: String,
        dtype: DType,
        shape: Vec<usize>,
        graph: Option<ValueId>,
        layout: Layout,
    ) -> DevValueId {
        self.values.push(DevValue {
            name,
            dtype,
            shape,
            graph,
            layout,
        });
        let id = self.values.len() - 1;
        if let Some(g) = graph {
            self.of_graph.insert(g, id);
        }
        id
    }

    fn plan_op(&mut self, op: &ipu_graph::Operation) -> Result<(), CodegenError> {
        let out = op.outputs[0];
        let out_val = self.graph.value(out).clone();
        let ins: Vec<DevValueId> = op.inputs.iter().map(|v| self.of_graph[v]).collect();
        let unsupported = |what: &str| {
            Err(CodegenError::Unsupported(format!(
                "operation {} ({}): {what}",
                op.name,
                op.kind.mnemonic()
            )))
        };
        match &op.kind {
            OpKind::MatMul {
                partials,
                out: out_dtype,
            } => {
                let mut a = ins[0];
                let mut b = ins[1];
                let in_dtype = self.values[a].dtype;
                let Some(mode) = matmul_mode(in_dtype, *partials) else {
                    return unsupported("partials must be f32, or f16 for f16 and FP8 operands");
                };
                // FP8 operands: the Mk2 AMP has no FP8 mode; cast to f16 first (on every
                // target for now).
                if in_dtype.is_fp8() || self.values[b].dtype.is_fp8() {
                    a = self.cast_to(a, DType::F16, &format!("{}.a_f16", op.name));
                    b = self.cast_to(b, DType::F16, &format!("{}.b_f16", op.name));
                }
                let partials_dtype = *partials;
                let c =
                    self.plan_matmul(&op.name, mode, a, b, partials_dtype, &out_val.ty.shape)?;
                if partials_dtype == *out_dtype {
                    self.rename(c, out_val.name.clone(), out);
                } else {
                    let layout = self.values[c].layout.clone();
                    let r = self.add_value(
                        out_val.name.clone(),
                        *out_dtype,
                        out_val.ty.shape.clone(),
                        Some(out),
                        layout,
                    );
                    self.push_simple(format!("{}.cast", op.name), DevOpKind::Cast, vec![c], r);
                }
            }
            OpKind::Add | OpKind::Sub | OpKind::Mul | OpKind::Div | OpKind::Max => {
                let (x, y) = (ins[0], ins[1]);
                if elem(self.values[x].dtype).is_none() {
                    return unsupported(
                        "elementwise arithmetic on FP8 is not lowered; cast to f16 first",
                    );
                }
                let bop = match op.kind {
                    OpKind::Add => BinOp::Add,
                    OpKind::Sub => BinOp::Sub,
                    OpKind::Mul => BinOp::Mul,
                    OpKind::Div => BinOp::Div,
                    _ => BinOp::Max,
                };
                if self.values[x].shape != out_val.ty.shape
                    || self.values[y].shape != out_val.ty.shape
                {
                    return self.plan_broadcast(op, bop, &ins, &out_val);
                }
                let layout = self.values[x].layout.clone();
                let r = self.add_value(
                    out_val.name.clone(),
                    out_val.ty.dtype,
                    out_val.ty.shape.clone(),
                    Some(out),
                    layout,
                );
                self.push_simple(op.name.clone(), DevOpKind::Binary(bop), vec![x, y], r);
            }
            OpKind::Scale { .. } | OpKind::Exp if elem(self.values[ins[0]].dtype).is_none() => {
                return unsupported(
                    "elementwise arithmetic on FP8 is not lowered; cast to f16 first",
                );
            }
            OpKind::Scale { factor } => self.follow(
                op,
                &out_val,
                DevOpKind::Unary(UnOp::Scale, *factor),
                ins[0],
                None,
            ),
            OpKind::Exp => {
                self.follow(op, &out_val, DevOpKind::Unary(UnOp::Exp, 1.0), ins[0], None)
            }
            OpKind::CausalMask { key_start } => {
                if self.values[ins[0]].dtype != DType::F32 {
                    return unsupported(
                        "a causal mask is lowered for f32 scores only (use f32 partials)",
                    );
                }
                let kind = DevOpKind::CausalMask {
                    key_start: *key_start,
                };
                self.follow(op, &out_val, kind, ins[0], None)
            }
            OpKind::Cast { to } => {
                if self.values[ins[0]].dtype.is_fp8() && to.is_fp8() {
                    return unsupported("FP8 to FP8 casts are not lowered; cast through f16");
                }
                self.follow(op, &out_val, DevOpKind::Cast, ins[0], Some(*to))
            }
            OpKind::Reshape { .. }
            | OpKind::Transpose { .. }
            | OpKind::Slice { .. }
            | OpKind::Concat { .. }
            | OpKind::ReduceMax { .. }
            | OpKind::ReduceSum { .. }
            | OpKind::Softmax { .. }
            | OpKind::LayerNorm { .. }
            | OpKind::Attention { .. } => return self.plan_rows(op, &ins, &out_val),
            OpKind::FlashAttention {
                scale,
                causal,
                partials,
                out: out_dtype,
                ..
            } => {
                return self.plan_flash(op, &ins, &out_val, *scale, *causal, *partials, *out_dtype);
            }
        }
        Ok(())
    }

    /// A fused flash attention: candidates `(rows, keys)` per tile are costed
    /// (`flash::plan_flash`), the finalists modelled from their tile programs, the best
    /// selected. Inputs that only this operation reads are laid out on their homes.
    #[allow(clippy::too_many_arguments)]
    fn plan_flash(
        &mut self,
        op: &ipu_graph::Operation,
        ins: &[DevValueId],
        out_val: &ipu_graph::Value,
        scale: f32,
        causal: bool,
        partials: DType,
        out_dtype: DType,
    ) -> Result<(), CodegenError> {
        let shapes = [
            &self.values[ins[0]].shape[..],
            &self.values[ins[1]].shape[..],
            &self.values[ins[2]].shape[..],
        ];
        let dtypes = [
            self.values[ins[0]].dtype,
            self.values[ins[1]].dtype,
            self.values[ins[2]].dtype,
        ];
        let (candidates, base) = flash::plan_flash(
            &op.name,
            shapes,
            dtypes,
            scale,
            causal,
            partials,
            out_dtype,
            self.target,
            self.tiles,
        )?;
        tracing::info!(
            operation = %op.name,
            candidates = candidates.len(),
            "screened flash attention mappings"
        );
        // The cheapest estimates are modelled from their tile programs; the best modelled are
        // the finalists, and the first is selected.
        let mut modelled_plans = Vec::new();
        for (i, c) in candidates.iter().take(flash::MODELLED_MAX).enumerate() {
            let mut geo = base.clone();
            geo.rows = c.rows;
            geo.keys = c.keys;
            geo.sub = c.sub;
            let fp = flash::layout(geo, self.tiles);
            let (modelled, modelled_x) = crate::lower::flash_modelled_cycles(&fp);
            tracing::info!(
                candidate = i,
                rows = c.rows,
                keys = c.keys,
                items = c.items,
                merged_blocks = c.merge,
                modelled_cycles = modelled,
                modelled_exchange_cycles = modelled_x,
                estimated_cycles = c.estimated_cycles,
                estimated_exchange_cycles = c.estimated_exchange_cycles,
                peak_total_bytes = c.peak_bytes,
                "modelled expanded operator plan"
            );
            modelled_plans.push((modelled, modelled_x, fp, i));
        }
        modelled_plans.sort_by_key(|m| (m.0, m.3));
        for (modelled, _, _, i) in modelled_plans.iter().take(FINALISTS) {
            let c = &candidates[*i];
            self.finalists.push(Finalist {
                op: op.name.clone(),
                mapping: format!(
                    "flash rows={} keys={} items={} merged_blocks={} modelled_cycles={modelled}",
                    c.rows, c.keys, c.items, c.merge
                ),
                estimated_cycles: c.estimated_cycles,
                estimated_exchange_cycles: c.estimated_exchange_cycles,
                peak_tile_bytes: c.peak_bytes,
                tiles: c.items as u32,
                alternatives: candidates.len(),
            });
        }
        let best = modelled_plans.into_iter().next();
        let (modelled, modelled_x, fp, chosen) = best.expect("at least one candidate");
        tracing::info!(
            selected = chosen,
            rows = fp.geo.rows,
            keys = fp.geo.keys,
            sub_block_keys = fp.geo.sub_keys(),
            modelled_cycles = modelled,
            "selected flash attention mapping"
        );
        // Inputs only this operation reads sit on their homes.
        let kb = amp_geometry(fp.geo.mode).k_block;
        let hgs = [kb, kb, default_group(fp.geo.a)];
        for x in 0..3 {
            let v = ins[x];
            let Some(gv) = self.values[v].graph else {
                continue;
            };
            let only_here = self.graph.inputs().contains(&gv)
                && !self.graph.outputs().contains(&gv)
                && self
                    .graph
                    .operations()
                    .iter()
                    .filter(|o| o.inputs.contains(&gv))
                    .count()
                    == 1
                && ins.iter().filter(|&&i| i == v).count() == 1;
            if only_here && self.values[v].layout.group == hgs[x] {
                self.values[v].layout = fp.home_layout(x, hgs[x]);
            }
        }
        let r = self.add_value(
            out_val.name.clone(),
            out_dtype,
            out_val.ty.shape.clone(),
            Some(op.outputs[0]),
            fp.output_layout(),
        );
        self.ops.push(DevOp {
            name: op.name.clone(),
            kind: DevOpKind::Flash(Box::new(fp)),
            inputs: ins.to_vec(),
            output: r,
            estimated_cycles: modelled,
            estimated_exchange_cycles: modelled_x,
        });
        Ok(())
    }

    /// A one-operand operation whose result keeps its operand's layout (in `dtype`, or the
    /// graph value's type).
    fn follow(
        &mut self,
        op: &ipu_graph::Operation,
        out_val: &ipu_graph::Value,
        kind: DevOpKind,
        x: DevValueId,
        dtype: Option<DType>,
    ) {
        let layout = self.values[x].layout.clone();
        let dtype = dtype.unwrap_or(out_val.ty.dtype);
        let r = self.add_value(
            out_val.name.clone(),
            dtype,
            out_val.ty.shape.clone(),
            Some(op.outputs[0]),
            layout,
        );
        self.push_simple(op.name.clone(), kind, vec![x], r);
    }

    fn rename(&mut self, v: DevValueId, name: String, graph: ValueId) {
        self.values[v].name = name;
        self.values[v].graph = Some(graph);
        self.of_graph.insert(graph, v);
    }

    fn cast_to(&mut self, v: DevValueId, to: DType, name: &str) -> DevValueId {
        if self.values[v].dtype == to {
            return v;
        }
        let (shape, layout) = (self.values[v].shape.clone(), self.values[v].layout.clone());
        let r = self.add_value(name.to_string(), to, shape, None, layout);
        self.push_simple(name.to_string(), DevOpKind::Cast, vec![v], r);
        r
    }

    /// Elementwise operations follow their first operand's layout: no choice to make, one
    /// finalist. Cost: the slowest tile's vectors over 6 workers, plus the exchange of other
    /// operands laid out differently.
    fn push_simple(
        &mut self,
        name: String,
        kind: DevOpKind,
        inputs: Vec<DevValueId>,
        output: DevValueId,
    ) {
        let out = &self.values[output];
        let eb = out.dtype.bytes() as u64;
        let most = out.layout.most_elements_on_a_tile() as u64;
        let per_worker = most.div_ceil(6);
        let slot = BARREL_SLOT_CYCLES as u64;
        let compute = slot * (per_worker * 2 / PIECE_GRAIN as u64 + 12) + 6 * slot * 3;
        let mut exchange = 0;
        for &i in &inputs[1..] {
            if self.values[i].layout != out.layout {
                exchange = exchange.max(most * eb / 4 + EXCHANGE_PHASE_OVERHEAD_CYCLES as u64);
            }
        }
        self.finalists.push(Finalist {
            op: name.clone(),
            mapping: format!("follow-operand tiles={}", out.layout.tiles().len()),
            estimated_cycles: compute + exchange,
            estimated_exchange_cycles: exchange,
            peak_tile_bytes: most * eb * inputs.len() as u64,
            tiles: out.layout.tiles().len() as u32,
            alternatives: 1,
        });
        self.ops.push(DevOp {
            name,
            kind,
            inputs,
            output,
            estimated_cycles: compute + exchange,
            estimated_exchange_cycles: exchange,
        });
    }

    /// Enumerates `(pm, pn)` splits of rows and column groups (and batch), costs each, keeps the
    /// cheapest that fits.
    fn plan_matmul(
        &mut self,
        name: &str,
        mode: AmpMode,
        a: DevValueId,
        b: DevValueId,
        partials: DType,
        out_shape: &[usize],
    ) -> Result<DevValueId, CodegenError> {
        if !self.target.supports_amp(mode) {
            return Err(CodegenError::Unsupported(format!(
                "{name}: AMP mode {mode:?} not on {}",
                self.target.kind
            )));
        }
        let geo = amp_geometry(mode);
        let (batch, m, n) = ipu_package::split_shape(out_shape);
        let k = *self.values[a].shape.last().unwrap_or(&1);
        let groups = n.div_ceil(geo.cols);
        let kb = k.div_ceil(geo.k_block);
        let kp = kb * geo.k_block;
        let slot = BARREL_SLOT_CYCLES as u64;
        let mut candidates: Vec<(u64, u64, u64, usize, usize, usize)> = Vec::new();
        let mut examined = 0;
        // The candidate that misses by the least: (bytes over in total, bytes over in
        // interleaved memory, bytes per tile, pm, pn).
        let mut closest: Option<(u64, u64, u64, usize, usize)> = None;
        let tiles = self.tiles as usize;
        'outer: for pm in 1..=m.min(tiles) {
            for pn in 1..=groups.min(tiles) {
                examined += 1;
                if examined > MATMUL_CANDIDATES_MAX {
                    break 'outer;
                }
                let blocks = batch * pm * pn;
                let per_tile = blocks.div_ceil(tiles) as u64;
                let bm = m.div_ceil(pm) as u64;
                let bg = groups.div_ceil(pn) as u64;
                let a_bytes = kp as u64 * bm * geo.in_bytes as u64;
                let b_bytes = bg * kp as u64 * (geo.cols * geo.in_bytes) as u64;
                let c_bytes = bg * bm * (geo.cols * geo.out_bytes) as u64;
                // Serial k chunks when memory demands: the fewest that fit (each chunk adds an
                // exchange phase and a sync, and stages only its share of the operands).
                let fits = |chunks: u64| {
                    let share = (kb as u64).div_ceil(chunks);
                    let (a, b) = (a_bytes / kb as u64 * share, b_bytes / kb as u64 * share);
                    let mem = per_tile * (a + b + 2 * c_bytes + 4 * kernels::OVERREAD_BYTES as u64);
                    // Once split, keep headroom for what this model does not see (support
                    // data beyond the reserve, fragmentation between live buffers).
                    let need = if chunks > 1 {
                        mem + mem / CHUNKED_HEADROOM_DIVISOR
                    } else {
                        mem
                    };
                    let over_total = (need + SUPPORT_RESERVE_BYTES)
                        .saturating_sub(self.target.memory_bytes() as u64);
                    let over_interleaved =
                        (per_tile * b).saturating_sub(self.target.interleaved_bytes() as u64);
                    (mem, over_total, over_interleaved)
                };
                let chunks = (0..)
                    .map(|e| 1u64 << e)
                    .take_while(|&c| c <= (kb as u64).min(K_CHUNKS_MAX))
                    .find(|&c| {
                        let (_, t, i) = fits(c);
                        t == 0 && i == 0
                    })
                    .unwrap_or(1);
                let (mem, over_total, over_interleaved) = fits(chunks);
                if over_total > 0 || over_interleaved > 0 {
                    let worst = over_total.max(over_interleaved);
                    if closest.is_none_or(|c: (u64, u64, u64, usize, usize)| worst < c.0.max(c.1)) {
                        closest = Some((over_total, over_interleaved, mem, pm, pn));
                    }
                    continue;
                }
                let rows_per_worker = bm.div_ceil(6) as u32;
                let weight_bytes = (geo.k_block * geo.cols * geo.in_bytes) as u64;
                let round = slot * kernels::amp_slots(rows_per_worker, true) as u64
                    + 6
                    + weight_bytes / 16
                    + slot * (2 + 6 * 2 + 1);
                let compute = per_tile * bg * kb as u64 * round;
                let exchange = per_tile * (a_bytes + b_bytes) / 4
                    + chunks * (EXCHANGE_PHASE_OVERHEAD_CYCLES + self.target.sync_cycles) as u64;
                candidates.push((compute + exchange, exchange, mem, pm, pn, chunks as usize));
            }
        }
        if candidates.is_empty() {
            // Report the split that comes closest to fitting, and by how much it misses.
            let available = self.target.memory_bytes() as u64 - SUPPORT_RESERVE_BYTES;
            let reason = match closest {
                Some((over_total, over_interleaved, mem, pm, pn))
                    if over_total >= over_interleaved =>
                {
                    format!(
                        "the closest split (rows/{pm} x column-groups/{pn}) needs {mem} bytes per tile, {available} are available after {SUPPORT_RESERVE_BYTES} reserved: {over_total} bytes over"
                    )
                }
                Some((_, over_interleaved, _, pm, pn)) => format!(
                    "the closest split (rows/{pm} x column-groups/{pn}) needs {over_interleaved} bytes more of weights than the {} bytes of interleaved memory",
                    self.target.interleaved_bytes()
                ),
                None => format!("{examined} candidates examined, none usable"),
            };
            return Err(CodegenError::DoesNotFit(format!(
                "{name}: no tile mapping fits on {tiles} tiles: {reason}"
            )));
        }
        candidates.sort_by_key(|c| (c.0, c.2, c.3, c.4));
        for (cost, exch, mem, pm, pn, chunks) in candidates.iter().take(FINALISTS) {
            self.finalists.push(Finalist {
                op: name.to_string(),
                mapping: format!(
                    "matmul rows/{pm} column-groups/{pn} k-chunks/{chunks} mode={mode:?}"
                ),
                estimated_cycles: *cost,
                estimated_exchange_cycles: *exch,
                peak_tile_bytes: *mem,
                tiles: (batch * pm * pn).min(tiles) as u32,
                alternatives: candidates.len(),
            });
        }
        let (cost, exch, _, pm, pn, k_chunks) = candidates[0];
        // Blocks in (batch, row, column) order, dealt to tiles round-robin.
        let mut blocks = Vec::new();
        // Blocks sharing a column range (the same weights) get consecutive tiles, so one
        // multicast exchange row can send them their weights.
        for bi in 0..batch {
            for j in 0..pn {
                for i in 0..pm {
                    let (m0, m1) = (m * i / pm, m * (i + 1) / pm);
                    let (g0, g1) = (groups * j / pn, groups * (j + 1) / pn);
                    if m1 > m0 && g1 > g0 {
                        let tile = (blocks.len() % tiles) as u32;
                        blocks.push(Block {
                            tile,
                            batch: bi,
                            m0,
                            m1,
                            g0,
                            g1,
                        });
                    }
                }
            }
        }
        // The output's layout: per block, per column group, its rows.
        let ranges = blocks.iter().flat_map(|bl| {
            (bl.g0..bl.g1).map(move |g| {
                let base = bl.batch * groups * m * geo.cols + g * m * geo.cols;
                (bl.tile, base + bl.m0 * geo.cols, base + bl.m1 * geo.cols)
            })
        });
        let layout = Layout::from_ranges(geo.cols, ranges.collect::<Vec<_>>());
        let c = self.add_value(
            format!("{name}.partials"),
            partials,
            out_shape.to_vec(),
            None,
            layout,
        );
        self.ops.push(DevOp {
            name: name.to_string(),
            kind: DevOpKind::MatMul {
                mode,
                blocks,
                pm,
                pn,
                k_chunks,
            },
            inputs: vec![a, b],
            output: c,
            estimated_cycles: cost,
            estimated_exchange_cycles: exch,
        });
        Ok(c)
    }
}
