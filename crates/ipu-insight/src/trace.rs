//! `trace.json`: the run in the Chrome trace-event format (JSON object form), which Perfetto
//! (ui.perfetto.dev) and chrome://tracing open.
//!
//! Tracks, chosen so that a 1472-tile run stays a few hundred kilobytes:
//! - process 1, "steps": one slice per bulk-synchronous step of the `run` call (the slowest
//!   tile), with its compute, sync and exchange parts nested inside, the kernels, bytes and the
//!   compiler's estimate beside the simulated cycles as arguments; counters of the bytes each
//!   step moves and of worker occupancy;
//! - process 2, "busiest tiles": the [`BUSIEST_TILES`] tiles with the most compute and exchange
//!   cycles, one track each;
//! - process 3, "tile groups": every [`TILE_GROUP_TILES`] consecutive tiles as one track whose
//!   slices span the group (from the last tile's end of the previous step to the last arrival
//!   and the last end), the group's mean and
//!   largest compute in the arguments.
//!
//! Times are microseconds at the target's clock from the start of the call; everything is
//! derived from the profile and the build, so the same run gives the same bytes.

use serde_json::{Value, json};

use crate::timeline::{Step, TileStep, Timeline};

/// Tiles with a track of their own: enough to see the critical tiles and their neighbours'
/// spread, few enough that the trace of any run stays small.
pub const BUSIEST_TILES: usize = 16;

/// Tiles per group track: 1472 tiles make 23 tracks, which fit a screen.
pub const TILE_GROUP_TILES: usize = 64;

const PID_STEPS: u32 = 1;
const PID_TILES: u32 = 2;
const PID_GROUPS: u32 = 3;

/// Microseconds, rounded to the nanosecond (trace viewers keep no more).
fn us(t: &Timeline, cycles: u64) -> f64 {
    (t.us(cycles) * 1000.0).round() / 1000.0
}

fn meta(name: &str, pid: u32, tid: u32, args: Value) -> Value {
    json!({"ph": "M", "name": name, "pid": pid, "tid": tid, "ts": 0, "args": args})
}

fn slice(
    t: &Timeline,
    name: &str,
    cat: &str,
    (pid, tid): (u32, u32),
    from: u64,
    to: u64,
    args: Value,
) -> Value {
    json!({
        "ph": "X", "name": name, "cat": cat, "pid": pid, "tid": tid,
        "ts": us(t, from), "dur": us(t, to.saturating_sub(from)), "args": args,
    })
}

/// The parts of one tile's (or group's) step as slices: compute, sync, exchange (those not
/// empty), named after the step.
fn parts(
    t: &Timeline,
    step: &Step,
    s: &TileStep,
    pid: u32,
    tid: u32,
    args: Value,
    out: &mut Vec<Value>,
) {
    let label = if step.kind == "compute" {
        step.name.clone()
    } else {
        format!("{} {}", step.kind, step.name)
    };
    if s.arrive > s.start {
        out.push(slice(
            t,
            &label,
            "compute",
            (pid, tid),
            s.start,
            s.arrive,
            args.clone(),
        ));
    }
    if s.sync_end > s.arrive {
        out.push(slice(
            t,
            "sync",
            "sync",
            (pid, tid),
            s.arrive,
            s.sync_end,
            json!({"step": step.index}),
        ));
    }
    if s.end > s.sync_end {
        let cat = if step.kind == "host" {
            "host_exchange"
        } else {
            "exchange"
        };
        out.push(slice(t, &label, cat, (pid, tid), s.sync_end, s.end, args));
    }
}

