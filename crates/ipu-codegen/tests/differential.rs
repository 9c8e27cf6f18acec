//! Differential tests: every operator the device lowering supports runs through the compiler,
//! the package (written and read back), the simulated device and the host reference, and the
//! outputs must agree within the dtype's tolerance (most are bit-exact).

mod common;

use ipu_graph::{Graph, parse};
use ipu_target::{Target, TargetKind};

fn graph(text: &str) -> Graph {
    parse(text, "test.ipug").unwrap_or_else(|e| panic!("{e}\n{text}"))
}

fn matmul(m: usize, k: usize, n: usize, dtype: &str, partials: &str, out: &str) -> Graph {
    graph(&format!(
        "graph mm {{\n  input %a: {dtype}[{m}, {k}]\n  input %b: {dtype}[{k}, {n}]\n  %c = matmul(%a, %b) {{partials = {partials}}}: {out}[{m}, {n}]\n  output %c\n}}\n"
    ))
}

#[test]
fn matmul_every_dtype_and_odd_shape() {
    let cases = [
        ("f32", "f32", "f32"),
        ("f16", "f16", "f16"),
        ("f16", "f32", "f16"),
        ("f16", "f32", "f32"),
        ("f143@-4", "f16", "f16"),
        ("f152@0", "f16", "f16"),
        ("f143@-4", "f32", "f32"),
    ];
    for (dtype, partials, out) in cases {
        for (m, k, n) in [(1, 1, 1), (7, 13, 5), (3, 17, 33), (31, 40, 9)] {
            let g = matmul(m, k, n, dtype, partials, out);
            let what = format!("{dtype}/{partials}->{out} {m}x{k}x{n}");
            common::run_within(&g, &[1, 13], 3, &what, 0.0);
        }
    }
}

#[test]
fn matmul_on_64_and_all_tiles() {
    for (m, k, n, tiles) in [(64, 48, 80, 64), (97, 61, 53, 1472), (5, 300, 7, 1472)] {
        let g = matmul(m, k, n, "f16", "f32", "f16");
        common::run_within(&g, &[tiles], 1, &format!("{m}x{k}x{n}"), 0.0);
    }
}

#[test]
fn matmul_rounds_chained_in_every_mode_are_exact() {
    // Two rows a worker or more: a block's AMP rounds are one chain (`AmpChain`) through its
    // column groups and K blocks, each round storing the row the one before left in the AMP.
    // Rows split evenly (immediate loop count, unrolled stores) and not, every AMP mode.
    let cases = [
        (37, 100, 40, "f16", "f32", "f16"),
        (48, 64, 32, "f16", "f16", "f16"),
        (30, 40, 20, "f32", "f32", "f32"),
        (13, 33, 17, "f143@-4", "f32", "f32"),
        (120, 48, 24, "f16", "f32", "f32"),
    ];
    for (m, k, n, dtype, partials, out) in cases {
        let g = matmul(m, k, n, dtype, partials, out);
        let what = format!("{dtype}/{partials}->{out} {m}x{k}x{n}");
        let planned = ipu_codegen::plan::plan(&g, &Target::gc200(), 1).unwrap();
        let program = ipu_codegen::lower::lower(&planned)
            .unwrap()
            .program
            .to_string();
        assert!(
            program.contains("AmpChain"),
            "{what}: expected chained rounds:\n{program}"
        );
        common::run_within(&g, &[1], 2, &what, 0.0);
    }
}

#[test]
fn batched_matmul_with_broadcast_weights() {
    let g = graph(
        "graph bmm {\n  input %a: f16[3, 5, 19]\n  input %b: f16[19, 6]\n  %c = matmul(%a, %b) {partials = f16}: f16[3, 5, 6]\n  output %c\n}\n",
    );
    common::run_within(&g, &[7], 2, "batched", 0.0);
    let g = graph(
        "graph bmm2 {\n  input %a: f32[2, 9, 8]\n  input %b: f32[2, 8, 11]\n  %c = matmul(%a, %b) {partials = f32}: f32[2, 9, 11]\n  output %c\n}\n",
    );
    common::run_within(&g, &[5], 2, "batched both", 0.0);
}

