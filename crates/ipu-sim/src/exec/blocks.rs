//! Straight runs of slots that only compute, run from a list.
//!
//! Outside `rpt` bodies a worker fetches every slot from the code cache and checks the cycle
//! limit and the interrupt poll at each. Most of that code is loops whose bodies are long
//! straight runs of slots that only compute (the softmax's passes: loads, float arithmetic and
//! stores between two branches). Where control arrives (a worker's entry, a branch target, the
//! slot after an `rpt` or after any other control slot), [`Tile::run_block`] looks up the run
//! of cached slots that only compute starting there, built once per tile and forgotten when
//! the code cache's epoch moves, and runs it from its list when neither the cycle limit nor
//! the interrupt poll can fire inside it. Each slot is accounted as the slot-by-slot loop
//! accounts it, so faults, counters and stalls are the same; a stall that brings the limit
//! within reach, or a store that forgets cached code, hands the rest back to that loop.

use crate::fault::{Context, Fault};
use crate::memory::Decoded;

use super::amp::AmpAcc;
use super::decode::Op;
use super::decode::SlotAt;
use super::regs::Regs;
use super::{SLOT, Tile, stream_body};

/// Slots of a run at most (a longer straight run continues in the next one).
const BLOCK_SLOTS_MAX: usize = 256;

/// A straight run of cached slots that only compute.
#[derive(Clone, Debug, Default)]
pub(super) struct Block {
    /// Each slot's pc and decoded form.
    ops: Vec<(u32, Op)>,
    /// Barrel slots and instructions of the whole run.
    slots: u64,
    instrs: u64,
    /// The pc after the run.
    end: u32,
    /// Whether the run stopped at its length limit (the next pc starts another).
    cut: bool,
}

/// An `rpt` body resolved once: its decoded slots, the pc after them and its streamed form.
#[derive(Clone, Debug)]
pub(super) struct Body {
    pub end: u32,
    pub buf: Vec<(u32, Decoded)>,
    pub stream: Option<stream_body::StreamBody>,
}

/// The runs of a tile by their first pc, and its `rpt` bodies by the `rpt`'s pc, for one
/// epoch of its code cache.
#[derive(Clone, Debug, Default)]
pub(super) struct Blocks {
    at: ahash::AHashMap<u32, u32>,
    runs: Vec<Block>,
    bodies: ahash::AHashMap<u32, Body>,
    epoch: u64,
}

impl Blocks {
    /// Forgets everything when the code cache's epoch has moved from the one recorded.
    fn sync(&mut self, epoch: u64) {
        if self.epoch != epoch {
            self.at.clear();
            self.runs.clear();
            self.bodies.clear();
            self.epoch = epoch;
        }
    }
}

/// Where a worker goes after [`Tile::run_block`]: the next pc, and whether a run may start
/// there.
pub(super) struct After {
    pub pc: u32,
    pub head: bool,
}

impl Tile {
    /// The index of the run starting at `pc`, built from the cache on first use.
    fn block_at(&mut self, pc: u32) -> usize {
        self.blocks.sync(self.code.epoch());
        if let Some(&i) = self.blocks.at.get(&pc) {
            return i as usize;
        }
        let mut b = Block::default();
        let mut p = pc;
        while b.ops.len() < BLOCK_SLOTS_MAX
            && p & 3 == 0
            && p >= self.target.executable_base
            && p < self.code.end()
        {
            let Some(d) = self.code.get(p) else {
                break;
            };
            if !d.op.data {
                break;
            }
            b.ops.push((p, d.op));
            b.slots += d.op.cost as u64;
            b.instrs += d.op.instrs as u64;
            p += d.op.bytes as u32;
        }
        b.end = p;
        b.cut = b.ops.len() == BLOCK_SLOTS_MAX;
        let i = self.blocks.runs.len();
        self.blocks.runs.push(b);
        self.blocks.at.insert(pc, i as u32);
        i
    }

    /// Runs the straight run at `pc` when it has at least two slots and neither the cycle
    /// limit (`deadline`) nor the interrupt poll can fire inside it; None (nothing done)
    /// otherwise. Accounts each slot in `time`, `slots` and `instrs` as the slot-by-slot loop
    /// does.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn run_block(
        &mut self,
        r: &mut Regs,
        acc: &mut AmpAcc,
        ctx: u32,
        pc: u32,
        time: &mut u64,
        slots: &mut u64,
        instrs: &mut u64,
        deadline: u64,
    ) -> Result<Option<After>, Fault> {
        let i = self.block_at(pc);
        let b = &self.blocks.runs[i];
        let poll = *instrs % crate::INTERRUPT_POLL;
        if b.ops.len() < 2
            || time.saturating_add(SLOT * b.slots) > deadline
            || poll == 0
            || poll + b.instrs >= crate::INTERRUPT_POLL
        {
            return Ok(None);
        }
        let (total, mut after) = (
            b.slots,
            After {
                pc: b.end,
                head: b.cut,
            },
        );
        let ops = std::mem::take(&mut self.blocks.runs[i].ops);
        let epoch = self.code.epoch();
        // The counters in locals (registers) while the run goes, written back after it.
        let (mut t, mut sl, mut ins) = (*time, *slots, *instrs);
        let mut used = 0u64;
        let mut result = Ok(());
        for (k, &(q, op)) in ops.iter().enumerate() {
            if k > 0 && self.code.epoch() != epoch {
                // A store forgot cached code: the rest from the cache, slot by slot.
                after = After { pc: q, head: false };
                break;
            }
            t += SLOT * op.cost as u64;
            sl += op.cost as u64;
            ins += op.instrs as u64;
            used += op.cost as u64;
            if let Err(trap) = self.exec_data_slot(r, acc, &op, SlotAt::Cached(q), ctx, t) {
                result = Err(self.fault(Context::Worker(ctx as u8), q, *trap));
                break;
            }
            if self.worker_stall(&mut t, &mut sl) && t + SLOT * (total - used) > deadline {
                after = After {
                    pc: q + op.bytes as u32,
                    head: false,
                };
                break;
            }
        }
        (*time, *slots, *instrs) = (t, sl, ins);
        // The epoch may have moved (the runs were then forgotten): put the list back only
        // where it came from.
        if let Some(b) = self.blocks.runs.get_mut(i)
            && self.blocks.epoch == self.code.epoch()
        {
            b.ops = ops;
        }
        result.map(|()| Some(after))
    }

    /// The body of the `rpt` at `pc` (`body` slots), taken from the cache (resolved on first
    /// use); give it back with [`Tile::keep_body`]. Faults (in `cx`) as fetching it does.
    pub(super) fn take_body(&mut self, pc: u32, body: u8, cx: Context) -> Result<Body, Fault> {
        self.blocks.sync(self.code.epoch());
        if let Some(b) = self.blocks.bodies.remove(&pc) {
            return Ok(b);
        }
        let body_start = pc + 4;
        let end = self
            .rpt_body_end(body_start, body)
            .map_err(|t| self.fault(cx, body_start, *t))?;
        let mut buf = Vec::with_capacity(body as usize);
        let mut q = body_start;
        while q < end {
            let d = self.fetch(q).map_err(|t| self.fault(cx, q, *t))?;
            buf.push((q, d));
            q += d.bytes;
        }
        let stream = stream_body::stream_body(&buf);
        Ok(Body { end, buf, stream })
    }

    /// Puts back a body from [`Tile::take_body`], unless the code changed while it ran.
    pub(super) fn keep_body(&mut self, pc: u32, b: Body) {
        if self.blocks.epoch == self.code.epoch() {
            self.blocks.bodies.insert(pc, b);
        }
    }
}
