//! Emission: the tile runtime (program entry trampolines), the kernels, each tile's supervisor
//! programs and support data (vertex states, exchange and host tables), assembled into tile
//! images.
//!
//! Tile memory from the bottom: entry trampolines at [`RUNTIME_BASE`] (`startup`,
//! `initialize`, `run`, one word each, the same address on every tile), the kernels (linked
//! once, the same addresses on every tile), the tile's supervisor programs, then support data,
//! then buffers.

use std::collections::{BTreeMap, BTreeSet};

use ahash::AHashMap;

use ipu_isa::tables::{HostDirection, HostRow, HostTable};
use ipu_isa::{Instr, MReg};
use ipu_package::{Segment, TileImage, TileImages};
use ipu_target::Target;

use crate::error::{CodegenError, MemoryRegion};
use crate::exchange::Scheduled;
use crate::place::TileSupport;
use crate::program::{BufferId, State, StateWord, Step, SupOp, TileProgram};
use ipu_kernels::code::{Code, Laid};
use ipu_kernels::{self as kernels, Kernel};
use rayon::prelude::*;

/// Address of the entry trampolines.
pub const RUNTIME_BASE: u32 = ipu_target::MEMORY_BASE;
/// The programs every package has, in entry order.
pub const PROGRAMS: [&str; 3] = ["startup", "initialize", "run"];
/// Bytes of the trampolines (one `bri` per program, padded to 16).
pub const RUNTIME_BYTES: u32 = 16;

/// The kernels linked into every active tile, with their entry addresses.
#[derive(Debug, Clone)]
pub struct KernelLibrary {
    /// Entry of each kernel.
    pub entries: BTreeMap<Kernel, u32>,
    /// The laid-out code, in entry order.
    pub code: Vec<(Kernel, Laid)>,
    /// One past the last kernel byte.
    pub end: u32,
}

/// The kernels `program` launches: each is specialised and linked once, whatever the number of
/// launches.
/// Launches are inserted one by one, with no list of every launch in between (the 2048³
/// matmul launches about two million).
pub fn plan_kernels(program: &TileProgram) -> BTreeSet<Kernel> {
    let mut used = BTreeSet::new();
    let mut last = None;
    for s in &program.steps {
        if let Step::Compute { tiles, .. } = s {
            for op in tiles.values().flatten() {
                if let SupOp::Run(k, _, _) | SupOp::RunAll(k, _, _) = op
                    // Launches repeat one kernel in long runs: the set is asked once per run.
                    && last != Some(*k)
                {
                    used.insert(*k);
                    last = Some(*k);
                }
            }
        }
    }
    used
}

/// Specialises and lays out the kernels `used`, after the entry trampolines.
pub fn compile_kernels(used: &BTreeSet<Kernel>) -> Result<KernelLibrary, CodegenError> {
    let mut at = RUNTIME_BASE + RUNTIME_BYTES;
    let mut entries = BTreeMap::new();
    let mut code = Vec::new();
    for &k in used {
        let laid = kernels::generate(k).lay_out(at)?;
        entries.insert(k, at);
        at += laid.bytes.len() as u32;
        at = at.div_ceil(8) * 8;
        code.push((k, laid));
    }
    Ok(KernelLibrary {
        entries,
        code,
        end: at,
    })
}

/// Support data of one tile: vertex states, then exchange tables, then host tables.
#[derive(Debug, Clone, Default)]
pub struct SupportLayout {
    /// Address of each `Run`'s state, in program order.
    pub states: Vec<u32>,
    /// Address of each step's exchange or host table, by step index.
    pub tables: BTreeMap<usize, u32>,
    /// First byte.
    pub base: u32,
    /// One past the last byte.
    pub end: u32,
}

impl SupportLayout {
    /// The same layout from `base` instead (its own base being 16-byte aligned, every state
    /// and table keeps its offset from it).
    pub fn rebased(&self, base: u32) -> SupportLayout {
        let to = base.div_ceil(16) * 16;
        let shift = |a: u32| a - self.base + to;
        SupportLayout {
            states: self.states.iter().map(|&a| shift(a)).collect(),
            tables: self.tables.iter().map(|(&i, &a)| (i, shift(a))).collect(),
            base: to,
            end: shift(self.end),
        }
    }
}