/// A batched left operand by a right one without a batch: the batch entries' rows are one
/// matrix's, and blocks of rows that cross batch entries (`batch=rows`) are as exact as blocks
/// within one.
#[test]
fn a_batch_folded_into_the_rows_is_exact() {
    let mut folded = 0;
    for (dtype, partials, tiles) in [("f16", "f32", 8), ("f16", "f16", 3), ("f32", "f32", 16)] {
        let g = graph(&format!(
            "graph fold {{\n  input %a: {dtype}[4, 30, 40]\n  input %b: {dtype}[40, 24]\n  %c = matmul(%a, %b) {{partials = {partials}}}: {partials}[4, 30, 24]\n  output %c\n}}\n"
        ));
        let planned = ipu_codegen::plan::plan(&g, &Target::gc200(), tiles).unwrap();
        let chosen = planned.finalists.iter().find(|f| f.op == "c").unwrap();
        folded += usize::from(chosen.mapping.contains("batch=rows"));
        common::run_within(&g, &[tiles], 3, &format!("{dtype} folded"), 0.0);
    }
    assert!(folded > 0, "no shape chose to fold its batch into rows");
}

fn elementwise(dtype: &str, rows: usize, cols: usize) -> Graph {
    let t = format!("{dtype}[{rows}, {cols}]");
    graph(&format!(
        "graph ew {{
  input %a: {t}
  input %b: {t}
  %c = add(%a, %b): {t}
  %e = exp(%b): {t}
  %d = div(%c, %e): {t}
  %f = scale(%d) {{factor = 0.37}}: {t}
  %g = mul(%f, %a): {t}
  %h = max(%g, %b): {t}
  %i = sub(%h, %a): {t}
  output %i
  output %e
}}
"
    ))
}

#[test]
fn elementwise_ops_in_f32_and_f16() {
    for dtype in ["f32", "f16"] {
        for (rows, cols, tiles) in [(1, 1, 1), (37, 21, 13), (8, 64, 64), (3, 5, 1472)] {
            let g = elementwise(dtype, rows, cols);
            common::run(&g, Target::gc200(), tiles, 5)
                .assert_pass(&format!("{dtype} {rows}x{cols} on {tiles} tiles"));
        }
    }
}

#[test]
fn casts_between_every_type() {
    for (from, to) in [
        ("f32", "f16"),
        ("f16", "f32"),
        ("f16", "f143@-2"),
        ("f16", "f152@1"),
        ("f143@-4", "f16"),
        ("f152@0", "f32"),
        ("f32", "f143@-3"),
        // Graph casts from f32 round once (Kernel::CastOnce), also at scales where f16 does
        // not cover the FP8 range.
        ("f32", "f143@9"),
        ("f32", "f152@2"),
        ("f32", "f152@-7"),
    ] {
        for (rows, cols, tiles) in [(1, 3, 1), (29, 31, 13)] {
            let g = graph(&format!(
                "graph cast {{\n  input %a: {from}[{rows}, {cols}]\n  %b = cast(%a) {{to = {to}}}: {to}[{rows}, {cols}]\n  output %b\n}}\n"
            ));
            common::run_within(&g, &[tiles], 9, &format!("{from}->{to} {rows}x{cols}"), 0.0);
        }
    }
}

#[test]
fn padding_read_by_a_matmul_is_cleared() {
    // div maps the zero padding of %a to NaN (0/0); the matmul contracts over that padded
    // axis, where NaN times the zero-filled weight rows would poison every output.
    let g = graph(
        "graph pad {\n  input %a: f16[9, 21]\n  input %b: f16[21, 7]\n  %e = div(%a, %a): f16[9, 21]\n  %c = matmul(%e, %b) {partials = f32}: f32[9, 7]\n  output %c\n}\n",
    );
    common::run(&g, Target::gc200(), 4, 11).assert_pass("div then matmul");
}

#[test]
fn every_target_runs_and_results_do_not_depend_on_it() {
    let g = matmul(19, 23, 17, "f16", "f32", "f16");
    let outs: Vec<_> = TargetKind::ALL
        .iter()
        .map(|k| {
            let o = common::run(&g, k.target(), 9, 4);
            o.assert_exact(k.name());
            o.outputs
        })
        .collect();
    assert!(outs.windows(2).all(|w| w[0] == w[1]));
}

