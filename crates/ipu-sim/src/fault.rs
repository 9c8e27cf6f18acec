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
    Exchange(String),
    /// A host-exchange rule was violated.
    HostExchange(String),
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
            FaultKind::CycleLimit(l) => write!(f, "run exceeded its limit of {l} cycles"),
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
