//! What a build shows a user: its steps with their estimates and kernels, every tile's memory
//! and the buffers live at its peak, the bytes each tile exchanges, the planner's finalists.
//! Plain data (serialisable) that reports and traces are drawn from; [`view`] builds it from
//! the placed program, [`refusal_view`] from the last program tried when placement refused it,
//! [`planning_refusal_view`] from the values planned so far when planning refused an operation
//! for memory (no program: the steps are the graph's operations). A refused build carries the
//! closest of these beside its error ([`Refusal`]).

use std::collections::{BTreeMap, BTreeSet};

use ipu_target::Target;
use serde::{Deserialize, Serialize};

use crate::error::CodegenError;
use crate::operator_plan::{Finalist, OperatorPlan};
use crate::place::{Placement, TileSupport};
use crate::program::{Region, Step, SupOp, TileProgram};

/// A refused build: the error, and the view of the closest the build came to a package: the
/// last program tried, when placement refused it; every tile's live values and the refused
/// operation's estimated working set, when planning refused an operation for memory; none
/// for other refusals.
#[derive(Debug, Clone, PartialEq)]
pub struct Refusal {
    /// Why.
    pub error: CodegenError,
    /// The memory view of the closest candidate.
    pub view: Option<Box<BuildView>>,
}

impl From<CodegenError> for Refusal {
    fn from(error: CodegenError) -> Refusal {
        Refusal { error, view: None }
    }
}

/// Version of [`BuildView`]'s serialised layout; bumped when a field changes meaning (2: the
/// view of a planning refusal, [`BuildView::planning_refusal`] and [`BufferView::estimate`]).
pub const VIEW_FORMAT_VERSION: u32 = 2;

/// The view of one build (or of the closest candidate of a refused one).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct BuildView {
    /// [`VIEW_FORMAT_VERSION`].
    pub format_version: u32,
    /// Tiles taking part.
    pub tiles_used: u32,
    /// Bytes of standard (non-interleaved) data memory per tile.
    pub standard_capacity_bytes: u32,
    /// Bytes of interleaved memory per tile.
    pub interleaved_capacity_bytes: u32,
    /// The first `init_steps` steps are the `initialize` program, the rest `run`.
    pub init_steps: usize,
    /// Every step in order.
    pub steps: Vec<StepView>,
    /// Every active tile's memory, in tile order.
    pub tiles: Vec<TileMemory>,
    /// Names of buffers and operations, indexed by [`BufferView::name`] and
    /// [`BufferView::op`] (many tiles hold buffers of the same names).
    pub names: Vec<String>,
    /// The planner's finalists, in the planner's order (per operation the selected first).
    pub finalists: Vec<FinalistView>,
    /// Whether buffer addresses are known (false for a program placement refused).
    pub placed: bool,
    /// The view of a planning refusal: no program was lowered, the steps are the graph's
    /// operations and a tile's "buffers" are the values planned so far that are live at the
    /// refused operation (their share on the tile) and that operation's estimated working set.
    #[serde(default)]
    pub planning_refusal: bool,
    /// The kernels linked into every active tile, by entry address (as the steps name them),
    /// so that what the device attributes to an entry can be named. Empty before emission.
    #[serde(default)]
    pub kernels: Vec<KernelView>,
}

/// A kernel's name and entry address.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct KernelView {
    /// As [`StepView::kernels`] names it.
    pub name: String,
    /// Its entry address, the same on every tile.
    pub entry: u32,
}

/// One bulk-synchronous step.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct StepView {
    /// `host`, `exchange` or `compute`.
    pub kind: String,
    /// What it belongs to (the operation, or what a host exchange moves).
    pub name: String,
    /// The compiler's estimate of the step: a compute set's slowest tile plus the sync, an
    /// exchange phase's scheduled horizon plus its overhead; none for host exchange (the
    /// host's speed is not modelled).
    pub estimated_cycles: Option<u64>,
    /// Kernels the compute set launches, by name, each once.
    pub kernels: Vec<String>,
    /// Tiles that compute, send or receive in the step.
    pub tiles: u32,
    /// Copies (exchange and host exchange).
    pub copies: u64,
    /// Bytes moved (exchange and host exchange).
    pub bytes: u64,
}