#[test]
fn same_inputs_give_same_package_cycles_and_outputs() {
    let g = elementwise("f16", 13, 27);
    let a = common::run(&g, Target::gc200(), 13, 8);
    let b = common::run(&g, Target::gc200(), 13, 8);
    assert_eq!(a.package_bytes, b.package_bytes);
    assert_eq!(a.cycles, b.cycles);
    assert_eq!(a.outputs, b.outputs);
}

#[test]
fn flash_attention_matches_its_expansion_over_types_masks_and_shapes() {
    // The fused lowering merges key blocks in another order than the expansion's running
    // rescale: equal up to f32 rounding, so within a few f16 ulps of the output.
    for (dtype, causal, seq, heads, tiles) in [
        ("f16", false, 96, 2, 13),
        ("f16", true, 96, 2, 13),
        ("f16", true, 100, 1, 64),
        ("f32", true, 80, 2, 7),
        ("f32", false, 72, 1, 1),
        ("f16", true, 64, 4, 1),
        // 256 keys per tile in two sub-blocks with a running maximum.
        ("f16", false, 1024, 1, 16),
        ("f16", true, 1024, 1, 16),
        ("f32", true, 1024, 1, 16),
        ("f143", true, 48, 3, 2),
        ("f143", false, 64, 2, 16),
        ("f143", true, 64, 2, 16),
        ("f152", false, 48, 1, 5),
        ("f152", true, 40, 1, 5),
    ] {
        let (seq_text, heads_text) = (seq.to_string(), heads.to_string());
        let causal_text = causal.to_string();
        let g = common::model(
            "attention-flash",
            &[
                ("seq", &seq_text),
                ("heads", &heads_text),
                ("head_dim", "64"),
                ("dtype", dtype),
                ("causal", &causal_text),
            ],
        );
        let what =
            format!("flash {dtype} causal={causal} seq={seq} heads={heads} on {tiles} tiles");
        common::run(&g, Target::gc200(), tiles, 6).assert_within(&what, 2e-3);
    }
}

#[test]
fn flash_attention_with_f16_partials_matches_its_expansion() {
    // f16 scores on the AMP's f16 mode and the softmax four keys at a time in f16: one pass,
    // a causal diagonal, sub-blocks with a running maximum, a scale that is not a power of two
    // (head_dim 96: applied in the softmax, not folded into `q`), and streamed keys.
    for (causal, seq, head_dim, tiles) in [
        (false, 96, "64", 13),
        (true, 100, "64", 64),
        (false, 1024, "64", 16),
        (true, 1024, "64", 16),
        (true, 96, "96", 13),
        (false, 1024, "128", 16),
    ] {
        let (seq_text, causal_text) = (seq.to_string(), causal.to_string());
        let g = common::model(
            "attention-flash",
            &[
                ("seq", &seq_text),
                ("heads", "2"),
                ("head_dim", head_dim),
                ("dtype", "f16"),
                ("causal", &causal_text),
                ("partials", "f16"),
            ],
        );
        let what = format!("flash f16 partials causal={causal} seq={seq} d={head_dim} on {tiles}");
        common::run(&g, Target::gc200(), tiles, 6).assert_within(&what, 2e-3);
    }
}

#[test]
fn flash_attention_streams_keys_that_do_not_fit_at_once() {
    // 512 or more keys per item whose kᵀ and v do not fit in a tile at once: they arrive in
    // chunks, each its own distribution and scores step, the running maximum, sum and output
    // carried across.
    for (dtype, causal, head_dim, tiles) in [
        ("f16", false, "128", 16),
        ("f16", true, "256", 32),
        ("f16", false, "256", 32),
    ] {
        let causal_text = causal.to_string();
        let g = common::model(
            "attention-flash",
            &[
                ("seq", "1024"),
                ("heads", "1"),
                ("head_dim", head_dim),
                ("dtype", dtype),
                ("causal", &causal_text),
            ],
        );
        let what = format!("flash {dtype} causal={causal} head_dim={head_dim} on {tiles} tiles");
        let b = ipu_codegen::build(&g, &common::gc200(tiles)).unwrap();
        assert!(
            b.report.program_text.contains("out.scores.c1"),
            "{what}: keys not streamed\n{}",
            b.report.program_text
        );
        common::run(&g, Target::gc200(), tiles, 6).assert_within(&what, 2e-3);
    }
}

