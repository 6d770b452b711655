//! [`Group`]: a named communicator as the model sees it, implementing
//! `boost_tensor::Collective<Cpu<T>>` for f32 and f64, with an optional recorder and optional
//! link emulation.

use crate::communicator::{CommExt, Communicator};
use crate::error::CommResult;
use crate::lane::Lane;
use crate::link::{Link, Wire, sleep};
use crate::payload::{CommElem, Kind};
use crate::recorder::{Key, Recorder};
use boost_tensor::cpu::Cpu;
use boost_tensor::{Collective, Handle, Label, ReduceOp, Scalar};
use std::sync::Arc;
use std::time::Duration;

/// The label the `Collective` adapter gives barriers (the trait's barrier has none).
pub const BARRIER: Label = Label::op("barrier");

/// One rank's handle on a named group.
///
/// The inherent `*_slice` methods return errors; the `Collective` implementation (what model
/// code calls through `&dyn Collective<B>`) panics on an error with a message naming the
/// label, the call, the group and the failed rank — the runner turns that into an error.
///
/// Calls on a group of one rank communicate nothing: they are neither recorded nor
/// emulated. Send and recv through the `Collective` trait use tag 0 (plain FIFO order per
/// pair of ranks).
#[derive(Clone)]
pub struct Group {
    comm: Arc<dyn Communicator>,
    name: &'static str,
    recorder: Option<Arc<Recorder>>,
    link: Option<Link>,
    /// This rank's emulated wire, shared with the group's duplicates.
    pub(crate) wire: Arc<Wire>,
    /// The progress thread of started calls ([`Group::enable_overlap`]); shared by clones.
    pub(crate) lane: Option<Arc<Lane>>,
}

impl std::fmt::Debug for Group {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Group")
            .field("name", &self.name)
            .field("rank", &self.rank())
            .field("size", &self.size())
            .field("recorded", &self.recorder.is_some())
            .field("link", &self.link)
            .field("overlap", &self.lane.is_some())
            .finish()
    }
}

impl Group {
    pub fn new(name: &'static str, comm: Arc<dyn Communicator>) -> Self {
        Self { comm, name, recorder: None, link: None, wire: Arc::default(), lane: None }
    }
    pub fn with_recorder(mut self, recorder: Arc<Recorder>) -> Self {
        self.recorder = Some(recorder);
        self
    }
    pub fn with_link(mut self, link: Link) -> Self {
        self.link = Some(link);
        self
    }
    pub fn set_recorder(&mut self, recorder: Option<Arc<Recorder>>) {
        self.recorder = recorder;
    }
    pub fn set_link(&mut self, link: Option<Link>) {
        self.link = link;
    }
    /// A group of the same ranks on a communicator of its own (split off this one: every
    /// rank of the group must call it, in the same order), named, recorded and linked like
    /// this one, blocking calls only: its calls never meet this group's.
    pub fn duplicate(&self) -> CommResult<Group> {
        let mut g = Group::new(self.name, self.comm.split(0, self.rank())?.into());
        g.set_recorder(self.recorder.clone());
        g.set_link(self.link);
        g.wire = self.wire.clone();
        Ok(g)
    }

    pub fn name(&self) -> &'static str {
        self.name
    }
    /// This rank's index in the group.
    pub fn rank(&self) -> usize {
        self.comm.rank()
    }
    pub fn size(&self) -> usize {
        self.comm.size()
    }
    pub fn comm(&self) -> &Arc<dyn Communicator> {
        &self.comm
    }
    pub fn recorder(&self) -> Option<&Arc<Recorder>> {
        self.recorder.as_ref()
    }
    pub fn link(&self) -> Option<Link> {
        self.link
    }

    /// Run one call, timing it, sleeping the emulated link cost (before a send, after anything
    /// else) and recording it.
    pub(crate) fn issue<T: CommElem>(
        &self,
        kind: Kind,
        label: Label,
        elements: usize,
        f: impl FnOnce(&dyn Communicator) -> CommResult<()>,
    ) -> CommResult<()> {
        let p = self.size();
        if p == 1 {
            return f(&*self.comm);
        }
        let bytes = elements * T::DTYPE.size();
        // The link is busy for the emulated time: a send's before it leaves, the rest's after
        // the data has arrived.
        let emulate = || self.wire.pass(self.link, kind, p, bytes);
        let before = if kind == Kind::Send { emulate() } else { Duration::ZERO };
        sleep(before);
        let mut after = Duration::ZERO;
        let mut done = || {
            if kind != Kind::Send {
                after = emulate();
            }
            before + after
        };
        let key = Key { group: self.name, label, kind, dtype: T::DTYPE };
        match &self.recorder {
            Some(r) => r.timed(key, elements, &mut done, || f(&*self.comm))?,
            None => {
                f(&*self.comm)?;
                done();
            }
        }
        sleep(after);
        Ok(())
    }

    pub fn all_reduce_slice<T: CommElem>(&self, buf: &mut [T], op: ReduceOp, label: Label) -> CommResult<()> {
        self.issue::<T>(Kind::all_reduce(op), label, buf.len(), |c| c.all_reduce_slice(buf, op, label))
    }
    /// `buf` holds `size·n` elements, this rank's at `rank·n`.
    pub fn all_gather_slice<T: CommElem>(&self, buf: &mut [T], label: Label) -> CommResult<()> {
        self.issue::<T>(Kind::AllGather, label, buf.len(), |c| c.all_gather_slice(buf, label))
    }
    /// `buf` holds `size·n` elements; chunk `rank` ends with the sum.
    pub fn reduce_scatter_slice<T: CommElem>(&self, buf: &mut [T], label: Label) -> CommResult<()> {
        self.issue::<T>(Kind::ReduceScatter, label, buf.len(), |c| c.reduce_scatter_slice(buf, label))
    }
    pub fn broadcast_slice<T: CommElem>(&self, buf: &mut [T], root: usize, label: Label) -> CommResult<()> {
        self.issue::<T>(Kind::Broadcast, label, buf.len(), |c| c.broadcast_slice(buf, root, label))
    }
    pub fn send_slice<T: CommElem>(&self, buf: &[T], to: usize, tag: u32, label: Label) -> CommResult<()> {
        self.issue::<T>(Kind::Send, label, buf.len(), |c| c.send_slice(buf, to, tag, label))
    }
    pub fn recv_slice<T: CommElem>(&self, buf: &mut [T], from: usize, tag: u32, label: Label) -> CommResult<()> {
        self.issue::<T>(Kind::Recv, label, buf.len(), |c| c.recv_slice(buf, from, tag, label))
    }
    pub fn barrier_checked(&self, label: Label) -> CommResult<()> {
        self.issue::<u32>(Kind::Barrier, label, 0, |c| c.barrier(label))
    }

    #[track_caller]
    fn expect(&self, r: CommResult<()>, kind: Kind, label: Label) {
        if let Err(e) = r {
            panic!("collective {label} ({kind}, group {}) failed: {e}", self.name);
        }
    }
}

