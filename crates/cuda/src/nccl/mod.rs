//! [`NcclGroup`]: NCCL collectives on a stream of the group's own, implementing
//! [`Collective<Cuda>`], and the rendezvous that gives every rank the NCCL unique id.
//!
//! Every call of a group is queued on the group's stream behind an event recorded on the
//! backend's compute stream (so it sees what the kernels before it wrote), and the compute
//! stream waits for the event that ends it before using the buffer again. A blocking call
//! queues that wait at once; a started call (`start_*`, with overlap on) queues it when its
//! handle is waited for, so the kernels issued in between (the rest of the backward pass)
//! run beside the collective. The host never blocks on either. One stream per group keeps
//! each communicator's calls in issue order on every rank, as NCCL requires.
//!
//! Communicators are non-blocking, each NCCL call polled against the group's deadline and
//! the communicator aborted past it (`progress`), so a rank that never joins or dies during
//! set-up stops the others with an error instead of a hang.
//!
//! NCCL needs one GPU per rank: two ranks on one GPU are refused, so on a one-GPU machine
//! only groups of one rank run. A group's calls must come from the thread that owns its
//! rank (as with every `Collective`).

use crate::backend::Cuda;
use crate::buf::{CudaBuf, DType};
use crate::cuda_dev::CudaDev;
use boost_tensor::{Collective, DeviceBuf, Handle, Label, Pending, ReduceOp};
use cudarc::driver::{CudaEvent, CudaStream};
use cudarc::nccl::{result as nr, sys as ns};
use progress::{ConfigV2_18, await_done, poll_comm};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

mod progress;
mod rendezvous;
pub use rendezvous::Rendezvous;

/// One rank's NCCL communicator, queuing collectives on a stream of its own.
pub struct NcclGroup {
    comm: ns::ncclComm_t,
    be: Cuda,
    /// The backend's stream, where the kernels run.
    compute: Arc<CudaStream>,
    /// This group's stream, where its NCCL calls run.
    stream: Arc<CudaStream>,
    /// Whether started calls leave their completion to the handle's wait (see the module).
    overlap: bool,
    rank: usize,
    size: usize,
    one: CudaBuf,
    /// How long one NCCL call's background work may take before the group is aborted.
    timeout: Duration,
    /// Set once the communicator was aborted: it is gone, and `Drop` leaves it alone.
    aborted: AtomicBool,
}

// SAFETY: the communicator is used by the thread that owns the rank; NCCL calls on one
// communicator are not made concurrently by this type's users (the `Collective` contract).
unsafe impl Send for NcclGroup {}
unsafe impl Sync for NcclGroup {}

impl Drop for NcclGroup {
    fn drop(&mut self) {
        if self.aborted.load(Ordering::Acquire) {
            return;
        }
        let _ = self.stream.synchronize();
        let _ = self.compute.synchronize();
        // A non-blocking communicator is finalised (its pending work flushed, polled to the
        // deadline) before it is destroyed.
        let comm = self.comm;
        // SAFETY: the communicator is valid and no longer used.
        let started = unsafe { ns::ncclCommFinalize(comm) }.result().is_ok();
        let what = format!("ncclCommFinalize (rank {} of {})", self.rank, self.size);
        if !started {
            // Freed without the flush (the abort path) rather than leaked.
            progress::abort_comm(comm);
        } else if await_done(&what, self.timeout, || poll_comm(comm), || progress::abort_comm(comm)).is_ok() {
            // SAFETY: finalised, and no longer used.
            unsafe {
                let _ = ns::ncclCommDestroy(comm);
            }
        }
    }
}

fn nccl_loaded() -> Result<(), String> {
    // SAFETY: only tries to open the library.
    if unsafe { ns::is_culib_present() } {
        Ok(())
    } else {
        Err("NCCL could not be loaded (looked for libnccl.so and libnccl.so.<cuda major>); pip's \
             nvidia-nccl-cu13 ships lib/libnccl.so.2 only: link it as libnccl.so in a folder on LD_LIBRARY_PATH"
            .to_string())
    }
}

