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

use std::collections::BTreeMap;

use ipu_graph::{DType, Graph, OpKind, Value, ValueId};
use ipu_target::{AmpMode, Target};

use crate::error::{CodegenError, MemoryRegion};
use crate::layout::Layout;
use crate::operator_plan::{DevOp, DevOpKind, DevValue, DevValueId, Finalist, OperatorPlan};
use crate::view::{self, LiveValue, PlanningRefusal, Refusal};
use ipu_kernels::{self as kernels, CastType};

/// Finalists kept per operation for the log.
pub const FINALISTS: usize = 3;
/// Bytes per tile kept free of data for code, vertex states, tables and the runtime when
/// screening candidates (the placement later checks the real figure).
pub const SUPPORT_RESERVE_BYTES: u64 = 96 * 1024;
/// When a re-plan reserves the support area a placement measured, it adds
/// `1 / SUPPORT_MEASURED_HEADROOM_DIVISOR` of it (about 3 %): the new plan's support differs a
/// little from the measured one (k chunks add exchange steps and their tables).
pub const SUPPORT_MEASURED_HEADROOM_DIVISOR: u64 = 32;

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

/// The conversion-kernel type of `dtype`.
pub fn conv_type(dtype: DType) -> kernels::ConvType {
    use ipu_numerics::Fp8Format as F;
    use kernels::{ByteType, ConvType};
    match dtype {
        DType::F32 => ConvType::F32,
        DType::F16 => ConvType::F16,
        DType::Bf16 => ConvType::Bf16,
        DType::I16 => ConvType::Int16 { signed: true },
        DType::U16 => ConvType::Int16 { signed: false },
        DType::I32 => ConvType::Int32 { signed: true },
        DType::U32 => ConvType::Int32 { signed: false },
        DType::F143 { scale } => ConvType::Byte(ByteType::Fp8(F::F143, scale)),
        DType::F152 { scale } => ConvType::Byte(ByteType::Fp8(F::F152, scale)),
        DType::E4M3FN => ConvType::Byte(ByteType::Fp8(F::E4M3FN, 0)),
        DType::E5M2 => ConvType::Byte(ByteType::Fp8(F::E5M2, 0)),
        DType::F4E2M1 => ConvType::Byte(ByteType::F4E2M1),
        DType::E8M0 => ConvType::Byte(ByteType::E8M0),
        DType::Bool => ConvType::Byte(ByteType::Bool),
        _ => {
            let f = dtype.int_format().expect("an integer dtype");
            ConvType::Byte(ByteType::Int {
                bits: f.bits as u8,
                signed: f.signed,
            })
        }
    }
}

/// True when the FP8 conversion unit and vector kernels (`Kernel::Cast`) do the cast.
pub fn cast_on_units(from: DType, to: DType, overflow: ipu_numerics::Overflow) -> bool {
    let unit = |d: DType| d.is_float() || d.is_fp8();
    overflow == ipu_numerics::Overflow::Saturate
        && unit(from)
        && unit(to)
        && !(from.is_fp8() && to.is_fp8())
}

