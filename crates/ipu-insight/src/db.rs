//! Every run kept: a SQLite database (one file) of the runs' records, with listing, showing and
//! comparing.
//!
//! Concurrent runs share the file safely: WAL journal mode (readers never block the writer),
//! a busy timeout of [`BUSY_TIMEOUT`] for writers waiting on each other, and each record
//! written in one immediate transaction. The schema's version is SQLite's `user_version`;
//! [`MIGRATIONS`] take a database from any earlier version to [`SCHEMA_VERSION`], and a
//! database from a newer version is refused rather than guessed at.

use std::fmt::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use rusqlite::{Connection, OpenFlags, OptionalExtension, params};
use serde_json::Value;

use crate::error::InsightError;

/// How long a writer waits for another before the database counts as locked: long enough
/// for any other run's single small transaction, short enough to report a stuck lock.
pub const BUSY_TIMEOUT: Duration = Duration::from_secs(10);

/// The schema, one step per version: `MIGRATIONS[i]` takes version `i` to `i + 1`.
pub const MIGRATIONS: &[&str] = &[
    // 1: runs, their steps and checks.
    "CREATE TABLE runs (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        recorded_at TEXT NOT NULL,
        command TEXT NOT NULL,
        model TEXT NOT NULL,
        graph_hash TEXT,
        options TEXT NOT NULL,
        compiler_version TEXT NOT NULL,
        target TEXT NOT NULL,
        tiles INTEGER NOT NULL,
        cycles INTEGER,
        estimated_cycles INTEGER,
        compile_ms INTEGER,
        pass INTEGER,
        artifacts TEXT
    );
    CREATE TABLE steps (
        run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
        idx INTEGER NOT NULL,
        kind TEXT NOT NULL,
        name TEXT NOT NULL,
        cycles INTEGER NOT NULL,
        compute_cycles INTEGER NOT NULL,
        sync_cycles INTEGER NOT NULL,
        exchange_cycles INTEGER NOT NULL,
        estimated_cycles INTEGER,
        PRIMARY KEY (run_id, idx)
    );
    CREATE TABLE checks (
        run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
        name TEXT NOT NULL,
        count INTEGER NOT NULL,
        max_abs_error REAL NOT NULL,
        rms_error REAL NOT NULL,
        min_cosine REAL NOT NULL,
        pass INTEGER NOT NULL,
        PRIMARY KEY (run_id, name)
    );",
    // 2: peak memory per region of the busiest tile.
    "CREATE TABLE memory (
        run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
        region TEXT NOT NULL,
        peak_bytes INTEGER NOT NULL,
        PRIMARY KEY (run_id, region)
    );",
    // 3: search incumbents (the plan a build resumes from) and the tuner's measurements.
    "CREATE TABLE incumbents (
        graph_hash TEXT NOT NULL,
        target TEXT NOT NULL,
        tiles INTEGER NOT NULL,
        compiler_version TEXT NOT NULL,
        options TEXT NOT NULL,
        model TEXT NOT NULL,
        choices TEXT NOT NULL,
        measured_cycles INTEGER NOT NULL,
        planner_cycles INTEGER NOT NULL,
        recorded_at TEXT NOT NULL,
        PRIMARY KEY (graph_hash, target, tiles, compiler_version, options)
    );
    CREATE TABLE tune_measurements (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        recorded_at TEXT NOT NULL,
        model TEXT NOT NULL,
        graph_hash TEXT NOT NULL,
        target TEXT NOT NULL,
        tiles INTEGER NOT NULL,
        compiler_version TEXT NOT NULL,
        options TEXT NOT NULL,
        choices TEXT NOT NULL,
        estimated_cycles INTEGER,
        final_cycles INTEGER,
        measured_cycles INTEGER,
        pass INTEGER
    );",
];

/// The schema version this build writes and reads.
pub const SCHEMA_VERSION: u32 = MIGRATIONS.len() as u32;

