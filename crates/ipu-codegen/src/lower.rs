//! Lowering: from the operator plan to the bulk-synchronous tile program. Every value gets a
//! buffer on each tile holding pieces of it; operands another layout holds are gathered into
//! staging buffers by an exchange phase; each operation becomes a compute step of vertices.

use std::collections::{BTreeMap, HashMap};

use ipu_package::{HostTensor, TensorRole, split_shape, storage_elements, storage_index};

use crate::cost::estimate;
use crate::error::CodegenError;
use crate::layout::{Move, moves, uncovered};
use crate::operator_plan::{DevValueId, OperatorPlan, dtype_name};
use crate::program::*;
use ipu_kernels::state::*;
use ipu_kernels::{self as kernels, Kernel, OVERREAD_BYTES};

/// Worker contexts a compute step spreads a tile's work over.
pub(crate) const WORKERS: u32 = ipu_target::WORKER_CONTEXTS;

/// Host page holding the inputs.
pub const INPUT_PAGE: u16 = ipu_package::INPUT_PAGE as u16;
/// Host page holding the outputs.
pub const OUTPUT_PAGE: u16 = ipu_package::OUTPUT_PAGE as u16;
/// Host page holding the constants (present only when the graph has constants).
pub const CONSTANTS_PAGE: u16 = ipu_package::CONSTANTS_PAGE as u16;

/// The lowered program and the host-exchange layout of its inputs and outputs.
#[derive(Debug, Clone)]
pub struct Lowered {
    /// The program.
    pub program: TileProgram,
    /// Inputs and outputs in the host pages.
    pub tensors: Vec<HostTensor>,
    /// Padding clears that nothing reads, and so were not emitted.
    pub padding_clears_removed: u32,
    /// Padding clears emitted.
    pub padding_clears: u32,
    /// The constants page's bytes: every constant in its storage order, where its host
    /// tensor says (empty without constants).
    pub constants_page: Vec<u8>,
}

pub(crate) struct Lowerer<'a> {
    pub(crate) plan: &'a OperatorPlan,
    pub(crate) prog: TileProgram,
    pub(crate) value_buffers: HashMap<(DevValueId, u32), BufferId>,
    /// Per value, its elements on each tile (computed once: layouts may have many pieces).
    pub(crate) tile_elements: HashMap<DevValueId, BTreeMap<u32, usize>>,
    pub(crate) clears_removed: u32,
    pub(crate) clears: u32,
    /// The next placement group id.
    pub(crate) next_group: u32,
}

/// Each frame's buffers of every layer: `shadows[frame][layer]`, by tile.
pub(crate) type Shadows = Vec<Vec<BTreeMap<u32, BufferId>>>;

pub(crate) fn align8(n: u64) -> u64 {
    n.div_ceil(8) * 8
}

/// Splits `n` AMP rows over the six workers of a `runall`, which all start together: contiguous
/// ranges in worker order, the first `n % 6` workers taking one row more.
pub(crate) fn split_even(n: u32) -> [(u32, u32); WORKERS as usize] {
    let (q, r) = (n / WORKERS, n % WORKERS);
    let mut at = 0;
    std::array::from_fn(|w| {
        let rows = q + u32::from((w as u32) < r);
        at += rows;
        (at - rows, at)
    })
}

/// What lowering one device operation gives: the copies of its exchange step (and of an
/// exchange step before it, when a value is spread in two hops) and every tile's supervisor
/// operations in its compute step.
#[derive(Default)]
pub(crate) struct OpSteps {
    pub(crate) tiles: BTreeMap<u32, Vec<SupOp>>,
    pub(crate) copies: Vec<Copy>,
    pub(crate) first_copies: Vec<Copy>,
}

/// [`split_even`] as the seven row bounds a `runall` state holds: worker `w` takes rows
/// `bounds[w]..bounds[w + 1]`.
pub(crate) fn even_bounds(n: u32) -> [u32; WORKERS as usize + 1] {
    let mut bounds = [n; WORKERS as usize + 1];
    for (b, p) in bounds.iter_mut().zip(split_even(n)) {
        *b = p.0;
    }
    bounds
}

