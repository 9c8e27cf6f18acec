//! Binary layouts of the tables that supervisor instructions walk: exchange tables (`exch`)
//! and host-exchange tables (`hostx`). They live in tile memory like any other data, written by
//! the compiler and read by the device; both sides use these definitions.
//!
//! All fields are little-endian `u32`s (or `u16` pairs), tables are 4-byte aligned.

/// Magic word at the start of an exchange table: `"XCHG"`.
pub const EXCHANGE_TABLE_MAGIC: u32 = u32::from_le_bytes(*b"XCHG");
/// Magic word at the start of a host-exchange table: `"HOST"`.
pub const HOST_TABLE_MAGIC: u32 = u32::from_le_bytes(*b"HOST");
/// Bytes of an exchange table header: magic, row count, horizon cycles, table bytes.
pub const EXCHANGE_HEADER_BYTES: u32 = 16;
/// Bytes of one exchange row.
pub const EXCHANGE_ROW_BYTES: u32 = 20;
/// Bytes a repeated row adds: repeat count, source stride, destination stride.
pub const EXCHANGE_REPEAT_BYTES: u32 = 12;
/// Set in a row's encoded destination tile count when the repeat words follow the row.
pub const EXCHANGE_REPEAT_FLAG: u16 = 0x8000;
/// Bytes of a host-exchange table header: magic, row count.
pub const HOST_HEADER_BYTES: u32 = 8;
/// Bytes of one host-exchange row.
pub const HOST_ROW_BYTES: u32 = 16;

/// One send of an exchange phase, in the sending tile's table.
///
/// The sender's port is busy for `ceil(bytes / 4)` cycles from `start_cycle` (relative to the
/// start of the phase); each destination tile receives the bytes from `start_cycle + latency`
/// for as many cycles. `dst_tile_count > 1` multicasts to the contiguous tiles
/// `dst_tile .. dst_tile + dst_tile_count`, all at `dst_addr`. A row with `repeat > 1` stands
/// for `repeat` sends back to back: send `k` moves `bytes` from `src_addr + k * src_stride` to
/// `dst_addr + k * dst_stride` starting at `start_cycle + k * ceil(bytes / 4)` (strides wrap
/// as 32-bit two's complement).
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
    /// Number of destination tiles (1..=0x7FFF).
    pub dst_tile_count: u16,
    /// Sends this row stands for (at least 1).
    pub repeat: u32,
    /// Source address step between repeated sends.
    pub src_stride: u32,
    /// Destination address step between repeated sends.
    pub dst_stride: u32,
}

impl ExchangeRow {
    /// A single send.
    pub fn single(
        src_addr: u32,
        dst_addr: u32,
        bytes: u32,
        start_cycle: u32,
        dst_tile: u16,
        dst_tile_count: u16,
    ) -> ExchangeRow {
        ExchangeRow {
            src_addr,
            dst_addr,
            bytes,
            start_cycle,
            dst_tile,
            dst_tile_count,
            repeat: 1,
            src_stride: 0,
            dst_stride: 0,
        }
    }

    /// Bytes of the row's encoding.
    pub fn byte_len(&self) -> u32 {
        EXCHANGE_ROW_BYTES
            + if self.repeat == 1 {
                0
            } else {
                EXCHANGE_REPEAT_BYTES
            }
    }

    /// The single sends the row stands for.
    pub fn sends(&self) -> impl Iterator<Item = ExchangeRow> + '_ {
        let step = self.bytes.div_ceil(4);
        (0..self.repeat).map(move |k| ExchangeRow {
            src_addr: self.src_addr.wrapping_add(k.wrapping_mul(self.src_stride)),
            dst_addr: self.dst_addr.wrapping_add(k.wrapping_mul(self.dst_stride)),
            start_cycle: self.start_cycle.saturating_add(k.saturating_mul(step)),
            repeat: 1,
            src_stride: 0,
            dst_stride: 0,
            ..*self
        })
    }
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
    /// The header's byte count does not match its rows (or a repeated row repeats less than
    /// twice).
    BadLength { rows: usize, bytes: usize },
}

impl std::fmt::Display for TableError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TableError::BadMagic { found } => write!(f, "bad table magic {found:#010x}"),
            TableError::Truncated { needed, available } => {
                write!(f, "table needs {needed} bytes, {available} available")
            }
            TableError::BadLength { rows, bytes } => {
                write!(f, "table of {rows} rows cannot be {bytes} bytes long")
            }
        }
    }
}

/// Checks that `bytes` starts with a whole header of `header_bytes` bytes whose first word is
/// `magic`.
fn check_header(bytes: &[u8], header_bytes: u32, magic: u32) -> Result<(), TableError> {
    need(header_bytes as usize, bytes.len())?;
    let found = word(bytes, 0);
    if found != magic {
        return Err(TableError::BadMagic { found });
    }
    Ok(())
}

/// `Truncated` unless `needed` bytes are `available`.
fn need(needed: usize, available: usize) -> Result<(), TableError> {
    if needed > available {
        return Err(TableError::Truncated { needed, available });
    }
    Ok(())
}

fn word(bytes: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes"))
}

/// The little-endian 16-bit value at byte `at`.
fn halfword(bytes: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([bytes[at], bytes[at + 1]])
}

impl ExchangeTable {
    /// Bytes the table occupies.
    pub fn byte_len(&self) -> u32 {
        EXCHANGE_HEADER_BYTES + self.rows.iter().map(|r| r.byte_len()).sum::<u32>()
    }

    /// Every single send of the table, repeated rows expanded, in row order.
    pub fn sends(&self) -> Vec<ExchangeRow> {
        self.rows.iter().flat_map(|r| r.sends()).collect()
    }

