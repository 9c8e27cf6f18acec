//! The exchange engine (`exch`) and host exchange (`hostx`).
//!
//! An exchange phase: every active tile's table is read from its memory, every row checked,
//! the schedule checked (ports, horizon, memory hazards), then the data moves as if every read
//! happened before every write. The phase lasts `EXCHANGE_PHASE_OVERHEAD_CYCLES + horizon`
//! from the moment the last tile arrives.
//!
//! Tile pairs (`Target::pair_tile`) share their receive buses: a tile takes one stream at a
//! time, or two at once when both also reach its pair tile (the pair receiving identical data
//! at twice a tile's bandwidth, as PopLibs' `ExchangeEstimator` models it). Sends are one
//! stream per tile at a time. `docs/fidelity.md` ("Exchange pairs") names the assumptions.

use ipu_isa::tables::{ExchangeRow, ExchangeTable, HostDirection, HostTable, TableError};
use ipu_target::Target;

use crate::exec::{Arrival, Tile};
use crate::fault::{Context, ExchangeFault, Fault, FaultKind, HostExchangeFault, RowSide};

fn fault(tile: &mut Tile, arrival: &Arrival, addr: Option<u32>, kind: FaultKind) -> Fault {
    let instruction = tile.text_at(arrival.pc);
    Fault {
        tile: tile.id,
        context: Context::Supervisor,
        pc: arrival.pc,
        instruction,
        address: addr,
        kind,
    }
}

/// How one kind of table is read: its header's size, its length from the header, its parser.
struct TableFormat<T> {
    header: u32,
    len_of: fn(&[u8]) -> Result<usize, TableError>,
    parse: fn(&[u8]) -> Result<T, TableError>,
}

const EXCHANGE_TABLES: TableFormat<ExchangeTable> = TableFormat {
    header: ipu_isa::tables::EXCHANGE_HEADER_BYTES,
    len_of: ExchangeTable::byte_len_from_header,
    parse: ExchangeTable::from_bytes,
};

const HOST_TABLES: TableFormat<HostTable> = TableFormat {
    header: ipu_isa::tables::HOST_HEADER_BYTES,
    len_of: HostTable::byte_len_from_header,
    parse: HostTable::from_bytes,
};

/// [`read_table`] for every active tile, in tile order; the first fault stops the read.
fn read_tables<T>(
    tiles: &mut [Tile],
    arrivals: &[Arrival],
    format: &TableFormat<T>,
) -> Result<Vec<T>, Fault> {
    tiles
        .iter_mut()
        .zip(arrivals)
        .map(|(t, a)| read_table(t, a, format))
        .collect()
}

fn read_table<T>(tile: &mut Tile, arrival: &Arrival, format: &TableFormat<T>) -> Result<T, Fault> {
    let addr = arrival.operand;
    let bad = |tile: &mut Tile, kind| fault(tile, arrival, Some(addr), kind);
    let bad_table = |tile: &mut Tile, e: TableError| bad(tile, FaultKind::BadTable(e.to_string()));
    let header = format.header;
    if !addr.is_multiple_of(4) {
        return Err(bad(tile, FaultKind::Misaligned { align: 4 }));
    }
    if !tile.mem.contains(addr, header) {
        return Err(bad(tile, FaultKind::OutOfRange { bytes: header }));
    }
    let mut h = vec![0u8; header as usize];
    tile.mem.read_into(addr, &mut h);
    let len = (format.len_of)(&h).map_err(|e| bad_table(tile, e))?;
    if len > u32::MAX as usize || !tile.mem.contains(addr, len as u32) {
        let why = format!("table of {len} bytes runs past tile memory");
        return Err(bad(tile, FaultKind::BadTable(why)));
    }
    let mut b = vec![0u8; len];
    tile.mem.read_into(addr, &mut b);
    (format.parse)(&b).map_err(|e| bad_table(tile, e))
}

/// One scheduled transfer into one destination.
#[derive(Clone, Copy)]
struct Recv {
    dst: u32,
    start: u64,
    end: u64,
    src: u32,
    row: usize,
    /// Whether the row also reaches the destination's pair tile.
    paired: bool,
}

