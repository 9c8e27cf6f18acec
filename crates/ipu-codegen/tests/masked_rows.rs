//! Fully masked softmax rows: `causal_mask` with `key_start` >= 1 masks every key of the first
//! rows. The device and the host reference both give zeros there (ONNX Attention's result
//! for a fully masked row), not NaN, whether a row is one worker's or split over several.

mod common;

use ipu_graph::parse;
use ipu_target::Target;

#[test]
fn fully_masked_rows_are_zeros_on_the_device_as_in_the_reference() {
    for (rows, keys, key_start, tiles) in [
        (8, 16, 1, 1),
        (8, 16, 3, 4),
        (5, 7, 9, 2),
        (4, 3000, 2, 1472),
    ] {
        let text = format!(
            "graph cm {{\n  input %x: f32[{rows}, {keys}]\n  %m = causal_mask(%x) {{key_start = {key_start}}}: f32[{rows}, {keys}]\n  %p = softmax(%m) {{axis = 1}}: f32[{rows}, {keys}]\n  output %p\n}}\n"
        );
        let g = parse(&text, "cm.ipug").unwrap();
        let what = format!("{rows}x{keys} key_start {key_start} on {tiles} tiles");
        let run = common::run(&g, Target::gc200(), tiles, 5);
        run.assert_exact(&what);
        let masked = key_start.min(rows);
        let device = &run.outputs[0].data;
        assert!(device.iter().all(|v| v.is_finite()), "{what}: NaN or inf");
        assert!(
            device[..masked * keys].iter().all(|&v| v == 0.0),
            "{what}: a fully masked row is not zeros"
        );
    }
}
