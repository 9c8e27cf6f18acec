//! The AMP benchmark kernel computes the right numbers on a few tiles, at the expected speed.

use ipu_sim::bench::{BenchError, run_amp_bench};
use ipu_target::{Target, TargetKind};

#[test]
fn amp_kernel_matches_host_model_on_a_few_tiles() {
    for rows in [6, 16, 64, 100] {
        let p = run_amp_bench(TargetKind::Bow.target(), 4, rows).expect("bench runs and verifies");
        assert_eq!(p.n, rows);
        // Four tile cycles per row at full rate, plus the fixed overhead.
        assert!(p.cycles >= 4 * rows as u64, "{p:?}");
        assert!(p.cycles < 4 * rows as u64 + 400, "{p:?}");
    }
}

#[test]
fn amp_kernel_rejects_too_few_rows() {
    assert!(matches!(
        run_amp_bench(Target::gc200(), 1, 3),
        Err(BenchError::Rows { rows: 3 })
    ));
}
