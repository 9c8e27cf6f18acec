//! Assembled objects and their binary container (the `.bin` files of `ipu asm -o`).
//!
//! Container layout (all integers little-endian; documented in `docs/isa.md`):
//!
//! ```text
//! 0   magic "IPUO"            4 bytes
//! 4   version                 u16 = 1
//! 6   reserved                u16 = 0
//! 8   section count           u32
//! 12  symbol count            u32
//! 16  sections, each:         address u32, byte length u32, name length u32,
//!                             name (UTF-8) zero-padded to 4, bytes zero-padded to 4
//! ..  symbols, each:          address u32, name length u32, name zero-padded to 4
//! ..  CRC-32 (IEEE) of every byte before it, u32; nothing may follow
//! ```

use std::collections::BTreeMap;

/// Magic bytes at the start of an object container.
pub const OBJECT_MAGIC: [u8; 4] = *b"IPUO";
/// The container version this crate writes and reads.
pub const OBJECT_VERSION: u16 = 1;
/// Bytes of the container header.
pub const OBJECT_HEADER_BYTES: usize = 16;
/// Longest section or symbol name, in bytes.
pub const NAME_BYTES_MAX: usize = 255;
/// Most sections in one object.
pub const SECTIONS_MAX: u32 = 4096;
/// Largest section, in bytes (16 MiB: far more than a tile's 624 KiB, small enough that a
/// corrupt length cannot make the reader allocate much).
pub const SECTION_BYTES_MAX: u32 = 16 << 20;

/// A contiguous run of bytes at an address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Section {
    /// Name, e.g. `.text`.
    pub name: String,
    /// Address of the first byte.
    pub address: u32,
    /// Contents.
    pub bytes: Vec<u8>,
}

impl Section {
    /// One past the last byte's address (as u64: a section may end at 2^32).
    pub fn end(&self) -> u64 {
        self.address as u64 + self.bytes.len() as u64
    }
}

/// The output of the assembler: sections (in order of first appearance, non-overlapping) and
/// the label addresses.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Object {
    /// The sections.
    pub sections: Vec<Section>,
    /// Labels and their addresses.
    pub symbols: BTreeMap<String, u32>,
}

/// A memory image: the bytes from the lowest section address to the highest section end, gaps
/// filled with zeros (which decode as `nop`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct FlatImage {
    /// Address of `bytes[0]`.
    pub address: u32,
    /// Contents.
    pub bytes: Vec<u8>,
}

/// A corrupt or unsupported object container.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("corrupt object at byte offset {offset}: {message}")]
pub struct ObjectError {
    /// Byte offset in the container where the problem was found.
    pub offset: usize,
    /// What is wrong.
    pub message: String,
}

fn pad4(n: usize) -> usize {
    (4 - n % 4) % 4
}

fn put_name(out: &mut Vec<u8>, name: &str) {
    out.extend_from_slice(name.as_bytes());
    out.resize(out.len() + pad4(name.len()), 0);
}

/// Whether a name is usable as a label in assembly text (what the disassembler prints).
pub fn is_symbol_name(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_' || c == '.')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.')
        && name != "."
}

