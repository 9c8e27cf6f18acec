//! The reduction of k-split partials (a 3-D matmul split): how many stages and how deep, shared
//! by the compiler, which costs and lowers it, and the reference, whose device precision
//! follows it.

/// Partial depths below this reduce in one stage; from it up in two (PopLibs'
/// `getNumReduceStages` in `lib/poplin/ConvReducePlan.cpp`, graphcore/poplibs, which adds a
/// third stage from 125 partials; a k split here never has that many, see
/// [`K_SPLITS_MAX`]).
pub const REDUCE_TWO_STAGES_FROM: usize = 16;

/// The most k chunks a split product takes: PopLibs plans a third reduction stage from 125
/// partials, which this rule does not define.
pub const K_SPLITS_MAX: usize = 124;

/// The reduction plan of `depth` partials: the depth left after each intermediate stage, as
/// PopLibs' `getMultiStageReducePlan` (`lib/poplin/ConvReducePlan.cpp`, graphcore/poplibs)
/// chooses for up to two stages: empty (one stage) below [`REDUCE_TWO_STAGES_FROM`], else
/// `[d]` with `d` the floor or the ceiling of `sqrt(depth)`, whichever needs fewer messages
/// per tile (`d + depth / d`; the floor on a tie).
pub fn reduce_plan(depth: usize) -> Vec<usize> {
    assert!(
        depth <= K_SPLITS_MAX,
        "a reduction of {depth} partials needs three stages"
    );
    if depth < REDUCE_TWO_STAGES_FROM {
        return Vec::new();
    }
    let down = (depth as f64).sqrt() as usize;
    let cost = |d: usize| d as f32 + depth as f32 / d as f32;
    if cost(down) < cost(down + 1) {
        vec![down]
    } else {
        vec![down + 1]
    }
}
