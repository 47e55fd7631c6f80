//! Progress on stderr for the long-running commands (replay, bench, reconcile). Bars draw only
//! when stderr is a terminal: piped or redirected, they are hidden, so logs and CI output hold
//! no carriage-return redraws, and stdout (results) is never touched.

use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// A bar of `total` steps labelled `label`, on stderr.
pub fn bar(label: &str, total: u64) -> ProgressBar {
    // The template is a constant: it parses; the fallback only keeps this free of a panic path.
    let style = ProgressStyle::with_template("{prefix:<14} [{bar:30}] {pos}/{len} {elapsed}")
        .unwrap_or_else(|_| ProgressStyle::default_bar())
        .progress_chars("#>-");
    ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr())
        .with_style(style)
        .with_prefix(label.to_owned())
}

/// A spinner for work of unknown length (a reconciliation pass), ticking by itself while the
/// work runs; no ticker thread when hidden.
pub(crate) fn spinner(label: &str) -> ProgressBar {
    let style = ProgressStyle::with_template("{spinner} {prefix} {elapsed}")
        .unwrap_or_else(|_| ProgressStyle::default_spinner());
    let spinner = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr())
        .with_style(style)
        .with_prefix(label.to_owned());
    if !spinner.is_hidden() {
        spinner.enable_steady_tick(Duration::from_millis(120));
    }
    spinner
}