/// One AMP round's launch of `rows` rows of `input` (rows of `in_row` bytes) into `out` (rows
/// of `out_row` bytes), adding the partials at `partials` (laid out as `out`) when there are
/// any: all six workers at once (`runall`), the rows split evenly. With `dense`, a round that
/// gives every worker rows runs [`Kernel::AmpTableDense`].
pub(crate) fn amp_launch(
    (input, in_row): ((BufferId, u32), u32),
    partials: Option<(BufferId, u32)>,
    (out, out_row): ((BufferId, u32), u32),
    rows: u32,
    dense: bool,
) -> SupOp {
    let bounds = even_bounds(rows);
    let state = AmpTableState {
        input,
        partials: match partials {
            Some((buffer, offset)) => StateWord::Addr(buffer, offset),
            None => StateWord::Const(0),
        },
        out,
        row_bytes: [in_row, out_row],
        bounds,
    };
    let partials = partials.is_some();
    let per = rows.div_ceil(WORKERS);
    if dense && rows >= WORKERS {
        let slots = kernels::amp_table_dense_slots(per, partials);
        return SupOp::RunAll(Kernel::AmpTableDense { partials }, state.into(), slots);
    }
    let slots = kernels::amp_table_slots(per, partials);
    SupOp::RunAll(Kernel::AmpTable { partials }, state.into(), slots)
}

/// Whether the AMP rounds over `rows` rows can be one chain of [`Kernel::AmpChain`] rounds:
/// every worker has at least two rows.
pub(crate) fn amp_chains(rows: u32) -> bool {
    rows >= 2 * WORKERS
}

/// The rows of every worker of a chain round over `rows` rows when all six have the same
/// (the kernel's loop count is then immediate: `Kernel::AmpChain::rows`), else 0.
pub(crate) fn amp_chain_same_rows(rows: u32) -> u16 {
    if rows.is_multiple_of(WORKERS) {
        u16::try_from(rows / WORKERS).unwrap_or(0)
    } else {
        0
    }
}

/// Worker issue slots of a round in the middle of a chain over `rows` rows (partials in, the
/// round before's row carried, no drain): what every round of a chain is costed at.
pub(crate) fn amp_chain_middle_slots(rows: u32) -> u32 {
    let same = amp_chain_same_rows(rows) != 0;
    kernels::amp_chain_slots(rows.div_ceil(WORKERS), true, true, false, same, false)
}

/// Worker issue slots that a chain over `rows` rows spends at its ends beyond
/// [`amp_chain_middle_slots`] of each of its rounds: its first round (a first pass) finds its
/// entry, sets the zero partials-in and stores no carry, and its last drains (0 when the
/// rounds do not chain).
pub(crate) fn amp_chain_ends_slots(rows: u32) -> i64 {
    if !amp_chains(rows) {
        return 0;
    }
    let (per, same) = (rows.div_ceil(WORKERS), amp_chain_same_rows(rows) != 0);
    let ends = kernels::amp_chain_slots(per, false, false, false, same, false)
        + kernels::amp_chain_slots(per, true, true, true, same, false);
    ends as i64 - 2 * amp_chain_middle_slots(rows) as i64
}

/// Worker issue slots a first pass inside a chain over `rows` rows (no partials-in, the zeros
/// already set) spends beyond [`amp_chain_middle_slots`] (negative: it loads no partials
/// pointer; 0 when the rounds do not chain).
pub(crate) fn amp_chain_first_pass_slots(rows: u32) -> i64 {
    if !amp_chains(rows) {
        return 0;
    }
    let same = amp_chain_same_rows(rows) != 0;
    kernels::amp_chain_slots(rows.div_ceil(WORKERS), false, true, false, same, true) as i64
        - amp_chain_middle_slots(rows) as i64
}

