//! Tensors in NumPy's formats and repeated calls through the real binary: `--input`,
//! `--inputs`, `--outputs`, `--raw-fp8` and `--iterations` of `ipu run` and `ipu exec`.

mod common;

use common::{ipu, read_json, scratch_in, succeeded, text};

use std::path::{Path, PathBuf};
use std::process::Output;

use ipu_graph::DType;
use ipu_numerics::{Fp8Format, Overflow};
use npyz::WriterBuilder;

fn scratch(name: &str) -> PathBuf {
    scratch_in("npy-cli", name)
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// The small matmul every test runs: c[9, 5] = a[9, 21] b[21, 5] in f16, on 4 tiles.
const MATMUL: [&str; 9] = [
    "matmul", "--set", "m=9", "--set", "k=21", "--set", "n=5", "--tiles", "4",
];

/// `ipu run` of the small matmul with its own lock and artifacts under `d`, then `extra`.
fn run_matmul(d: &Path, extra: &[&str]) -> Output {
    let (lock, art) = (d.join("device.lock"), d.join("artifacts"));
    let mut args = vec!["run"];
    args.extend(&MATMUL[..]);
    args.extend(["--lock", s(&lock), "--artifacts", s(&art)]);
    args.extend(extra);
    ipu(&args)
}

/// `ipu run` of the small matmul as [`run_matmul`] for `iterations` iterations, which must
/// succeed: its standard output and error.
fn iterate(d: &Path, iterations: u32, extra: &[&str]) -> (String, String) {
    let iterations = iterations.to_string();
    let mut args = vec!["--iterations", &iterations];
    args.extend(extra);
    succeeded(&run_matmul(d, &args))
}

/// `ipu exec` of `package` with the lock `lock`, then `extra`.
fn exec(package: &Path, lock: &Path, extra: &[&str]) -> Output {
    let mut args = vec!["exec", s(package), "--lock", s(lock)];
    args.extend(extra);
    ipu(&args)
}

/// The bytes of the output `c` written into `dir`.
fn c_bytes(dir: &Path) -> Vec<u8> {
    std::fs::read(dir.join("c.npy")).unwrap()
}

/// The inputs `ipu run` generates for the small matmul from `seed` (iteration 0).
fn matmul_inputs(seed: u64) -> Vec<ipu_reference::Tensor> {
    let params: Vec<(String, String)> = [("m", "9"), ("k", "21"), ("n", "5")]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let graph = ipu_graph::models::build("matmul", &params).unwrap();
    ipu_reference::make_inputs(&graph, seed)
}

fn npy<T: npyz::Serialize>(
    dtype: &str,
    shape: &[usize],
    items: impl IntoIterator<Item = T>,
) -> Vec<u8> {
    let shape: Vec<u64> = shape.iter().map(|&d| d as u64).collect();
    let mut bytes = Vec::new();
    let mut w = npyz::WriteOptions::new()
        .dtype(npyz::DType::Plain(dtype.parse().unwrap()))
        .shape(&shape)
        .writer(&mut bytes)
        .begin_nd()
        .unwrap();
    w.extend(items).unwrap();
    w.finish().unwrap();
    bytes
}

/// An f16 tensor as a `<f2` file.
fn f16_npy(t: &ipu_reference::Tensor) -> Vec<u8> {
    npy(
        "<f2",
        &t.shape,
        t.data.iter().map(|&x| half::f16::from_f32(x)),
    )
}

/// An `.npz` archive of stored (uncompressed) entries, as `numpy.savez` writes.
fn npz(entries: &[(&str, Vec<u8>)]) -> Vec<u8> {
    let mut zip = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    let options =
        zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Stored);
    for (name, bytes) in entries {
        zip.start_file(format!("{name}.npy"), options).unwrap();
        std::io::Write::write_all(&mut zip, bytes).unwrap();
    }
    zip.finish().unwrap().into_inner()
}

/// Reads an `.npy` file: its dtype text, shape and raw header-free reader.
fn read_npy(path: &Path) -> npyz::NpyFile<std::io::Cursor<Vec<u8>>> {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    npyz::NpyFile::new(std::io::Cursor::new(bytes)).unwrap()
}

fn files_in(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = match std::fs::read_dir(dir) {
        Ok(rd) => rd
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect(),
        Err(_) => Vec::new(),
    };
    names.sort();
    names
}