/// Per step, which rows of its tables belong to which tile: computed once, so that per-tile
/// work does not scan every copy of the program.
#[derive(Debug, Clone, Default)]
pub struct StepIndex {
    /// Per step, its exchange transfers (multicast merged; empty for other steps).
    pub transfers: Vec<Vec<crate::exchange::Transfer>>,
    /// Per step, per sending tile, the indices of its transfers.
    pub exchange: Vec<BTreeMap<u32, Vec<usize>>>,
    /// Per step, per tile, the indices of its host copies.
    pub host: Vec<BTreeMap<u32, Vec<usize>>>,
}

/// Indexes the tables of `program` by tile.
pub fn index(program: &TileProgram) -> StepIndex {
    use rayon::prelude::*;
    // The steps' transfers at once (the merge of a phase's copies is the costly part).
    let per_step: Vec<_> = program
        .steps
        .par_iter()
        .map(|s| match s {
            Step::Exchange { copies, .. } => crate::exchange::transfers(program, copies),
            _ => Vec::new(),
        })
        .collect();
    let mut idx = StepIndex::default();
    for (s, transfers) in program.steps.iter().zip(per_step) {
        let mut ex: BTreeMap<u32, Vec<usize>> = BTreeMap::new();
        let mut host: BTreeMap<u32, Vec<usize>> = BTreeMap::new();
        match s {
            Step::Exchange { .. } => {
                for (i, t) in transfers.iter().enumerate() {
                    ex.entry(program.buffers[t.src.0 as usize].tile)
                        .or_default()
                        .push(i);
                }
            }
            Step::Host { copies, .. } => {
                for (i, (c, _)) in copies.iter().enumerate() {
                    host.entry(program.buffers[c.buffer.0 as usize].tile)
                        .or_default()
                        .push(i);
                }
            }
            Step::Compute { .. } => {}
        }
        idx.transfers.push(transfers);
        idx.exchange.push(ex);
        idx.host.push(host);
    }
    idx
}

/// Bytes of the table of `tile` in step `i`, 0 for a compute step.
fn table_bytes(program: &TileProgram, idx: &StepIndex, tile: u32, i: usize) -> u32 {
    let rows = |m: &BTreeMap<u32, Vec<usize>>| m.get(&tile).map_or(0, |v| v.len() as u32);
    match &program.steps[i] {
        Step::Exchange { .. } => {
            ipu_isa::tables::EXCHANGE_HEADER_BYTES
                + idx.exchange[i].get(&tile).map_or(0, |v| {
                    v.iter().map(|&k| idx.transfers[i][k].row_bytes()).sum()
                })
        }
        Step::Host { .. } => {
            ipu_isa::tables::HOST_HEADER_BYTES
                + ipu_isa::tables::HOST_ROW_BYTES * rows(&idx.host[i])
        }
        Step::Compute { .. } => 0,
    }
}

/// Lays out the support data of `tile` from `base`.
pub fn support_layout(
    program: &TileProgram,
    idx: &StepIndex,
    tile: u32,
    base: u32,
) -> SupportLayout {
    let mut at = base.div_ceil(16) * 16;
    let mut l = SupportLayout {
        base: at,
        ..Default::default()
    };
    let mut seen: AHashMap<&State, u32> = AHashMap::new();
    let mut seen_chains: AHashMap<Vec<&State>, u32> = AHashMap::new();
    for s in &program.steps {
        if let Step::Compute { tiles, .. } = s
            && let Some(ops) = tiles.get(&tile)
        {
            let launches: Vec<(Kernel, &State)> = ops.iter().filter_map(|op| op.launch()).collect();
            let mut j = 0;
            while j < launches.len() {
                let (k, st) = launches[j];
                if let Kernel::AmpChain { carry: false, .. } = k {
                    // A chain's tables are contiguous, each round's after the one before
                    // (a worker steps from its entry of one to its entry of the next), so a
                    // chain is stored once as a whole.
                    let len = chain_len(&launches[j..]);
                    let chain: Vec<&State> = launches[j..j + len].iter().map(|l| l.1).collect();
                    let a = *seen_chains.entry(chain).or_insert_with(|| {
                        let a = at;
                        at += len as u32 * kernels::AmpChainState::TABLE_BYTES;
                        a
                    });
                    l.states.extend(
                        (0..len as u32).map(|i| a + i * kernels::AmpChainState::TABLE_BYTES),
                    );
                    j += len;
                    continue;
                }
                // Identical states (the same words, so the same bytes once placed) are
                // stored once: kernels only read their state. (Equal words of two layouts
                // are stored twice: rare, and harmless.)
                let a = *seen.entry(st).or_insert_with(|| {
                    let a = at;
                    at += 4 * st.word_count() as u32;
                    a
                });
                l.states.push(a);
                j += 1;
            }
        }
    }
    for i in 0..program.steps.len() {
        // A repeated step's tables are its first instance's (the same copies, scheduled alike).
        if let Some(first) = program.same_as.get(&i) {
            if let Some(&a) = l.tables.get(first) {
                l.tables.insert(i, a);
            }
            continue;
        }
        let bytes = table_bytes(program, idx, tile, i);
        if bytes > 0 {
            at = at.div_ceil(4) * 4;
            l.tables.insert(i, at);
            at += bytes;
        }
    }
    l.end = at;
    l
}