#[test]
fn flash_attention_with_fewer_kv_heads_than_query_heads() {
    // Grouped-query attention: query head h reads kv head h / (heads / kv_heads); the items of
    // one kv head's key block receive it by multicast. Every dtype, causal and not, several
    // rounds of items on few tiles, and head_dim 128 and 256.
    for (dtype, causal, seq, heads, kv_heads, head_dim, tiles) in [
        ("f16", false, 96, 4, 2, 64, 13),
        ("f16", true, 96, 4, 1, 64, 13),
        ("f32", true, 80, 6, 2, 64, 7),
        ("f143", false, 64, 4, 2, 64, 16),
        ("f152", true, 48, 3, 1, 64, 5),
        ("f16", false, 64, 4, 2, 128, 3),
        ("f16", true, 48, 2, 1, 256, 8),
    ] {
        let g = common::model(
            "attention-flash",
            &[
                ("seq", &seq.to_string()),
                ("heads", &heads.to_string()),
                ("kv_heads", &kv_heads.to_string()),
                ("head_dim", &head_dim.to_string()),
                ("dtype", dtype),
                ("causal", &causal.to_string()),
            ],
        );
        let what = format!(
            "flash {dtype} causal={causal} seq={seq} heads={heads}/{kv_heads} d={head_dim} on {tiles} tiles"
        );
        common::run(&g, Target::gc200(), tiles, 6).assert_within(&what, 2e-3);
    }
}

#[test]
fn flash_attention_with_batch_dims_and_other_key_and_value_shapes() {
    // Two leading dimensions, 40 queries against 200 keys (a partly filled last key block),
    // values wider than queries.
    let g = graph(
        "graph cross {\n  input %q: f16[2, 3, 40, 64]\n  input %k: f16[2, 3, 200, 64]\n  input %v: f16[2, 3, 200, 128]\n  %out = flash_attention(%q, %k, %v) {scale = 0.1, causal = false, block_q = 128, block_k = 64, partials = f32}: f16[2, 3, 40, 128]\n  output %out\n}\n",
    );
    // Few tiles take several blocks in turn.
    common::run_within(&g, &[5, 37], 4, "cross attention", 2e-3);
}

#[test]
fn causal_mask_alone() {
    let g = graph(
        "graph mask {\n  input %s: f32[2, 9, 21]\n  %m = causal_mask(%s) {key_start = 4}: f32[2, 9, 21]\n  output %m\n}\n",
    );
    common::run_within(&g, &[1, 5], 2, "mask", 0.0);
}

#[test]
fn matmul_split_into_serial_k_chunks_is_still_exact() {
    // 8 x 20000 x 8 in f16 on 2 tiles: a k split over the two tiles is the cheapest estimate
    // but its weights do not fit at placement; the re-plan stages them in serial k chunks.
    let g = matmul(8, 20000, 8, "f16", "f32", "f32");
    let b = ipu_codegen::build(&g, &common::gc200(2)).unwrap();
    assert!(
        b.report.program_text.contains("c.k0") && b.report.k_splits.is_empty(),
        "expected serial k chunks:\n{}",
        b.report.program_text
    );
    common::run_within(&g, &[2], 12, "8x20000x8 f16 on 2 tiles", 0.0);
}

#[test]
fn matmul_split_over_k_on_separate_tiles_is_exact() {
    // Long k over few rows and columns: k chunks on separate tiles, their partials summed in
    // one stage (below 16 chunks) or two, for every AMP mode, with a cast after f32 partials,
    // ragged chunks (k not a multiple of the chunks' K blocks) and a batch.
    let batched = graph(
        "graph mm {\n  input %a: f16[2, 12, 1000]\n  input %b: f16[2, 1000, 20]\n  %c = matmul(%a, %b) {partials = f32}: f16[2, 12, 20]\n  output %c\n}\n",
    );
    let cases = [
        (matmul(16, 1024, 16, "f16", "f32", "f32"), 8),
        (matmul(16, 1000, 24, "f16", "f32", "f16"), 8),
        (matmul(8, 4096, 8, "f16", "f32", "f32"), 64),
        (matmul(16, 2048, 16, "f16", "f16", "f16"), 16),
        (matmul(8, 2000, 8, "f32", "f32", "f32"), 13),
        (matmul(8, 1024, 8, "f143@-4", "f32", "f32"), 8),
        (batched, 8),
    ];
    let mut two_stages = false;
    for (g, tiles) in cases {
        let b = ipu_codegen::build(&g, &common::gc200(tiles)).unwrap();
        let splits = b.report.k_splits.get("c").copied().unwrap_or(0);
        two_stages |= b.report.program_text.contains("c.reduce1");
        assert!(
            splits > 1 && b.report.program_text.contains("c.reduce0"),
            "expected a k split:\n{}",
            b.report.program_text
        );
        let what = format!("{} split {splits} ways on {tiles} tiles", g.name);
        common::run_within(&g, &[tiles], 5, &what, 0.0);
    }
    assert!(two_stages, "no case reduced in two stages");
}

