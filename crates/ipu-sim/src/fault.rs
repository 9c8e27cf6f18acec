//! Device faults and the crate's error type.

use std::fmt;

use ipu_isa::AmpMode;

/// A tile context.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Context {
    /// The supervisor.
    Supervisor,
    /// Worker context 0..=5.
    Worker(u8),
}

impl fmt::Display for Context {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Context::Supervisor => f.write_str("supervisor"),
            Context::Worker(w) => write!(f, "worker {w}"),
        }
    }
}

/// The kinds of global (all-tile) instruction a supervisor stops at.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum GlobalKind {
    /// `sync`
    Sync,
    /// `exch`
    Exch,
    /// `hostx`
    HostX,
    /// `halt`
    Halt,
}

impl fmt::Display for GlobalKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            GlobalKind::Sync => "sync",
            GlobalKind::Exch => "exch",
            GlobalKind::HostX => "hostx",
            GlobalKind::Halt => "halt",
        })
    }
}

/// Which side of an exchange row an address belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RowSide {
    /// What the sender reads.
    Source,
    /// What the receivers write.
    Destination,
}

impl fmt::Display for RowSide {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            RowSide::Source => "source",
            RowSide::Destination => "destination",
        })
    }
}

/// A broken exchange rule: rows are those of the faulting tile's exchange table unless a
/// field names another tile.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExchangeFault {
    /// Every tile's table of one phase must give the same horizon.
    HorizonMismatch {
        /// This tile's horizon.
        horizon: u32,
        /// Tile 0's.
        expected: u32,
    },
    /// A row's byte count is zero or not a multiple of 4.
    RowBytes {
        /// The row.
        row: usize,
        /// Its bytes.
        bytes: u32,
    },
    /// A row's source or destination address is not word aligned.
    Misaligned {
        /// The row.
        row: usize,
        /// Which address.
        side: RowSide,
    },
    /// A row's source or destination range leaves tile memory.
    OutOfRange {
        /// The row.
        row: usize,
        /// Which range.
        side: RowSide,
        /// Its bytes.
        bytes: u32,
    },
    /// A row sends to tiles that are not active.
    InactiveDestinations {
        /// The row.
        row: usize,
        /// First destination tile.
        first: u32,
        /// One past the last.
        end: u32,
        /// Active tiles.
        active: u32,
    },
    /// A transfer arrives after the phase's horizon.
    PastHorizon {
        /// The row.
        row: usize,
        /// The destination tile.
        tile: u32,
        /// Its last cycle.
        end_cycle: u64,
        /// The horizon.
        horizon: u32,
    },
    /// Two rows of one tile send at once: its port sends one stream at a time.
    SendsOverlap {
        /// The first row and its cycles.
        first: (usize, u64, u64),
        /// The second row and its cycles.
        second: (usize, u64, u64),
    },
    /// A tile receives two streams at once, and not both also reach its pair tile (a tile
    /// takes a second stream only on its pair's other bus, as identical data for both).
    TwoStreams {
        /// The receiving tile.
        tile: u32,
        /// The first stream: sending tile, row, cycles.
        first: (u32, usize, u64, u64),
        /// The second stream.
        second: (u32, usize, u64, u64),
    },
    /// A tile receives three streams at once: its pair has two buses.
    ThreeStreams {
        /// The receiving tile.
        tile: u32,
        /// The streams: sending tile, row, cycles.
        streams: Box<[(u32, usize, u64, u64); 3]>,
    },
    /// A range written in the phase overlaps another range written, or read, in it.
    MemoryHazard {
        /// The tile whose memory is at stake.
        tile: u32,
        /// The range that arrives second: its sender, row and side.
        range: (u32, usize, RowSide),
        /// The destination it overlaps: its sender and row (or this tile's source row).
        overlaps: (u32, usize, RowSide),
    },
}

