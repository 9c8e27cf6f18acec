//! The AMP matmul benchmark: `[N,16] x [16,16]` f16 -> f16 on every tile, with the kernel in
//! `kernels/amp_matmul_f16.s`, checked against a host model of the AMP.

use std::time::Instant;

use half::f16;
use ipu_isa::{AsmOptions, assemble};
use ipu_target::{AmpMode, Target};

use crate::{Device, RunLimits, SimError};

/// The kernel's source.
pub const AMP_KERNEL_SOURCE: &str = include_str!("../kernels/amp_matmul_f16.s");
/// The kernel's file name, for assembler errors.
pub const AMP_KERNEL_FILE: &str = "amp_matmul_f16.s";
/// Address of the weights (interleaved memory, 16-byte aligned).
pub const WEIGHTS_ADDR: u32 = 0x80000;
/// Address of the input rows.
pub const X_ADDR: u32 = 0x80200;
/// Bytes after the input the software pipeline may read (two 8-byte chunks) plus slack.
pub const X_PAD_BYTES: u32 = 64;
/// Fewest rows the kernel handles (every one of the six workers needs at least one row).
pub const ROWS_MIN: u32 = 6;
/// Columns and K of the benchmark's matmul.
pub const DIM: usize = 16;

/// Errors of the benchmark.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// The kernel did not assemble.
    #[error("kernel: {0}")]
    Asm(ipu_isa::AsmError),
    /// The device faulted or rejected an access.
    #[error(transparent)]
    Sim(#[from] SimError),
    /// The row count does not fit.
    #[error(
        "rows {rows}: the kernel needs at least {ROWS_MIN} rows and the data must fit in interleaved memory"
    )]
    Rows {
        /// The row count.
        rows: u32,
    },
    /// A tile's result differs from the host model.
    #[error(
        "tile {tile}: row {row} column {column} is {got:#06x}, the host model gives {want:#06x}"
    )]
    Mismatch {
        /// Tile.
        tile: u32,
        /// Row.
        row: usize,
        /// Column.
        column: usize,
        /// Device bits.
        got: u16,
        /// Host bits.
        want: u16,
    },
}

/// One benchmark point.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AmpBenchPoint {
    /// Rows per tile.
    pub n: u32,
    /// Simulated cycles per tile (the slowest tile).
    pub cycles: u64,
    /// `n * 16 * 16 / (cycles * 64)`: the fraction of the f16 AMP peak.
    pub efficiency: f64,
    /// Worker instructions simulated (all tiles).
    pub worker_instructions: u64,
    /// All instructions simulated (all tiles).
    pub instructions: u64,
    /// Host seconds spent in `Device::run`.
    pub run_seconds: f64,
    /// Host seconds for the whole point (setup, run, verification).
    pub total_seconds: f64,
}

/// Output address for `rows`.
pub fn y_addr(rows: u32) -> u32 {
    X_ADDR + 32 * rows + X_PAD_BYTES
}

/// A deterministic generator (SplitMix64).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// An f16 in [-1, 1): one of the 256 values `v / 128`, `v` in -128..128 (so sums stay
    /// well inside f16 range), looked up in `table` (see [`input_values`]).
    fn f16(&mut self, table: &[f16; 256]) -> f16 {
        table[(self.next() >> 56) as usize]
    }
}

/// The 256 input values: entry `i` is `(i - 128) / 128`.
fn input_values() -> [f16; 256] {
    let mut t = [f16::ZERO; 256];
    for (i, v) in t.iter_mut().enumerate() {
        *v = f16::from_f32((i as f32 - 128.0) / 128.0);
    }
    t
}

/// The inputs of `tile`: weights (k-major) and `rows` rows of X.
pub fn inputs(tile: u32, rows: u32) -> (Vec<f16>, Vec<f16>) {
    let table = input_values();
    let mut rng = Rng(0x1234_5678_9ABC_DEF0 ^ ((tile as u64) << 32) ^ rows as u64);
    let w = (0..DIM * DIM).map(|_| rng.f16(&table)).collect();
    let x = (0..rows as usize * DIM).map(|_| rng.f16(&table)).collect();
    (w, x)
}

