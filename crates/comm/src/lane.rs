//! A group's progress threads: started (non-blocking) calls run here, one at a time in the
//! order they were started, on a communicator split off the group for them alone, so they
//! never interleave with the group's blocking calls. Every rank of a group starts the same
//! calls in the same order, so the lanes of a group meet call for call, exactly as blocking
//! calls do; the backend's own deadlines, mismatch checks and failure propagation apply.
//!
//! The thread sleeps on a channel (a condvar underneath) between calls and a waiting caller
//! sleeps on its call's channel: nothing spins, so any number of ranks shares any number of
//! cores.

use crate::communicator::Communicator;
use crate::error::CommResult;
use crate::lock::lock;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::thread::JoinHandle;

/// A queued call: runs on the lane's communicator.
pub(crate) type Job = Box<dyn FnOnce(&dyn Communicator) + Send>;

/// One thread and its queue.
struct Worker {
    tx: Mutex<Option<mpsc::Sender<Job>>>,
    thread: Mutex<Option<JoinHandle<()>>>,
    /// Calls queued or running.
    busy: Arc<AtomicUsize>,
}

impl Worker {
    fn spawn(comm: Arc<dyn Communicator>, name: String) -> CommResult<Worker> {
        let (tx, rx) = mpsc::channel::<Job>();
        let busy = Arc::new(AtomicUsize::new(0));
        let b = busy.clone();
        let thread = std::thread::Builder::new()
            .name(name)
            .spawn(move || {
                while let Ok(job) = rx.recv() {
                    job(&*comm);
                    b.fetch_sub(1, Ordering::AcqRel);
                }
            })
            .map_err(|e| crate::CommError::Invalid(format!("could not start a progress thread: {e}")))?;
        Ok(Worker { tx: Mutex::new(Some(tx)), thread: Mutex::new(Some(thread)), busy })
    }

    fn submit(&self, job: Job) -> bool {
        let tx = lock(&self.tx);
        let Some(tx) = tx.as_ref() else { return false };
        self.busy.fetch_add(1, Ordering::AcqRel);
        if tx.send(job).is_err() {
            self.busy.fetch_sub(1, Ordering::AcqRel);
            return false;
        }
        true
    }

    /// Close the queue. An idle thread is joined (it releases its communicator before the
    /// caller goes on, e.g. to finalise MPI); one still inside a call — a rank failing with
    /// calls in flight — is left to finish it: the failure that ends the rank also ends that
    /// call within the backend's deadline, and joining here could wait on a peer that waits
    /// on this rank's failure report.
    fn close(&self) {
        lock(&self.tx).take();
        let idle = self.busy.load(Ordering::Acquire) == 0 && !std::thread::panicking();
        if let Some(t) = lock(&self.thread).take()
            && idle
        {
            let _ = t.join();
        }
    }
}

/// One rank's progress threads for one group: collectives and receives in start order on
/// one, sends on another. Sends are eager in every backend (they never wait for their
/// receive), so a receive posted ahead can wait on its lane while this rank's own sends
/// still leave.
pub(crate) struct Lane {
    calls: Worker,
    sends: Worker,
}

impl Lane {
    /// Start the threads `name`, `name`-send over `comm` (the group's split for started calls).
    pub(crate) fn spawn(comm: Box<dyn Communicator>, name: String) -> CommResult<Lane> {
        let comm: Arc<dyn Communicator> = comm.into();
        Ok(Lane {
            calls: Worker::spawn(comm.clone(), name.clone())?,
            sends: Worker::spawn(comm, format!("{name}-send"))?,
        })
    }

    /// Queue `job`; false if the thread is gone.
    pub(crate) fn submit(&self, job: Job, send: bool) -> bool {
        if send { self.sends.submit(job) } else { self.calls.submit(job) }
    }
}

impl Drop for Lane {
    fn drop(&mut self) {
        self.sends.close();
        self.calls.close();
    }
}