impl fmt::Display for ExchangeFault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ExchangeFault::HorizonMismatch { horizon, expected } => {
                write!(
                    f,
                    "horizon {horizon} differs from tile 0's horizon {expected}"
                )
            }
            ExchangeFault::RowBytes { row, bytes } => {
                write!(
                    f,
                    "row {row}: {bytes} bytes is not a positive multiple of 4"
                )
            }
            ExchangeFault::Misaligned { row, side } => {
                write!(f, "row {row}: {side} address misaligned")
            }
            ExchangeFault::OutOfRange { row, side, bytes } => {
                write!(
                    f,
                    "row {row}: {side} range of {bytes} bytes outside tile memory"
                )
            }
            ExchangeFault::InactiveDestinations {
                row,
                first,
                end,
                active,
            } => write!(
                f,
                "row {row}: destination tiles {first}..{end} outside the {active} active tiles"
            ),
            ExchangeFault::PastHorizon {
                row,
                tile,
                end_cycle,
                horizon,
            } => write!(
                f,
                "row {row}: transfer to tile {tile} ends at cycle {end_cycle}, after the horizon {horizon}"
            ),
            ExchangeFault::SendsOverlap { first, second } => write!(
                f,
                "rows {} and {} send at overlapping cycles {}..{} and {}..{}",
                first.0, second.0, first.1, first.2, second.1, second.2
            ),
            ExchangeFault::TwoStreams {
                tile,
                first,
                second,
            } => write!(
                f,
                "tile {tile} receives two streams at once, not both also to its pair tile {}: tile {} row {} (cycles {}..{}) and tile {} row {} (cycles {}..{})",
                ipu_target::pair_of(*tile),
                first.0,
                first.1,
                first.2,
                first.3,
                second.0,
                second.1,
                second.2,
                second.3
            ),
            ExchangeFault::ThreeStreams { tile, streams } => {
                write!(f, "tile {tile} receives three streams at once:")?;
                for (i, s) in streams.iter().enumerate() {
                    let sep = if i == 0 { "" } else { "," };
                    write!(
                        f,
                        "{sep} tile {} row {} (cycles {}..{})",
                        s.0, s.1, s.2, s.3
                    )?;
                }
                Ok(())
            }
            ExchangeFault::MemoryHazard {
                tile,
                range,
                overlaps,
            } => {
                let name = |(peer, row, side): (u32, usize, RowSide)| match side {
                    RowSide::Destination => format!("destination of tile {peer} row {row}"),
                    RowSide::Source => format!("source of row {row}"),
                };
                write!(
                    f,
                    "on tile {tile}, the {} overlaps the {} in the same phase",
                    name(*range),
                    name(*overlaps)
                )
            }
        }
    }
}

/// A broken host-exchange rule, in a row of the faulting tile's host table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HostExchangeFault {
    /// The row names a host page the session did not attach.
    NoPage {
        /// The row.
        row: usize,
        /// The page.
        page: u16,
    },
    /// The tile address or the byte count is not a multiple of 4.
    Unaligned {
        /// The row.
        row: usize,
        /// Its bytes.
        bytes: u32,
    },
    /// The row's bytes run past the end of the host page.
    BeyondPage {
        /// The row.
        row: usize,
        /// The page.
        page: u16,
        /// Its first byte in the page.
        start: u64,
        /// One past its last.
        end: u64,
        /// The page's size.
        page_bytes: u64,
    },
    /// The row's tile range leaves tile memory.
    OutOfRange {
        /// The row.
        row: usize,
        /// Its bytes.
        bytes: u32,
    },
}

impl fmt::Display for HostExchangeFault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HostExchangeFault::NoPage { row, page } => {
                write!(f, "row {row}: no host page {page}")
            }
            HostExchangeFault::Unaligned { row, bytes } => {
                write!(
                    f,
                    "row {row}: address and bytes ({bytes}) must be multiples of 4"
                )
            }
            HostExchangeFault::BeyondPage {
                row,
                page,
                start,
                end,
                page_bytes,
            } => write!(
                f,
                "row {row}: bytes {start}..{end} beyond host page {page} of {page_bytes} bytes"
            ),
            HostExchangeFault::OutOfRange { row, bytes } => {
                write!(f, "row {row}: {bytes} bytes outside tile memory")
            }
        }
    }
}