/// One step of a recorded run.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct StepRecord {
    /// `host`, `compute` or `exchange`.
    pub kind: String,
    /// What it belongs to.
    pub name: String,
    /// Simulated cycles.
    pub cycles: u64,
    /// Its compute part.
    pub compute_cycles: u64,
    /// Its sync part.
    pub sync_cycles: u64,
    /// Its exchange part.
    pub exchange_cycles: u64,
    /// The compiler's estimate.
    pub estimated_cycles: Option<u64>,
}

/// One output's check.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct CheckRecord {
    /// The output.
    pub name: String,
    /// Elements compared.
    pub count: u64,
    /// Largest absolute error.
    pub max_abs_error: f64,
    /// Root-mean-square error.
    pub rms_error: f64,
    /// Smallest row cosine similarity.
    pub min_cosine: f64,
    /// Within tolerance.
    pub pass: bool,
}

/// A run as recorded.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct RunRecord {
    /// Its id (once recorded).
    pub id: Option<i64>,
    /// UTC time of day it was recorded (RFC 3339).
    pub recorded_at: String,
    /// `run` or `exec`.
    pub command: String,
    /// The model.
    pub model: String,
    /// Hash of the graph's text form (none for `exec`, which has only the package).
    pub graph_hash: Option<String>,
    /// The options, as JSON.
    pub options: Value,
    /// The compiler's version.
    pub compiler_version: String,
    /// The target.
    pub target: String,
    /// Tiles.
    pub tiles: u32,
    /// Cycles of the `run` call.
    pub cycles: Option<u64>,
    /// The planner's estimate.
    pub estimated_cycles: Option<u64>,
    /// Compile time.
    pub compile_ms: Option<u64>,
    /// Every check passed (none when nothing was checked).
    pub pass: Option<bool>,
    /// The artifacts directory.
    pub artifacts: Option<String>,
    /// The `run` call's steps.
    pub steps: Vec<StepRecord>,
    /// The checks.
    pub checks: Vec<CheckRecord>,
    /// Peak bytes per memory region on the busiest tile.
    pub memory: Vec<(String, u64)>,
}

/// The default database: `$XDG_DATA_HOME/ipu-stack/runs.sqlite`, else
/// `$HOME/.local/share/ipu-stack/runs.sqlite`.
pub fn default_path() -> Option<PathBuf> {
    let base = std::env::var_os("XDG_DATA_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME")
                .filter(|v| !v.is_empty())
                .map(|h| PathBuf::from(h).join(".local/share"))
        })?;
    Some(base.join("ipu-stack").join("runs.sqlite"))
}

/// The database of runs.
pub struct RunDb {
    pub(crate) conn: Connection,
    pub(crate) path: PathBuf,
}

pub(crate) fn db_err(path: &Path, e: rusqlite::Error) -> InsightError {
    let hint = match e.sqlite_error_code() {
        Some(rusqlite::ErrorCode::NotADatabase) => {
            " (the file is not a SQLite database, or is corrupt)"
        }
        Some(rusqlite::ErrorCode::DatabaseCorrupt) => " (the database is corrupt)",
        Some(rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked) => {
            " (another process holds the database locked)"
        }
        _ => "",
    };
    InsightError::Db(format!("{}: {e}{hint}", path.display()))
}

fn opt_u64(v: Option<i64>) -> Option<u64> {
    v.map(|x| x.max(0) as u64)
}

impl RunDb {
    /// Opens (creating if needed) the database at `path` and brings its schema to
    /// [`SCHEMA_VERSION`]; refuses a newer schema, a corrupt file, a lock held too long.
    pub fn open(path: &Path) -> Result<RunDb, InsightError> {
        Self::open_at_version(path, SCHEMA_VERSION)
    }

