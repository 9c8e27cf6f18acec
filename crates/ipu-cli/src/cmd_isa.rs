//! `ipu asm`, `ipu disasm`
#[derive(clap::Args)]
pub struct AsmArgs {}
#[derive(clap::Args)]
pub struct DisasmArgs {}
pub fn asm(_: AsmArgs) -> anyhow::Result<u8> {
    anyhow::bail!("ipu asm is not built yet")
}
pub fn disasm(_: DisasmArgs) -> anyhow::Result<u8> {
    anyhow::bail!("ipu disasm is not built yet")
}