/// What went wrong. The address, where there is one, is in [`Fault::address`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FaultKind {
    /// A data access outside `[memory_base, memory_end)`.
    OutOfRange {
        /// Bytes accessed.
        bytes: u32,
    },
    /// A data access not aligned to its natural alignment.
    Misaligned {
        /// The alignment required.
        align: u32,
    },
    /// A 128-bit load (or `ampw`) outside interleaved memory.
    NotInterleaved,
    /// Instruction fetch outside the executable range, or from a pc not 4-byte aligned.
    FetchNotExecutable,
    /// The words at pc do not decode (including a bundle not 8-byte aligned).
    InvalidEncoding(String),
    /// A store of 8 or 16 bits: the hardware has no sub-word stores.
    SubWordStore,
    /// A store of 128 bits, a register that does not fit the width, an AMP phase above 3.
    IllegalOperands(&'static str),
    /// The AMP mode is not supported by the target (FP8 off C600).
    AmpModeUnsupported(AmpMode),
    /// `amp` before any `ampcfg` on this tile.
    AmpNotConfigured,
    /// `ampcfg`/`ampw` while workers of this tile are running.
    AmpBusy,
    /// A supervisor-only instruction on a worker.
    SupervisorOnly,
    /// A worker-only instruction (or a float-pipeline instruction) on the supervisor.
    WorkerOnly,
    /// `run` with an entry outside executable memory.
    RunEntryNotExecutable,
    /// A register `rpt` count above the hardware limit.
    RptCountTooLarge(u32),
    /// Control flow inside an `rpt` body (including a nested `rpt`).
    ControlInRptBody,
    /// The run exceeded its cycle limit.
    CycleLimit(u64),
    /// The run was stopped by [`crate::interrupt`] (Ctrl-C).
    Interrupted,
    /// A global instruction (or `halt`) reached while workers of the tile still run.
    WorkersRunning,
    /// Two workers of one `run`..`waitw` window that overlap in time touched the same bytes,
    /// at least one of them writing.
    WorkerRace {
        /// The other context.
        other: u8,
        /// Whether both wrote (otherwise one read what the other wrote).
        both_write: bool,
    },
    /// This tile reached a different global instruction than tile 0.
    GlobalMismatch {
        /// What this tile reached.
        reached: GlobalKind,
        /// What tile 0 reached.
        expected: GlobalKind,
    },
    /// A table (exchange or host) could not be read.
    BadTable(String),
    /// An exchange rule was violated.
    Exchange(ExchangeFault),
    /// A host-exchange rule was violated.
    HostExchange(HostExchangeFault),
    /// The run exceeded its limit of global steps.
    StepLimit(u32),
}

