//! `ipu sweep MODEL --set k=a,b ... [--tiles T,..] [--target G,..] --artifacts DIR [--db PATH]
//! [--jobs N]`: the grid of every combination of the comma lists, each point an `ipu run` into
//! its own directory under DIR named after its parameters (`seq=512_heads=4`), with a progress
//! bar and the time left.
//!
//! A finished point leaves `point.json` in its directory (written last, through a temporary
//! name); a sweep started again skips every point that has one, so an interrupted sweep
//! completes only the missing points. After every point the summary under DIR is written
//! again (`summary.csv`, `summary.html`) from the finished points in grid order.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use anyhow::{Context, bail};
use ipu_insight::sweep::{POINT_JSON, SUMMARY_CSV, SUMMARY_HTML, SweepPoint};
use tracing::info;

use crate::output_file::write_atomically;

/// Most points one sweep runs: a bound against a mistyped list (each point is a build and a
/// simulation of seconds to minutes).
pub const POINTS_MAX: usize = 10_000;
/// Most parallel points.
pub const JOBS_MAX: u64 = 64;
/// Seconds a point waits for its job's device lock (only another process holding it makes it
/// wait: each job has its own simulated device).
const LOCK_TIMEOUT_SECONDS: &str = "3600";

/// Arguments of `ipu sweep`.
#[derive(clap::Args)]
pub struct SweepArgs {
    /// Built-in model name or model file.
    model: String,
    /// A parameter and its values: `--set seq=512,1024` (repeatable; the grid is the product).
    #[arg(long = "set", value_name = "KEY=A,B,...")]
    set: Vec<String>,
    /// Tile counts to sweep: `--tiles 64,256` (default: all of the target's).
    #[arg(long, value_name = "N,...")]
    tiles: Option<String>,
    /// Targets to sweep: `--target gc200,bow` (default: gc200).
    #[arg(long, value_name = "NAME,...")]
    target: Option<String>,
    /// Directory of the points and the summary.
    #[arg(long)]
    artifacts: PathBuf,
    /// The run database every point is recorded in (default: $XDG_DATA_HOME/ipu-stack/runs.sqlite,
    /// else ~/.local/share/ipu-stack/runs.sqlite).
    #[arg(long, value_name = "PATH")]
    db: Option<PathBuf>,
    /// Points run at once, each on its own simulated device.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=JOBS_MAX))]
    jobs: u64,
}

/// One swept parameter: `set` for `--set`, else `tiles` or `target`.
#[derive(Debug, Clone, PartialEq)]
pub struct Axis {
    /// The key.
    pub key: String,
    /// Its values, in order.
    pub values: Vec<String>,
}

/// A value of a point's parameter is part of a directory name: letters, digits and `.`, `_`,
/// `+`, `-`.
fn value_ok(v: &str) -> bool {
    v.chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '+' | '-'))
}

/// Parses `key=a,b,c` into an axis; an empty or malformed list is refused naming the key.
pub fn parse_axis(key: &str, list: &str) -> anyhow::Result<Axis> {
    if key.is_empty() || !value_ok(key) {
        bail!("--set `{key}={list}`: a key is letters, digits, `.`, `_`, `+` or `-`");
    }
    if list.trim().is_empty() {
        bail!("--set {key}: the list of values is empty");
    }
    let mut values = Vec::new();
    for v in list.split(',') {
        let v = v.trim();
        if v.is_empty() {
            bail!("--set {key}: an empty value in `{list}`");
        }
        if !value_ok(v) {
            bail!(
                "--set {key}: value `{v}` has a character other than letters, digits, `.`, `_`, `+`, `-`"
            );
        }
        if values.iter().any(|x| x == v) {
            bail!("--set {key}: value `{v}` is listed twice");
        }
        values.push(v.to_string());
    }
    Ok(Axis {
        key: key.to_string(),
        values,
    })
}