/// The rounds of the chain of AMP rounds `launches` starts with (its first round, then the
/// rounds that carry the one before's last row, to the one that drains).
fn chain_len(launches: &[(Kernel, &State)]) -> usize {
    if let Kernel::AmpChain { drain: true, .. } = launches[0].0 {
        return 1;
    }
    let mut len = 1;
    while let Some((
        Kernel::AmpChain {
            carry: true, drain, ..
        },
        _,
    )) = launches.get(len)
    {
        len += 1;
        if *drain {
            break;
        }
    }
    len
}

/// The supervisor programs of `tile`: `(startup, initialize, run)` code. `addr` gives buffer
/// addresses (zero while sizing).
pub fn supervisor_code(
    program: &TileProgram,
    tile: u32,
    kernels: &KernelLibrary,
    support: &SupportLayout,
    addr: &dyn Fn(BufferId) -> u32,
) -> (Code, Code, Code) {
    let (m1, m2, m3) = (MReg(1), MReg(2), MReg(3));
    let mut startup = Code::new();
    startup.op(Instr::Sync).op(Instr::Halt);
    let mut init = Code::new();
    if program.init_steps == 0 {
        init.op(Instr::Sync);
    }
    let mut main = Code::new();
    let mut state_index = 0;
    // The kernel whose entry is in $m2, to skip reloading it between launches.
    let mut entry: Option<Kernel> = None;
    // A repeated block's steps are one subroutine every layer calls (`call $m10`): its first
    // instance's steps, emitted once after the `run` program's `halt`.
    let block = repeated_block(program);
    let mut sub = Code::new();
    let block_label = main.label();
    for (i, s) in program.steps.iter().enumerate() {
        if let Some(b) = &block {
            let first = program.same_as.get(&i).copied().unwrap_or(i);
            if b.contains(&first) {
                if first == b.start {
                    main.branch(
                        Instr::Call {
                            link: BLOCK_LINK,
                            target: 0,
                        },
                        block_label,
                    );
                }
                if i != first {
                    state_index += launches_on(s, tile);
                    entry = None;
                    continue;
                }
                if i == b.start {
                    entry = None;
                }
            }
        }
        // The first `init_steps` steps are the `initialize` program (they launch no kernels).
        let run = if i < program.init_steps {
            &mut init
        } else if block.as_ref().is_some_and(|b| b.contains(&i)) {
            &mut sub
        } else {
            &mut main
        };
        run.op(Instr::Mark { id: i as u16 });
        match s {
            Step::Host { .. } => {
                run.op(Instr::Setzi {
                    d: m1,
                    imm: support.tables[&i],
                });
                run.op(Instr::HostX { table: m1 });
            }
            Step::Exchange { .. } => {
                run.op(Instr::Setzi {
                    d: m1,
                    imm: support.tables[&i],
                });
                run.op(Instr::Exch { table: m1 });
            }
            Step::Compute { tiles, .. } => {
                let ops = tiles.get(&tile).map(|v| v.as_slice()).unwrap_or(&[]);
                // The next `ampw` address and launch already set (`SupOp::set_up_ahead`).
                let (mut ampw_set, mut launch_set) = (false, false);
                for (j, op) in ops.iter().enumerate() {
                    match op {
                        SupOp::AmpCfg(mode) => {
                            run.op(Instr::AmpCfg { mode: *mode });
                        }
                        SupOp::SetFp8(format, scale) => {
                            run.op(Instr::SetFp8 {
                                format: *format,
                                scale: *scale,
                            });
                        }
                        SupOp::AmpW(b, off) => {
                            if !std::mem::take(&mut ampw_set) {
                                run.op(Instr::Setzi {
                                    d: MReg(4),
                                    imm: addr(*b) + off,
                                });
                            }
                            run.op(Instr::AmpW { base: MReg(4) });
                        }
                        SupOp::RunAll(..) if std::mem::take(&mut launch_set) => {
                            run.op(Instr::RunAll {
                                entry: m2,
                                state: m3,
                            });
                            state_index += 1;
                        }
                        SupOp::Run(k, _, _) | SupOp::RunAll(k, _, _) => {
                            if entry != Some(*k) {
                                run.op(Instr::Setzi {
                                    d: m2,
                                    imm: kernels.entries[k],
                                });
                                entry = Some(*k);
                            }
                            run.op(Instr::Setzi {
                                d: m3,
                                imm: support.states[state_index],
                            });
                            run.op(if matches!(op, SupOp::RunAll(..)) {
                                Instr::RunAll {
                                    entry: m2,
                                    state: m3,
                                }
                            } else {
                                Instr::Run {
                                    entry: m2,
                                    state: m3,
                                }
                            });
                            state_index += 1;
                        }
                        SupOp::WaitW => {
                            if let Some((b, off, k)) = SupOp::set_up_ahead(ops, j) {
                                run.op(Instr::Setzi {
                                    d: MReg(4),
                                    imm: addr(b) + off,
                                });
                                if entry != Some(k) {
                                    run.op(Instr::Setzi {
                                        d: m2,
                                        imm: kernels.entries[&k],
                                    });
                                    entry = Some(k);
                                }
                                run.op(Instr::Setzi {
                                    d: m3,
                                    imm: support.states[state_index],
                                });
                                (ampw_set, launch_set) = (true, true);
                            }
                            run.op(Instr::WaitW);
                        }
                    }
                }
                run.op(Instr::Sync);
            }
        }
    }
    init.op(Instr::Halt);
    main.op(Instr::Halt);
    if block.is_some() {
        main.bind(block_label);
        main.append(&sub);
        main.op(Instr::Br { a: BLOCK_LINK });
    }
    (startup, init, main)
}