/// One tile's memory and traffic.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct TileMemory {
    /// The tile.
    pub tile: u32,
    /// Peak bytes of standard memory, code and support data included.
    pub standard_bytes: u32,
    /// Peak bytes of interleaved memory.
    pub interleaved_bytes: u32,
    /// Code and support data (vertex states, tables), at the bottom of standard memory.
    pub support_bytes: u32,
    /// The step at which the most buffer bytes are live.
    pub peak_step: usize,
    /// The buffers live at `peak_step`, largest first.
    pub buffers: Vec<BufferView>,
    /// Bytes the tile sends in the `run` program's exchange phases.
    pub exchange_out_bytes: u64,
    /// Bytes it receives in them.
    pub exchange_in_bytes: u64,
    /// Bytes host exchange writes into the tile in `run`.
    pub host_in_bytes: u64,
    /// Bytes host exchange reads from the tile in `run`.
    pub host_out_bytes: u64,
}

/// A buffer live at its tile's peak.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct BufferView {
    /// Index of its name in [`BuildView::names`].
    pub name: u32,
    /// Index of the user's operation it serves in [`BuildView::names`].
    pub op: u32,
    /// Bytes.
    pub bytes: u32,
    /// In interleaved memory.
    pub interleaved: bool,
    /// First step using it.
    pub first: usize,
    /// Last step using it.
    pub last: usize,
    /// Its address, when placed.
    pub address: Option<u32>,
    /// Not a buffer: the estimated working set of the operation planning refused (its closest
    /// mapping's need on its busiest tile).
    #[serde(default)]
    pub estimate: bool,
}

/// One of the planner's finalists.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct FinalistView {
    /// The operation.
    pub op: String,
    /// The mapping.
    pub mapping: String,
    /// Estimated cycles.
    pub estimated_cycles: u64,
    /// Estimated exchange cycles.
    pub estimated_exchange_cycles: u64,
    /// Peak bytes per tile.
    pub peak_tile_bytes: u64,
    /// Tiles.
    pub tiles: u32,
    /// Candidates the operation had.
    pub candidates: usize,
}

/// Interns names for [`BuildView::names`].
#[derive(Default)]
struct Names {
    index: BTreeMap<String, u32>,
    list: Vec<String>,
}

impl Names {
    fn id(&mut self, s: &str) -> u32 {
        if let Some(&i) = self.index.get(s) {
            return i;
        }
        let i = self.list.len() as u32;
        self.index.insert(s.to_string(), i);
        self.list.push(s.to_string());
        i
    }
}

/// The view of a placed and scheduled program.
pub fn view(
    plan: &OperatorPlan,
    program: &TileProgram,
    support: &BTreeMap<u32, TileSupport>,
    placement: &Placement,
    step_cycles: &[Option<u64>],
    target: &Target,
) -> BuildView {
    let mut v = common(plan, program, support, Some(placement), target);
    for (s, &c) in v.steps.iter_mut().zip(step_cycles) {
        s.estimated_cycles = c;
    }
    v
}

/// The view of a program placement refused: peaks from the live ranges (no addresses), compute
/// estimates from the lowering; the closest the build came to a package.
pub fn refusal_view(
    plan: &OperatorPlan,
    program: &TileProgram,
    support: &BTreeMap<u32, TileSupport>,
    target: &Target,
) -> BuildView {
    let mut v = common(plan, program, support, None, target);
    for (i, s) in v.steps.iter_mut().enumerate() {
        if let Step::Compute {
            estimated_cycles, ..
        } = &program.steps[i]
        {
            s.estimated_cycles = Some(*estimated_cycles + target.sync_cycles as u64);
        }
    }
    v
}

