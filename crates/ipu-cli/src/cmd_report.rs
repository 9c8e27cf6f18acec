//! `ipu report RUN_DIR [-o FILE.html]`: the HTML report (and the trace) of a run directory,
//! drawn again from its files.

use std::path::PathBuf;

use ipu_insight::{REPORT_HTML, TRACE_JSON};

use crate::output_file::write_atomically;

/// Arguments of `ipu report`.
#[derive(clap::Args)]
pub struct ReportArgs {
    /// A run directory (`ipu run --artifacts DIR`).
    run_dir: PathBuf,
    /// Where to write the report (default: RUN_DIR/report.html, with RUN_DIR/trace.json).
    #[arg(short = 'o', long, value_name = "FILE.html")]
    output: Option<PathBuf>,
}

/// `ipu report`.
pub fn report(a: ReportArgs) -> anyhow::Result<u8> {
    let run = ipu_insight::read_run_dir(&a.run_dir)?;
    let r = ipu_insight::render(&run.summary, run.profile.as_ref(), run.view.as_ref())?;
    let out = a
        .output
        .clone()
        .unwrap_or_else(|| a.run_dir.join(REPORT_HTML));
    write_atomically(&out, r.html.as_bytes())?;
    println!("report_html={} bytes={}", out.display(), r.html.len());
    if let (None, Some(trace)) = (&a.output, &r.trace) {
        let p = a.run_dir.join(TRACE_JSON);
        write_atomically(&p, trace.as_bytes())?;
        println!("trace={} bytes={}", p.display(), trace.len());
    }
    Ok(0)
}
