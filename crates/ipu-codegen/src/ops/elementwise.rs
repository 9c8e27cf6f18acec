//! Elementwise operations: binary arithmetic on operands of one shape, unary operations
//! (the graph's functions, [`ipu_graph::UnaryFn`], and scale), casts (FP8 with its scale included) and the causal mask of a block of
//! scores. Each result keeps its first operand's layout, so planning has one candidate; the
//! lowering splits each tile's vectors over the workers.

use std::collections::BTreeMap;

use ipu_graph::{DType, OpKind, Operation, Value};
use ipu_package::split_shape;
use ipu_target::{
    BARREL_SLOT_CYCLES, EXCHANGE_BYTES_PER_CYCLE, EXCHANGE_PHASE_OVERHEAD_CYCLES, WORKER_CONTEXTS,
};

use super::unsupported;
use crate::error::CodegenError;
use crate::layout::PIECE_GRAIN;
use crate::lower::*;
use crate::operator_plan::*;
use crate::plan::*;
use crate::program::*;
use ipu_kernels::state::*;
use ipu_kernels::{self as kernels, BinOp, CastType, Kernel, UnOp};

impl Planner<'_> {
    /// Binary elementwise operations; operands of other shapes broadcast as row operations.
    pub(crate) fn plan_binary(
        &mut self,
        op: &Operation,
        ins: &[DevValueId],
        out_val: &Value,
    ) -> Result<(), CodegenError> {
        let out = op.outputs[0];
        let (mut x, mut y) = (ins[0], ins[1]);
        let dtype = self.values[x].dtype;
        let bop = match op.kind {
            OpKind::Add => BinOp::Add,
            OpKind::Sub => BinOp::Sub,
            OpKind::Mul => BinOp::Mul,
            OpKind::Div => BinOp::Div,
            _ => BinOp::Max,
        };
        let same_shape =
            self.values[x].shape == out_val.ty.shape && self.values[y].shape == out_val.ty.shape;
        // A commutative operation with the row vector or scalar first (`w * x`, as exporters
        // write a norm's weight) takes its operands the other way round, so the result keeps
        // the full operand's layout as `x * w` does (the same values: IEEE addition and
        // multiplication are commutative).
        if !same_shape
            && matches!(bop, BinOp::Add | BinOp::Mul)
            && (self.row_vector_operand(y, x, &out_val.ty.shape)
                || self.scalar_operand(y, x, &out_val.ty.shape))
        {
            (x, y) = (y, x);
        }
        // A scalar first (`1 / x`, as `Reciprocal` imports) combines reversed with the full
        // operand's layout, the scalar multicast to its tiles.
        if !same_shape
            && matches!(bop, BinOp::Sub | BinOp::Div)
            && elem(dtype).is_some()
            && self.scalar_operand(y, x, &out_val.ty.shape)
        {
            let layout = self.values[y].layout.clone();
            let r = self.add_graph_value(out, out_val, out_val.ty.dtype, layout);
            self.push_simple(
                op.name.clone(),
                Elementwise::ScalarFirst(bop),
                vec![y, x],
                r,
            );
            return Ok(());
        }
        let kind = if dtype.int_format().is_some() {
            if !same_shape {
                return unsupported(
                    op,
                    "integer arithmetic on operands of different shapes (broadcasting) is not lowered",
                );
            }
            Elementwise::IntBinary(bop)
        } else if elem(dtype).is_none() {
            return unsupported(
                op,
                "elementwise arithmetic on FP8 is not lowered; cast to f16 first",
            );
        } else if !same_shape
            && !self.row_vector_operand(x, y, &out_val.ty.shape)
            && !self.scalar_operand(x, y, &out_val.ty.shape)
        {
            return self.plan_broadcast(op, bop, ins, out_val);
        } else {
            Elementwise::Binary(bop)
        };
        let layout = self.values[x].layout.clone();
        let r = self.add_graph_value(out, out_val, out_val.ty.dtype, layout);
        self.push_simple(op.name.clone(), kind, vec![x, y], r);
        Ok(())
    }

    /// Whether `y` is a row vector broadcast over the rows of `x` (shape `[1, .., 1, N]` for an
    /// `x` of the output's shape `[.., N]`, e.g. a bias): the result then keeps `x`'s layout
    /// (on however many tiles it is) and every tile gathers the part of `y` its columns read,
    /// instead of the row layout's whole rows per tile (as few tiles as rows).
    fn row_vector_operand(&self, x: DevValueId, y: DevValueId, out: &[usize]) -> bool {
        let (xs, ys) = (&self.values[x].shape, &self.values[y].shape);
        xs[..] == *out
            && ys.len() == out.len()
            && ys.last() == out.last()
            && ys[..ys.len() - 1].iter().all(|&d| d == 1)
            && out.len() >= 2
    }

    /// Whether `y` is one element broadcast over an `x` of the output's shape (a scalar
    /// constant such as GELU's `1 / sqrt(2)`): the result keeps `x`'s layout, every tile
    /// receiving the one element.
    fn scalar_operand(&self, x: DevValueId, y: DevValueId, out: &[usize]) -> bool {
        self.values[x].shape[..] == *out && self.values[y].shape.iter().product::<usize>() == 1
    }

    /// Unary operations, casts and causal masks: the result keeps the operand's layout.
    pub(crate) fn plan_unary(
        &mut self,
        op: &Operation,
        ins: &[DevValueId],
        out_val: &Value,
    ) -> Result<(), CodegenError> {
        match &op.kind {
            k if k.is_unary_arithmetic() && elem(self.values[ins[0]].dtype).is_none() => {
                return unsupported(
                    op,
                    "elementwise arithmetic on FP8 is not lowered; cast to f16 first",
                );
            }
            OpKind::Scale { factor } => self.follow(
                op,
                out_val,
                Elementwise::Unary(UnOp::Scale, *factor),
                ins[0],
                None,
            ),
            // Functions that map zero to zero keep their padding zero; the others' padding is
            // cleared when something reads it.
            OpKind::Unary(f) => self.follow(
                op,
                out_val,
                Elementwise::Unary(UnOp::Fn(*f), 1.0),
                ins[0],
                None,
            ),
            OpKind::CausalMask { key_start } => {
                if self.values[ins[0]].dtype != DType::F32 {
                    return unsupported(
                        op,
                        "a causal mask is lowered for f32 scores only (use f32 partials)",
                    );
                }
                let kind = Elementwise::CausalMask {
                    key_start: *key_start,
                };
                self.follow(op, out_val, kind, ins[0], None)
            }
            OpKind::Map(f) => {
                let mut types: Vec<kernels::ConvType> = ins
                    .iter()
                    .map(|&i| conv_type(self.values[i].dtype))
                    .collect();
                let to = conv_type(out_val.ty.dtype);
                if !kernels::map_supported(&types, to) {
                    return unsupported(
                        op,
                        "operands of two one-byte formats, or a one-byte float result: cast first",
                    );
                }
                types.resize(3, types[0]);
                let kind = Elementwise::Map {
                    f: *f,
                    ins: [types[0], types[1], types[2]],
                    to,
                };
                let layout = self.values[ins[0]].layout.clone();
                let r = self.add_graph_value(op.outputs[0], out_val, out_val.ty.dtype, layout);
                self.push_simple(op.name.clone(), kind, ins.to_vec(), r);
            }
            OpKind::Cast { to, overflow } => {
                let from = self.values[ins[0]].dtype;
                // A graph cast from f32 to FP8 rounds once, as ONNX's does; the casts the
                // planner inserts itself (`cast_to`) keep the conversion unit's path through f16.
                let kind =
                    if from == DType::F32 && to.is_fp8() && cast_on_units(from, *to, *overflow) {
                        Elementwise::CastOnce
                    } else if cast_on_units(from, *to, *overflow) {
                        Elementwise::Cast
                    } else {
                        Elementwise::Convert(*overflow)
                    };
                self.follow(op, out_val, kind, ins[0], Some(*to))
            }
            _ => unreachable!("dispatched by kind"),
        }
        Ok(())
    }
}