fn stream_of(be: &Cuda) -> Result<Arc<CudaStream>, String> {
    be.dev()
        .as_any()
        .downcast_ref::<CudaDev>()
        .map(|d| d.stream.clone())
        .ok_or_else(|| "NCCL needs a GPU backend (Cuda::new), not the emulator".to_string())
}

fn dtype(b: &CudaBuf) -> ns::ncclDataType_t {
    match b.dtype() {
        DType::F32 => ns::ncclDataType_t::ncclFloat32,
        DType::Bf16 => ns::ncclDataType_t::ncclBfloat16,
    }
}

impl NcclGroup {
    /// A fresh NCCL unique id (call on one rank, send to the others).
    pub fn unique_id() -> Result<[u8; 128], String> {
        nccl_loaded()?;
        let id = nr::get_uniqueid().map_err(|e| format!("ncclGetUniqueId: {e:?}"))?;
        Ok(id.internal.map(|c| c as u8))
    }

    /// Join group `rank` of `size` on `be`'s GPU, learning the id through `rv`. Waits at most
    /// `timeout` for the rendezvous, as long again for NCCL's initialisation (which needs
    /// every rank), and as long for any later call's set-up; past it the communicator is
    /// aborted and the error says which call. Started calls complete when they are started
    /// until [`Self::overlapping`].
    pub fn new(be: &Cuda, rank: usize, size: usize, rv: Rendezvous, timeout: Duration) -> Result<Self, String> {
        assert!(rank < size, "NCCL rank {rank} of a group of {size}");
        nccl_loaded()?;
        let compute = stream_of(be)?;
        let stream = compute.fork().map_err(|e| format!("creating the NCCL group's stream: {e:?}"))?;
        let id = rv.exchange(rank, size, timeout, NcclGroup::unique_id)?;
        let uid = ns::ncclUniqueId { internal: id.map(|b| b as _) };
        stream.context().bind_to_thread().map_err(|e| format!("binding the CUDA context: {e:?}"))?;
        let mut comm = std::ptr::null_mut();
        let mut config = ConfigV2_18::non_blocking();
        let what = format!("ncclCommInitRankConfig (rank {rank} of {size})");
        // SAFETY: `comm` receives the new communicator; NCCL copies the config.
        unsafe { ns::ncclCommInitRankConfig(&mut comm, size as i32, uid, rank as i32, config.as_ptr()) }
            .result()
            .map_err(|e| format!("{what}: {e:?}"))?;
        await_done(&what, timeout, || poll_comm(comm), || progress::abort_comm(comm))?;
        let one = be.alloc_dtype(1, DType::F32, false);
        let aborted = AtomicBool::new(false);
        Ok(Self { comm, be: be.clone(), compute, stream, overlap: false, rank, size, one, timeout, aborted })
    }

    /// With `on`, a started call's completion is queued on the compute stream only when its
    /// handle is waited for, so it overlaps the kernels issued before that (`parallel.overlap`).
    pub fn overlapping(mut self, on: bool) -> Self {
        self.overlap = on;
        self
    }

