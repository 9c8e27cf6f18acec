//! `ipu reference`
#[derive(clap::Args)]
pub struct ReferenceArgs {}
pub fn run(_: ReferenceArgs) -> anyhow::Result<u8> {
    anyhow::bail!("ipu reference is not built yet")
}