/// A tile, its stage of a row vector and the runs of the vector's storage it holds there
/// (`(start, end, stage element)`).
type RowRuns = (u32, BufferId, Vec<(usize, usize, usize)>);

/// Most table rows one tile sends to stage a row vector before it is spread in two hops
/// ([`Lowerer::spread_row_vector`]): about 1.3 KB of exchange table.
const SPREAD_ROWS: usize = 64;

/// Most bytes of a row vector spread in two hops: every tile of the output holds the whole
/// vector while it is spread (a norm's weight is a few KB; a vocabulary-wide bias is not).
const SPREAD_BYTES_MAX: usize = 8 * 1024;

impl Lowerer<'_> {
    /// `out = x OP y` per tile, operands gathered into the output's layout when theirs differ.
    pub(crate) fn lower_binary(
        &mut self,
        index: usize,
        bop: BinOp,
        steps: &mut OpSteps,
    ) -> Result<(), CodegenError> {
        let (x, y) = (
            self.plan.ops[index].inputs[0],
            self.plan.ops[index].inputs[1],
        );
        let ty = elem(self.plan.values[x].dtype).expect("planned on f32/f16");
        let eb = self.eb(x);
        let out = self.plan.ops[index].output;
        if self.plan.values[y].shape.iter().product::<usize>() == 1
            && self.plan.values[y].shape != self.plan.values[out].shape
        {
            return self.lower_binary_scalar(index, bop, false, steps);
        }
        self.two_operands(index, steps, |xb, yb, ob, n| {
            (
                (n * eb) / 8,
                Box::new(move |v0, v1| {
                    SupOp::Run(
                        Kernel::Binary { ty, op: bop },
                        BinaryState {
                            a: (xb, v0 * 8),
                            b: (yb, v0 * 8),
                            out: (ob, v0 * 8),
                            vectors: v1 - v0,
                        }
                        .into(),
                        kernels::binary_slots(ty, bop, v1 - v0),
                    )
                }),
            )
        });
        if bop == BinOp::Div {
            self.pad_clears(index, &mut steps.tiles);
        }
        Ok(())
    }

    /// `out = x OP y` (`y OP x` when `reversed`) for a one-element `y`: every tile of the
    /// output receives the element (its first word) and combines its whole share with it as
    /// one row (`Kernel::RowScalar`); the padding columns then hold `0 OP y` (`y OP 0`) and
    /// are cleared when something reads them.
    fn lower_binary_scalar(
        &mut self,
        index: usize,
        bop: BinOp,
        reversed: bool,
        steps: &mut OpSteps,
    ) -> Result<(), CodegenError> {
        let op = &self.plan.ops[index];
        let (x, y, out) = (op.inputs[0], op.inputs[1], op.output);
        let name = op.name.clone();
        let ty = elem(self.plan.values[x].dtype).expect("planned on f32/f16");
        let eb = self.eb(x);
        let out_layout = self.plan.values[out].layout.clone();
        let per_tile = out_layout.elements_per_tile();
        let y_group = self.plan.values[y].layout.group;
        // A whole 32-bit word of `y`: the element and, for f16, its zero padding.
        let word = (4 / eb as usize).max(1);
        // The stages are one placement group: the element reaches runs of consecutive tiles
        // as one multicast row instead of a row per tile on the tile that holds it.
        let group = self.next_group;
        self.next_group += 1;
        for tile in out_layout.tiles() {
            let n = per_tile[&tile] as u32;
            let (xb, ob) = (self.value_buffer(x, tile), self.value_buffer(out, tile));
            let st = self.scratch_buffer(tile, 4 * eb, format!("stage:{name}.scalar"));
            self.prog.buffers[st.0 as usize].group = Some(group);
            let c = self.gather(y, tile, y_group, &[(0, word, 0)], st);
            steps.copies.extend(c);
            let ops = steps.tiles.entry(tile).or_default();
            for (u0, u1) in split(n / 4, WORKERS) {
                if u1 > u0 {
                    let (at, cols) = (u0 * 4 * eb, (u1 - u0) * 4);
                    let state = RowScalarState {
                        x: (xb, at),
                        y: (st, 0),
                        out: (ob, at),
                        rows: 1,
                        stride: cols * eb,
                        columns: cols,
                        y_stride: 0,
                    };
                    ops.push(row_scalar(ty, bop, reversed, state));
                }
            }
        }
        if reversed || bop != BinOp::Mul {
            self.pad_clears(index, &mut steps.tiles);
        }
        Ok(())
    }

    /// For every tile of the output of the two-operand operation `index`: the buffers of the
    /// first operand, the second (gathered into the output's layout when its own differs) and
    /// the output, and its element count `n`; `launch` gives the units of work and the launch
    /// of units `u0..u1`, which are split over the workers.
    #[allow(clippy::type_complexity)]
    fn two_operands(
        &mut self,
        index: usize,
        steps: &mut OpSteps,
        launch: impl Fn(BufferId, BufferId, BufferId, u32) -> (u32, Box<dyn Fn(u32, u32) -> SupOp>),
    ) {
        let op = &self.plan.ops[index];
        let out = op.output;
        let out_layout = self.plan.values[out].layout.clone();
        let per_tile = out_layout.elements_per_tile();
        let (x, y) = (op.inputs[0], op.inputs[1]);
        let eb = self.eb(x);
        let same = self.plan.values[y].layout == out_layout;
        let name = op.name.clone();
        // A row vector's stages are one placement group: the same columns at the same offset
        // reach a run of consecutive tiles as one multicast row.
        let row_group = self.next_group;
        self.next_group += 1;
        // A row vector's runs per tile, to spread in two hops when one tile would send them all.
        let mut row_runs: Vec<RowRuns> = Vec::new();
        let row_copies0 = steps.copies.len();
        for tile in out_layout.tiles() {
            let n = per_tile[&tile];
            let xb = self.value_buffer(x, tile);
            let ob = self.value_buffer(out, tile);
            let yb = if same {
                self.value_buffer(y, tile)
            } else if self.plan.values[y].shape == self.plan.values[out].shape {
                let st = self.scratch_buffer(tile, n as u32 * eb, format!("stage:{name}.b"));
                let want = out_layout.ranges_on(tile);
                let c = self.gather(y, tile, out_layout.group, &want, st);
                steps.copies.extend(c);
                st
            } else {
                // A row vector: each run of a row of the output reads the same columns of `y`,
                // whose storage index is the column (one row); columns past `y`'s storage (the
                // output group's padding) are zero.
                let st = self.scratch_buffer(tile, n as u32 * eb, format!("stage:{name}.b"));
                self.prog.buffers[st.0 as usize].group = Some(row_group);
                let shape = &self.plan.values[out].shape;
                let (cols, g) = (shape[shape.len() - 1], out_layout.group);
                let rows = shape[shape.len() - 2];
                let y_len = ipu_package::storage_elements(
                    &self.plan.values[y].shape,
                    self.plan.values[y].layout.group,
                );
                let mut want = Vec::new();
                for (start, end, local) in out_layout.ranges_on(tile) {
                    let mut at = start;
                    while at < end {
                        // Storage `[outer][groups][rows][g]`: the group and column of `at`.
                        let in_outer = at % (cols.div_ceil(g) * rows * g);
                        let (gi, c) = (in_outer / (rows * g), at % g);
                        let run = (g - c).min(end - at);
                        let (y0, y1) = (gi * g + c, (gi * g + c + run).min(y_len));
                        if y1 > y0 {
                            want.push((y0, y1, local + at - start));
                        }
                        at += run;
                    }
                }
                let y_group = self.plan.values[y].layout.group;
                let c = self.gather(y, tile, y_group, &want, st);
                row_runs.push((tile, st, want));
                let mut zero = Vec::new();
                self.zero_gaps(st, n as u32 * eb, &c, &mut zero);
                if !zero.is_empty() {
                    zero.push(SupOp::WaitW);
                    steps.tiles.entry(tile).or_default().extend(zero);
                }
                steps.copies.extend(c);
                st
            };
            let (units, run) = launch(xb, yb, ob, n as u32);
            let ops = steps.tiles.entry(tile).or_default();
            push_split(ops, units, run);
        }
        if !row_runs.is_empty() {
            self.spread_row_vector(y, &name, row_copies0, &row_runs, steps);
        }
    }

    /// A row vector `y` gathered into the stages `runs` (each tile's runs of `y`'s storage,
    /// `(start, end, stage element)`) by the copies `steps.copies[from..]`: when one tile
    /// would send more than [`SPREAD_ROWS`] table rows (a small vector on one tile and an
    /// output on many, whose runs differ from tile to tile so few of them multicast), `y` is
    /// spread in two hops instead: the whole vector to every tile of the output at one
    /// address (a multicast row per run of consecutive tiles), then each tile's runs from its
    /// own copy (a vector of at most [`SPREAD_BYTES_MAX`] bytes). The sender's table shrinks
    /// from a row per tile to a row per run of tiles.
    fn spread_row_vector(
        &mut self,
        y: DevValueId,
        name: &str,
        from: usize,
        runs: &[RowRuns],
        steps: &mut OpSteps,
    ) {
        let eb = self.eb(y) as usize;
        let y_len = ipu_package::storage_elements(
            &self.plan.values[y].shape,
            self.plan.values[y].layout.group,
        );
        let words = |a: usize| (a * eb).is_multiple_of(4);
        if y_len * eb > SPREAD_BYTES_MAX
            || !words(y_len)
            || !runs
                .iter()
                .flat_map(|r| &r.2)
                .all(|&(a, b, d)| words(a) && words(b) && words(d))
        {
            return;
        }
        let mut sends: BTreeMap<u32, usize> = BTreeMap::new();
        for t in crate::exchange::transfers::transfers(&self.prog, &steps.copies[from..]) {
            *sends
                .entry(self.prog.buffers[t.src.0 as usize].tile)
                .or_default() += 1;
        }
        if sends.values().all(|&n| n <= SPREAD_ROWS) {
            return;
        }
        steps.copies.truncate(from);
        let group = self.next_group;
        self.next_group += 1;
        let y_group = self.plan.values[y].layout.group;
        for (tile, st, want) in runs {
            let whole =
                self.scratch_buffer(*tile, (y_len * eb) as u32, format!("stage:{name}.row"));
            self.prog.buffers[whole.0 as usize].group = Some(group);
            let c = self.gather(y, *tile, y_group, &[(0, y_len, 0)], whole);
            steps.first_copies.extend(c);
            steps.copies.extend(want.iter().map(|&(a, b, d)| Copy {
                src: whole,
                src_offset: (a * eb) as u32,
                dst: *st,
                dst_offset: (d * eb) as u32,
                bytes: ((b - a) * eb) as u32,
            }));
        }
    }

    /// `out = f(x)` per tile (`exp` and `log` clear their output's padding when something
    /// reads it; the other unary operations map zero to zero).
    pub(crate) fn lower_unary(
        &mut self,
        index: usize,
        uop: UnOp,
        factor: f32,
        tiles: &mut BTreeMap<u32, Vec<SupOp>>,
    ) -> Result<(), CodegenError> {
        let x = self.plan.ops[index].inputs[0];
        let ty = elem(self.plan.values[x].dtype).expect("planned on f32/f16");
        let eb = self.eb(x);
        self.split_per_tile(
            index,
            tiles,
            |n| n * eb / 8,
            |xb, ob, v0, v1| {
                SupOp::Run(
                    Kernel::Unary { ty, op: uop },
                    UnaryState {
                        input: (xb, v0 * 8),
                        out: (ob, v0 * 8),
                        vectors: v1 - v0,
                        factor_bits: factor.to_bits(),
                    }
                    .into(),
                    kernels::unary_slots(ty, uop, v1 - v0),
                )
            },
        );
        if matches!(uop, UnOp::Fn(f) if !f.keeps_zero()) {
            self.pad_clears(index, tiles);
        }
        Ok(())
    }

    /// Conversions in groups of four elements per tile: on the FP8 conversion unit and vector
    /// units (`Kernel::Cast`; f32 to FP8 rounded once, `Kernel::CastOnce`), or, given an
    /// overflow rule, element by element (`Kernel::Convert`).
    pub(crate) fn lower_cast(
        &mut self,
        index: usize,
        convert: CastKernel,
        tiles: &mut BTreeMap<u32, Vec<SupOp>>,
    ) -> Result<(), CodegenError> {
        let op = &self.plan.ops[index];
        let (from, to) = (
            self.plan.values[op.inputs[0]].dtype,
            self.plan.values[op.output].dtype,
        );
        let (fb, tb) = (from.bytes() as u32, to.bytes() as u32);
        let (kernel, slots): (Kernel, Box<dyn Fn(u32) -> u32>) = match convert {
            CastKernel::Units => {
                let (from, to) = (cast_type(from), cast_type(to));
                (
                    Kernel::Cast { from, to },
                    Box::new(move |g| kernels::cast_slots(from, to, g)),
                )
            }
            CastKernel::Once => {
                let CastType::Fp8(format, scale) = cast_type(to) else {
                    unreachable!("planned for FP8 outputs")
                };
                (
                    Kernel::CastOnce { format, scale },
                    Box::new(move |g| kernels::cast_once_slots(scale, g)),
                )
            }
            CastKernel::Convert(overflow) => {
                let (from, to) = (conv_type(from), conv_type(to));
                (
                    Kernel::Convert { from, to, overflow },
                    Box::new(move |g| kernels::convert_slots(from, to, overflow, g)),
                )
            }
        };
        self.split_per_tile(
            index,
            tiles,
            |n| n / 4,
            |xb, ob, g0, g1| {
                SupOp::Run(
                    kernel,
                    CastState {
                        input: (xb, g0 * 4 * fb),
                        out: (ob, g0 * 4 * tb),
                        groups: g1 - g0,
                    }
                    .into(),
                    slots(g1 - g0),
                )
            },
        );
        Ok(())
    }

    /// Integer arithmetic by `Kernel::IntBinary` per tile: the operands have the output's
    /// shape; the second is gathered into the first's layout when they differ.
    pub(crate) fn lower_int_binary(
        &mut self,
        index: usize,
        bop: BinOp,
        steps: &mut OpSteps,
    ) -> Result<(), CodegenError> {
        let x = self.plan.ops[index].inputs[0];
        let f = self.plan.values[x]
            .dtype
            .int_format()
            .expect("planned on integers");
        let (bits, signed) = (f.bits as u8, f.signed);
        let eb = self.eb(x);
        self.two_operands(index, steps, |xb, yb, ob, n| {
            (
                n / 4,
                Box::new(move |g0, g1| {
                    SupOp::Run(
                        Kernel::IntBinary {
                            op: bop,
                            bits,
                            signed,
                        },
                        BinaryState {
                            a: (xb, g0 * 4 * eb),
                            b: (yb, g0 * 4 * eb),
                            out: (ob, g0 * 4 * eb),
                            vectors: g1 - g0,
                        }
                        .into(),
                        kernels::int_binary_slots(bop, bits, signed, g1 - g0),
                    )
                }),
            )
        });
        Ok(())
    }

    /// A map (`Kernel::Map`) per tile over groups of four: operands laid out otherwise are
    /// gathered into the output's layout first; a result that is not zero for zero operands
    /// has its padding cleared when something reads it.
    pub(crate) fn lower_map(
        &mut self,
        index: usize,
        f: ipu_graph::MapFn,
        ins: [kernels::ConvType; 3],
        to: kernels::ConvType,
        steps: &mut OpSteps,
    ) -> Result<(), CodegenError> {
        let op = &self.plan.ops[index];
        let (operands, out) = (op.inputs.clone(), op.output);
        let name = op.name.clone();
        let out_layout = self.plan.values[out].layout.clone();
        let per_tile = out_layout.elements_per_tile();
        for tile in out_layout.tiles() {
            let n = per_tile[&tile] as u32;
            let mut at = Vec::with_capacity(3);
            for (k, &x) in operands.iter().enumerate() {
                let b = if self.plan.values[x].layout == out_layout {
                    self.value_buffer(x, tile)
                } else {
                    let st = self.scratch_buffer(tile, n * self.eb(x), format!("stage:{name}.{k}"));
                    let want = out_layout.ranges_on(tile);
                    let c = self.gather(x, tile, out_layout.group, &want, st);
                    steps.copies.extend(c);
                    st
                };
                at.push((b, self.eb(x)));
            }
            while at.len() < 3 {
                at.push(at[0]);
            }
            let ob = self.value_buffer(out, tile);
            let ops = steps.tiles.entry(tile).or_default();
            push_split(ops, n / 4, |g0, g1| {
                SupOp::Run(
                    Kernel::Map {
                        f,
                        a: ins[0],
                        b: ins[1],
                        c: ins[2],
                        to,
                    },
                    MapState {
                        a: (at[0].0, g0 * 4 * at[0].1),
                        b: (at[1].0, g0 * 4 * at[1].1),
                        c: (at[2].0, g0 * 4 * at[2].1),
                        out: (ob, g0 * 4 * to.bytes()),
                        groups: g1 - g0,
                    }
                    .into(),
                    kernels::map_slots(f, &ins, to, g1 - g0),
                )
            });
        }
        if f.eval(&[0.0; 3][..f.arity()]) != 0.0 {
            self.pad_clears(index, &mut steps.tiles);
        }
        Ok(())
    }

    /// For every tile of the output of the one-operand operation `index`: its `n` elements as
    /// `units(n)` units split over the workers, `run(x, out, u0, u1)` the launch of units
    /// `u0..u1` on the operand's and the output's buffers.
    fn split_per_tile(
        &mut self,
        index: usize,
        tiles: &mut BTreeMap<u32, Vec<SupOp>>,
        units: impl Fn(u32) -> u32,
        run: impl Fn(BufferId, BufferId, u32, u32) -> SupOp,
    ) {
        let op = &self.plan.ops[index];
        let (x, out) = (op.inputs[0], op.output);
        let out_layout = &self.plan.values[out].layout;
        let per_tile = out_layout.elements_per_tile();
        for tile in out_layout.tiles() {
            let n = per_tile[&tile] as u32;
            let xb = self.value_buffer(x, tile);
            let ob = self.value_buffer(out, tile);
            let ops = tiles.entry(tile).or_default();
            push_split(ops, units(n), |u0, u1| run(xb, ob, u0, u1));
        }
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
}

