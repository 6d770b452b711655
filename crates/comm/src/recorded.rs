//! [`Recorded`]: any [`Collective`] with its calls recorded the way a [`crate::Group`] records
//! them, so collectives that do not go through a group (host-staged or NCCL ones of a device
//! backend) are counted too.

use crate::payload::{DType, Kind};
use crate::recorder::{Key, Recorder};
use boost_tensor::{Backend, Collective, Label, ReduceOp};
use std::sync::Arc;
use std::time::Duration;

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
        // A barrier carries no payload; groups key it as u32.
        let dtype = if kind == Kind::Barrier { DType::U32 } else { self.dtype };
        let key = Key { group: self.group, label, kind, dtype };
        // The inner collective panics on failure rather than returning an error.
        let _ = self.recorder.timed(key, elements, Duration::ZERO, || {
            f();
            Ok(())
        });
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
}
