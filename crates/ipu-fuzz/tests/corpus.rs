//! Every committed corpus entry (and every crash found and fixed, kept in the corpus) runs
//! through its target without a finding.

use std::path::Path;

#[test]
fn every_corpus_entry_runs_clean() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus");
    let mut total = 0;
    for (name, target) in ipu_fuzz::TARGETS {
        let dir = root.join(name);
        let mut files: Vec<_> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .map(|e| e.unwrap().path())
            .collect();
        files.sort();
        assert!(!files.is_empty(), "{name}: empty corpus");
        for f in files {
            let bytes = std::fs::read(&f).unwrap();
            if let Err(e) = target(&bytes) {
                panic!("{name} {}: {e}", f.display());
            }
            total += 1;
        }
    }
    assert!(total > 0);
}

#[test]
fn the_generator_makes_graphs_that_verify() {
    // Deterministic inputs of every length up to 64 bytes: each must give a verified graph or
    // too few bytes, never a graph the verifier refuses.
    for n in 0..64u8 {
        let data: Vec<u8> = (0..n).map(|i| i.wrapping_mul(37).wrapping_add(n)).collect();
        ipu_fuzz::diff::graph_diff(&data).unwrap();
    }
}
