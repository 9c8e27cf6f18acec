//! Where values live: storage order, pieces on tiles, and the copies that move a value from
//! one layout into another.
//!
//! A value of logical shape `[.., R, C]` is stored in the order `[.., ceil(C / g), R, g]` for a
//! column group `g` (a multiple of 4), the columns past `C` being zero padding (see
//! `ipu_package::storage_index`). A layout cuts the storage range `0..S` into pieces, each on
//! one tile; a tile stores its pieces of a value back to back in one buffer. Piece boundaries
//! are multiples of 4 elements, so every piece is a whole number of 32-bit words in every
//! element type and no transfer needs a sub-word write.

use ipu_package::{split_shape, storage_elements};

/// Piece boundaries are multiples of this many elements.
pub const PIECE_GRAIN: usize = 4;

/// A storage range of a value on one tile.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Piece {
    /// Tile.
    pub tile: u32,
    /// First storage element.
    pub start: usize,
    /// One past the last storage element.
    pub end: usize,
    /// Element offset of the piece in the tile's buffer for this value.
    pub local: usize,
}

/// Pieces of a value over tiles, in storage order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    /// Column group of the storage order.
    pub group: usize,
    /// Pieces sorted by `start`, covering `0..storage_elements` exactly.
    pub pieces: Vec<Piece>,
}

impl Layout {
    /// Builds a layout from `(tile, start, end)` ranges in storage order, assigning local
    /// offsets in order of appearance per tile.
    pub fn from_ranges(
        group: usize,
        ranges: impl IntoIterator<Item = (u32, usize, usize)>,
    ) -> Layout {
        let mut next_local: std::collections::BTreeMap<u32, usize> = Default::default();
        let mut pieces: Vec<Piece> = ranges
            .into_iter()
            .filter(|r| r.2 > r.1)
            .map(|(tile, start, end)| {
                let local = next_local.entry(tile).or_insert(0);
                let p = Piece {
                    tile,
                    start,
                    end,
                    local: *local,
                };
                *local += end - start;
                p
            })
            .collect();
        pieces.sort_by_key(|p| p.start);
        Layout { group, pieces }
    }

    /// Storage elements split into balanced contiguous pieces over `tiles` tiles, cut at
    /// multiples of `group` elements where possible (always at multiples of 4).
    pub fn balanced(shape: &[usize], group: usize, tiles: u32) -> Layout {
        Layout::balanced_from(shape, group, tiles, 0)
    }

    /// [`Layout::balanced`] starting at tile `first` and wrapping around past tile
    /// `tiles - 1`: a value too small to cover every tile takes the consecutive tiles from
    /// `first` on, so values laid out one after another can share the tiles out between them.
    pub fn balanced_from(shape: &[usize], group: usize, tiles: u32, first: u32) -> Layout {
        let total = storage_elements(shape, group);
        let units = total / PIECE_GRAIN;
        let all = tiles.max(1);
        let used = (all as usize).clamp(1, units.max(1));
        let ranges = (0..used).map(|t| {
            let start = units * t / used * PIECE_GRAIN;
            let end = units * (t + 1) / used * PIECE_GRAIN;
            (((first % all) as usize + t) as u32 % all, start, end)
        });
        Layout::from_ranges(group, ranges)
    }

