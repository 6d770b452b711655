//! [`Recorded`]: any [`Collective`] with its calls recorded the way a [`crate::Group`] records
//! them, so collectives that do not go through a group (host-staged or NCCL ones of a device
//! backend) are counted too. A started call that is still in flight after its start is
//! recorded when its handle is waited for: in flight from its start to the end of the wait,
//! and waited for as long as the wait took. These are the host's times: for NCCL, the host
//! only queues work, so they bound when the GPU could have run the call, not how long it ran.

use crate::payload::{DType, Kind};
use crate::recorder::{Key, Recorder, Started};
use boost_tensor::{Backend, Collective, Handle, Label, Pending, ReduceOp};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A collective and the recorder its calls go into, under a group name.
pub struct Recorded<C> {
    inner: C,
    group: &'static str,
    /// The element type on the wire.
    dtype: DType,
    recorder: Arc<Recorder>,
}

impl<C> Recorded<C> {
    pub fn new(inner: C, group: &'static str, dtype: DType, recorder: Arc<Recorder>) -> Self {
        Self { inner, group, dtype, recorder }
    }
    pub fn inner(&self) -> &C {
        &self.inner
    }

    /// Run one call and record it; a group of one rank communicates nothing and is not
    /// recorded (as with a group).
    fn issue(&self, size: usize, kind: Kind, label: Label, elements: usize, f: impl FnOnce()) {
        if size == 1 {
            return f();
        }
        let key = self.key(kind, label);
        // The inner collective panics on failure rather than returning an error.
        let _ = self.recorder.timed(
            key,
            elements,
            || Duration::ZERO,
            || {
                f();
                Ok(())
            },
        );
    }

    fn key(&self, kind: Kind, label: Label) -> Key {
        // A barrier carries no payload; groups key it as u32.
        let dtype = if kind == Kind::Barrier { DType::U32 } else { self.dtype };
        Key { group: self.group, label, kind, dtype }
    }

    /// Start one call and record it: now if it completed inside its start, else when its
    /// handle is waited for.
    fn start<'a, Buf: Send + 'a>(
        &'a self,
        size: usize,
        kind: Kind,
        label: Label,
        elements: usize,
        f: impl FnOnce() -> Handle<'a, Buf>,
    ) -> Handle<'a, Buf> {
        if size == 1 {
            return f();
        }
        let key = self.key(kind, label);
        let start = Instant::now();
        let call = f();
        let time = start.elapsed();
        if call.done_at_start() {
            let s = Started { start, done: start + time, time, emulated: Duration::ZERO, waited: time };
            self.recorder.record_started(key, elements, s);
            return call;
        }
        Box::new(RecordedCall { call, recorder: &self.recorder, key, elements, start, time })
    }
}

/// A started call in flight, recorded when it is waited for.
struct RecordedCall<'a, Buf> {
    call: Handle<'a, Buf>,
    recorder: &'a Recorder,
    key: Key,
    elements: usize,
    start: Instant,
    time: Duration,
}

impl<Buf: Send> Pending<Buf> for RecordedCall<'_, Buf> {
    fn wait(self: Box<Self>) -> Buf {
        let t0 = Instant::now();
        let buf = self.call.wait();
        let done = Instant::now();
        let s = Started { start: self.start, done, time: self.time, emulated: Duration::ZERO, waited: done - t0 };
        self.recorder.record_started(self.key, self.elements, s);
        buf
    }
}

impl<B: Backend, C: Collective<B>> Collective<B> for Recorded<C> {
    fn rank(&self) -> usize {
        self.inner.rank()
    }
    fn size(&self) -> usize {
        self.inner.size()
    }
    fn all_reduce(&self, buf: &mut B::Buf, off: usize, n: usize, op: ReduceOp, label: Label) {
        let p = self.inner.size();
        self.issue(p, Kind::all_reduce(op), label, n, || self.inner.all_reduce(buf, off, n, op, label));
    }
    fn all_gather(&self, buf: &mut B::Buf, off: usize, n: usize, label: Label) {
        let p = self.inner.size();
        self.issue(p, Kind::AllGather, label, p * n, || self.inner.all_gather(buf, off, n, label));
    }
    fn reduce_scatter(&self, buf: &mut B::Buf, off: usize, n: usize, label: Label) {
        let p = self.inner.size();
        self.issue(p, Kind::ReduceScatter, label, p * n, || self.inner.reduce_scatter(buf, off, n, label));
    }
    fn broadcast(&self, buf: &mut B::Buf, off: usize, n: usize, root: usize, label: Label) {
        let p = self.inner.size();
        self.issue(p, Kind::Broadcast, label, n, || self.inner.broadcast(buf, off, n, root, label));
    }
    fn send(&self, buf: &B::Buf, off: usize, n: usize, to: usize, label: Label) {
        let p = self.inner.size();
        self.issue(p, Kind::Send, label, n, || self.inner.send(buf, off, n, to, label));
    }
    fn recv(&self, buf: &mut B::Buf, off: usize, n: usize, from: usize, label: Label) {
        let p = self.inner.size();
        self.issue(p, Kind::Recv, label, n, || self.inner.recv(buf, off, n, from, label));
    }
    fn barrier(&self) {
        let p = self.inner.size();
        self.issue(p, Kind::Barrier, crate::group::BARRIER, 0, || self.inner.barrier());
    }
    fn overlaps(&self) -> bool {
        self.inner.overlaps()
    }
    fn start_all_reduce(&self, buf: B::Buf, off: usize, n: usize, op: ReduceOp, label: Label) -> Handle<'_, B::Buf> {
        let p = self.inner.size();
        self.start(p, Kind::all_reduce(op), label, n, || self.inner.start_all_reduce(buf, off, n, op, label))
    }
    fn start_reduce_scatter(&self, buf: B::Buf, off: usize, n: usize, label: Label) -> Handle<'_, B::Buf> {
        let p = self.inner.size();
        self.start(p, Kind::ReduceScatter, label, p * n, || self.inner.start_reduce_scatter(buf, off, n, label))
    }
    fn start_all_gather(&self, buf: B::Buf, off: usize, n: usize, label: Label) -> Handle<'_, B::Buf> {
        let p = self.inner.size();
        self.start(p, Kind::AllGather, label, p * n, || self.inner.start_all_gather(buf, off, n, label))
    }
    fn start_send(&self, buf: B::Buf, off: usize, n: usize, to: usize, label: Label) -> Handle<'_, B::Buf> {
        let p = self.inner.size();
        self.start(p, Kind::Send, label, n, || self.inner.start_send(buf, off, n, to, label))
    }
    fn start_recv(&self, buf: B::Buf, off: usize, n: usize, from: usize, label: Label) -> Handle<'_, B::Buf> {
        let p = self.inner.size();
        self.start(p, Kind::Recv, label, n, || self.inner.start_recv(buf, off, n, from, label))
    }
}
