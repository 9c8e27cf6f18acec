//! A phase's transfers resolved to tiles and addresses: the rows the schedules order, with
//! the receive lanes each takes (see the notes on pairs in [`super`]).

use ipu_target::Target;

/// A transfer resolved to tiles and addresses.
#[derive(Debug, Clone, Copy)]
pub(super) struct Resolved {
    pub(super) src_tile: u32,
    pub(super) dst_tile: u32,
    pub(super) dst_count: u32,
    pub(super) src_addr: u32,
    pub(super) dst_addr: u32,
    pub(super) bytes: u32,
    pub(super) repeat: u32,
    pub(super) src_stride: u32,
    pub(super) dst_stride: u32,
}

impl Resolved {
    /// Cycles the sender's port (and each receiver's) is busy: the repeated sends back to back.
    pub(super) fn duration(&self, target: &Target) -> u32 {
        self.repeat * target.exchange_transfer_cycles(self.bytes)
    }

    pub(super) fn receivers(&self) -> impl Iterator<Item = u32> {
        self.dst_tile..self.dst_tile + self.dst_count
    }

    /// Whether the row reaches receiver `d`'s pair tile too (then it takes one of `d`'s two
    /// receive lanes, otherwise both).
    pub(super) fn shared_at(&self, d: u32, target: &Target) -> bool {
        (self.dst_tile..self.dst_tile + self.dst_count).contains(&target.pair_tile(d))
    }

    /// When receiver `d`'s lanes let this row arrive.
    pub(super) fn lanes_free(&self, d: u32, lanes: &[u32; 2], target: &Target) -> u32 {
        if self.shared_at(d, target) {
            lanes[0].min(lanes[1])
        } else {
            lanes[0].max(lanes[1])
        }
    }

    /// The earliest start at or after `free` that every receiver's port allows.
    pub(super) fn ready(&self, free: u32, recv_free: &[[u32; 2]], target: &Target) -> u32 {
        self.receivers()
            .map(|d| {
                let l = target.exchange_latency_cycles(self.src_tile, d);
                self.lanes_free(d, &recv_free[d as usize], target)
                    .saturating_sub(l)
            })
            .fold(free, u32::max)
    }

    /// [`Resolved::ready`] when it is below `bound`; `None` when it is not (the receivers are
    /// looked at only until one pushes the start to `bound`).
    pub(super) fn ready_below(
        &self,
        free: u32,
        recv_free: &[[u32; 2]],
        target: &Target,
        bound: u32,
    ) -> Option<u32> {
        let mut start = free;
        for d in self.receivers() {
            let l = target.exchange_latency_cycles(self.src_tile, d);
            let lanes = self.lanes_free(d, &recv_free[d as usize], target);
            start = start.max(lanes.saturating_sub(l));
            if start >= bound {
                return None;
            }
        }
        (start < bound).then_some(start)
    }

    /// Books the receivers' ports from `start` (a shared row the lane that frees latest
    /// before it arrives, any other both); returns the end of the last arrival.
    pub(super) fn book(&self, start: u32, recv_free: &mut [[u32; 2]], target: &Target) -> u32 {
        let duration = self.duration(target);
        let mut end = 0;
        for d in self.receivers() {
            let a = start + target.exchange_latency_cycles(self.src_tile, d);
            let e = a + duration;
            let lanes = &mut recv_free[d as usize];
            if self.shared_at(d, target) {
                let fits = |l: u32| l <= a;
                let k = match (fits(lanes[0]), fits(lanes[1])) {
                    (true, true) => usize::from(lanes[1] > lanes[0]),
                    (false, true) => 1,
                    _ => 0,
                };
                lanes[k] = e;
            } else {
                *lanes = [e, e];
            }
            end = end.max(e);
        }
        end
    }
}

/// One past the highest tile the rows send from or to.
pub(super) fn tiles_spanned(rows: &[Resolved]) -> usize {
    rows.iter()
        .map(|r| (r.dst_tile + r.dst_count).max(r.src_tile + 1))
        .max()
        .unwrap_or(0) as usize
}

/// The cycles the busiest receiver needs at least: every row it takes alone in full, every row
/// it shares with its pair tile at half (two such at once), latencies left out.
pub(super) fn receive_bound(rows: &[Resolved], target: &Target) -> u32 {
    let tiles = rows
        .iter()
        .map(|r| r.dst_tile + r.dst_count)
        .max()
        .unwrap_or(0) as usize;
    let mut need = vec![0u64; tiles];
    for r in rows {
        let d2 = 2 * r.duration(target) as u64;
        for d in r.receivers() {
            need[d as usize] += if r.shared_at(d, target) { d2 / 2 } else { d2 };
        }
    }
    (need.into_iter().max().unwrap_or(0).div_ceil(2)) as u32
}

/// A row of `bytes` from tile `src` to `count` tiles from `dst`, at address 0 (for the
/// schedules' tests).
#[cfg(test)]
pub(super) fn row(src: u32, dst: u32, count: u32, bytes: u32) -> Resolved {
    Resolved {
        src_tile: src,
        dst_tile: dst,
        dst_count: count,
        src_addr: 0,
        dst_addr: 0,
        bytes,
        repeat: 1,
        src_stride: 0,
        dst_stride: 0,
    }
}
