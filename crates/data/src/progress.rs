//! A spinner on stderr for long steps of a build; hidden when stderr is not a terminal.

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::time::Duration;

/// Shows `message` with the elapsed time until dropped.
pub(crate) struct Spinner(ProgressBar);

impl Spinner {
    pub(crate) fn new(message: &'static str) -> Spinner {
        // indicatif draws nothing when stderr is not a terminal (logs, tests, pipes).
        let pb = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
        pb.set_style(ProgressStyle::with_template("data: {spinner} {msg} ({elapsed})").expect("a valid template"));
        pb.set_message(message);
        pb.enable_steady_tick(Duration::from_millis(200));
        Spinner(pb)
    }
}

impl Drop for Spinner {
    fn drop(&mut self) {
        self.0.finish_and_clear();
    }
}
