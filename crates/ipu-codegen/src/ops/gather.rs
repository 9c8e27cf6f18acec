//! Lookups of table rows by run-time indices (`gather` along axis 0 of a 2-D table: an
//! embedding), planned as an embedding is planned for the IPU (after PopLibs' `multiSlice`):
//! the table stays where `initialize` wrote it, each column group's rows cut into parts on
//! separate tiles; only the indices and the looked-up rows move at run time.
//!
//! Every part's tile receives all the indices (one placement group, so the exchange multicasts
//! them) and writes one row per index, the table's where the index falls in its part and zeros
//! elsewhere (`Kernel::GatherRows`). With more than one part, the indices are cut into as many
//! chunks: part `p`'s tile receives every part's rows of chunk `p` and ORs them into the output
//! (`Kernel::OrWords`), so each tile merges and holds `1 / parts` of the output; exactly one
//! part holds a valid index, so the result is the table's row bit for bit. An index outside
//! the table reads zeros. The parts use as many tiles as the column groups leave (a table of
//! `n` groups on `tiles / n` parts a group), so the table takes the same share of every tile.
//!
//! A tied embedding's table is held once, as the LM head's `[hidden, vocab]` operand
//! (`gather_columns`), in the column group `g` the LM head's matmul reads: its storage keeps,
//! for each block of `g` entries, every row of `g` elements, one per entry. A part is then a
//! run of such blocks, each with the rows of one of the output's column groups (the type's
//! own), and `Kernel::GatherColumns` reads an entry's elements `g` apart; parts, indices, merge
//! and output are as for rows. The layout the lookup gives the table is the one the matmul
//! stages from.

use ipu_graph::{OpKind, Operation, Value};
use ipu_package::{split_shape, storage_elements, storage_index};
use ipu_target::{
    BARREL_SLOT_CYCLES, EXCHANGE_BYTES_PER_CYCLE, EXCHANGE_PHASE_OVERHEAD_CYCLES, WORKER_CONTEXTS,
};

use super::unsupported;
use crate::error::CodegenError;
use crate::layout::Layout;
use crate::lower::*;
use crate::operator_plan::*;
use crate::plan::*;
use crate::program::*;
use ipu_kernels::state::*;
use ipu_kernels::{self as kernels, Kernel};

/// The bytes of one part of a column group that planning aims at: small enough that the
/// table's parts leave most of a tile to the rest of the model.
const PART_BYTES: usize = 96 * 1024;

/// One part of the table: rows `rows.0..rows.1` of column group `group`, on `tile`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Part {
    /// Column group.
    pub group: usize,
    /// Part index within the group (0: the one that merges the others).
    pub part: usize,
    /// Tile.
    pub tile: u32,
    /// Table rows.
    pub rows: (usize, usize),
}

/// A lookup's device operation: the table's parts, `parts` per column group.
#[derive(Debug, Clone, PartialEq)]
pub struct Lookup {
    /// Parts per column group.
    pub parts: usize,
    /// Every part, by column group then part.
    pub items: Vec<Part>,
    /// Whether the table is held in the parts' layout (else each run copies it there).
    pub resident: bool,
    /// Whether the table is held transposed (`gather_columns`): a part's rows are entries,
    /// whole blocks of the column group `g` but the last.
    pub transposed: bool,
}

/// The geometry of a lookup's table: entries, row width (elements), the table's column group,
/// the output's, and whether the table is transposed.
#[derive(Debug, Clone, Copy)]
struct Table {
    entries: usize,
    width: usize,
    group: usize,
    out_group: usize,
    transposed: bool,
}

impl Table {
    fn new(shape: &[usize], group: usize, out_group: usize, transposed: bool) -> Table {
        let (entries, width) = if transposed {
            (shape[1], shape[0])
        } else {
            (shape[0], shape[1])
        };
        Table {
            entries,
            width,
            group,
            out_group,
            transposed,
        }
    }

    /// The valid elements of the output's column group `j` (the last may be short).
    fn elems(&self, j: usize) -> usize {
        self.out_group.min(self.width - j * self.out_group)
    }

