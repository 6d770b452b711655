//! The MPI communicator handle: its staging buffers, how a call starts, waits and fails, and
//! the `Communicator` methods over the collectives and point-to-point modules.
//!
//! The `mpi` crate's safe requests borrow the caller's buffers and must be completed before
//! their scope ends (dropping one aborts the process). A call that gives up at its deadline
//! leaves its operation pending, so it cannot hand MPI a buffer the caller will free. Every
//! operation here works on staging buffers owned by the communicator (copied in and out), and
//! after a failure those buffers are never freed: a pending operation can only ever write
//! memory it owns. The `mpi` crate provides initialisation and finalisation (its `Universe`)
//! and the bindings.

use crate::process::Process;
use crate::raw::{Comm, mpi_error, null_request};
use crate::wait::{WaitError, wait_all};
use ::mpi::ffi;
use boost_comm::Communicator;
use boost_comm::Kind;
use boost_comm::backend::CallDesc;
use boost_comm::backend::in_group;
use boost_comm::backend::lock;
use boost_comm::backend::typed_calls;
use boost_comm::mpi::MpiOptions;
use boost_comm::{CommError, CommResult};
use boost_tensor::Label;
use std::os::raw::c_int;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

/// Staging buffers MPI reads and writes (never the caller's).
#[derive(Default)]
pub(crate) struct Scratch {
    pub(crate) a: Vec<u64>,
    pub(crate) b: Vec<u64>,
    pub(crate) c: Vec<u64>,
}

/// One process's handle on one MPI communicator (the world, or a split of it).
pub struct MpiComm {
    pub(crate) proc: &'static Process,
    pub(crate) comm: Comm,
    pub(crate) rank: usize,
    pub(crate) size: usize,
    /// World rank of each group rank.
    pub(crate) members: Box<[usize]>,
    pub(crate) opts: MpiOptions,
    pub(crate) scratch: Mutex<Scratch>,
    /// Collectives issued on this group (numbers calls in mismatch messages).
    pub(crate) seq: AtomicU64,
}

impl std::fmt::Debug for MpiComm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MpiComm").field("rank", &self.rank).field("members", &self.members).finish()
    }
}

impl Drop for MpiComm {
    fn drop(&mut self) {
        if self.proc.poisoned.load(Ordering::Acquire) {
            // An operation given up at its deadline may still write these buffers.
            std::mem::forget(std::mem::take(self.scratch.get_mut().unwrap_or_else(|e| e.into_inner())));
            return;
        }
        if !self.proc.finalized.load(Ordering::Acquire) {
            let mut c = self.comm.0;
            // SAFETY: this handle owns the communicator (a dup or split) and nothing is pending
            // on it (no failure: every call completed its operations).
            self.proc.call(|| unsafe { ffi::MPI_Comm_free(&mut c) });
        }
    }
}

impl MpiComm {
    pub(crate) fn new(proc: &'static Process, comm: Comm, members: Box<[usize]>, opts: MpiOptions) -> Self {
        let rank = members.iter().position(|&m| m == proc.rank).expect("a group holds its own rank");
        Self {
            proc,
            comm,
            rank,
            size: members.len(),
            members,
            opts,
            scratch: Mutex::new(Scratch::default()),
            seq: AtomicU64::new(0),
        }
    }

    /// World rank of this handle.
    pub fn global_rank(&self) -> usize {
        self.proc.rank
    }
    /// World ranks of the group, by group rank.
    pub fn members(&self) -> &[usize] {
        &self.members
    }
    pub fn options(&self) -> MpiOptions {
        self.opts
    }

    pub(crate) fn is_world(&self) -> bool {
        self.members.len() == self.proc.size
    }

    pub(crate) fn describe(&self, desc: &CallDesc) -> String {
        format!("{desc}{}", in_group(&self.members, self.is_world()))
    }

    pub(crate) fn invalid(&self, desc: &CallDesc, what: String) -> CommError {
        CommError::Invalid(format!("rank {}: {}: {what}", self.proc.rank, self.describe(desc)))
    }

