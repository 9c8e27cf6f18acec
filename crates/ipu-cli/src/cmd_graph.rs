//! `ipu models`, `ipu graph ...`
#[derive(clap::Args)]
pub struct ModelsArgs {}
#[derive(clap::Subcommand)]
pub enum GraphCommand {}
pub fn models(_: ModelsArgs) -> anyhow::Result<u8> {
    anyhow::bail!("ipu models is not built yet")
}
pub fn run(c: GraphCommand) -> anyhow::Result<u8> {
    match c {}
}
