//! A matmul's device operation ([`MatMul`]): its blocks, dealt to the tiles in one of two
//! orders ([`Consecutive`]), and the output's layout they make.

use ipu_target::AmpMode;

use crate::layout::Layout;

/// One matmul block: the output rows `m0..m1` and column groups `g0..g1` of batch `b`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Block {
    /// Tile.
    pub tile: u32,
    /// Batch index (over the output's leading dimensions).
    pub batch: usize,
    /// Rows.
    pub m0: usize,
    /// One past the last row.
    pub m1: usize,
    /// First column group.
    pub g0: usize,
    /// One past the last column group.
    pub g1: usize,
    /// The k split it computes (0 unless the matmul splits k over tiles).
    pub split: usize,
}

impl Block {
    /// The block's rows as runs within batch entries, `(batch, first row, one past the last)`:
    /// its own, or, with the batch folded into rows of `m` each (`folded`), its folded rows cut
    /// where a batch entry ends.
    pub fn segments(&self, folded: Option<usize>) -> Vec<(usize, usize, usize)> {
        match folded {
            None => vec![(self.batch, self.m0, self.m1)],
            Some(m) => {
                let mut out = Vec::new();
                let mut r = self.m0;
                while r < self.m1 {
                    let end = ((r / m + 1) * m).min(self.m1);
                    out.push((r / m, r % m, r % m + (end - r)));
                    r = end;
                }
                out
            }
        }
    }
}

/// A matmul on the AMP with its blocks (the family's main device operation); the output is
/// the partials type.
#[derive(Debug, Clone, PartialEq)]
pub struct MatMul {
    /// AMP mode.
    pub mode: AmpMode,
    /// Blocks.
    pub blocks: Vec<Block>,
    /// Row splits.
    pub pm: usize,
    /// Column-group splits.
    pub pn: usize,
    /// Serial chunks of the k blocks: each has its own exchange and compute steps and
    /// stages only its share of the operands; accumulation carries across them.
    pub k_chunks: usize,
    /// Chunks of the k blocks on separate tiles (a 3-D split): block `split` takes the K
    /// blocks `kb * split / k_splits .. kb * (split + 1) / k_splits` and writes its own
    /// partials, slice `split` of the output `[k_splits, ..]`, which [`SumSplits`](super::SumSplits) then
    /// reduces. 1: no split.
    pub k_splits: usize,
    /// The operand the blocks on consecutive tiles share (the order of `blocks`).
    pub consecutive: Consecutive,
    /// Whether the batch is folded into the rows (the right operand has no batch, so the
    /// output's `batch × m` rows are one matrix's): the blocks' rows then run over the folded
    /// rows, each block a batch entry 0, and [`Block::segments`] maps them back. Else blocks
    /// index the batch.
    pub folded: bool,
}

/// Which operand the blocks on consecutive tiles share: blocks are dealt to tiles in
/// (split, batch, column block, row block) order with `Weights` (a run of `pm` blocks shares
/// its weights) or (split, batch, row block, column block) with `Rows` (a run of `pn` blocks
/// shares its rows of `a`). The shared operand's staging buffers form placement groups, so
/// one multicast row sends each run its copy, and whole pairs in a run take two such rows at
/// once (`Target::pair_tile`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Consecutive {
    /// Runs share weights (the default).
    Weights,
    /// Runs share rows of `a`.
    Rows,
}

impl Consecutive {
    /// The blocks sharing the operand in one run.
    pub(super) fn run(self, pm: usize, pn: usize) -> usize {
        match self {
            Consecutive::Weights => pm,
            Consecutive::Rows => pn,
        }
    }
}

/// The blocks of a split of the output's `batch` entries of `m` rows and `groups` column
/// groups into `pm` × `pn` blocks per k split (`k_splits` of them), dealt to `tiles` tiles
/// round-robin: in (split, batch, column, row) order with `Weights`, so that the blocks
/// sharing a column range (the same weights) get consecutive tiles and one multicast exchange
/// row can send them their weights; with `Rows`, in (split, batch, row, column) order, the
/// blocks sharing rows of `a`. Empty blocks (more splits than rows or groups) are left out.
pub(super) fn deal_blocks(
    batch: usize,
    (m, groups): (usize, usize),
    (pm, pn, k_splits): (usize, usize, usize),
    consecutive: Consecutive,
    tiles: usize,
) -> Vec<Block> {
    let mut blocks = Vec::new();
    for split in 0..k_splits {
        for bi in 0..batch {
            let (outer, inner) = match consecutive {
                Consecutive::Weights => (pn, pm),
                Consecutive::Rows => (pm, pn),
            };
            for o in 0..outer {
                for x in 0..inner {
                    let (i, j) = match consecutive {
                        Consecutive::Weights => (x, o),
                        Consecutive::Rows => (o, x),
                    };
                    let (m0, m1) = (m * i / pm, m * (i + 1) / pm);
                    let (g0, g1) = (groups * j / pn, groups * (j + 1) / pn);
                    if m1 > m0 && g1 > g0 {
                        let tile = (blocks.len() % tiles) as u32;
                        blocks.push(Block {
                            tile,
                            batch: bi,
                            m0,
                            m1,
                            g0,
                            g1,
                            split,
                        });
                    }
                }
            }
        }
    }
    blocks
}

/// The output's layout in column groups of `cols`: per block, per column group, its rows (a
/// folded block's rows in runs within batch entries, held back to back on its tile); a k
/// split's partials are slice `split` of `[k_splits, ..]`, each slice `batch` entries of
/// `groups` column groups of `m` rows.
pub(super) fn output_layout(
    blocks: &[Block],
    batch: usize,
    (m, groups): (usize, usize),
    cols: usize,
    folded: Option<usize>,
) -> Layout {
    let slice = batch * groups * m * cols;
    let ranges = blocks.iter().flat_map(|bl| {
        let segments = bl.segments(folded);
        (bl.g0..bl.g1).flat_map(move |g| {
            segments.clone().into_iter().map(move |(b, r0, r1)| {
                let base = bl.split * slice + b * groups * m * cols + g * m * cols;
                (bl.tile, base + r0 * cols, base + r1 * cols)
            })
        })
    });
    Layout::from_ranges(cols, ranges.collect::<Vec<_>>())
}