    /// The table's bytes.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.byte_len() as usize);
        for w in [
            EXCHANGE_TABLE_MAGIC,
            self.rows.len() as u32,
            self.horizon_cycles,
            self.byte_len(),
        ] {
            out.extend_from_slice(&w.to_le_bytes());
        }
        for r in &self.rows {
            for w in [r.src_addr, r.dst_addr, r.bytes, r.start_cycle] {
                out.extend_from_slice(&w.to_le_bytes());
            }
            out.extend_from_slice(&r.dst_tile.to_le_bytes());
            let flag = if r.repeat == 1 {
                0
            } else {
                EXCHANGE_REPEAT_FLAG
            };
            out.extend_from_slice(&(r.dst_tile_count | flag).to_le_bytes());
            if r.repeat != 1 {
                for w in [r.repeat, r.src_stride, r.dst_stride] {
                    out.extend_from_slice(&w.to_le_bytes());
                }
            }
        }
        out
    }

    /// Reads the number of bytes a table at the start of `bytes` occupies, from its header.
    pub fn byte_len_from_header(bytes: &[u8]) -> Result<usize, TableError> {
        check_header(bytes, EXCHANGE_HEADER_BYTES, EXCHANGE_TABLE_MAGIC)?;
        let rows = word(bytes, 4) as u64;
        let len = word(bytes, 12) as u64;
        let least = EXCHANGE_HEADER_BYTES as u64 + EXCHANGE_ROW_BYTES as u64 * rows;
        let most = least + EXCHANGE_REPEAT_BYTES as u64 * rows;
        if len < least || len > most {
            return Err(TableError::BadLength {
                rows: rows as usize,
                bytes: len as usize,
            });
        }
        Ok(len as usize)
    }

    /// Parses a table from the start of `bytes`.
    pub fn from_bytes(bytes: &[u8]) -> Result<ExchangeTable, TableError> {
        let len = Self::byte_len_from_header(bytes)?;
        need(len, bytes.len())?;
        let mut rows = Vec::with_capacity(word(bytes, 4) as usize);
        let mut at = EXCHANGE_HEADER_BYTES as usize;
        for _ in 0..word(bytes, 4) as usize {
            need(at + EXCHANGE_ROW_BYTES as usize, len)?;
            let count = halfword(bytes, at + 18);
            let mut r = ExchangeRow::single(
                word(bytes, at),
                word(bytes, at + 4),
                word(bytes, at + 8),
                word(bytes, at + 12),
                halfword(bytes, at + 16),
                count & !EXCHANGE_REPEAT_FLAG,
            );
            at += EXCHANGE_ROW_BYTES as usize;
            if count & EXCHANGE_REPEAT_FLAG != 0 {
                need(at + EXCHANGE_REPEAT_BYTES as usize, len)?;
                r.repeat = word(bytes, at);
                r.src_stride = word(bytes, at + 4);
                r.dst_stride = word(bytes, at + 8);
                at += EXCHANGE_REPEAT_BYTES as usize;
                if r.repeat < 2 {
                    return Err(TableError::BadLength {
                        rows: rows.len(),
                        bytes: at,
                    });
                }
            }
            rows.push(r);
        }
        if at != len {
            return Err(TableError::BadLength {
                rows: rows.len(),
                bytes: len,
            });
        }
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
        check_header(bytes, HOST_HEADER_BYTES, HOST_TABLE_MAGIC)?;
        Ok(HOST_HEADER_BYTES as usize + HOST_ROW_BYTES as usize * word(bytes, 4) as usize)
    }

    /// Parses a table from the start of `bytes`. An unknown direction code is reported as
    /// `BadMagic` of the row's direction word.
    pub fn from_bytes(bytes: &[u8]) -> Result<HostTable, TableError> {
        let len = Self::byte_len_from_header(bytes)?;
        need(len, bytes.len())?;
        let mut rows = Vec::new();
        for i in 0..word(bytes, 4) as usize {
            let at = HOST_HEADER_BYTES as usize + i * HOST_ROW_BYTES as usize;
            let dir = halfword(bytes, at + 2);
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
                page: halfword(bytes, at),
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
            rows: vec![
                ExchangeRow::single(0x80000, 0x90000, 64, 3, 7, 2),
                ExchangeRow {
                    repeat: 5,
                    src_stride: 64,
                    dst_stride: (-128i32) as u32,
                    ..ExchangeRow::single(0x81000, 0x91000, 64, 40, 9, 1)
                },
            ],
        };
        let b = t.to_bytes();
        assert_eq!(b.len() as u32, t.byte_len());
        assert_eq!(ExchangeTable::from_bytes(&b).unwrap(), t);
        assert!(matches!(
            ExchangeTable::from_bytes(&b[..20]),
            Err(TableError::Truncated { .. })
        ));
        let sends = t.sends();
        assert_eq!(sends.len(), 6);
        assert_eq!(sends[5].src_addr, 0x81000 + 4 * 64);
        assert_eq!(sends[5].dst_addr, 0x91000 - 4 * 128);
        assert_eq!(sends[5].start_cycle, 40 + 4 * 16);
        // Every truncation and every byte count other than the real one is refused.
        for cut in 0..b.len() {
            assert!(
                ExchangeTable::from_bytes(&b[..cut]).is_err(),
                "cut at {cut}"
            );
        }
        // A header claiming 64 of the 68 bytes: the repeated row's repeat words run past it.
        let mut wrong = b.clone();
        wrong[12] ^= 4;
        assert_eq!(
            ExchangeTable::from_bytes(&wrong),
            Err(TableError::Truncated {
                needed: 68,
                available: 64
            })
        );
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
