//! Search incumbents in the run database: the finalist each operation selects, as measured
//! fastest on the device by `ipu tune`, kept per graph, target, tile count, compiler version
//! and build options; and every candidate the tuner measured (the planner's accuracy data).
//!
//! A build looks its key up ([`RunDb::incumbent`]); a record for the same model under another
//! compiler version or graph hash is reported as stale, and a record whose choices do not
//! parse as corrupt: both are ignored.

use ipu_codegen::plan::Choices;
use rusqlite::{OptionalExtension, params};

use crate::db::{RunDb, db_err};
use crate::error::InsightError;

/// What an incumbent is kept under: a build uses one only when all of these are the same.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IncumbentKey {
    /// FNV-1a of the graph's text form ([`crate::text_hash`]).
    pub graph_hash: String,
    /// The target's name.
    pub target: String,
    /// Tiles used.
    pub tiles: u32,
    /// The compiler's version.
    pub compiler_version: String,
    /// The build options that change the plan, as canonical JSON.
    pub options: String,
}

/// A stored incumbent.
#[derive(Debug, Clone, PartialEq)]
pub struct IncumbentRecord {
    /// Its key.
    pub key: IncumbentKey,
    /// The model's name.
    pub model: String,
    /// The choices as stored (JSON of [`Choices`]).
    pub choices: String,
    /// Simulated cycles of its `run` call.
    pub measured_cycles: u64,
    /// Simulated cycles of the planner's own pick, measured by the same tune.
    pub planner_cycles: u64,
    /// UTC time of day it was recorded.
    pub recorded_at: String,
}

impl IncumbentRecord {
    /// The choices, or why they cannot be used (a record this ipu did not write).
    pub fn parsed_choices(&self) -> Result<Choices, String> {
        serde_json::from_str(&self.choices)
            .map_err(|e| format!("the stored incumbent is corrupt (its choices: {e})"))
    }
}

/// One candidate the tuner built and ran.
#[derive(Debug, Clone, PartialEq)]
pub struct Measurement {
    /// The choices it was built with (JSON of [`Choices`]; `{}` is the planner's pick).
    pub choices: String,
    /// The planner's estimate of the `run` program.
    pub estimated_cycles: u64,
    /// The cost of the placed program.
    pub final_cycles: u64,
    /// Simulated cycles of the `run` call; none when it did not build or run.
    pub measured_cycles: Option<u64>,
    /// Its outputs agreed with the host reference.
    pub pass: bool,
}

/// What a build finds for its key.
#[derive(Debug, Clone, PartialEq)]
pub enum Lookup {
    /// An incumbent of this key.
    Found(IncumbentRecord),
    /// None of this key; why the nearest record (same model, target, tiles) does not apply.
    Stale(String),
    /// Nothing for this model.
    Missing,
}

const COLUMNS: &str = "graph_hash, target, tiles, compiler_version, options, model, choices, measured_cycles, planner_cycles, recorded_at";

fn of_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<IncumbentRecord> {
    Ok(IncumbentRecord {
        key: IncumbentKey {
            graph_hash: row.get(0)?,
            target: row.get(1)?,
            tiles: row.get::<_, i64>(2)?.clamp(0, u32::MAX as i64) as u32,
            compiler_version: row.get(3)?,
            options: row.get(4)?,
        },
        model: row.get(5)?,
        choices: row.get(6)?,
        measured_cycles: row.get::<_, i64>(7)?.max(0) as u64,
        planner_cycles: row.get::<_, i64>(8)?.max(0) as u64,
        recorded_at: row.get(9)?,
    })
}

impl RunDb {
    /// Stores `r` as the incumbent of its key, replacing any earlier one.
    pub fn put_incumbent(&mut self, r: &IncumbentRecord) -> Result<(), InsightError> {
        let path = self.path.clone();
        let e = |err| db_err(&path, err);
        let k = &r.key;
        self.conn
            .execute(
                &format!("INSERT OR REPLACE INTO incumbents ({COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)"),
                params![
                    k.graph_hash,
                    k.target,
                    k.tiles,
                    k.compiler_version,
                    k.options,
                    r.model,
                    r.choices,
                    r.measured_cycles as i64,
                    r.planner_cycles as i64,
                    r.recorded_at
                ],
            )
            .map_err(e)?;
        Ok(())
    }

