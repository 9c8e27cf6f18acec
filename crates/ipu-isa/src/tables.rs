//! Binary layouts of the tables that supervisor instructions walk: exchange tables (`exch`)
//! and host-exchange tables (`hostx`). They live in tile memory like any other data, written by
//! the compiler and read by the device; both sides use these definitions.
//!
//! All fields are little-endian `u32`s (or `u16` pairs), tables are 4-byte aligned.

/// Magic word at the start of an exchange table: `"XCHG"`.
pub const EXCHANGE_TABLE_MAGIC: u32 = u32::from_le_bytes(*b"XCHG");
/// Magic word at the start of a host-exchange table: `"HOST"`.
pub const HOST_TABLE_MAGIC: u32 = u32::from_le_bytes(*b"HOST");
/// Bytes of an exchange table header: magic, row count, horizon cycles, reserved.
pub const EXCHANGE_HEADER_BYTES: u32 = 16;
/// Bytes of one exchange row.
pub const EXCHANGE_ROW_BYTES: u32 = 20;
/// Bytes of a host-exchange table header: magic, row count.
pub const HOST_HEADER_BYTES: u32 = 8;
/// Bytes of one host-exchange row.
pub const HOST_ROW_BYTES: u32 = 16;

/// One send of an exchange phase, in the sending tile's table.
///
/// The sender's port is busy for `ceil(bytes / 4)` cycles from `start_cycle` (relative to the
/// start of the phase); each destination tile receives the bytes from `start_cycle + latency`
/// for as many cycles. `dst_tile_count > 1` multicasts to the contiguous tiles
/// `dst_tile .. dst_tile + dst_tile_count`, all at `dst_addr`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ExchangeRow {
    /// Source address on the sending tile (4-byte aligned).
    pub src_addr: u32,
    /// Destination address on every destination tile (4-byte aligned).
    pub dst_addr: u32,
    /// Bytes to move (a multiple of 4, at least 4).
    pub bytes: u32,
    /// Cycle (from the start of the phase) at which the send starts.
    pub start_cycle: u32,
    /// First destination tile.
    pub dst_tile: u16,
    /// Number of destination tiles (at least 1).
    pub dst_tile_count: u16,
}

/// An exchange table: this tile's sends in one exchange phase.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ExchangeTable {
    /// Cycles the compiler scheduled for the whole phase (the same on every tile of a phase);
    /// the device checks that every transfer ends within it.
    pub horizon_cycles: u32,
    /// The sends.
    pub rows: Vec<ExchangeRow>,
}

/// Errors reading a table from memory bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TableError {
    /// The magic word is wrong.
    BadMagic { found: u32 },
    /// The bytes end before the table does.
    Truncated { needed: usize, available: usize },
}

impl std::fmt::Display for TableError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TableError::BadMagic { found } => write!(f, "bad table magic {found:#010x}"),
            TableError::Truncated { needed, available } => {
                write!(f, "table needs {needed} bytes, {available} available")
            }
        }
    }
}

fn word(bytes: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes"))
}

impl ExchangeTable {
    /// Bytes the table occupies.
    pub fn byte_len(&self) -> u32 {
        EXCHANGE_HEADER_BYTES + EXCHANGE_ROW_BYTES * self.rows.len() as u32
    }

    /// The table's bytes.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.byte_len() as usize);
        for w in [
            EXCHANGE_TABLE_MAGIC,
            self.rows.len() as u32,
            self.horizon_cycles,
            0,
        ] {
            out.extend_from_slice(&w.to_le_bytes());
        }
        for r in &self.rows {
            for w in [r.src_addr, r.dst_addr, r.bytes, r.start_cycle] {
                out.extend_from_slice(&w.to_le_bytes());
            }
            out.extend_from_slice(&r.dst_tile.to_le_bytes());
            out.extend_from_slice(&r.dst_tile_count.to_le_bytes());
        }
        out
    }

    /// Reads the number of bytes a table at the start of `bytes` occupies, from its header.
    pub fn byte_len_from_header(bytes: &[u8]) -> Result<usize, TableError> {
        if bytes.len() < EXCHANGE_HEADER_BYTES as usize {
            return Err(TableError::Truncated {
                needed: EXCHANGE_HEADER_BYTES as usize,
                available: bytes.len(),
            });
        }
        let magic = word(bytes, 0);
        if magic != EXCHANGE_TABLE_MAGIC {
            return Err(TableError::BadMagic { found: magic });
        }
        Ok(EXCHANGE_HEADER_BYTES as usize + EXCHANGE_ROW_BYTES as usize * word(bytes, 4) as usize)
    }

    /// Parses a table from the start of `bytes`.
    pub fn from_bytes(bytes: &[u8]) -> Result<ExchangeTable, TableError> {
        let len = Self::byte_len_from_header(bytes)?;
        if bytes.len() < len {
            return Err(TableError::Truncated {
                needed: len,
                available: bytes.len(),
            });
        }
        let rows = (0..word(bytes, 4) as usize)
            .map(|i| {
                let at = EXCHANGE_HEADER_BYTES as usize + i * EXCHANGE_ROW_BYTES as usize;
                ExchangeRow {
                    src_addr: word(bytes, at),
                    dst_addr: word(bytes, at + 4),
                    bytes: word(bytes, at + 8),
                    start_cycle: word(bytes, at + 12),
                    dst_tile: u16::from_le_bytes([bytes[at + 16], bytes[at + 17]]),
                    dst_tile_count: u16::from_le_bytes([bytes[at + 18], bytes[at + 19]]),
                }
            })
            .collect();
        Ok(ExchangeTable {
            horizon_cycles: word(bytes, 8),
            rows,
        })
    }
}