    /// Every part of `parts` (storage ranges that together cover the value exactly, each a
    /// multiple of [`PIECE_GRAIN`] elements) spread over `tiles` tiles: a part's ranges, laid
    /// end to end, are cut into balanced runs, one a tile from tile 0, so each tile holds its
    /// share of every part.
    pub fn spread_parts(group: usize, parts: &[Vec<(usize, usize)>], tiles: u32) -> Layout {
        let mut ranges = Vec::new();
        for part in parts {
            let total: usize = part.iter().map(|r| r.1 - r.0).sum();
            let units = total / PIECE_GRAIN;
            let used = (tiles.max(1) as usize).clamp(1, units.max(1));
            // Walk the part's ranges, cutting at each tile's share.
            let (mut r, mut at) = (0, part.first().map_or(0, |p| p.0));
            for t in 0..used {
                let mut left = if t + 1 == used {
                    usize::MAX
                } else {
                    (units * (t + 1) / used - units * t / used) * PIECE_GRAIN
                };
                while left > 0 && r < part.len() {
                    let end = part[r].1.min(at.saturating_add(left));
                    if end > at {
                        ranges.push((t as u32, at, end));
                        left = left.saturating_sub(end - at);
                    }
                    at = end;
                    if at == part[r].1 {
                        r += 1;
                        at = part.get(r).map_or(at, |p| p.0);
                    }
                }
            }
        }
        Layout::from_ranges(group, ranges)
    }

    /// The pieces on `tile` as `(start, end, local)`: the wanted ranges of a gather that
    /// copies this layout's part on `tile` into a buffer of its local order.
    pub fn ranges_on(&self, tile: u32) -> Vec<(usize, usize, usize)> {
        self.pieces
            .iter()
            .filter(|p| p.tile == tile)
            .map(|p| (p.start, p.end, p.local))
            .collect()
    }

    /// Elements of the value held on `tile`.
    pub fn elements_on(&self, tile: u32) -> usize {
        self.pieces
            .iter()
            .filter(|p| p.tile == tile)
            .map(|p| p.end - p.start)
            .sum()
    }

    /// Elements of the value on each tile holding some, in one pass over the pieces (a layout
    /// may have many pieces per tile: asking [`Layout::elements_on`] tile by tile is quadratic).
    pub fn elements_per_tile(&self) -> std::collections::BTreeMap<u32, usize> {
        let mut m = std::collections::BTreeMap::new();
        for p in &self.pieces {
            *m.entry(p.tile).or_insert(0) += p.end - p.start;
        }
        m
    }

    /// The most elements any one tile holds.
    pub fn most_elements_on_a_tile(&self) -> usize {
        self.elements_per_tile()
            .values()
            .copied()
            .max()
            .unwrap_or(0)
    }

    /// The tiles holding pieces, ascending, without repeats.
    pub fn tiles(&self) -> Vec<u32> {
        let mut t: Vec<u32> = self.pieces.iter().map(|p| p.tile).collect();
        t.sort_unstable();
        t.dedup();
        t
    }

    /// Checks the invariants: pieces cover `0..total` in order, boundaries are multiples of
    /// [`PIECE_GRAIN`], local offsets are dense per tile.
    pub fn check(&self, total: usize) -> Result<(), String> {
        let mut at = 0;
        for p in &self.pieces {
            if p.start != at || p.end <= p.start {
                return Err(format!(
                    "the piece of elements {}..{} does not continue at element {at}",
                    p.start, p.end
                ));
            }
            if p.start % PIECE_GRAIN != 0 || (p.end % PIECE_GRAIN != 0 && p.end != total) {
                return Err(format!(
                    "the piece of elements {}..{} is not cut at a multiple of {PIECE_GRAIN}",
                    p.start, p.end
                ));
            }
            at = p.end;
        }
        if at != total {
            return Err(format!(
                "pieces end at {at}, the value has {total} storage elements"
            ));
        }
        Ok(())
    }
}

/// A copy of `elements` storage elements from a source piece to a destination offset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Move {
    /// Source tile.
    pub src_tile: u32,
    /// Element offset in the source tile's buffer.
    pub src_local: usize,
    /// Element offset in the destination buffer.
    pub dst_local: usize,
    /// Elements.
    pub elements: usize,
}