fn common(
    plan: &OperatorPlan,
    program: &TileProgram,
    support: &BTreeMap<u32, TileSupport>,
    placement: Option<&Placement>,
    target: &Target,
) -> BuildView {
    let steps_n = program.steps.len();
    let mut names = Names::default();
    let interleaved_of = |i: usize| match placement {
        Some(p) => p.addresses[i] >= target.interleaved_base,
        None => program.buffers[i].region == Region::Interleaved,
    };
    // Live bytes per tile and step, from each buffer's live range (a difference array).
    let mut by_tile: BTreeMap<u32, Vec<usize>> = BTreeMap::new();
    for (i, b) in program.buffers.iter().enumerate() {
        by_tile.entry(b.tile).or_default().push(i);
    }
    let mut tiles = Vec::with_capacity(program.tiles_used as usize);
    for tile in 0..program.tiles_used {
        let ids = by_tile.get(&tile).map(Vec::as_slice).unwrap_or(&[]);
        let mut diff = vec![[0i64; 2]; steps_n + 1];
        for &i in ids {
            let b = &program.buffers[i];
            if b.first > b.last || b.last >= steps_n {
                continue;
            }
            let r = usize::from(interleaved_of(i));
            diff[b.first][r] += b.bytes as i64;
            diff[b.last + 1][r] -= b.bytes as i64;
        }
        let (mut live, mut peak, mut peak_step, mut peaks) = ([0i64; 2], 0i64, 0, [0i64; 2]);
        for (s, d) in diff.iter().take(steps_n).enumerate() {
            live[0] += d[0];
            live[1] += d[1];
            peaks[0] = peaks[0].max(live[0]);
            peaks[1] = peaks[1].max(live[1]);
            if live[0] + live[1] > peak {
                (peak, peak_step) = (live[0] + live[1], s);
            }
        }
        let support_bytes = support
            .get(&tile)
            .map_or(0, |s| s.support_end.saturating_sub(target.memory_base));
        let mut buffers: Vec<BufferView> = ids
            .iter()
            .map(|&i| (i, &program.buffers[i]))
            .filter(|(_, b)| b.first <= peak_step && peak_step <= b.last)
            .map(|(i, b)| BufferView {
                name: names.id(&b.name),
                op: names.id(&b.op),
                bytes: b.bytes,
                interleaved: interleaved_of(i),
                first: b.first,
                last: b.last,
                address: placement.map(|p| p.addresses[i]),
                estimate: false,
            })
            .collect();
        buffers.sort_by_key(|b| (std::cmp::Reverse(b.bytes), b.first, b.name));
        let (standard_bytes, interleaved_bytes) = match placement {
            Some(p) => (
                p.peak_standard_bytes.get(&tile).copied().unwrap_or(0),
                p.peak_interleaved_bytes.get(&tile).copied().unwrap_or(0),
            ),
            None => (peaks[0] as u32 + support_bytes, peaks[1] as u32),
        };
        tiles.push(TileMemory {
            tile,
            standard_bytes,
            interleaved_bytes,
            support_bytes,
            peak_step,
            buffers,
            ..Default::default()
        });
    }
    let mut steps = Vec::with_capacity(steps_n);
    for (i, s) in program.steps.iter().enumerate() {
        let in_run = i >= program.init_steps;
        let mut view = StepView::default();
        let mut active = BTreeSet::new();
        match s {
            Step::Host { name, copies } => {
                view.kind = "host".into();
                view.name = name.clone();
                for (c, to_host) in copies {
                    let tile = program.buffers[c.buffer.0 as usize].tile;
                    active.insert(tile);
                    view.bytes += c.bytes as u64;
                    if let (true, Some(t)) = (in_run, tiles.get_mut(tile as usize)) {
                        if *to_host {
                            t.host_out_bytes += c.bytes as u64;
                        } else {
                            t.host_in_bytes += c.bytes as u64;
                        }
                    }
                }
                view.copies = copies.len() as u64;
            }
            Step::Exchange { name, copies } => {
                view.kind = "exchange".into();
                view.name = name.clone();
                for c in copies {
                    let from = program.buffers[c.src.0 as usize].tile;
                    let to = program.buffers[c.dst.0 as usize].tile;
                    active.insert(from);
                    active.insert(to);
                    view.bytes += c.bytes as u64;
                    if in_run {
                        if let Some(t) = tiles.get_mut(from as usize) {
                            t.exchange_out_bytes += c.bytes as u64;
                        }
                        if let Some(t) = tiles.get_mut(to as usize) {
                            t.exchange_in_bytes += c.bytes as u64;
                        }
                    }
                }
                view.copies = copies.len() as u64;
            }
            Step::Compute {
                name, tiles: work, ..
            } => {
                view.kind = "compute".into();
                view.name = name.clone();
                // Each kernel named once, not once per launch (millions in a large matmul).
                let mut kernels = BTreeSet::new();
                for (&t, ops) in work.iter() {
                    active.insert(t);
                    for op in ops {
                        if let SupOp::Run(k, ..) | SupOp::RunAll(k, ..) = op {
                            kernels.insert(*k);
                        }
                    }
                }
                let names: BTreeSet<String> = kernels.iter().map(|k| format!("{k:?}")).collect();
                view.kernels = names.into_iter().collect();
            }
        }
        view.tiles = active.len() as u32;
        steps.push(view);
    }
    BuildView {
        format_version: VIEW_FORMAT_VERSION,
        tiles_used: program.tiles_used,
        standard_capacity_bytes: target.interleaved_base.saturating_sub(target.memory_base),
        interleaved_capacity_bytes: target.memory_end.saturating_sub(target.interleaved_base),
        init_steps: program.init_steps,
        steps,
        tiles,
        names: names.list,
        finalists: finalist_views(&plan.finalists),
        placed: placement.is_some(),
        planning_refusal: false,
        kernels: Vec::new(),
    }
}