/// Direction of a host-exchange transfer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum HostDirection {
    /// Host page to tile memory (an input).
    ToDevice,
    /// Tile memory to host page (an output).
    ToHost,
}

/// One transfer at a host-exchange point.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct HostRow {
    /// Host page index (attached by the runtime's host exchange session).
    pub page: u16,
    /// Direction.
    pub direction: HostDirection,
    /// Byte offset in the page.
    pub page_offset: u32,
    /// Tile address (4-byte aligned).
    pub tile_addr: u32,
    /// Bytes (a multiple of 4).
    pub bytes: u32,
}

/// A host-exchange table: this tile's transfers at one host-exchange point.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct HostTable {
    /// The transfers.
    pub rows: Vec<HostRow>,
}

impl HostTable {
    /// Bytes the table occupies.
    pub fn byte_len(&self) -> u32 {
        HOST_HEADER_BYTES + HOST_ROW_BYTES * self.rows.len() as u32
    }

    /// The table's bytes.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.byte_len() as usize);
        out.extend_from_slice(&HOST_TABLE_MAGIC.to_le_bytes());
        out.extend_from_slice(&(self.rows.len() as u32).to_le_bytes());
        for r in &self.rows {
            out.extend_from_slice(&r.page.to_le_bytes());
            let dir: u16 = match r.direction {
                HostDirection::ToDevice => 0,
                HostDirection::ToHost => 1,
            };
            out.extend_from_slice(&dir.to_le_bytes());
            for w in [r.page_offset, r.tile_addr, r.bytes] {
                out.extend_from_slice(&w.to_le_bytes());
            }
        }
        out
    }

    /// Reads the number of bytes a table at the start of `bytes` occupies, from its header.
    pub fn byte_len_from_header(bytes: &[u8]) -> Result<usize, TableError> {
        if bytes.len() < HOST_HEADER_BYTES as usize {
            return Err(TableError::Truncated {
                needed: HOST_HEADER_BYTES as usize,
                available: bytes.len(),
            });
        }
        let magic = word(bytes, 0);
        if magic != HOST_TABLE_MAGIC {
            return Err(TableError::BadMagic { found: magic });
        }
        Ok(HOST_HEADER_BYTES as usize + HOST_ROW_BYTES as usize * word(bytes, 4) as usize)
    }

    /// Parses a table from the start of `bytes`. An unknown direction code is reported as
    /// `BadMagic` of the row's direction word.
    pub fn from_bytes(bytes: &[u8]) -> Result<HostTable, TableError> {
        let len = Self::byte_len_from_header(bytes)?;
        if bytes.len() < len {
            return Err(TableError::Truncated {
                needed: len,
                available: bytes.len(),
            });
        }
        let mut rows = Vec::new();
        for i in 0..word(bytes, 4) as usize {
            let at = HOST_HEADER_BYTES as usize + i * HOST_ROW_BYTES as usize;
            let dir = u16::from_le_bytes([bytes[at + 2], bytes[at + 3]]);
            let direction = match dir {
                0 => HostDirection::ToDevice,
                1 => HostDirection::ToHost,
                other => {
                    return Err(TableError::BadMagic {
                        found: other as u32,
                    });
                }
            };
            rows.push(HostRow {
                page: u16::from_le_bytes([bytes[at], bytes[at + 1]]),
                direction,
                page_offset: word(bytes, at + 4),
                tile_addr: word(bytes, at + 8),
                bytes: word(bytes, at + 12),
            });
        }
        Ok(HostTable { rows })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exchange_table_round_trips() {
        let t = ExchangeTable {
            horizon_cycles: 120,
            rows: vec![ExchangeRow {
                src_addr: 0x80000,
                dst_addr: 0x90000,
                bytes: 64,
                start_cycle: 3,
                dst_tile: 7,
                dst_tile_count: 2,
            }],
        };
        let b = t.to_bytes();
        assert_eq!(b.len() as u32, t.byte_len());
        assert_eq!(ExchangeTable::from_bytes(&b).unwrap(), t);
        assert!(matches!(
            ExchangeTable::from_bytes(&b[..20]),
            Err(TableError::Truncated { .. })
        ));
    }

    #[test]
    fn host_table_round_trips() {
        let t = HostTable {
            rows: vec![HostRow {
                page: 1,
                direction: HostDirection::ToHost,
                page_offset: 16,
                tile_addr: 0x80000,
                bytes: 32,
            }],
        };
        let b = t.to_bytes();
        assert_eq!(HostTable::from_bytes(&b).unwrap(), t);
    }
}