/// The cast-kernel type of `dtype`.
pub fn cast_type(dtype: DType) -> CastType {
    match dtype {
        DType::F32 => CastType::F32,
        DType::F16 => CastType::F16,
        DType::F143 { scale } => CastType::Fp8(ipu_isa::Fp8Format::F143, scale),
        DType::F152 { scale } => CastType::Fp8(ipu_isa::Fp8Format::F152, scale),
        other => unreachable!("{other} is converted by Kernel::Convert"),
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
/// the right. A table whose first reader looks its columns up (`gather_columns`, which takes
/// any group) is stored for the matmul reading it after (a tied LM head).
pub(crate) fn input_group(graph: &Graph, v: ValueId) -> Option<usize> {
    let mut readers = graph.operations().iter().filter(|o| o.inputs.contains(&v));
    let mut op = readers.next()?;
    if matches!(op.kind, OpKind::GatherColumns) {
        op = readers.find(|o| matches!(o.kind, OpKind::MatMul { .. }))?;
    }
    let OpKind::MatMul { partials, .. } = op.kind else {
        return None;
    };
    let dtype = graph.value(op.inputs[0]).ty.dtype;
    let geo = matmul_mode(dtype, partials)?.geometry();
    Some(if op.inputs[0] == v {
        geo.k as usize
    } else {
        geo.columns as usize
    })
}

pub(crate) struct Planner<'a> {
    pub(crate) graph: &'a Graph,
    pub(crate) target: &'a Target,
    pub(crate) tiles: u32,
    pub(crate) values: Vec<DevValue>,
    pub(crate) ops: Vec<DevOp>,
    pub(crate) finalists: Vec<Finalist>,
    pub(crate) of_graph: std::collections::HashMap<ValueId, DevValueId>,
    /// The user's value or operation being planned (`%name`).
    pub(crate) origin: String,
    /// Per graph value, the index of the last graph operation that reads it (`usize::MAX`
    /// for graph outputs and constants, which stay live to the end).
    pub(crate) last_use: std::collections::HashMap<ValueId, usize>,
    /// The index of the graph operation being planned.
    pub(crate) op_index: usize,
    /// Per-tile memory budgets of some user operations (see [`plan_with_budgets`]).
    pub(crate) budgets: BTreeMap<String, u64>,
    /// Bytes per tile the matmul planner keeps free for code and support data (see
    /// [`plan_with_budgets`]).
    pub(crate) support_reserve_bytes: u64,
    /// The finalist to select per operation, when not the first (see [`plan_searched`]).
    pub(crate) choices: Choices,
    /// The search's bound and what it has spent.
    pub(crate) search: SearchState,
    /// The tile the current operation's closest mapping needs its bytes on, when its family
    /// refused it for memory and knows which (see [`Planner::fits_any`]).
    pub(crate) refused_tile: Option<u32>,
}

/// The finalist an operation selects: its index among the operation's finalists (0: the
/// planner's pick) and the mapping that finalist must describe, so that a choice made for
/// another plan is detected rather than applied to a different mapping.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Choice {
    /// Index among the operation's finalists.
    pub finalist: usize,
    /// The finalist's [`Finalist::mapping`].
    pub mapping: String,
}

/// Chosen finalists by operation name ([`Finalist::op`]); operations absent select their
/// first finalist.
pub type Choices = BTreeMap<String, Choice>;

/// A bound on the planner's search, as egg's runner bounds its iterations: candidate mappings
/// examined over the whole graph, and wall-clock time. Once it is spent, each operation still
/// to plan stops enumerating after its first candidate that fits. A time bound makes the plan
/// depend on the machine's speed; a candidate bound keeps builds deterministic.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SearchBudget {
    /// Most candidates examined.
    pub candidates_max: Option<u64>,
    /// Most milliseconds spent.
    pub time_max_ms: Option<u64>,
}

impl SearchBudget {
    /// Parses `N` (candidates) or `Nms` (milliseconds).
    pub fn parse(text: &str) -> Result<SearchBudget, String> {
        let t = text.trim();
        let (digits, ms) = match t.strip_suffix("ms") {
            Some(d) => (d, true),
            None => (t, false),
        };
        let n: u64 = digits.trim().parse().map_err(|_| {
            format!("`{text}` is not a search budget: a number of candidates (`500`) or milliseconds (`200ms`)")
        })?;
        if n == 0 {
            return Err("a search budget is at least 1".into());
        }
        Ok(if ms {
            SearchBudget {
                time_max_ms: Some(n),
                ..Default::default()
            }
        } else {
            SearchBudget {
                candidates_max: Some(n),
                ..Default::default()
            }
        })
    }
}

impl std::fmt::Display for SearchBudget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (self.candidates_max, self.time_max_ms) {
            (None, None) => f.write_str("unbounded"),
            (Some(c), None) => write!(f, "{c}"),
            (None, Some(ms)) => write!(f, "{ms}ms"),
            (Some(c), Some(ms)) => write!(f, "{c},{ms}ms"),
        }
    }
}

