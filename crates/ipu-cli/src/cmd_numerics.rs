//! `ipu numerics ...`
#[derive(clap::Subcommand)]
pub enum NumericsCommand {}
pub fn run(c: NumericsCommand) -> anyhow::Result<u8> {
    match c {}
}
