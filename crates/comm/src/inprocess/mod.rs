//! The in-process backend: every rank is an OS thread of this process and collectives go
//! through shared memory.
//!
//! # Protocol
//!
//! Each group keeps one mutex-protected state and a condvar. A collective is a sequence of
//! *rounds*; a round is a barrier (a generation counter: the last rank to arrive runs the
//! round's action under the lock, bumps the generation and wakes everyone). Waiting is
//! `Condvar::wait_timeout`, never spinning, so any number of ranks runs on any number of cores.
//!
//! * Arrival (every collective): each rank publishes its call descriptor and the address of
//!   its buffer. The last arriver compares the descriptors (kind, dtype, element count, root,
//!   label) and records a mismatch verdict every rank then reports.
//! * all_reduce / reduce_scatter: after arrival, rank r reduces a fixed chunk of the elements,
//!   reading every rank's buffer in rank order 0..p−1 into the group's scratch buffer; a
//!   completion round; then every rank copies its result out of the scratch. Each element is
//!   combined by exactly one thread in a fixed order, so every rank reads the same bits,
//!   whatever the timing. The scratch is not touched again before the next arrival round,
//!   which no rank passes before every rank has finished copying.
//! * all_gather / broadcast: after arrival each rank copies the chunks it lacks straight from
//!   the owners' buffers; a departure round keeps every buffer alive and unchanged until all
//!   copies are done.
//! * barrier, split: the arrival round alone.
//! * send / recv: eager; a send copies the message into a per-(src, dst) queue (buffers are
//!   pooled, so a steady state does not allocate) and returns; a recv takes the oldest
//!   message with its tag.
//!
//! # Failures
//!
//! The universe has a poison flag holding the first failure (rank, the call it was in, the
//! message). Any error raised here (mismatch, timeout, a peer that returned early, invalid
//! arguments) poisons the universe from the rank that saw it; [`InProcess::poison`] does
//! so for errors and panics outside communication (the runner calls it). Poisoning wakes every
//! waiter of every group, and every waiting or later call returns
//! [`crate::CommError::PeerFailed`] naming the failed rank. A rank that returns normally is marked
//! exited ([`InProcess::mark_exited`]); a call waiting for it fails at once. Every wait also
//! has a deadline ([`InProcessOptions::deadline`]).

mod collectives;
mod comm;
mod p2p;
mod rendezvous;
mod universe;

pub use comm::InProcessComm;

use crate::call::Activity;
use crate::communicator::Communicator;
use crate::error::Failure;
use rendezvous::GroupShared;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use universe::Universe;

/// Settings of an in-process universe.
#[derive(Debug, Clone, Copy)]
pub struct InProcessOptions {
    /// How long one wait may last before it fails naming the ranks it waited for.
    pub deadline: Duration,
    /// Whether collectives must also agree on their label (kind, dtype, element count and
    /// root are always checked).
    pub check_labels: bool,
}

impl Default for InProcessOptions {
    fn default() -> Self {
        Self { deadline: Duration::from_secs(300), check_labels: true }
    }
}

impl InProcessOptions {
    pub fn deadline(mut self, d: Duration) -> Self {
        self.deadline = d;
        self
    }
    pub fn check_labels(mut self, on: bool) -> Self {
        self.check_labels = on;
        self
    }
}

/// An in-process universe of `size` ranks. Cheap to clone (an `Arc`).
#[derive(Clone)]
pub struct InProcess {
    uni: Arc<Universe>,
}

impl InProcess {
    pub fn new(size: usize) -> Self {
        Self::with_options(size, InProcessOptions::default())
    }

    pub fn with_options(size: usize, opts: InProcessOptions) -> Self {
        assert!(size > 0, "an in-process universe needs at least one rank");
        Self {
            uni: Arc::new(Universe {
                size,
                opts,
                poisoned: AtomicBool::new(false),
                failure: Mutex::new(None),
                exited: (0..size).map(|_| AtomicBool::new(false)).collect(),
                activity: (0..size).map(|_| Mutex::new(Activity::default())).collect(),
                groups: Mutex::new(Vec::new()),
                handed_out: AtomicBool::new(false),
            }),
        }
    }

    pub fn size(&self) -> usize {
        self.uni.size
    }

    pub fn options(&self) -> InProcessOptions {
        self.uni.opts
    }

    /// The world communicator of every rank (index = rank); hand each to its own thread.
    ///
    /// # Panics
    /// On a second call: two handles of one rank would corrupt the protocol.
    pub fn communicators(&self) -> Vec<Box<dyn Communicator>> {
        assert!(!self.uni.handed_out.swap(true, Ordering::AcqRel), "InProcess::communicators called twice");
        let world = GroupShared::new(&self.uni, (0..self.uni.size).collect());
        (0..self.uni.size)
            .map(|rank| Box::new(InProcessComm { g: world.clone(), rank }) as Box<dyn Communicator>)
            .collect()
    }

    /// Record `rank`'s failure (the first one wins) and wake every waiter; every waiting and
    /// later call fails naming it. Returns whether this was the first failure.
    pub fn poison(&self, rank: usize, message: impl Into<String>) -> bool {
        self.uni.poison(rank, message.into())
    }

    /// Mark `rank` as returned normally: calls waiting for it fail at once.
    pub fn mark_exited(&self, rank: usize) {
        self.uni.mark_exited(rank);
    }

    /// The first failure, if any.
    pub fn failure(&self) -> Option<Failure> {
        self.uni.failure()
    }

    /// A guard for the thread running `rank`: unless [`RankGuard::finish`] or
    /// [`RankGuard::fail`] is called, dropping it (a panic unwinding, an early return)
    /// poisons the universe.
    pub fn guard(&self, rank: usize) -> RankGuard {
        assert!(rank < self.uni.size, "rank {rank} out of range for {} ranks", self.uni.size);
        RankGuard { uni: self.clone(), rank, done: false }
    }
}

/// Poisons the universe if its thread ends without reporting (see [`InProcess::guard`]).
pub struct RankGuard {
    uni: InProcess,
    rank: usize,
    done: bool,
}

impl RankGuard {
    pub fn rank(&self) -> usize {
        self.rank
    }
    /// The rank returned normally.
    pub fn finish(mut self) {
        self.done = true;
        self.uni.mark_exited(self.rank);
    }
    /// The rank failed with `message`.
    pub fn fail(mut self, message: impl Into<String>) {
        self.done = true;
        self.uni.poison(self.rank, message);
    }
}

impl Drop for RankGuard {
    fn drop(&mut self) {
        if !self.done {
            let msg = if std::thread::panicking() { "panicked" } else { "ended without reporting success" };
            self.uni.poison(self.rank, msg);
        }
    }
}