#[test]
fn input_files_holding_the_generated_inputs_give_the_same_outputs() {
    let d = scratch("same");
    let generated = d.join("generated");
    let (_, err) = succeeded(&run_matmul(&d, &["--outputs", s(&generated)]));
    assert!(
        err.contains("inputs generated from the seed inputs=a, b"),
        "{err}"
    );
    assert_eq!(files_in(&generated), ["c.npy"]);
    let c = read_npy(&generated.join("c.npy"));
    assert_eq!(c.dtype().descr(), "'<f2'");
    assert_eq!(c.shape(), [9, 5]);

    // The same inputs from files: `a` as .npy, `b` from an .npz archive.
    let inputs = matmul_inputs(0);
    let (a, b) = (d.join("a.npy"), d.join("inputs.npz"));
    std::fs::write(&a, f16_npy(&inputs[0])).unwrap();
    std::fs::write(&b, npz(&[("b", f16_npy(&inputs[1]))])).unwrap();
    let from_files = d.join("from-files");
    let a_arg = format!("a={}", a.display());
    let from_a_and_b = |outputs: &Path| {
        let (out, err) = succeeded(&run_matmul(
            &d,
            &[
                "--input",
                &a_arg,
                "--inputs",
                s(&b),
                "--outputs",
                s(outputs),
            ],
        ));
        assert!(out.contains("numericalTest=PASS"), "{out}");
        err
    };
    let err = from_a_and_b(&from_files);
    assert!(err.contains("input read from file input=a"), "{err}");
    assert!(err.contains("input read from file input=b"), "{err}");
    assert!(!err.contains("inputs generated"), "{err}");
    let same = c_bytes(&generated);
    assert_eq!(c_bytes(&from_files), same);

    // Other inputs in the files change the outputs, and the reference follows them: the check
    // still passes.
    let other = matmul_inputs(7);
    std::fs::write(&a, f16_npy(&other[0])).unwrap();
    let changed = d.join("changed");
    from_a_and_b(&changed);
    assert_ne!(c_bytes(&changed), same);

    // `ipu exec` of the package `run` wrote, on the first inputs: the same outputs again.
    std::fs::write(&a, f16_npy(&inputs[0])).unwrap();
    let package = d.join("artifacts").join("model.ipuexe");
    let exec_out = d.join("exec");
    let lock = d.join("device.lock");
    succeeded(&exec(
        &package,
        &lock,
        &[
            "--input",
            &a_arg,
            "--inputs",
            s(&b),
            "--outputs",
            s(&exec_out),
        ],
    ));
    assert_eq!(c_bytes(&exec_out), same);
}

#[test]
fn bad_input_files_exit_2_naming_the_input_and_leave_nothing_behind() {
    let d = scratch("bad");
    let inputs = matmul_inputs(0);
    let good = f16_npy(&inputs[0]);
    let write = |name: &str, bytes: &[u8]| {
        let p = d.join(name);
        std::fs::write(&p, bytes).unwrap();
        format!("a={}", p.display())
    };
    let wrong_shape = write(
        "shape.npy",
        &npy("<f2", &[21, 9], vec![half::f16::ZERO; 189]),
    );
    let wrong_dtype = write("dtype.npy", &npy("<f4", &[9, 21], vec![0f32; 189]));
    let truncated = write("truncated.npy", &good[..good.len() - 10]);
    let garbage = write("garbage.npy", b"these bytes are no array");
    let unknown = format!("q={}", d.join("shape.npy").display());
    let cases: [(&[&str], &[&str]); 6] = [
        (
            &["--input", &wrong_shape],
            &[
                "input \"a\"",
                "shape.npy",
                "'<f2' of shape (9, 21)",
                "(21, 9)",
            ],
        ),
        (
            &["--input", &wrong_dtype],
            &[
                "input \"a\"",
                "dtype.npy",
                "'<f2' of shape (9, 21)",
                "'<f4'",
            ],
        ),
        (
            &["--input", &truncated],
            &["input \"a\"", "truncated.npy", "truncated", "368 follow"],
        ),
        (
            &["--input", &garbage],
            &["input \"a\"", "garbage.npy", "not a readable .npy"],
        ),
        (
            &["--input", &unknown],
            &["no input \"q\"", "its inputs: a, b"],
        ),
        (
            &["--input", &truncated, "--input", &wrong_dtype],
            &["input \"a\" is given twice"],
        ),
    ];
    for (i, (args, needles)) in cases.iter().enumerate() {
        let case = d.join(format!("case{i}"));
        let outputs = case.join("outputs");
        let mut all = args.to_vec();
        all.extend(["--outputs", s(&outputs)]);
        let o = run_matmul(&case, &all);
        let (out, err) = text(&o);
        assert_eq!(o.status.code(), Some(2), "case {i}: {out}\n{err}");
        for n in *needles {
            assert!(err.contains(n), "case {i}: stderr lacks {n:?}:\n{err}");
        }
        assert_eq!(
            err.lines().filter(|l| l.starts_with("error:")).count(),
            1,
            "{err}"
        );
        assert!(!err.contains("panicked"), "{err}");
        // Refused before compiling: no package, no profile, no outputs.
        assert!(!outputs.exists(), "case {i}: {:?}", files_in(&outputs));
        assert_eq!(
            files_in(&case.join("artifacts")),
            Vec::<String>::new(),
            "case {i}"
        );
        assert!(!err.contains("invoking host exchange call"), "{err}");
    }

    // `ipu exec` refuses the same way before the device runs.
    let package = d.join("m.ipuexe");
    let mut build = vec!["build"];
    build.extend(&MATMUL[..]);
    build.extend(["-o", s(&package)]);
    assert_eq!(ipu(&build).status.code(), Some(0));
    let lock = d.join("device.lock");
    let outputs = d.join("exec-outputs");
    let o = exec(
        &package,
        &lock,
        &["--input", &wrong_shape, "--outputs", s(&outputs)],
    );
    let (_, err) = text(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("input \"a\"") && err.contains("(21, 9)"),
        "{err}"
    );
    assert!(!err.contains("opening IPU device"), "{err}");
    assert!(!outputs.exists());
}

