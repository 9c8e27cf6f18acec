//! Repeated layers on the device: a run of identical blocks (`ipu_graph::repeat`) is planned
//! and lowered once; the program runs the block's steps once per layer, each time after
//! copying that layer's weights, which stay resident in buffers of their own on the tiles of
//! the frame (the block's constant, laid out as planned), into the frame, and before copying
//! the block's result into its input for the next layer. Every layer's steps use the same
//! buffers, so the tiles keep one set of vertex states and exchange tables for all of them
//! (`TileProgram::same_as`), and the package grows with the weights, not with the depth.

use std::collections::{BTreeMap, BTreeSet};

use ipu_graph::repeat::Repeat;
use ipu_kernels::state::Copy2dState;
use ipu_kernels::{self as kernels, Kernel};

use crate::cost::estimate;
use crate::error::CodegenError;
use crate::lower::{Lowerer, Shadows, WORKERS, align8, in_waves, split};
use crate::operator_plan::{DevFrame, DevRepeat, DevValueId, OperatorPlan};
use crate::program::{BufferId, Step, SupOp};

/// The run `repeat` names in `plan`, or why the plan does not keep it as one block (the build
/// then compiles every layer).
pub fn dev_repeat(plan: &OperatorPlan, repeat: &Repeat) -> Result<DevRepeat, String> {
    let origins: BTreeSet<String> = repeat.block.iter().map(|n| format!("%{n}")).collect();
    let inside: Vec<usize> = (0..plan.ops.len())
        .filter(|&i| origins.contains(&plan.ops[i].origin))
        .collect();
    let (Some(&s), Some(&e)) = (inside.first(), inside.last()) else {
        return Err("the block has no device operations".into());
    };
    if e + 1 - s != inside.len() {
        return Err("the block's device operations are not consecutive".into());
    }
    let ops = s..e + 1;
    let graph_value = |name: &str| -> Result<DevValueId, String> {
        let found: Vec<DevValueId> = (0..plan.values.len())
            .filter(|&v| plan.values[v].graph.is_some() && plan.values[v].name == name)
            .collect();
        match found[..] {
            [v] => Ok(v),
            _ => Err(format!("%{name} has {} device values", found.len())),
        }
    };
    let input = graph_value(&repeat.input)?;
    let output = graph_value(&repeat.output)?;
    if plan.values[input].dtype != plan.values[output].dtype
        || plan.values[input].shape != plan.values[output].shape
    {
        return Err("the carried values differ in type".into());
    }
    // Outside the block, only the block's result is read of what it makes, and nothing
    // writes the carried input after the block first reads it.
    for (i, op) in plan.ops.iter().enumerate() {
        if ops.contains(&i) {
            continue;
        }
        if i >= ops.end && op.inputs.contains(&input) {
            return Err(format!(
                "{} reads the carried input after the block",
                op.name
            ));
        }
        for &v in &op.inputs {
            let made_inside = plan.ops[ops.clone()].iter().any(|o| o.output == v);
            if made_inside && v != output {
                return Err(format!(
                    "{} reads %{} of the block",
                    op.name, plan.values[v].name
                ));
            }
        }
    }
    let mut frames = Vec::new();
    for f in &repeat.frames {
        let value = graph_value(&f.name)?;
        if !plan.constants.iter().any(|c| c.0 == value) {
            return Err(format!("%{} is not a constant of the plan", f.name));
        }
        if plan.ops[..ops.start]
            .iter()
            .chain(&plan.ops[ops.end..])
            .any(|o| o.inputs.contains(&value))
        {
            return Err(format!("%{} is read outside the block", f.name));
        }
        frames.push(DevFrame {
            value,
            names: f.names.clone(),
            data: f.data.clone(),
        });
    }
    Ok(DevRepeat {
        count: repeat.count,
        ops,
        input,
        output,
        frames,
        outputs: repeat.outputs.clone(),
    })
}

