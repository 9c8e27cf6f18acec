//! The machine description of the Graphcore IPU tile array, as data.
//!
//! Every number carries its source in a doc comment. Sources are abbreviated as in
//! `docs/ipu-facts.md`: PL = graphcore/poplibs, TI = graphcore-research/tessellate-ipu,
//! IAS = graphcore/ipu_assembly_support, LLF = graphcore/llvm-project-fork, DOC =
//! docs.graphcore.ai and product datasheets. Numbers marked *assumption* are not published and
//! were chosen to be consistent with the published ones.
//!
//! Relations between constants are asserted at compile time at the bottom of this file.

use std::fmt;

/// Tiles per chip on every Mk2-family IPU (GC200, Bow, C600). Source: TI, DOC.
pub const TILES_PER_CHIP: u32 = 1472;

/// Lowest tile memory address on Mk2. Source: LLF (`ipu2` memory base 0x4C000).
pub const MEMORY_BASE: u32 = 0x4C000;

/// One past the highest tile memory address: `MEMORY_BASE + 624 KiB`. Source: DOC (624 KiB per
/// tile) and LLF (base); the seed logs place data up to 949,168, just under this end.
pub const MEMORY_END: u32 = 0xE8000;

/// Bytes of SRAM per tile: 638,976 B = 624 KiB. Source: DOC.
pub const MEMORY_BYTES: u32 = 638_976;

/// Start of the interleaved region, which runs to `MEMORY_END`. *Assumption*: DOC only says
/// interleaved memory "is always in the upper part"; 0x80000 splits memory into 208 KiB + 416
/// KiB, a whole number of 16 KiB banks, and matches the seed logs (code below 524,288).
pub const INTERLEAVED_BASE: u32 = 0x80000;

/// Bytes per memory bank on Mk2. Source: DOC (PopVision glossary: 16 KiB banks).
pub const BANK_BYTES: u32 = 16 * 1024;

/// Barrel slots an issue loses per bank conflict: per load of the issue beyond the first from
/// one memory element (see [`Target::element`]). PL's paced codelets require the streams they
/// load together in different elements (`[[poplar::constraint("elem(*A) != elem(*B)")]]` on
/// `ScaledAddSupervisor`, `elem(**in) != elem(**out)` on `ConvPartial1x1Out`, and others), and
/// DOC's vertex programming guide has a section on memory conflicts in vertex pipelines. Those
/// constraints are only ever between two loaded streams: `ScaledAddSupervisor` stores its
/// in-place result into the element it loads `A` from in the same issue. So we model an
/// element's read port only: two loads of one issue from one element conflict, a store
/// conflicts with nothing (*assumption*: a separate or buffered write). *Assumption* too: the
/// stall's length is not published; we charge one barrel slot of the issuing context per
/// conflict, as if the extra load were replayed in the context's next issue. With all six
/// workers conflicting that is the same as the tile's pipeline stalling one cycle per
/// The tile sharing an exchange bus with `tile`: tiles come in pairs, `2k` with `2k + 1`, on
/// every Mk2 target. Source: PL (`ExchangeEstimator`, `getTilesPerSharedExchangeBus() == 2`).
pub const fn pair_of(tile: u32) -> u32 {
    tile ^ 1
}

/// conflict.
pub const BANK_CONFLICT_SLOTS: u32 = 1;

/// Worker contexts per tile. Source: DOC (assembly programming guide: six workers and one
/// supervisor, barrel-scheduled).
pub const WORKER_CONTEXTS: u32 = 6;

/// The supervisor's context id (what `get $contextid` reads on the supervisor): the one after
/// the workers' `0..WORKER_CONTEXTS`. The project's own convention (`docs/isa.md`).
pub const SUPERVISOR_CONTEXT: u32 = WORKER_CONTEXTS;

/// Tile cycles between two issues of one context: a barrel slot. Source: DOC (each context
/// issues at most one instruction or co-issued pair every six tile cycles).
pub const BARREL_SLOT_CYCLES: u32 = 6;

/// Largest `rpt` count. Source: LLF, IAS (count up to 0xFFFF on Mk2).
pub const RPT_COUNT_MAX: u32 = 0xFFFF;

/// Bytes one tile sends (and, separately, receives) per cycle over the exchange. Source: PL
/// (`ipuExchangeBandwidth = 4`).
pub const EXCHANGE_BYTES_PER_CYCLE: u32 = 4;