#[test]
fn flash_attention_with_a_mask_operand() {
    // Bool and additive masks `[seq, seq]` (an input) and padded keys (a constant bool
    // `[1, seq]`, one row broadcast over the queries), causal or not, every input dtype,
    // scales folded into `q` (head_dim 64) or not (96), sub-blocks, rounds on few tiles.
    for (dtype, causal, seq, heads, head_dim, mask, pad, tiles) in [
        ("f16", false, 96, 2, 64, "bool", 0, 13),
        ("f16", true, 96, 2, 64, "f16", 0, 13),
        ("f16", false, 100, 1, 96, "f32", 0, 64),
        ("f32", false, 80, 2, 64, "f32", 0, 7),
        ("f32", true, 72, 1, 96, "bool", 0, 1),
        ("f32", false, 64, 2, 64, "f16", 0, 5),
        ("f143", true, 64, 2, 64, "bool", 0, 16),
        ("f152", false, 48, 1, 64, "f16", 0, 5),
        ("f16", false, 96, 2, 64, "padded", 17, 13),
        ("f16", true, 96, 2, 96, "padded", 40, 3),
        ("f32", false, 80, 1, 64, "padded", 9, 7),
        ("f16", false, 1024, 1, 64, "padded", 300, 16),
        ("f16", true, 1024, 1, 64, "bool", 0, 64),
    ] {
        let g = common::model(
            "attention-flash",
            &[
                ("seq", &seq.to_string()),
                ("heads", &heads.to_string()),
                ("head_dim", &head_dim.to_string()),
                ("dtype", dtype),
                ("causal", &causal.to_string()),
                ("mask", mask),
                ("pad", &pad.to_string()),
            ],
        );
        let what = format!(
            "flash {dtype} causal={causal} seq={seq} heads={heads} d={head_dim} mask={mask} \
             pad={pad} on {tiles} tiles"
        );
        common::run(&g, Target::gc200(), tiles, 6).assert_within(&what, 2e-3);
    }
}

#[test]
fn flash_attention_with_masks_broadcast_over_batch_and_rows() {
    // Masks of fewer dimensions than the scores, with 1s where they broadcast.
    for (mask, partials) in [
        ("bool[3, 1, 200]", "f32"),
        ("f32[40, 200]", "f32"),
        ("f16[2, 1, 40, 200]", "f16"),
        ("bool[1, 200]", "f16"),
        ("f16[2, 3, 40, 200]", "f32"),
    ] {
        let g = graph(&format!(
            "graph cross {{\n  input %q: f16[2, 3, 40, 64]\n  input %k: f16[2, 3, 200, 64]\n  input %v: f16[2, 3, 200, 64]\n  input %m: {mask}\n  %out = flash_attention(%q, %k, %v, %m) {{scale = 0.1, causal = false, block_q = 128, block_k = 64, partials = {partials}}}: f16[2, 3, 40, 64]\n  output %out\n}}\n"
        ));
        common::run_within(
            &g,
            &[5, 37],
            4,
            &format!("mask {mask} partials {partials}"),
            2e-3,
        );
    }
}