/// Executes an exchange phase over the active `tiles` (all arrived at `exch`). Returns the
/// phase's cycles (overhead + horizon).
pub(crate) fn exchange(
    tiles: &mut [Tile],
    arrivals: &[Arrival],
    target: &Target,
) -> Result<u64, Fault> {
    let active = tiles.len() as u32;
    let tables = read_tables(tiles, arrivals, &EXCHANGE_TABLES)?;
    let horizon = tables.first().map(|t| t.horizon_cycles).unwrap_or(0);
    // Repeated rows stand for their single sends; every check and move works on those.
    let sends_of: Vec<Vec<ExchangeRow>> = tables.iter().map(|t| t.sends()).collect();
    let bad = |tiles: &mut [Tile], t: usize, addr: Option<u32>, why: ExchangeFault| {
        Err(fault(
            &mut tiles[t],
            &arrivals[t],
            addr,
            FaultKind::Exchange(why),
        ))
    };
    // Rows, one by one.
    let mut recvs: Vec<Recv> = Vec::new();
    let mut ranges: Vec<(u32, u32, u32, bool, usize, u32)> = Vec::new(); // tile, start, end, is_dst, row, peer
    for (t, table) in tables.iter().enumerate() {
        if table.horizon_cycles != horizon {
            return bad(
                tiles,
                t,
                None,
                ExchangeFault::HorizonMismatch {
                    horizon: table.horizon_cycles,
                    expected: horizon,
                },
            );
        }
        let mut sends: Vec<(u64, u64, usize)> = Vec::new();
        for (i, row) in sends_of[t].iter().enumerate() {
            if row.bytes == 0 || !row.bytes.is_multiple_of(4) {
                return bad(
                    tiles,
                    t,
                    None,
                    ExchangeFault::RowBytes {
                        row: i,
                        bytes: row.bytes,
                    },
                );
            }
            for (side, a) in [
                (RowSide::Source, row.src_addr),
                (RowSide::Destination, row.dst_addr),
            ] {
                if !a.is_multiple_of(4) {
                    return bad(
                        tiles,
                        t,
                        Some(a),
                        ExchangeFault::Misaligned { row: i, side },
                    );
                }
                if !target.in_memory(a, row.bytes) {
                    return bad(
                        tiles,
                        t,
                        Some(a),
                        ExchangeFault::OutOfRange {
                            row: i,
                            side,
                            bytes: row.bytes,
                        },
                    );
                }
            }
            let first = row.dst_tile as u32;
            let count = row.dst_tile_count as u32;
            if count == 0 || first + count > active || first + count > target.tiles {
                return bad(
                    tiles,
                    t,
                    None,
                    ExchangeFault::InactiveDestinations {
                        row: i,
                        first,
                        end: first + count,
                        active,
                    },
                );
            }
            let dur = target.exchange_transfer_cycles(row.bytes) as u64;
            let s = row.start_cycle as u64;
            sends.push((s, s + dur, i));
            ranges.push((
                t as u32,
                row.src_addr,
                row.src_addr + row.bytes,
                false,
                i,
                t as u32,
            ));
            for d in first..first + count {
                let start = s + target.exchange_latency_cycles(t as u32, d) as u64;
                let end = start + dur;
                if end > horizon as u64 {
                    return bad(
                        tiles,
                        t,
                        None,
                        ExchangeFault::PastHorizon {
                            row: i,
                            tile: d,
                            end_cycle: end,
                            horizon,
                        },
                    );
                }
                let pair = target.pair_tile(d);
                recvs.push(Recv {
                    dst: d,
                    start,
                    end,
                    src: t as u32,
                    row: i,
                    paired: (first..first + count).contains(&pair),
                });
                ranges.push((d, row.dst_addr, row.dst_addr + row.bytes, true, i, t as u32));
            }
        }
        sends.sort_unstable();
        for w in sends.windows(2) {
            if w[1].0 < w[0].1 {
                return bad(
                    tiles,
                    t,
                    None,
                    ExchangeFault::SendsOverlap {
                        first: (w[0].2, w[0].0, w[0].1),
                        second: (w[1].2, w[1].0, w[1].1),
                    },
                );
            }
        }
    }
    // One incoming stream per tile at a time, or two when both reach its pair tile too: the
    // pair's two buses each carry one, and both tiles hear both.
    recvs.sort_unstable_by_key(|r| (r.dst, r.start, r.src, r.row));
    let mut active: Vec<Recv> = Vec::with_capacity(2);
    for (i, r) in recvs.iter().enumerate() {
        if i == 0 || recvs[i - 1].dst != r.dst {
            active.clear();
        }
        active.retain(|a| a.end > r.start);
        let stream = |s: &Recv| (s.src, s.row, s.start, s.end);
        let clash = match active[..] {
            [] => None,
            [a] if a.paired && r.paired => None,
            [a] => Some(ExchangeFault::TwoStreams {
                tile: r.dst,
                first: stream(&a),
                second: stream(r),
            }),
            [a, b, ..] => Some(ExchangeFault::ThreeStreams {
                tile: r.dst,
                streams: Box::new([stream(&a), stream(&b), stream(r)]),
            }),
        };
        if let Some(why) = clash {
            return bad(tiles, r.dst as usize, None, why);
        }
        active.push(*r);
    }
    // Memory hazards per tile: destinations overlapping each other or a source of the phase.
    ranges.sort_unstable_by_key(|&(t, s, e, d, row, peer)| (t, s, e, !d, row, peer));
    let mut last_dst: Option<(u32, u32, usize, u32)> = None; // tile, end, row, sender
    let mut last_src: Option<(u32, u32, usize)> = None; // tile, end, row
    for &(t, s, e, is_dst, row, peer) in &ranges {
        // Range `range` on tile `t` from `s` on overlaps the earlier range `overlaps`.
        let hazard = |tiles: &mut [Tile], range, overlaps| {
            let why = ExchangeFault::MemoryHazard {
                tile: t,
                range,
                overlaps,
            };
            bad(tiles, t as usize, Some(s), why)
        };
        if let Some((lt, le, lrow, lpeer)) = last_dst
            && lt == t
            && s < le
        {
            let side = if is_dst {
                RowSide::Destination
            } else {
                RowSide::Source
            };
            let overlaps = (lpeer, lrow, RowSide::Destination);
            return hazard(tiles, (peer, row, side), overlaps);
        }
        if is_dst
            && let Some((lt, le, lrow)) = last_src
            && lt == t
            && s < le
        {
            let overlaps = (t, lrow, RowSide::Source);
            return hazard(tiles, (peer, row, RowSide::Destination), overlaps);
        }
        if is_dst {
            if last_dst.is_none_or(|(lt, le, _, _)| lt != t || e > le) {
                last_dst = Some((t, e, row, peer));
            }
        } else if last_src.is_none_or(|(lt, le, _)| lt != t || e > le) {
            last_src = Some((t, e, row));
        }
    }
    // Move the data: all reads, then all writes.
    let mut payloads = Vec::new();
    for (t, sends) in sends_of.iter().enumerate() {
        for row in sends {
            let mut b = vec![0u8; row.bytes as usize];
            tiles[t].mem.read_into(row.src_addr, &mut b);
            payloads.push(b);
        }
    }
    let mut k = 0;
    for sends in &sends_of {
        for row in sends {
            let first = row.dst_tile as usize;
            for tile in &mut tiles[first..first + row.dst_tile_count as usize] {
                tile.host_write(row.dst_addr, &payloads[k]);
            }
            k += 1;
        }
    }
    Ok(ipu_target::EXCHANGE_PHASE_OVERHEAD_CYCLES as u64 + horizon as u64)
}

