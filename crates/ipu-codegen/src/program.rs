//! The bulk-synchronous tile program: buffers on tiles, and a sequence of steps (host
//! exchange, exchange, compute) that every active tile goes through together.

use std::collections::BTreeMap;
use std::fmt;

use ipu_target::AmpMode;

use crate::error::MemoryRegion;
use ipu_kernels::Kernel;

/// A buffer's index in [`TileProgram::buffers`] (defined with the vertex states that name
/// buffers).
pub use ipu_kernels::BufferId;
pub use ipu_kernels::state::{State, StateWord};

/// Where a buffer must be placed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Region {
    /// Anywhere in data memory.
    Any,
    /// Interleaved memory (read by `ampw` or 128-bit loads).
    Interleaved,
}

impl From<Region> for MemoryRegion {
    fn from(r: Region) -> MemoryRegion {
        match r {
            Region::Any => MemoryRegion::Any,
            Region::Interleaved => MemoryRegion::Interleaved,
        }
    }
}

/// A piece of tile memory the program uses.
#[derive(Debug, Clone, PartialEq)]
pub struct Buffer {
    /// Tile.
    pub tile: u32,
    /// Bytes, including read slack.
    pub bytes: u32,
    /// Placement constraint.
    pub region: Region,
    /// What it holds (a value's name, `stage:...`, ...), for the text form.
    pub name: String,
    /// The user's value or operation it serves (`%name`), for messages.
    pub op: String,
    /// First step that uses it.
    pub first: usize,
    /// Last step that uses it.
    pub last: usize,
    /// Buffers of one placement group (on different tiles, of equal size) sit at the same
    /// address, so one multicast exchange row can fill them all.
    pub group: Option<u32>,
    /// Live over every step of every call: a constant `initialize` writes once, which every
    /// `run` reads.
    pub resident: bool,
}

/// One transfer between host pages and a tile buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HostCopy {
    /// Page.
    pub page: u16,
    /// Byte offset in the page.
    pub page_offset: u32,
    /// Tile buffer.
    pub buffer: BufferId,
    /// Byte offset in the buffer.
    pub offset: u32,
    /// Bytes (a multiple of 4).
    pub bytes: u32,
}

/// One tile-to-tile copy of an exchange phase.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Copy {
    /// Source buffer (its tile sends).
    pub src: BufferId,
    /// Byte offset in the source.
    pub src_offset: u32,
    /// Destination buffer (its tile receives).
    pub dst: BufferId,
    /// Byte offset in the destination.
    pub dst_offset: u32,
    /// Bytes (a multiple of 4).
    pub bytes: u32,
}

/// What the supervisor of one tile does in a compute step.
#[derive(Debug, Clone, PartialEq)]
pub enum SupOp {
    /// Set the AMP mode.
    AmpCfg(AmpMode),
    /// Set the supervisor's FP8 configuration (for `ampw` of FP8 weights).
    SetFp8(ipu_isa::Fp8Format, i8),
    /// Load the AMP weights from a buffer offset.
    AmpW(BufferId, u32),
    /// Start a worker: the kernel, its vertex state, and the planner's estimate of its issue
    /// slots.
    Run(Kernel, State, u32),
    /// Start all six workers on one kernel and one vertex state (each finds its part from its
    /// context id), with the estimate of the slowest worker's issue slots.
    RunAll(Kernel, State, u32),
    /// Wait for every worker.
    WaitW,
}

impl SupOp {
    /// When the `waitw` at `ops[i]` is followed by an AMP round of flash attention (`ampw`,
    /// then a launch of [`Kernel::AmpTableDense`] or [`Kernel::AmpChain`]), the round's weights and kernel: the
    /// supervisor sets the weight address and the vertex state while the workers before the
    /// `waitw` still run.
    pub fn set_up_ahead(ops: &[SupOp], i: usize) -> Option<(BufferId, u32, Kernel)> {
        match (ops.get(i), ops.get(i + 1), ops.get(i + 2)) {
            (
                Some(SupOp::WaitW),
                Some(SupOp::AmpW(b, off)),
                Some(SupOp::RunAll(
                    k @ (Kernel::AmpTableDense { .. } | Kernel::AmpChain { .. }),
                    _,
                    _,
                )),
            ) => Some((*b, *off, *k)),
            _ => None,
        }
    }

