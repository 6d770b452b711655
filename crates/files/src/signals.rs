//! The one registration of SIGINT and SIGTERM. Whatever the command, a second signal exits at
//! once with 128 + its number (after a message, where the command has one to give); the first
//! either ends a command that builds its output beside it at once, removing what it had built
//! ([`FirstSignal::CleanUpAndExit`], `boost data`, `export`, `import`), or is only recorded for
//! a run to stop at its next step boundary ([`FirstSignal::Record`], `boost train`, which reads
//! [`received`]).

use crate::interrupt::{clean_up_and_exit, exit_on_signal_during};
use anyhow::{Context, Result};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};

/// What the first SIGINT or SIGTERM does.
#[derive(Debug, Clone, Copy)]
pub enum FirstSignal {
    /// Wait for a critical section in progress, remove the pending temporary paths and exit
    /// with 128 + the signal's number ([`clean_up_and_exit`]).
    CleanUpAndExit,
    /// Record the signal ([`received`]); `second` is what a second signal prints before it
    /// exits (no formatting in a signal handler).
    Record { second: &'static [u8] },
}

/// The first signal received under [`FirstSignal::Record`] (0: none). Process-wide: every
/// in-process rank reads it.
static RECEIVED: AtomicI32 = AtomicI32::new(0);
/// Whether the handlers record the signal, for [`exit_during`].
static RECORDING: AtomicBool = AtomicBool::new(false);

/// Installs the handlers (the `boost` binary does; library users and tests need not).
#[cfg(unix)]
pub fn install(first: FirstSignal) -> Result<()> {
    use signal_hook::consts::{SIGINT, SIGTERM};
    let seen = Arc::new(AtomicBool::new(false));
    let second: &'static [u8] = match first {
        FirstSignal::CleanUpAndExit => b"",
        FirstSignal::Record { second } => second,
    };
    // Registered before the flag is set, so they see it as it was before this signal: the
    // second signal of either kind exits at once.
    for sig in [SIGINT, SIGTERM] {
        let earlier = seen.clone();
        // SAFETY: the handler only loads an atomic, writes a static message and exits, all
        // async-signal-safe.
        unsafe {
            signal_hook::low_level::register(sig, move || {
                if earlier.load(Ordering::SeqCst) {
                    if !second.is_empty() {
                        let _ = libc::write(2, second.as_ptr().cast(), second.len());
                    }
                    libc::_exit(128 + sig);
                }
            })
        }
        .context("installing the signal handlers")?;
    }
    for sig in [SIGINT, SIGTERM] {
        signal_hook::flag::register(sig, seen.clone()).context("installing the signal handlers")?;
    }
    match first {
        FirstSignal::CleanUpAndExit => {
            let mut signals =
                signal_hook::iterator::Signals::new([SIGINT, SIGTERM]).context("installing the signal handlers")?;
            std::thread::Builder::new()
                .name("interrupt".into())
                .spawn(move || {
                    if let Some(sig) = signals.forever().next() {
                        clean_up_and_exit(sig);
                    }
                })
                .context("starting the signal thread")?;
        }
        FirstSignal::Record { .. } => {
            for sig in [SIGINT, SIGTERM] {
                // SAFETY: the handler only stores into an atomic, which is async-signal-safe.
                unsafe {
                    signal_hook::low_level::register(sig, move || {
                        let _ = RECEIVED.compare_exchange(0, sig, Ordering::SeqCst, Ordering::SeqCst);
                    })
                }
                .context("installing the signal handlers")?;
            }
            RECORDING.store(true, Ordering::SeqCst);
        }
    }
    Ok(())
}

/// Elsewhere the signals keep their default action.
#[cfg(not(unix))]
pub fn install(_: FirstSignal) -> Result<()> {
    Ok(())
}

/// Runs `f` (a run's data preparation, before its first step) so that a recorded signal
/// during it ends the process at once, removing what was being built, as
/// [`FirstSignal::CleanUpAndExit`] does: there is no step boundary yet to stop at. Only with
/// the handlers recording; otherwise `f` just runs.
pub fn exit_during<R>(f: impl FnOnce() -> R) -> R {
    if RECORDING.load(Ordering::SeqCst) { exit_on_signal_during(received, f) } else { f() }
}

/// The signal that asked this process to stop, if any.
pub fn received() -> Option<i32> {
    match RECEIVED.load(Ordering::SeqCst) {
        0 => None,
        s => Some(s),
    }
}

/// Ask the process to stop as if `signal` had arrived (failure tests).
pub fn request(signal: i32) {
    let _ = RECEIVED.compare_exchange(0, signal, Ordering::SeqCst, Ordering::SeqCst);
}
