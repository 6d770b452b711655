//! [`HostStaged`]: collectives on CUDA buffers through a host communicator of boost-comm.
//! Each call copies its range to host memory (as fp32), runs the host collective and copies
//! the result back. Slower than NCCL, but it needs neither NCCL nor a GPU per rank: ranks may
//! share a GPU, run on the emulator, or talk over MPI.

use crate::backend::Cuda;
use crate::buf::CudaBuf;
use boost_comm::{CommExt, Communicator};
use boost_tensor::{Backend, Collective, DeviceBuf, Label, Mat, MatMut, ReduceOp};
use std::sync::Arc;

/// One rank's handle on a host communicator, for buffers of backend `be`.
pub struct HostStaged {
    comm: Arc<dyn Communicator>,
    be: Cuda,
}

impl HostStaged {
    pub fn new(comm: Arc<dyn Communicator>, be: &Cuda) -> Self {
        Self { comm, be: be.clone() }
    }

    fn get(&self, buf: &CudaBuf, off: usize, n: usize, what: &str) -> Vec<f32> {
        assert!(off + n <= buf.len(), "{what}: range {off}..{} past a buffer of {}", off + n, buf.len());
        self.be.read_mat(Mat::at(buf, off, 1, n, n))
    }

    fn put(&self, buf: &mut CudaBuf, off: usize, host: &[f32]) {
        let n = host.len();
        self.be.write_mat(MatMut::at(buf, off, 1, n, n), host)
    }

    fn fail(&self, what: &str, label: Label, e: impl std::fmt::Display) -> ! {
        panic!("{what} at {label} failed on rank {} of {}: {e}", self.comm.rank(), self.comm.size())
    }
}

impl Collective<Cuda> for HostStaged {
    fn rank(&self) -> usize {
        self.comm.rank()
    }
    fn size(&self) -> usize {
        self.comm.size()
    }
    fn all_reduce(&self, buf: &mut CudaBuf, off: usize, n: usize, op: ReduceOp, label: Label) {
        let mut h = self.get(buf, off, n, "all_reduce");
        self.comm.all_reduce_slice(&mut h, op, label).unwrap_or_else(|e| self.fail("all_reduce", label, e));
        self.put(buf, off, &h);
    }
    fn all_gather(&self, buf: &mut CudaBuf, off: usize, n: usize, label: Label) {
        let mut h = self.get(buf, off, self.size() * n, "all_gather");
        self.comm.all_gather_slice(&mut h, label).unwrap_or_else(|e| self.fail("all_gather", label, e));
        self.put(buf, off, &h);
    }
    fn reduce_scatter(&self, buf: &mut CudaBuf, off: usize, n: usize, label: Label) {
        let mut h = self.get(buf, off, self.size() * n, "reduce_scatter");
        self.comm.reduce_scatter_slice(&mut h, label).unwrap_or_else(|e| self.fail("reduce_scatter", label, e));
        let r = self.rank();
        self.put(buf, off + r * n, &h[r * n..(r + 1) * n]);
    }
    fn broadcast(&self, buf: &mut CudaBuf, off: usize, n: usize, root: usize, label: Label) {
        let mut h = self.get(buf, off, n, "broadcast");
        self.comm.broadcast_slice(&mut h, root, label).unwrap_or_else(|e| self.fail("broadcast", label, e));
        self.put(buf, off, &h);
    }
    fn send(&self, buf: &CudaBuf, off: usize, n: usize, to: usize, label: Label) {
        let h = self.get(buf, off, n, "send");
        self.comm.send_slice(&h, to, 0, label).unwrap_or_else(|e| self.fail("send", label, e));
    }
    fn recv(&self, buf: &mut CudaBuf, off: usize, n: usize, from: usize, label: Label) {
        let mut h = vec![0.0f32; n];
        assert!(off + n <= buf.len(), "recv: range {off}..{} past a buffer of {}", off + n, buf.len());
        self.comm.recv_slice(&mut h, from, 0, label).unwrap_or_else(|e| self.fail("recv", label, e));
        self.put(buf, off, &h);
    }
    fn barrier(&self) {
        let label = Label::op("barrier");
        self.comm.barrier(label).unwrap_or_else(|e| self.fail("barrier", label, e));
    }
}