    /// The kernel and vertex state of a worker launch.
    pub fn launch(&self) -> Option<(Kernel, &State)> {
        match self {
            SupOp::Run(k, st, _) | SupOp::RunAll(k, st, _) => Some((*k, st)),
            _ => None,
        }
    }
}

/// One bulk-synchronous step.
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    /// A host-exchange point.
    Host {
        /// What it moves (inputs or outputs).
        name: String,
        /// Transfers, both directions.
        copies: Vec<(HostCopy, bool)>,
    },
    /// An exchange phase.
    Exchange {
        /// What it moves, for logs.
        name: String,
        /// The copies.
        copies: Vec<Copy>,
    },
    /// A compute set, then a sync.
    Compute {
        /// The operation it belongs to.
        name: String,
        /// Per tile, the supervisor's work (shared by the instances of a repeated step).
        tiles: std::sync::Arc<BTreeMap<u32, Vec<SupOp>>>,
        /// The planner's estimate of its cycles (the slowest tile).
        estimated_cycles: u64,
    },
}

/// The lowered program.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct TileProgram {
    /// Tiles taking part: `0..tiles_used`.
    pub tiles_used: u32,
    /// Buffers.
    pub buffers: Vec<Buffer>,
    /// Steps in order.
    pub steps: Vec<Step>,
    /// Host page sizes.
    pub pages: Vec<u64>,
    /// The user's operation that buffers added now serve (set by lowering before each
    /// operation; recorded in [`Buffer::op`]).
    pub origin: String,
    /// The first `init_steps` steps form the `initialize` program (writing the constants),
    /// the rest the `run` program.
    pub init_steps: usize,
    /// Steps that repeat an earlier step (a repeated layer's, `crate::repeat`): step `j` maps
    /// to the step `i < j` whose copy it is, with the same buffers, so one exchange schedule
    /// and one set of tables serve both, and the tiles' supervisor programs call one
    /// subroutine for every instance of the block. A buffer only the block uses is live over
    /// its first instance's steps ([`TileProgram::compute_liveness`]).
    pub same_as: BTreeMap<usize, usize>,
}

impl TileProgram {
    /// Adds a buffer.
    pub fn buffer(&mut self, tile: u32, bytes: u32, region: Region, name: String) -> BufferId {
        self.buffers.push(Buffer {
            group: None,
            resident: false,
            tile,
            bytes,
            region,
            name,
            op: self.origin.clone(),
            first: usize::MAX,
            last: 0,
        });
        BufferId(self.buffers.len() as u32 - 1)
    }

    /// Records that step `step` uses `b`.
    pub fn touch(&mut self, b: BufferId, step: usize) {
        let buf = &mut self.buffers[b.0 as usize];
        buf.first = buf.first.min(step);
        buf.last = buf.last.max(step);
    }

    /// Recomputes every buffer's live range from the steps.
    pub fn compute_liveness(&mut self) {
        for b in &mut self.buffers {
            b.first = usize::MAX;
            b.last = 0;
        }
        let steps = std::mem::take(&mut self.steps);
        // A buffer a repeated block alone uses is written before it is read in every
        // instance: live over its steps of the first instance, which stand for every
        // instance's (the instances run one after another, at the same relative steps).
        let mut outside = vec![self.same_as.is_empty(); self.buffers.len()];
        if let (Some(&b0), Some(&b1)) = (self.same_as.values().min(), self.same_as.values().max()) {
            for (i, s) in steps.iter().enumerate() {
                let in_block = (b0..=b1).contains(&i) || self.same_as.contains_key(&i);
                if !in_block {
                    visit_step_buffers(s, &mut |b| outside[b.0 as usize] = true);
                }
            }
        }
        // Per step of the first instance, the buffers it uses that steps outside the block use
        // too: what its repeats touch.
        let mut shared: BTreeMap<usize, Vec<BufferId>> = BTreeMap::new();
        for (i, s) in steps.iter().enumerate() {
            if let Some(first) = self.same_as.get(&i) {
                for &b in shared.get(first).into_iter().flatten() {
                    self.touch(b, i);
                }
                continue;
            }
            let mut seen = Vec::new();
            visit_step_buffers(s, &mut |b| {
                self.touch(b, i);
                if outside[b.0 as usize] {
                    seen.push(b);
                }
            });
            if !self.same_as.is_empty() {
                seen.sort_unstable();
                seen.dedup();
                shared.insert(i, seen);
            }
        }
        for b in self.buffers.iter_mut().filter(|b| b.resident) {
            (b.first, b.last) = (0, steps.len().saturating_sub(1));
        }
        self.steps = steps;
    }