/// The trace of `timeline` as a JSON value; `title` names the process of steps (model, target).
pub fn trace(timeline: &Timeline, title: &str) -> Value {
    let t = timeline;
    let mut ev = vec![
        meta(
            "process_name",
            PID_STEPS,
            0,
            json!({"name": format!("{title}: steps")}),
        ),
        meta("process_sort_index", PID_STEPS, 0, json!({"sort_index": 1})),
        meta(
            "thread_name",
            PID_STEPS,
            1,
            json!({"name": "steps (slowest tile)"}),
        ),
        meta(
            "process_name",
            PID_TILES,
            0,
            json!({"name": format!("busiest {BUSIEST_TILES} tiles")}),
        ),
        meta("process_sort_index", PID_TILES, 0, json!({"sort_index": 2})),
        meta(
            "process_name",
            PID_GROUPS,
            0,
            json!({"name": format!("tile groups of {TILE_GROUP_TILES}")}),
        ),
        meta(
            "process_sort_index",
            PID_GROUPS,
            0,
            json!({"sort_index": 3}),
        ),
    ];
    for s in &t.steps {
        let end = s.start_cycles + s.cycles;
        let mut args = json!({
            "step": s.index,
            "kind": s.kind,
            "device_kind": s.device_kind,
            "simulated_cycles": s.cycles,
            "estimated_cycles": s.estimated_cycles,
            "compute_cycles": s.compute_cycles,
            "sync_cycles": s.sync_cycles,
            "exchange_cycles": s.exchange_cycles,
            "bytes": s.bytes,
            "bank_conflicts": s.bank_conflicts,
        });
        if !s.kernels.is_empty() {
            args["kernels"] = json!(s.kernels.join(", "));
        }
        if let Some(o) = s.occupancy {
            args["worker_occupancy"] = json!((o * 1e4).round() / 1e4);
        }
        let name = format!("{} {}", s.kind, s.name);
        ev.push(slice(
            t,
            &name,
            &s.kind,
            (PID_STEPS, 1),
            s.start_cycles,
            end,
            args,
        ));
        let arrive = s.start_cycles + s.compute_cycles;
        if s.compute_cycles > 0 {
            ev.push(slice(
                t,
                "compute",
                "compute",
                (PID_STEPS, 1),
                s.start_cycles,
                arrive,
                json!({"step": s.index}),
            ));
        }
        if s.sync_cycles > 0 {
            ev.push(slice(
                t,
                "sync",
                "sync",
                (PID_STEPS, 1),
                arrive,
                arrive + s.sync_cycles,
                json!({"step": s.index}),
            ));
        }
        if s.exchange_cycles > 0 {
            let from = arrive + s.sync_cycles;
            ev.push(slice(
                t,
                "exchange",
                "exchange",
                (PID_STEPS, 1),
                from,
                end,
                json!({"step": s.index, "bytes": s.bytes}),
            ));
        }
        // Counters: what the step moves over its span, and the workers' occupancy over its
        // compute; both drop to zero at its end.
        let bytes_now = if s.kind == "compute" { 0 } else { s.bytes };
        ev.push(json!({"ph": "C", "name": "bytes exchanged", "pid": PID_STEPS, "tid": 1, "ts": us(t, s.start_cycles), "args": {"bytes": bytes_now}}));
        let occ = s.occupancy.map_or(0.0, |o| (o * 1e3).round() / 10.0);
        ev.push(json!({"ph": "C", "name": "worker occupancy %", "pid": PID_STEPS, "tid": 1, "ts": us(t, s.start_cycles), "args": {"percent": occ}}));
    }
    if let Some(last) = t.steps.last() {
        let end = us(t, last.start_cycles + last.cycles);
        ev.push(json!({"ph": "C", "name": "bytes exchanged", "pid": PID_STEPS, "tid": 1, "ts": end, "args": {"bytes": 0}}));
        ev.push(json!({"ph": "C", "name": "worker occupancy %", "pid": PID_STEPS, "tid": 1, "ts": end, "args": {"percent": 0.0}}));
    }
    for (rank, tile) in t.busiest(BUSIEST_TILES).into_iter().enumerate() {
        let tid = tile + 1;
        ev.push(meta(
            "thread_name",
            PID_TILES,
            tid,
            json!({"name": format!("tile {tile}")}),
        ));
        ev.push(meta(
            "thread_sort_index",
            PID_TILES,
            tid,
            json!({"sort_index": rank}),
        ));
        let Some((_, steps)) = t.tiles.iter().find(|(x, _)| *x == tile) else {
            continue;
        };
        for (s, ts) in t.steps.iter().zip(steps) {
            parts(
                t,
                s,
                ts,
                PID_TILES,
                tid,
                json!({"step": s.index, "tile": tile}),
                &mut ev,
            );
        }
    }
    for (g, group) in t.tiles.chunks(TILE_GROUP_TILES).enumerate() {
        let tid = g as u32 + 1;
        let (lo, hi) = (group[0].0, group[group.len() - 1].0);
        ev.push(meta(
            "thread_name",
            PID_GROUPS,
            tid,
            json!({"name": format!("tiles {lo}-{hi}")}),
        ));
        ev.push(meta(
            "thread_sort_index",
            PID_GROUPS,
            tid,
            json!({"sort_index": g}),
        ));
        for (j, s) in t.steps.iter().enumerate() {
            let span = TileStep {
                // The latest start: the group's previous slice ends there, so slices never overlap.
                start: group.iter().map(|(_, x)| x[j].start).max().unwrap_or(0),
                arrive: group.iter().map(|(_, x)| x[j].arrive).max().unwrap_or(0),
                sync_end: group.iter().map(|(_, x)| x[j].sync_end).max().unwrap_or(0),
                end: group.iter().map(|(_, x)| x[j].end).max().unwrap_or(0),
                worker_busy: 0,
                bank_conflicts: 0,
            };
            let computes: Vec<u64> = group
                .iter()
                .map(|(_, x)| x[j].arrive - x[j].start)
                .collect();
            let mean = computes.iter().sum::<u64>() / computes.len().max(1) as u64;
            let most = computes.iter().copied().max().unwrap_or(0);
            let args = json!({"step": s.index, "tiles": format!("{lo}-{hi}"), "mean_compute_cycles": mean, "max_compute_cycles": most});
            parts(t, s, &span, PID_GROUPS, tid, args, &mut ev);
        }
    }
    json!({
        "traceEvents": ev,
        "displayTimeUnit": "ns",
        "otherData": {
            "title": title,
            "clock_hz": t.clock_hz,
            "call_cycles": t.call_cycles,
            "device": "simulator",
            "estimates_from_build": t.matched_view,
        },
    })
}