#[test]
fn iterations_call_initialize_once_and_run_each_time() {
    let d = scratch("iterations");
    let report = d.join("report.json");
    let last = d.join("last");
    let (out, err) = iterate(&d, 3, &["--report", s(&report), "--outputs", s(&last)]);
    assert_eq!(err.matches("call=\"initialize\"").count(), 1, "{err}");
    assert_eq!(err.matches("call=\"run\"").count(), 3, "{err}");
    // Every iteration is checked: three times the 45 elements of c.
    assert!(out.contains("numericalChecks=135 "), "{out}");
    assert_eq!(out.matches("result=PASS").count(), 3 + 1, "{out}");
    let j = read_json(&report);
    assert_eq!(j["iterations"], 3);
    let per = j["per_iteration"].as_array().unwrap();
    assert_eq!(per.len(), 3);
    for (i, it) in per.iter().enumerate() {
        let n = |k: &str| it[k].as_u64().unwrap_or_else(|| panic!("{k} in {it}"));
        assert_eq!(n("iteration"), i as u64);
        assert!(
            n("host_to_device_cycles") > 0 && n("device_to_host_cycles") > 0,
            "{it}"
        );
        assert_eq!(
            n("host_exchange_cycles"),
            n("host_to_device_cycles") + n("device_to_host_cycles")
        );
        assert_eq!(n("on_chip_cycles") + n("host_exchange_cycles"), n("cycles"));
        assert_eq!(it["pass"], true);
    }
    // The report's existing figures are the first iteration's.
    assert_eq!(j["device"]["cycles"], per[0]["cycles"]);
    assert_eq!(j["host_exchange_cycles"], per[0]["host_exchange_cycles"]);
    assert_eq!(j["checks"][0]["count"], 135);

    // Generated inputs are fresh in every iteration: the last outputs are not the first's.
    let first = d.join("first");
    succeeded(&run_matmul(&d, &["--outputs", s(&first)]));
    let c_first = c_bytes(&first);
    assert_ne!(c_bytes(&last), c_first);

    // Inputs from files are the same in every iteration.
    let inputs = matmul_inputs(0);
    let archive = d.join("inputs.npz");
    std::fs::write(
        &archive,
        npz(&[("a", f16_npy(&inputs[0])), ("b", f16_npy(&inputs[1]))]),
    )
    .unwrap();
    let files = d.join("files");
    let (_, err) = iterate(&d, 2, &["--inputs", s(&archive), "--outputs", s(&files)]);
    assert_eq!(err.matches("call=\"run\"").count(), 2, "{err}");
    assert_eq!(c_bytes(&files), c_first);

    // `ipu exec` repeats the same way and reports every iteration.
    let package = d.join("artifacts").join("model.ipuexe");
    let (lock, exec_report) = (d.join("device.lock"), d.join("exec.json"));
    let (out, err) = succeeded(&exec(
        &package,
        &lock,
        &["--iterations", "2", "--report", s(&exec_report)],
    ));
    assert_eq!(err.matches("call=\"initialize\"").count(), 1, "{err}");
    assert_eq!(err.matches("call=\"run\"").count(), 2, "{err}");
    assert!(out.contains("iteration=1 cycles="), "{out}");
    let j = read_json(&exec_report);
    assert_eq!(j["iterations"], 2);
    assert_eq!(j["per_iteration"][1]["cycles"], per[1]["cycles"]);
}