/// Why the planner's search stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SearchStop {
    /// Every candidate of every operation was examined (within the families' own bounds).
    Exhausted,
    /// The candidate budget was reached.
    CandidatesReached,
    /// The time budget was reached.
    TimeReached,
}

impl SearchStop {
    /// Its name in logs.
    pub fn name(self) -> &'static str {
        match self {
            SearchStop::Exhausted => "space exhausted",
            SearchStop::CandidatesReached => "candidate budget reached",
            SearchStop::TimeReached => "time budget reached",
        }
    }
}

/// The search's bound and what it spent.
#[derive(Debug, Clone)]
pub(crate) struct SearchState {
    pub(crate) budget: SearchBudget,
    pub(crate) examined: u64,
    pub(crate) start: std::time::Instant,
    pub(crate) stopped: Option<SearchStop>,
}

impl SearchState {
    fn new(budget: SearchBudget) -> SearchState {
        SearchState {
            budget,
            examined: 0,
            start: std::time::Instant::now(),
            stopped: None,
        }
    }

    /// Counts one candidate examined; true when the budget is spent (the family then keeps
    /// what it has, once it has a candidate).
    pub(crate) fn spend(&mut self) -> bool {
        self.examined += 1;
        if self.stopped.is_some() {
            return true;
        }
        if self
            .budget
            .candidates_max
            .is_some_and(|c| self.examined >= c)
        {
            self.stopped = Some(SearchStop::CandidatesReached);
        } else if self
            .budget
            .time_max_ms
            .is_some_and(|ms| self.start.elapsed().as_millis() as u64 >= ms)
        {
            self.stopped = Some(SearchStop::TimeReached);
        }
        self.stopped.is_some()
    }
}

/// How the planner's search went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SearchOutcome {
    /// Candidates examined.
    pub examined: u64,
    /// Why it stopped.
    pub stopped: SearchStop,
}

/// Plans every operation of `graph` over tiles `0..tiles` of `target`.
pub fn plan(graph: &Graph, target: &Target, tiles: u32) -> Result<OperatorPlan, CodegenError> {
    plan_with_budgets(
        graph,
        target,
        tiles,
        &BTreeMap::new(),
        SUPPORT_RESERVE_BYTES,
    )
}

/// [`plan`] with a per-tile memory budget for some user operations (`%name`): their mappings
/// may use at most that many bytes per tile. The build sets budgets when placement finds that
/// an operation's planned memory does not fit beside everything else live at the time, and
/// then also `support_reserve_bytes`, the code and support data per tile that placement
/// measured, which matmuls keep free in place of [`SUPPORT_RESERVE_BYTES`] (never less).
pub fn plan_with_budgets(
    graph: &Graph,
    target: &Target,
    tiles: u32,
    budgets: &BTreeMap<String, u64>,
    support_reserve_bytes: u64,
) -> Result<OperatorPlan, CodegenError> {
    plan_searched(
        graph,
        target,
        tiles,
        budgets,
        support_reserve_bytes,
        &Choices::new(),
        SearchBudget::default(),
    )
    .map(|(p, _)| p)
}

/// [`plan_with_budgets`] selecting the finalists of `choices` and bounding the search by
/// `search`. A choice that does not match the plan (an operation without finalists, an index
/// beyond them, another mapping at that index) is refused with [`CodegenError::Options`].
pub fn plan_searched(
    graph: &Graph,
    target: &Target,
    tiles: u32,
    budgets: &BTreeMap<String, u64>,
    support_reserve_bytes: u64,
    choices: &Choices,
    search: SearchBudget,
) -> Result<(OperatorPlan, SearchOutcome), CodegenError> {
    plan_explained(
        graph,
        target,
        tiles,
        budgets,
        support_reserve_bytes,
        choices,
        search,
    )
    .map_err(|r| r.error)
}