/// The axes of the arguments, `--set` keys in order, then tiles and target.
fn axes(a: &SweepArgs) -> anyhow::Result<Vec<Axis>> {
    let mut axes: Vec<Axis> = Vec::new();
    for s in &a.set {
        let Some((k, list)) = s.split_once('=') else {
            bail!("--set `{s}`: expected KEY=A,B,... (the key `{s}` has no values)");
        };
        let axis = parse_axis(k.trim(), list)?;
        if axes.iter().any(|x| x.key == axis.key) {
            bail!("--set {}: the key is given twice", axis.key);
        }
        axes.push(axis);
    }
    if let Some(t) = &a.tiles {
        let axis = parse_axis("tiles", t)?;
        if let Some(v) = axis.values.iter().find(|v| v.parse::<u32>().is_err()) {
            bail!("--tiles: `{v}` is not a tile count");
        }
        axes.push(axis);
    }
    if let Some(t) = &a.target {
        axes.push(parse_axis("target", t)?);
    }
    Ok(axes)
}

/// Every combination of the axes' values, the last axis varying fastest.
pub fn grid(axes: &[Axis]) -> Vec<Vec<(String, String)>> {
    let mut points: Vec<Vec<(String, String)>> = vec![Vec::new()];
    for axis in axes {
        points = points
            .into_iter()
            .flat_map(|p| {
                axis.values.iter().map(move |v| {
                    let mut q = p.clone();
                    q.push((axis.key.clone(), v.clone()));
                    q
                })
            })
            .collect();
    }
    points
}

/// A point's directory name: `k=v` joined by `_` (`default` for the empty grid).
pub fn point_dir(params: &[(String, String)]) -> String {
    if params.is_empty() {
        return "default".into();
    }
    params
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join("_")
}

/// The point recorded in `dir`, if it finished.
fn recorded(dir: &Path) -> Option<SweepPoint> {
    let text = std::fs::read_to_string(dir.join(POINT_JSON)).ok()?;
    serde_json::from_str(&text).ok()
}