    /// The group of the ranks that pass the same `color`, ordered by `key`
    /// (`ncclCommSplit`; every rank of this group must call it). It is non-blocking too,
    /// with this group's deadline.
    pub fn split(&self, color: usize, key: usize) -> Result<Self, String> {
        let mut comm = std::ptr::null_mut();
        let what = format!("ncclCommSplit (rank {} of {}, color {color})", self.rank, self.size);
        // SAFETY: a valid communicator; a null config inherits this one's (non-blocking).
        unsafe { ns::ncclCommSplit(self.comm, color as i32, key as i32, &mut comm, std::ptr::null_mut()) }
            .result()
            .map_err(|e| format!("{what}: {e:?}"))?;
        // The new communicator is the one to poll (NCCL's rule for a non-blocking split); the
        // parent is polled too before anything else is issued on it.
        await_done(&what, self.timeout, || poll_comm(comm), || progress::abort_comm(comm))?;
        let parent = self.comm;
        let abort_parent = || {
            self.aborted.store(true, Ordering::Release);
            progress::abort_comm(parent)
        };
        await_done(&what, self.timeout, || poll_comm(parent), abort_parent)?;
        let (mut n, mut r) = (0, 0);
        // SAFETY: a valid communicator.
        unsafe {
            ns::ncclCommCount(comm, &mut n).result().map_err(|e| format!("{e:?}"))?;
            ns::ncclCommUserRank(comm, &mut r).result().map_err(|e| format!("{e:?}"))?;
        }
        let be = self.be.clone();
        let one = be.alloc_dtype(1, DType::F32, false);
        let stream = self.compute.fork().map_err(|e| format!("creating the NCCL group's stream: {e:?}"))?;
        let (compute, overlap, timeout) = (self.compute.clone(), self.overlap, self.timeout);
        let (rank, size, aborted) = (r as usize, n as usize, AtomicBool::new(false));
        Ok(Self { comm, be, compute, stream, overlap, rank, size, one, timeout, aborted })
    }

    fn raw_stream(&self) -> ns::cudaStream_t {
        self.stream.cu_stream() as ns::cudaStream_t
    }

    /// A call's status: done, or in progress and polled to the group's deadline (past it,
    /// or on a failure, the communicator is aborted and the rank stops with the reason).
    fn ok(&self, what: &str, label: Label, r: Result<nr::NcclStatus, nr::NcclError>) {
        let call = format!("NCCL {what} at {label} on rank {} of {}", self.rank, self.size);
        match r {
            Ok(nr::NcclStatus::InProgress) => {
                let comm = self.comm;
                let abort = || {
                    self.aborted.store(true, Ordering::Release);
                    progress::abort_comm(comm)
                };
                if let Err(e) = await_done(&call, self.timeout, || poll_comm(comm), abort) {
                    panic!("{e}");
                }
            }
            Ok(_) => {}
            Err(e) => panic!("{call} failed: {e:?}"),
        }
    }

    fn cuda<T>(&self, what: &str, label: Label, r: Result<T, cudarc::driver::DriverError>) -> T {
        r.unwrap_or_else(|e| panic!("CUDA {what} for NCCL at {label} on rank {} of {}: {e:?}", self.rank, self.size))
    }

    /// Queue one NCCL call on the group's stream after the work queued so far on the compute
    /// stream; the event returned marks its end.
    fn issue(
        &self,
        what: &str,
        label: Label,
        call: impl FnOnce(ns::cudaStream_t) -> Result<nr::NcclStatus, nr::NcclError>,
    ) -> CudaEvent {
        // Launches held back for a CUDA graph are queued first: the call must see them.
        self.be.flush_held();
        let inputs = self.cuda("recording an event", label, self.compute.record_event(None));
        self.cuda("ordering the group's stream", label, self.stream.wait(&inputs));
        self.ok(what, label, call(self.raw_stream()));
        self.cuda("recording an event", label, self.stream.record_event(None))
    }

    /// The compute stream's work from now on comes after the call that `done` ends; `shadow`
    /// is the range whose bf16 copy is then refreshed (the call wrote it).
    fn join(&self, done: &CudaEvent, buf: &CudaBuf, shadow: Option<(usize, usize)>, label: Label) {
        self.cuda("waiting for NCCL", label, self.compute.wait(done));
        if let Some((off, n)) = shadow {
            self.be.resync(buf, off, 1, n, n);
        }
    }