/// Round `n` of a chain of AMP rounds over the same `rows` rows (see [`amp_launch`] for the
/// operands; input and output rows of [`AMP_CHAIN_ROW_BYTES`]): the first stores nothing of
/// the round before it, the others store the last row the one before left in the AMP (its
/// output at `prev_out`), and only the last drains its own. `zeros`: an earlier round of the
/// chain had no partials-in (so set the zeros this one's first pass adds).
pub(crate) fn amp_chain_launch(
    input: (BufferId, u32),
    partials: Option<(BufferId, u32)>,
    out: (BufferId, u32),
    rows: u32,
    (n, prev_out, zeros): (usize, Option<(BufferId, u32)>, bool),
    drain: bool,
) -> SupOp {
    debug_assert!(amp_chains(rows));
    debug_assert_eq!(n == 0, prev_out.is_none());
    let state = AmpChainState {
        input,
        partials: match partials {
            Some((buffer, offset)) => StateWord::Addr(buffer, offset),
            None => StateWord::Const(0),
        },
        out,
        row_bytes: [AMP_CHAIN_ROW_BYTES; 2],
        rows,
        carry: prev_out,
    };
    let (partials, carry) = (partials.is_some(), prev_out.is_some());
    let zeros = zeros && !partials;
    let same = amp_chain_same_rows(rows);
    let slots = kernels::amp_chain_slots(
        rows.div_ceil(WORKERS),
        partials,
        carry,
        drain,
        same != 0,
        zeros,
    );
    SupOp::RunAll(
        Kernel::AmpChain {
            partials,
            carry,
            drain,
            rows: same,
            odd: n % 2 == 1,
            zeros,
        },
        state.into(),
        slots,
    )
}

/// A `RowScalar` launch on `state`'s rows, with its cycle model.
pub(crate) fn row_scalar(
    ty: kernels::Elem,
    op: kernels::BinOp,
    reversed: bool,
    state: RowScalarState,
) -> SupOp {
    let slots = kernels::rows::row_scalar_slots(
        ty,
        op,
        reversed,
        state.rows,
        state.columns,
        state.stride / 4,
    );
    SupOp::Run(Kernel::RowScalar { ty, op, reversed }, state.into(), slots)
}

/// The direction of a [`Copy2d::regroup`].
pub(crate) enum Regroup {
    /// From `[group][row][segment]` to whole rows.
    ToRows,
    /// From whole rows to `[group][row][segment]`.
    ToGroups,
}

/// One strided copy (`Kernel::Copy2d`): `rows` rows of `segs` segments of `seg_bytes` bytes,
/// segment `j` of row `i` from `src + i src_row + j src_seg` to `dst + i dst_row + j dst_seg`
/// (byte strides), its rows split over `parts` workers. 64-bit words when the segments allow.
pub(crate) struct Copy2d {
    pub(crate) src: (BufferId, u32),
    pub(crate) dst: (BufferId, u32),
    pub(crate) rows: u32,
    pub(crate) segs: u32,
    pub(crate) seg_bytes: u32,
    pub(crate) src_strides: (u32, u32),
    pub(crate) dst_strides: (u32, u32),
}

impl Copy2d {
    /// The copy between rows of `row_bytes`, each `groups` segments, and the grouped form
    /// `[group][row][segment]`, in the direction `to`.
    pub(crate) fn regroup(
        to: Regroup,
        src: (BufferId, u32),
        dst: (BufferId, u32),
        (rows, row_bytes): (u32, u32),
        groups: u32,
        seg_bytes: u32,
    ) -> Copy2d {
        let in_rows = (row_bytes, seg_bytes);
        let grouped = (seg_bytes, rows * seg_bytes);
        let (src_strides, dst_strides) = match to {
            Regroup::ToRows => (grouped, in_rows),
            Regroup::ToGroups => (in_rows, grouped),
        };
        Copy2d {
            src,
            dst,
            rows,
            segs: groups,
            seg_bytes,
            src_strides,
            dst_strides,
        }
    }

    pub(crate) fn push(&self, parts: u32, ops: &mut Vec<SupOp>) {
        let wide = self.seg_bytes.is_multiple_of(8);
        let words = self.seg_bytes / if wide { 8 } else { 4 };
        let (sr, ss) = self.src_strides;
        let (dr, ds) = self.dst_strides;
        for (k0, k1) in split(self.rows, parts) {
            if k1 <= k0 {
                continue;
            }
            ops.push(SupOp::Run(
                Kernel::Copy2d { wide },
                Copy2dState {
                    src: (self.src.0, self.src.1 + k0 * sr),
                    dst: (self.dst.0, self.dst.1 + k0 * dr),
                    rows: k1 - k0,
                    segments: self.segs,
                    words,
                    src_row_stride: sr,
                    src_segment_stride: ss,
                    dst_row_stride: dr,
                    dst_segment_stride: ds,
                }
                .into(),
                ipu_kernels::rows::copy2d_slots(k1 - k0, self.segs, words),
            ));
        }
    }
}