    /// [`RunDb::open`], migrating no further than `version` (tests of migrations).
    pub fn open_at_version(path: &Path, version: u32) -> Result<RunDb, InsightError> {
        let e = |err| db_err(path, err);
        let conn = Connection::open_with_flags(
            path,
            OpenFlags::SQLITE_OPEN_READ_WRITE
                | OpenFlags::SQLITE_OPEN_CREATE
                | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .map_err(e)?;
        conn.busy_timeout(BUSY_TIMEOUT).map_err(e)?;
        // Reading the journal mode reads the header: a file that is not a database fails here.
        let mode: String = conn
            .query_row("PRAGMA journal_mode=WAL", [], |r| r.get(0))
            .map_err(e)?;
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(InsightError::Db(format!(
                "{}: WAL journal mode unavailable (journal mode is {mode})",
                path.display()
            )));
        }
        conn.execute_batch("PRAGMA foreign_keys=ON; PRAGMA synchronous=NORMAL;")
            .map_err(e)?;
        let mut db = RunDb {
            conn,
            path: path.to_path_buf(),
        };
        db.migrate(version)?;
        Ok(db)
    }

    /// The database's schema version.
    pub fn schema_version(&self) -> Result<u32, InsightError> {
        let v: i64 = self
            .conn
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .map_err(|err| db_err(&self.path, err))?;
        Ok(v.max(0) as u32)
    }

    fn migrate(&mut self, to: u32) -> Result<(), InsightError> {
        let path = self.path.clone();
        let e = |err| db_err(&path, err);
        // Check and migrate in one immediate transaction, so two processes creating the same
        // new database do not both run the first migration.
        let tx = self
            .conn
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            .map_err(e)?;
        let have: i64 = tx
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .map_err(e)?;
        let have = have.max(0) as u32;
        if have > SCHEMA_VERSION {
            return Err(InsightError::Db(format!(
                "{}: the database's schema version is {have}, newer than the {SCHEMA_VERSION} this ipu reads; use a newer ipu or another --db",
                path.display()
            )));
        }
        for (v, sql) in MIGRATIONS.iter().enumerate().skip(have as usize) {
            if v as u32 >= to {
                break;
            }
            tx.execute_batch(sql).map_err(e)?;
            tx.pragma_update(None, "user_version", v as i64 + 1)
                .map_err(e)?;
        }
        tx.commit().map_err(e)
    }