/// [`plan_searched`], with the view of every tile at the operation refused when planning
/// refuses one for memory ([`view::planning_refusal_view`]; the error then names the busiest
/// tile and its largest values).
pub fn plan_explained(
    graph: &Graph,
    target: &Target,
    tiles: u32,
    budgets: &BTreeMap<String, u64>,
    support_reserve_bytes: u64,
    choices: &Choices,
    search: SearchBudget,
) -> Result<(OperatorPlan, SearchOutcome), Refusal> {
    // Layouts cut the last axis into column groups: a value needs one.
    if let Some(v) = graph.values().iter().find(|v| v.ty.shape.is_empty()) {
        return Err(CodegenError::unsupported(
            format!("%{}", v.name),
            "rank-0 (scalar) tensors are not lowered; give the value the shape [1]",
        )
        .into());
    }
    if tiles == 0 || tiles > target.tiles {
        return Err(CodegenError::Options {
            message: format!(
                "--tiles {tiles} is outside 1..={} for {}",
                target.tiles, target.kind
            ),
        }
        .into());
    }
    let mut p = Planner {
        graph,
        target,
        tiles,
        values: Vec::new(),
        ops: Vec::new(),
        finalists: Vec::new(),
        of_graph: Default::default(),
        origin: String::new(),
        last_use: last_uses(graph),
        op_index: 0,
        budgets: budgets.clone(),
        support_reserve_bytes: support_reserve_bytes.max(SUPPORT_RESERVE_BYTES),
        choices: choices.clone(),
        search: SearchState::new(search),
        refused_tile: None,
    };
    // Inputs, and constants laid out like them (`initialize` writes those onto the tiles
    // once): a value balanced over the tiles from `first`, and the tiles it takes.
    let host_value = |p: &mut Planner, v: ValueId, first: u32| {
        let val = graph.value(v);
        let group = input_group(graph, v).unwrap_or_else(|| default_group(val.ty.dtype));
        let layout = Layout::balanced_from(&val.ty.shape, group, tiles, first);
        let used = layout.tiles().len() as u32;
        p.origin = format!("%{}", val.name);
        (p.add_graph_value(v, val, val.ty.dtype, layout), used)
    };
    let mut inputs = Vec::new();
    for &v in graph.inputs() {
        inputs.push(host_value(&mut p, v, 0).0);
    }
    // Each constant starts on the tile after the last one the previous constant took: small
    // constants (biases, norm weights) cover only the first few hundred tiles, and laid out
    // from tile 0 each they would all sit on the same tiles, whose exchange tables (every
    // consumer's copy of every piece) then crowd out their data memory.
    let mut constants = Vec::new();
    let mut first_tile = 0u32;
    for c in graph.constants() {
        let (id, used) = host_value(&mut p, c.value, first_tile);
        first_tile = (first_tile + used) % tiles;
        constants.push((id, c.data.clone()));
    }
    for (i, op) in graph.operations().iter().enumerate() {
        p.origin = format!("%{}", op.name);
        p.op_index = i;
        p.refused_tile = None;
        if let Err(e) = p.plan_op(op) {
            return Err(p.refusal(e));
        }
    }
    let outputs = graph
        .outputs()
        .iter()
        .map(|v| p.of_graph[v])
        .collect::<Vec<_>>();
    for &o in &outputs {
        if p.values[o]
            .graph
            .is_some_and(|g| graph.inputs().contains(&g) || graph.constant(g).is_some())
        {
            return Err(CodegenError::unsupported(
                format!("%{}", p.values[o].name),
                "the output is a graph input or a constant; nothing to compute",
            )
            .into());
        }
    }
    check_choices(&p.finalists, choices)?;
    let outcome = SearchOutcome {
        examined: p.search.examined,
        stopped: p.search.stopped.unwrap_or(SearchStop::Exhausted),
    };
    let estimated_cycles = p.ops.iter().map(|o| o.estimated_cycles).sum();
    let estimated_exchange_cycles = p.ops.iter().map(|o| o.estimated_exchange_cycles).sum();
    let plan = OperatorPlan {
        values: p.values,
        ops: p.ops,
        outputs,
        inputs,
        constants,
        finalists: p.finalists,
        estimated_cycles,
        estimated_exchange_cycles,
        tiles_used: tiles,
    };
    Ok((plan, outcome))
}