/// Cycles of one internal BSP sync across the chip. Source: PL (`CTCLossPlan.cpp` assumes about
/// 90 cycles per sync); the true Mk2 figure is unpublished.
pub const SYNC_CYCLES: u32 = 90;

/// Fixed cycles at the start of every exchange phase. Source: PL (about 100 cycles of fixed
/// exchange overhead in the planners' estimates).
pub const EXCHANGE_PHASE_OVERHEAD_CYCLES: u32 = 100;

/// Exchange latency, *assumption*: a message reaches a tile `EXCHANGE_LATENCY_BASE_CYCLES +
/// |src - dst| / EXCHANGE_LATENCY_TILES_PER_CYCLE` cycles after it is sent. Graphcore's patents
/// (US10579585) describe compiled, distance-dependent delays; the constants are not published.
pub const EXCHANGE_LATENCY_BASE_CYCLES: u32 = 8;
/// See [`EXCHANGE_LATENCY_BASE_CYCLES`]. *Assumption*.
pub const EXCHANGE_LATENCY_TILES_PER_CYCLE: u32 = 32;

/// Bytes per cycle at which AMP weights are loaded into the coefficient state (128-bit loads).
/// Source: DOC, PL (AMP weights are loaded with 128-bit loads at 16 B/cycle).
pub const AMP_WEIGHT_LOAD_BYTES_PER_CYCLE: u32 = 16;

/// Host exchange bandwidth in bytes per tile cycle for the whole chip. *Assumption*: PCIe Gen4
/// x16 carries about 25 GB/s, about 18 B per cycle at 1.33 GHz; we round down to 16.
pub const HOST_EXCHANGE_BYTES_PER_CYCLE: u32 = 16;

/// Fixed cycles for a host-exchange point (the sync with the host). *Assumption*.
pub const HOST_EXCHANGE_OVERHEAD_CYCLES: u32 = 1000;

/// A model of IPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum TargetKind {
    /// GC200 (Mk2), the default.
    Gc200,
    /// Bow (Mk2 die, wafer-on-wafer power delivery, higher clock).
    Bow,
    /// C600 (IPU21): native FP8 in the AMP.
    C600,
}

impl TargetKind {
    /// Every target, in a stable order.
    pub const ALL: [TargetKind; 3] = [TargetKind::Gc200, TargetKind::Bow, TargetKind::C600];

    /// The lower-case name used on the command line and in packages.
    pub fn name(self) -> &'static str {
        match self {
            TargetKind::Gc200 => "gc200",
            TargetKind::Bow => "bow",
            TargetKind::C600 => "c600",
        }
    }

    /// Parses a name as printed by [`TargetKind::name`].
    pub fn from_name(name: &str) -> Option<TargetKind> {
        TargetKind::ALL.into_iter().find(|t| t.name() == name)
    }

    /// A stable numeric code for binary formats.
    pub fn code(self) -> u32 {
        match self {
            TargetKind::Gc200 => 1,
            TargetKind::Bow => 2,
            TargetKind::C600 => 3,
        }
    }

    /// Inverse of [`TargetKind::code`].
    pub fn from_code(code: u32) -> Option<TargetKind> {
        TargetKind::ALL.into_iter().find(|t| t.code() == code)
    }

    /// The full description of this target.
    pub fn target(self) -> Target {
        Target::new(self)
    }
}

impl fmt::Display for TargetKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Input and partials types of the AMP (accumulating matrix product unit).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum AmpMode {
    /// f16 inputs, f16 partials.
    F16F16,
    /// f16 inputs, f32 partials.
    F16F32,
    /// f32 inputs, f32 partials.
    F32F32,
    /// FP8 inputs (F143 or F152 with a scale), f16 partials. IPU21 (C600) only.
    F8F16,
}

impl AmpMode {
    /// Every mode in a stable order.
    pub const ALL: [AmpMode; 4] = [
        AmpMode::F16F16,
        AmpMode::F16F32,
        AmpMode::F32F32,
        AmpMode::F8F16,
    ];

    /// Multiply-accumulates per tile cycle at full rate for this mode. Source: PL asm and DOC
    /// (f16→f16 64: 16 units × 4, the datasheet peak), PL `PerformanceEstimation.hpp` (f16→f32
    /// 32, limited by the 64-bit store path), PL (f32→f32 16), PL `ConvVertexType.cpp` (FP8→f16
    /// 128 on IPU21).
    pub const fn macs_per_cycle(self) -> u32 {
        match self {
            AmpMode::F16F16 => 64,
            AmpMode::F16F32 => 32,
            AmpMode::F32F32 => 16,
            AmpMode::F8F16 => 128,
        }
    }
}

