//! `ipu asm`, `ipu disasm`: the tile assembler and disassembler (see `docs/isa.md`).

use std::path::PathBuf;

use anyhow::Context as _;
use ipu_isa::{AsmOptions, Object};

/// Arguments of `ipu asm`.
#[derive(clap::Args)]
pub struct AsmArgs {
    /// The assembly source file.
    pub input: PathBuf,
    /// The object file to write (default: the input with the extension `.bin`).
    #[arg(short, long)]
    pub output: Option<PathBuf>,
    /// Address of the default section `.text` (decimal or 0x-prefixed hex).
    #[arg(long, default_value = "0x4c000", value_parser = parse_u32)]
    pub base: u32,
    /// Define a constant, as `NAME=VALUE`; overrides a `.equ` of the same name. Repeatable.
    #[arg(short = 'D', long = "define", value_parser = parse_define)]
    pub defines: Vec<(String, i64)>,
}

/// Arguments of `ipu disasm`.
#[derive(clap::Args)]
pub struct DisasmArgs {
    /// The object file written by `ipu asm`.
    pub input: PathBuf,
    /// Fail on a word that is not an instruction instead of printing it as `.word`.
    #[arg(long)]
    pub strict: bool,
    /// Read the input as raw bytes (no object container) loaded at this address.
    #[arg(long, value_parser = parse_u32)]
    pub raw: Option<u32>,
}

fn parse_int(s: &str) -> Result<i64, String> {
    let t = s.trim();
    let (neg, t) = match t.strip_prefix('-') {
        Some(r) => (true, r),
        None => (false, t),
    };
    let v = if let Some(h) = t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        i64::from_str_radix(h, 16)
    } else if let Some(b) = t.strip_prefix("0b") {
        i64::from_str_radix(b, 2)
    } else {
        t.parse()
    }
    .map_err(|e| format!("`{s}` is not an integer: {e}"))?;
    Ok(if neg { -v } else { v })
}

fn parse_u32(s: &str) -> Result<u32, String> {
    let v = parse_int(s)?;
    u32::try_from(v).map_err(|_| format!("`{s}` is not an address in 0..=0xffffffff"))
}

fn parse_define(s: &str) -> Result<(String, i64), String> {
    let (name, value) = s
        .split_once('=')
        .ok_or_else(|| format!("`{s}` is not NAME=VALUE"))?;
    Ok((name.trim().to_string(), parse_int(value)?))
}

/// `ipu asm FILE.s [-o FILE.bin]`: assembles a file into an object container.
pub fn asm(args: AsmArgs) -> anyhow::Result<u8> {
    let source = crate::text_input::read_text(&args.input)?;
    let options = AsmOptions {
        base: args.base,
        defines: args.defines,
    };
    let object = ipu_isa::assemble_with(
        &source,
        &args.input.to_string_lossy(),
        &options,
        &mut crate::text_input::read_include,
    )?;
    let output = args
        .output
        .unwrap_or_else(|| args.input.with_extension("bin"));
    let bytes = object.to_bytes();
    crate::output_file::write_atomically(&output, &bytes)
        .with_context(|| format!("cannot write {}", output.display()))?;
    let code: usize = object.sections.iter().map(|s| s.bytes.len()).sum();
    println!(
        "output={} sections={} section_bytes={code} symbols={} file_bytes={}",
        output.display(),
        object.sections.len(),
        object.symbols.len(),
        bytes.len()
    );
    Ok(0)
}

/// `ipu disasm FILE.bin`: prints the disassembly of an object (or of raw bytes with `--raw`).
pub fn disasm(args: DisasmArgs) -> anyhow::Result<u8> {
    let bytes = std::fs::read(&args.input)
        .with_context(|| format!("cannot read {}", args.input.display()))?;
    let object = match args.raw {
        Some(address) => Object {
            sections: vec![ipu_isa::Section {
                name: ".text".into(),
                address,
                bytes,
            }],
            symbols: Default::default(),
        },
        None => Object::from_bytes(&bytes)
            .with_context(|| format!("corrupt binary {}", args.input.display()))?,
    };
    let out = ipu_isa::disassemble_object_with(&object, !args.strict)
        .with_context(|| format!("{}", args.input.display()))?;
    print!("{out}");
    Ok(0)
}
