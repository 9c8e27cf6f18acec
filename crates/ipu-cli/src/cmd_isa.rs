//! `ipu asm`, `ipu disasm`, `ipu sim`
#[derive(clap::Args)]
pub struct AsmArgs {}
#[derive(clap::Args)]
pub struct DisasmArgs {}
#[derive(clap::Args)]
pub struct SimArgs {}
pub fn asm(_: AsmArgs) -> anyhow::Result<u8> {
    anyhow::bail!("ipu asm is not built yet")
}
pub fn disasm(_: DisasmArgs) -> anyhow::Result<u8> {
    anyhow::bail!("ipu disasm is not built yet")
}
pub fn sim(_: SimArgs) -> anyhow::Result<u8> {
    anyhow::bail!("ipu sim is not built yet")
}
