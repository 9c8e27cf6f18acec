//! `ipu models`, `ipu graph print MODEL [--set key=value]...`, `ipu graph check FILE`.
//!
//! MODEL is a built-in name (see `ipu models`) or the path of a model file in the text form.

use anyhow::{Context, bail};
use ipu_graph::{Graph, models};

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
}

/// Arguments of `ipu graph check`.
#[derive(clap::Args)]
pub struct CheckArgs {
    /// Path of a model file in the text form.
    file: String,
}

/// Splits `key=value` settings.
pub fn parse_sets(sets: &[String]) -> anyhow::Result<Vec<(String, String)>> {
    sets.iter()
        .map(|s| match s.split_once('=') {
            Some((k, v)) if !k.is_empty() => Ok((k.trim().to_string(), v.trim().to_string())),
            _ => bail!("--set expects key=value, got `{s}`"),
        })
        .collect()
}

/// Reads and parses a model file.
pub fn load_file(path: &str) -> anyhow::Result<Graph> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {path}"))?;
    Ok(ipu_graph::parse(&text, path)?)
}

/// A built-in model with `--set` overrides, or a model file (a MODEL that names an existing
/// file, or contains a path separator, or ends in `.ipug`).
pub fn load_model(model: &str, sets: &[String]) -> anyhow::Result<Graph> {
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
            let g = load_model(&a.model, &a.set)?;
            print!("{}", ipu_graph::print(&g));
            Ok(0)
        }
        GraphCommand::Check(a) => {
            let g = load_file(&a.file)?;
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