impl Object {
    /// The container bytes.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::new();
        out.extend_from_slice(&OBJECT_MAGIC);
        out.extend_from_slice(&OBJECT_VERSION.to_le_bytes());
        out.extend_from_slice(&0u16.to_le_bytes());
        out.extend_from_slice(&(self.sections.len() as u32).to_le_bytes());
        out.extend_from_slice(&(self.symbols.len() as u32).to_le_bytes());
        for s in &self.sections {
            out.extend_from_slice(&s.address.to_le_bytes());
            out.extend_from_slice(&(s.bytes.len() as u32).to_le_bytes());
            out.extend_from_slice(&(s.name.len() as u32).to_le_bytes());
            put_name(&mut out, &s.name);
            out.extend_from_slice(&s.bytes);
            out.resize(out.len() + pad4(s.bytes.len()), 0);
        }
        for (name, &addr) in &self.symbols {
            out.extend_from_slice(&addr.to_le_bytes());
            out.extend_from_slice(&(name.len() as u32).to_le_bytes());
            put_name(&mut out, name);
        }
        let crc = crc32fast::hash(&out);
        out.extend_from_slice(&crc.to_le_bytes());
        out
    }

    /// Reads a container, checking every field; the error names the byte offset.
    pub fn from_bytes(bytes: &[u8]) -> Result<Object, ObjectError> {
        let mut r = Reader { bytes, at: 0 };
        let magic = r.take(4, "magic")?;
        if magic != OBJECT_MAGIC {
            return Err(r.error_at(0, format!("bad magic {magic:02x?}, expected \"IPUO\"")));
        }
        let v = r.take(2, "version")?;
        let version = u16::from_le_bytes([v[0], v[1]]);
        if version != OBJECT_VERSION {
            return Err(r.error_at(4, format!("unsupported version {version}")));
        }
        let reserved = r.take(2, "reserved")?;
        if reserved != [0, 0] {
            return Err(r.error_at(6, "reserved header bytes are not zero".into()));
        }
        let sections = r.u32("section count")?;
        if sections > SECTIONS_MAX {
            return Err(r.error_at(8, format!("{sections} sections (at most {SECTIONS_MAX})")));
        }
        let symbols = r.u32("symbol count")?;
        let mut obj = Object::default();
        for _ in 0..sections {
            let start = r.at;
            let address = r.u32("section address")?;
            let len = r.u32("section length")?;
            if len > SECTION_BYTES_MAX {
                return Err(r.error_at(
                    start + 4,
                    format!("section of {len} bytes (at most {SECTION_BYTES_MAX})"),
                ));
            }
            if address as u64 + len as u64 > 1 << 32 {
                return Err(r.error_at(start, "section runs past the 32-bit address space".into()));
            }
            let name = r.name("section")?;
            let data = r.take(len as usize, "section bytes")?.to_vec();
            r.padding(len as usize)?;
            let section = Section {
                name,
                address,
                bytes: data,
            };
            for other in &obj.sections {
                if (section.address as u64) < other.end() && (other.address as u64) < section.end()
                {
                    return Err(r.error_at(
                        start,
                        format!(
                            "section `{}` overlaps section `{}`",
                            section.name, other.name
                        ),
                    ));
                }
                if section.name == other.name {
                    return Err(r.error_at(start, format!("duplicate section `{}`", other.name)));
                }
            }
            obj.sections.push(section);
        }
        for _ in 0..symbols {
            let start = r.at;
            let address = r.u32("symbol address")?;
            let name = r.name("symbol")?;
            if !is_symbol_name(&name) {
                return Err(r.error_at(start + 4, format!("invalid symbol name {name:?}")));
            }
            if obj.symbols.insert(name.clone(), address).is_some() {
                return Err(r.error_at(start, format!("duplicate symbol `{name}`")));
            }
        }
        let body_end = r.at;
        let stored = r.u32("checksum")?;
        let computed = crc32fast::hash(&bytes[..body_end]);
        if stored != computed {
            return Err(r.error_at(
                body_end,
                format!("checksum {stored:#010x} does not match the contents ({computed:#010x})"),
            ));
        }
        if r.at != bytes.len() {
            return Err(r.error_at(r.at, format!("{} bytes after the end", bytes.len() - r.at)));
        }
        Ok(obj)
    }

    /// The sections as one memory image (see [`FlatImage`]); empty when there are no bytes.
    pub fn to_flat_image(&self) -> FlatImage {
        let used: Vec<&Section> = self
            .sections
            .iter()
            .filter(|s| !s.bytes.is_empty())
            .collect();
        let Some(lo) = used.iter().map(|s| s.address).min() else {
            return FlatImage::default();
        };
        let hi = used.iter().map(|s| s.end()).max().unwrap_or(lo as u64);
        let mut bytes = vec![0u8; (hi - lo as u64) as usize];
        for s in used {
            let at = (s.address - lo) as usize;
            bytes[at..at + s.bytes.len()].copy_from_slice(&s.bytes);
        }
        FlatImage { address: lo, bytes }
    }

    /// The section holding `address`, if any.
    pub fn section_at(&self, address: u32) -> Option<&Section> {
        self.sections
            .iter()
            .find(|s| s.address <= address && (address as u64) < s.end())
    }
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn error_at(&self, offset: usize, message: String) -> ObjectError {
        ObjectError { offset, message }
    }

    fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8], ObjectError> {
        let available = self.bytes.len() - self.at;
        if n > available {
            return Err(self.error_at(
                self.at,
                format!("truncated {what}: needs {n} bytes, {available} left"),
            ));
        }
        let s = &self.bytes[self.at..self.at + n];
        self.at += n;
        Ok(s)
    }

    fn u32(&mut self, what: &str) -> Result<u32, ObjectError> {
        let b = self.take(4, what)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn padding(&mut self, len: usize) -> Result<(), ObjectError> {
        let at = self.at;
        let pad = self.take(pad4(len), "padding")?;
        if pad.iter().any(|&b| b != 0) {
            return Err(self.error_at(at, "padding bytes are not zero".into()));
        }
        Ok(())
    }

    fn name(&mut self, what: &str) -> Result<String, ObjectError> {
        let at = self.at;
        let len = self.u32("name length")? as usize;
        if len > NAME_BYTES_MAX {
            return Err(self.error_at(
                at,
                format!("{what} name of {len} bytes (at most {NAME_BYTES_MAX})"),
            ));
        }
        let name_at = self.at;
        let raw = self.take(len, "name")?;
        let name = std::str::from_utf8(raw)
            .map_err(|_| self.error_at(name_at, format!("{what} name is not UTF-8")))?
            .to_string();
        self.padding(len)?;
        Ok(name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Object {
        Object {
            sections: vec![
                Section {
                    name: ".text".into(),
                    address: 0x4C000,
                    bytes: vec![1, 2, 3, 4, 5],
                },
                Section {
                    name: "data".into(),
                    address: 0x80000,
                    bytes: vec![9; 8],
                },
            ],
            symbols: [("main".to_string(), 0x4C000), ("buf".to_string(), 0x80000)].into(),
        }
    }

    #[test]
    fn container_round_trips() {
        let o = sample();
        assert_eq!(Object::from_bytes(&o.to_bytes()), Ok(o));
    }

    #[test]
    fn every_single_byte_corruption_and_truncation_is_detected() {
        let b = sample().to_bytes();
        for i in 0..b.len() {
            let mut c = b.clone();
            c[i] ^= 0x40;
            let e = Object::from_bytes(&c).expect_err("corruption detected");
            assert!(e.offset <= b.len(), "{e}");
            let e = Object::from_bytes(&b[..i]).expect_err("truncation detected");
            assert!(e.offset <= i, "{e}");
        }
        let mut longer = b.clone();
        longer.push(0);
        assert_eq!(Object::from_bytes(&longer).unwrap_err().offset, b.len());
    }

    #[test]
    fn flat_image_fills_gaps_with_zeros() {
        let img = sample().to_flat_image();
        assert_eq!(img.address, 0x4C000);
        assert_eq!(img.bytes.len(), 0x80000 - 0x4C000 + 8);
        assert_eq!(&img.bytes[..6], &[1, 2, 3, 4, 5, 0]);
    }
}
