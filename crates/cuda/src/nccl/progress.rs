//! NCCL's non-blocking mode, bounded by a deadline.
//!
//! A blocking `ncclCommInitRank` waits for every rank of the group with no limit: a rank that
//! died or never reached the group leaves the others hanging. Communicators here are made
//! non-blocking instead (`blocking = 0` in their config): every NCCL call on them returns at
//! once, `ncclInProgress` while NCCL works in the background, and is then polled with
//! `ncclCommGetAsyncError` until it is done, fails, or the deadline passes. On a failure or
//! at the deadline the communicator is aborted (`ncclCommAbort`, which also stops the work it
//! had queued) and the caller gets an error naming the call and the rank.
//!
//! What this bounds: the initialisation, a split, NCCL's lazy connection set-up inside the
//! first collective on a pair of ranks, and the finalisation in `Drop`. A collective already
//! running on the GPU when a peer dies is seen by the host only when it waits for the stream.

use cudarc::nccl::sys as ns;
use std::ffi::{c_char, c_int, c_uint};
use std::time::{Duration, Instant};

/// What one look at a communicator's background work says.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Poll {
    Done,
    Pending,
    Failed(String),
}

/// Polls until `poll` says done. On a failure, or when `timeout` has passed, calls `abort`
/// once and returns an error naming `what`.
pub(crate) fn await_done(
    what: &str,
    timeout: Duration,
    mut poll: impl FnMut() -> Poll,
    abort: impl FnOnce(),
) -> Result<(), String> {
    let t0 = Instant::now();
    // Short naps first (a collective's connection set-up takes milliseconds), then longer
    // ones (an initialisation waiting for other ranks can take seconds).
    let mut nap = Duration::from_micros(50);
    loop {
        match poll() {
            Poll::Done => return Ok(()),
            Poll::Failed(e) => {
                abort();
                return Err(format!("{what} failed: {e}"));
            }
            Poll::Pending if t0.elapsed() > timeout => {
                abort();
                return Err(format!(
                    "{what} did not complete within {timeout:?}: another rank of the group did not reach \
                     it (it may have failed or stopped; its own log names why)"
                ));
            }
            Poll::Pending => {
                std::thread::sleep(nap);
                nap = (nap * 2).min(Duration::from_millis(20));
            }
        }
    }
}

/// One look at `comm`'s background work.
pub(crate) fn poll_comm(comm: ns::ncclComm_t) -> Poll {
    let mut state = ns::ncclResult_t::ncclSuccess;
    // SAFETY: a communicator made by NCCL and not yet destroyed or aborted.
    let r = unsafe { ns::ncclCommGetAsyncError(comm, &mut state) };
    if r != ns::ncclResult_t::ncclSuccess {
        return Poll::Failed(format!("ncclCommGetAsyncError: {r:?}"));
    }
    match state {
        ns::ncclResult_t::ncclSuccess => Poll::Done,
        ns::ncclResult_t::ncclInProgress => Poll::Pending,
        e => Poll::Failed(format!("{e:?}")),
    }
}

/// Stops `comm`'s work and frees it; it must not be used afterwards.
pub(crate) fn abort_comm(comm: ns::ncclComm_t) {
    // SAFETY: a communicator made by NCCL; the caller drops it after this.
    unsafe {
        let _ = ns::ncclCommAbort(comm);
    }
}

/// The leading fields of `ncclConfig_t`, those of NCCL 2.18 (later versions append theirs).
/// NCCL copies a config by the `size` it carries and reads the fields its `version` has, so
/// every later NCCL takes this one too, whatever header version cudarc's bindings come from.
/// The fields left undefined keep NCCL's defaults.
#[repr(C)]
pub(crate) struct ConfigV2_18 {
    size: usize,
    magic: c_uint,
    version: c_uint,
    blocking: c_int,
    cga_cluster_size: c_int,
    min_ctas: c_int,
    max_ctas: c_int,
    net_name: *const c_char,
    split_share: c_int,
}

/// `NCCL_CONFIG_UNDEF_INT`: "use NCCL's default".
const UNDEF_INT: c_int = c_int::MIN;

