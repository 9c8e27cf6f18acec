//! Builds packages for small graphs and checks their structure.

mod common;

use ipu_codegen::{CodegenError, build, build_explained};
use ipu_target::Target;

#[test]
fn matmul_builds_a_valid_deterministic_package() {
    let g = common::model(
        "matmul",
        &[("m", "37"), ("k", "21"), ("n", "19"), ("dtype", "f16")],
    );
    let opts = common::gc200(13);
    let a = build(&g, &opts).unwrap();
    let b = build(&g, &opts).unwrap();
    a.package.validate().unwrap();
    assert_eq!(a.package.to_bytes().unwrap(), b.package.to_bytes().unwrap());
    assert_eq!(a.package.tiles.len(), 1472);
    // The report's figures agree with the graph and the machine: every multiply-accumulate
    // counted, no faster than the AMP's peak on the tiles used, within tile memory.
    let r = &a.report;
    assert_eq!(r.macs, 37 * 21 * 19);
    assert_eq!(r.tiles_used, 13);
    let mode = r.amp_mode.expect("a matmul uses the AMP");
    assert_eq!(mode, ipu_target::AmpMode::F16F32);
    let peak_bound = r.macs.div_ceil(13 * mode.macs_per_cycle() as u64);
    assert!(
        r.final_cycles > peak_bound + r.final_exchange_cycles,
        "{} cycles for {} MACs",
        r.final_cycles,
        r.macs
    );
    let t = Target::gc200();
    assert!(r.peak_standard_bytes <= t.standard_bytes());
    assert!(r.peak_interleaved_bytes <= t.interleaved_bytes());
    assert!(r.program_text.contains("compute"));
}

#[test]
fn too_large_matmul_is_refused_at_planning() {
    let g = common::model(
        "matmul",
        &[("m", "4096"), ("k", "65536"), ("n", "64"), ("dtype", "f32")],
    );
    let (e, tile, _) = common::does_not_fit(&g, 1, "%c");
    assert_eq!(tile, Some(0), "the busiest tile of the closest candidate");
    assert!(e.to_string().contains("bytes over"), "{e}");
    assert_eq!(e.kind(), "does_not_fit");
}

#[test]
fn flash_attention_shapes_the_device_cannot_map_are_refused_at_planning() {
    let opts = common::gc200(64);
    let g = common::model("attention-flash", &[("seq", "256"), ("head_dim", "40")]);
    let e = build(&g, &opts).unwrap_err();
    let CodegenError::Unsupported { op, reason } = &e else {
        panic!("{e}");
    };
    assert_eq!(op, "%out");
    assert!(reason.contains("head_dim 40"), "{e}");
    // 64 tiles cannot hold the blocks of scores of a 16384-long sequence, however mapped.
    let g = common::model("attention-flash", &[("seq", "16384")]);
    let (e, _, detail) = common::does_not_fit(&g, opts.tiles, "%out");
    assert!(detail.contains("closest mapping"), "{e}");
}

#[test]
fn flash_attention_fits_at_4096_where_the_unfused_graph_does_not() {
    let opts = common::gc200(1472);
    let seq = [("seq", "4096")];
    // Blamed on the user's operation, not the expansion's intermediate (`out.softmax`).
    common::does_not_fit(&common::model("attention", &seq), opts.tiles, "%out");
    let b = build(&common::model("attention-flash", &seq), &opts).unwrap();
    b.package.validate().unwrap();
    assert!(b.report.program_text.contains("out.merge"));
}

#[test]
fn flash_attention_package_bytes_do_not_depend_on_the_thread_count() {
    let g = common::model(
        "attention-flash",
        &[("seq", "512"), ("heads", "2"), ("causal", "true")],
    );
    let opts = common::gc200(200);
    let with = |threads: usize| {
        rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap()
            .install(|| common::package_bytes(&g, &opts))
    };
    assert_eq!(with(1), with(2));
}

#[test]
fn a_planning_refusal_draws_every_tile_and_names_the_busiest() {
    // Layer 0's matmul must leave room for the weights of layers 1 and 2, read later: each
    // [4096, 4096] f16 weight is a quarter on each of the 4 tiles.
    let g = common::model("mlp", &[("width", "4096"), ("depth", "3")]);
    let (e, tile, detail) = common::does_not_fit(&g, 4, "%h0");
    let refusal = build_explained(&g, &common::gc200(4)).unwrap_err();
    assert_eq!(refusal.error, e, "build and build_explained refuse alike");
    let view = refusal.view.expect("a planning refusal has a view");
    assert!(view.planning_refusal && !view.placed);
    assert_eq!(view.tiles.len(), 4);
    let busiest = ipu_codegen::view::busiest_tile(&view).unwrap();
    assert_eq!(tile, Some(busiest.tile), "the error names the busiest tile");
    let name = |b: &ipu_codegen::view::BufferView| view.names[b.name as usize].as_str();
    let quarter = 4096 * 4096 * 2 / 4;
    for w in ["%w0", "%w1", "%w2"] {
        let b = busiest.buffers.iter().find(|b| name(b) == w);
        let b = b.unwrap_or_else(|| panic!("{w} missing on the busiest tile: {view:?}"));
        assert_eq!(b.bytes, quarter, "{w}'s share of the tile");
        assert!(!b.estimate && b.address.is_none());
        assert!(
            detail.contains(&format!("{w} {quarter} bytes")),
            "{w} named: {e}"
        );
    }
    assert!(
        detail.contains(&format!("busiest tile {}: ", busiest.tile)),
        "{e}"
    );
    assert!(
        !detail.contains("largest share"),
        "per-tile bytes, not bounds: {e}"
    );
    // The refused operation's closest mapping is drawn as an estimate, not a buffer, and the
    // tile's bytes add up: support reserve, values, estimate.
    let CodegenError::DoesNotFit { need_bytes, .. } = e else {
        unreachable!()
    };
    let estimate = busiest.buffers.iter().find(|b| b.estimate).unwrap();
    assert_eq!(name(estimate), "%h0 working set (estimate)");
    assert_eq!(u64::from(estimate.bytes), need_bytes);
    let sum: u64 = busiest.buffers.iter().map(|b| u64::from(b.bytes)).sum();
    assert_eq!(
        u64::from(busiest.standard_bytes + busiest.interleaved_bytes),
        sum + u64::from(busiest.support_bytes)
    );
    // Steps are the graph's operations; the peak is the refused one.
    assert_eq!(view.steps[busiest.peak_step].kind, "refused");
    assert_eq!(view.steps[busiest.peak_step].name, "%h0");
}