    /// Checks the program's invariants: every buffer used is on the tile that uses it, copies
    /// stay inside their buffers and are word multiples, every buffer is used.
    pub fn check(&self) -> Result<(), String> {
        let get = |b: BufferId| {
            self.buffers
                .get(b.0 as usize)
                .ok_or_else(|| format!("unknown buffer {b}"))
        };
        for (i, s) in self.steps.iter().enumerate() {
            match self.same_as.get(&i) {
                Some(&first) if first < i && self.steps[first] == *s => continue,
                Some(_) => return Err(format!("step {i} differs from the step it repeats")),
                None => {}
            }
            match s {
                Step::Host { copies, .. } => {
                    for (c, _) in copies {
                        let b = get(c.buffer)?;
                        if c.offset + c.bytes > b.bytes || c.bytes % 4 != 0 || c.offset % 4 != 0 {
                            return Err(format!(
                                "step {i}: host copy {c} outside {} ({} bytes)",
                                b.name, b.bytes
                            ));
                        }
                        if b.tile >= self.tiles_used {
                            return Err(format!(
                                "step {i}: buffer {} on inactive tile {}",
                                b.name, b.tile
                            ));
                        }
                    }
                }
                Step::Exchange { copies, .. } => {
                    for c in copies {
                        let (s, d) = (get(c.src)?, get(c.dst)?);
                        if c.src_offset + c.bytes > s.bytes || c.dst_offset + c.bytes > d.bytes {
                            return Err(format!("step {i}: copy {c} outside its buffers"));
                        }
                        if c.bytes == 0
                            || c.bytes % 4 != 0
                            || c.src_offset % 4 != 0
                            || c.dst_offset % 4 != 0
                        {
                            return Err(format!("step {i}: copy {c} is not word aligned"));
                        }
                    }
                }
                Step::Compute { tiles, .. } => {
                    for (tile, ops) in tiles.iter() {
                        check_chains(ops).map_err(|e| format!("step {i}: tile {tile}: {e}"))?;
                        for op in ops {
                            let bufs: Vec<BufferId> = match op {
                                SupOp::AmpW(b, _) => vec![*b],
                                SupOp::Run(k, st, _) | SupOp::RunAll(k, st, _) => {
                                    if k.state_kind() != st.kind() {
                                        return Err(format!(
                                            "step {i}: tile {tile}: {k:?} launched with a {:?} state",
                                            st.kind()
                                        ));
                                    }
                                    st.buffers().collect()
                                }
                                _ => vec![],
                            };
                            for b in bufs {
                                if get(b)?.tile != *tile {
                                    return Err(format!(
                                        "step {i}: tile {tile} uses {} of tile {}",
                                        get(b)?.name,
                                        get(b)?.tile
                                    ));
                                }
                            }
                        }
                    }
                }
            }
        }
        Ok(())
    }
}

/// Bytes of an input row and of an output row of a chain of AMP rounds: a round's output
/// pointer then stops at its last row, where the next round stores it
/// ([`Kernel::AmpChain`]).
pub(crate) const AMP_CHAIN_ROW_BYTES: u32 = 32;