/// Splits `n` units into `parts` contiguous ranges (some empty).
pub(crate) fn split(n: u32, parts: u32) -> impl Iterator<Item = (u32, u32)> {
    (0..parts).map(move |i| (n * i / parts, n * (i + 1) / parts))
}

/// Lowers `plan` to a tile program.
pub fn lower(plan: &OperatorPlan) -> Result<Lowered, CodegenError> {
    lower_repeated(plan, None)
}

/// Lowers `plan` to a tile program, running the block of `repeat` once per layer
/// ([`crate::repeat`]).
pub fn lower_repeated(
    plan: &OperatorPlan,
    repeat: Option<&crate::operator_plan::DevRepeat>,
) -> Result<Lowered, CodegenError> {
    let mut l = Lowerer {
        plan,
        prog: TileProgram {
            tiles_used: plan.tiles_used,
            ..Default::default()
        },
        value_buffers: HashMap::new(),
        tile_elements: HashMap::new(),
        clears_removed: 0,
        clears: 0,
        next_group: 0,
    };
    let mut tensors = Vec::new();
    // Host pages: inputs in page 0, outputs in page 1, constants in page 2, each tensor
    // 8-byte aligned. `place` gives a tensor's offset in its page and its host copies (to the
    // host for outputs).
    let mut page_bytes = [0u64; 3];
    let mut place = |l: &mut Lowerer,
                     v: DevValueId,
                     role: TensorRole,
                     tensors: &mut Vec<_>,
                     name: Option<&str>| {
        let val = &plan.values[v];
        let page = ipu_package::page_of(role) as u16;
        let bytes = (storage_elements(&val.shape, val.layout.group) * val.dtype.bytes()) as u64;
        let offset = page_bytes[page as usize];
        page_bytes[page as usize] = align8(offset + bytes);
        tensors.push(HostTensor {
            name: name.unwrap_or(&val.name).to_string(),
            role,
            dtype: dtype_name(val.dtype).to_string(),
            scale: val.dtype.scale().unwrap_or(0),
            shape: val.shape.clone(),
            group: val.layout.group,
            page: page as u32,
            offset,
            bytes,
        });
        let to_host = role == TensorRole::Output;
        let copies: Vec<(HostCopy, bool)> = l
            .host_copies(v, offset, page)
            .into_iter()
            .map(|c| (c, to_host))
            .collect();
        (offset, copies)
    };
    // `initialize`: the constants, once, into buffers that stay for every call.
    let mut constants_page = Vec::new();
    // A repeated block's frames: each layer's data in buffers of its own (`crate::repeat`).
    let mut shadows: Shadows = Vec::new();
    if !plan.constants.is_empty() {
        let mut copies = Vec::new();
        let mut placed = Vec::new();
        for (v, data) in &plan.constants {
            if repeat.is_some_and(|r| r.is_frame(*v)) {
                continue;
            }
            l.prog.origin = plan.values[*v].origin.clone();
            let (base, host) = place(&mut l, *v, TensorRole::Constant, &mut tensors, None);
            placed.push((*v, base, data));
            copies.extend(host);
        }
        for f in repeat.map(|r| &r.frames[..]).unwrap_or_default() {
            l.prog.origin = plan.values[f.value].origin.clone();
            let mut layers = Vec::new();
            for (name, data) in f.names.iter().zip(&f.data) {
                let role = TensorRole::Constant;
                let (base, host) = place(&mut l, f.value, role, &mut tensors, Some(name));
                placed.push((f.value, base, data));
                let mut own: BTreeMap<u32, BufferId> = BTreeMap::new();
                for (mut c, to_host) in host {
                    let frame = &l.prog.buffers[c.buffer.0 as usize];
                    let tile = frame.tile;
                    let (bytes, region) = (frame.bytes, frame.region);
                    c.buffer = *own
                        .entry(tile)
                        .or_insert_with(|| l.prog.buffer(tile, bytes, region, format!("%{name}")));
                    copies.push((c, to_host));
                }
                layers.push(own);
            }
            shadows.push(layers);
        }
        let page_size = tensors
            .iter()
            .filter(|t| t.role == TensorRole::Constant)
            .map(|t| align8(t.offset + t.bytes))
            .max()
            .unwrap_or(0);
        constants_page = vec![0u8; page_size as usize];
        for (v, base, data) in placed {
            let val = &plan.values[v];
            let eb = val.dtype.bytes();
            for (i, e) in data.chunks_exact(eb).enumerate() {
                let at = base as usize + storage_index(&val.shape, val.layout.group, i) * eb;
                constants_page[at..at + eb].copy_from_slice(e);
            }
        }
        for (c, _) in &copies {
            l.prog.buffers[c.buffer.0 as usize].resident = true;
        }
        l.prog.steps.push(Step::Host {
            name: "constants".into(),
            copies,
        });
        l.prog.init_steps = 1;
    }
    // The host step moving the tensors of `values` in `role`; outputs under the user's
    // graph's names (the last layer's result of a repeated block is the block's value).
    let names = repeat.map(|r| &r.outputs);
    let mut host_step = |l: &mut Lowerer, name: &str, values: &[DevValueId], role: TensorRole| {
        let mut copies = Vec::new();
        for (i, &v) in values.iter().enumerate() {
            let named = names
                .filter(|_| role == TensorRole::Output)
                .and_then(|n| n.get(i))
                .map(String::as_str);
            copies.extend(place(l, v, role, &mut tensors, named).1);
        }
        let name = name.into();
        l.prog.steps.push(Step::Host { name, copies });
    };
    host_step(&mut l, "inputs", &plan.inputs, TensorRole::Input);
    let mut i = 0;
    while i < plan.ops.len() {
        if let Some(r) = repeat.filter(|r| r.ops.start == i) {
            l.lower_repeat(r, &shadows)?;
            i = r.ops.end;
            continue;
        }
        l.prog.origin = plan.ops[i].origin.clone();
        plan.ops[i].kind.lower(&mut l, i)?;
        i += 1;
    }
    l.prog.origin = "host exchange".into();
    host_step(&mut l, "outputs", &plan.outputs, TensorRole::Output);
    // The constants page exists only with constants: other packages keep two pages.
    let pages = if plan.constants.is_empty() { 2 } else { 3 };
    l.prog.pages = page_bytes[..pages].to_vec();
    l.prog.compute_liveness();
    l.prog.check().map_err(CodegenError::internal)?;
    Ok(Lowered {
        program: l.prog,
        tensors,
        padding_clears_removed: l.clears_removed,
        padding_clears: l.clears,
        constants_page,
    })
}