fn range<T>(buf: &[T], off: usize, n: usize, what: &str) -> std::ops::Range<usize> {
    assert!(
        off.checked_add(n).is_some_and(|end| end <= buf.len()),
        "{what}: range {off}..{off}+{n} is past the buffer's {} elements",
        buf.len()
    );
    off..off + n
}

impl<T: Scalar + CommElem> Collective<Cpu<T>> for Group {
    fn rank(&self) -> usize {
        self.comm.rank()
    }
    fn size(&self) -> usize {
        self.comm.size()
    }
    fn all_reduce(&self, buf: &mut Vec<T>, off: usize, n: usize, op: ReduceOp, label: Label) {
        let r = range(buf, off, n, "all_reduce");
        self.expect(self.all_reduce_slice(&mut buf[r], op, label), Kind::all_reduce(op), label);
    }
    fn all_gather(&self, buf: &mut Vec<T>, off: usize, n: usize, label: Label) {
        let r = range(buf, off, self.size() * n, "all_gather");
        self.expect(self.all_gather_slice(&mut buf[r], label), Kind::AllGather, label);
    }
    fn reduce_scatter(&self, buf: &mut Vec<T>, off: usize, n: usize, label: Label) {
        let r = range(buf, off, self.size() * n, "reduce_scatter");
        self.expect(self.reduce_scatter_slice(&mut buf[r], label), Kind::ReduceScatter, label);
    }
    fn broadcast(&self, buf: &mut Vec<T>, off: usize, n: usize, root: usize, label: Label) {
        let r = range(buf, off, n, "broadcast");
        self.expect(self.broadcast_slice(&mut buf[r], root, label), Kind::Broadcast, label);
    }
    fn send(&self, buf: &Vec<T>, off: usize, n: usize, to: usize, label: Label) {
        let r = range(buf, off, n, "send");
        self.expect(self.send_slice(&buf[r], to, 0, label), Kind::Send, label);
    }
    fn recv(&self, buf: &mut Vec<T>, off: usize, n: usize, from: usize, label: Label) {
        let r = range(buf, off, n, "recv");
        self.expect(self.recv_slice(&mut buf[r], from, 0, label), Kind::Recv, label);
    }
    fn barrier(&self) {
        self.expect(self.barrier_checked(BARRIER), Kind::Barrier, BARRIER);
    }
    // Started calls run on the progress thread when overlap is on (crate::started).
    fn overlaps(&self) -> bool {
        self.lane.is_some()
    }
    fn start_all_reduce(&self, buf: Vec<T>, off: usize, n: usize, op: ReduceOp, label: Label) -> Handle<'_, Vec<T>> {
        self.start_all_reduce_vec(buf, off, n, op, label)
    }
    fn start_reduce_scatter(&self, buf: Vec<T>, off: usize, n: usize, label: Label) -> Handle<'_, Vec<T>> {
        self.start_reduce_scatter_vec(buf, off, n, label)
    }
    fn start_all_gather(&self, buf: Vec<T>, off: usize, n: usize, label: Label) -> Handle<'_, Vec<T>> {
        self.start_all_gather_vec(buf, off, n, label)
    }
    fn start_send(&self, buf: Vec<T>, off: usize, n: usize, to: usize, label: Label) -> Handle<'_, Vec<T>> {
        self.start_send_vec(buf, off, n, to, label)
    }
    fn start_recv(&self, buf: Vec<T>, off: usize, n: usize, from: usize, label: Label) -> Handle<'_, Vec<T>> {
        self.start_recv_vec(buf, off, n, from, label)
    }
}