    /// Records `r`; returns its id.
    pub fn insert(&mut self, r: &RunRecord) -> Result<i64, InsightError> {
        let path = self.path.clone();
        let e = |err| db_err(&path, err);
        let tx = self
            .conn
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            .map_err(e)?;
        tx.execute(
            "INSERT INTO runs (recorded_at, command, model, graph_hash, options, compiler_version,
                target, tiles, cycles, estimated_cycles, compile_ms, pass, artifacts)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)",
            params![
                r.recorded_at,
                r.command,
                r.model,
                r.graph_hash,
                r.options.to_string(),
                r.compiler_version,
                r.target,
                r.tiles,
                r.cycles.map(|c| c as i64),
                r.estimated_cycles.map(|c| c as i64),
                r.compile_ms.map(|c| c as i64),
                r.pass,
                r.artifacts,
            ],
        )
        .map_err(e)?;
        let id = tx.last_insert_rowid();
        for (i, s) in r.steps.iter().enumerate() {
            tx.execute(
                "INSERT INTO steps VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
                params![
                    id,
                    i as i64,
                    s.kind,
                    s.name,
                    s.cycles as i64,
                    s.compute_cycles as i64,
                    s.sync_cycles as i64,
                    s.exchange_cycles as i64,
                    s.estimated_cycles.map(|c| c as i64)
                ],
            )
            .map_err(e)?;
        }
        for c in &r.checks {
            tx.execute(
                "INSERT OR REPLACE INTO checks VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                params![
                    id,
                    c.name,
                    c.count as i64,
                    c.max_abs_error,
                    c.rms_error,
                    c.min_cosine,
                    c.pass
                ],
            )
            .map_err(e)?;
        }
        let version: i64 = tx
            .query_row("PRAGMA user_version", [], |row| row.get(0))
            .map_err(e)?;
        if version >= 2 {
            for (region, bytes) in &r.memory {
                tx.execute(
                    "INSERT OR REPLACE INTO memory VALUES (?1, ?2, ?3)",
                    params![id, region, *bytes as i64],
                )
                .map_err(e)?;
            }
        }
        tx.commit().map_err(e)?;
        Ok(id)
    }

    /// The rows `sql` (with `?1` bound to the run `id`) gives, each read by `f`.
    fn rows<T>(
        &self,
        sql: &str,
        id: i64,
        f: impl FnMut(&rusqlite::Row<'_>) -> rusqlite::Result<T>,
    ) -> Result<Vec<T>, InsightError> {
        let e = |err| db_err(&self.path, err);
        let mut st = self.conn.prepare(sql).map_err(e)?;
        let rows = st.query_map([id], f).map_err(e)?;
        rows.collect::<Result<Vec<_>, _>>().map_err(e)
    }

    /// Every run, newest first (steps, checks and memory left empty).
    pub fn list(&self) -> Result<Vec<RunRecord>, InsightError> {
        let e = |err| db_err(&self.path, err);
        let mut st = self
            .conn
            .prepare(&format!("SELECT {RUN_COLUMNS} FROM runs ORDER BY id DESC"))
            .map_err(e)?;
        let rows = st.query_map([], run_of_row).map_err(e)?;
        rows.collect::<Result<Vec<_>, _>>().map_err(e)
    }

    /// The run `id`, whole; none when there is no such run.
    pub fn get(&self, id: i64) -> Result<Option<RunRecord>, InsightError> {
        let e = |err| db_err(&self.path, err);
        let Some(mut r) = self
            .conn
            .query_row(
                &format!("SELECT {RUN_COLUMNS} FROM runs WHERE id = ?1"),
                [id],
                run_of_row,
            )
            .optional()
            .map_err(e)?
        else {
            return Ok(None);
        };
        r.steps = self.rows(
            "SELECT kind, name, cycles, compute_cycles, sync_cycles, exchange_cycles, estimated_cycles FROM steps WHERE run_id = ?1 ORDER BY idx",
            id,
            |row| {
                Ok(StepRecord {
                    kind: row.get(0)?,
                    name: row.get(1)?,
                    cycles: row.get::<_, i64>(2)?.max(0) as u64,
                    compute_cycles: row.get::<_, i64>(3)?.max(0) as u64,
                    sync_cycles: row.get::<_, i64>(4)?.max(0) as u64,
                    exchange_cycles: row.get::<_, i64>(5)?.max(0) as u64,
                    estimated_cycles: opt_u64(row.get(6)?),
                })
            },
        )?;
        r.checks = self.rows(
            "SELECT name, count, max_abs_error, rms_error, min_cosine, pass FROM checks WHERE run_id = ?1 ORDER BY name",
            id,
            |row| {
                Ok(CheckRecord {
                    name: row.get(0)?,
                    count: row.get::<_, i64>(1)?.max(0) as u64,
                    max_abs_error: row.get(2)?,
                    rms_error: row.get(3)?,
                    min_cosine: row.get(4)?,
                    pass: row.get(5)?,
                })
            },
        )?;
        r.memory = self.rows(
            "SELECT region, peak_bytes FROM memory WHERE run_id = ?1 ORDER BY region",
            id,
            |row| Ok((row.get(0)?, row.get::<_, i64>(1)?.max(0) as u64)),
        )?;
        Ok(Some(r))
    }
}

const RUN_COLUMNS: &str = "id, recorded_at, command, model, graph_hash, options, compiler_version, target, tiles, cycles, estimated_cycles, compile_ms, pass, artifacts";

fn run_of_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<RunRecord> {
    let options: String = row.get(5)?;
    Ok(RunRecord {
        id: Some(row.get(0)?),
        recorded_at: row.get(1)?,
        command: row.get(2)?,
        model: row.get(3)?,
        graph_hash: row.get(4)?,
        options: serde_json::from_str(&options).unwrap_or(Value::String(options)),
        compiler_version: row.get(6)?,
        target: row.get(7)?,
        tiles: row.get::<_, i64>(8)?.clamp(0, u32::MAX as i64) as u32,
        cycles: opt_u64(row.get(9)?),
        estimated_cycles: opt_u64(row.get(10)?),
        compile_ms: opt_u64(row.get(11)?),
        pass: row.get(12)?,
        artifacts: row.get(13)?,
        ..Default::default()
    })
}

fn or_dash<T: ToString>(v: Option<T>) -> String {
    v.map_or("-".into(), |x| x.to_string())
}