impl Lowerer<'_> {
    pub(crate) fn eb(&self, v: DevValueId) -> u32 {
        self.plan.values[v].dtype.bytes() as u32
    }

    /// Lowers device operation `index` by `lower`, which gives the copies of its exchange step
    /// and every tile's work in its compute step ([`OpSteps`]), and pushes those steps: the
    /// exchange step when it moves anything, then the compute step, each tile's work ending
    /// in a `waitw`.
    pub(crate) fn lower_steps(
        &mut self,
        index: usize,
        lower: impl FnOnce(&mut Self, &mut OpSteps) -> Result<(), CodegenError>,
    ) -> Result<(), CodegenError> {
        let mut steps = OpSteps::default();
        lower(self, &mut steps)?;
        let OpSteps {
            mut tiles,
            copies,
            first_copies,
        } = steps;
        let name = self.plan.ops[index].name.clone();
        if !first_copies.is_empty() {
            self.prog.steps.push(Step::Exchange {
                name: format!("{name}.spread"),
                copies: first_copies,
            });
        }
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
            tiles: tiles.into(),
            estimated_cycles,
        });
        Ok(())
    }

    /// The buffer holding `v`'s pieces on `tile`.
    /// A scratch buffer on `tile` in any region: `bytes` rounded up to 8, and the slack the
    /// kernels may read past its end.
    pub(crate) fn scratch_buffer(&mut self, tile: u32, bytes: u32, name: String) -> BufferId {
        let bytes = align8(bytes as u64) as u32 + OVERREAD_BYTES;
        self.prog.buffer(tile, bytes, Region::Any, name)
    }

    pub(crate) fn value_buffer(&mut self, v: DevValueId, tile: u32) -> BufferId {
        if let Some(b) = self.value_buffers.get(&(v, tile)) {
            return *b;
        }
        let val = &self.plan.values[v];
        let on_tile = *self
            .tile_elements
            .entry(v)
            .or_insert_with(|| val.layout.elements_per_tile())
            .get(&tile)
            .unwrap_or(&0);
        let bytes = align8((on_tile * val.dtype.bytes()) as u64) as u32 + OVERREAD_BYTES;
        let b = self
            .prog
            .buffer(tile, bytes, Region::Any, format!("%{}", val.name));
        // A value's buffer serves the operation that made it, whoever first asks for it.
        self.prog.buffers[b.0 as usize].op = val.origin.clone();
        self.value_buffers.insert((v, tile), b);
        b
    }

    pub(crate) fn host_copies(&mut self, v: DevValueId, base: u64, page: u16) -> Vec<HostCopy> {
        let eb = self.eb(v);
        let pieces = self.plan.values[v].layout.pieces.clone();
        pieces
            .iter()
            .map(|p| HostCopy {
                page,
                page_offset: (base + (p.start as u64) * eb as u64) as u32,
                buffer: self.value_buffer(v, p.tile),
                offset: p.local as u32 * eb,
                bytes: (p.end - p.start) as u32 * eb,
            })
            .collect()
    }

    /// Copies filling `dst` (a staging buffer of `v` in group `group` on `tile`) with the
    /// storage ranges `want` (`(start, end, dst element)`).
    pub(crate) fn gather(
        &mut self,
        v: DevValueId,
        tile: u32,
        group: usize,
        want: &[(usize, usize, usize)],
        dst: BufferId,
    ) -> Vec<Copy> {
        let eb = self.eb(v);
        let val = &self.plan.values[v];
        let mv: Vec<Move> = moves(&val.shape, &val.layout, group, want);
        let _ = tile;
        mv.into_iter()
            .map(|m| Copy {
                src: self.value_buffer(v, m.src_tile),
                src_offset: m.src_local as u32 * eb,
                dst,
                dst_offset: m.dst_local as u32 * eb,
                bytes: m.elements as u32 * eb,
            })
            .collect()
    }

    /// Zero-fill vertices for the parts of `buffer` (first `bytes` bytes) no copy writes.
    pub(crate) fn zero_gaps(
        &self,
        buffer: BufferId,
        bytes: u32,
        copies: &[Copy],
        ops: &mut Vec<SupOp>,
    ) {
        let mut covered: Vec<(usize, usize)> = copies
            .iter()
            .filter(|c| c.dst == buffer)
            .map(|c| (c.dst_offset as usize, (c.dst_offset + c.bytes) as usize))
            .collect();
        let gaps = uncovered(bytes as usize, &mut covered);
        for (s, e) in gaps {
            let words = ((e - s) / 4) as u32;
            for (w0, w1) in split(words, WORKERS) {
                if w1 > w0 {
                    ops.push(SupOp::Run(
                        Kernel::Zero,
                        ZeroState {
                            out: (buffer, s as u32 + 4 * w0),
                            words: w1 - w0,
                        }
                        .into(),
                        kernels::zero_slots(w1 - w0),
                    ));
                }
            }
        }
    }

    /// Pad-clear vertices for the output of operation `index`, if anything reads its padding.
    pub(crate) fn pad_clears(&mut self, index: usize, tiles: &mut BTreeMap<u32, Vec<SupOp>>) {
        let out = self.plan.ops[index].output;
        let val = &self.plan.values[out];
        let (outer, rows, cols) = split_shape(&val.shape);
        let g = val.layout.group;
        let c0 = cols % g;
        if c0 == 0 {
            return;
        }
        let read_by_op = self.plan.ops.iter().any(|o| o.inputs.contains(&out));
        let eb = val.dtype.bytes() as u32;
        let groups = cols.div_ceil(g);
        let per_outer = groups * rows * g;
        let pieces = val.layout.pieces.clone();
        let mut runs: BTreeMap<u32, Vec<SupOp>> = BTreeMap::new();
        let mut count = 0;
        for o in 0..outer {
            let last_group_start = o * per_outer + (groups - 1) * rows * g;
            for r in 0..rows {
                let (s, e) = (last_group_start + r * g + c0, last_group_start + r * g + g);
                for p in pieces.iter().filter(|p| p.start < e && p.end > s) {
                    let (cs, ce) = (s.max(p.start), e.min(p.end));
                    count += 1;
                    if !read_by_op {
                        continue;
                    }
                    let buf = self.value_buffer(out, p.tile);
                    let local_s = (p.local + cs - p.start) as u32 * eb;
                    let local_e = (p.local + ce - p.start) as u32 * eb;
                    let word = local_s / 4 * 4;
                    let keep = match local_s - word {
                        0 => 0,
                        k => (1u32 << (8 * k)) - 1,
                    };
                    let full = (local_e - word) / 4 - 1;
                    runs.entry(p.tile).or_default().push(SupOp::Run(
                        Kernel::PadClear,
                        PadClearState {
                            first: (buf, word),
                            rows: 1,
                            stride: g as u32 * eb,
                            keep_mask: keep,
                            full_words: full,
                        }
                        .into(),
                        kernels::pad_clear_slots(1, full),
                    ));
                }
            }
        }
        if read_by_op {
            self.clears += count;
            for (tile, mut r) in runs {
                let ops = tiles.entry(tile).or_default();
                ops.push(SupOp::WaitW);
                // Merge consecutive single-row clears with the same shape into one vertex.
                let merged = merge_pad_clears(&mut r);
                ops.extend(merged);
            }
        } else {
            self.clears_removed += count;
        }
    }
}