/// Every choice names an operation with finalists, an index among them, and the mapping the
/// plan has there.
fn check_choices(finalists: &[Finalist], choices: &Choices) -> Result<(), CodegenError> {
    for (op, c) in choices {
        let of_op: Vec<&Finalist> = finalists.iter().filter(|f| &f.op == op).collect();
        let refuse = |why: String| {
            Err(CodegenError::Options {
                message: format!("chosen finalist {} of {op}: {why}", c.finalist),
            })
        };
        match of_op.get(c.finalist) {
            None if of_op.is_empty() => return refuse("no such operation in the plan".into()),
            None => return refuse(format!("the operation has {} finalists", of_op.len())),
            Some(f) if f.mapping != c.mapping => {
                return refuse(format!(
                    "the plan's finalist is `{}`, not `{}`",
                    f.mapping, c.mapping
                ));
            }
            Some(_) => {}
        }
    }
    Ok(())
}

/// The finalists of every operation that had a choice (more than one candidate), by
/// operation, in the planner's order (the first is its pick).
pub fn finalists_with_choice(plan: &OperatorPlan) -> Vec<(String, Vec<Finalist>)> {
    let mut by_op: Vec<(String, Vec<Finalist>)> = Vec::new();
    for f in plan.finalists.iter().filter(|f| f.alternatives > 1) {
        match by_op.iter_mut().find(|(op, _)| op == &f.op) {
            Some((_, fs)) => fs.push(f.clone()),
            None => by_op.push((f.op.clone(), vec![f.clone()])),
        }
    }
    by_op
}

/// Checks a plan: every layout covers its value, every operation's operands precede it.
pub fn check(plan: &OperatorPlan) -> Result<(), CodegenError> {
    for v in &plan.values {
        let total = ipu_package::storage_elements(&v.shape, v.layout.group);
        v.layout
            .check(total)
            .map_err(|e| CodegenError::internal(format!("value %{}: {e}", v.name)))?;
        if v.layout.pieces.iter().any(|p| p.tile >= plan.tiles_used) {
            return Err(CodegenError::internal(format!(
                "value %{} on an unused tile",
                v.name
            )));
        }
    }
    for (i, op) in plan.ops.iter().enumerate() {
        let produced_before = |v: DevValueId| {
            plan.inputs.contains(&v)
                || plan.constants.iter().any(|c| c.0 == v)
                || plan.ops[..i].iter().any(|o| o.output == v)
        };
        if let Some(v) = op.inputs.iter().find(|v| !produced_before(**v)) {
            return Err(CodegenError::internal(format!(
                "{} reads %{} before it exists",
                op.name, plan.values[*v].name
            )));
        }
    }
    Ok(())
}

/// Largest values of the busiest tile a planning refusal names.
pub const REFUSAL_VALUES_NAMED: usize = 5;