/// The moves that fill a destination buffer laid out as `want`: each entry of `want` is a
/// storage range `[start, end)` of the value in the *destination's* group `dst_group`, placed
/// at element `dst_local` of the destination buffer. The source is the value as laid out in
/// `src`. Adjacent moves are merged.
pub fn moves(
    shape: &[usize],
    src: &Layout,
    dst_group: usize,
    want: &[(usize, usize, usize)],
) -> Vec<Move> {
    let mut out: Vec<Move> = Vec::new();
    let mut push = |m: Move| {
        if let Some(last) = out.last_mut()
            && last.src_tile == m.src_tile
            && last.src_local + last.elements == m.src_local
            && last.dst_local + last.elements == m.dst_local
        {
            last.elements += m.elements;
            return;
        }
        out.push(m);
    };
    // Source pieces by storage start, for lookup.
    let find = |s: usize| -> usize { src.pieces.partition_point(|p| p.end <= s) };
    let from_src = |start: usize, len: usize, dst: usize, push: &mut dyn FnMut(Move)| {
        // Copy src storage range [start, start+len) to dst, split at piece boundaries.
        let mut s = start;
        let mut d = dst;
        let end = start + len;
        let mut i = find(s);
        while s < end {
            let p = src.pieces[i];
            let n = end.min(p.end) - s;
            push(Move {
                src_tile: p.tile,
                src_local: p.local + (s - p.start),
                dst_local: d,
                elements: n,
            });
            s += n;
            d += n;
            i += 1;
        }
    };
    if src.group == dst_group {
        for &(start, end, dst) in want {
            from_src(start, end - start, dst, &mut push);
        }
        return out;
    }
    // Regroup: walk the destination range row segment by row segment.
    let (_, rows, cols) = split_shape(shape);
    let (gd, gs) = (dst_group, src.group);
    let dst_per_outer = cols.div_ceil(gd) * rows * gd;
    let src_per_outer = cols.div_ceil(gs) * rows * gs;
    for &(start, end, dst) in want {
        let mut i = start;
        while i < end {
            let (outer, rem) = (i / dst_per_outer, i % dst_per_outer);
            let (grp, rem) = (rem / (rows * gd), rem % (rows * gd));
            let (r, cg) = (rem / gd, rem % gd);
            let c = grp * gd + cg;
            // Contiguous in the destination to the end of this row segment.
            let seg_end = (i - cg + gd).min(end);
            let mut n = seg_end - i;
            // Padding columns both layouts have are copied too (they hold zeros), so every
            // move stays a multiple of 4 elements; the rest is zero-filled by the consumer.
            let cols_both = cols.div_ceil(gs) * gs;
            let cols_both = cols_both.min(cols.div_ceil(gd) * gd);
            if c >= cols_both {
                i += n;
                continue;
            }
            n = n.min(cols_both - c);
            // Contiguous in the source to the end of its group.
            let mut done = 0;
            while done < n {
                let cc = c + done;
                let s = outer * src_per_outer + (cc / gs) * rows * gs + r * gs + cc % gs;
                let k = (n - done).min(gs - cc % gs);
                from_src(s, k, dst + (i - start) + done, &mut push);
                done += k;
            }
            i += seg_end - i;
        }
    }
    out
}

