//! Lowering: from the operator plan to the bulk-synchronous tile program. Every value gets a
//! buffer on each tile holding pieces of it; operands another layout holds are gathered into
//! staging buffers by an exchange phase; each operation becomes a compute step of vertices.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use ipu_graph::DType;
use ipu_package::{HostTensor, TensorRole, split_shape, storage_elements};
use ipu_target::{AMP_WEIGHT_LOAD_BYTES_PER_CYCLE, AmpMode};

use crate::CodegenError;
use crate::layout::{Move, moves, uncovered};
use crate::plan::{DevOpKind, DevValueId, OperatorPlan, amp_geometry, cast_type, elem};
use crate::program::*;
use ipu_kernels::state::*;
use ipu_kernels::{self as kernels, BinOp, Kernel, OVERREAD_BYTES, UnOp};

/// Worker contexts a compute step spreads a tile's work over.
pub(crate) const WORKERS: u32 = ipu_target::WORKER_CONTEXTS;

/// Host page holding the inputs.
pub const INPUT_PAGE: u16 = 0;
/// Host page holding the outputs.
pub const OUTPUT_PAGE: u16 = 1;

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

pub(crate) fn align8(n: u64) -> u64 {
    n.div_ceil(8) * 8
}

/// The name of a dtype in the package manifest.
pub fn dtype_name(d: DType) -> &'static str {
    match d {
        DType::F32 => "f32",
        DType::F16 => "f16",
        DType::F143 { .. } => "f143",
        DType::F152 { .. } => "f152",
    }
}

/// Supervisor slots between two worker launches of an AMP round (`setzi` of the state, `run`).
pub(crate) const LAUNCH_SLOTS: u32 = 2;
/// Worker slots per AMP row (four phases).
pub(crate) const AMP_ROW_SLOTS: u32 = 4;

/// Splits `n` AMP rows over the workers so that they finish together: worker `w` starts
/// `LAUNCH_SLOTS` later than worker `w - 1`, so earlier workers take more rows. Each row goes
/// to the worker that would finish it first (ties to the lower worker); contiguous ranges in
/// worker order.
pub(crate) fn split_staggered(n: u32) -> Vec<(u32, u32)> {
    let mut rows = vec![0u32; WORKERS as usize];
    for _ in 0..n {
        let w = (0..WORKERS as usize)
            .min_by_key(|&w| {
                (
                    LAUNCH_SLOTS * (w as u32 + 1) + AMP_ROW_SLOTS * (rows[w] + 1),
                    w,
                )
            })
            .expect("workers");
        rows[w] += 1;
    }
    let mut at = 0;
    rows.iter()
        .map(|&r| {
            at += r;
            (at - r, at)
        })
        .collect()
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
    // Host pages: inputs in page 0, outputs in page 1, each tensor 8-byte aligned.
    let mut page_bytes = [0u64; 2];
    let mut place = |v: DevValueId, role: TensorRole, tensors: &mut Vec<HostTensor>| {
        let val = &plan.values[v];
        let page = if role == TensorRole::Input {
            INPUT_PAGE
        } else {
            OUTPUT_PAGE
        };
        let bytes = (storage_elements(&val.shape, val.layout.group) * val.dtype.bytes()) as u64;
        let offset = page_bytes[page as usize];
        page_bytes[page as usize] = align8(offset + bytes);
        tensors.push(HostTensor {
            name: val.name.clone(),
            role,
            dtype: dtype_name(val.dtype).to_string(),
            scale: val.dtype.scale().unwrap_or(0),
            shape: val.shape.clone(),
            group: val.layout.group,
            page: page as u32,
            offset,
            bytes,
        });
        offset
    };
    let mut host_in = Vec::new();
    for &v in &plan.inputs {
        let base = place(v, TensorRole::Input, &mut tensors);
        host_in.extend(
            l.host_copies(v, base, INPUT_PAGE)
                .into_iter()
                .map(|c| (c, false)),
        );
    }
    l.prog.steps.push(Step::Host {
        name: "inputs".into(),
        copies: host_in,
    });
    for (i, op) in plan.ops.iter().enumerate() {
        l.prog.origin = op.origin.clone();
        l.lower_op(i)?;
    }
    l.prog.origin = "host exchange".into();
    let mut host_out = Vec::new();
    for &v in &plan.outputs {
        let base = place(v, TensorRole::Output, &mut tensors);
        host_out.extend(
            l.host_copies(v, base, OUTPUT_PAGE)
                .into_iter()
                .map(|c| (c, true)),
        );
    }
    l.prog.steps.push(Step::Host {
        name: "outputs".into(),
        copies: host_out,
    });
    l.prog.pages = page_bytes.to_vec();
    l.prog.compute_liveness();
    l.prog.check().map_err(CodegenError::internal)?;
    Ok(Lowered {
        program: l.prog,
        tensors,
        padding_clears_removed: l.clears_removed,
        padding_clears: l.clears,
    })
}

