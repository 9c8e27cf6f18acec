//! Builds packages for small graphs and checks their structure.

use ipu_codegen::{BuildOptions, CodegenError, build};
use ipu_graph::models;
use ipu_target::Target;

fn params(kv: &[(&str, &str)]) -> Vec<(String, String)> {
    kv.iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[test]
fn matmul_builds_a_valid_deterministic_package() {
    let g = models::build(
        "matmul",
        &params(&[("m", "37"), ("k", "21"), ("n", "19"), ("dtype", "f16")]),
    )
    .unwrap();
    let opts = BuildOptions {
        target: Target::gc200(),
        tiles: 13,
    };
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
    let g = models::build(
        "matmul",
        &params(&[("m", "4096"), ("k", "65536"), ("n", "64"), ("dtype", "f32")]),
    )
    .unwrap();
    let e = build(
        &g,
        &BuildOptions {
            target: Target::gc200(),
            tiles: 1,
        },
    )
    .unwrap_err();
    let CodegenError::DoesNotFit {
        op,
        tile,
        need_bytes,
        available_bytes,
        ..
    } = &e
    else {
        panic!("{e}");
    };
    assert_eq!(op.as_deref(), Some("%c"), "{e}");
    assert_eq!(*tile, None, "planning does not blame one tile");
    assert!(need_bytes > available_bytes, "{e}");
    assert!(e.to_string().contains("bytes over"), "{e}");
    assert_eq!(e.kind(), "does_not_fit");
}

#[test]
fn flash_attention_shapes_the_device_cannot_map_are_refused_at_planning() {
    let opts = BuildOptions {
        target: Target::gc200(),
        tiles: 64,
    };
    let g = models::build(
        "attention-flash",
        &params(&[("seq", "256"), ("head_dim", "40")]),
    )
    .unwrap();
    let e = build(&g, &opts).unwrap_err();
    let CodegenError::Unsupported { op, reason } = &e else {
        panic!("{e}");
    };
    assert_eq!(op, "%out");
    assert!(reason.contains("head_dim 40"), "{e}");
    // 64 tiles cannot hold the blocks of scores of a 16384-long sequence, however mapped.
    let g = models::build("attention-flash", &params(&[("seq", "16384")])).unwrap();
    let e = build(&g, &opts).unwrap_err();
    let CodegenError::DoesNotFit {
        op,
        need_bytes,
        available_bytes,
        detail,
        ..
    } = &e
    else {
        panic!("{e}");
    };
    assert_eq!(op.as_deref(), Some("%out"));
    assert!(need_bytes > available_bytes, "{e}");
    assert!(detail.contains("closest mapping"), "{e}");
}

#[test]
fn flash_attention_fits_at_4096_where_the_unfused_graph_does_not() {
    let opts = BuildOptions {
        target: Target::gc200(),
        tiles: 1472,
    };
    let seq = params(&[("seq", "4096")]);
    let e = build(&models::build("attention", &seq).unwrap(), &opts).unwrap_err();
    let CodegenError::DoesNotFit {
        op,
        need_bytes,
        available_bytes,
        ..
    } = &e
    else {
        panic!("{e}");
    };
    // The user's operation, not the expansion's intermediate (`out.softmax`).
    assert_eq!(op.as_deref(), Some("%out"));
    assert!(need_bytes > available_bytes);
    let b = build(&models::build("attention-flash", &seq).unwrap(), &opts).unwrap();
    b.package.validate().unwrap();
    assert!(b.report.program_text.contains("out.merge"));
}

#[test]
fn flash_attention_package_bytes_do_not_depend_on_the_thread_count() {
    let g = models::build(
        "attention-flash",
        &params(&[("seq", "512"), ("heads", "2"), ("causal", "true")]),
    )
    .unwrap();
    let opts = BuildOptions {
        target: Target::gc200(),
        tiles: 200,
    };
    let with = |threads: usize| {
        rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap()
            .install(|| build(&g, &opts).unwrap())
            .package
            .to_bytes()
            .unwrap()
    };
    assert_eq!(with(1), with(2));
}
