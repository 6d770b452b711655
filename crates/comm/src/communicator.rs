//! The host-memory communicator seam every backend (in-process threads; MPI, NCCL later)
//! implements.

use crate::error::CommResult;
use crate::payload::{CommElem, Payload, PayloadRef};
use boost_tensor::{Label, ReduceOp};

/// Collectives and point-to-point transfers over one group of ranks, on host memory.
///
/// Ranks are numbered `0..size()` within the group. Every rank of the group must make the
/// same collective calls (all_reduce, all_gather, reduce_scatter, broadcast, barrier, split)
/// in the same order, with the same kind, dtype, element count, root and label; a backend
/// reports a mismatch as an error rather than combining unrelated buffers. Reductions are
/// deterministic: every element is combined in rank order 0..size−1 and every rank gets the
/// same bits.
///
/// An error means the group (for the in-process backend: the whole universe) is unusable:
/// every later call fails too.
pub trait Communicator: Send + Sync {
    /// This rank's index in the group.
    fn rank(&self) -> usize;
    fn size(&self) -> usize;
    /// Reduce `buf` element-wise over the group; every rank gets the result.
    fn all_reduce(&self, buf: Payload<'_>, op: ReduceOp, label: Label) -> CommResult<()>;
    /// `buf` holds `size·n` elements; rank i contributes chunk `i·n..(i+1)·n` and every rank
    /// ends with every chunk.
    fn all_gather(&self, buf: Payload<'_>, label: Label) -> CommResult<()>;
    /// `buf` holds `size·n` elements, summed over the group; afterwards chunk `rank` holds this
    /// rank's part of the sum and the other chunks are unspecified.
    fn reduce_scatter(&self, buf: Payload<'_>, label: Label) -> CommResult<()>;
    /// Copy `root`'s `buf` to every rank.
    fn broadcast(&self, buf: Payload<'_>, root: usize, label: Label) -> CommResult<()>;
    /// Send `buf` to rank `to`. Messages from one rank to another are received in the order
    /// they were sent among those with the same tag; a send does not wait for its receive.
    fn send(&self, buf: PayloadRef<'_>, to: usize, tag: u32, label: Label) -> CommResult<()>;
    /// Receive the oldest message from rank `from` with tag `tag` into `buf` (its dtype and
    /// length must match the message's).
    fn recv(&self, buf: Payload<'_>, from: usize, tag: u32, label: Label) -> CommResult<()>;
    /// Wait until every rank of the group has arrived.
    fn barrier(&self, label: Label) -> CommResult<()>;
    /// Split the group (MPI_Comm_split): every rank calls it; ranks with the same `color` form
    /// a new group, ordered by `key` and then by rank in this group.
    fn split(&self, color: usize, key: usize) -> CommResult<Box<dyn Communicator>>;
}

/// Typed conveniences over any communicator (`&dyn Communicator` included).
pub trait CommExt: Communicator {
    fn all_reduce_slice<T: CommElem>(&self, buf: &mut [T], op: ReduceOp, label: Label) -> CommResult<()> {
        self.all_reduce(T::payload(buf), op, label)
    }
    fn all_gather_slice<T: CommElem>(&self, buf: &mut [T], label: Label) -> CommResult<()> {
        self.all_gather(T::payload(buf), label)
    }
    fn reduce_scatter_slice<T: CommElem>(&self, buf: &mut [T], label: Label) -> CommResult<()> {
        self.reduce_scatter(T::payload(buf), label)
    }
    fn broadcast_slice<T: CommElem>(&self, buf: &mut [T], root: usize, label: Label) -> CommResult<()> {
        self.broadcast(T::payload(buf), root, label)
    }
    fn send_slice<T: CommElem>(&self, buf: &[T], to: usize, tag: u32, label: Label) -> CommResult<()> {
        self.send(T::payload_ref(buf), to, tag, label)
    }
    fn recv_slice<T: CommElem>(&self, buf: &mut [T], from: usize, tag: u32, label: Label) -> CommResult<()> {
        self.recv(T::payload(buf), from, tag, label)
    }
}

impl<C: Communicator + ?Sized> CommExt for C {}