/// The supervisor register holding the return address of a repeated block's subroutine.
const BLOCK_LINK: MReg = MReg(10);

/// The steps of a repeated block's first instance (`TileProgram::same_as`), if any.
fn repeated_block(program: &TileProgram) -> Option<std::ops::Range<usize>> {
    let first = program.same_as.values().min()?;
    let last = program.same_as.values().max()?;
    Some(*first..last + 1)
}

/// Worker launches of `tile` in step `s`.
fn launches_on(s: &Step, tile: u32) -> usize {
    match s {
        Step::Compute { tiles, .. } => tiles.get(&tile).map_or(0, |ops| {
            ops.iter().filter(|op| op.launch().is_some()).count()
        }),
        _ => 0,
    }
}

/// Number of bulk-synchronous phases (global instructions) of the `run` program.
pub fn run_phases(program: &TileProgram) -> u32 {
    (program.steps.len() - program.init_steps) as u32
}

/// Number of bulk-synchronous phases of the `initialize` program: its steps (the constants'
/// host exchange), or one sync when it has none.
pub fn initialize_phases(program: &TileProgram) -> u32 {
    program.init_steps.max(1) as u32
}

/// The vertex states of `tile`, resolved: bytes to place at `support.base`. A state is written
/// where `support` put its first copy (addresses of first copies increase in program order).
pub fn state_bytes(
    program: &TileProgram,
    tile: u32,
    support: &SupportLayout,
    addr: &dyn Fn(BufferId) -> u32,
) -> Vec<u8> {
    let mut out = Vec::new();
    let mut launch = 0;
    for s in &program.steps {
        if let Step::Compute { tiles, .. } = s
            && let Some(ops) = tiles.get(&tile)
        {
            for op in ops {
                if let Some((_, st)) = op.launch() {
                    let at = support.states[launch];
                    launch += 1;
                    if at != support.base + out.len() as u32 {
                        // A repeat, stored at its first copy.
                        continue;
                    }
                    for w in st.words() {
                        let v = match w {
                            StateWord::Const(c) => c,
                            StateWord::Addr(b, off) => addr(b) + off,
                        };
                        out.extend_from_slice(&v.to_le_bytes());
                    }
                }
            }
        }
    }
    out
}