    /// The storage ranges of part `it`, in the order a tile holds them.
    fn part_ranges(&self, it: &Part) -> Vec<(usize, usize)> {
        let (g, j) = (self.group, it.group);
        if !self.transposed {
            let at = j * self.entries;
            return vec![((at + it.rows.0) * g, (at + it.rows.1) * g)];
        }
        // `[entries / g][width][g]`: each block's rows of the output's column group `j`.
        (it.rows.0 / g..it.rows.1.div_ceil(g))
            .map(|b| {
                let start = (b * self.width + j * self.out_group) * g;
                (start, start + self.elems(j) * g)
            })
            .collect()
    }
}

/// Where storage element `start` lies in `tile`'s buffer of a value laid out as `layout`.
fn local_of(layout: &Layout, start: usize, tile: u32) -> Option<usize> {
    let at = layout.pieces.partition_point(|p| p.end <= start);
    layout.pieces[at..]
        .iter()
        .take_while(|p| p.start <= start)
        .find(|p| p.tile == tile)
        .map(|p| p.local + start - p.start)
}

impl Planner<'_> {
    /// `gather` of rows of a 2-D table by i32 indices.
    pub(crate) fn plan_gather(
        &mut self,
        op: &Operation,
        ins: &[DevValueId],
        out_val: &Value,
    ) -> Result<(), CodegenError> {
        let transposed = matches!(op.kind, OpKind::GatherColumns);
        let (table, ids) = (ins[0], ins[1]);
        if !matches!(op.kind, OpKind::Gather { axis: 0 } | OpKind::GatherColumns)
            || self.values[table].shape.len() != 2
        {
            return unsupported(
                op,
                "a lookup is lowered along axis 0 of a 2-D table (an embedding); reshape the \
                 table first",
            );
        }
        let dtype = self.values[table].dtype;
        let eb = dtype.bytes();
        let g = self.values[table].layout.group;
        // A transposed table is in the column group its matmul reads; the output takes the
        // type's own (a part then holds a whole output group's rows of its blocks).
        let og = if transposed { default_group(dtype) } else { g };
        let tab = Table::new(&self.values[table].shape, g, og, transposed);
        let (v, h) = (tab.entries, tab.width);
        if transposed && (!g.is_power_of_two() || g * eb > 64 || !matches!(eb, 2 | 4)) {
            return unsupported(
                op,
                &format!(
                    "columns are looked up in tables of 2- or 4-byte elements in column groups \
                     of a power of two up to 64 bytes, not {dtype} in groups of {g}"
                ),
            );
        }
        let groups = h.div_ceil(og);
        let tiles = self.tiles as usize;
        // A transposed table's parts are whole blocks of `g` entries.
        let (units, unit) = if transposed {
            (v.div_ceil(g), g)
        } else {
            (v, 1)
        };
        let parts = (tiles / groups)
            .max((v * og * eb).div_ceil(PART_BYTES))
            .clamp(1, units);
        let items: Vec<Part> = (0..groups)
            .flat_map(|j| {
                (0..parts).map(move |p| Part {
                    group: j,
                    part: p,
                    tile: ((j * parts + p) % tiles) as u32,
                    rows: (
                        (units * p / parts * unit).min(v),
                        (units * (p + 1) / parts * unit).min(v),
                    ),
                })
            })
            .collect();
        let resident = self.read_only_first(table, ins);
        if resident {
            let ranges = items
                .iter()
                .flat_map(|it| (tab.part_ranges(it).into_iter()).map(|(s, e)| (it.tile, s, e)));
            self.values[table].layout = Layout::from_ranges(g, ranges);
        }
        if self.read_only_here(ids, ins, false) {
            let group = self.values[ids].layout.group;
            let n = storage_elements(&self.values[ids].shape, group);
            self.values[ids].layout = Layout::from_ranges(group, [(0, 0, n)]);
        }
        // The output `[.., s, h]`: chunk `p` of the indices (in row-major order) of column
        // group `j` on part `p`'s tile, in order.
        let (outer, s) = outer_and_last(&self.values[ids].shape);
        let n = outer * s;
        let mut ranges = Vec::new();
        for it in &items {
            let (c0, c1) = chunk(n, parts, it.part);
            for b in 0..outer {
                let (s0, s1) = (c0.clamp(b * s, (b + 1) * s), c1.clamp(b * s, (b + 1) * s));
                let at = b * groups * s * og + it.group * s * og;
                ranges.push((it.tile, at + (s0 - b * s) * og, at + (s1 - b * s) * og));
            }
        }
        let layout = Layout::from_ranges(og, ranges);
        let r = self.add_graph_value(op.outputs[0], out_val, dtype, layout);
        let n = n as u64;
        let row_words = (og * eb / 4) as u32;
        let per_worker = n.div_ceil(WORKER_CONTEXTS as u64) as u32;
        let slot = BARREL_SLOT_CYCLES as u64;
        let workers = WORKER_CONTEXTS as u64;
        let bound = if transposed {
            let row = row_shape(eb, og, og);
            kernels::gather_columns_bound_slots(eb as u32, per_worker, row)
        } else {
            kernels::gather_rows_bound_slots(per_worker, row_words)
        };
        let compute = slot * u64::from(bound) + workers * slot * 3;
        let row_bytes = (og * eb) as u64;
        let overhead = EXCHANGE_PHASE_OVERHEAD_CYCLES as u64;
        let bw = EXCHANGE_BYTES_PER_CYCLE as u64;
        let mut exchange = n * 4 / bw + overhead;
        let mut merge_cycles = 0;
        let chunk_rows = n.div_ceil(parts as u64);
        if parts > 1 {
            exchange += chunk_rows * row_bytes * parts as u64 / bw + overhead;
            let words = (chunk_rows * row_bytes / 4).div_ceil(workers) as u32;
            merge_cycles =
                slot * u64::from(kernels::or_words_slots(words, parts as u32)) + workers * slot * 3;
        }
        if !resident {
            exchange += (v * og * eb / parts) as u64 / bw + overhead;
        }
        let part_bytes = (v.div_ceil(parts) * og * eb) as u64;
        let finalist = Finalist {
            op: op.name.clone(),
            mapping: format!(
                "lookup groups={groups} parts={parts}{}{}",
                if transposed { " columns" } else { "" },
                if resident { "" } else { " table-copied" }
            ),
            estimated_cycles: compute + merge_cycles + exchange,
            estimated_exchange_cycles: exchange,
            peak_tile_bytes: part_bytes + n * 4 + (n + chunk_rows * parts as u64) * row_bytes,
            tiles: items.len().min(tiles) as u32,
            alternatives: 1,
        };
        let kind = Lookup {
            parts,
            items,
            resident,
            transposed,
        };
        self.push_unchosen(finalist, DevOpKind::new(kind), vec![table, ids], r);
        Ok(())
    }
}

