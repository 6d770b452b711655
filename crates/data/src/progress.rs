//! Progress of a build on stderr: a spinner for steps of unknown length, a byte bar for passes
//! over the corpus. On a terminal they redraw in place; otherwise (logs, batch jobs) a pass
//! prints one line every 30 s, so a long build still shows it is alive.

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::io::IsTerminal;
use std::time::{Duration, Instant};

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

/// A pass over `total` bytes of input.
pub(crate) struct ByteProgress {
    bar: ProgressBar,
    what: &'static str,
    total: u64,
    start: Instant,
    last_line: Instant,
    terminal: bool,
}

impl ByteProgress {
    pub(crate) fn new(what: &'static str, total: u64) -> ByteProgress {
        let bar = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr());
        bar.set_style(
            ProgressStyle::with_template(
                "data: {prefix} [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec} ETA {eta} {msg}",
            )
            .expect("a valid template")
            .progress_chars("=> "),
        );
        bar.set_prefix(what);
        let now = Instant::now();
        ByteProgress { bar, what, total, start: now, last_line: now, terminal: std::io::stderr().is_terminal() }
    }

    /// Bytes read so far, and a note such as the documents and tokens done.
    pub(crate) fn update(&mut self, bytes: u64, note: impl FnOnce() -> String) {
        if self.terminal {
            self.bar.set_position(bytes);
            self.bar.set_message(note());
        } else if self.last_line.elapsed() >= Duration::from_secs(30) {
            self.last_line = Instant::now();
            let secs = self.start.elapsed().as_secs_f64();
            let pct = if self.total > 0 { 100.0 * bytes as f64 / self.total as f64 } else { 100.0 };
            eprintln!(
                "data: {}: {:.1}% of {} MB, {:.1} MB/s, {}",
                self.what,
                pct,
                self.total / 1_000_000,
                bytes as f64 / 1e6 / secs.max(1e-9),
                note()
            );
        }
    }
}

impl Drop for ByteProgress {
    fn drop(&mut self) {
        self.bar.finish_and_clear();
    }
}
