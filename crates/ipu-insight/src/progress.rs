//! Progress bars for long work (compiling and running large models, the iterations of a run,
//! the models of a benchmark), drawn on stderr only when it is a terminal.

use std::io::IsTerminal;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// A bar of `total` units, or a spinner when `total` is 0; hidden unless stderr is a terminal.
pub fn bar(total: u64, what: &str) -> ProgressBar {
    if !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let pb = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr());
    let style = if total == 0 {
        ProgressStyle::with_template("{spinner} {msg} {elapsed}")
    } else {
        ProgressStyle::with_template("{msg} [{bar:30}] {pos}/{len} {elapsed}")
    };
    if let Ok(s) = style {
        pb.set_style(s.progress_chars("=> "));
    }
    pb.set_message(what.to_string());
    if total == 0 {
        pb.set_length(0);
        pb.enable_steady_tick(Duration::from_millis(120));
    }
    pb
}

/// A bar of `total` units starting at `done`, with the time left estimated from the units
/// done in this process; hidden unless stderr is a terminal.
pub fn bar_with_eta(total: u64, done: u64, what: &str) -> ProgressBar {
    let pb = bar(total, what);
    if let Ok(s) = ProgressStyle::with_template("{msg} [{bar:30}] {pos}/{len} {elapsed} eta {eta}")
    {
        pb.set_style(s.progress_chars("=> "));
    }
    pb.set_position(done);
    pb.reset_eta();
    pb
}
