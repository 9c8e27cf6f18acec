//! Exchange lowering: the copies of an exchange phase become rows of per-tile exchange tables,
//! each with a scheduled start cycle.
//!
//! Copies of the same source bytes to buffers of one placement group (which sit at the same
//! address on every member tile) merge into one multicast row per run of consecutive tiles:
//! the sender's port is busy once, every receiver's port for the same span.
//!
//! Four schedules are built and the shortest is kept: the *sender-driven* list schedule
//! (whenever a sender's port frees, it starts the pending row whose receivers can take it
//! soonest, and among those the one whose busiest receiver has the most left to receive), the
//! same rows *backfilled* (in that order, each at the earliest cycle at which all its ports are
//! free for its whole span, gaps included), the *destination-ordered* one (receivers served
//! one after another, each row at the earliest cycle all its ports allow) and *multicasts
//! first* (the multicasts backfilled while the runs are empty, the unicasts after them as a
//! dense list schedule: a multicast waits for every tile of its run, a unicast for two ports).
//! The checker re-derives the port rules the device enforces from the rows alone.
//!
//! Receive ports come in pairs (`Target::pair_tile`): a tile has two receive lanes, a row that
//! also reaches the tile's pair tile takes one of them (the pair hears it on one of its two
//! buses), any other row takes both. So a pair receives two multicasts to both its tiles at
//! once, as the device allows.
//!
//! [`transfers`](mod@transfers) merges a phase's copies into transfers;
//! [`schedule`](mod@schedule) resolves them to rows ([`rows`]) and orders them by the list
//! schedules ([`list`]: sender-driven, backfilled into the ports' gaps ([`ports`]),
//! destination order) and by [`multicasts`] first; [`check`](mod@check) is the checker.

pub mod check;
pub mod list;
pub mod multicasts;
pub mod ports;
pub mod rows;
pub mod schedule;
pub mod transfers;

use std::collections::BTreeMap;

use ipu_target::Target;

use crate::error::CodegenError;
use crate::program::{Step, TileProgram};

pub use check::check;
pub use schedule::{Scheduled, schedule};
pub use transfers::{REPEAT_MAX, Transfer, transfers};

/// Schedules every exchange phase of `program` with the placed buffers' `addresses`, keyed by
/// step index; `transfers` holds each step's transfers ([`transfers`](fn@transfers), empty for a step that
/// is no exchange).
pub fn schedule_program(
    program: &TileProgram,
    transfers: &[Vec<Transfer>],
    addresses: &[u32],
    target: &Target,
) -> Result<BTreeMap<usize, Scheduled>, CodegenError> {
    use rayon::prelude::*;
    // The phases are independent: scheduled at once, logged and kept in step order.
    let scheduled: Vec<(usize, Result<Scheduled, CodegenError>)> = program
        .steps
        .par_iter()
        .enumerate()
        .filter(|(i, s)| matches!(s, Step::Exchange { .. }) && !program.same_as.contains_key(i))
        .map(|(i, _)| {
            let scheduled = schedule(program, &transfers[i], addresses, target);
            (i, scheduled.and_then(|s| check(&s, target).map(|()| s)))
        })
        .collect();
    let mut out: BTreeMap<usize, Scheduled> = BTreeMap::new();
    for (i, sch) in scheduled {
        if let Step::Exchange { name, copies } = &program.steps[i] {
            let sch = sch?;
            let most_rows = sch.tables.values().map(|t| t.rows.len()).max().unwrap_or(0);
            tracing::debug!(
                phase = i,
                name = %name,
                copies = copies.len(),
                rows = transfers[i].len(),
                most_rows,
                "exchange rows"
            );
            tracing::info!(
                phase = i,
                candidates = copies.len(),
                receive_bound = sch.receive_bound,
                sender_horizon = sch.sender_horizon,
                backfilled_horizon = sch.backfilled_horizon,
                multicasts_first_horizon = ?sch.multicasts_first_horizon,
                destination_horizon = sch.destination_horizon,
                use_destination_order = sch.use_destination_order,
                "compared sender-driven, backfilled, destination-ordered and multicasts-first exchange schedules"
            );
            out.insert(i, sch);
        }
    }
    // A repeated phase is its first instance's copies between the same buffers: the same
    // schedule.
    for (&j, &i) in &program.same_as {
        if let Some(sch) = out.get(&i).cloned() {
            out.insert(j, sch);
        }
    }
    Ok(out)
}