/// The busiest tile `t` of a planning refusal's view `v`, in words: its largest values (at
/// their share of the tile) beside the refused operation's estimated need.
fn busiest_text(v: &view::BuildView, t: &view::TileMemory, need_bytes: u64) -> String {
    let values: Vec<&view::BufferView> = t.buffers.iter().filter(|b| !b.estimate).collect();
    let name = |b: &view::BufferView| name_of(v, b.name);
    let total: u64 = values.iter().map(|b| u64::from(b.bytes)).sum();
    // Operands read last by the refused operation: their homes are live, though the screen
    // (`other_live_bytes`) leaves them to the reserve's slack.
    let operands: u64 = values
        .iter()
        .filter(|b| b.last == t.peak_step)
        .filter(|b| {
            v.steps
                .get(t.peak_step)
                .is_none_or(|s| name_of(v, b.op) != s.name)
        })
        .map(|b| u64::from(b.bytes))
        .sum();
    let operands = if operands > 0 {
        format!(", {operands} of them its operands' homes")
    } else {
        String::new()
    };
    let need = if t.buffers.iter().any(|b| b.estimate) {
        format!("the closest mapping's {need_bytes} bytes")
    } else {
        format!("the closest mapping's {need_bytes} bytes on another tile")
    };
    if values.is_empty() {
        return format!("busiest tile {}: no values live beside {need}", t.tile);
    }
    let shown: Vec<String> = values
        .iter()
        .take(REFUSAL_VALUES_NAMED)
        .map(|b| format!("{} {} bytes", name(b), b.bytes))
        .collect();
    let more = values.len().saturating_sub(REFUSAL_VALUES_NAMED);
    let more = if more > 0 {
        format!(" and {more} more")
    } else {
        String::new()
    };
    format!(
        "busiest tile {}: {}{more} ({total} bytes of values live there{operands}) beside {need}",
        t.tile,
        shown.join(", ")
    )
}

fn name_of(v: &view::BuildView, i: u32) -> &str {
    v.names.get(i as usize).map_or("?", String::as_str)
}

/// Per graph value, the index of the last operation that reads it; graph outputs and constants
/// stay live to the end.
fn last_uses(graph: &Graph) -> std::collections::HashMap<ValueId, usize> {
    let mut last = std::collections::HashMap::new();
    for (i, op) in graph.operations().iter().enumerate() {
        for &v in &op.inputs {
            last.insert(v, i);
        }
    }
    for &v in graph.outputs() {
        last.insert(v, usize::MAX);
    }
    for c in graph.constants() {
        last.insert(c.value, usize::MAX);
    }
    last
}