#[test]
fn flash_attention_with_a_bool_mask_that_hides_keys_and_whole_rows() {
    // A constant bool mask hiding every seventh key pattern and every key from query rows 3
    // and 20 (one of them on a diagonal block of a causal mask): where a row sees no key the
    // device gives the reference's average of v, finite. Every input dtype, f32 and f16
    // partials, the scale folded into `q` (head_dim 64) or applied by `flash_mask` (96).
    use ipu_graph::{DType, GraphBuilder, OpKind, TensorType};
    let seq = 48usize;
    for (dtype, causal, partials, d, tiles) in [
        (DType::F16, false, DType::F32, 64usize, 5),
        (DType::F16, true, DType::F16, 64, 13),
        (DType::F32, true, DType::F32, 96, 7),
        (DType::F32, false, DType::F32, 64, 1),
        (DType::F16, false, DType::F16, 96, 3),
        (DType::F143 { scale: 0 }, true, DType::F16, 64, 16),
        (DType::F152 { scale: 0 }, false, DType::F32, 64, 5),
    ] {
        let mut b = GraphBuilder::new("hidden");
        let ty = TensorType::new(dtype, [1, seq, d]);
        let q = b.input("q", ty.clone());
        let k = b.input("k", ty.clone());
        let v = b.input("v", ty);
        let keep: Vec<f32> = (0..seq * seq)
            .map(|i| f32::from(u8::from(i / seq != 3 && i / seq != 20 && i % 7 != 2)))
            .collect();
        let m = b
            .constant_values("mask", TensorType::new(DType::Bool, [seq, seq]), &keep)
            .unwrap();
        let out = if dtype == DType::F32 {
            DType::F32
        } else {
            DType::F16
        };
        let kind = OpKind::FlashAttention {
            scale: 1.0 / (d as f32).sqrt(),
            causal,
            block_q: 16,
            block_k: 16,
            partials,
            out,
        };
        let o = b.op("out", kind, &[q, k, v, m]).unwrap();
        b.output(o);
        let g = b.finish().unwrap();
        let what = format!("bool mask {dtype} causal={causal} partials={partials} d={d}");
        let run = common::run(&g, Target::gc200(), tiles, 3);
        run.assert_within(&what, 2e-3);
        let out = &run.outputs[0].data;
        assert!(out.iter().all(|x| x.is_finite()), "{what}: NaN or inf");
        assert!(
            out[3 * d..4 * d].iter().any(|&x| x != 0.0),
            "{what}: the hidden row is zeros"
        );
    }
}

#[test]
fn buffers_loaded_together_are_placed_in_different_memory_elements() {
    // Kernels that load two buffers in one issue: AMP passes with partials (k over several
    // blocks), the k-split reduction's later additions, and the flash merge of several
    // sources. Placement keeps each pair apart, so the device charges no bank conflict.
    let flash = common::model(
        "attention-flash",
        &[
            ("seq", "1024"),
            ("heads", "1"),
            ("head_dim", "64"),
            ("dtype", "f16"),
        ],
    );
    let o = common::run(&flash, Target::gc200(), 16, 3);
    o.assert_within("flash seq 1024 on 16 tiles", 2e-3);
    assert_eq!(o.bank_conflicts, 0, "flash seq 1024 on 16 tiles");
    let mm = matmul(96, 256, 64, "f16", "f32", "f16");
    let o = common::run(&mm, Target::gc200(), 4, 3);
    o.assert_exact("matmul 96x256x64 on 4 tiles");
    assert_eq!(o.bank_conflicts, 0, "matmul 96x256x64 on 4 tiles");
}

fn lookup(v: usize, h: usize, ids: &str, dtype: &str, extra: &str) -> Graph {
    let dims: Vec<usize> = ids.split(',').map(|d| d.trim().parse().unwrap()).collect();
    let out: Vec<String> = dims
        .iter()
        .map(|d| d.to_string())
        .chain([h.to_string()])
        .collect();
    graph(&format!(
        "graph lookup {{\n  input %table: {dtype}[{v}, {h}]\n  input %ids: i32[{ids}]\n  %e = gather(%table, %ids) {{axis = 0}}: {dtype}[{}]\n{extra}  output %e\n}}\n",
        out.join(", ")
    ))
}

#[test]
fn lookup_of_run_time_indices_every_dtype_and_part_count() {
    // One part per column group, and tables whose groups are cut into several parts merged
    // by OR; odd widths (padding columns), indices of rank 1 to 3, negative indices.
    let cases = [
        (40, 24, "2, 5", "f32", &[1, 16, 1472][..]),
        (1000, 20, "7", "f16", &[1, 16, 1472]),
        (30000, 20, "3, 7", "f16", &[16, 1472]),
        (5000, 9, "2, 2, 3", "f32", &[2, 1472]),
        (600, 64, "1, 16", "f143@-2", &[1, 1472]),
    ];
    for (v, h, ids, dtype, tiles) in cases {
        let g = lookup(v, h, ids, dtype, "");
        let what = format!("{dtype} [{v}, {h}] by [{ids}]");
        common::run_within(&g, tiles, 2, &what, 0.0);
    }
}