/// `ipu sweep`.
pub fn sweep(a: SweepArgs) -> anyhow::Result<u8> {
    let axes = axes(&a)?;
    let points = grid(&axes);
    if points.len() > POINTS_MAX {
        bail!(
            "the grid has {} points, more than {POINTS_MAX}",
            points.len()
        );
    }
    // The model and the first point's parameters are checked before anything runs (an
    // unknown key is refused here, not once per point).
    let sets_of = |p: &[(String, String)]| -> Vec<String> {
        p.iter()
            .filter(|(k, _)| k != "tiles" && k != "target")
            .map(|(k, v)| format!("{k}={v}"))
            .collect()
    };
    crate::cmd_graph::load_model_with(&a.model, &sets_of(&points[0]), &[])?;
    // Every value of every list, each with the first point's other values: a malformed value
    // is refused naming its key before anything runs (a combination the model refuses is a
    // failed point).
    for axis in axes
        .iter()
        .filter(|x| x.key != "tiles" && x.key != "target")
    {
        for v in &axis.values {
            let mut p = points[0].clone();
            for (k, val) in p.iter_mut() {
                if *k == axis.key {
                    *val = v.clone();
                }
            }
            crate::cmd_graph::load_model_with(&a.model, &sets_of(&p), &[])
                .with_context(|| format!("--set {}: value `{v}`", axis.key))?;
        }
    }
    std::fs::create_dir_all(&a.artifacts)
        .with_context(|| format!("creating {}", a.artifacts.display()))?;
    let keys: Vec<String> = axes.iter().map(|x| x.key.clone()).collect();
    let pending: Vec<usize> = (0..points.len())
        .filter(|&i| recorded(&a.artifacts.join(point_dir(&points[i]))).is_none())
        .collect();
    let done = points.len() - pending.len();
    info!(
        points = points.len(),
        recorded = done,
        to_run = pending.len(),
        jobs = a.jobs,
        "sweep starts"
    );
    println!(
        "sweep points={} recorded={done} to_run={} artifacts={}",
        points.len(),
        pending.len(),
        a.artifacts.display()
    );
    let exe = std::env::current_exe().context("finding the ipu executable")?;
    let pb = ipu_insight::progress::bar_with_eta(points.len() as u64, done as u64, "sweep");
    let next = AtomicUsize::new(0);
    let summary = Mutex::new(());
    let failure: Mutex<Option<anyhow::Error>> = Mutex::new(None);
    let title = format!("ipu sweep {}", a.model);
    std::thread::scope(|s| {
        for job in 0..a.jobs {
            let (next, pending, points, pb, summary, failure) =
                (&next, &pending, &points, &pb, &summary, &failure);
            let (a, exe, keys, title) = (&a, &exe, &keys, &title);
            s.spawn(move || {
                loop {
                    if ipu_sim::interrupted() || failure.lock().is_ok_and(|f| f.is_some()) {
                        return;
                    }
                    let Some(&i) = pending.get(next.fetch_add(1, Ordering::SeqCst)) else {
                        return;
                    };
                    let lock = if a.jobs == 1 {
                        a.artifacts.join("device.lock")
                    } else {
                        a.artifacts.join(format!("device-{job}.lock"))
                    };
                    let r = run_point(a, exe, &points[i], &lock).and_then(|p| {
                        if let Some(p) = &p {
                            pb.suspend(|| {
                                println!(
                                    "point={} result={} cycles={} wall_ms={}",
                                    p.dir,
                                    p.result,
                                    p.cycles.map_or("-".into(), |c| c.to_string()),
                                    p.wall_ms
                                )
                            });
                            pb.inc(1);
                            let _g = summary.lock();
                            write_summary(&a.artifacts, title, keys, points)?;
                        }
                        Ok(())
                    });
                    if let Err(e) = r {
                        if let Ok(mut f) = failure.lock() {
                            f.get_or_insert(e);
                        }
                        return;
                    }
                }
            });
        }
    });
    pb.finish_and_clear();
    if let Some(e) = failure.into_inner().ok().flatten() {
        return Err(e);
    }
    if ipu_sim::interrupted() {
        bail!("interrupted");
    }
    let finished: Vec<SweepPoint> = points
        .iter()
        .filter_map(|p| recorded(&a.artifacts.join(point_dir(p))))
        .collect();
    write_summary(&a.artifacts, &title, &keys, &points)?;
    let pass = finished.iter().filter(|p| p.result == "PASS").count();
    println!(
        "sweep points={} pass={pass} fail={} summary_csv={} summary_html={}",
        finished.len(),
        finished.len() - pass,
        a.artifacts.join(SUMMARY_CSV).display(),
        a.artifacts.join(SUMMARY_HTML).display()
    );
    Ok(if pass == finished.len() { 0 } else { 1 })
}

/// Writes the summary of the finished points of the grid, in grid order.
fn write_summary(
    dir: &Path,
    title: &str,
    keys: &[String],
    points: &[Vec<(String, String)>],
) -> anyhow::Result<()> {
    let finished: Vec<SweepPoint> = points
        .iter()
        .filter_map(|p| recorded(&dir.join(point_dir(p))))
        .collect();
    write_atomically(
        &dir.join(SUMMARY_CSV),
        ipu_insight::sweep::csv(keys, &finished).as_bytes(),
    )?;
    write_atomically(
        &dir.join(SUMMARY_HTML),
        ipu_insight::sweep::html(title, keys, &finished).as_bytes(),
    )?;
    Ok(())
}