/// The AMP's shape in one mode: a row of input enters in [`AmpGeometry::PHASES`] phases of
/// `lanes` values (`k` values per row), against a weight block of `k` x `columns` elements;
/// phase `p` also takes in the partials of the `p`-th chunk of `columns / PHASES` columns.
/// These are the project's own instruction set's figures (`docs/isa.md`, the `amp`
/// instruction), chosen so each mode reaches [`AmpMode::macs_per_cycle`]: f16 inputs fill
/// 64-bit loads with 4 lanes, f32 inputs with 2, FP8 inputs with 8.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AmpGeometry {
    /// Input values per row (the weight block's rows, the K block).
    pub k: u32,
    /// Input values per phase.
    pub lanes: u32,
    /// Output columns of a weight block.
    pub columns: u32,
    /// Bytes per input and weight element.
    pub input_bytes: u32,
    /// Bytes per partial.
    pub partial_bytes: u32,
}

impl AmpGeometry {
    /// Phases per row of input.
    pub const PHASES: u32 = 4;

    /// Bytes of a weight block, what `ampw` loads.
    pub const fn weight_bytes(&self) -> u32 {
        self.k * self.columns * self.input_bytes
    }

    /// Columns whose partials enter per phase.
    pub const fn chunk_columns(&self) -> u32 {
        self.columns / Self::PHASES
    }
}

impl AmpMode {
    /// The unit's shape in this mode.
    pub const fn geometry(self) -> AmpGeometry {
        let (k, columns, input_bytes, partial_bytes) = match self {
            AmpMode::F16F16 => (16, 16, 2, 2),
            AmpMode::F16F32 => (16, 8, 2, 4),
            AmpMode::F32F32 => (8, 8, 4, 4),
            AmpMode::F8F16 => (32, 16, 1, 2),
        };
        AmpGeometry {
            k,
            lanes: k / AmpGeometry::PHASES,
            columns,
            input_bytes,
            partial_bytes,
        }
    }
}

/// The machine description of one target.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Target {
    /// Which model.
    pub kind: TargetKind,
    /// Tiles on the chip.
    pub tiles: u32,
    /// Tile clock in Hz. Source: GC200 1.33 GHz derived from the 250 TFLOPS f16 datasheet peak
    /// (1472 tiles × 64 MAC × 2 FLOP × 1.33 GHz ≈ 250 TFLOPS, DOC); Bow 1.85 GHz (DOC); C600
    /// 1.49 GHz is *unconfirmed* (TI).
    pub clock_hz: u64,
    /// First byte of tile memory.
    pub memory_base: u32,
    /// One past the last byte of tile memory.
    pub memory_end: u32,
    /// First byte of the interleaved region (to `memory_end`).
    pub interleaved_base: u32,
    /// Bytes per bank (a power of two).
    pub bank_bytes: u32,
    /// Instruction fetch is allowed in `[executable_base, executable_end)`: the non-interleaved
    /// region. Source: DOC (PopVision glossary: instructions are fetched only from
    /// non-interleaved memory).
    pub executable_base: u32,
    /// See `executable_base`.
    pub executable_end: u32,
    /// Worker contexts per tile.
    pub worker_contexts: u32,
    /// Tile cycles per barrel slot.
    pub barrel_slot_cycles: u32,
    /// Bytes per cycle a tile sends or receives over the exchange.
    pub exchange_bytes_per_cycle: u32,
    /// Cycles per BSP sync.
    pub sync_cycles: u32,
    /// Whether the AMP accepts FP8 inputs natively (IPU21 only).
    pub amp_fp8: bool,
}

impl Target {
    /// The description of `kind`.
    pub const fn new(kind: TargetKind) -> Target {
        let (clock_hz, amp_fp8) = match kind {
            TargetKind::Gc200 => (1_330_000_000, false),
            TargetKind::Bow => (1_850_000_000, false),
            TargetKind::C600 => (1_490_000_000, true),
        };
        Target {
            kind,
            tiles: TILES_PER_CHIP,
            clock_hz,
            memory_base: MEMORY_BASE,
            memory_end: MEMORY_END,
            interleaved_base: INTERLEAVED_BASE,
            bank_bytes: BANK_BYTES,
            executable_base: MEMORY_BASE,
            executable_end: INTERLEAVED_BASE,
            worker_contexts: WORKER_CONTEXTS,
            barrel_slot_cycles: BARREL_SLOT_CYCLES,
            exchange_bytes_per_cycle: EXCHANGE_BYTES_PER_CYCLE,
            sync_cycles: SYNC_CYCLES,
            amp_fp8,
        }
    }