impl ConfigV2_18 {
    /// `NCCL_CONFIG_INITIALIZER` of NCCL 2.18 with `blocking = 0`.
    pub(crate) fn non_blocking() -> Self {
        Self {
            size: std::mem::size_of::<Self>(),
            magic: 0xcafe_beef,
            // NCCL_VERSION(2, 18, 0).
            version: 2 * 10_000 + 18 * 100,
            blocking: 0,
            cga_cluster_size: UNDEF_INT,
            min_ctas: UNDEF_INT,
            max_ctas: UNDEF_INT,
            net_name: std::ptr::null(),
            split_share: UNDEF_INT,
        }
    }

    /// The pointer NCCL's functions take.
    pub(crate) fn as_ptr(&mut self) -> *mut ns::ncclConfig_t {
        (self as *mut Self).cast()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;
    use std::mem::offset_of;

    #[test]
    fn a_call_that_completes_after_a_few_polls_is_not_aborted() {
        let (polls, aborts) = (Cell::new(0), Cell::new(0));
        let poll = || {
            polls.set(polls.get() + 1);
            if polls.get() < 4 { Poll::Pending } else { Poll::Done }
        };
        let r = await_done("ncclCommInitRankConfig (rank 1 of 2)", Duration::from_secs(5), poll, || {
            aborts.set(aborts.get() + 1)
        });
        assert_eq!(r, Ok(()));
        assert_eq!((polls.get(), aborts.get()), (4, 0));
    }

    #[test]
    fn a_call_that_never_completes_is_aborted_once_at_the_deadline_with_an_error_naming_it() {
        let aborts = Cell::new(0);
        let timeout = Duration::from_millis(150);
        let t0 = Instant::now();
        let r = await_done(
            "ncclCommInitRankConfig (rank 1 of 2)",
            timeout,
            || Poll::Pending,
            || aborts.set(aborts.get() + 1),
        );
        let took = t0.elapsed();
        let e = r.unwrap_err();
        assert!(e.contains("ncclCommInitRankConfig (rank 1 of 2) did not complete within 150ms"), "{e}");
        assert!(e.contains("another rank of the group did not reach it"), "{e}");
        assert_eq!(aborts.get(), 1);
        // The deadline, plus at most one nap (20 ms) and scheduling slack.
        assert!(took >= timeout && took < timeout + Duration::from_secs(2), "{took:?}");
    }

    #[test]
    fn a_failure_reported_by_nccl_aborts_at_once_and_names_the_error() {
        let aborts = Cell::new(0);
        let mut polls = 0;
        let poll = || {
            polls += 1;
            if polls < 3 { Poll::Pending } else { Poll::Failed("ncclRemoteError".into()) }
        };
        let r = await_done("all_reduce at dp/bucket 3 (rank 0 of 2)", Duration::from_secs(60), poll, || {
            aborts.set(aborts.get() + 1)
        });
        assert_eq!(r, Err("all_reduce at dp/bucket 3 (rank 0 of 2) failed: ncclRemoteError".to_string()));
        assert_eq!(aborts.get(), 1);
    }

    #[test]
    fn the_config_matches_the_leading_fields_of_the_bindings_config() {
        // Whatever NCCL version cudarc's bindings describe, its config starts with the 2.18
        // fields at the same offsets; NCCL reads only `size` bytes of ours.
        type C = ns::ncclConfig_t;
        type Ours = ConfigV2_18;
        assert_eq!(offset_of!(Ours, size), offset_of!(C, size));
        assert_eq!(offset_of!(Ours, magic), offset_of!(C, magic));
        assert_eq!(offset_of!(Ours, version), offset_of!(C, version));
        assert_eq!(offset_of!(Ours, blocking), offset_of!(C, blocking));
        assert_eq!(offset_of!(Ours, cga_cluster_size), offset_of!(C, cgaClusterSize));
        assert_eq!(offset_of!(Ours, min_ctas), offset_of!(C, minCTAs));
        assert_eq!(offset_of!(Ours, max_ctas), offset_of!(C, maxCTAs));
        assert_eq!(offset_of!(Ours, net_name), offset_of!(C, netName));
        assert_eq!(offset_of!(Ours, split_share), offset_of!(C, splitShare));
        assert!(std::mem::size_of::<Ours>() <= std::mem::size_of::<C>());
        let c = ConfigV2_18::non_blocking();
        assert_eq!((c.size, c.magic, c.version, c.blocking), (std::mem::size_of::<Ours>(), 0xcafebeef, 21800, 0));
    }
}