/// Runs one point as `ipu run` into its directory; none when it was interrupted (nothing
/// recorded: it runs again next time).
fn run_point(
    a: &SweepArgs,
    exe: &Path,
    params: &[(String, String)],
    lock: &Path,
) -> anyhow::Result<Option<SweepPoint>> {
    let name = point_dir(params);
    let dir = a.artifacts.join(&name);
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let mut cmd = Command::new(exe);
    cmd.arg("run").arg(&a.model);
    for (k, v) in params {
        match k.as_str() {
            "tiles" => cmd.args(["--tiles", v]),
            "target" => cmd.args(["--target", v]),
            _ => cmd.args(["--set", &format!("{k}={v}")]),
        };
    }
    cmd.arg("--artifacts").arg(&dir);
    cmd.arg("--lock").arg(lock);
    cmd.args(["--lock-timeout", LOCK_TIMEOUT_SECONDS]);
    if let Some(db) = &a.db {
        cmd.arg("--db").arg(db);
    }
    let start = Instant::now();
    let out = cmd
        .output()
        .with_context(|| format!("starting {}", exe.display()))?;
    let wall_ms = start.elapsed().as_millis() as u64;
    let stderr = String::from_utf8_lossy(&out.stderr);
    let mut log = out.stdout.clone();
    log.extend_from_slice(&out.stderr);
    write_atomically(&dir.join("run.log"), &log)?;
    let result = match out.status.code() {
        Some(0) => "PASS",
        Some(1) | Some(2) => "FAIL",
        // Interrupted (exit 130 or a signal): nothing recorded.
        _ => return Ok(None),
    };
    if ipu_sim::interrupted() && out.status.code() != Some(0) {
        return Ok(None);
    }
    let report: Option<serde_json::Value> = std::fs::read_to_string(dir.join("report.json"))
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok());
    let get = |path: &[&str]| -> Option<&serde_json::Value> {
        let mut v = report.as_ref()?;
        for p in path {
            v = v.get(p)?;
        }
        Some(v)
    };
    let u = |path: &[&str]| get(path).and_then(serde_json::Value::as_u64);
    let error = (result == "FAIL").then(|| {
        stderr
            .lines()
            .rev()
            .find(|l| l.starts_with("error"))
            .map_or_else(
                || "a check failed (see run.log)".to_string(),
                str::to_string,
            )
    });
    let point = SweepPoint {
        params: params.to_vec(),
        dir: name,
        result: result.to_string(),
        cycles: u(&["device", "cycles"]),
        on_chip_cycles: u(&["on_chip_cycles"]),
        efficiency_on_chip: get(&["efficiency_on_chip"]).and_then(serde_json::Value::as_f64),
        peak_standard_bytes: u(&["peak_tile_bytes", "standard"]),
        peak_interleaved_bytes: u(&["peak_tile_bytes", "interleaved"]),
        compile_ms: u(&["compile_ms"]),
        estimated_cycles: u(&["estimated_cycles"]),
        final_cycles: u(&["final_cycles"]),
        error,
        wall_ms,
    };
    write_atomically(
        &dir.join(POINT_JSON),
        serde_json::to_string_pretty(&point)?.as_bytes(),
    )?;
    Ok(Some(point))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grid_is_the_product_of_the_lists_last_fastest() {
        let axes = [
            parse_axis("seq", "512,1024").unwrap(),
            parse_axis("heads", "1,4,16").unwrap(),
        ];
        let points = grid(&axes);
        assert_eq!(points.len(), 6);
        assert_eq!(point_dir(&points[0]), "seq=512_heads=1");
        assert_eq!(point_dir(&points[5]), "seq=1024_heads=16");
        assert_eq!(point_dir(&grid(&[])[0]), "default");
    }

    #[test]
    fn empty_and_malformed_lists_are_refused_naming_the_key() {
        for (list, needle) in [
            ("", "--set seq: the list of values is empty"),
            ("1,,2", "--set seq: an empty value"),
            ("1,1", "--set seq: value `1` is listed twice"),
            ("a/b", "--set seq: value `a/b`"),
        ] {
            let e = parse_axis("seq", list).unwrap_err().to_string();
            assert!(e.contains(needle), "{e}");
        }
    }
}