    /// The incumbent of `key` for `model`, or why there is none.
    pub fn incumbent(&self, model: &str, key: &IncumbentKey) -> Result<Lookup, InsightError> {
        let e = |err| db_err(&self.path, err);
        let found = self
            .conn
            .query_row(
                &format!(
                    "SELECT {COLUMNS} FROM incumbents WHERE graph_hash = ?1 AND target = ?2 AND tiles = ?3 AND compiler_version = ?4 AND options = ?5"
                ),
                params![
                    key.graph_hash,
                    key.target,
                    key.tiles,
                    key.compiler_version,
                    key.options
                ],
                of_row,
            )
            .optional()
            .map_err(e)?;
        if let Some(r) = found {
            return Ok(Lookup::Found(r));
        }
        let nearest = self
            .conn
            .query_row(
                &format!(
                    "SELECT {COLUMNS} FROM incumbents WHERE model = ?1 AND target = ?2 AND tiles = ?3 ORDER BY recorded_at DESC LIMIT 1"
                ),
                params![model, key.target, key.tiles],
                of_row,
            )
            .optional()
            .map_err(e)?;
        let Some(n) = nearest else {
            return Ok(Lookup::Missing);
        };
        let mut why = Vec::new();
        if n.key.compiler_version != key.compiler_version {
            why.push(format!(
                "recorded by compiler version {}, this is {}",
                n.key.compiler_version, key.compiler_version
            ));
        }
        if n.key.graph_hash != key.graph_hash {
            why.push(format!(
                "recorded for graph {}, this graph is {} (the graph changed)",
                n.key.graph_hash, key.graph_hash
            ));
        }
        if n.key.options != key.options {
            why.push(format!(
                "recorded with build options {}, these are {}",
                n.key.options, key.options
            ));
        }
        Ok(Lookup::Stale(format!(
            "the stored incumbent of {model} is stale: {}",
            why.join("; ")
        )))
    }

    /// Records what the tuner measured of one candidate, under `key`.
    pub fn add_measurement(
        &mut self,
        model: &str,
        key: &IncumbentKey,
        m: &Measurement,
        recorded_at: &str,
    ) -> Result<(), InsightError> {
        let path = self.path.clone();
        let e = |err| db_err(&path, err);
        self.conn
            .execute(
                "INSERT INTO tune_measurements (recorded_at, model, graph_hash, target, tiles,
                    compiler_version, options, choices, estimated_cycles, final_cycles,
                    measured_cycles, pass)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)",
                params![
                    recorded_at,
                    model,
                    key.graph_hash,
                    key.target,
                    key.tiles,
                    key.compiler_version,
                    key.options,
                    m.choices,
                    m.estimated_cycles as i64,
                    m.final_cycles as i64,
                    m.measured_cycles.map(|c| c as i64),
                    m.pass
                ],
            )
            .map_err(e)?;
        Ok(())
    }

    /// Every measurement kept under `key`, oldest first.
    pub fn measurements(&self, key: &IncumbentKey) -> Result<Vec<Measurement>, InsightError> {
        let e = |err| db_err(&self.path, err);
        let mut st = self
            .conn
            .prepare(
                "SELECT choices, estimated_cycles, final_cycles, measured_cycles, pass
                 FROM tune_measurements WHERE graph_hash = ?1 AND target = ?2 AND tiles = ?3
                 AND compiler_version = ?4 AND options = ?5 ORDER BY id",
            )
            .map_err(e)?;
        let rows = st
            .query_map(
                params![
                    key.graph_hash,
                    key.target,
                    key.tiles,
                    key.compiler_version,
                    key.options
                ],
                |row| {
                    Ok(Measurement {
                        choices: row.get(0)?,
                        estimated_cycles: row.get::<_, Option<i64>>(1)?.unwrap_or(0).max(0) as u64,
                        final_cycles: row.get::<_, Option<i64>>(2)?.unwrap_or(0).max(0) as u64,
                        measured_cycles: row.get::<_, Option<i64>>(3)?.map(|c| c.max(0) as u64),
                        pass: row.get::<_, Option<bool>>(4)?.unwrap_or(false),
                    })
                },
            )
            .map_err(e)?;
        rows.collect::<Result<Vec<_>, _>>().map_err(e)
    }
}
