//! The `run` call of a profile as a timeline: for every bulk-synchronous step and every tile,
//! when its compute began, when it arrived at the step, and when the step's own cost (sync,
//! exchange) ended, with the compiler's estimate beside each step when the build's view is at
//! hand.
//!
//! The profile samples a tile's cumulative counters on arrival at each global step (before the
//! step's own cost). Between two arrivals a tile first spends the earlier step's cost (sync
//! wait and sync, exchange), then computes towards the next step, so the differences of the
//! counters split each interval into those parts.

use std::collections::BTreeMap;

use ipu_codegen::view::BuildView;
use ipu_runtime::Profile;
use ipu_runtime::device::TileCounters;

use crate::error::InsightError;

/// Worker contexts per tile (occupancy is busy worker cycles over these times the compute).
const WORKERS: u64 = 6;

/// One step of the `run` program on the device.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Step {
    /// Index in the `run` program.
    pub index: usize,
    /// The device's kind of step: `hostx`, `sync` or `exch`.
    pub device_kind: String,
    /// The compiler's kind (`host`, `compute`, `exchange`), when the build's view matches.
    pub kind: String,
    /// What it belongs to (from the build's view; else the device's kind).
    pub name: String,
    /// Start, in cycles since the call began: the slowest tile's end of the previous step.
    pub start_cycles: u64,
    /// Cycles of the step on the slowest tile (`compute + sync + exchange`).
    pub cycles: u64,
    /// Compute before the step, on the slowest tile to arrive.
    pub compute_cycles: u64,
    /// The step's sync part.
    pub sync_cycles: u64,
    /// The step's exchange part (host exchange included).
    pub exchange_cycles: u64,
    /// The compiler's estimate.
    pub estimated_cycles: Option<u64>,
    /// Kernels the compute set launches.
    pub kernels: Vec<String>,
    /// Bytes the step moves.
    pub bytes: u64,
    /// Busy worker cycles over the worker contexts times the compute cycles of all tiles.
    pub occupancy: Option<f64>,
    /// Bank conflicts in the compute before the step, all tiles (each cost its context a
    /// barrel slot).
    pub bank_conflicts: u64,
}

/// One tile's part in one step, in cycles since the call began.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TileStep {
    /// Its compute towards the step began.
    pub start: u64,
    /// It arrived at the step.
    pub arrive: u64,
    /// Its sync part ended.
    pub sync_end: u64,
    /// The step's cost ended for it.
    pub end: u64,
    /// Busy worker cycles of its compute.
    pub worker_busy: u64,
    /// Bank conflicts in its compute.
    pub bank_conflicts: u64,
}

/// The timeline of the first `run` call.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Timeline {
    /// The target's clock.
    pub clock_hz: u64,
    /// Cycles of the call (as the device reported them).
    pub call_cycles: u64,
    /// Every step.
    pub steps: Vec<Step>,
    /// Per active tile (in tile order), its part in every step.
    pub tiles: Vec<(u32, Vec<TileStep>)>,
    /// Whether the build's view matched the device's steps (estimates and names are from it).
    pub matched_view: bool,
    /// Bank conflicts per kernel over the session (startup included), most first: the
    /// kernel's name from the build's view (else its entry address, or `supervisor`) and the
    /// conflicts of all tiles.
    pub kernel_conflicts: Vec<(String, u64)>,
}

impl Timeline {
    /// Microseconds at the target's clock.
    pub fn us(&self, cycles: u64) -> f64 {
        cycles as f64 * 1e6 / self.clock_hz.max(1) as f64
    }

    /// A tile's busy cycles (compute and exchange, not waiting at syncs).
    pub fn busy_cycles(steps: &[TileStep]) -> u64 {
        steps
            .iter()
            .map(|s| (s.arrive - s.start) + (s.end - s.sync_end))
            .sum()
    }

    /// The `n` busiest tiles, busiest first (ties: lower tile first).
    pub fn busiest(&self, n: usize) -> Vec<u32> {
        let mut by: Vec<(u64, u32)> = self
            .tiles
            .iter()
            .map(|(t, s)| (Self::busy_cycles(s), *t))
            .collect();
        by.sort_by_key(|&(b, t)| (std::cmp::Reverse(b), t));
        by.into_iter().take(n).map(|(_, t)| t).collect()
    }
}

/// The compiler's step kind a device step kind stands for.
fn compiler_kind(device_kind: &str) -> &'static str {
    match device_kind {
        "hostx" => "host",
        "exch" => "exchange",
        _ => "compute",
    }
}