impl Lowerer<'_> {
    pub(crate) fn eb(&self, v: DevValueId) -> u32 {
        self.plan.values[v].dtype.bytes() as u32
    }

    /// The buffer holding `v`'s pieces on `tile`.
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

    pub(crate) fn lower_op(&mut self, index: usize) -> Result<(), CodegenError> {
        let op = &self.plan.ops[index];
        if matches!(op.kind, DevOpKind::Flash(_)) {
            return self.lower_flash(index);
        }
        let out = op.output;
        let out_layout = self.plan.values[out].layout.clone();
        let per_tile = out_layout.elements_per_tile();
        let mut tiles: BTreeMap<u32, Vec<SupOp>> = BTreeMap::new();
        let mut copies: Vec<Copy> = Vec::new();
        match &op.kind {
            DevOpKind::MatMul {
                mode,
                blocks,
                k_chunks,
                ..
            } => {
                self.lower_matmul(index, *mode, blocks, *k_chunks, &mut tiles, &mut copies)?;
            }
            DevOpKind::Rows(rop) => {
                self.lower_rows(index, rop, &mut tiles, &mut copies)?;
            }
            DevOpKind::Binary(bop) => {
                let (x, y) = (op.inputs[0], op.inputs[1]);
                let ty = elem(self.plan.values[x].dtype).expect("planned on f32/f16");
                let eb = self.eb(x);
                let same = self.plan.values[y].layout == out_layout;
                for tile in out_layout.tiles() {
                    let n = per_tile[&tile];
                    let xb = self.value_buffer(x, tile);
                    let ob = self.value_buffer(out, tile);
                    let yb = if same {
                        self.value_buffer(y, tile)
                    } else {
                        let bytes = align8((n * eb as usize) as u64) as u32 + OVERREAD_BYTES;
                        let st = self.prog.buffer(
                            tile,
                            bytes,
                            Region::Any,
                            format!("stage:{}.b", op.name),
                        );
                        let want: Vec<(usize, usize, usize)> = out_layout
                            .pieces
                            .iter()
                            .filter(|p| p.tile == tile)
                            .map(|p| (p.start, p.end, p.local))
                            .collect();
                        let c = self.gather(y, tile, out_layout.group, &want, st);
                        copies.extend(c);
                        st
                    };
                    let vectors = (n as u32 * eb) / 8;
                    let ops = tiles.entry(tile).or_default();
                    for (v0, v1) in split(vectors, WORKERS) {
                        if v1 > v0 {
                            ops.push(SupOp::Run(
                                Kernel::Binary { ty, op: *bop },
                                BinaryState {
                                    a: (xb, v0 * 8),
                                    b: (yb, v0 * 8),
                                    out: (ob, v0 * 8),
                                    vectors: v1 - v0,
                                }
                                .into(),
                                kernels::binary_slots(ty, *bop, v1 - v0),
                            ));
                        }
                    }
                }
                if *bop == BinOp::Div {
                    self.pad_clears(index, &mut tiles);
                }
            }
            DevOpKind::Unary(uop, factor) => {
                let x = op.inputs[0];
                let ty = elem(self.plan.values[x].dtype).expect("planned on f32/f16");
                let eb = self.eb(x);
                for tile in out_layout.tiles() {
                    let n = per_tile[&tile] as u32;
                    let xb = self.value_buffer(x, tile);
                    let ob = self.value_buffer(out, tile);
                    let ops = tiles.entry(tile).or_default();
                    for (v0, v1) in split(n * eb / 8, WORKERS) {
                        if v1 > v0 {
                            ops.push(SupOp::Run(
                                Kernel::Unary { ty, op: *uop },
                                UnaryState {
                                    input: (xb, v0 * 8),
                                    out: (ob, v0 * 8),
                                    vectors: v1 - v0,
                                    factor_bits: factor.to_bits(),
                                }
                                .into(),
                                kernels::unary_slots(ty, *uop, v1 - v0),
                            ));
                        }
                    }
                }
                if *uop == UnOp::Exp {
                    self.pad_clears(index, &mut tiles);
                }
            }
            DevOpKind::CausalMask { key_start } => {
                self.lower_causal_mask(index, *key_start, &mut tiles)?;
            }
            DevOpKind::Flash(_) => unreachable!("lowered above"),
            DevOpKind::Cast => {
                let x = op.inputs[0];
                let (from, to) = (
                    cast_type(self.plan.values[x].dtype),
                    cast_type(self.plan.values[out].dtype),
                );
                for tile in out_layout.tiles() {
                    let n = per_tile[&tile] as u32;
                    let xb = self.value_buffer(x, tile);
                    let ob = self.value_buffer(out, tile);
                    let ops = tiles.entry(tile).or_default();
                    for (g0, g1) in split(n / 4, WORKERS) {
                        if g1 > g0 {
                            ops.push(SupOp::Run(
                                Kernel::Cast { from, to },
                                CastState {
                                    input: (xb, g0 * 4 * from.bytes()),
                                    out: (ob, g0 * 4 * to.bytes()),
                                    groups: g1 - g0,
                                }
                                .into(),
                                kernels::cast_slots(from, to, g1 - g0),
                            ));
                        }
                    }
                }
            }
        }
        let name = op.name.clone();
        if !copies.is_empty() {
            self.prog.steps.push(Step::Exchange {
                name: name.clone(),
                copies,
            });
        }
        for ops in tiles.values_mut() {
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

    #[allow(clippy::too_many_arguments)]
    pub(crate) fn lower_matmul(
        &mut self,
        index: usize,
        mode: AmpMode,
        blocks: &[crate::plan::Block],
        k_chunks: usize,
        tiles: &mut BTreeMap<u32, Vec<SupOp>>,
        copies: &mut Vec<Copy>,
    ) -> Result<(), CodegenError> {
        let op = &self.plan.ops[index];
        let name = op.name.clone();
        let (a, b, c) = (op.inputs[0], op.inputs[1], op.output);
        let geo = amp_geometry(mode);
        let (kblk, cols) = (geo.k_block, geo.cols);
        let (a_batch, m, k) = split_shape(&self.plan.values[a].shape);
        let (b_batch, _, n) = split_shape(&self.plan.values[b].shape);
        let groups = n.div_ceil(cols);
        let kb = k.div_ceil(kblk);
        let c_layout = self.plan.values[c].layout.clone();
        let row_bytes = (kblk * geo.in_bytes) as u32; // 32 for every mode
        let out_row_bytes = (cols * geo.out_bytes) as u32; // 32 for every mode
        let weight_bytes = (kblk * cols * geo.in_bytes) as u32;
        // Per block: its output buffer, the ping-pong partner (both live across the chunks)
        // and the output offset of each of its column groups.
        let mut outputs = Vec::with_capacity(blocks.len());
        for bl in blocks {
            let c_buf = self.value_buffer(c, bl.tile);
            let c_bytes = self.prog.buffers[c_buf.0 as usize].bytes;
            let t_buf = self
                .prog
                .buffer(bl.tile, c_bytes, Region::Any, format!("pingpong:{name}"));
            let mut offsets = Vec::new();
            for g in bl.g0..bl.g1 {
                let start = bl.batch * groups * m * cols + (g * m + bl.m0) * cols;
                let piece = c_layout
                    .pieces
                    .iter()
                    .find(|p| p.start == start && p.tile == bl.tile)
                    .ok_or_else(|| {
                        CodegenError::internal(format!("{name}: no output piece at {start}"))
                    })?;
                offsets.push(piece.local as u32 * geo.out_bytes as u32);
            }
            outputs.push((c_buf, t_buf, offsets));
        }
        let chunks = k_chunks.clamp(1, kb);
        for chunk in 0..chunks {
            let (kb0, kb1) = (kb * chunk / chunks, kb * (chunk + 1) / chunks);
            let kc = kb1 - kb0;
            let kcp = kc * kblk;
            let (k_lo, k_hi) = (kb0 * kblk, (kb1 * kblk).min(k));
            let mut step_copies: Vec<Copy> = Vec::new();
            let mut step_tiles: BTreeMap<u32, Vec<SupOp>> = BTreeMap::new();
            let mut weight_groups: BTreeMap<(usize, usize, usize), (u32, BTreeSet<u32>)> =
                BTreeMap::new();
            for (bl, (c_buf, t_buf, offsets)) in blocks.iter().zip(&outputs) {
                let (c_buf, t_buf) = (*c_buf, *t_buf);
                let bm = bl.m1 - bl.m0;
                let bg = bl.g1 - bl.g0;
                // A staging: [kc][bm][kblk].
                let a_bytes = (kc * bm) as u32 * row_bytes;
                let a_st = self.prog.buffer(
                    bl.tile,
                    a_bytes + OVERREAD_BYTES,
                    Region::Any,
                    format!("stage:{name}.a"),
                );
                let a_base = if a_batch == 1 {
                    0
                } else {
                    bl.batch * kb * m * kblk
                };
                let want: Vec<_> = (kb0..kb1)
                    .map(|g| {
                        let s = a_base + (g * m + bl.m0) * kblk;
                        (s, s + bm * kblk, (g - kb0) * bm * kblk)
                    })
                    .collect();
                let mut cp = self.gather(a, bl.tile, kblk, &want, a_st);
                // B staging (weights): [bg][kcp][cols], in interleaved memory.
                let b_bytes = (bg * kcp * cols) as u32 * geo.in_bytes as u32;
                let b_st = self.prog.buffer(
                    bl.tile,
                    b_bytes,
                    Region::Interleaved,
                    format!("stage:{name}.w"),
                );
                // Blocks with the same weights hold them at the same address (a placement
                // group), so the exchange can multicast them.
                let key = (if b_batch == 1 { 0 } else { bl.batch }, bl.g0, bl.g1);
                let entry = weight_groups
                    .entry(key)
                    .or_insert((u32::MAX, BTreeSet::new()));
                if entry.0 == u32::MAX || !entry.1.insert(bl.tile) {
                    // A new group: the first of its kind, or a second block of it on one tile.
                    *entry = (self.next_group, BTreeSet::from([bl.tile]));
                    self.next_group += 1;
                }
                self.prog.buffers[b_st.0 as usize].group = Some(entry.0);
                let b_base = if b_batch == 1 {
                    0
                } else {
                    bl.batch * groups * k * cols
                };
                let want: Vec<_> = (bl.g0..bl.g1)
                    .map(|g| {
                        let s = b_base + g * k * cols + k_lo * cols;
                        (s, s + (k_hi - k_lo) * cols, (g - bl.g0) * kcp * cols)
                    })
                    .collect();
                cp.extend(self.gather(b, bl.tile, cols, &want, b_st));
                let mut ops = Vec::new();
                self.zero_gaps(a_st, a_bytes, &cp, &mut ops);
                self.zero_gaps(b_st, b_bytes, &cp, &mut ops);
                if !ops.is_empty() {
                    ops.push(SupOp::WaitW);
                }
                step_copies.extend(cp);
                for (gi, g) in (bl.g0..bl.g1).enumerate() {
                    let c_off = offsets[gi];
                    for kk in kb0..kb1 {
                        let w_off = ((g - bl.g0) * kcp + (kk - kb0) * kblk) as u32
                            * (cols * geo.in_bytes) as u32;
                        debug_assert_eq!(w_off % weight_bytes, 0);
                        ops.push(SupOp::AmpW(b_st, w_off));
                        // The last round writes the output buffer; rounds alternate before it.
                        let (dst, src) = if (kb - 1 - kk) % 2 == 0 {
                            (c_buf, t_buf)
                        } else {
                            (t_buf, c_buf)
                        };
                        for (r0, r1) in split_staggered(bm as u32) {
                            if r1 > r0 {
                                ops.push(SupOp::Run(
                                    Kernel::Amp { partials: kk > 0 },
                                    AmpState {
                                        input: (
                                            a_st,
                                            ((kk - kb0) * bm) as u32 * row_bytes + r0 * row_bytes,
                                        ),
                                        partials: if kk > 0 {
                                            StateWord::Addr(src, c_off + r0 * out_row_bytes)
                                        } else {
                                            StateWord::Const(0)
                                        },
                                        out: (dst, c_off + r0 * out_row_bytes),
                                        rows: r1 - r0,
                                    }
                                    .into(),
                                    kernels::amp_slots(r1 - r0, kk > 0),
                                ));
                            }
                        }
                        ops.push(SupOp::WaitW);
                    }
                }
                let t = step_tiles.entry(bl.tile).or_default();
                if t.is_empty() {
                    t.push(SupOp::AmpCfg(mode));
                }
                t.extend(ops);
            }
            if chunk + 1 == chunks {
                copies.extend(step_copies);
                for (tile, ops) in step_tiles {
                    tiles.entry(tile).or_default().extend(ops);
                }
            } else {
                // An earlier chunk: its own exchange and compute steps.
                let step_name = format!("{name}.k{chunk}");
                self.prog.steps.push(Step::Exchange {
                    name: step_name.clone(),
                    copies: step_copies,
                });
                for ops in step_tiles.values_mut() {
                    ops.push(SupOp::WaitW);
                }
                let estimated_cycles = step_tiles.values().map(|o| estimate(o)).max().unwrap_or(0);
                self.prog.steps.push(Step::Compute {
                    name: step_name,
                    tiles: step_tiles,
                    estimated_cycles,
                });
            }
        }
        Ok(())
    }

    /// Masked copies: every piece of the output is cut at column-group boundaries into runs of
    /// whole rows, each split over the workers; a row a piece cuts is masked as a fragment.
    pub(crate) fn lower_causal_mask(
        &mut self,
        index: usize,
        key_start: usize,
        tiles: &mut BTreeMap<u32, Vec<SupOp>>,
    ) -> Result<(), CodegenError> {
        let op = &self.plan.ops[index];
        let (x, out) = (op.inputs[0], op.output);
        let val = &self.plan.values[out];
        let (_, rows, cols) = split_shape(&val.shape);
        let g = val.layout.group;
        let groups = cols.div_ceil(g);
        let per_outer = groups * rows * g;
        let pieces = val.layout.pieces.clone();
        for p in pieces {
            let (xb, ob) = (self.value_buffer(x, p.tile), self.value_buffer(out, p.tile));
            let mut at = p.start;
            while at < p.end {
                let rem = at % per_outer;
                let (grp, in_grp) = (rem / (rows * g), rem % (rows * g));
                let (r0, cc) = (in_grp / g, in_grp % g);
                let group_end = p.end.min(at - in_grp + rows * g);
                let valid_row = g.min(cols - grp * g);
                let local = (p.local + at - p.start) as u32 * 4;
                // First masked column of row i in this group: i + 1 - key_start - grp * g.
                let first = |i: usize, from: usize| {
                    (i as i64 + 1 - key_start as i64 - (grp * g) as i64 - from as i64)
                        .clamp(i32::MIN as i64, i32::MAX as i64) as i32 as u32
                };
                let push = |tiles: &mut BTreeMap<u32, Vec<SupOp>>,
                            off: u32,
                            n: u32,
                            start: u32,
                            valid: u32,
                            stride: u32| {
                    let state = MaskRowsState {
                        src: (xb, off),
                        dst: (ob, off),
                        rows: n,
                        start,
                        valid,
                        stride,
                        fill_bits: f32::NEG_INFINITY.to_bits(),
                        start_step: 1,
                    };
                    let slots = kernels::mask_rows_slots(false, &state);
                    tiles.entry(p.tile).or_default().push(SupOp::Run(
                        Kernel::MaskRows,
                        state.into(),
                        slots,
                    ));
                };
                if cc != 0 || group_end - at < g {
                    // A piece cuts this row: mask its fragment as a one-row vertex.
                    let end = group_end.min(at - cc + g);
                    let len = end - at;
                    let valid = valid_row.saturating_sub(cc).min(len) as u32;
                    push(tiles, local, 1, first(r0, cc), valid, len as u32);
                    at = end;
                    continue;
                }
                let n = ((group_end - at) / g) as u32;
                for (w0, w1) in split(n, WORKERS) {
                    if w1 > w0 {
                        let off = local + w0 * g as u32 * 4;
                        push(
                            tiles,
                            off,
                            w1 - w0,
                            first(r0 + w0 as usize, 0),
                            valid_row as u32,
                            g as u32,
                        );
                    }
                }
                let seg_end = at + n as usize * g;
                at = seg_end;
            }
        }
        Ok(())
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
    // Spread the merged vertices over the workers in waves of six.
    let mut waved = Vec::new();
    for (i, op) in out.into_iter().enumerate() {
        if i > 0 && i % WORKERS as usize == 0 {
            waved.push(SupOp::WaitW);
        }
        waved.push(op);
    }
    waved
}

/// The cycle estimate of one tile's supervisor work: per wave (between `waitw`s) the slowest
/// worker, plus one barrel slot per supervisor instruction. A launch takes the worker context
/// that frees first; when all six are busy the supervisor waits for it, as `run` does.
pub fn estimate(ops: &[SupOp]) -> u64 {
    // A weight load before any `ampcfg` of these operations is costed at the largest block.
    const AMP_WEIGHT_BYTES_MAX: u32 = 512;
    let slot = ipu_target::BARREL_SLOT_CYCLES as u64;
    let mut total = 0u64;
    let mut sup = 0u64;
    let mut free = [0u64; WORKERS as usize];
    let mut entry = None;
    let mut amp_mode = None;
    let launch = |sup: &mut u64, free: &mut [u64; WORKERS as usize], slots: u32| {
        *sup += slot;
        let w = (0..free.len())
            .min_by_key(|&w| (free[w], w))
            .expect("workers");
        *sup = (*sup).max(free[w]);
        free[w] = *sup + slots as u64 * slot;
    };
    for op in ops {
        match op {
            SupOp::Run(k, _, slots) => {
                // `setzi` of the entry only when the kernel changes (see emit::supervisor_code).
                sup += if entry == Some(*k) { slot } else { 2 * slot };
                entry = Some(*k);
                launch(&mut sup, &mut free, *slots);
            }
            SupOp::RunAll(k, _, slots) => {
                sup += if entry == Some(*k) { slot } else { 2 * slot };
                entry = Some(*k);
                for _ in 0..WORKERS {
                    launch(&mut sup, &mut free, *slots);
                }
            }
            SupOp::WaitW => {
                sup += slot;
                total += sup.max(free.iter().copied().max().unwrap_or(0));
                sup = 0;
                free = [0; WORKERS as usize];
            }
            SupOp::AmpCfg(mode) => {
                amp_mode = Some(*mode);
                sup += slot;
            }
            // `setzi` of the address, then `ampw`: a slot and the mode's weight block at the
            // AMP's load rate.
            SupOp::AmpW(..) => {
                let bytes =
                    amp_mode.map_or(AMP_WEIGHT_BYTES_MAX, |m| m.geometry().weight_bytes()) as u64;
                sup += 2 * slot + bytes / AMP_WEIGHT_LOAD_BYTES_PER_CYCLE as u64;
            }
            _ => sup += slot,
        }
    }
    total + sup.max(free.iter().copied().max().unwrap_or(0))
}
