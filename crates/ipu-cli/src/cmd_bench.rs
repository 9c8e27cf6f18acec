//! `ipu bench ...`
#[derive(clap::Args)]
pub struct AmpArgs {}
pub fn amp(_: AmpArgs) -> anyhow::Result<u8> {
    anyhow::bail!("ipu bench amp is not built yet")
}