/// A tile's chains of AMP rounds ([`Kernel::AmpChain`]) keep the workers' registers from
/// round to round: a round that carries the last row of the one before must be launched
/// right after it (no other launch between), with the other parity, the same rows, as input
/// and output rows of [`AMP_CHAIN_ROW_BYTES`]; a chain's first round is even; a
/// round that takes its zero partials-in from the chain follows a first pass of the chain.
fn check_chains(ops: &[SupOp]) -> Result<(), String> {
    // The chain's last round so far: its kernel, its rows, and whether one of its rounds set
    // zeros.
    let mut last: Option<(Kernel, u32, bool)> = None;
    for (k, st) in ops.iter().filter_map(|op| op.launch()) {
        let Kernel::AmpChain {
            partials,
            carry,
            drain,
            odd,
            zeros,
            ..
        } = k
        else {
            last = None;
            continue;
        };
        let State::AmpChain(state) = st else {
            return Err(format!("{k:?} launched with a {:?} state", st.kind()));
        };
        let row = AMP_CHAIN_ROW_BYTES;
        if state.row_bytes != [row, row] {
            return Err(format!(
                "{k:?}: rows of {:?} bytes, not {row}",
                state.row_bytes
            ));
        }
        let had_zeros = match (carry, last) {
            (false, _) if odd => return Err(format!("{k:?}: a chain's first round is odd")),
            (false, _) => false,
            (true, None) => {
                return Err(format!(
                    "{k:?}: carries a row, but no round of its chain is before it"
                ));
            }
            (true, Some((before, rows_before, had_zeros))) => {
                let Kernel::AmpChain {
                    drain: false,
                    odd: odd_before,
                    ..
                } = before
                else {
                    return Err(format!("{k:?}: carries a row after {before:?}"));
                };
                if rows_before != state.rows || odd_before == odd {
                    return Err(format!("{k:?}: carries a row after {before:?}"));
                }
                had_zeros
            }
        };
        if zeros && (partials || !had_zeros) {
            return Err(format!(
                "{k:?}: no round of its chain set the zero partials-in"
            ));
        }
        last = (!drain).then_some((k, state.rows, had_zeros || !partials));
    }
    Ok(())
}

/// Buffers a step reads or writes (with repeats).
pub fn step_buffers(s: &Step) -> Vec<BufferId> {
    let mut out = Vec::new();
    visit_step_buffers(s, &mut |b| out.push(b));
    out
}

/// Calls `f` on every buffer a step reads or writes (with repeats, in the order of
/// [`step_buffers`]), without collecting them: a compute step of a large matmul names millions.
pub fn visit_step_buffers(s: &Step, f: &mut impl FnMut(BufferId)) {
    match s {
        Step::Host { copies, .. } => copies.iter().for_each(|(c, _)| f(c.buffer)),
        Step::Exchange { copies, .. } => {
            for c in copies {
                f(c.src);
                f(c.dst);
            }
        }
        Step::Compute { tiles, .. } => {
            for op in tiles.values().flatten() {
                match op {
                    SupOp::AmpW(b, _) => f(*b),
                    SupOp::Run(_, st, _) | SupOp::RunAll(_, st, _) => {
                        st.buffers().for_each(&mut *f)
                    }
                    _ => {}
                }
            }
        }
    }
}

impl TileProgram {
    /// One line of counts per step: what logs and build reports carry (the whole text form of
    /// a large program runs to millions of lines).
    pub fn summary(&self) -> String {
        let mut out = format!(
            "tile_program tiles_used={} buffers={} steps={}\n",
            self.tiles_used,
            self.buffers.len(),
            self.steps.len()
        );
        for (i, s) in self.steps.iter().enumerate() {
            let line = match s {
                Step::Host { name, copies } => format!("host {name} copies={}", copies.len()),
                Step::Exchange { name, copies } => {
                    let bytes: u64 = copies.iter().map(|c| c.bytes as u64).sum();
                    format!("exchange {name} copies={} bytes={bytes}", copies.len())
                }
                Step::Compute {
                    name,
                    tiles,
                    estimated_cycles,
                } => {
                    let runs: usize = tiles
                        .values()
                        .flatten()
                        .map(|x| match x {
                            SupOp::Run(..) => 1,
                            SupOp::RunAll(..) => ipu_target::WORKER_CONTEXTS as usize,
                            _ => 0,
                        })
                        .sum();
                    format!(
                        "compute {name} tiles={} vertices={runs} estimated_cycles={estimated_cycles}",
                        tiles.len()
                    )
                }
            };
            out += &format!("  step {i}: {line}\n");
        }
        out
    }
}

