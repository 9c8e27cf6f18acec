//! What a run shows a user, beyond its summary lines: the trace (`trace.json`, Chrome
//! trace-event format for Perfetto), the self-contained HTML report (`report.html`), the
//! database that keeps every run (`runs.sqlite`), and progress bars on a terminal.
//!
//! Everything here is drawn from the run's own files (`report.json`, the profile, the build's
//! view), so the same run gives the same trace and report; only the database's record carries
//! the time of day.

pub mod db;
mod error;
pub mod html;
pub mod incumbent;
pub mod progress;
pub mod sweep;
pub mod timeline;
pub mod trace;

use std::path::Path;

use ipu_codegen::view::BuildView;
use ipu_runtime::Profile;
use serde_json::Value;

pub use db::{RunDb, RunRecord};
pub use error::InsightError;
pub use incumbent::{IncumbentKey, IncumbentRecord, Lookup, Measurement};
pub use timeline::{Timeline, timeline};

/// The run's JSON report in a run directory.
pub const REPORT_JSON: &str = "report.json";
/// The profile in a run directory.
pub const PROFILE_JSON: &str = "execution.profile.json";
/// The build's view (steps, memory, finalists) in a run directory.
pub const VIEW_JSON: &str = "build.view.json";
/// The trace in a run directory.
pub const TRACE_JSON: &str = "trace.json";
/// The HTML report in a run directory.
pub const REPORT_HTML: &str = "report.html";

/// What `ipu report` reads from a run directory.
pub struct RunDir {
    /// `report.json`.
    pub summary: Value,
    /// The profile (none for a refused build).
    pub profile: Option<Profile>,
    /// The build's view (none for `ipu exec`, or a refused plan).
    pub view: Option<BuildView>,
}

fn read_json<T: serde::de::DeserializeOwned>(path: &Path) -> Result<Option<T>, InsightError> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => {
            return Err(InsightError::File {
                path: path.into(),
                message: e.to_string(),
            });
        }
    };
    serde_json::from_str(&text)
        .map(Some)
        .map_err(|e| InsightError::File {
            path: path.into(),
            message: format!("not a file this ipu wrote: {e}"),
        })
}

/// Reads a run directory: its report and the build's view, and the profile, which must be
/// there unless the report is a refused build's.
pub fn read_run_dir(dir: &Path) -> Result<RunDir, InsightError> {
    if !dir.is_dir() {
        return Err(InsightError::File {
            path: dir.into(),
            message: "not a directory".into(),
        });
    }
    let summary: Value = read_json(&dir.join(REPORT_JSON))?.ok_or_else(|| InsightError::File {
        path: dir.join(REPORT_JSON),
        message: "missing: not a run directory (`ipu run --artifacts DIR` writes one)".into(),
    })?;
    let refused = summary.get("error").is_some();
    let profile: Option<Profile> = read_json(&dir.join(PROFILE_JSON))?;
    if profile.is_none() && !refused {
        return Err(InsightError::File {
            path: dir.join(PROFILE_JSON),
            message: "missing: the run directory has no profile, so there is nothing to report (the run was stopped, or its directory is incomplete)".into(),
        });
    }
    let view: Option<BuildView> = read_json(&dir.join(VIEW_JSON))?;
    Ok(RunDir {
        summary,
        profile,
        view,
    })
}

/// The trace and the report of a run, as bytes.
pub struct Rendered {
    /// `trace.json` (none without a profile).
    pub trace: Option<String>,
    /// `report.html`.
    pub html: String,
    /// The timeline the two were drawn from.
    pub timeline: Option<Timeline>,
}

/// Draws the trace and the report of a run.
pub fn render(
    summary: &Value,
    profile: Option<&Profile>,
    view: Option<&BuildView>,
) -> Result<Rendered, InsightError> {
    let timeline = profile.map(|p| timeline::timeline(p, view)).transpose()?;
    let title = format!(
        "{} on {}",
        summary["model"].as_str().unwrap_or("?"),
        summary["target"].as_str().unwrap_or("?")
    );
    let trace = timeline
        .as_ref()
        .map(|t| serde_json::to_string(&trace::trace(t, &title)).unwrap_or_default());
    let html = html::render(&html::ReportInput {
        summary,
        timeline: timeline.as_ref(),
        view,
    });
    Ok(Rendered {
        trace,
        html,
        timeline,
    })
}