impl Lowerer<'_> {
    /// The steps of the run: per layer, its weights copied into the frames, the block, and
    /// (but after the last) its result copied into its input. The block is lowered once; the
    /// later layers' steps are its steps again (`TileProgram::same_as`).
    pub(crate) fn lower_repeat(
        &mut self,
        r: &DevRepeat,
        shadows: &Shadows,
    ) -> Result<(), CodegenError> {
        let mut block = 0..0;
        for layer in 0..r.count {
            self.prog.origin = format!("layer {layer}");
            self.frames_step(r, shadows, layer);
            if layer == 0 {
                let start = self.prog.steps.len();
                for i in r.ops.clone() {
                    self.prog.origin = self.plan.ops[i].origin.clone();
                    self.plan.ops[i].kind.lower(self, i)?;
                }
                block = start..self.prog.steps.len();
            } else {
                for s in block.clone() {
                    let at = self.prog.steps.len();
                    self.prog.same_as.insert(at, s);
                    self.prog.steps.push(self.prog.steps[s].clone());
                }
            }
            if layer + 1 < r.count {
                self.prog.origin = format!("layer {layer}");
                self.carry_step(r, layer);
            }
        }
        Ok(())
    }

    /// The compute step copying layer `layer`'s weights into the frames, on every tile
    /// holding a piece of one, its copies spread over the workers.
    fn frames_step(&mut self, r: &DevRepeat, shadows: &Shadows, layer: usize) {
        let mut tiles: BTreeMap<u32, Vec<SupOp>> = BTreeMap::new();
        for (f, frame) in r.frames.iter().enumerate() {
            let eb = self.eb(frame.value);
            let on_tile = self.plan.values[frame.value].layout.elements_per_tile();
            for (&tile, &src) in &shadows[f][layer] {
                let dst = self.value_buffer(frame.value, tile);
                let bytes = align8((on_tile[&tile] * eb as usize) as u64) as u32;
                let words = bytes / 8;
                let parts = (words / 64).clamp(1, WORKERS);
                let ops = tiles.entry(tile).or_default();
                for (w0, w1) in split(words, parts) {
                    if w1 > w0 {
                        ops.push(copy_words((src, 8 * w0), (dst, 8 * w0), w1 - w0));
                    }
                }
            }
        }
        for ops in tiles.values_mut() {
            *ops = in_waves(std::mem::take(ops));
            ops.push(SupOp::WaitW);
        }
        let estimated_cycles = tiles.values().map(|o| estimate(o)).max().unwrap_or(0);
        self.prog.steps.push(Step::Compute {
            name: format!("layer {layer} weights"),
            tiles: tiles.into(),
            estimated_cycles,
        });
    }

    /// The exchange step copying the block's result into its input, for the next layer.
    fn carry_step(&mut self, r: &DevRepeat, layer: usize) {
        let input = &self.plan.values[r.input];
        let (group, pieces) = (input.layout.group, input.layout.pieces.clone());
        let mut copies = Vec::new();
        for p in pieces {
            let dst = self.value_buffer(r.input, p.tile);
            copies.extend(self.gather(r.output, p.tile, group, &[(p.start, p.end, p.local)], dst));
        }
        self.prog.steps.push(Step::Exchange {
            name: format!("layer {layer} result"),
            copies,
        });
    }
}

/// The planner's estimates of `plan`'s cycles and exchange cycles with the block of `r` run
/// once per layer.
pub fn estimated(plan: &OperatorPlan, r: &DevRepeat) -> (u64, u64) {
    let more = (r.count - 1) as u64;
    let block = &plan.ops[r.ops.clone()];
    let cycles: u64 = block.iter().map(|o| o.estimated_cycles).sum();
    let exchange: u64 = block.iter().map(|o| o.estimated_exchange_cycles).sum();
    (
        plan.estimated_cycles + more * cycles,
        plan.estimated_exchange_cycles + more * exchange,
    )
}

/// `k_splits` (device operations split over k, by name) with the block's entries given to
/// the same operations of every layer: the names `repeat.layers` gives, with any suffix a
/// device operation adds to its graph operation's name.
pub fn every_layer(k_splits: &BTreeMap<String, usize>, repeat: &Repeat) -> BTreeMap<String, usize> {
    let mut out = BTreeMap::new();
    for (name, &k) in k_splits {
        let at = repeat.block.iter().position(|b| {
            name == b
                || name
                    .strip_prefix(b.as_str())
                    .is_some_and(|s| s.starts_with('.'))
        });
        match at {
            Some(j) => {
                let suffix = &name[repeat.block[j].len()..];
                for layer in &repeat.layers {
                    out.insert(format!("{}{suffix}", layer[j]), k);
                }
            }
            None => {
                out.insert(name.clone(), k);
            }
        }
    }
    out
}

/// One worker's copy of `words` 64-bit words.
fn copy_words(src: (BufferId, u32), dst: (BufferId, u32), words: u32) -> SupOp {
    SupOp::Run(
        Kernel::Copy2d { wide: true },
        Copy2dState {
            src,
            dst,
            rows: 1,
            segments: 1,
            words,
            src_row_stride: 8 * words,
            src_segment_stride: 8 * words,
            dst_row_stride: 8 * words,
            dst_segment_stride: 8 * words,
        }
        .into(),
        kernels::rows::copy2d_slots(1, 1, words),
    )
}
