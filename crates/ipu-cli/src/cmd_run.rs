//! `ipu build`, `ipu exec`, `ipu run`
#[derive(clap::Args)]
pub struct BuildArgs {}
#[derive(clap::Args)]
pub struct ExecArgs {}
#[derive(clap::Args)]
pub struct RunArgs {}
pub fn build(_: BuildArgs) -> anyhow::Result<u8> {
    anyhow::bail!("ipu build is not built yet")
}
pub fn exec(_: ExecArgs) -> anyhow::Result<u8> {
    anyhow::bail!("ipu exec is not built yet")
}
pub fn run(_: RunArgs) -> anyhow::Result<u8> {
    anyhow::bail!("ipu run is not built yet")
}