fn verdict(p: Option<bool>) -> &'static str {
    match p {
        Some(true) => "PASS",
        Some(false) => "FAIL",
        None => "-",
    }
}

/// One line of `ipu runs list`.
pub fn list_line(r: &RunRecord) -> String {
    format!(
        "{:>5}  {}  {:<4}  {:<28}  {:<6} tiles={:<5} cycles={:<10} {}  {}",
        or_dash(r.id),
        r.recorded_at,
        r.command,
        r.model,
        r.target,
        r.tiles,
        or_dash(r.cycles),
        verdict(r.pass),
        options_text(&r.options)
    )
}

/// The options as `k=v` words.
pub fn options_text(o: &Value) -> String {
    match o {
        Value::Object(m) => m
            .iter()
            .filter(|(_, v)| !v.is_null() && v.as_array().is_none_or(|a| !a.is_empty()))
            .map(|(k, v)| match v {
                Value::String(s) => format!("{k}={s}"),
                Value::Array(a) => format!(
                    "{k}={}",
                    a.iter()
                        .map(|x| x.as_str().map_or(x.to_string(), str::to_string))
                        .collect::<Vec<_>>()
                        .join(",")
                ),
                other => format!("{k}={other}"),
            })
            .collect::<Vec<_>>()
            .join(" "),
        other => other.to_string(),
    }
}

/// `ipu runs show ID`.
pub fn show(r: &RunRecord) -> String {
    let mut o = String::new();
    let _ = writeln!(o, "id={}", or_dash(r.id));
    let _ = writeln!(o, "recorded_at={}", r.recorded_at);
    let _ = writeln!(o, "command={}", r.command);
    let _ = writeln!(o, "model={}", r.model);
    let _ = writeln!(o, "graph_hash={}", or_dash(r.graph_hash.as_ref()));
    let _ = writeln!(o, "options={}", options_text(&r.options));
    let _ = writeln!(o, "compiler_version={}", r.compiler_version);
    let _ = writeln!(o, "target={} tiles={}", r.target, r.tiles);
    let _ = writeln!(
        o,
        "cycles={} estimated_cycles={} compile_ms={}",
        or_dash(r.cycles),
        or_dash(r.estimated_cycles),
        or_dash(r.compile_ms)
    );
    let _ = writeln!(o, "result={}", verdict(r.pass));
    let _ = writeln!(o, "artifacts={}", or_dash(r.artifacts.as_ref()));
    for (region, bytes) in &r.memory {
        let _ = writeln!(o, "memory region={region} peak_bytes={bytes}");
    }
    for c in &r.checks {
        let _ = writeln!(
            o,
            "check output={} count={} max_abs_error={:e} rms_error={:e} min_cosine={:.9} result={}",
            c.name,
            c.count,
            c.max_abs_error,
            c.rms_error,
            c.min_cosine,
            verdict(Some(c.pass))
        );
    }
    let _ = writeln!(o, "step kind name cycles compute sync exchange estimate");
    for (i, s) in r.steps.iter().enumerate() {
        let _ = writeln!(
            o,
            "{i} {} {} {} {} {} {} {}",
            s.kind,
            s.name,
            s.cycles,
            s.compute_cycles,
            s.sync_cycles,
            s.exchange_cycles,
            or_dash(s.estimated_cycles)
        );
    }
    o
}

fn delta(a: Option<f64>, b: Option<f64>) -> String {
    match (a, b) {
        (Some(a), Some(b)) => {
            let d = b - a;
            if a != 0.0 {
                format!("{d:+} ({:+.1}%)", 100.0 * d / a)
            } else {
                format!("{d:+}")
            }
        }
        _ => "-".into(),
    }
}