/// Pushes one launch per worker's share of `units` (skipping empty shares): `launch` gets the
/// share's first unit and one past its last.
fn push_split(ops: &mut Vec<SupOp>, units: u32, launch: impl Fn(u32, u32) -> SupOp) {
    for (u0, u1) in split(units, WORKERS) {
        if u1 > u0 {
            ops.push(launch(u0, u1));
        }
    }
}

/// The kernel of a conversion ([`Lowerer::lower_cast`]).
#[derive(Debug, Clone, Copy)]
pub(crate) enum CastKernel {
    /// `Kernel::Cast`.
    Units,
    /// `Kernel::CastOnce`.
    Once,
    /// `Kernel::Convert` with its overflow rule.
    Convert(ipu_numerics::Overflow),
}

/// An elementwise device operation: the result keeps its first operand's layout.
#[derive(Debug, Clone, PartialEq)]
pub enum Elementwise {
    /// Elementwise binary.
    Binary(BinOp),
    /// `s OP x` for a one-element `s`, its operands stored as `[x, s]`.
    ScalarFirst(BinOp),
    /// Elementwise unary (`factor` for scale).
    Unary(UnOp, f32),
    /// Conversion on the FP8 conversion unit and the vector units (f32, f16, F143, F152,
    /// saturating); from f32 to FP8 through f16, rounding twice.
    Cast,
    /// A graph cast from f32 to F143 or F152 (saturating), rounded once as ONNX's `Cast` is
    /// (`Kernel::CastOnce`).
    CastOnce,
    /// Conversion between any two element formats, element by element through f32.
    Convert(ipu_numerics::Overflow),
    /// Elementwise integer arithmetic (operands of one shape).
    IntBinary(BinOp),
    /// A predicate, logical operation or selection, one element at a time (operands of one
    /// shape, in their formats `ins`, the unused ones repeating the first).
    Map {
        /// The function.
        f: ipu_graph::MapFn,
        /// The operands' formats.
        ins: [kernels::ConvType; 3],
        /// The result's format.
        to: kernels::ConvType,
    },
    /// The causal mask of a block of scores whose column 0 is key `key_start` (f32).
    CausalMask {
        /// Key of column 0.
        key_start: usize,
    },
}