fn finalist_views(finalists: &[Finalist]) -> Vec<FinalistView> {
    finalists
        .iter()
        .map(|f| FinalistView {
            op: f.op.clone(),
            mapping: f.mapping.clone(),
            estimated_cycles: f.estimated_cycles,
            estimated_exchange_cycles: f.estimated_exchange_cycles,
            peak_tile_bytes: f.peak_tile_bytes,
            tiles: f.tiles,
            candidates: f.alternatives,
        })
        .collect()
}

/// The busiest tile of a view: the most standard and interleaved bytes, the lowest tile of
/// equals.
pub fn busiest_tile(view: &BuildView) -> Option<&TileMemory> {
    view.tiles.iter().max_by_key(|t| {
        (
            u64::from(t.standard_bytes) + u64::from(t.interleaved_bytes),
            std::cmp::Reverse(t.tile),
        )
    })
}

/// A value live at the operation planning refused, with its bytes on each tile holding some
/// (the tile's share of its elements times the element bytes, rounded up to 8).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct LiveValue {
    /// `%name`.
    pub(crate) name: String,
    /// The user's value or operation it belongs to.
    pub(crate) origin: String,
    /// The graph operation that makes it (0 for inputs and constants).
    pub(crate) first: usize,
    /// The last graph operation that reads it (the last operation for outputs and constants).
    pub(crate) last: usize,
    /// Bytes per tile.
    pub(crate) bytes_per_tile: BTreeMap<u32, u64>,
}

/// What planning knew when it refused an operation for memory.
#[derive(Debug, Clone)]
pub(crate) struct PlanningRefusal<'a> {
    /// Every graph operation's `%name`, in order.
    pub(crate) operations: Vec<String>,
    /// The index of the refused one.
    pub(crate) refused: usize,
    /// Tiles planned over.
    pub(crate) tiles: u32,
    /// The values live at the refused operation.
    pub(crate) live: Vec<LiveValue>,
    /// The closest mapping's need on its busiest tile.
    pub(crate) need_bytes: u64,
    /// The need is for interleaved memory.
    pub(crate) need_interleaved: bool,
    /// The tile the need is on, when the operation's family names it; otherwise the need is
    /// drawn on every tile, as the bound it is there.
    pub(crate) need_tile: Option<u32>,
    /// Bytes per tile kept for code and support data.
    pub(crate) reserve_bytes: u64,
    /// The finalists of the operations planned before.
    pub(crate) finalists: &'a [Finalist],
}