    /// The default target, GC200.
    pub const fn gc200() -> Target {
        Target::new(TargetKind::Gc200)
    }

    /// Bytes of memory per tile.
    pub const fn memory_bytes(&self) -> u32 {
        self.memory_end - self.memory_base
    }

    /// Bytes of the non-interleaved (standard) region.
    pub const fn standard_bytes(&self) -> u32 {
        self.interleaved_base - self.memory_base
    }

    /// Bytes of the interleaved region.
    pub const fn interleaved_bytes(&self) -> u32 {
        self.memory_end - self.interleaved_base
    }

    /// Whether `addr .. addr + len` lies in tile memory.
    pub const fn in_memory(&self, addr: u32, len: u32) -> bool {
        addr >= self.memory_base && (addr as u64 + len as u64) <= self.memory_end as u64
    }

    /// Whether `addr .. addr + len` lies in the interleaved region.
    pub const fn in_interleaved(&self, addr: u32, len: u32) -> bool {
        addr >= self.interleaved_base && (addr as u64 + len as u64) <= self.memory_end as u64
    }

    /// Whether `addr .. addr + len` may hold instructions.
    pub const fn in_executable(&self, addr: u32, len: u32) -> bool {
        addr >= self.executable_base && (addr as u64 + len as u64) <= self.executable_end as u64
    }

    /// Whether the AMP supports `mode` on this target.
    pub const fn supports_amp(&self, mode: AmpMode) -> bool {
        match mode {
            AmpMode::F8F16 => self.amp_fp8,
            _ => true,
        }
    }

    /// Peak multiply-accumulates per cycle for the whole chip in `mode`, or `None` where the
    /// AMP does not support it.
    pub const fn chip_macs_per_cycle(&self, mode: AmpMode) -> Option<u64> {
        if self.supports_amp(mode) {
            Some(self.tiles as u64 * mode.macs_per_cycle() as u64)
        } else {
            None
        }
    }

    /// Peak FLOP/s of the chip in `mode` (2 FLOP per MAC).
    pub fn peak_flops(&self, mode: AmpMode) -> Option<f64> {
        self.chip_macs_per_cycle(mode)
            .map(|m| m as f64 * 2.0 * self.clock_hz as f64)
    }

    /// Exchange latency in cycles from tile `src` to tile `dst` (*assumption*, see
    /// [`EXCHANGE_LATENCY_BASE_CYCLES`]).
    pub const fn exchange_latency_cycles(&self, src: u32, dst: u32) -> u32 {
        EXCHANGE_LATENCY_BASE_CYCLES + src.abs_diff(dst) / EXCHANGE_LATENCY_TILES_PER_CYCLE
    }

    /// Cycles to move `bytes` through one tile's exchange port.
    pub const fn exchange_transfer_cycles(&self, bytes: u32) -> u32 {
        bytes.div_ceil(self.exchange_bytes_per_cycle)
    }

    /// The tile sharing an exchange bus with `tile` (tiles come in pairs): [`pair_of`].
    pub const fn pair_tile(&self, tile: u32) -> u32 {
        pair_of(tile)
    }

    /// Bank index of `addr`.
    pub const fn bank(&self, addr: u32) -> u32 {
        (addr - self.memory_base) / self.bank_bytes
    }

    /// The memory element (single-ported bank) an aligned access of at most 8 bytes at `addr`
    /// uses. Below `interleaved_base` an element is one 16 KiB bank; above it, two banks
    /// alternate every 8 bytes (what lets `ld128` read 16 bytes in one access), so an element
    /// holds the even or the odd 8-byte words of a 32 KiB pair. Elements are numbered from
    /// the bottom of memory. *Assumption* for the interleaving granularity (8 bytes, the width
    /// of one paced access): DOC says only that interleaved memory lets two 64-bit accesses
    /// proceed at once.
    pub const fn element(&self, addr: u32) -> u32 {
        // Shifts, not divisions: the simulator asks this of every paced load pair.
        let shift = self.bank_bytes.trailing_zeros();
        if addr < self.interleaved_base {
            (addr - self.memory_base) >> shift
        } else {
            let off = addr - self.interleaved_base;
            ((self.interleaved_base - self.memory_base) >> shift)
                + 2 * (off >> (shift + 1))
                + ((off >> 3) & 1)
        }
    }

