//! `ipu models`, `ipu graph print MODEL [--set key=value]... [-o FILE]`, `ipu graph check FILE`.
//!
//! MODEL is a built-in name (see `ipu models`), the path of a model file in the text form,
//! whose constant files (`file("NAME.npy")`) are read from the text file's directory, or an
//! ONNX model (`*.onnx`, imported with its `--dim NAME=VALUE` bindings).

use anyhow::{Context, bail};
use ipu_graph::{Graph, models};

use crate::{cmd_onnx, graph_files};

/// Arguments of `ipu models`.
#[derive(clap::Args)]
pub struct ModelsArgs {}

/// The `ipu graph` subcommands.
#[derive(clap::Subcommand)]
pub enum GraphCommand {
    /// Print a model (built-in or file) in the text form.
    Print(PrintArgs),
    /// Parse and verify a model file; print a one-line summary.
    Check(CheckArgs),
}

/// Arguments of `ipu graph print`.
#[derive(clap::Args)]
pub struct PrintArgs {
    /// Built-in model name or path of a model file.
    model: String,
    /// Override a built-in's parameter: `--set key=value` (repeatable).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    set: Vec<String>,
    /// Bind a symbolic dimension of an ONNX model: `--dim NAME=VALUE` (repeatable).
    #[arg(long = "dim", value_name = "NAME=VALUE")]
    dim: Vec<String>,
    /// Write the text to FILE and the large constants as `.npy` files beside it, instead of
    /// printing the text.
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    output: Option<std::path::PathBuf>,
}

/// Arguments of `ipu graph check`.
#[derive(clap::Args)]
pub struct CheckArgs {
    /// Path of a model file in the text form or an ONNX model.
    file: String,
    /// Bind a symbolic dimension of an ONNX model: `--dim NAME=VALUE` (repeatable).
    #[arg(long = "dim", value_name = "NAME=VALUE")]
    dim: Vec<String>,
}

/// Splits `key=value` settings.
pub fn parse_sets(sets: &[String]) -> anyhow::Result<Vec<(String, String)>> {
    let mut out: Vec<(String, String)> = Vec::new();
    for s in sets {
        let Some((k, v)) = s.split_once('=').filter(|(k, _)| !k.trim().is_empty()) else {
            bail!("--set expects key=value, got `{s}`");
        };
        let (k, v) = (k.trim().to_string(), v.trim().to_string());
        if let Some((_, first)) = out.iter().find(|(key, _)| *key == k) {
            bail!("--set {k} is given twice ({k}={first} and {k}={v}); give each parameter once");
        }
        out.push((k, v));
    }
    Ok(out)
}

/// Reads and parses a model file; its constant files are read from the file's directory.
pub fn load_file(path: &str) -> anyhow::Result<Graph> {
    let text = crate::text_input::read_text(std::path::Path::new(path))?;
    let dir = std::path::Path::new(path)
        .parent()
        .unwrap_or(std::path::Path::new("."));
    Ok(ipu_graph::parse_with(&text, path, &mut |c| {
        graph_files::read_constant(dir, c)
    })?)
}

/// A built-in model with `--set` overrides, or a model file (a MODEL that names an existing
/// file, or contains a path separator, or ends in `.ipug` or `.onnx`).
pub fn load_model(model: &str, sets: &[String]) -> anyhow::Result<Graph> {
    load_model_with(model, sets, &[])
}

/// [`load_model`] with `--dim` bindings for an ONNX model.
pub fn load_model_with(model: &str, sets: &[String], dims: &[String]) -> anyhow::Result<Graph> {
    if cmd_onnx::is_onnx(model) {
        if !sets.is_empty() {
            bail!("--set applies to built-in models only, not to the ONNX model {model}");
        }
        return cmd_onnx::load(model, dims);
    }
    if !dims.is_empty() {
        bail!("--dim applies to ONNX models only, not to {model}");
    }
    let is_file = std::path::Path::new(model).is_file()
        || model.contains(std::path::MAIN_SEPARATOR)
        || model.contains('/')
        || model.ends_with(".ipug");
    if is_file {
        if !sets.is_empty() {
            bail!("--set applies to built-in models only, not to the file {model}");
        }
        return load_file(model);
    }
    Ok(models::build(model, &parse_sets(sets)?)?)
}

/// `ipu models`.
pub fn models(_: ModelsArgs) -> anyhow::Result<u8> {
    for m in models::list() {
        println!("{}: {}", m.name, m.description);
        for p in m.params {
            println!("  {}={}  {}", p.key, p.default, p.help);
        }
    }
    Ok(0)
}

/// `ipu graph ...`.
pub fn run(c: GraphCommand) -> anyhow::Result<u8> {
    match c {
        GraphCommand::Print(a) => {
            let g = load_model_with(&a.model, &a.set, &a.dim)?;
            let printed = ipu_graph::print_with_files(&g);
            match a.output {
                Some(path) => {
                    // The constant files first: the graph file, written last, references them.
                    let dir = path.parent().unwrap_or(std::path::Path::new("."));
                    graph_files::write_constants(dir, &printed.files)?;
                    crate::output_file::write_atomically(&path, printed.text.as_bytes())
                        .with_context(|| format!("writing {}", path.display()))?;
                }
                None => {
                    if !printed.files.is_empty() {
                        tracing::warn!(
                            files = printed.files.len(),
                            "the text references constant files it does not write; give -o FILE \
                             to write them beside it"
                        );
                    }
                    print!("{}", printed.text);
                }
            }
            Ok(0)
        }
        GraphCommand::Check(a) => {
            let g = if cmd_onnx::is_onnx(&a.file) {
                cmd_onnx::load(&a.file, &a.dim)?
            } else {
                if !a.dim.is_empty() {
                    bail!("--dim applies to ONNX models only, not to {}", a.file);
                }
                load_file(&a.file)?
            };
            println!(
                "graph={} operations={} values={} inputs={} outputs={} result=ok",
                g.name,
                g.operations().len(),
                g.values().len(),
                g.inputs().len(),
                g.outputs().len()
            );
            Ok(0)
        }
    }
}