/// The host table of `tile` for host step `i`.
pub fn host_table(
    program: &TileProgram,
    idx: &StepIndex,
    tile: u32,
    i: usize,
    addr: &dyn Fn(BufferId) -> u32,
) -> HostTable {
    let mut t = HostTable::default();
    if let Step::Host { copies, .. } = &program.steps[i] {
        for &k in idx.host[i].get(&tile).map(|v| v.as_slice()).unwrap_or(&[]) {
            let (c, to_host) = copies[k];
            t.rows.push(HostRow {
                page: c.page,
                direction: if to_host {
                    HostDirection::ToHost
                } else {
                    HostDirection::ToDevice
                },
                page_offset: c.page_offset,
                tile_addr: addr(c.buffer) + c.offset,
                bytes: c.bytes,
            });
        }
    }
    t
}

/// Builds the image of one active tile.
#[allow(clippy::too_many_arguments)]
pub fn tile_image(
    program: &TileProgram,
    idx: &StepIndex,
    tile: u32,
    kernels: &KernelLibrary,
    support: &SupportLayout,
    supervisor: &[Laid; 3],
    exchanges: &BTreeMap<usize, Scheduled>,
    addr: &dyn Fn(BufferId) -> u32,
    target: &Target,
) -> Result<TileImage, CodegenError> {
    let _ = target;
    let mut code = Vec::new();
    // Trampolines.
    let mut tramp = Code::new();
    for laid in supervisor {
        tramp.op(Instr::Bri {
            target: laid.address,
        });
    }
    tramp.op(Instr::Nop);
    let t = tramp.lay_out(RUNTIME_BASE)?;
    code.extend_from_slice(&t.bytes);
    for (_, laid) in &kernels.code {
        code.resize((laid.address - RUNTIME_BASE) as usize, 0);
        code.extend_from_slice(&laid.bytes);
    }
    for laid in supervisor {
        code.resize((laid.address - RUNTIME_BASE) as usize, 0);
        code.extend_from_slice(&laid.bytes);
    }
    let mut data = state_bytes(program, tile, support, addr);
    for (i, s) in program.steps.iter().enumerate() {
        let Some(&at) = support.tables.get(&i) else {
            continue;
        };
        if program.same_as.contains_key(&i) {
            continue;
        }
        let bytes = match s {
            Step::Exchange { .. } => exchanges[&i].tables[&tile].to_bytes(),
            Step::Host { .. } => host_table(program, idx, tile, i, addr).to_bytes(),
            Step::Compute { .. } => continue,
        };
        let off = (at - support.base) as usize;
        if data.len() < off {
            data.resize(off, 0);
        }
        if data.len() != off {
            return Err(CodegenError::internal(format!(
                "tile {tile}: support data overlaps at {at:#x}"
            )));
        }
        data.extend_from_slice(&bytes);
    }
    if support.base + data.len() as u32 != support.end {
        return Err(CodegenError::internal(format!(
            "tile {tile}: support data is {} bytes, {} were sized",
            data.len(),
            support.end - support.base
        )));
    }
    let mut segments = vec![Segment {
        address: RUNTIME_BASE,
        bytes: code,
    }];
    if !data.is_empty() {
        segments.push(Segment {
            address: support.base,
            bytes: data,
        });
    }
    Ok(TileImage { segments })
}

/// Refuses kernels that end past executable memory.
pub fn check_kernels_fit(kernels: &KernelLibrary, target: &Target) -> Result<(), CodegenError> {
    if !target.in_executable(RUNTIME_BASE, kernels.end - RUNTIME_BASE) {
        return Err(CodegenError::DoesNotFit {
            op: None,
            tile: None,
            region: MemoryRegion::Executable,
            need_bytes: (kernels.end - RUNTIME_BASE) as u64,
            available_bytes: (target.executable_end - RUNTIME_BASE) as u64,
            detail: "the program's kernels, linked once for every tile".into(),
        });
    }
    Ok(())
}