/// A transposed part's row of `elems` valid elements of `eb` bytes in an output column group
/// of `g`:
/// its data words (pairs of 2-byte elements), a lone last 2-byte element (0 or 1) and the zero
/// words after them.
fn row_shape(eb: usize, g: usize, elems: usize) -> (u32, u32, u32) {
    let (words, tail) = if eb == 2 {
        (elems / 2, elems % 2)
    } else {
        (elems, 0)
    };
    (
        words as u32,
        tail as u32,
        (g * eb / 4 - words - tail) as u32,
    )
}

/// Chunk `p` of `n` indices cut into `parts`: the first and one past the last.
fn chunk(n: usize, parts: usize, p: usize) -> (usize, usize) {
    (n * p / parts, n * (p + 1) / parts)
}

/// The product of all but the last dimension, and the last.
fn outer_and_last(shape: &[usize]) -> (usize, usize) {
    let (outer, rows, cols) = split_shape(shape);
    (outer * rows, cols)
}

impl FamilyOp for Lookup {
    fn lower(&self, l: &mut Lowerer<'_>, index: usize) -> Result<(), CodegenError> {
        let op = &l.plan.ops[index];
        let (table, ids, out) = (op.inputs[0], op.inputs[1], op.output);
        let name = op.name.clone();
        let g = l.plan.values[table].layout.group;
        let og = l.plan.values[out].layout.group;
        let tab = Table::new(&l.plan.values[table].shape, g, og, self.transposed);
        let v = tab.entries;
        let eb = l.eb(table);
        let row_bytes = og as u32 * eb;
        let ids_shape = l.plan.values[ids].shape.clone();
        let (outer, s) = outer_and_last(&ids_shape);
        let n = (outer * s) as u32;
        // The indices in row-major order, as runs of the indices' storage.
        let ids_group = l.plan.values[ids].layout.group;
        let mut want: Vec<(usize, usize, usize)> = Vec::new();
        for i in 0..n as usize {
            let at = storage_index(&ids_shape, ids_group, i);
            match want.last_mut() {
                Some(w) if w.1 == at && w.2 + (w.1 - w.0) == i => w.1 += 1,
                _ => want.push((at, at + 1, i)),
            }
        }
        let out_layout = l.plan.values[out].layout.clone();
        // The indices in row-major order on one tile: as they lie when they are one run of one
        // piece, else gathered there first, so that every part's tile receives them as one
        // run (one multicast, one exchange table entry on the sender).
        let home_tile = self.items[0].tile;
        let one_run = want.len() == 1
            && l.plan.values[ids]
                .layout
                .pieces
                .iter()
                .any(|p| p.start <= want[0].0 && want[0].1 <= p.end);
        let home = if one_run {
            let p = *l.plan.values[ids]
                .layout
                .pieces
                .iter()
                .find(|p| p.start <= want[0].0 && want[0].1 <= p.end)
                .expect("checked");
            let buffer = l.value_buffer(ids, p.tile);
            (buffer, (p.local + want[0].0 - p.start) as u32 * 4)
        } else {
            let buffer = l.scratch_buffer(home_tile, n * 4, format!("stage:{name}.ids_home"));
            l.lower_steps(index, |l, steps| {
                steps.copies = l.gather(ids, home_tile, ids_group, &want, buffer);
                Ok(())
            })?;
            (buffer, 0)
        };
        let ids_placement = l.next_group;
        l.next_group += 1;
        let mut ids_at = std::collections::BTreeMap::new();
        let mut partial_at = Vec::with_capacity(self.items.len());
        l.lower_steps(index, |l, steps| {
            for it in &self.items {
                let ib = *ids_at.entry(it.tile).or_insert_with(|| {
                    let b = l.scratch_buffer(it.tile, n * 4, format!("stage:{name}.ids"));
                    l.prog.buffers[b.0 as usize].group = Some(ids_placement);
                    steps.copies.push(Copy {
                        src: home.0,
                        src_offset: home.1,
                        dst: b,
                        dst_offset: 0,
                        bytes: n * 4,
                    });
                    b
                });
                let ranges = tab.part_ranges(it);
                let (tb, t_off) = if self.resident {
                    let local = local_of(&l.plan.values[table].layout, ranges[0].0, it.tile)
                        .expect("a part is a piece of the table");
                    (l.value_buffer(table, it.tile), local as u32 * eb)
                } else {
                    let mut at = 0;
                    let want: Vec<_> = (ranges.iter())
                        .map(|&(s, e)| {
                            at += e - s;
                            (s, e, at - (e - s))
                        })
                        .collect();
                    let b =
                        l.scratch_buffer(it.tile, at as u32 * eb, format!("stage:{name}.table"));
                    let c = l.gather(table, it.tile, g, &want, b);
                    steps.copies.extend(c);
                    (b, 0)
                };
                let (ob, o_off) = if self.parts == 1 {
                    let local = local_of(&out_layout, it.group * s * og, it.tile)
                        .expect("the output has a piece per column group");
                    (l.value_buffer(out, it.tile), local as u32 * eb)
                } else {
                    let b = l.scratch_buffer(it.tile, n * row_bytes, format!("part:{name}"));
                    (b, 0)
                };
                partial_at.push((ob, o_off));
                let ops = steps.tiles.entry(it.tile).or_default();
                for (i0, i1) in split(n, WORKERS) {
                    if i1 == i0 {
                        continue;
                    }
                    let (indices, out) = ((ib, i0 * 4), (ob, o_off + i0 * row_bytes));
                    let (count, table) = (i1 - i0, (tb, t_off));
                    let (first, rows) = (it.rows.0 as u32, (it.rows.1 - it.rows.0) as u32);
                    let entries = v as u32;
                    if self.transposed {
                        let elems = tab.elems(it.group);
                        let (words, tail, pad) = row_shape(eb as usize, og, elems);
                        let state = GatherColumnsState {
                            table,
                            indices,
                            out,
                            count,
                            first,
                            rows,
                            words,
                            tail,
                            pad,
                            entries,
                            block: (elems * g) as u32 * eb,
                        };
                        let slots =
                            kernels::gather_columns_bound_slots(eb, count, (words, tail, pad));
                        let kernel = Kernel::GatherColumns {
                            elem_bytes: eb as u8,
                            group: g as u8,
                        };
                        ops.push(SupOp::Run(kernel, state.into(), slots));
                    } else {
                        let row_words = row_bytes / 4;
                        let state = GatherRowsState {
                            table,
                            indices,
                            out,
                            count,
                            first,
                            rows,
                            row_words,
                            entries,
                        };
                        let slots = kernels::gather_rows_bound_slots(count, row_words);
                        ops.push(SupOp::Run(Kernel::GatherRows, state.into(), slots));
                    }
                }
            }
            Ok(())
        })?;
        if self.parts == 1 {
            return Ok(());
        }
        // Part `p`'s tile merges chunk `p` of every part's rows into its piece of the output.
        l.lower_steps(index, |l, steps| {
            for group in self.items.chunks(self.parts) {
                for it in group {
                    let (c0, c1) = chunk(n as usize, self.parts, it.part);
                    let (rows, at) = ((c1 - c0) as u32, c0 as u32 * row_bytes);
                    if rows == 0 {
                        continue;
                    }
                    let bytes = rows * row_bytes;
                    let stage = l.scratch_buffer(
                        it.tile,
                        self.parts as u32 * bytes,
                        format!("stage:{name}.parts"),
                    );
                    for (k, src) in group.iter().enumerate() {
                        let (sb, _) = partial_at[src.group * self.parts + src.part];
                        steps.copies.push(Copy {
                            src: sb,
                            src_offset: at,
                            dst: stage,
                            dst_offset: k as u32 * bytes,
                            bytes,
                        });
                    }
                    // Where flat index `c0` of column group `j` lies in the tile's output
                    // buffer: the chunk's rows follow it in order.
                    let groups = self.items.len() / self.parts;
                    let (b0, s0) = (c0 / s, c0 % s);
                    let at = (b0 * groups * s + it.group * s + s0) * og;
                    let local = local_of(&l.plan.values[out].layout, at, it.tile)
                        .expect("the chunk's first row is on its tile");
                    let ob = l.value_buffer(out, it.tile);
                    let o_off = local as u32 * eb;
                    let ops = steps.tiles.entry(it.tile).or_default();
                    for (w0, w1) in split(bytes / 4, WORKERS) {
                        if w1 > w0 {
                            let state = OrWordsState {
                                out: (ob, o_off + w0 * 4),
                                stage: (stage, w0 * 4),
                                words: w1 - w0,
                                sources: self.parts as u32,
                                stride: bytes,
                            };
                            let slots = kernels::or_words_slots(w1 - w0, self.parts as u32);
                            ops.push(SupOp::Run(Kernel::OrWords, state.into(), slots));
                        }
                    }
                }
            }
            Ok(())
        })
    }
}