/// The timeline of `profile`'s first `run` call, with `view`'s estimates when its `run` steps
/// match the device's.
pub fn timeline(profile: &Profile, view: Option<&BuildView>) -> Result<Timeline, InsightError> {
    let bad = |m: String| InsightError::Profile(m);
    let run_at = profile
        .calls
        .iter()
        .position(|c| c.program == "run")
        .ok_or_else(|| bad("the profile has no `run` call".into()))?;
    let first: u64 = profile.calls[..run_at]
        .iter()
        .map(|c| c.counters.global_steps)
        .sum();
    let call = &profile.calls[run_at];
    let n = call.counters.global_steps;
    if n == 0 || n > u32::MAX as u64 || first + n > u32::MAX as u64 {
        return Err(bad(format!("the `run` call has {n} global steps")));
    }
    let (first, n) = (first as u32, n as u32);
    // Samples by global step, then tile.
    let mut by_step: BTreeMap<u32, BTreeMap<u32, &TileCounters>> = BTreeMap::new();
    let lo = first.saturating_sub(1);
    for s in &profile.samples {
        if s.step >= lo && s.step < first + n {
            by_step
                .entry(s.step)
                .or_default()
                .insert(s.counters.tile, &s.counters);
        }
    }
    let tiles: Vec<u32> = profile.tiles.iter().map(|t| t.tile).collect();
    let kinds: Vec<String> = (first..first + n)
        .map(|g| {
            profile
                .samples
                .iter()
                .find(|s| s.step == g)
                .map(|s| s.kind.clone())
                .ok_or_else(|| bad(format!("no sample of global step {g}")))
        })
        .collect::<Result<_, _>>()?;
    // The run program's steps: every global step but the closing halt.
    let steps_n = (n - 1) as usize;
    let zero = TileCounters::default();
    let mut per_tile = Vec::with_capacity(tiles.len());
    let mut base = u64::MAX;
    for &t in &tiles {
        let at = |g: u32| -> Result<&TileCounters, InsightError> {
            by_step
                .get(&g)
                .and_then(|m| m.get(&t).copied())
                .ok_or_else(|| bad(format!("no sample of tile {t} at global step {g}")))
        };
        let before = if first == 0 { &zero } else { at(first - 1)? };
        base = base.min(before.cycles);
        let mut out = Vec::with_capacity(steps_n);
        let mut prev_end = before.cycles;
        let mut prev = before;
        for j in 0..steps_n as u32 {
            let here = at(first + j)?;
            let next = at(first + j + 1)?;
            let arrive = here.cycles.max(prev_end);
            let sync = next.sync_cycles.saturating_sub(here.sync_cycles);
            let exchange = next.exchange_cycles.saturating_sub(here.exchange_cycles);
            let end = arrive + sync + exchange;
            out.push(TileStep {
                start: prev_end,
                arrive,
                sync_end: arrive + sync,
                end,
                worker_busy: here
                    .worker_busy_cycles
                    .saturating_sub(prev.worker_busy_cycles),
                bank_conflicts: here.bank_conflicts.saturating_sub(prev.bank_conflicts),
            });
            prev_end = end;
            prev = here;
        }
        per_tile.push((t, out));
    }
    if base == u64::MAX {
        base = 0;
    }
    for (_, steps) in &mut per_tile {
        for s in steps.iter_mut() {
            s.start -= base;
            s.arrive -= base;
            s.sync_end -= base;
            s.end -= base;
        }
    }
    let view_steps = view.map(|v| &v.steps[v.init_steps.min(v.steps.len())..]);
    let matched_view = view_steps.is_some_and(|vs| {
        vs.len() == steps_n
            && vs
                .iter()
                .zip(&kinds)
                .all(|(v, k)| v.kind == compiler_kind(k))
    });
    let mut steps = Vec::with_capacity(steps_n);
    let mut prev_end = 0u64;
    for j in 0..steps_n {
        let max = |f: &dyn Fn(&TileStep) -> u64| per_tile.iter().map(|(_, s)| f(&s[j])).max();
        let arrive = max(&|s| s.arrive).unwrap_or(prev_end).max(prev_end);
        let end = max(&|s| s.end).unwrap_or(arrive).max(arrive);
        let sync = max(&|s| s.sync_end - s.arrive)
            .unwrap_or(0)
            .min(end - arrive);
        let compute_all: u64 = per_tile.iter().map(|(_, s)| s[j].arrive - s[j].start).sum();
        let busy_all: u64 = per_tile.iter().map(|(_, s)| s[j].worker_busy).sum();
        let mut step = Step {
            index: j,
            device_kind: kinds[j].clone(),
            kind: compiler_kind(&kinds[j]).to_string(),
            name: kinds[j].clone(),
            start_cycles: prev_end,
            cycles: end - prev_end,
            compute_cycles: arrive - prev_end,
            sync_cycles: sync,
            exchange_cycles: end - arrive - sync,
            occupancy: (compute_all > 0 && busy_all > 0)
                .then(|| busy_all as f64 / (WORKERS * compute_all) as f64),
            bank_conflicts: per_tile.iter().map(|(_, s)| s[j].bank_conflicts).sum(),
            ..Default::default()
        };
        if let (true, Some(vs)) = (matched_view, view_steps) {
            let v = &vs[j];
            step.name = v.name.clone();
            step.estimated_cycles = v.estimated_cycles;
            step.kernels = v.kernels.clone();
            step.bytes = v.bytes;
        }
        steps.push(step);
        prev_end = end;
    }
    let mut kernel_conflicts: Vec<(String, u64)> = profile
        .entry_conflicts
        .iter()
        .filter(|e| e.conflicts > 0)
        .map(|e| {
            let name = view
                .and_then(|v| v.kernels.iter().find(|k| k.entry == e.entry))
                .map(|k| k.name.clone())
                .unwrap_or_else(|| match e.entry {
                    u32::MAX => "supervisor".to_string(),
                    a => format!("code at {a:#x}"),
                });
            (name, e.conflicts)
        })
        .collect();
    kernel_conflicts.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    Ok(Timeline {
        clock_hz: profile.clock_hz,
        call_cycles: call.counters.cycles,
        steps,
        tiles: per_tile,
        matched_view,
        kernel_conflicts,
    })
}