/// Merges runs of single-row pad clears whose rows follow each other at the same stride.
pub(crate) fn merge_pad_clears(ops: &mut [SupOp]) -> Vec<SupOp> {
    let mut out: Vec<SupOp> = Vec::new();
    for op in ops.iter() {
        if let (
            Some(SupOp::Run(Kernel::PadClear, State::PadClear(prev), slots)),
            SupOp::Run(Kernel::PadClear, State::PadClear(cur), _),
        ) = (out.last_mut(), op)
            && cur.first == (prev.first.0, prev.first.1 + prev.rows * prev.stride)
            && cur.stride == prev.stride
            && cur.keep_mask == prev.keep_mask
            && cur.full_words == prev.full_words
        {
            prev.rows += 1;
            *slots = kernels::pad_clear_slots(prev.rows, prev.full_words);
            continue;
        }
        out.push(op.clone());
    }
    in_waves(out)
}

/// `launches` spread over the workers in waves of six, a `waitw` between waves.
pub(crate) fn in_waves(launches: Vec<SupOp>) -> Vec<SupOp> {
    let mut waved = Vec::with_capacity(launches.len() + launches.len() / WORKERS as usize);
    for (i, op) in launches.into_iter().enumerate() {
        if i > 0 && i % WORKERS as usize == 0 {
            waved.push(SupOp::WaitW);
        }
        waved.push(op);
    }
    waved
}

