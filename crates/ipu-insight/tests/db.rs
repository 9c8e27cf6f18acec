//! The run database: migrations, refusals of what it cannot read, concurrent writers.

use std::path::PathBuf;

use ipu_insight::InsightError;
use ipu_insight::db::{RunDb, RunRecord, SCHEMA_VERSION, StepRecord};

fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("ipu-insight-db-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d.join("runs.sqlite")
}

fn record(model: &str) -> RunRecord {
    RunRecord {
        recorded_at: "2026-01-01T00:00:00Z".into(),
        command: "run".into(),
        model: model.into(),
        options: serde_json::json!({"tiles": 4}),
        compiler_version: "0".into(),
        target: "gc200".into(),
        tiles: 4,
        cycles: Some(100),
        steps: vec![StepRecord {
            kind: "compute".into(),
            name: "c".into(),
            cycles: 100,
            compute_cycles: 90,
            sync_cycles: 10,
            ..Default::default()
        }],
        memory: vec![("standard".into(), 1000)],
        ..Default::default()
    }
}

#[test]
fn migrations_bring_an_older_database_up_and_keep_its_runs() {
    let p = scratch("migrate");
    {
        let mut db = RunDb::open_at_version(&p, 1).unwrap();
        assert_eq!(db.schema_version().unwrap(), 1);
        db.insert(&record("old")).unwrap();
    }
    let mut db = RunDb::open(&p).unwrap();
    assert_eq!(db.schema_version().unwrap(), SCHEMA_VERSION);
    let old = db.get(1).unwrap().unwrap();
    assert_eq!((old.model.as_str(), old.steps.len()), ("old", 1));
    assert!(old.memory.is_empty(), "version 1 had no memory table");
    let id = db.insert(&record("new")).unwrap();
    assert_eq!(
        db.get(id).unwrap().unwrap().memory,
        vec![("standard".into(), 1000)]
    );
}

#[test]
fn a_newer_schema_and_a_corrupt_file_are_refused() {
    let p = scratch("newer");
    {
        let c = rusqlite::Connection::open(&p).unwrap();
        c.pragma_update(None, "user_version", SCHEMA_VERSION + 1)
            .unwrap();
    }
    let e = RunDb::open(&p).err().unwrap().to_string();
    assert!(e.contains("newer than"), "{e}");
    let p = scratch("corrupt");
    std::fs::write(
        &p,
        b"SQLite format 3\0 but not really a database, just text padding".repeat(100),
    )
    .unwrap();
    let e = RunDb::open(&p).err().unwrap();
    assert!(matches!(e, InsightError::Db(_)), "{e:?}");
    let e = e.to_string();
    assert!(e.contains(&p.display().to_string()), "{e}");
    assert!(e.contains("not a SQLite database, or is corrupt"), "{e}");
}

#[test]
fn concurrent_writers_lose_no_record() {
    let p = scratch("threads");
    RunDb::open(&p).unwrap();
    const WRITERS: usize = 4;
    const EACH: usize = 25;
    let handles: Vec<_> = (0..WRITERS)
        .map(|w| {
            let p = p.clone();
            std::thread::spawn(move || {
                let mut db = RunDb::open(&p).unwrap();
                for i in 0..EACH {
                    db.insert(&record(&format!("w{w}-{i}"))).unwrap();
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    let runs = RunDb::open(&p).unwrap().list().unwrap();
    assert_eq!(runs.len(), WRITERS * EACH);
    assert!(runs.windows(2).all(|w| w[0].id > w[1].id), "newest first");
}
