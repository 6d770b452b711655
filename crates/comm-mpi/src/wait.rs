//! Waiting for non-blocking operations: polling `MPI_Test` with a backoff until every
//! request is done or the deadline passes.

use crate::process::Process;
use crate::raw::{mpi_error, null_request};
use ::mpi::ffi;
use std::os::raw::c_int;
use std::time::{Duration, Instant};

/// Pauses between polls: yields the core (`sched_yield`, like OpenMPI's
/// `mpi_yield_when_idle`) for the first 2 ms of a wait, then sleeps 50 µs doubling to 500 µs.
/// Short waits keep MPI's progress going (non-blocking collectives advance only inside
/// `MPI_Test`); long ones leave the cores to the ranks that work.
pub(crate) struct Backoff {
    start: Instant,
    sleep: Duration,
}

impl Backoff {
    const SPIN: Duration = Duration::from_millis(2);
    const MAX_SLEEP: Duration = Duration::from_micros(500);

    pub(crate) fn new() -> Self {
        Self { start: Instant::now(), sleep: Duration::from_micros(50) }
    }
    pub(crate) fn snooze(&mut self) {
        if self.start.elapsed() < Self::SPIN {
            std::thread::yield_now();
        } else {
            std::thread::sleep(self.sleep);
            self.sleep = (self.sleep * 2).min(Self::MAX_SLEEP);
        }
    }
}

pub(crate) enum WaitError {
    /// Indices of the requests still pending at the deadline.
    Timeout(Vec<usize>),
    Mpi(String),
}

/// Poll `reqs` (MPI sets completed ones to `MPI_REQUEST_NULL`) until all are done or
/// `deadline` passes.
pub(crate) fn wait_all(proc: &Process, reqs: &mut [ffi::MPI_Request], deadline: Instant) -> Result<(), WaitError> {
    let null = null_request();
    let mut backoff = Backoff::new();
    loop {
        let mut pending = false;
        for r in reqs.iter_mut() {
            if *r == null {
                continue;
            }
            let mut flag: c_int = 0;
            // SAFETY: `r` is a live request whose buffers outlive it (owned by the caller's
            // communicator, leaked if it gives up).
            let rc = proc.call(|| unsafe { ffi::MPI_Test(r, &mut flag, ffi::RSMPI_STATUS_IGNORE) });
            if rc != 0 {
                return Err(WaitError::Mpi(mpi_error(rc)));
            }
            if flag == 0 {
                pending = true;
            }
        }
        if !pending {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(WaitError::Timeout(
                reqs.iter().enumerate().filter(|(_, r)| **r != null).map(|(i, _)| i).collect(),
            ));
        }
        backoff.snooze();
        if let Err(e) = proc.reap_sends() {
            return Err(WaitError::Mpi(e));
        }
    }
}