/// One tile's sized support data and the addresses of its three supervisor programs.
pub type SizedTile = (SupportLayout, [u32; 3]);

/// Sizes every active tile's supervisor programs and support data (addresses do not change
/// sizes, so a provisional layout is used), refusing code past executable memory. Tiles are
/// independent: sized in parallel, collected in tile order.
pub fn size_tile_code(
    program: &TileProgram,
    index: &StepIndex,
    kernels: &KernelLibrary,
    target: &Target,
) -> Result<BTreeMap<u32, SizedTile>, CodegenError> {
    let zero = |_: BufferId| 0u32;
    let active: Vec<u32> = (0..program.tiles_used).collect();
    let sized: Result<Vec<_>, CodegenError> = active
        .par_iter()
        .map(|&t| {
            let sizing = support_layout(program, index, t, 0);
            let (s, i, r) = supervisor_code(program, t, kernels, &sizing, &zero);
            let mut at = kernels.end;
            let mut addrs = [0u32; 3];
            for (k, c) in [s, i, r].iter().enumerate() {
                addrs[k] = at;
                at += c.size_at(at);
            }
            if !target.in_executable(RUNTIME_BASE, at - RUNTIME_BASE) {
                return Err(CodegenError::DoesNotFit {
                    op: None,
                    tile: Some(t),
                    region: MemoryRegion::Executable,
                    need_bytes: (at - RUNTIME_BASE) as u64,
                    available_bytes: (target.executable_end - RUNTIME_BASE) as u64,
                    detail: "the kernels and the tile's supervisor programs".into(),
                });
            }
            Ok((t, (sizing.rebased(at), addrs)))
        })
        .collect();
    let sized: BTreeMap<u32, SizedTile> = sized?.into_iter().collect();
    if let Some((t, (s, _))) = sized.iter().max_by_key(|(_, (s, _))| s.end) {
        tracing::info!(
            tile = t,
            kernel_bytes = kernels.end - RUNTIME_BASE,
            support_bytes = s.end - s.base,
            state_bytes = s.tables.values().next().map_or(s.end, |&t| t) - s.base,
            tables = s.tables.len(),
            support_end = s.end,
            "allocated package support memory"
        );
        let by_step = if tracing::enabled!(tracing::Level::DEBUG) {
            support_by_step(program, index, *t)
        } else {
            Vec::new()
        };
        for (step, states, tables) in by_step.iter().take(8) {
            tracing::debug!(
                tile = t,
                step,
                state_bytes = states,
                table_bytes = tables,
                "support memory of the busiest tile by operation"
            );
        }
    }
    Ok(sized)
}

/// Where each tile's code and support data end, for storage placement.
pub fn support_areas(sized: &BTreeMap<u32, SizedTile>) -> BTreeMap<u32, TileSupport> {
    sized
        .iter()
        .map(|(t, (s, addrs))| {
            (
                *t,
                TileSupport {
                    code_end: addrs[2],
                    support_end: s.end,
                    states_start: s.base,
                    tables_start: s.tables.values().copied().min().unwrap_or(s.end),
                },
            )
        })
        .collect()
}

/// Every active tile's supervisor programs with the placed addresses, laid out where they were
/// sized (in parallel, collected in tile order); their bytes, without the slots of the text
/// form.
pub fn emit_tile_code(
    program: &TileProgram,
    kernels: &KernelLibrary,
    sized: &BTreeMap<u32, SizedTile>,
    addr: &(dyn Fn(BufferId) -> u32 + Sync),
) -> Result<BTreeMap<u32, [Laid; 3]>, CodegenError> {
    let active: Vec<u32> = (0..program.tiles_used).collect();
    let laid: Result<Vec<_>, CodegenError> = active
        .par_iter()
        .map(|&t| {
            let (support, addrs) = &sized[&t];
            let (s, i, r) = supervisor_code(program, t, kernels, support, addr);
            // Only the bytes go into the image: the slots kept for the text form would hold
            // every tile's instructions (several times their bytes) until the images are built.
            let bytes_only = |mut laid: Laid| {
                laid.slots = Vec::new();
                laid
            };
            let laid = [
                bytes_only(s.lay_out(addrs[0])?),
                bytes_only(i.lay_out(addrs[1])?),
                bytes_only(r.lay_out(addrs[2])?),
            ];
            let end = laid[2].address + laid[2].bytes.len() as u32;
            if end > support.base {
                return Err(CodegenError::internal(format!(
                    "tile {t}: code grew past its sizing"
                )));
            }
            Ok((t, laid))
        })
        .collect();
    Ok(laid?.into_iter().collect())
}