impl FamilyOp for Elementwise {
    fn lower(&self, lowerer: &mut Lowerer<'_>, index: usize) -> Result<(), CodegenError> {
        lowerer.lower_steps(index, |l, steps| match *self {
            Elementwise::Binary(bop) => l.lower_binary(index, bop, steps),
            Elementwise::ScalarFirst(bop) => l.lower_binary_scalar(index, bop, true, steps),
            Elementwise::Unary(uop, factor) => l.lower_unary(index, uop, factor, &mut steps.tiles),
            Elementwise::CausalMask { key_start } => {
                l.lower_causal_mask(index, key_start, &mut steps.tiles)
            }
            Elementwise::Cast => l.lower_cast(index, CastKernel::Units, &mut steps.tiles),
            Elementwise::CastOnce => l.lower_cast(index, CastKernel::Once, &mut steps.tiles),
            Elementwise::Convert(overflow) => {
                l.lower_cast(index, CastKernel::Convert(overflow), &mut steps.tiles)
            }
            Elementwise::IntBinary(bop) => l.lower_int_binary(index, bop, steps),
            Elementwise::Map { f, ins, to } => l.lower_map(index, f, ins, to, steps),
        })
    }
}

impl Planner<'_> {
    /// A one-operand operation whose result keeps its operand's layout (in `dtype`, or the
    /// graph value's type).
    pub(crate) fn follow(
        &mut self,
        op: &ipu_graph::Operation,
        out_val: &ipu_graph::Value,
        kind: Elementwise,
        x: DevValueId,
        dtype: Option<DType>,
    ) {
        let layout = self.values[x].layout.clone();
        let dtype = dtype.unwrap_or(out_val.ty.dtype);
        let r = self.add_graph_value(op.outputs[0], out_val, dtype, layout);
        self.push_simple(op.name.clone(), kind, vec![x], r);
    }

    pub(crate) fn cast_to(&mut self, v: DevValueId, to: DType, name: &str) -> DevValueId {
        if self.values[v].dtype == to {
            return v;
        }
        let (shape, layout) = (self.values[v].shape.clone(), self.values[v].layout.clone());
        let r = self.add_value(name.to_string(), to, shape, None, layout);
        self.push_simple(name.to_string(), Elementwise::Cast, vec![v], r);
        r
    }

    /// Elementwise operations follow their first operand's layout: no choice to make, one
    /// finalist. Cost: the slowest tile's vectors over 6 workers, plus the exchange of other
    /// operands laid out differently.
    pub(crate) fn push_simple(
        &mut self,
        name: String,
        kind: Elementwise,
        inputs: Vec<DevValueId>,
        output: DevValueId,
    ) {
        let out = &self.values[output];
        let eb = out.dtype.bytes() as u64;
        let most = out.layout.most_elements_on_a_tile() as u64;
        let workers = WORKER_CONTEXTS as u64;
        let per_worker = most.div_ceil(workers);
        let slot = BARREL_SLOT_CYCLES as u64;
        // The element-at-a-time kernels cost what their slot models say (tens of slots per
        // element); the vector kernels about two slots per piece.
        let groups = per_worker.div_ceil(4) as u32;
        let worker_slots = match kind {
            Elementwise::Convert(overflow) => u64::from(kernels::convert_slots(
                conv_type(self.values[inputs[0]].dtype),
                conv_type(out.dtype),
                overflow,
                groups,
            )),
            Elementwise::CastOnce => {
                let CastType::Fp8(_, scale) = cast_type(out.dtype) else {
                    unreachable!("planned for FP8 outputs")
                };
                u64::from(kernels::cast_once_slots(scale, groups))
            }
            Elementwise::IntBinary(bop) => {
                let f = out.dtype.int_format().expect("integer arithmetic");
                u64::from(kernels::int_binary_slots(
                    bop,
                    f.bits as u8,
                    f.signed,
                    groups,
                ))
            }
            Elementwise::Map { f, ins, to } => u64::from(kernels::map_slots(f, &ins, to, groups)),
            _ => per_worker * 2 / PIECE_GRAIN as u64 + 12,
        };
        let compute = slot * worker_slots + workers * slot * 3;
        let mut exchange = 0;
        for &i in &inputs[1..] {
            if self.values[i].layout != out.layout {
                exchange = exchange.max(
                    most * eb / EXCHANGE_BYTES_PER_CYCLE as u64
                        + EXCHANGE_PHASE_OVERHEAD_CYCLES as u64,
                );
            }
        }
        let finalist = Finalist {
            op: name,
            mapping: format!("follow-operand tiles={}", out.layout.tiles().len()),
            estimated_cycles: compute + exchange,
            estimated_exchange_cycles: exchange,
            peak_tile_bytes: most * eb * inputs.len() as u64,
            tiles: out.layout.tiles().len() as u32,
            alternatives: 1,
        };
        self.push_unchosen(finalist, DevOpKind::new(kind), inputs, output);
    }
}