impl fmt::Display for FaultKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FaultKind::OutOfRange { bytes } => {
                write!(f, "{bytes}-byte access outside tile memory")
            }
            FaultKind::Misaligned { align } => {
                write!(f, "misaligned access (needs {align}-byte alignment)")
            }
            FaultKind::NotInterleaved => f.write_str("128-bit access outside interleaved memory"),
            FaultKind::FetchNotExecutable => {
                f.write_str("instruction fetch outside executable memory (or misaligned pc)")
            }
            FaultKind::InvalidEncoding(e) => write!(f, "invalid encoding: {e}"),
            FaultKind::SubWordStore => {
                f.write_str("sub-word store (the hardware has no 8/16-bit stores)")
            }
            FaultKind::IllegalOperands(what) => write!(f, "illegal operands: {what}"),
            FaultKind::AmpModeUnsupported(m) => {
                write!(f, "AMP mode {m:?} is not supported by this target")
            }
            FaultKind::AmpNotConfigured => f.write_str("amp before ampcfg"),
            FaultKind::AmpBusy => f.write_str("AMP state changed while workers are running"),
            FaultKind::SupervisorOnly => f.write_str("supervisor-only instruction on a worker"),
            FaultKind::WorkerOnly => {
                f.write_str("worker-only (or float-pipeline) instruction on the supervisor")
            }
            FaultKind::RunEntryNotExecutable => {
                f.write_str("run: worker entry outside executable memory")
            }
            FaultKind::RptCountTooLarge(c) => {
                write!(f, "rpt count {c} exceeds {:#x}", ipu_target::RPT_COUNT_MAX)
            }
            FaultKind::ControlInRptBody => f.write_str("control flow inside an rpt body"),
            FaultKind::Interrupted => f.write_str("stopped by an interrupt (Ctrl-C)"),
            FaultKind::CycleLimit(l) => write!(
                f,
                "the tile reached cycle {l}, the end of the run's cycle budget (--max-cycles)"
            ),
            FaultKind::WorkersRunning => {
                f.write_str("global instruction while workers are still running (no waitw)")
            }
            FaultKind::WorkerRace { other, both_write } => {
                if *both_write {
                    write!(f, "worker {other} of the same phase writes the same bytes")
                } else {
                    write!(
                        f,
                        "worker {other} of the same phase reads/writes the same bytes"
                    )
                }
            }
            FaultKind::GlobalMismatch { reached, expected } => {
                write!(f, "tile reached {reached} while tile 0 reached {expected}")
            }
            FaultKind::BadTable(e) => write!(f, "bad table: {e}"),
            FaultKind::Exchange(e) => write!(f, "exchange: {e}"),
            FaultKind::HostExchange(e) => write!(f, "host exchange: {e}"),
            FaultKind::StepLimit(l) => write!(f, "run exceeded its limit of {l} global steps"),
        }
    }
}

/// A device fault: which tile, context, pc and instruction, which address, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fault {
    /// The tile.
    pub tile: u32,
    /// The context.
    pub context: Context,
    /// The pc of the faulting instruction.
    pub pc: u32,
    /// The instruction's text (empty when it could not be decoded).
    pub instruction: String,
    /// The address involved, if any.
    pub address: Option<u32>,
    /// What went wrong.
    pub kind: FaultKind,
}

/// One line: `device fault: tile T, CONTEXT, pc P, `INSTRUCTION`, address A: KIND` (the
/// instruction and the address only when known).
impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "device fault: tile {}, {}, pc {:#x}",
            self.tile, self.context, self.pc
        )?;
        if !self.instruction.is_empty() {
            write!(f, ", `{}`", self.instruction)?;
        }
        if let Some(a) = self.address {
            write!(f, ", address {a:#x}")?;
        }
        write!(f, ": {}", self.kind)
    }
}

/// Errors of the simulated device.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SimError {
    /// The program faulted.
    #[error("{0}")]
    Fault(Fault),
    /// A tile index beyond the chip.
    #[error("tile {tile} does not exist (the chip has {tiles})")]
    NoSuchTile {
        /// The tile.
        tile: u32,
        /// Tiles on the chip.
        tiles: u32,
    },
    /// A host read or write outside tile memory.
    #[error("host access of {len} bytes at {addr:#x} on tile {tile} is outside tile memory")]
    HostAccess {
        /// The tile.
        tile: u32,
        /// The address.
        addr: u32,
        /// Bytes.
        len: u64,
    },
    /// `run_entries` was given the wrong number of entries.
    #[error("{given} entries given for {active} active tiles")]
    Entries {
        /// Entries given.
        given: usize,
        /// Active tiles.
        active: u32,
    },
}

impl SimError {
    /// The fault, if this is one.
    pub fn fault(&self) -> Option<&Fault> {
        match self {
            SimError::Fault(f) => Some(f),
            _ => None,
        }
    }
}

impl From<Fault> for SimError {
    fn from(f: Fault) -> Self {
        SimError::Fault(f)
    }
}