/// Tiles whose images are built at a time before they are stored shared: a bound on the
/// full images held at once (64 images of about 85 KB for the 2048³ matmul), large enough to
/// keep both cores busy.
pub const IMAGE_CHUNK_TILES: usize = 64;

/// The image of every tile of the target, stored shared ([`TileImages`]): active tiles' code
/// and data, empty images for the rest (a package covers every tile). Images are built and
/// diffed against their shared image in parallel, a chunk of tiles at a time, and stored in
/// tile order, so the store is the same at any thread count.
#[allow(clippy::too_many_arguments)]
pub fn build_tile_images(
    program: &TileProgram,
    index: &StepIndex,
    kernels: &KernelLibrary,
    sized: &BTreeMap<u32, SizedTile>,
    supervisors: &BTreeMap<u32, [Laid; 3]>,
    exchanges: &BTreeMap<usize, Scheduled>,
    addr: &(dyn Fn(BufferId) -> u32 + Sync),
    target: &Target,
) -> Result<TileImages, CodegenError> {
    let active: Vec<u32> = (0..program.tiles_used).collect();
    let mut store = TileImages::new();
    for chunk in active.chunks(IMAGE_CHUNK_TILES) {
        let built: Result<Vec<TileImage>, CodegenError> = chunk
            .par_iter()
            .map(|&t| {
                tile_image(
                    program,
                    index,
                    t,
                    kernels,
                    &sized[&t].0,
                    &supervisors[&t],
                    exchanges,
                    addr,
                    target,
                )
            })
            .collect();
        store.extend_with(built?, |pairs| {
            pairs
                .par_iter()
                .map(|(shared, image)| ipu_package::diff(shared, image))
                .collect()
        });
    }
    for _ in program.tiles_used..target.tiles {
        store.push(TileImage::default());
    }
    let (shared_bytes, patch_bytes) = (store.shared_bytes(), store.patch_bytes());
    let patches: usize = store.tiles.iter().map(|t| t.patches.len()).sum();
    tracing::info!(
        shared_images = store.shared.len(),
        shared_bytes,
        patch_records = patches,
        patch_bytes,
        "stored tile images shared"
    );
    Ok(store)
}

/// The support data of `tile` by the operation whose steps add it (the step name's first
/// word): (operation, vertex state bytes, exchange and host table bytes), largest first. A
/// state stored once for several launches counts for the first; a repeated step's tables
/// count for its first instance.
pub fn support_by_step(
    program: &TileProgram,
    idx: &StepIndex,
    tile: u32,
) -> Vec<(String, u32, u32)> {
    let mut by: BTreeMap<&str, (u32, u32)> = BTreeMap::new();
    let mut seen: AHashMap<&State, ()> = AHashMap::new();
    for (i, s) in program.steps.iter().enumerate() {
        let (Step::Compute { name, .. } | Step::Exchange { name, .. } | Step::Host { name, .. }) =
            s;
        let key = name.split(['.', ' ']).next().unwrap_or("");
        if let Step::Compute { tiles, .. } = s
            && let Some(ops) = tiles.get(&tile)
        {
            for (_, st) in ops.iter().filter_map(|op| op.launch()) {
                if seen.insert(st, ()).is_none() {
                    by.entry(key).or_default().0 += 4 * st.word_count() as u32;
                }
            }
        }
        if !program.same_as.contains_key(&i) {
            by.entry(key).or_default().1 += table_bytes(program, idx, tile, i);
        }
    }
    let mut v: Vec<_> = by
        .into_iter()
        .map(|(k, (a, b))| (k.to_string(), a, b))
        .collect();
    v.sort_by_key(|x| std::cmp::Reverse(x.1 + x.2));
    v
}
