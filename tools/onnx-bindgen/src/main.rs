//! `onnx-bindgen PROTO OUT_FILE ONNX_VERSION`: compiles `PROTO` (the `onnx.proto` of the onnx
//! Python package) with `protox`, generates Rust with `prost-build` and writes it to
//! `OUT_FILE` under a header that names the source and the command that regenerates it.

use std::path::{Path, PathBuf};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [proto, out_file, onnx_version] = &args[..] else {
        return Err("usage: onnx-bindgen PROTO OUT_FILE ONNX_VERSION".into());
    };
    let proto = PathBuf::from(proto);
    let include = proto.parent().unwrap_or(Path::new("."));
    let file_name = proto.file_name().ok_or("PROTO has no file name")?;
    let descriptors = protox::compile([Path::new(file_name)], [include])?;

    let out_dir = std::env::temp_dir().join(format!("onnx-bindgen-{}", std::process::id()));
    std::fs::create_dir_all(&out_dir)?;
    prost_build::Config::new()
        .out_dir(&out_dir)
        .compile_fds(descriptors)?;
    let generated = std::fs::read_to_string(out_dir.join("onnx.rs"))?;
    std::fs::remove_dir_all(&out_dir)?;

    let header = format!(
        "// Generated from onnx/onnx.proto of the onnx Python package {onnx_version} by\n\
         // tools/onnx-bindgen (prost-build, protox). Do not edit: regenerate with\n\
         // `bash scripts/gen-onnx-bindings.sh`.\n\n"
    );
    std::fs::write(out_file, header + &generated)?;
    Ok(())
}