/// The name of the estimated working set of the refused operation `op` in a planning
/// refusal's view.
pub fn working_set_name(op: &str) -> String {
    format!("{op} working set (estimate)")
}

/// The view of a planning refusal: every tile's support reserve, the values live at the refused
/// operation at their share of the tile, and the refused operation's estimated working set;
/// steps are the graph's operations (`planned`, `refused`, `not planned`), every tile's peak
/// is the refused operation, nothing has an address.
pub(crate) fn planning_refusal_view(r: &PlanningRefusal<'_>, target: &Target) -> BuildView {
    let mut names = Names::default();
    let clamp = |b: u64| u32::try_from(b).unwrap_or(u32::MAX);
    let last_step = r.operations.len().saturating_sub(1);
    let refused_op = r.operations.get(r.refused).cloned().unwrap_or_default();
    let working_set = names.id(&working_set_name(&refused_op));
    let refused_id = names.id(&refused_op);
    let mut tiles: Vec<TileMemory> = (0..r.tiles)
        .map(|tile| TileMemory {
            tile,
            support_bytes: clamp(r.reserve_bytes),
            peak_step: r.refused.min(last_step),
            ..Default::default()
        })
        .collect();
    let mut standard = vec![r.reserve_bytes; tiles.len()];
    let mut interleaved = vec![0u64; tiles.len()];
    for v in &r.live {
        let (name, op) = (names.id(&v.name), names.id(&v.origin));
        for (&tile, &bytes) in &v.bytes_per_tile {
            let Some(t) = tiles.get_mut(tile as usize) else {
                continue;
            };
            standard[tile as usize] += bytes;
            t.buffers.push(BufferView {
                name,
                op,
                bytes: clamp(bytes),
                first: v.first.min(last_step),
                last: v.last.min(last_step),
                ..Default::default()
            });
        }
    }
    let need_on: Vec<u32> = match r.need_tile {
        Some(t) => vec![t],
        None => (0..r.tiles).collect(),
    };
    for tile in need_on {
        let Some(t) = tiles.get_mut(tile as usize) else {
            continue;
        };
        let to = if r.need_interleaved {
            &mut interleaved
        } else {
            &mut standard
        };
        to[tile as usize] += r.need_bytes;
        t.buffers.push(BufferView {
            name: working_set,
            op: refused_id,
            bytes: clamp(r.need_bytes),
            interleaved: r.need_interleaved,
            first: r.refused.min(last_step),
            last: r.refused.min(last_step),
            address: None,
            estimate: true,
        });
    }
    for (i, t) in tiles.iter_mut().enumerate() {
        t.standard_bytes = clamp(standard[i]);
        t.interleaved_bytes = clamp(interleaved[i]);
        t.buffers
            .sort_by_key(|b| (std::cmp::Reverse(b.bytes), b.estimate, b.first, b.name));
    }
    let steps = r
        .operations
        .iter()
        .enumerate()
        .map(|(i, op)| StepView {
            kind: match i.cmp(&r.refused) {
                std::cmp::Ordering::Less => "planned",
                std::cmp::Ordering::Equal => "refused",
                std::cmp::Ordering::Greater => "not planned",
            }
            .into(),
            name: op.clone(),
            ..Default::default()
        })
        .collect();
    BuildView {
        format_version: VIEW_FORMAT_VERSION,
        tiles_used: r.tiles,
        standard_capacity_bytes: target.interleaved_base.saturating_sub(target.memory_base),
        interleaved_capacity_bytes: target.memory_end.saturating_sub(target.interleaved_base),
        init_steps: 0,
        steps,
        tiles,
        names: names.list,
        finalists: finalist_views(r.finalists),
        placed: false,
        planning_refusal: true,
        kernels: Vec::new(),
    }
}