impl Planner<'_> {
    /// Records an operation that has one mapping and so no choice: `finalist` for the log,
    /// and its device operation with the finalist's estimates.
    pub(crate) fn push_unchosen(
        &mut self,
        finalist: Finalist,
        kind: DevOpKind,
        inputs: Vec<DevValueId>,
        output: DevValueId,
    ) {
        self.ops.push(DevOp {
            origin: self.origin.clone(),
            name: finalist.op.clone(),
            kind,
            inputs,
            output,
            estimated_cycles: finalist.estimated_cycles,
            estimated_exchange_cycles: finalist.estimated_exchange_cycles,
        });
        self.finalists.push(finalist);
    }

    /// The budget of the operation being planned, if placement asked for one.
    pub(crate) fn budget(&self) -> Option<u64> {
        self.budgets.get(&self.origin).copied()
    }

    /// The index of the finalist operation `op` selects among its `finalists` (the first
    /// unless [`Planner::choices`] says otherwise; an index beyond them is refused after
    /// planning by `check_choices`).
    pub(crate) fn chosen(&self, op: &str, finalists: usize) -> usize {
        self.choices
            .get(op)
            .map_or(0, |c| c.finalist)
            .min(finalists.saturating_sub(1))
    }

    /// Bytes the busiest tile holds for other values while the current graph operation runs:
    /// every planned graph value that a later operation still reads (constants and outputs
    /// included), at its largest share of one tile. The operation's own operands count only
    /// when read again later (a lone operation's homes are within the support reserve's
    /// slack). A conservative bound: the largest shares need not be on one tile.
    /// Whether `v` is a graph input (or, with `constants`, a constant) that only the
    /// operation being planned reads, once among its operands `ins`, and no output: its
    /// layout (where the host writes it) is then this operation's to choose.
    pub(crate) fn read_only_here(
        &self,
        v: DevValueId,
        ins: &[DevValueId],
        constants: bool,
    ) -> bool {
        self.unread_before(v, ins, constants)
            && self.values[v].graph.is_some_and(|gv| {
                let readers = self.graph.operations().iter();
                readers.filter(|o| o.inputs.contains(&gv)).count() == 1
            })
    }

    /// Whether `v` is a graph input or constant that is no output, `ins` names once and no
    /// operation planned before reads: the first reader may lay it out as it likes, and later
    /// readers take that layout (a tied table the lookup lays out and the LM head stages).
    pub(crate) fn read_only_first(&self, v: DevValueId, ins: &[DevValueId]) -> bool {
        self.unread_before(v, ins, true)
    }

    /// Whether `v` is a graph input (or, with `constants`, a constant) and no output, `ins`
    /// names it once, and no operation planned before reads it.
    fn unread_before(&self, v: DevValueId, ins: &[DevValueId], constants: bool) -> bool {
        self.values[v].graph.is_some_and(|gv| {
            let held = self.graph.inputs().contains(&gv)
                || (constants && self.graph.constants().iter().any(|c| c.value == gv));
            held && !self.graph.outputs().contains(&gv)
                && ins.iter().filter(|&&i| i == v).count() == 1
                && self.ops.iter().all(|o| !o.inputs.contains(&v))
        })
    }

    pub(crate) fn other_live_bytes(&self) -> u64 {
        self.other_live().map(|(_, b)| b).sum()
    }

    /// The values [`Planner::other_live_bytes`] counts, with their bytes.
    fn other_live(&self) -> impl Iterator<Item = (&str, u64)> {
        self.values.iter().filter_map(|v| {
            let g = v.graph?;
            let last = *self.last_use.get(&g)?;
            (last > self.op_index).then(|| {
                let bytes = v.layout.most_elements_on_a_tile() * v.dtype.bytes();
                (v.name.as_str(), (bytes as u64).div_ceil(8) * 8)
            })
        })
    }

    /// The planning refusal of the current operation: the busiest tile of the closest mapping
    /// needs `need_bytes` of `region`, where `available_bytes` are free. Which tile that is
    /// the family says through [`Planner::refused_tile`] when it knows; the refusal's view
    /// ([`Planner::refusal`]) adds the values live on each tile.
    pub(crate) fn does_not_fit(
        &self,
        region: MemoryRegion,
        need_bytes: u64,
        available_bytes: u64,
        detail: String,
    ) -> CodegenError {
        CodegenError::DoesNotFit {
            op: Some(self.origin.clone()),
            tile: None,
            region,
            need_bytes,
            available_bytes,
            detail,
        }
    }

    /// [`Planner::does_not_fit`] in any region when `need_bytes` exceed `available_bytes`,
    /// the need on `tile` when the family knows its busiest tile (none: spread over the tiles
    /// or not known).
    pub(crate) fn fits_any(
        &mut self,
        tile: Option<u32>,
        need_bytes: u64,
        available_bytes: u64,
        detail: impl FnOnce() -> String,
    ) -> Result<(), CodegenError> {
        if need_bytes > available_bytes {
            self.refused_tile = tile;
            let region = MemoryRegion::Any;
            return Err(self.does_not_fit(region, need_bytes, available_bytes, detail()));
        }
        Ok(())
    }

    /// The values planned so far that are live at the operation being planned: graph values
    /// made at or before it and read at or after it (its operands included: their homes are
    /// on the tiles while it runs; constants and outputs to the end), and the intermediates
    /// its own planning made.
    fn live_at_current(&self) -> Vec<LiveValue> {
        let ops = self.graph.operations();
        let made_by: std::collections::HashMap<ValueId, usize> = ops
            .iter()
            .enumerate()
            .flat_map(|(i, o)| o.outputs.iter().map(move |&v| (v, i)))
            .collect();
        let last_op = ops.len().saturating_sub(1);
        self.values
            .iter()
            .filter_map(|v| {
                let (first, last) = match v.graph {
                    Some(g) => {
                        let last = *self.last_use.get(&g)?;
                        let first = made_by.get(&g).copied().unwrap_or(0);
                        (first <= self.op_index && last >= self.op_index)
                            .then_some((first, last.min(last_op)))?
                    }
                    None => (v.origin == self.origin).then_some((self.op_index, self.op_index))?,
                };
                let bytes_per_tile = v
                    .layout
                    .elements_per_tile()
                    .into_iter()
                    .map(|(t, e)| (t, ((e * v.dtype.bytes()) as u64).div_ceil(8) * 8))
                    .filter(|&(_, b)| b > 0)
                    .collect();
                Some(LiveValue {
                    name: format!("%{}", v.name),
                    origin: v.origin.clone(),
                    first,
                    last,
                    bytes_per_tile,
                })
            })
            .collect()
    }

    /// The refusal of the operation being planned. One for memory gains the view of every
    /// tile at it ([`view::planning_refusal_view`]), names its busiest tile and the largest
    /// values live there.
    pub(crate) fn refusal(&self, error: CodegenError) -> Refusal {
        let CodegenError::DoesNotFit {
            op,
            tile: None,
            region,
            need_bytes,
            available_bytes,
            detail,
        } = error
        else {
            return error.into();
        };
        let r = PlanningRefusal {
            operations: (self.graph.operations().iter())
                .map(|o| format!("%{}", o.name))
                .collect(),
            refused: self.op_index,
            tiles: self.tiles,
            live: self.live_at_current(),
            need_bytes,
            need_interleaved: region == MemoryRegion::Interleaved,
            need_tile: self.refused_tile.filter(|&t| t < self.tiles),
            reserve_bytes: self.support_reserve_bytes,
            finalists: &self.finalists,
        };
        let v = view::planning_refusal_view(&r, self.target);
        let busiest = view::busiest_tile(&v).map(|t| t.tile);
        let detail = match view::busiest_tile(&v) {
            Some(t) => format!("{detail}; {}", busiest_text(&v, t, need_bytes)),
            None => detail,
        };
        Refusal {
            error: CodegenError::DoesNotFit {
                op,
                tile: busiest,
                region,
                need_bytes,
                available_bytes,
                detail,
            },
            view: Some(Box::new(v)),
        }
    }

    /// A device value for the graph value `id` (`val`) as `dtype`, in `layout`.
    pub(crate) fn add_graph_value(
        &mut self,
        id: ValueId,
        val: &Value,
        dtype: DType,
        layout: Layout,
    ) -> DevValueId {
        self.add_value(
            val.name.clone(),
            dtype,
            val.ty.shape.clone(),
            Some(id),
            layout,
        )
    }

    pub(crate) fn add_value(
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
            origin: self.origin.clone(),
        });
        let id = self.values.len() - 1;
        if let Some(g) = graph {
            self.of_graph.insert(g, id);
        }
        id
    }

    pub(crate) fn rename(&mut self, v: DevValueId, name: String, graph: ValueId) {
        self.values[v].name = name;
        self.values[v].graph = Some(graph);
        self.of_graph.insert(graph, v);
    }
}

/// Logs the finalists: operations that had a choice at info level, those whose layout
/// follows their operands (one candidate) at debug level; then the selected plan.
pub fn log_finalists(plan: &OperatorPlan) {
    for (i, f) in plan.finalists.iter().enumerate() {
        macro_rules! finalist {
            ($level:ident) => {
                tracing::$level!(
                    finalist = i,
                    operation = %f.op,
                    mapping = %f.mapping,
                    candidates = f.alternatives,
                    estimated_cycles = f.estimated_cycles,
                    estimated_exchange_cycles = f.estimated_exchange_cycles,
                    peak_total_bytes = f.peak_tile_bytes,
                    active_tiles = f.tiles,
                    "retained operator-plan finalist"
                )
            };
        }
        if f.alternatives > 1 {
            finalist!(info);
        } else {
            finalist!(debug);
        }
    }
    tracing::info!(
        operations = plan.ops.len(),
        values = plan.values.len(),
        estimated_cycles = plan.estimated_cycles,
        estimated_exchange_cycles = plan.estimated_exchange_cycles,
        "selected operator plan"
    );
}