/// The busiest tile of a view (most standard plus interleaved bytes; the lower tile on ties),
/// as the report's `busiest_tile` object: its peak and its largest buffers.
pub fn busiest_tile_json(view: &BuildView, buffers_max: usize) -> Option<Value> {
    let t = ipu_codegen::view::busiest_tile(view)?;
    let name = |i: u32| view.names.get(i as usize).cloned().unwrap_or_default();
    let live: u64 = t.buffers.iter().map(|b| b.bytes as u64).sum();
    Some(serde_json::json!({
        "tile": t.tile,
        "standard_bytes": t.standard_bytes,
        "interleaved_bytes": t.interleaved_bytes,
        "support_bytes": t.support_bytes,
        "peak_step": t.peak_step,
        "live_bytes": live,
        "largest_buffers": t.buffers.iter().take(buffers_max).map(|b| serde_json::json!({
            "name": name(b.name),
            "op": name(b.op),
            "bytes": b.bytes,
            "region": if b.interleaved { "interleaved" } else { "standard" },
            "live_steps": [b.first, b.last],
            "estimate": b.estimate,
        })).collect::<Vec<_>>(),
        "planning_refusal": view.planning_refusal,
    }))
}

/// A record of a run for the database, from its report, timeline and view; `options` and the
/// rest are what the command knows.
pub fn record(
    summary: &Value,
    timeline: Option<&Timeline>,
    view: Option<&BuildView>,
    command: &str,
    options: Value,
    graph_hash: Option<String>,
    artifacts: Option<&Path>,
) -> RunRecord {
    let u = |k: &str| summary[k].as_u64();
    let checks: Vec<db::CheckRecord> = summary["checks"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| db::CheckRecord {
            name: c["name"].as_str().unwrap_or("").to_string(),
            count: c["count"].as_u64().unwrap_or(0),
            max_abs_error: c["max_abs_error"].as_f64().unwrap_or(f64::NAN),
            rms_error: c["rms_error"].as_f64().unwrap_or(f64::NAN),
            min_cosine: c["min_cosine"].as_f64().unwrap_or(f64::NAN),
            pass: c["pass"].as_bool().unwrap_or(false),
        })
        .collect();
    let pass = (!checks.is_empty()).then(|| checks.iter().all(|c| c.pass));
    let mut memory = Vec::new();
    if let Some(v) = view {
        let most = |f: &dyn Fn(&ipu_codegen::view::TileMemory) -> u32| {
            v.tiles.iter().map(f).max().unwrap_or(0) as u64
        };
        memory.push(("standard".to_string(), most(&|t| t.standard_bytes)));
        memory.push(("interleaved".to_string(), most(&|t| t.interleaved_bytes)));
    } else if let Some(p) = summary.get("peak_tile_bytes") {
        for region in ["standard", "interleaved"] {
            if let Some(b) = p[region].as_u64() {
                memory.push((region.to_string(), b));
            }
        }
    }
    RunRecord {
        id: None,
        recorded_at: utc_now(),
        command: command.to_string(),
        model: summary["model"].as_str().unwrap_or("?").to_string(),
        graph_hash,
        options,
        compiler_version: ipu_codegen::COMPILER_VERSION.to_string(),
        target: summary["target"].as_str().unwrap_or("?").to_string(),
        tiles: u("tiles_used")
            .or_else(|| view.map(|v| v.tiles_used as u64))
            .or_else(|| timeline.map(|t| t.tiles.len() as u64))
            .unwrap_or(0) as u32,
        cycles: summary["device"]["cycles"].as_u64(),
        estimated_cycles: u("estimated_cycles"),
        compile_ms: u("compile_ms"),
        pass,
        artifacts: artifacts.map(|a| a.display().to_string()),
        steps: timeline
            .map(|t| {
                t.steps
                    .iter()
                    .map(|s| db::StepRecord {
                        kind: s.kind.clone(),
                        name: s.name.clone(),
                        cycles: s.cycles,
                        compute_cycles: s.compute_cycles,
                        sync_cycles: s.sync_cycles,
                        exchange_cycles: s.exchange_cycles,
                        estimated_cycles: s.estimated_cycles,
                    })
                    .collect()
            })
            .unwrap_or_default(),
        checks,
        memory,
    }
}

/// FNV-1a (64 bits) of `text` in hexadecimal: a stable name of a graph's text form.
pub fn text_hash(text: &str) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in text.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("{h:016x}")
}

/// The time of day now, UTC, as RFC 3339 to the second.
pub fn utc_now() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    utc_of(secs)
}

/// Seconds since 1970 as RFC 3339 UTC (the civil calendar from days, Howard Hinnant's
/// algorithm).
pub fn utc_of(secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utc_of_known_instants() {
        assert_eq!(utc_of(0), "1970-01-01T00:00:00Z");
        assert_eq!(utc_of(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(utc_of(1_767_225_599), "2025-12-31T23:59:59Z");
    }

    #[test]
    fn text_hash_is_fnv1a() {
        assert_eq!(text_hash(""), "cbf29ce484222325");
        assert_eq!(text_hash("a"), "af63dc4c8601ec8c");
    }
}