    pub(crate) fn mpi_failed(&self, desc: &CallDesc, what: &str, detail: String) -> CommError {
        CommError::Invalid(format!("rank {}: {}: {what} failed: {detail}", self.proc.rank, self.describe(desc)))
    }

    /// Start an operation: run `f` under the process lock, mapping its return code.
    pub(crate) fn start(&self, desc: &CallDesc, what: &str, f: impl FnOnce() -> c_int) -> CommResult<()> {
        match self.proc.call(f) {
            0 => Ok(()),
            rc => Err(self.mpi_failed(desc, what, mpi_error(rc))),
        }
    }

    /// `n` as an MPI count.
    pub(crate) fn count(&self, desc: &CallDesc, n: usize) -> CommResult<c_int> {
        c_int::try_from(n).map_err(|_| self.invalid(desc, format!("{n} elements exceed MPI's count limit")))
    }

    pub(crate) fn late_note(&self) -> &'static str {
        if self.opts.check { "" } else { " (MPI does not tell which rank is late; BOOST_MPI_CHECK=1 does)" }
    }

    /// Wait for the operations of a collective.
    pub(crate) fn wait(
        &self,
        desc: &CallDesc,
        what: &str,
        reqs: &mut [ffi::MPI_Request],
        start: Instant,
    ) -> CommResult<()> {
        let deadline = start + self.opts.deadline;
        wait_all(self.proc, reqs, deadline).map_err(|e| match e {
            WaitError::Mpi(m) => self.mpi_failed(desc, what, m),
            WaitError::Timeout(_) => CommError::Timeout {
                rank: self.proc.rank,
                waited_s: start.elapsed().as_secs_f64(),
                call: format!("{}{}", self.describe(desc), self.late_note()),
                missing: self.members.iter().copied().filter(|&r| r != self.proc.rank).collect(),
            },
        })
    }

    /// Run `body` as the call `desc`: fail at once after a failure, keep the rank's activity
    /// for failure messages, and record an error raised here as this rank's failure.
    pub(crate) fn call<R>(&self, desc: CallDesc, body: impl FnOnce(&mut Scratch) -> CommResult<R>) -> CommResult<R> {
        self.call_bare(desc, || body(&mut lock(&self.scratch)))
    }

    /// [`MpiComm::call`] without the handle's scratch buffers. A send needs none, and must not
    /// wait for them: with overlap a progress thread sends on a handle while another of its
    /// threads waits for a receive holding them.
    pub(crate) fn call_bare<R>(&self, desc: CallDesc, body: impl FnOnce() -> CommResult<R>) -> CommResult<R> {
        let p = self.proc;
        if let Some(f) = p.failure() {
            return Err(CommError::PeerFailed(f));
        }
        if p.finalized.load(Ordering::Acquire) {
            return Err(self.invalid(&desc, "MPI has been finalised".into()));
        }
        lock(&p.activity).begin(desc);
        let r = match p.reap_sends() {
            Ok(()) => body(),
            Err(e) => Err(self.mpi_failed(&desc, "an earlier send", e)),
        };
        if let Err(e) = &r
            && !matches!(e, CommError::PeerFailed(_))
        {
            p.poison(e.to_string());
        }
        lock(&p.activity).end(desc);
        r
    }
}

impl Communicator for MpiComm {
    fn rank(&self) -> usize {
        self.rank
    }
    fn size(&self) -> usize {
        self.size
    }
    typed_calls!();
    fn barrier(&self, label: Label) -> CommResult<()> {
        let desc = CallDesc::new(Kind::Barrier, label);
        self.call(desc, |s| {
            let start = Instant::now();
            if self.size == 1 {
                return Ok(());
            }
            self.arrive(&desc, &mut s.c, start)?;
            let mut req = [null_request()];
            // SAFETY: out-pointer to a local that outlives the wait.
            self.start(&desc, "MPI_Ibarrier", || unsafe { ffi::MPI_Ibarrier(self.comm.0, &mut req[0]) })?;
            self.wait(&desc, "MPI_Ibarrier", &mut req, start)
        })
    }
    fn split(&self, color: usize, key: usize) -> CommResult<Box<dyn Communicator>> {
        self.split_t(color, key)
    }
}