/// Ranges of `0..len` not covered by any of `covered` (element ranges), in order.
pub fn uncovered(len: usize, covered: &mut [(usize, usize)]) -> Vec<(usize, usize)> {
    covered.sort_unstable();
    let mut out = Vec::new();
    let mut at = 0;
    for &(s, e) in covered.iter() {
        if s > at {
            out.push((at, s));
        }
        at = at.max(e);
    }
    if at < len {
        out.push((at, len));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use ipu_package::storage_index;
    use std::collections::BTreeMap;

    /// Parts of interleaved ranges (the rows of every column group of a k chunk) spread over
    /// more or fewer tiles than they have units: the layout covers the value, and every tile
    /// holds a balanced share of each part.
    #[test]
    fn spread_parts_gives_every_tile_its_share_of_every_part() {
        for (groups, rows, chunks, tiles) in [(3, 40, 4, 7), (2, 8, 2, 64), (5, 12, 3, 1)] {
            let cols = 8;
            let parts: Vec<Vec<(usize, usize)>> = (0..chunks)
                .map(|c| {
                    let (r0, r1) = (rows * c / chunks, rows * (c + 1) / chunks);
                    (0..groups)
                        .map(|g| (g * rows * cols + r0 * cols, g * rows * cols + r1 * cols))
                        .collect()
                })
                .collect();
            let l = Layout::spread_parts(cols, &parts, tiles);
            l.check(groups * rows * cols).unwrap();
            for part in &parts {
                let total: usize = part.iter().map(|r| r.1 - r.0).sum();
                let mut per_tile: BTreeMap<u32, usize> = BTreeMap::new();
                for p in &l.pieces {
                    for &(a, b) in part {
                        let (s, e) = (p.start.max(a), p.end.min(b));
                        if e > s {
                            *per_tile.entry(p.tile).or_insert(0) += e - s;
                        }
                    }
                }
                let used = (tiles as usize).min(total / PIECE_GRAIN);
                assert_eq!(per_tile.len(), used, "{part:?}");
                let (lo, hi) = (per_tile.values().min(), per_tile.values().max());
                assert!(hi.unwrap() - lo.unwrap() <= PIECE_GRAIN, "{per_tile:?}");
            }
        }
    }

    #[test]
    fn balanced_layout_covers_storage() {
        for (shape, g, t) in [
            (vec![7, 13], 16, 5),
            (vec![1], 4, 8),
            (vec![3, 64, 64], 8, 1472),
        ] {
            let l = Layout::balanced(&shape, g, t);
            l.check(storage_elements(&shape, g)).unwrap();
        }
    }

    #[test]
    fn balanced_from_wraps_past_the_last_tile() {
        let l = Layout::balanced_from(&[1, 24], 8, 5, 3);
        l.check(storage_elements(&[1, 24], 8)).unwrap();
        let tiles: Vec<u32> = l.pieces.iter().map(|p| p.tile).collect();
        assert_eq!(tiles, vec![3, 4, 0, 1, 2]);
        let small = Layout::balanced_from(&[8], 4, 1472, 1471);
        assert_eq!(small.tiles(), vec![0, 1471]);
        assert_eq!(
            Layout::balanced_from(&[3, 64, 64], 8, 1472, 0),
            Layout::balanced(&[3, 64, 64], 8, 1472)
        );
    }

    #[test]
    fn regroup_moves_every_element_to_its_place() {
        let shape = [5usize, 21];
        for (gs, gd) in [(16, 8), (8, 16), (4, 16), (16, 16)] {
            let src = Layout::balanced(&shape, gs, 3);
            let total_d = storage_elements(&shape, gd);
            let mv = moves(&shape, &src, gd, &[(0, total_d, 0)]);
            // Simulate: source storage holds the logical index + 1 (0 for padding).
            let mut src_val = vec![0usize; storage_elements(&shape, gs)];
            for i in 0..105 {
                src_val[storage_index(&shape, gs, i)] = i + 1;
            }
            let tile_buf = |tile: u32| -> Vec<usize> {
                src.pieces
                    .iter()
                    .filter(|p| p.tile == tile)
                    .flat_map(|p| src_val[p.start..p.end].to_vec())
                    .collect()
            };
            let mut dst = vec![0usize; total_d];
            for m in mv {
                let b = tile_buf(m.src_tile);
                dst[m.dst_local..m.dst_local + m.elements]
                    .copy_from_slice(&b[m.src_local..m.src_local + m.elements]);
            }
            for i in 0..105 {
                assert_eq!(
                    dst[storage_index(&shape, gd, i)],
                    i + 1,
                    "gs {gs} gd {gd} element {i}"
                );
            }
        }
    }

    #[test]
    fn uncovered_ranges() {
        assert_eq!(
            uncovered(10, &mut [(2, 4), (4, 6), (8, 9)]),
            vec![(0, 2), (6, 8), (9, 10)]
        );
    }
}