#[test]
fn fp8_inputs_are_encoded_and_fp8_outputs_written_as_float32() {
    let d = scratch("fp8");
    let model = d.join("fp8io.ipug");
    std::fs::write(
        &model,
        "graph fp8io {\n  input %x: f143@-4[8, 16]\n  %h = cast(%x) {to = f16}: f16[8, 16]\n  \
         %y = cast(%h) {to = f152@-2}: f152@-2[8, 16]\n  output %h\n  output %y\n}\n",
    )
    .unwrap();
    // Values that F143 at scale -4 must round, one beyond its range (15), and a tie.
    let mut x: Vec<f32> = (0..128).map(|i| (i as f32 - 64.0) * 0.0137).collect();
    x[0] = -100.0;
    x[1] = 1.0625 / 16.0;
    let codes: Vec<u8> = x
        .iter()
        .map(|&v| ipu_numerics::encode(Fp8Format::F143, v, -4, Overflow::Saturate))
        .collect();
    let quantised: Vec<f32> = codes
        .iter()
        .map(|&c| ipu_numerics::decode(Fp8Format::F143, c, -4))
        .collect();
    assert_eq!((quantised[0], quantised[1]), (-15.0, 1.0 / 16.0));
    let values = d.join("x.npy");
    std::fs::write(&values, npy("<f4", &[8, 16], x.iter().copied())).unwrap();
    let raw = d.join("x-codes.npy");
    std::fs::write(&raw, npy("|u1", &[8, 16], codes.iter().copied())).unwrap();
    let lock = d.join("device.lock");
    let run = |input: &Path, out: &Path, extra: &[&str]| {
        let arg = format!("x={}", input.display());
        let mut args = vec![
            "run",
            s(&model),
            "--tiles",
            "4",
            "--lock",
            s(&lock),
            "--artifacts",
            s(&d),
            "--input",
            &arg,
            "--outputs",
            s(out),
        ];
        args.extend(extra);
        let (stdout, _) = succeeded(&ipu(&args));
        assert!(stdout.contains("numericalTest=PASS"), "{stdout}");
    };
    let from_values = d.join("from-values");
    run(&values, &from_values, &[]);
    // h is the input decoded to f16: the f32 values were encoded at the input's scale.
    let h = read_npy(&from_values.join("h.npy"));
    assert_eq!(h.dtype().descr(), "'<f2'");
    let h: Vec<f32> = h
        .into_vec::<half::f16>()
        .unwrap()
        .into_iter()
        .map(f32::from)
        .collect();
    assert_eq!(h, quantised);
    // y, F152 at scale -2, is written as float32 values decoded with its scale.
    let y = read_npy(&from_values.join("y.npy"));
    assert_eq!(y.dtype().descr(), "'<f4'");
    assert_eq!(y.shape(), [8, 16]);
    let y = y.into_vec::<f32>().unwrap();
    let dtype = DType::F152 { scale: -2 };
    let expected: Vec<f32> = h
        .iter()
        .map(|&v| ipu_reference::round_to_dtype(dtype, v))
        .collect();
    assert_eq!(y, expected);

    // The raw codes as input give the same outputs; --raw-fp8 writes y's codes.
    let from_codes = d.join("from-codes");
    run(&raw, &from_codes, &["--raw-fp8"]);
    assert_eq!(
        std::fs::read(from_codes.join("h.npy")).unwrap(),
        std::fs::read(from_values.join("h.npy")).unwrap()
    );
    let y_codes = read_npy(&from_codes.join("y.npy"));
    assert_eq!(y_codes.dtype().descr(), "'|u1'");
    let y_codes = y_codes.into_vec::<u8>().unwrap();
    let decoded: Vec<f32> = y_codes
        .iter()
        .map(|&c| ipu_numerics::decode(Fp8Format::F152, c, -2))
        .collect();
    assert_eq!(decoded, y);
}
