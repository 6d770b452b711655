//! SIGINT and SIGTERM end a run cleanly: the first asks every rank to stop at the next step
//! boundary (the ranks agree through the end-of-step loss report, so all stop at the same
//! step), a final checkpoint is written (`train.checkpoint_on_signal`), and the process
//! exits 128 + the signal's number. A second signal exits at once, saying that a checkpoint being
//! written was abandoned. Before the first step,
//! while the data is prepared, a signal ends the process at once instead ([`exit_during`]).

use anyhow::{Context, Result};
use signal_hook::consts::{SIGINT, SIGTERM};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};

/// The first signal received (0: none). Process-wide: every in-process rank reads it.
static RECEIVED: AtomicI32 = AtomicI32::new(0);
/// Whether [`install`] ran (the `boost` binary), for [`exit_during`].
static INSTALLED: AtomicBool = AtomicBool::new(false);

/// What a second signal prints before it exits (no formatting in a signal handler).
const SECOND: &[u8] = b"\nsecond signal: exiting at once; a checkpoint being written was abandoned (its temporary folder is removed at the next start) and checkpoints/latest still names the last complete one: continue with `boost train --resume`\n";

/// Install the handlers (the `boost` binary does; library users and tests need not).
pub fn install() -> Result<()> {
    let seen = Arc::new(AtomicBool::new(false));
    // Registered before the flag is set, so they see it as it was before this signal: the
    // second signal of either kind exits at once, saying what that leaves.
    for sig in [SIGINT, SIGTERM] {
        let first = seen.clone();
        // SAFETY: the handler only loads an atomic, writes a static message and exits, all
        // async-signal-safe.
        unsafe {
            signal_hook::low_level::register(sig, move || {
                if first.load(Ordering::SeqCst) {
                    let _ = libc::write(2, SECOND.as_ptr().cast(), SECOND.len());
                    libc::_exit(128 + sig);
                }
            })
        }
        .context("installing the signal handlers")?;
    }
    for sig in [SIGINT, SIGTERM] {
        signal_hook::flag::register(sig, seen.clone()).context("installing the signal handlers")?;
        // SAFETY: the handler only stores into an atomic, which is async-signal-safe.
        unsafe {
            signal_hook::low_level::register(sig, move || {
                let _ = RECEIVED.compare_exchange(0, sig, Ordering::SeqCst, Ordering::SeqCst);
            })
        }
        .context("installing the signal handlers")?;
    }
    INSTALLED.store(true, Ordering::SeqCst);
    Ok(())
}

/// Runs `f` (the data's preparation, before the first step: the demo corpus's download and
/// build) so that a signal during it ends the process at once, removing what was being built,
/// as `boost data` does: there is no step boundary yet to stop at. Only with the handlers
/// installed; in library use `f` just runs.
pub fn exit_during<R>(f: impl FnOnce() -> R) -> R {
    if INSTALLED.load(Ordering::SeqCst) { boost_data::interrupt::exit_on_signal_during(received, f) } else { f() }
}

/// The signal that asked this process to stop, if any.
pub fn received() -> Option<i32> {
    match RECEIVED.load(Ordering::SeqCst) {
        0 => None,
        s => Some(s),
    }
}

/// Ask the run to stop as if `signal` had arrived (failure tests).
pub fn request(signal: i32) {
    let _ = RECEIVED.compare_exchange(0, signal, Ordering::SeqCst, Ordering::SeqCst);
}