    /// The memory elements ([`Target::element`]) that `[addr, addr + bytes)` touches, one bit
    /// each: the 16 KiB banks of standard memory, both elements of every interleaved 32 KiB
    /// pair it overlaps.
    pub const fn elements(&self, addr: u32, bytes: u32) -> u64 {
        let (bank, ib) = (self.bank_bytes as u64, self.interleaved_base as u64);
        let (mb, pair) = (self.memory_base as u64, 2 * bank);
        let end = addr as u64 + bytes as u64;
        let mut m = 0u64;
        let mut a = addr as u64;
        while a < end {
            if a < ib {
                m |= 1 << self.element(a as u32);
                a = mb + ((a - mb) / bank + 1) * bank;
            } else {
                let p = (a - ib) / pair;
                m |= 3 << (self.bank(self.interleaved_base) as u64 + 2 * p);
                a = ib + (p + 1) * pair;
            }
        }
        m
    }

    /// Bank conflicts among the 8-byte loads of one issue at `addrs`: the loads beyond the
    /// first from each memory element. Each costs [`BANK_CONFLICT_SLOTS`] of the issuing
    /// context.
    pub const fn bank_conflicts(&self, addrs: &[u32]) -> u32 {
        let mut n = 0;
        let mut i = 1;
        while i < addrs.len() {
            let mut j = 0;
            while j < i {
                if self.element(addrs[j]) == self.element(addrs[i]) {
                    n += 1;
                    break;
                }
                j += 1;
            }
            i += 1;
        }
        n
    }
}

impl Default for Target {
    fn default() -> Self {
        Target::gc200()
    }
}