    /// A started call: its completion is joined now, or by the handle's wait with overlap on.
    fn started(
        &self,
        buf: CudaBuf,
        done: CudaEvent,
        shadow: Option<(usize, usize)>,
        label: Label,
    ) -> Handle<'_, CudaBuf> {
        let call = InFlight { group: self, buf: Some(buf), done, shadow, label };
        if self.overlap { Box::new(call) } else { Box::new(boost_tensor::Ready(Box::new(call).wait())) }
    }

    fn all_reduce_call(&self, buf: &CudaBuf, off: usize, n: usize, op: ReduceOp, label: Label) -> CudaEvent {
        self.range(buf, off, n, "all_reduce");
        let op = match op {
            ReduceOp::Sum => ns::ncclRedOp_t::ncclSum,
            ReduceOp::Max => ns::ncclRedOp_t::ncclMax,
        };
        let p = buf.ptr(off) as *mut std::ffi::c_void;
        // SAFETY: in place over a checked range of a live buffer, ordered after its writers.
        self.issue("all_reduce", label, |s| unsafe { nr::all_reduce(p, p, n, dtype(buf), op, self.comm, s) })
    }

    fn all_gather_call(&self, buf: &CudaBuf, off: usize, n: usize, label: Label) -> CudaEvent {
        self.range(buf, off, self.size * n, "all_gather");
        let recv = buf.ptr(off) as *mut std::ffi::c_void;
        let send = buf.ptr(off + self.rank * n) as *const std::ffi::c_void;
        // SAFETY: NCCL's in-place form (send = recv + rank·n).
        self.issue("all_gather", label, |s| unsafe { nr::all_gather(send, recv, n, dtype(buf), self.comm, s) })
    }

    fn reduce_scatter_call(&self, buf: &CudaBuf, off: usize, n: usize, label: Label) -> CudaEvent {
        self.range(buf, off, self.size * n, "reduce_scatter");
        let send = buf.ptr(off) as *const std::ffi::c_void;
        let recv = buf.ptr(off + self.rank * n) as *mut std::ffi::c_void;
        let sum = ns::ncclRedOp_t::ncclSum;
        // SAFETY: NCCL's in-place form (recv = send + rank·n).
        self.issue("reduce_scatter", label, |s| unsafe {
            nr::reduce_scatter(send, recv, n, dtype(buf), sum, self.comm, s)
        })
    }

    fn send_call(&self, buf: &CudaBuf, off: usize, n: usize, to: usize, label: Label) -> CudaEvent {
        self.range(buf, off, n, "send");
        let p = buf.ptr(off) as *const std::ffi::c_void;
        // SAFETY: a checked range of a live buffer.
        self.issue("send", label, |s| unsafe { nr::send(p, n, dtype(buf), to as i32, self.comm, s) })
    }

    fn recv_call(&self, buf: &CudaBuf, off: usize, n: usize, from: usize, label: Label) -> CudaEvent {
        self.range(buf, off, n, "recv");
        let p = buf.ptr(off) as *mut std::ffi::c_void;
        // SAFETY: a checked range of a live buffer.
        self.issue("recv", label, |s| unsafe { nr::recv(p, n, dtype(buf), from as i32, self.comm, s) })
    }

    fn range(&self, buf: &CudaBuf, off: usize, n: usize, what: &str) {
        assert!(off + n <= buf.len(), "NCCL {what}: range {off}..{} past a buffer of {}", off + n, buf.len());
    }
}

