//! `ipu sim`, `ipu bench amp`
#[derive(clap::Args)]
pub struct SimArgs {}
#[derive(clap::Args)]
pub struct AmpArgs {}
pub fn sim(_: SimArgs) -> anyhow::Result<u8> {
    anyhow::bail!("ipu sim is not built yet")
}
pub fn amp(_: AmpArgs) -> anyhow::Result<u8> {
    anyhow::bail!("ipu bench amp is not built yet")
}
