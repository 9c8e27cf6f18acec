//! What `ipu run`, `ipu exec` and `ipu build` leave beside their JSON report: the build's view,
//! the trace (`trace.json`), the HTML report (`report.html`), and the run's record in the run
//! database ([`ipu_insight`]).

use std::path::{Path, PathBuf};

use anyhow::Context;
use ipu_codegen::view::BuildView;
use ipu_insight::{
    PROFILE_JSON, REPORT_HTML, RunDb, TRACE_JSON, VIEW_JSON, busiest_tile_json, record,
};
use ipu_runtime::Profile;
use serde_json::Value;

use crate::output_file::write_atomically;

/// Largest buffers of the busiest tile named in a refusal.
const REFUSAL_BUFFERS: usize = 5;

/// Where a run is recorded: `--db PATH`, or `--no-db` for nowhere.
#[derive(clap::Args, Clone, Default)]
pub struct DbArgs {
    /// The run database (default: $XDG_DATA_HOME/ipu-stack/runs.sqlite, else
    /// ~/.local/share/ipu-stack/runs.sqlite).
    #[arg(long, value_name = "PATH")]
    pub db: Option<PathBuf>,
    /// Record nothing in the run database.
    #[arg(long, conflicts_with = "db")]
    pub no_db: bool,
}

/// The database path `--db` names, or the default one.
pub fn db_path(db: Option<&Path>) -> anyhow::Result<PathBuf> {
    match db {
        Some(p) => Ok(p.to_path_buf()),
        None => ipu_insight::db::default_path().context(
            "no data directory for the run database (neither XDG_DATA_HOME nor HOME is set); pass --db PATH",
        ),
    }
}

/// Opens the run database at `path`, creating its directory.
pub fn open_db(path: &Path) -> anyhow::Result<RunDb> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    Ok(RunDb::open(path)?)
}

/// Writes the build's view into the run directory.
pub fn write_view(dir: &Path, view: Option<&BuildView>) -> anyhow::Result<()> {
    if let Some(v) = view {
        write_atomically(&dir.join(VIEW_JSON), serde_json::to_string(v)?.as_bytes())?;
    }
    Ok(())
}

/// The files a run writes beside its report, removed before it runs so that a stopped run
/// leaves none of an earlier run's.
pub const RUN_FILES: [&str; 3] = [VIEW_JSON, TRACE_JSON, REPORT_HTML];

/// After a run wrote `report.json` (`summary`) and its profile into `dir` (when it has one):
/// the trace and the HTML report, then the record in the run database. A failure to keep the
/// record is reported and does not fail the run.
pub fn after_run(
    dir: Option<&Path>,
    summary: &Value,
    view: Option<&BuildView>,
    db: &DbArgs,
    command: &str,
    options: Value,
    graph_hash: Option<String>,
) -> anyhow::Result<()> {
    let mut timeline = None;
    if let Some(dir) = dir {
        let path = dir.join(PROFILE_JSON);
        let profile = std::fs::read_to_string(&path)
            .ok()
            .and_then(|t| Profile::from_json(&t).ok());
        let r = ipu_insight::render(summary, profile.as_ref(), view)?;
        if let Some(trace) = &r.trace {
            write_atomically(&dir.join(TRACE_JSON), trace.as_bytes())?;
            println!(
                "trace={} bytes={}",
                dir.join(TRACE_JSON).display(),
                trace.len()
            );
        }
        write_atomically(&dir.join(REPORT_HTML), r.html.as_bytes())?;
        println!(
            "report_html={} bytes={}",
            dir.join(REPORT_HTML).display(),
            r.html.len()
        );
        timeline = r.timeline;
    }
    if db.no_db {
        return Ok(());
    }
    let rec = record(
        summary,
        timeline.as_ref(),
        view,
        command,
        options,
        graph_hash,
        dir,
    );
    let kept = db_path(db.db.as_deref()).and_then(|p| Ok((open_db(&p)?.insert(&rec)?, p)));
    match kept {
        Ok((id, p)) => println!("run_id={id} db={}", p.display()),
        Err(e) => {
            eprintln!("warning: the run's record was not kept: {e:#}");
            println!("run_id=none");
        }
    }
    Ok(())
}

/// A refused build: its JSON report gains the busiest tile of the closest candidate, the error
/// names that tile and its largest buffers (a planning refusal's error names them itself), and each of `html` gets the HTML report (with the
/// memory view) and each of `dirs` the report, the view and the HTML report. Returns the error
/// to stop with.
pub fn on_refusal(
    mut report: Value,
    refusal: &ipu_codegen::Refusal,
    json: &[&Path],
    html: &[PathBuf],
    dirs: &[&Path],
) -> anyhow::Result<anyhow::Error> {
    let view = refusal.view.as_deref();
    let busiest = view.and_then(|v| busiest_tile_json(v, REFUSAL_BUFFERS));
    let mut message = refusal.error.to_string();
    // A planning refusal's error already names its busiest tile and the values there.
    let named = view.is_some_and(|v| v.planning_refusal);
    if let Some(b) = busiest.as_ref().filter(|_| !named) {
        let names: Vec<String> = b["largest_buffers"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|x| {
                format!(
                    "{} ({} bytes, {}, steps {}..{})",
                    x["name"].as_str().unwrap_or("?"),
                    x["bytes"],
                    x["op"].as_str().unwrap_or("?"),
                    x["live_steps"][0],
                    x["live_steps"][1]
                )
            })
            .collect();
        message += &format!(
            "; busiest tile {} of the closest candidate: {} bytes live at step {}, largest buffers: {}",
            b["tile"],
            b["live_bytes"],
            b["peak_step"],
            names.join(", ")
        );
    }
    if let Some(b) = &busiest {
        report["busiest_tile"] = b.clone();
    }
    let text = serde_json::to_string_pretty(&report)?;
    for p in json {
        write_atomically(p, text.as_bytes())?;
    }
    let page = ipu_insight::html::render(&ipu_insight::html::ReportInput {
        summary: &report,
        timeline: None,
        view,
    });
    for p in html {
        write_atomically(p, page.as_bytes())?;
    }
    for d in dirs {
        write_atomically(&d.join(ipu_insight::REPORT_JSON), text.as_bytes())?;
        write_view(d, view)?;
        write_atomically(&d.join(REPORT_HTML), page.as_bytes())?;
        println!("report_html={}", d.join(REPORT_HTML).display());
    }
    Ok(anyhow::anyhow!(message))
}