#[test]
fn lookup_of_a_table_another_operation_reads_first_copies_it_each_run() {
    // A table an operation before the lookup reads has that operation's layout, so each run
    // copies the parts into place; one read after the lookup takes the lookup's layout.
    let before = "graph lookup {\n  input %table: f32[3000, 16]\n  input %ids: i32[2, 4]\n  %t2 = scale(%table) {factor = 2}: f32[3000, 16]\n  %e = gather(%table, %ids) {axis = 0}: f32[2, 4, 16]\n  output %t2\n  output %e\n}\n";
    let after = lookup(
        3000,
        16,
        "2, 4",
        "f32",
        "  %t2 = scale(%table) {factor = 2}: f32[3000, 16]\n  output %t2\n",
    );
    for (g, copied) in [(graph(before), true), (after, false)] {
        let planned = ipu_codegen::plan::plan(&g, &Target::gc200(), 64).unwrap();
        let log = format!("{:?}", planned.finalists);
        assert_eq!(log.contains("table-copied"), copied, "{log}");
        common::run_within(&g, &[64], 2, "table read twice", 0.0);
    }
}

#[test]
fn lookup_of_the_columns_of_a_table_a_matmul_also_reads() {
    // A tied embedding held once as the LM head's `[h, v]` operand: the lookup reads its
    // columns where the matmul stages its blocks. Vocabularies not a whole number of column
    // groups, widths with a short last group (odd in f16: a lone half), several parts a group
    // and one, indices of rank 1 and 2 with negative ones.
    // The table takes the matmul's column group (f16 with f32 partials: 8, with f16: 16).
    let cases = [
        (37, 20, "2, 5", "f16", "f32", &[1, 16, 1472][..]),
        (1000, 24, "7", "f32", "f32", &[16, 1472]),
        (3001, 9, "3, 4", "f32", "f32", &[4, 1472]),
        (5000, 7, "2, 6", "f16", "f32", &[64, 1472]),
        (4000, 40, "2, 6", "f16", "f16", &[64, 1472]),
    ];
    for (v, h, ids, dtype, partials, tiles) in cases {
        let dims: Vec<&str> = ids.split(", ").collect();
        let text = format!(
            "graph tied {{\n  input %w: {dtype}[{h}, {v}]\n  input %ids: i32[{ids}]\n  input %x: {dtype}[5, {h}]\n  %e = gather_columns(%w, %ids): {dtype}[{}, {h}]\n  %y = matmul(%x, %w) {{partials = {partials}}}: {dtype}[5, {v}]\n  output %e\n  output %y\n}}\n",
            dims.join(", ")
        );
        let g = graph(&text);
        let planned = ipu_codegen::plan::plan(&g, &Target::gc200(), tiles[0]).unwrap();
        let log = format!("{:?}", planned.finalists);
        assert!(
            log.contains("columns") && !log.contains("table-copied"),
            "{log}"
        );
        let what = format!("{dtype} [{h}, {v}] columns by [{ids}], {partials} partials");
        common::run_within(&g, tiles, 2, &what, 0.0);
    }
    // Read by an operation before the lookup: the parts are copied into place each run.
    let g = graph(
        "graph tied {\n  input %w: f16[20, 300]\n  input %ids: i32[9]\n  %s = scale(%w) {factor = 2}: f16[20, 300]\n  %e = gather_columns(%w, %ids): f16[9, 20]\n  output %s\n  output %e\n}\n",
    );
    let planned = ipu_codegen::plan::plan(&g, &Target::gc200(), 16).unwrap();
    let log = format!("{:?}", planned.finalists);
    assert!(log.contains("columns table-copied"), "{log}");
    common::run_within(&g, &[16, 1472], 2, "columns copied", 0.0);
}

