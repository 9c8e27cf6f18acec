//! Reading the text inputs of the command line (assembly, the graph text form) with errors
//! that say where: a file that is not UTF-8 is refused with the line, column and byte offset of
//! the first bad byte. The files an assembly includes are read for the assembler, which checks
//! their text, no further than the bound it gives.

use std::io::Read as _;
use std::path::Path;

use anyhow::Context as _;

/// The line and column (from 1, in characters) and the byte offset (from 0) of byte `offset`
/// of `bytes`, whose first `offset` bytes are valid UTF-8.
pub fn position(bytes: &[u8], offset: usize) -> (usize, usize) {
    let before = &bytes[..offset];
    let line_start = before
        .iter()
        .rposition(|&b| b == b'\n')
        .map_or(0, |i| i + 1);
    let line = before.iter().filter(|&&b| b == b'\n').count() + 1;
    let column = String::from_utf8_lossy(&before[line_start..])
        .chars()
        .count()
        + 1;
    (line, column)
}

/// The contents of the text file `path`.
pub fn read_text(path: &Path) -> anyhow::Result<String> {
    let bytes = std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
    String::from_utf8(bytes).map_err(|e| {
        let offset = e.utf8_error().valid_up_to();
        let bytes = e.as_bytes();
        let (line, column) = position(bytes, offset);
        anyhow::anyhow!(
            "{}:{line}:{column}: the file is not UTF-8 text: byte {:#04x} at byte offset {offset} does not begin a valid UTF-8 character",
            path.display(),
            bytes[offset]
        )
    })
}

/// The bytes of the file an assembly's `.include` names (the assembler's resolver): at most
/// one byte past `bytes_max`, which the assembler refuses.
pub fn read_include(include: ipu_isa::Include<'_>) -> Result<Vec<u8>, String> {
    let file = std::fs::File::open(include.path).map_err(|e| e.to_string())?;
    let mut bytes = Vec::new();
    file.take(include.bytes_max as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| e.to_string())?;
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_count_lines_and_characters() {
        let b = b"ab\n\xc3\xa7d\xff";
        assert_eq!(position(b, 0), (1, 1));
        assert_eq!(position(b, 3), (2, 1));
        assert_eq!(position(b, 6), (2, 3));
    }
}
