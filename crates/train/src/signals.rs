//! SIGINT and SIGTERM end a run cleanly: the first asks every rank to stop at the next step
//! boundary (the ranks agree through the end-of-step loss report, so all stop at the same
//! step), a final checkpoint is written (`train.checkpoint_on_signal`), and the process
//! exits 128 + the signal's number. A second signal exits at once, saying that a checkpoint being
//! written was abandoned. Before the first step,
//! while the data is prepared, a signal ends the process at once instead ([`exit_during`]).
//! The handlers are boost_files's one registration ([`boost_files::signals`]), recording.

use anyhow::Result;
use boost_files::signals::FirstSignal;

pub use boost_files::signals::{exit_during, received, request};

/// What a second signal prints before it exits (no formatting in a signal handler).
const SECOND: &[u8] = b"\nsecond signal: exiting at once; a checkpoint being written was abandoned (its temporary folder is removed at the next start) and checkpoints/latest still names the last complete one: continue with `boost train --resume`\n";

/// Install the handlers (the `boost` binary does; library users and tests need not).
pub fn install() -> Result<()> {
    boost_files::signals::install(FirstSignal::Record { second: SECOND })
}