/// Logs what lowering made: padding clears removed, buffers, steps, exchange phases.
pub fn log_lowered(lowered: &Lowered) {
    let program = &lowered.program;
    if lowered.padding_clears_removed > 0 {
        tracing::info!(
            removed = lowered.padding_clears_removed,
            "eliminated unread padding clears"
        );
    }
    let exchange_phases = program
        .steps
        .iter()
        .filter(|s| matches!(s, Step::Exchange { .. }))
        .count();
    tracing::info!(
        buffers = program.buffers.len(),
        steps = program.steps.len(),
        exchange_phases,
        padding_clears = lowered.padding_clears,
        "lowered graph for package construction"
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn even_split_covers_the_rows_in_order_and_differs_by_at_most_one() {
        for n in 0..200 {
            let parts = split_even(n);
            assert_eq!(parts[0].0, 0);
            assert_eq!(parts[WORKERS as usize - 1].1, n);
            assert!(parts.windows(2).all(|p| p[0].1 == p[1].0));
            let sizes: Vec<u32> = parts.iter().map(|(a, b)| b - a).collect();
            let (lo, hi) = (sizes.iter().min().unwrap(), sizes.iter().max().unwrap());
            assert!(hi - lo <= 1, "{n}: {sizes:?}");
        }
    }
}