// Relations between the constants, checked at compile time.
const _: () = {
    assert!(MEMORY_END - MEMORY_BASE == MEMORY_BYTES);
    assert!(MEMORY_BYTES == 624 * 1024);
    assert!(INTERLEAVED_BASE > MEMORY_BASE && INTERLEAVED_BASE < MEMORY_END);
    assert!((INTERLEAVED_BASE - MEMORY_BASE).is_multiple_of(BANK_BYTES));
    assert!(
        BANK_BYTES.is_power_of_two(),
        "`Target::element` shifts by it"
    );
    assert!((MEMORY_END - INTERLEAVED_BASE).is_multiple_of(2 * BANK_BYTES));
    assert!(MEMORY_END <= 1 << 21, "tile addresses are 21-bit");
    assert!(
        TILES_PER_CHIP.is_multiple_of(2),
        "tiles come in exchange pairs"
    );
    assert!(AmpMode::F16F16.macs_per_cycle() == 2 * AmpMode::F16F32.macs_per_cycle());
    assert!(AmpMode::F16F32.macs_per_cycle() == 2 * AmpMode::F32F32.macs_per_cycle());
    assert!(AmpMode::F8F16.macs_per_cycle() == 2 * AmpMode::F16F16.macs_per_cycle());
    // A barrel round gives every context, the supervisor included, one issue slot.
    assert!(BARREL_SLOT_CYCLES == WORKER_CONTEXTS);
    // Every AMP phase reads one 64-bit load of inputs, and the weight block loads in whole
    // cycles of `ampw`.
    let mut i = 0;
    while i < AmpMode::ALL.len() {
        let g = AmpMode::ALL[i].geometry();
        assert!(g.k == AmpGeometry::PHASES * g.lanes);
        assert!(g.lanes * g.input_bytes == 8);
        assert!(g.columns.is_multiple_of(AmpGeometry::PHASES));
        assert!(
            g.weight_bytes()
                .is_multiple_of(AMP_WEIGHT_LOAD_BYTES_PER_CYCLE)
        );
        i += 1;
    }
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn elements_are_banks_below_the_interleaved_region_and_alternate_above_it() {
        let t = Target::gc200();
        let low = t.bank(INTERLEAVED_BASE);
        assert_eq!(low, 13, "208 KiB of 16 KiB banks");
        assert_eq!(t.element(MEMORY_BASE), 0);
        assert_eq!(t.element(MEMORY_BASE + BANK_BYTES - 8), 0);
        assert_eq!(t.element(MEMORY_BASE + BANK_BYTES), 1);
        // Interleaved: 8-byte words alternate between the two elements of a 32 KiB pair.
        assert_eq!(t.element(INTERLEAVED_BASE), low);
        assert_eq!(t.element(INTERLEAVED_BASE + 8), low + 1);
        assert_eq!(t.element(INTERLEAVED_BASE + 16), low);
        assert_eq!(t.element(INTERLEAVED_BASE + 2 * BANK_BYTES), low + 2);
        assert_eq!(
            t.element(MEMORY_END - 8),
            low + 25,
            "26 interleaved elements"
        );
        // Conflicts: loads beyond the first from one element.
        let i = INTERLEAVED_BASE;
        assert_eq!(t.bank_conflicts(&[i, i + 8]), 0, "one 128-bit pair");
        assert_eq!(t.bank_conflicts(&[i, i + 16]), 1);
        assert_eq!(t.bank_conflicts(&[i, i + 16, i + 32]), 2);
        assert_eq!(t.bank_conflicts(&[i, i + 16, i + 8]), 1);
        assert_eq!(t.bank_conflicts(&[i, i + 2 * BANK_BYTES]), 0);
        assert_eq!(t.bank_conflicts(&[MEMORY_BASE, MEMORY_BASE + 8]), 1);
        assert_eq!(t.bank_conflicts(&[MEMORY_BASE, i]), 0);
        // The elements a range touches: whole interleaved pairs.
        let (mb, b) = (MEMORY_BASE, BANK_BYTES);
        assert_eq!(t.elements(mb, 8), 1);
        assert_eq!(t.elements(mb, b), 1);
        assert_eq!(t.elements(mb + b - 8, 16), 0b11);
        assert_eq!(t.elements(i, 8), 0b11 << 13);
        assert_eq!(t.elements(i + 2 * b - 8, 16), 0b1111 << 13);
        // Straddling the regions: the last bank and the first pair.
        assert_eq!(t.elements(i - 16, 32), 0b111 << 12);
    }

    #[test]
    fn gc200_peak_matches_datasheet() {
        // 250 TFLOPS f16 on GC200 (DOC): within 1 %.
        let peak = Target::gc200().peak_flops(AmpMode::F16F16).unwrap();
        assert!((peak / 250e12 - 1.0).abs() < 0.01, "{peak}");
        // 350 TFLOPS on Bow (DOC): within 1 %.
        let peak = TargetKind::Bow
            .target()
            .peak_flops(AmpMode::F16F16)
            .unwrap();
        assert!((peak / 350e12 - 1.0).abs() < 0.01, "{peak}");
    }

    #[test]
    fn fp8_amp_only_on_c600() {
        assert!(!Target::gc200().supports_amp(AmpMode::F8F16));
        assert!(!TargetKind::Bow.target().supports_amp(AmpMode::F8F16));
        assert!(TargetKind::C600.target().supports_amp(AmpMode::F8F16));
    }

    #[test]
    fn regions() {
        let t = Target::gc200();
        assert!(t.in_executable(0x4C000, 4));
        assert!(!t.in_executable(0x80000, 4));
        assert!(t.in_interleaved(0x80000, 16));
        assert!(!t.in_interleaved(0x7FFF0, 16));
        assert!(!t.in_memory(0xE7FFC, 8));
        assert_eq!(t.standard_bytes() + t.interleaved_bytes(), MEMORY_BYTES);
        assert_eq!(t.exchange_latency_cycles(0, 64), 10);
    }

    #[test]
    fn names_round_trip() {
        for k in TargetKind::ALL {
            assert_eq!(TargetKind::from_name(k.name()), Some(k));
            assert_eq!(TargetKind::from_code(k.code()), Some(k));
        }
    }
}

/// Device configuration registers, written by the host before tile images are loaded (the
/// package lists the writes; the runtime replays them). The project's own definition.
pub mod reduce;

pub mod config {
    /// Per tile: 1 if the tile takes part in programs, 0 if it stays idle. Active tiles must be
    /// `0..n` for some `n`.
    pub const TILE_ACTIVE: u32 = 0;
    /// Per tile: the tile's exchange identifier; the device checks it equals the tile's index,
    /// so a package laid out for another tile numbering is refused.
    pub const EXCHANGE_ID: u32 = 1;
    /// Per tile: bytes of host-exchange page space the tile's host tables may address (0 for
    /// none); the device refuses host transfers beyond it.
    pub const HOST_WINDOW_BYTES: u32 = 2;
    /// Number of defined registers.
    pub const REGISTERS: u32 = 3;
}