impl Collective<Cuda> for NcclGroup {
    fn rank(&self) -> usize {
        self.rank
    }
    fn size(&self) -> usize {
        self.size
    }
    fn all_reduce(&self, buf: &mut CudaBuf, off: usize, n: usize, op: ReduceOp, label: Label) {
        let done = self.all_reduce_call(buf, off, n, op, label);
        self.join(&done, buf, Some((off, n)), label);
    }
    fn all_gather(&self, buf: &mut CudaBuf, off: usize, n: usize, label: Label) {
        let done = self.all_gather_call(buf, off, n, label);
        self.join(&done, buf, Some((off, self.size * n)), label);
    }
    fn reduce_scatter(&self, buf: &mut CudaBuf, off: usize, n: usize, label: Label) {
        let done = self.reduce_scatter_call(buf, off, n, label);
        self.join(&done, buf, Some((off + self.rank * n, n)), label);
    }
    fn broadcast(&self, buf: &mut CudaBuf, off: usize, n: usize, root: usize, label: Label) {
        self.range(buf, off, n, "broadcast");
        let p = buf.ptr(off) as *mut std::ffi::c_void;
        // SAFETY: in place over a checked range.
        let done = self
            .issue("broadcast", label, |s| unsafe { nr::broadcast(p, p, n, dtype(buf), root as i32, self.comm, s) });
        self.join(&done, buf, Some((off, n)), label);
    }
    fn send(&self, buf: &CudaBuf, off: usize, n: usize, to: usize, label: Label) {
        let done = self.send_call(buf, off, n, to, label);
        self.join(&done, buf, None, label);
    }
    fn recv(&self, buf: &mut CudaBuf, off: usize, n: usize, from: usize, label: Label) {
        let done = self.recv_call(buf, off, n, from, label);
        self.join(&done, buf, Some((off, n)), label);
    }
    fn barrier(&self) {
        let label = Label::op("barrier");
        let p = self.one.ptr(0) as *mut std::ffi::c_void;
        let (f32, sum) = (ns::ncclDataType_t::ncclFloat32, ns::ncclRedOp_t::ncclSum);
        // SAFETY: one element of the group's own buffer.
        let done = self.issue("barrier", label, |s| unsafe { nr::all_reduce(p, p, 1, f32, sum, self.comm, s) });
        self.join(&done, &self.one, None, label);
        if let Err(e) = self.stream.synchronize() {
            panic!("NCCL barrier on rank {}: {e:?}", self.rank);
        }
    }

    // Started calls run on the group's stream beside the kernels issued after them. Sends
    // and receives are not posted ahead (`overlaps` is false): with one stream per group, a
    // receive queued ahead of a send its peer waits for would stall both ranks, where a
    // host progress thread buffers the send.
    fn start_all_reduce(&self, buf: CudaBuf, off: usize, n: usize, op: ReduceOp, label: Label) -> Handle<'_, CudaBuf> {
        let done = self.all_reduce_call(&buf, off, n, op, label);
        self.started(buf, done, Some((off, n)), label)
    }
    fn start_reduce_scatter(&self, buf: CudaBuf, off: usize, n: usize, label: Label) -> Handle<'_, CudaBuf> {
        let done = self.reduce_scatter_call(&buf, off, n, label);
        self.started(buf, done, Some((off + self.rank * n, n)), label)
    }
    fn start_all_gather(&self, buf: CudaBuf, off: usize, n: usize, label: Label) -> Handle<'_, CudaBuf> {
        let done = self.all_gather_call(&buf, off, n, label);
        self.started(buf, done, Some((off, self.size * n)), label)
    }
    fn start_send(&self, buf: CudaBuf, off: usize, n: usize, to: usize, label: Label) -> Handle<'_, CudaBuf> {
        let done = self.send_call(&buf, off, n, to, label);
        self.started(buf, done, None, label)
    }
    fn start_recv(&self, buf: CudaBuf, off: usize, n: usize, from: usize, label: Label) -> Handle<'_, CudaBuf> {
        let done = self.recv_call(&buf, off, n, from, label);
        self.started(buf, done, Some((off, n)), label)
    }
}

/// A call queued on a group's stream; it owns the buffer until the compute stream is made
/// to wait for it.
struct InFlight<'a> {
    group: &'a NcclGroup,
    buf: Option<CudaBuf>,
    done: CudaEvent,
    shadow: Option<(usize, usize)>,
    label: Label,
}

impl Pending<CudaBuf> for InFlight<'_> {
    fn wait(mut self: Box<Self>) -> CudaBuf {
        let buf = self.buf.take().expect("an unwaited call owns its buffer");
        self.group.join(&self.done, &buf, self.shadow, self.label);
        buf
    }
}

impl Drop for InFlight<'_> {
    /// A handle dropped unwaited (a panic unwinding) still orders the compute stream after
    /// the call, so the buffer's memory is not freed (on that stream) while NCCL uses it.
    fn drop(&mut self) {
        if self.buf.is_some() {
            let _ = self.group.compute.wait(&self.done);
        }
    }
}
