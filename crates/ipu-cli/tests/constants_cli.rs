//! Graph files with constants from the command line: `.npy` files beside the text are read by
//! `ipu graph check`, `ipu graph print` and `ipu reference`, and written by `ipu graph print -o`.

mod common;

use common::{ipu_quiet as ipu, stderr, stdout, succeeded};

use std::path::{Path, PathBuf};

use npyz::WriterBuilder as _;

fn temp_dir(name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn write_npy_f32(path: &Path, shape: &[u64], data: &[f32]) {
    let mut w = npyz::WriteOptions::new()
        .default_dtype()
        .shape(shape)
        .writer(std::fs::File::create(path).unwrap())
        .begin_nd()
        .unwrap();
    w.extend(data.iter().copied()).unwrap();
    w.finish().unwrap();
}

const LINEAR: &str = "graph linear {
  input %x: f32[2, 4]
  const %w: f32[4, 24] = file(\"w.npy\")
  const %b: f32[1, 24] = file(\"b.npy\")
  %xw = matmul(%x, %w) {partials = f32}: f32[2, 24]
  %y = add(%xw, %b): f32[2, 24]
  output %y
}
";

fn linear_dir(name: &str) -> PathBuf {
    let dir = temp_dir(name);
    std::fs::write(dir.join("linear.ipug"), LINEAR).unwrap();
    let w: Vec<f32> = (0..96).map(|i| i as f32 * 0.125).collect();
    write_npy_f32(&dir.join("w.npy"), &[4, 24], &w);
    write_npy_f32(&dir.join("b.npy"), &[1, 24], &[1.0; 24]);
    dir
}

#[test]
fn constant_files_are_read_beside_the_text() {
    let dir = linear_dir("constants-read");
    let file = dir.join("linear.ipug");
    let file = file.to_str().unwrap();
    let (out, _) = succeeded(&ipu(&["graph", "check", file]));
    assert_eq!(
        out,
        "graph=linear operations=2 values=5 inputs=1 outputs=1 result=ok\n"
    );
    let o = ipu(&["reference", file, "--precision", "exact"]);
    succeeded(&o);
    assert!(stdout(&o).contains("output=y precision=exact dtype=f32 shape=[2,24]"));
    // Printed with -o, the text and its files read back the same.
    let out = dir.join("out");
    std::fs::create_dir_all(&out).unwrap();
    let printed = out.join("again.ipug");
    let o = ipu(&["graph", "print", file, "-o", printed.to_str().unwrap()]);
    succeeded(&o);
    assert_eq!(std::fs::read_to_string(&printed).unwrap(), LINEAR);
    assert_eq!(
        std::fs::read(out.join("w.npy")).unwrap(),
        std::fs::read(dir.join("w.npy")).unwrap()
    );
    let o = ipu(&["graph", "print", printed.to_str().unwrap()]);
    assert_eq!(stdout(&o), LINEAR);
}

#[test]
fn a_missing_or_mistyped_constant_file_is_refused() {
    let dir = linear_dir("constants-bad");
    let file = dir.join("linear.ipug");
    let file = file.to_str().unwrap();
    write_npy_f32(&dir.join("b.npy"), &[24], &[1.0; 24]);
    let o = ipu(&["graph", "check", file]);
    assert_eq!(o.status.code(), Some(2));
    let e = stderr(&o);
    assert!(
        e.contains("linear.ipug:4:31: %b = file(\"b.npy\"):")
            && e.contains("b.npy holds <f4 (24,), the constant f32[1, 24] needs <f4 (1, 24)"),
        "{e}"
    );
    std::fs::remove_file(dir.join("w.npy")).unwrap();
    let o = ipu(&["graph", "check", file]);
    assert_eq!(o.status.code(), Some(2));
    let e = stderr(&o);
    assert!(
        e.contains("%w = file(\"w.npy\"): reading") && e.contains("w.npy"),
        "{e}"
    );
}