impl fmt::Display for Region {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Region::Any => "any",
            Region::Interleaved => "interleaved",
        })
    }
}

impl fmt::Display for Copy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} -> {} bytes={}",
            StateWord::Addr(self.src, self.src_offset),
            StateWord::Addr(self.dst, self.dst_offset),
            self.bytes
        )
    }
}

impl fmt::Display for HostCopy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "page{}+{} <-> {} bytes={}",
            self.page,
            self.page_offset,
            StateWord::Addr(self.buffer, self.offset),
            self.bytes
        )
    }
}

impl fmt::Display for SupOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SupOp::AmpCfg(mode) => write!(f, "ampcfg {mode:?}"),
            SupOp::SetFp8(format, scale) => write!(f, "setfp8 {format:?} scale={scale}"),
            SupOp::AmpW(b, off) => write!(f, "ampw {}", StateWord::Addr(*b, *off)),
            SupOp::Run(k, st, slots) => write!(f, "run {k:?} {st} slots={slots}"),
            SupOp::RunAll(k, st, slots) => write!(f, "runall {k:?} {st} slots={slots}"),
            SupOp::WaitW => f.write_str("waitw"),
        }
    }
}

/// The whole text form: every buffer (tile, bytes, region, live steps, what it holds, the
/// user operation it serves), then every step with its transfers or, per tile, its
/// supervisor operations and their vertex states.
impl fmt::Display for TileProgram {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "tile_program tiles_used={} pages={:?}",
            self.tiles_used, self.pages
        )?;
        if self.init_steps > 0 {
            writeln!(f, "  initialize: steps 0..{}", self.init_steps)?;
        }
        for (i, b) in self.buffers.iter().enumerate() {
            write!(
                f,
                "  b{i} tile={} bytes={} region={} live={}..={} {}",
                b.tile, b.bytes, b.region, b.first, b.last, b.name
            )?;
            if let Some(g) = b.group {
                write!(f, " group={g}")?;
            }
            if b.resident {
                f.write_str(" resident")?;
            }
            if b.op != b.name {
                write!(f, " op={}", b.op)?;
            }
            writeln!(f)?;
        }
        let buffer = |b: BufferId| {
            let t = self.buffers.get(b.0 as usize).map_or(u32::MAX, |x| x.tile);
            (b, t)
        };
        for (i, s) in self.steps.iter().enumerate() {
            match s {
                Step::Host { name, copies } => {
                    writeln!(f, "step {i}: host {name}")?;
                    for (c, to_host) in copies {
                        let at = StateWord::Addr(c.buffer, c.offset);
                        let page = format!("page{}+{}", c.page, c.page_offset);
                        let (from, to) = if *to_host {
                            (at.to_string(), page)
                        } else {
                            (page, at.to_string())
                        };
                        writeln!(f, "  {from} -> {to} bytes={}", c.bytes)?;
                    }
                }
                Step::Exchange { name, copies } => {
                    writeln!(f, "step {i}: exchange {name}")?;
                    for c in copies {
                        let ((sb, st), (db, dt)) = (buffer(c.src), buffer(c.dst));
                        writeln!(
                            f,
                            "  tile {st} {} -> tile {dt} {} bytes={}",
                            StateWord::Addr(sb, c.src_offset),
                            StateWord::Addr(db, c.dst_offset),
                            c.bytes
                        )?;
                    }
                }
                Step::Compute {
                    name,
                    tiles,
                    estimated_cycles,
                } => {
                    writeln!(
                        f,
                        "step {i}: compute {name} estimated_cycles={estimated_cycles}"
                    )?;
                    for (tile, ops) in tiles.iter() {
                        writeln!(f, "  tile {tile}:")?;
                        for op in ops {
                            writeln!(f, "    {op}")?;
                        }
                    }
                }
            }
        }
        Ok(())
    }
}