/// `ipu runs compare A B`: cycles per step, memory per region, errors, side by side with the
/// delta (B - A).
pub fn compare(a: &RunRecord, b: &RunRecord) -> String {
    let mut o = String::new();
    let f = |v: Option<u64>| v.map(|x| x as f64);
    let _ = writeln!(
        o,
        "{:<34} {:>14} {:>14}  delta (B - A)",
        "",
        format!("A = run {}", or_dash(a.id)),
        format!("B = run {}", or_dash(b.id))
    );
    let mut line = |label: &str, x: String, y: String, d: String| {
        let _ = writeln!(o, "{label:<34} {x:>14} {y:>14}  {d}");
    };
    line("model", a.model.clone(), b.model.clone(), String::new());
    line(
        "options",
        options_text(&a.options),
        options_text(&b.options),
        String::new(),
    );
    line(
        "graph_hash",
        or_dash(a.graph_hash.clone()),
        or_dash(b.graph_hash.clone()),
        if a.graph_hash == b.graph_hash {
            "same".into()
        } else {
            "differs".into()
        },
    );
    line(
        "cycles",
        or_dash(a.cycles),
        or_dash(b.cycles),
        delta(f(a.cycles), f(b.cycles)),
    );
    line(
        "estimated_cycles",
        or_dash(a.estimated_cycles),
        or_dash(b.estimated_cycles),
        delta(f(a.estimated_cycles), f(b.estimated_cycles)),
    );
    line(
        "compile_ms",
        or_dash(a.compile_ms),
        or_dash(b.compile_ms),
        delta(f(a.compile_ms), f(b.compile_ms)),
    );
    let n = a.steps.len().max(b.steps.len());
    for i in 0..n {
        let (x, y) = (a.steps.get(i), b.steps.get(i));
        let name = match (x, y) {
            (Some(x), Some(y)) if x.kind == y.kind && x.name == y.name => {
                format!("{} {}", x.kind, x.name)
            }
            (Some(x), Some(y)) => format!("{} {} / {} {}", x.kind, x.name, y.kind, y.name),
            (Some(s), None) | (None, Some(s)) => format!("{} {}", s.kind, s.name),
            (None, None) => String::new(),
        };
        let (cx, cy) = (x.map(|s| s.cycles), y.map(|s| s.cycles));
        line(
            &format!("step {i} {}", shorten(&name, 25)),
            or_dash(cx),
            or_dash(cy),
            delta(f(cx), f(cy)),
        );
    }
    let mut regions: Vec<&String> = a.memory.iter().chain(&b.memory).map(|(r, _)| r).collect();
    regions.sort();
    regions.dedup();
    for region in regions {
        let get = |r: &RunRecord| r.memory.iter().find(|(x, _)| x == region).map(|m| m.1);
        let (x, y) = (get(a), get(b));
        line(
            &format!("memory {region} peak bytes"),
            or_dash(x),
            or_dash(y),
            delta(f(x), f(y)),
        );
    }
    let mut outputs: Vec<&String> = a.checks.iter().chain(&b.checks).map(|c| &c.name).collect();
    outputs.sort();
    outputs.dedup();
    for name in outputs {
        let get = |r: &RunRecord| r.checks.iter().find(|c| &c.name == name).cloned();
        let (x, y) = (get(a), get(b));
        let e = |c: &Option<CheckRecord>| c.as_ref().map(|c| c.max_abs_error);
        line(
            &format!("output {name} max_abs_error"),
            e(&x).map_or("-".into(), |v| format!("{v:.3e}")),
            e(&y).map_or("-".into(), |v| format!("{v:.3e}")),
            match (e(&x), e(&y)) {
                (Some(p), Some(q)) => format!("{:+.3e}", q - p),
                _ => "-".into(),
            },
        );
        let r = |c: &Option<CheckRecord>| c.as_ref().map(|c| c.rms_error);
        line(
            &format!("output {name} rms_error"),
            r(&x).map_or("-".into(), |v| format!("{v:.3e}")),
            r(&y).map_or("-".into(), |v| format!("{v:.3e}")),
            match (r(&x), r(&y)) {
                (Some(p), Some(q)) => format!("{:+.3e}", q - p),
                _ => "-".into(),
            },
        );
    }
    line(
        "result",
        verdict(a.pass).into(),
        verdict(b.pass).into(),
        String::new(),
    );
    o
}

fn shorten(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_string()
    } else {
        let mut t: String = s.chars().take(n - 1).collect();
        t.push('…');
        t
    }
}
