//! The transfers of an exchange phase: its copies merged, the copies of the same bytes to a
//! placement group on consecutive tiles into one multicast, and runs of small pieces at
//! constant strides into repeated rows.

use crate::program::{BufferId, Copy, TileProgram};

/// One row to be: a source range sent to one buffer, or to the buffers of a placement group on
/// consecutive tiles (at the same offset).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transfer {
    /// Source buffer.
    pub src: BufferId,
    /// Byte offset in the source.
    pub src_offset: u32,
    /// Destination buffers, on consecutive tiles in ascending order.
    pub dsts: Vec<BufferId>,
    /// Byte offset in every destination.
    pub dst_offset: u32,
    /// Bytes.
    pub bytes: u32,
    /// Sends the transfer stands for (see [`ExchangeRow`](ipu_isa::tables::ExchangeRow)): send `k` moves `bytes` from
    /// `src_offset + k * src_stride` to `dst_offset + k * dst_stride`.
    pub repeat: u32,
    /// Source step between repeated sends (two's complement).
    pub src_stride: u32,
    /// Destination step between repeated sends (two's complement).
    pub dst_stride: u32,
}

impl Transfer {
    /// Bytes of its table row.
    pub fn row_bytes(&self) -> u32 {
        ipu_isa::tables::EXCHANGE_ROW_BYTES
            + if self.repeat == 1 {
                0
            } else {
                ipu_isa::tables::EXCHANGE_REPEAT_BYTES
            }
    }
}

/// Most sends one repeated row stands for (a bound on a row's port time).
pub const REPEAT_MAX: u32 = 4096;

/// Folds transfers with the same source buffer, destinations and size whose offsets step by
/// constant strides into repeated rows: a scatter or gather of many small pieces becomes one
/// row. Order: by first appearance of each (source, destinations, size), then by offsets.
fn fold_repeats(transfers: Vec<Transfer>) -> Vec<Transfer> {
    // The transfers sorted by (source, destinations, size), then offsets, then appearance:
    // each group's span, then the groups by their first transfer.
    let key = |t: &Transfer| (t.src, t.bytes);
    let mut idx: Vec<u32> = (0..transfers.len() as u32).collect();
    idx.sort_unstable_by(|&a, &b| {
        let (x, y) = (&transfers[a as usize], &transfers[b as usize]);
        (key(x), &x.dsts, x.src_offset, x.dst_offset, a).cmp(&(
            key(y),
            &y.dsts,
            y.src_offset,
            y.dst_offset,
            b,
        ))
    });
    let same = |a: u32, b: u32| {
        let (x, y) = (&transfers[a as usize], &transfers[b as usize]);
        key(x) == key(y) && x.dsts == y.dsts
    };
    let mut groups: Vec<(u32, usize, usize)> = Vec::new();
    let mut g0 = 0;
    while g0 < idx.len() {
        let mut g1 = g0 + 1;
        while g1 < idx.len() && same(idx[g0], idx[g1]) {
            g1 += 1;
        }
        let first = idx[g0..g1].iter().copied().min().expect("a transfer");
        groups.push((first, g0, g1));
        g0 = g1;
    }
    groups.sort_unstable();
    let mut slots: Vec<Option<Transfer>> = transfers.into_iter().map(Some).collect();
    let mut out = Vec::new();
    for (_, g0, g1) in groups {
        let ts = idx[g0..g1]
            .iter()
            .map(|&i| slots[i as usize].take().expect("each transfer once"));
        let mut run: Option<Transfer> = None;
        for t in ts {
            if let Some(r) = run.as_mut() {
                let (ds, dd) = (
                    t.src_offset.wrapping_sub(r.src_offset),
                    t.dst_offset.wrapping_sub(r.dst_offset),
                );
                let fits = if r.repeat == 1 {
                    true
                } else {
                    ds == r.src_stride.wrapping_mul(r.repeat)
                        && dd == r.dst_stride.wrapping_mul(r.repeat)
                };
                if fits && r.repeat < REPEAT_MAX {
                    if r.repeat == 1 {
                        r.src_stride = ds;
                        r.dst_stride = dd;
                    }
                    r.repeat += 1;
                    continue;
                }
                out.push(run.take().expect("a run"));
            }
            run = Some(t);
        }
        out.extend(run);
    }
    out
}

/// Merges the copies of one phase into transfers (multicast where the destinations form a
/// placement group on consecutive tiles). Deterministic: ordered by first copy.
pub fn transfers(program: &TileProgram, copies: &[Copy]) -> Vec<Transfer> {
    // (source buffer, source offset, bytes, destination group, destination offset)
    type Key = (u32, u32, u32, u32, u32);
    let mut out: Vec<Transfer> = Vec::new();
    // Copies into a placement group: (key, first copy, destination tile, buffer), grouped by
    // sorting (the copies of one key in tile order), then the keys in order of first copy.
    let mut grouped: Vec<(Key, u32, BufferId, u32)> = Vec::new();
    for (i, c) in copies.iter().enumerate() {
        let dst = &program.buffers[c.dst.0 as usize];
        match dst.group {
            Some(g) => grouped.push((
                (c.src.0, c.src_offset, c.bytes, g, c.dst_offset),
                dst.tile,
                c.dst,
                i as u32,
            )),
            None => out.push(Transfer {
                src: c.src,
                src_offset: c.src_offset,
                dsts: vec![c.dst],
                dst_offset: c.dst_offset,
                bytes: c.bytes,
                repeat: 1,
                src_stride: 0,
                dst_stride: 0,
            }),
        }
    }
    grouped.sort_unstable();
    // Per key: its first copy and its span in `grouped`.
    let mut keys: Vec<(u32, usize, usize)> = Vec::new();
    let mut k0 = 0;
    while k0 < grouped.len() {
        let key = grouped[k0].0;
        let mut k1 = k0;
        let mut first = u32::MAX;
        while k1 < grouped.len() && grouped[k1].0 == key {
            first = first.min(grouped[k1].3);
            k1 += 1;
        }
        keys.push((first, k0, k1));
        k0 = k1;
    }
    keys.sort_unstable();
    for (_, k0, k1) in keys {
        let key = grouped[k0].0;
        let transfer = |dsts: Vec<BufferId>| Transfer {
            src: BufferId(key.0),
            src_offset: key.1,
            dsts,
            dst_offset: key.4,
            bytes: key.2,
            repeat: 1,
            src_stride: 0,
            dst_stride: 0,
        };
        let mut run: Vec<BufferId> = Vec::new();
        let mut last_tile = None;
        for &(_, tile, b, _) in &grouped[k0..k1] {
            if last_tile.is_some_and(|t: u32| t + 1 != tile || run.len() == u16::MAX as usize) {
                out.push(transfer(std::mem::take(&mut run)));
            }
            run.push(b);
            last_tile = Some(tile);
        }
        out.push(transfer(run));
    }
    fold_repeats(out)
}