/// The host model of the kernel: per row, the AMP's f32 accumulation in one K block (K chunks
/// of 4 in order, the zero partial of column c added after chunk c/4) rounded to f16.
pub fn host_model(w: &[f16], x: &[f16], rows: usize) -> Vec<u16> {
    let wf: Vec<f32> = w
        .iter()
        .map(|v| crate::f16_bits_to_f32(v.to_bits()))
        .collect();
    let mut out = vec![0u16; rows * DIM];
    for r in 0..rows {
        let mut xr = [0f32; DIM];
        for (k, v) in xr.iter_mut().enumerate() {
            *v = crate::f16_bits_to_f32(x[r * DIM + k].to_bits());
        }
        let mut acc = [0f32; DIM];
        for p in 0..4 {
            for (c, a) in acc.iter_mut().enumerate() {
                let mut s = *a;
                for j in 0..4 {
                    s += xr[4 * p + j] * wf[(4 * p + j) * DIM + c];
                }
                *a = s;
            }
            for a in &mut acc[4 * p..4 * p + 4] {
                *a += 0.0;
            }
        }
        for c in 0..DIM {
            out[r * DIM + c] = crate::f32_to_f16_bits(acc[c]);
        }
    }
    out
}

fn f16_bytes(v: &[f16]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_bits().to_le_bytes()).collect()
}

/// Runs the benchmark for `rows` rows on tiles `0..tiles`, verifying every tile.
pub fn run_amp_bench(target: Target, tiles: u32, rows: u32) -> Result<AmpBenchPoint, BenchError> {
    let t0 = Instant::now();
    if rows < ROWS_MIN || !target.in_interleaved(X_ADDR, 64 * rows + X_PAD_BYTES) {
        return Err(BenchError::Rows { rows });
    }
    let options = AsmOptions {
        defines: vec![
            ("ROWS".into(), rows as i64),
            ("WEIGHTS".into(), WEIGHTS_ADDR as i64),
            ("X".into(), X_ADDR as i64),
            ("Y".into(), y_addr(rows) as i64),
        ],
        ..AsmOptions::default()
    };
    let object = assemble(AMP_KERNEL_SOURCE, AMP_KERNEL_FILE, &options)?;
    let entry = object
        .symbols
        .get("main")
        .copied()
        .unwrap_or(object.sections[0].address);
    let mut device = Device::new(target, tiles);
    for tile in 0..tiles {
        for s in &object.sections {
            device.write(tile, s.address, &s.bytes)?;
        }
        let (w, x) = inputs(tile, rows);
        device.write(tile, WEIGHTS_ADDR, &f16_bytes(&w))?;
        device.write(tile, X_ADDR, &f16_bytes(&x))?;
    }
    let t_run = Instant::now();
    let report = device.run(entry, &RunLimits::default())?;
    let run_seconds = t_run.elapsed().as_secs_f64();
    for tile in 0..tiles {
        let (w, x) = inputs(tile, rows);
        let want = host_model(&w, &x, rows as usize);
        let got = device.read(tile, y_addr(rows), 32 * rows)?;
        for (i, &wv) in want.iter().enumerate() {
            let g = u16::from_le_bytes([got[2 * i], got[2 * i + 1]]);
            if g != wv {
                return Err(BenchError::Mismatch {
                    tile,
                    row: i / DIM,
                    column: i % DIM,
                    got: g,
                    want: wv,
                });
            }
        }
    }
    let macs = rows as f64 * (DIM * DIM) as f64;
    Ok(AmpBenchPoint {
        n: rows,
        cycles: report.cycles,
        efficiency: macs / (report.cycles as f64 * AmpMode::F16F16.macs_per_cycle() as f64),
        worker_instructions: report.worker_instructions,
        instructions: report.instructions,
        run_seconds,
        total_seconds: t0.elapsed().as_secs_f64(),
    })
}

// Not `#[from]`: that would make the assembler's error the source as well, and error chains
// would print it twice.
impl From<ipu_isa::AsmError> for BenchError {
    fn from(e: ipu_isa::AsmError) -> Self {
        BenchError::Asm(e)
    }
}
