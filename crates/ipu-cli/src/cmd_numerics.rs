//! `ipu numerics ...`: the FP8 formats from the command line.
//!
//! * `ipu numerics table FORMAT [--scale S]`: the 256 codes of a format, one line each, as
//!   `0x3c 1.5` (hex code, decoded value printed as the shortest decimal that reads back to the
//!   same f32; NaN as `nan`, infinities as `inf`/`-inf`, negative zero as `-0`).
//! * `ipu numerics encode --format FORMAT [--scale S] [--rounding nearest|stochastic]
//!   [--seed S] [--overflow saturate|nan]`: reads decimal numbers from stdin, one a line, and
//!   prints one code a line (`0x..`).
//!
//! Input rules for `encode`: each line is trimmed of surrounding white space; blank lines are
//! skipped and produce no output line; every other line must be a number as Rust's `f32`
//! parser reads it (`1.5`, `-2e-3`, `inf`, `-inf`, `nan`), rounded to the nearest f32 first and
//! then encoded. Stdin is read and checked whole before anything is printed: a bad line (named
//! by its 1-based line number, blank lines counted) prints no codes at all and exits with
//! status 2. The defaults (`--rounding nearest --overflow nan --scale 0`) give exactly the
//! codes of ml_dtypes' `astype` from float32. `--seed` (default 0) seeds the stochastic
//! rounder and is ignored with `--rounding nearest`.

use std::io::{Read, Write};

use anyhow::{Context, bail};
use ipu_numerics::{
    Fp8Format, Overflow, StochasticRounder, check_scale, decode, encode, encode_stochastic,
};

/// The `ipu numerics` subcommands.
#[derive(clap::Subcommand)]
pub enum NumericsCommand {
    /// Print the 256 codes of a format and their values: `0x3c 1.5`.
    Table(TableArgs),
    /// Encode decimal numbers read from stdin (one a line) into FP8 codes, one a line.
    Encode(EncodeArgs),
}

/// Arguments of `ipu numerics table`.
#[derive(clap::Args)]
pub struct TableArgs {
    /// The format: f143, f152, e4m3fn or e5m2.
    #[arg(value_parser = parse_format)]
    format: Fp8Format,
    /// Power-of-two scale applied to every value (-32..=31).
    #[arg(long, default_value_t = 0, allow_negative_numbers = true)]
    scale: i32,
}

/// Arguments of `ipu numerics encode`.
#[derive(clap::Args)]
pub struct EncodeArgs {
    /// The format: f143, f152, e4m3fn or e5m2.
    #[arg(long, value_parser = parse_format)]
    format: Fp8Format,
    /// Power-of-two scale: each input is divided by 2^scale before rounding (-32..=31).
    #[arg(long, default_value_t = 0, allow_negative_numbers = true)]
    scale: i32,
    /// Rounding: to nearest, ties to even; or stochastic with the seeded generator.
    #[arg(long, value_enum, default_value_t = RoundingArg::Nearest)]
    rounding: RoundingArg,
    /// Seed of the stochastic rounder (SplitMix64); ignored with `--rounding nearest`.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Values beyond the largest finite one: clamp to it, or give NaN (E5M2: infinity).
    #[arg(long, value_enum, default_value_t = OverflowArg::Nan)]
    overflow: OverflowArg,
}

/// `--rounding` values.
#[derive(Clone, Copy, clap::ValueEnum)]
enum RoundingArg {
    Nearest,
    Stochastic,
}

/// `--overflow` values.
#[derive(Clone, Copy, clap::ValueEnum)]
enum OverflowArg {
    Saturate,
    Nan,
}

fn parse_format(s: &str) -> Result<Fp8Format, String> {
    Fp8Format::parse(s).map_err(|e| e.to_string())
}

/// Runs an `ipu numerics` subcommand.
pub fn run(c: NumericsCommand) -> anyhow::Result<u8> {
    match c {
        NumericsCommand::Table(a) => table(a),
        NumericsCommand::Encode(a) => encode_stdin(a),
    }
}

/// The table's spelling of a decoded value.
fn format_value(v: f32) -> String {
    if v.is_nan() {
        "nan".to_string()
    } else {
        // `{}` prints the shortest decimal that reads back to `v`, and `inf`/`-inf`.
        format!("{v}")
    }
}

fn table(a: TableArgs) -> anyhow::Result<u8> {
    check_scale(a.scale)?;
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    for code in 0..=255u8 {
        writeln!(
            out,
            "{code:#04x} {}",
            format_value(decode(a.format, code, a.scale))
        )?;
    }
    out.flush()?;
    Ok(0)
}

/// Parses stdin into numbers, skipping blank lines; the error names the first bad line.
fn parse_numbers(input: &[u8]) -> anyhow::Result<Vec<f32>> {
    let mut numbers = Vec::new();
    for (index, raw) in input.split(|&b| b == b'\n').enumerate() {
        let line = index + 1;
        let text = std::str::from_utf8(raw)
            .with_context(|| format!("stdin line {line}: not valid UTF-8"))?
            .trim();
        if text.is_empty() {
            continue;
        }
        match text.parse::<f32>() {
            Ok(x) => numbers.push(x),
            Err(_) => bail!("stdin line {line}: {text:?} is not a number"),
        }
    }
    Ok(numbers)
}

fn encode_stdin(a: EncodeArgs) -> anyhow::Result<u8> {
    check_scale(a.scale)?;
    let overflow = match a.overflow {
        OverflowArg::Saturate => Overflow::Saturate,
        OverflowArg::Nan => Overflow::Nan,
    };
    let mut input = Vec::new();
    std::io::stdin()
        .lock()
        .read_to_end(&mut input)
        .context("reading stdin")?;
    let numbers = parse_numbers(&input)?;
    let mut rng = StochasticRounder::new(a.seed);
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    for x in numbers {
        let code = match a.rounding {
            RoundingArg::Nearest => encode(a.format, x, a.scale, overflow),
            RoundingArg::Stochastic => encode_stochastic(a.format, x, a.scale, overflow, &mut rng),
        };
        writeln!(out, "{code:#04x}")?;
    }
    out.flush()?;
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_print_short_and_exact() {
        assert_eq!(format_value(1.5), "1.5");
        assert_eq!(format_value(f32::NAN), "nan");
        assert_eq!(format_value(f32::NEG_INFINITY), "-inf");
        assert_eq!(format_value(-0.0), "-0");
        assert_eq!(
            format_value(2f32.powi(-17)).parse::<f32>(),
            Ok(2f32.powi(-17))
        );
    }

    #[test]
    fn blank_lines_are_skipped_and_bad_lines_named() {
        assert_eq!(parse_numbers(b"1\n\n  -2.5 \r\n").unwrap(), vec![1.0, -2.5]);
        let e = parse_numbers(b"1\n\nabc\n").unwrap_err().to_string();
        assert_eq!(e, "stdin line 3: \"abc\" is not a number");
    }
}