/// Bytes a host-exchange point moved, by direction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct HostBytes {
    /// From host pages into tile memory.
    pub to_device: u64,
    /// From tile memory into host pages.
    pub to_host: u64,
}

/// Executes a host-exchange point over the active tiles. Returns the bytes moved.
pub(crate) fn host_exchange(
    tiles: &mut [Tile],
    arrivals: &[Arrival],
    pages: &mut [Vec<u8>],
    target: &Target,
) -> Result<HostBytes, Fault> {
    let tables = read_tables(tiles, arrivals, &HOST_TABLES)?;
    let mut total = HostBytes::default();
    for (t, table) in tables.iter().enumerate() {
        for (i, row) in table.rows.iter().enumerate() {
            let bad = |tiles: &mut [Tile], addr: Option<u32>, why: HostExchangeFault| {
                Err(fault(
                    &mut tiles[t],
                    &arrivals[t],
                    addr,
                    FaultKind::HostExchange(why),
                ))
            };
            let Some(page) = pages.get_mut(row.page as usize) else {
                return bad(
                    tiles,
                    None,
                    HostExchangeFault::NoPage {
                        row: i,
                        page: row.page,
                    },
                );
            };
            if !row.bytes.is_multiple_of(4) || !row.tile_addr.is_multiple_of(4) {
                return bad(
                    tiles,
                    Some(row.tile_addr),
                    HostExchangeFault::Unaligned {
                        row: i,
                        bytes: row.bytes,
                    },
                );
            }
            if row.page_offset as u64 + row.bytes as u64 > page.len() as u64 {
                return bad(
                    tiles,
                    None,
                    HostExchangeFault::BeyondPage {
                        row: i,
                        page: row.page,
                        start: row.page_offset as u64,
                        end: row.page_offset as u64 + row.bytes as u64,
                        page_bytes: page.len() as u64,
                    },
                );
            }
            if !target.in_memory(row.tile_addr, row.bytes) {
                return bad(
                    tiles,
                    Some(row.tile_addr),
                    HostExchangeFault::OutOfRange {
                        row: i,
                        bytes: row.bytes,
                    },
                );
            }
            let range = row.page_offset as usize..row.page_offset as usize + row.bytes as usize;
            match row.direction {
                HostDirection::ToDevice => {
                    tiles[t].host_write(row.tile_addr, &page[range]);
                    total.to_device += row.bytes as u64;
                }
                HostDirection::ToHost => {
                    tiles[t].mem.read_into(row.tile_addr, &mut page[range]);
                    total.to_host += row.bytes as u64;
                }
            }
        }
    }
    Ok(total)
}