#[test]
fn every_map_function_in_every_operand_type_it_takes() {
    use ipu_graph::MapFn;
    let shape = "3, 13";
    for f in MapFn::ALL {
        let dtypes: &[&str] = if f.takes_bools() {
            &["bool"]
        } else if f == MapFn::Where {
            &["f32", "f16", "i32", "i16", "u8", "bool"]
        } else if matches!(
            f,
            MapFn::IsNaN | MapFn::IsInf | MapFn::IsPosInf | MapFn::IsNegInf
        ) {
            &["f32", "f16"]
        } else {
            &["f32", "f16", "i32", "i16", "i8", "u8"]
        };
        for dt in dtypes {
            let text = match f {
                MapFn::Where => format!(
                    "graph m {{\n  input %c: bool[{shape}]\n  input %x: {dt}[{shape}]\n  input %y: {dt}[{shape}]\n  %r = where(%c, %x, %y): {dt}[{shape}]\n  output %r\n}}\n"
                ),
                _ if f.arity() == 2 => format!(
                    "graph m {{\n  input %x: {dt}[{shape}]\n  input %y: {dt}[{shape}]\n  %r = {}(%x, %y): bool[{shape}]\n  output %r\n}}\n",
                    f.mnemonic()
                ),
                _ if f.takes_bools() => format!(
                    "graph m {{\n  input %x: {dt}[{shape}]\n  %r = {}(%x): bool[{shape}]\n  output %r\n}}\n",
                    f.mnemonic()
                ),
                // NaN from the logarithm of negative values, +inf from exp(100 x) above
                // x = 0.89 (f32) or 0.11 (f16), -inf from its negation.
                _ => format!(
                    "graph m {{\n  input %x: {dt}[{shape}]\n  %l = log(%x): {dt}[{shape}]\n  %s = scale(%x) {{factor = 100}}: {dt}[{shape}]\n  %e = exp(%s): {dt}[{shape}]\n  %n = scale(%e) {{factor = -1}}: {dt}[{shape}]\n  %a = {m}(%l): bool[{shape}]\n  %b = {m}(%e): bool[{shape}]\n  %c = {m}(%n): bool[{shape}]\n  output %a\n  output %b\n  output %c\n}}\n",
                    m = f.mnemonic()
                ),
            };
            let g = graph(&text);
            common::run_within(&g, &[1, 5], 3, &format!("{} {dt}", f.mnemonic()), 0.0);
        }
    }
}

#[test]
fn casts_between_32_bit_integers_and_floats() {
    for (from, to) in [
        ("i32", "f32"),
        ("i32", "f16"),
        ("f32", "i32"),
        ("i32", "bool"),
        ("bool", "i32"),
        ("i16", "i32"),
    ] {
        let g = graph(&format!(
            "graph c {{\n  input %x: {from}[4, 9]\n  %y = cast(%x) {{to = {to}}}: {to}[4, 9]\n  output %y\n}}\n"
        ));
        common::run_within(&g, &[1, 3], 1, &format!("{from} -> {to}"), 0.0);
    }
}

#[test]
fn row_vectors_and_scalars_on_either_side_keep_the_full_operands_layout() {
    // `w * x` and `w + x` (a norm's weight first, as exporters write it) take the row vector
    // path with the operands swapped; `s / x` and `s - x` combine reversed with the scalar
    // multicast. On all tiles the row vector, held by one tile, reaches the output's tiles in
    // two hops (the whole vector by multicast, then each tile's runs from its own copy).
    for dtype in ["f32", "f16"] {
        let (r, c) = (300, 96);
        let g = graph(&format!(
            "graph rv {{
  input %x: {dtype}[{r}, {c}]
  input %w: {dtype}[1, {c}]
  input %s: {dtype}[1, 1]
  %a = mul(%w, %x): {dtype}[{r}, {c}]
  %b = add(%w, %a): {dtype}[{r}, {c}]
  %e = exp(%b): {dtype}[{r}, {c}]
  %d = div(%s, %e): {dtype}[{r}, {c}]
  %f = sub(%s, %d): {dtype}[{r}, {c}]
  output %f
}}
"
        ));
        let b = ipu_codegen::build(&g, &common::gc200(1472)).unwrap();
        let text = &b.report.program_text;
        assert!(
            text.contains("a.spread"),
            "expected a two-hop spread:\n{text}"
        );
        // A row layout would hold the 300 rows on at most 300 tiles.
        for op in ["a", "b", "d", "f"] {
            assert!(
                text.contains(&format!("compute {op} tiles=1472 ")),
                "expected {op} in the input's layout on every tile:\n{text}"
            );
        }
        common::run_within(&g, &[1, 7, 1472], 4, &format!("{dtype} row vectors"), 0.0);
    }
}
