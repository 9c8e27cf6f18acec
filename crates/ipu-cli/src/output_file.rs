//! Files the CLI writes: whole or not at all.

use std::path::Path;

use anyhow::Context as _;

/// Writes `bytes` to `path` through a temporary file in the same directory and a rename
/// (removed on failure), so a failure never leaves a partial file that looks complete.
pub(crate) fn write_atomically(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    Ok(ipu_runtime::profile::write_atomically(path, bytes)?)
}
