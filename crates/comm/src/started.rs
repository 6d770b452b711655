//! Non-blocking calls of a [`Group`]: a started call moves its buffer to the group's
//! progress thread (`lane`) and returns a handle; waiting for the handle gives the
//! buffer back with the result, records the call (start, completion, time waited) and
//! fails the way the blocking call does. A group without a progress thread (overlap off, or
//! one rank) runs the call when it is started.

use crate::communicator::{CommExt, Communicator};
use crate::error::{CommError, CommResult};
use crate::group::Group;
use crate::lane::Lane;
use crate::payload::{CommElem, Kind};
use crate::recorder::{Key, Recorder, Started};
use boost_tensor::{Handle, Label, Pending, ReduceOp};
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant};

/// What the progress thread sends back: the buffer, the outcome, the real time of the call,
/// its emulated link time and when it completed (emulated link time included).
type Outcome<T> = (Vec<T>, CommResult<()>, Duration, Duration, Instant);

/// A call in flight on a group's progress thread.
pub struct InFlight<T> {
    rx: mpsc::Receiver<Outcome<T>>,
    key: Key,
    elements: usize,
    start: Instant,
    recorder: Option<Arc<Recorder>>,
}

impl<T: CommElem> InFlight<T> {
    /// Wait for the call; an error names it as the blocking call's error does.
    pub fn wait_checked(self) -> CommResult<Vec<T>> {
        let t0 = Instant::now();
        let got = self.rx.recv();
        let waited = t0.elapsed();
        let (buf, r, time, emulated, done) = got.map_err(|_| {
            CommError::Invalid(format!(
                "the progress thread of group {} ended before {} completed",
                self.key.group, self.key.label
            ))
        })?;
        r?;
        if let Some(rec) = &self.recorder {
            let s = Started { start: self.start, done, time, emulated, waited };
            rec.record_started(self.key, self.elements, s);
        }
        Ok(buf)
    }
}

impl<T: CommElem> Pending<Vec<T>> for InFlight<T> {
    fn wait(self: Box<Self>) -> Vec<T> {
        let (kind, label, group) = (self.key.kind, self.key.label, self.key.group);
        match self.wait_checked() {
            Ok(buf) => buf,
            Err(e) => panic!("collective {label} ({kind}, group {group}) failed: {e}"),
        }
    }
}

/// A started call of a group without a progress thread: already done, or failed.
struct Finished<T>(Vec<T>, CommResult<()>, Key);

impl<T: CommElem> Pending<Vec<T>> for Finished<T> {
    fn wait(self: Box<Self>) -> Vec<T> {
        if let Err(e) = self.1 {
            let k = self.2;
            panic!("collective {} ({}, group {}) failed: {e}", k.label, k.kind, k.group);
        }
        self.0
    }
    fn done_at_start(&self) -> bool {
        true
    }
}

impl Group {
    /// Give this group a progress thread for started calls, over a communicator split off
    /// it (a collective call: every rank of the group makes it at the same point).
    pub fn enable_overlap(&mut self) -> CommResult<()> {
        if self.size() == 1 || self.lane.is_some() {
            return Ok(());
        }
        let comm = self.comm().split(0, self.rank())?;
        let name = format!("{}-lane-{}", self.name(), self.rank());
        self.lane = Some(Arc::new(Lane::spawn(comm, name)?));
        Ok(())
    }

    /// Whether started calls run on a progress thread.
    pub fn overlaps(&self) -> bool {
        self.lane.is_some()
    }

    /// Start `kind` on `buf[off..off+n]` (`f` runs the call on a slice); see the module doc.
    pub(crate) fn start<'a, T: CommElem>(
        &'a self,
        kind: Kind,
        label: Label,
        mut buf: Vec<T>,
        range: std::ops::Range<usize>,
        f: impl FnOnce(&dyn Communicator, &mut [T]) -> CommResult<()> + Send + 'static,
    ) -> Handle<'a, Vec<T>> {
        assert!(range.end <= buf.len(), "{kind} {label}: range {range:?} is past the buffer's {} elements", buf.len());
        let key = Key { group: self.name(), label, kind, dtype: T::DTYPE };
        let Some(lane) = self.lane.as_ref() else {
            let r = self.issue::<T>(kind, label, range.len(), |c| f(c, &mut buf[range.clone()]));
            return Box::new(Finished(buf, r, key));
        };
        let p = self.size();
        let elements = range.len();
        let (link, wire) = (self.link(), self.wire.clone());
        let (tx, rx) = mpsc::sync_channel(1);
        let job = Box::new(move |c: &dyn Communicator| {
            // The link is busy for the emulated time: a send's before it leaves, the rest's
            // after the data has arrived (as blocking calls sleep it).
            let emulate = || wire.pass(link, kind, p, elements * T::DTYPE.size());
            let mut emulated = Duration::ZERO;
            if kind == Kind::Send {
                emulated = emulate();
                crate::link::sleep(emulated);
            }
            let t0 = Instant::now();
            let r = f(c, &mut buf[range]);
            let time = t0.elapsed();
            if r.is_ok() && kind != Kind::Send {
                emulated = emulate();
                crate::link::sleep(emulated);
            }
            let _ = tx.send((buf, r, time, emulated, Instant::now()));
        });
        let start = Instant::now();
        if !lane.submit(job, kind == Kind::Send) {
            let e = CommError::Invalid(format!("the progress thread of group {} has ended", self.name()));
            return Box::new(Finished(Vec::new(), Err(e), key));
        }
        Box::new(InFlight { rx, key, elements, start, recorder: self.recorder().cloned() })
    }

    pub(crate) fn start_all_reduce_vec<T: CommElem>(
        &self,
        buf: Vec<T>,
        off: usize,
        n: usize,
        op: ReduceOp,
        label: Label,
    ) -> Handle<'_, Vec<T>> {
        self.start(Kind::all_reduce(op), label, buf, off..off + n, move |c, b| c.all_reduce_slice(b, op, label))
    }
    pub(crate) fn start_reduce_scatter_vec<T: CommElem>(
        &self,
        buf: Vec<T>,
        off: usize,
        n: usize,
        label: Label,
    ) -> Handle<'_, Vec<T>> {
        let all = self.size() * n;
        self.start(Kind::ReduceScatter, label, buf, off..off + all, move |c, b| c.reduce_scatter_slice(b, label))
    }
    pub(crate) fn start_all_gather_vec<T: CommElem>(
        &self,
        buf: Vec<T>,
        off: usize,
        n: usize,
        label: Label,
    ) -> Handle<'_, Vec<T>> {
        let all = self.size() * n;
        self.start(Kind::AllGather, label, buf, off..off + all, move |c, b| c.all_gather_slice(b, label))
    }
    pub(crate) fn start_send_vec<T: CommElem>(
        &self,
        buf: Vec<T>,
        off: usize,
        n: usize,
        to: usize,
        label: Label,
    ) -> Handle<'_, Vec<T>> {
        self.start(Kind::Send, label, buf, off..off + n, move |c, b| c.send_slice(b, to, 0, label))
    }
    pub(crate) fn start_recv_vec<T: CommElem>(
        &self,
        buf: Vec<T>,
        off: usize,
        n: usize,
        from: usize,
        label: Label,
    ) -> Handle<'_, Vec<T>> {
        self.start(Kind::Recv, label, buf, off..off + n, move |c, b| c.recv_slice(b, from, 0, label))
    }
}
