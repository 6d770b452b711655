//! The MPI communicator: non-blocking MPI calls (the `mpi` crate's raw `ffi`) on buffers this
//! backend owns, polled with `MPI_Test` until done or until the deadline.
//!
//! # Why raw calls
//!
//! The `mpi` crate's safe requests borrow the caller's buffers and must be completed before
//! their scope ends (dropping one aborts the process). A call that gives up at its deadline
//! leaves its operation pending, so it cannot hand MPI a buffer the caller will free. Every
//! operation here works on staging buffers owned by the communicator (copied in and out), and
//! after a failure those buffers are never freed: a pending operation can only ever write
//! memory it owns. The `mpi` crate provides initialisation and finalisation (its `Universe`)
//! and the bindings.
//!
//! # Process state
//!
//! One rank per process: a process-wide state holds the `Universe`, a lock taken around every
//! MPI call (the library is initialised with `MPI_THREAD_SERIALIZED`, so handles may be used
//! from several threads, one call at a time), the first failure (after which every call fails
//! naming it), this rank's current and last call (for failure messages), and the eager sends
//! still in flight with their buffers.

use super::MpiOptions;
use crate::call::{CallDesc, write_call};
use crate::communicator::Communicator;
use crate::error::{CommError, CommResult, Failure, list};
use crate::grid::{Dims, Grid, GridOptions};
use crate::payload::{CommElem, DType, Kind, Payload, PayloadRef, dispatch};
use crate::runner::{RunOptions, panic_message};
use ::mpi::ffi;
use boost_tensor::{Label, ReduceOp};
use std::fmt;
use std::io::Write;
use std::mem::MaybeUninit;
use std::os::raw::{c_char, c_int, c_void};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// An MPI communicator handle.
#[derive(Clone, Copy)]
struct Comm(ffi::MPI_Comm);
// SAFETY: a communicator handle is a process-wide value, valid on any thread; every MPI call
// that uses it is made under the process lock.
unsafe impl Send for Comm {}
unsafe impl Sync for Comm {}

/// A request handle of an eager send.
struct Req(ffi::MPI_Request);
// SAFETY: as for `Comm`.
unsafe impl Send for Req {}

fn null_request() -> ffi::MPI_Request {
    // SAFETY: reads a constant the MPI library initialised.
    unsafe { ffi::RSMPI_REQUEST_NULL }
}

fn datatype(d: DType) -> ffi::MPI_Datatype {
    // SAFETY: reads constants the MPI library initialised.
    unsafe {
        match d {
            DType::F32 => ffi::RSMPI_FLOAT,
            DType::F64 => ffi::RSMPI_DOUBLE,
            DType::U32 => ffi::RSMPI_UINT32_T,
        }
    }
}

fn bytes_type() -> ffi::MPI_Datatype {
    // SAFETY: as above.
    unsafe { ffi::RSMPI_UINT8_T }
}

fn u64_type() -> ffi::MPI_Datatype {
    // SAFETY: as above.
    unsafe { ffi::RSMPI_UINT64_T }
}

fn empty_status() -> ffi::MPI_Status {
    // SAFETY: MPI_Status is a plain C struct of integers; all zeros is a valid value.
    unsafe { MaybeUninit::zeroed().assume_init() }
}

/// The text of an MPI error code.
fn mpi_error(rc: c_int) -> String {
    let mut buf = [0 as c_char; 1024];
    let mut len: c_int = 0;
    // SAFETY: the buffer is larger than MPI_MAX_ERROR_STRING (256 in OpenMPI and MPICH).
    let ok = unsafe { ffi::MPI_Error_string(rc, buf.as_mut_ptr(), &mut len) } == 0;
    if !ok {
        return format!("MPI error {rc}");
    }
    let bytes: Vec<u8> = buf[..(len.max(0) as usize).min(buf.len())].iter().map(|&c| c as u8).collect();
    format!("{} (MPI error {rc})", String::from_utf8_lossy(&bytes))
}

/// `n` elements of `T` at the start of `v`, growing it if needed (allocation only on growth).
fn view<T: Copy>(v: &mut Vec<u64>, n: usize) -> &mut [T] {
    debug_assert!(std::mem::align_of::<T>() <= 8);
    let words = (n * std::mem::size_of::<T>()).div_ceil(8);
    if v.len() < words {
        v.resize(words, 0);
    }
    // SAFETY: `v` holds at least n·size_of::<T>() bytes, aligned to 8; T is f32, f64, u32, u64
    // or u8, for which every bit pattern is valid.
    unsafe { std::slice::from_raw_parts_mut(v.as_mut_ptr() as *mut T, n) }
}

// ---------------------------------------------------------------------------------------------
// Call descriptors

/// Words of an encoded descriptor.
const WIRE: usize = 12;
/// Bytes of label text an encoded descriptor carries.
const LABEL_TEXT: usize = 40;
const MAGIC: u64 = 0x424f_4f53; // "BOOS"
const NONE32: u32 = u32::MAX;
const NONE64: u64 = u64::MAX;
const KINDS: [Kind; 9] = [
    Kind::AllReduce,
    Kind::AllReduceMax,
    Kind::AllGather,
    Kind::ReduceScatter,
    Kind::Broadcast,
    Kind::Send,
    Kind::Recv,
    Kind::Barrier,
    Kind::Split,
];
const DTYPES: [DType; 3] = [DType::F32, DType::F64, DType::U32];

fn fnv(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| (h ^ b as u64).wrapping_mul(0x0100_0000_01b3))
}

/// Layout (little-endian words): 0: magic | kind << 32 | op << 40 | dtype << 48 |
/// label length << 56; 1: n; 2: peer; 3: tag | layer << 32; 4: color; 5: key; 6: label hash;
/// 7..12: label text (truncated to 40 bytes).
fn encode(d: &CallDesc) -> [u64; WIRE] {
    let mut w = [0u64; WIRE];
    let kind = KINDS.iter().position(|&k| k == d.kind).unwrap_or(0) as u64;
    let op = match d.op {
        None => 0u64,
        Some(ReduceOp::Sum) => 1,
        Some(ReduceOp::Max) => 2,
    };
    let dtype = d.dtype.map_or(0, |t| DTYPES.iter().position(|&x| x == t).unwrap_or(0) as u64 + 1);
    let text = d.label.op.as_bytes();
    let len = text.len().min(LABEL_TEXT);
    let truncated = (text.len() > LABEL_TEXT) as u64;
    w[0] = MAGIC | kind << 32 | op << 40 | dtype << 48 | (len as u64 | truncated << 7) << 56;
    w[1] = d.n as u64;
    w[2] = d.peer.map_or(NONE64, |p| p as u64);
    w[3] = d.tag as u64 | (d.label.layer.unwrap_or(NONE32) as u64) << 32;
    w[4] = d.color as u64;
    w[5] = d.key as u64;
    w[6] = fnv(d.label.op);
    let mut bytes = [0u8; LABEL_TEXT];
    bytes[..len].copy_from_slice(&text[..len]);
    for (i, c) in bytes.chunks_exact(8).enumerate() {
        w[7 + i] = u64::from_le_bytes(c.try_into().expect("8 bytes"));
    }
    w
}

/// A descriptor as received from another rank.
#[derive(Debug, Clone, Copy)]
struct WireDesc {
    kind: Kind,
    op: Option<ReduceOp>,
    dtype: Option<DType>,
    n: u64,
    peer: Option<u64>,
    tag: u32,
    layer: Option<u32>,
    color: u64,
    key: u64,
    hash: u64,
    text: [u8; LABEL_TEXT],
    len: usize,
    truncated: bool,
}

fn decode(w: &[u64]) -> Option<WireDesc> {
    if w.len() < WIRE || w[0] & 0xffff_ffff != MAGIC {
        return None;
    }
    let byte = |i: u32| ((w[0] >> i) & 0xff) as usize;
    let kind = *KINDS.get(byte(32))?;
    let op = match byte(40) {
        0 => None,
        1 => Some(ReduceOp::Sum),
        2 => Some(ReduceOp::Max),
        _ => return None,
    };
    let dtype = match byte(48) {
        0 => None,
        i => Some(*DTYPES.get(i - 1)?),
    };
    let len = byte(56) & 0x7f;
    if len > LABEL_TEXT {
        return None;
    }
    let mut text = [0u8; LABEL_TEXT];
    for i in 0..LABEL_TEXT / 8 {
        text[i * 8..(i + 1) * 8].copy_from_slice(&w[7 + i].to_le_bytes());
    }
    let layer = (w[3] >> 32) as u32;
    Some(WireDesc {
        kind,
        op,
        dtype,
        n: w[1],
        peer: (w[2] != NONE64).then_some(w[2]),
        tag: w[3] as u32,
        layer: (layer != NONE32).then_some(layer),
        color: w[4],
        key: w[5],
        hash: w[6],
        text,
        len,
        truncated: byte(56) & 0x80 != 0,
    })
}

impl WireDesc {
    /// What the in-process backend compares at arrival.
    fn matches(&self, o: &WireDesc, check_labels: bool) -> bool {
        if self.kind != o.kind {
            return false;
        }
        if self.kind == Kind::Split {
            return true;
        }
        self.op == o.op
            && self.dtype == o.dtype
            && self.n == o.n
            && self.peer == o.peer
            && (!check_labels || (self.hash == o.hash && self.layer == o.layer))
    }
}

struct WireLabel<'a>(&'a WireDesc);

impl fmt::Display for WireLabel<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let d = self.0;
        if let Some(l) = d.layer {
            write!(f, "layer{l}.")?;
        }
        f.write_str(&String::from_utf8_lossy(&d.text[..d.len]))?;
        if d.truncated {
            f.write_str("…")?;
        }
        Ok(())
    }
}

impl fmt::Display for WireDesc {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_call(f, self.kind, &WireLabel(self), self.dtype, self.n, self.peer, self.tag, self.color, self.key)
    }
}

// ---------------------------------------------------------------------------------------------
// Process state

#[derive(Default)]
struct Activity {
    current: Option<CallDesc>,
    last: Option<CallDesc>,
}

/// An eager send in flight; its buffer is MPI's until the request completes.
struct PendingSend {
    req: Req,
    buf: Vec<u64>,
    desc: CallDesc,
    /// World rank of the destination.
    to: usize,
}

struct Process {
    universe: Mutex<Option<::mpi::environment::Universe>>,
    rank: usize,
    size: usize,
    /// The largest tag a user may pass; the one above it carries check-mode descriptors.
    max_user_tag: u32,
    /// Held around every MPI call.
    mpi: Mutex<()>,
    poisoned: AtomicBool,
    failure: Mutex<Option<Failure>>,
    activity: Mutex<Activity>,
    sends: Mutex<Vec<PendingSend>>,
    pool: Mutex<Vec<Vec<u64>>>,
    finalized: AtomicBool,
    /// Deadline of finalisation (the last one a run or world handle asked for).
    deadline: Mutex<Duration>,
}

static PROCESS: OnceLock<Result<Process, String>> = OnceLock::new();

fn process() -> Result<&'static Process, String> {
    PROCESS.get_or_init(Process::init).as_ref().map_err(Clone::clone)
}

impl Process {
    fn init() -> Result<Process, String> {
        if !super::launched() {
            return Err("this process was not started by an MPI launcher (mpirun)".into());
        }
        let (universe, _level) = ::mpi::initialize_with_threading(::mpi::Threading::Serialized)
            .ok_or("MPI was already initialised outside boost_comm")?;
        // SAFETY: MPI is initialised; the out-pointers are valid locals.
        let (rank, size, tag_ub) = unsafe {
            let world = ffi::RSMPI_COMM_WORLD;
            let rc = ffi::MPI_Comm_set_errhandler(world, ffi::RSMPI_ERRORS_RETURN);
            if rc != 0 {
                return Err(format!("MPI_Comm_set_errhandler failed: {}", mpi_error(rc)));
            }
            let (mut rank, mut size) = (0 as c_int, 0 as c_int);
            ffi::MPI_Comm_rank(world, &mut rank);
            ffi::MPI_Comm_size(world, &mut size);
            let mut ub: *mut c_int = std::ptr::null_mut();
            let mut flag: c_int = 0;
            ffi::MPI_Comm_get_attr(
                world,
                ffi::MPI_TAG_UB as c_int,
                &mut ub as *mut *mut c_int as *mut c_void,
                &mut flag,
            );
            let tag_ub = if flag != 0 && !ub.is_null() { *ub } else { 32767 };
            (rank, size, tag_ub)
        };
        Ok(Process {
            universe: Mutex::new(Some(universe)),
            rank: rank as usize,
            size: size as usize,
            max_user_tag: (tag_ub.max(2) - 1) as u32,
            mpi: Mutex::new(()),
            poisoned: AtomicBool::new(false),
            failure: Mutex::new(None),
            activity: Mutex::new(Activity::default()),
            sends: Mutex::new(Vec::new()),
            pool: Mutex::new(Vec::new()),
            finalized: AtomicBool::new(false),
            deadline: Mutex::new(MpiOptions::default().deadline),
        })
    }

    /// Run one MPI call under the process lock.
    fn call<R>(&self, f: impl FnOnce() -> R) -> R {
        let _g = lock(&self.mpi);
        f()
    }

    fn failure(&self) -> Option<Failure> {
        if !self.poisoned.load(Ordering::Acquire) {
            return None;
        }
        lock(&self.failure).clone()
    }

    fn activity(&self) -> Option<String> {
        let a = lock(&self.activity);
        match (&a.current, &a.last) {
            (Some(c), _) => Some(format!("in {c}")),
            (None, Some(l)) => Some(format!("after {l}")),
            (None, None) => None,
        }
    }

    /// Record the first failure of this rank; later calls fail with it.
    fn poison(&self, message: String) {
        let mut f = lock(&self.failure);
        if f.is_none() {
            *f = Some(Failure { rank: self.rank, during: self.activity(), message });
            self.poisoned.store(true, Ordering::Release);
        }
    }

    /// Complete the eager sends that are done and pool their buffers.
    fn reap_sends(&self) -> Result<(), String> {
        let mut sends = lock(&self.sends);
        if sends.is_empty() {
            return Ok(());
        }
        let mut i = 0;
        while i < sends.len() {
            let mut flag: c_int = 0;
            let rc = self.call(|| {
                // SAFETY: a live request of this process; its buffer is kept in `sends`.
                unsafe { ffi::MPI_Test(&mut sends[i].req.0, &mut flag, ffi::RSMPI_STATUS_IGNORE) }
            });
            if rc != 0 {
                let s = &sends[i];
                return Err(format!("{} to rank {} failed: {}", s.desc, s.to, mpi_error(rc)));
            }
            if flag != 0 {
                let done = sends.swap_remove(i);
                let mut pool = lock(&self.pool);
                if pool.len() < 16 {
                    pool.push(done.buf);
                }
            } else {
                i += 1;
            }
        }
        Ok(())
    }

    /// A pooled buffer of at least `words` words.
    fn buffer(&self, words: usize) -> Vec<u64> {
        let mut pool = lock(&self.pool);
        let mut v = match pool.iter().position(|v| v.capacity() >= words) {
            Some(i) => pool.swap_remove(i),
            None => pool.pop().unwrap_or_default(),
        };
        drop(pool);
        v.clear();
        v.resize(words, 0);
        v
    }
}

/// Pauses between polls: yields the core (`sched_yield`, like OpenMPI's
/// `mpi_yield_when_idle`) for the first 2 ms of a wait, then sleeps 50 µs doubling to 500 µs.
/// Short waits keep MPI's progress going (non-blocking collectives advance only inside
/// `MPI_Test`); long ones leave the cores to the ranks that work.
struct Backoff {
    start: Instant,
    sleep: Duration,
}

impl Backoff {
    const SPIN: Duration = Duration::from_millis(2);
    const MAX_SLEEP: Duration = Duration::from_micros(500);

    fn new() -> Self {
        Self { start: Instant::now(), sleep: Duration::from_micros(50) }
    }
    fn snooze(&mut self) {
        if self.start.elapsed() < Self::SPIN {
            std::thread::yield_now();
        } else {
            std::thread::sleep(self.sleep);
            self.sleep = (self.sleep * 2).min(Self::MAX_SLEEP);
        }
    }
}

enum WaitError {
    /// Indices of the requests still pending at the deadline.
    Timeout(Vec<usize>),
    Mpi(String),
}

/// Poll `reqs` (MPI sets completed ones to `MPI_REQUEST_NULL`) until all are done or
/// `deadline` passes.
fn wait_all(proc: &Process, reqs: &mut [ffi::MPI_Request], deadline: Instant) -> Result<(), WaitError> {
    let null = null_request();
    let mut backoff = Backoff::new();
    loop {
        let mut pending = false;
        for r in reqs.iter_mut() {
            if *r == null {
                continue;
            }
            let mut flag: c_int = 0;
            // SAFETY: `r` is a live request whose buffers outlive it (owned by the caller's
            // communicator, leaked if it gives up).
            let rc = proc.call(|| unsafe { ffi::MPI_Test(r, &mut flag, ffi::RSMPI_STATUS_IGNORE) });
            if rc != 0 {
                return Err(WaitError::Mpi(mpi_error(rc)));
            }
            if flag == 0 {
                pending = true;
            }
        }
        if !pending {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(WaitError::Timeout(
                reqs.iter().enumerate().filter(|(_, r)| **r != null).map(|(i, _)| i).collect(),
            ));
        }
        backoff.snooze();
        if let Err(e) = proc.reap_sends() {
            return Err(WaitError::Mpi(e));
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The communicator

/// Staging buffers MPI reads and writes (never the caller's).
#[derive(Default)]
struct Scratch {
    a: Vec<u64>,
    b: Vec<u64>,
    c: Vec<u64>,
}

/// One process's handle on one MPI communicator (the world, or a split of it).
pub struct MpiComm {
    proc: &'static Process,
    comm: Comm,
    rank: usize,
    size: usize,
    /// World rank of each group rank.
    members: Box<[usize]>,
    opts: MpiOptions,
    scratch: Mutex<Scratch>,
    /// Collectives issued on this group (numbers calls in mismatch messages).
    seq: AtomicU64,
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

    fn is_world(&self) -> bool {
        self.members.len() == self.proc.size
    }

    fn describe(&self, desc: &CallDesc) -> String {
        let mut s = desc.to_string();
        if !self.is_world() {
            s.push_str(&format!(" in the group of ranks [{}]", list(&self.members)));
        }
        s
    }

    fn invalid(&self, desc: &CallDesc, what: String) -> CommError {
        CommError::Invalid(format!("rank {}: {}: {what}", self.proc.rank, self.describe(desc)))
    }

    fn mpi_failed(&self, desc: &CallDesc, what: &str, detail: String) -> CommError {
        CommError::Invalid(format!("rank {}: {}: {what} failed: {detail}", self.proc.rank, self.describe(desc)))
    }

    /// Start an operation: run `f` under the process lock, mapping its return code.
    fn start(&self, desc: &CallDesc, what: &str, f: impl FnOnce() -> c_int) -> CommResult<()> {
        match self.proc.call(f) {
            0 => Ok(()),
            rc => Err(self.mpi_failed(desc, what, mpi_error(rc))),
        }
    }

    /// `n` as an MPI count.
    fn count(&self, desc: &CallDesc, n: usize) -> CommResult<c_int> {
        c_int::try_from(n).map_err(|_| self.invalid(desc, format!("{n} elements exceed MPI's count limit")))
    }

    fn late_note(&self) -> &'static str {
        if self.opts.check { "" } else { " (MPI does not tell which rank is late; BOOST_MPI_CHECK=1 does)" }
    }

    /// Wait for the operations of a collective.
    fn wait(&self, desc: &CallDesc, what: &str, reqs: &mut [ffi::MPI_Request], start: Instant) -> CommResult<()> {
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
    fn call<R>(&self, desc: CallDesc, body: impl FnOnce(&mut Scratch) -> CommResult<R>) -> CommResult<R> {
        let p = self.proc;
        if let Some(f) = p.failure() {
            return Err(CommError::PeerFailed(f));
        }
        if p.finalized.load(Ordering::Acquire) {
            return Err(self.invalid(&desc, "MPI has been finalised".into()));
        }
        lock(&p.activity).current = Some(desc);
        let r = match p.reap_sends() {
            Ok(()) => body(&mut lock(&self.scratch)),
            Err(e) => Err(self.mpi_failed(&desc, "an earlier send", e)),
        };
        if let Err(e) = &r
            && !matches!(e, CommError::PeerFailed(_))
        {
            p.poison(e.to_string());
        }
        let mut a = lock(&p.activity);
        a.current = None;
        a.last = Some(desc);
        r
    }

    /// Number this collective and, in check mode, exchange descriptors with every other rank
    /// of the group and compare them (rank 0's against each other rank's, as in-process).
    /// The opening of a collective over `len` elements split into one chunk per rank
    /// (reduce-scatter, all-gather): the split is checked; with one rank there is nothing to
    /// do (None); otherwise the ranks' arrival is checked and the chunk length and its MPI
    /// count come back.
    fn open_chunked(
        &self,
        desc: &CallDesc,
        len: usize,
        c: &mut Vec<u64>,
        start: Instant,
    ) -> CommResult<Option<(usize, c_int)>> {
        let p = self.size;
        if !len.is_multiple_of(p) {
            return Err(self.invalid(desc, format!("{len} elements do not split into {p} chunks")));
        }
        if p == 1 {
            return Ok(None);
        }
        let n = len / p;
        let count = self.count(desc, n)?;
        self.count(desc, len)?;
        self.arrive(desc, c, start)?;
        Ok(Some((n, count)))
    }

    fn arrive(&self, desc: &CallDesc, c: &mut Vec<u64>, start: Instant) -> CommResult<()> {
        let seq = self.seq.fetch_add(1, Ordering::Relaxed);
        if !self.opts.check {
            return Ok(());
        }
        let (p, me) = (self.size, self.rank);
        let slots = view::<u64>(c, p * WIRE);
        slots[me * WIRE..(me + 1) * WIRE].copy_from_slice(&encode(desc));
        let tag = self.proc.max_user_tag as c_int + 1;
        let others: Vec<usize> = (0..p).filter(|&j| j != me).collect();
        let mut reqs = vec![null_request(); 2 * others.len()];
        let base = slots.as_mut_ptr();
        for (k, &j) in others.iter().enumerate() {
            // SAFETY: slot j (WIRE words) of the scratch, which outlives the request.
            self.start(desc, "MPI_Irecv", || unsafe {
                ffi::MPI_Irecv(
                    base.add(j * WIRE) as *mut c_void,
                    WIRE as c_int,
                    u64_type(),
                    j as c_int,
                    tag,
                    self.comm.0,
                    &mut reqs[k],
                )
            })?;
        }
        let n = others.len();
        for (k, &j) in others.iter().enumerate() {
            // SAFETY: this rank's slot, only read.
            self.start(desc, "MPI_Isend", || unsafe {
                ffi::MPI_Isend(
                    base.add(me * WIRE) as *const c_void,
                    WIRE as c_int,
                    u64_type(),
                    j as c_int,
                    tag,
                    self.comm.0,
                    &mut reqs[n + k],
                )
            })?;
        }
        match wait_all(self.proc, &mut reqs, start + self.opts.deadline) {
            Ok(()) => {}
            Err(WaitError::Mpi(m)) => return Err(self.mpi_failed(desc, "the check-mode exchange", m)),
            Err(WaitError::Timeout(pending)) => {
                let mut missing: Vec<usize> =
                    pending.iter().filter(|&&k| k < n).map(|&k| self.members[others[k]]).collect();
                if missing.is_empty() {
                    missing = others.iter().map(|&j| self.members[j]).collect();
                }
                return Err(CommError::Timeout {
                    rank: self.proc.rank,
                    waited_s: start.elapsed().as_secs_f64(),
                    call: self.describe(desc),
                    missing,
                });
            }
        }
        let slots = view::<u64>(c, p * WIRE);
        let descs: Vec<Option<WireDesc>> = (0..p).map(|j| decode(&slots[j * WIRE..(j + 1) * WIRE])).collect();
        let place =
            if self.is_world() { String::new() } else { format!(" in the group of ranks [{}]", list(&self.members)) };
        let Some(d0) = descs[0] else {
            return Err(CommError::Mismatch(format!(
                "unreadable call descriptor from rank {} at call #{seq}{place}",
                self.members[0]
            )));
        };
        for (i, di) in descs.iter().enumerate().skip(1) {
            let Some(di) = di else {
                return Err(CommError::Mismatch(format!(
                    "unreadable call descriptor from rank {} at call #{seq}{place}",
                    self.members[i]
                )));
            };
            if !d0.matches(di, self.opts.check_labels) {
                return Err(CommError::Mismatch(format!(
                    "mismatched collectives at call #{seq}{place}: rank {} called {d0} but rank {} called {di}",
                    self.members[0], self.members[i]
                )));
            }
        }
        Ok(())
    }

    /// All-reduce by chunks: an all-to-all gives rank r chunk r of every rank's buffer, which
    /// it reduces in rank order 0..p−1; an all-gather returns the chunks. Every element is
    /// combined in the in-process backend's order.
    fn ordered_all_reduce<T: CommElem>(
        &self,
        desc: &CallDesc,
        buf: &mut [T],
        op: ReduceOp,
        s: &mut Scratch,
        start: Instant,
    ) -> CommResult<()> {
        let (p, n) = (self.size, buf.len());
        let c = n.div_ceil(p);
        let cc = self.count(desc, c)?;
        self.count(desc, p * c)?;
        let dt = datatype(T::DTYPE);
        let Scratch { a, b, .. } = s;
        let a = view::<T>(a, p * c);
        a[..n].copy_from_slice(buf);
        a[n..].fill(T::default());
        let b = view::<T>(b, p * c);
        let mut req = [null_request()];
        // SAFETY: both scratch buffers hold p·c elements and outlive the request.
        self.start(desc, "MPI_Ialltoall", || unsafe {
            ffi::MPI_Ialltoall(
                a.as_ptr() as *const c_void,
                cc,
                dt,
                b.as_mut_ptr() as *mut c_void,
                cc,
                dt,
                self.comm.0,
                &mut req[0],
            )
        })?;
        self.wait(desc, "MPI_Ialltoall", &mut req, start)?;
        let (out, _) = a.split_at_mut(c);
        out.copy_from_slice(&b[..c]);
        for j in 1..p {
            let src = &b[j * c..(j + 1) * c];
            match op {
                ReduceOp::Sum => out.iter_mut().zip(src).for_each(|(o, &x)| *o = T::add(*o, x)),
                ReduceOp::Max => out.iter_mut().zip(src).for_each(|(o, &x)| *o = T::max(*o, x)),
            }
        }
        // SAFETY: `a` holds this rank's c reduced elements, `b` p·c elements.
        self.start(desc, "MPI_Iallgather", || unsafe {
            ffi::MPI_Iallgather(
                a.as_ptr() as *const c_void,
                cc,
                dt,
                b.as_mut_ptr() as *mut c_void,
                cc,
                dt,
                self.comm.0,
                &mut req[0],
            )
        })?;
        self.wait(desc, "MPI_Iallgather", &mut req, start)?;
        buf.copy_from_slice(&b[..n]);
        Ok(())
    }

    fn all_reduce_t<T: CommElem>(&self, buf: &mut [T], op: ReduceOp, label: Label) -> CommResult<()> {
        let mut desc = CallDesc::new(Kind::all_reduce(op), label).data(T::DTYPE, buf.len());
        desc.op = Some(op);
        self.call(desc, |s| {
            let start = Instant::now();
            if self.size == 1 {
                return Ok(());
            }
            let n = buf.len();
            let count = self.count(&desc, n)?;
            self.arrive(&desc, &mut s.c, start)?;
            let float_max = op == ReduceOp::Max && T::DTYPE != DType::U32;
            if self.opts.ordered || float_max {
                return self.ordered_all_reduce(&desc, buf, op, s, start);
            }
            let dt = datatype(T::DTYPE);
            // SAFETY: reads constants the MPI library initialised.
            let mop = unsafe {
                match op {
                    ReduceOp::Sum => ffi::RSMPI_SUM,
                    ReduceOp::Max => ffi::RSMPI_MAX,
                }
            };
            let Scratch { a, b, .. } = s;
            let a = view::<T>(a, n);
            a.copy_from_slice(buf);
            let b = view::<T>(b, n);
            let mut req = [null_request()];
            // SAFETY: both scratch buffers hold n elements and outlive the request.
            self.start(&desc, "MPI_Iallreduce", || unsafe {
                ffi::MPI_Iallreduce(
                    a.as_ptr() as *const c_void,
                    b.as_mut_ptr() as *mut c_void,
                    count,
                    dt,
                    mop,
                    self.comm.0,
                    &mut req[0],
                )
            })?;
            self.wait(&desc, "MPI_Iallreduce", &mut req, start)?;
            buf.copy_from_slice(b);
            Ok(())
        })
    }

    fn reduce_scatter_t<T: CommElem>(&self, buf: &mut [T], label: Label) -> CommResult<()> {
        let desc = CallDesc::new(Kind::ReduceScatter, label).data(T::DTYPE, buf.len());
        self.call(desc, |s| {
            let start = Instant::now();
            let (p, me, len) = (self.size, self.rank, buf.len());
            let Some((n, count)) = self.open_chunked(&desc, len, &mut s.c, start)? else { return Ok(()) };
            let dt = datatype(T::DTYPE);
            let Scratch { a, b, .. } = s;
            let a = view::<T>(a, len);
            a.copy_from_slice(buf);
            let mut req = [null_request()];
            if self.opts.ordered {
                let b = view::<T>(b, len);
                // SAFETY: both scratch buffers hold len elements and outlive the request.
                self.start(&desc, "MPI_Ialltoall", || unsafe {
                    ffi::MPI_Ialltoall(
                        a.as_ptr() as *const c_void,
                        count,
                        dt,
                        b.as_mut_ptr() as *mut c_void,
                        count,
                        dt,
                        self.comm.0,
                        &mut req[0],
                    )
                })?;
                self.wait(&desc, "MPI_Ialltoall", &mut req, start)?;
                let out = &mut buf[me * n..(me + 1) * n];
                out.copy_from_slice(&b[..n]);
                for j in 1..p {
                    out.iter_mut().zip(&b[j * n..(j + 1) * n]).for_each(|(o, &x)| *o = T::add(*o, x));
                }
                return Ok(());
            }
            let b = view::<T>(b, n);
            // SAFETY: reads a constant; the scratch buffers hold len and n elements and outlive
            // the request.
            self.start(&desc, "MPI_Ireduce_scatter_block", || unsafe {
                ffi::MPI_Ireduce_scatter_block(
                    a.as_ptr() as *const c_void,
                    b.as_mut_ptr() as *mut c_void,
                    count,
                    dt,
                    ffi::RSMPI_SUM,
                    self.comm.0,
                    &mut req[0],
                )
            })?;
            self.wait(&desc, "MPI_Ireduce_scatter_block", &mut req, start)?;
            buf[me * n..(me + 1) * n].copy_from_slice(b);
            Ok(())
        })
    }

    fn all_gather_t<T: CommElem>(&self, buf: &mut [T], label: Label) -> CommResult<()> {
        let desc = CallDesc::new(Kind::AllGather, label).data(T::DTYPE, buf.len());
        self.call(desc, |s| {
            let start = Instant::now();
            let (me, len) = (self.rank, buf.len());
            let Some((n, count)) = self.open_chunked(&desc, len, &mut s.c, start)? else { return Ok(()) };
            let dt = datatype(T::DTYPE);
            let Scratch { a, b, .. } = s;
            let a = view::<T>(a, n);
            a.copy_from_slice(&buf[me * n..(me + 1) * n]);
            let b = view::<T>(b, len);
            let mut req = [null_request()];
            // SAFETY: the scratch buffers hold n and len elements and outlive the request.
            self.start(&desc, "MPI_Iallgather", || unsafe {
                ffi::MPI_Iallgather(
                    a.as_ptr() as *const c_void,
                    count,
                    dt,
                    b.as_mut_ptr() as *mut c_void,
                    count,
                    dt,
                    self.comm.0,
                    &mut req[0],
                )
            })?;
            self.wait(&desc, "MPI_Iallgather", &mut req, start)?;
            buf.copy_from_slice(b);
            Ok(())
        })
    }

    fn broadcast_t<T: CommElem>(&self, buf: &mut [T], root: usize, label: Label) -> CommResult<()> {
        let desc = CallDesc::new(Kind::Broadcast, label).data(T::DTYPE, buf.len()).peer(root);
        self.call(desc, |s| {
            let start = Instant::now();
            let (p, me, n) = (self.size, self.rank, buf.len());
            if root >= p {
                return Err(self.invalid(&desc, format!("root {root} is not a rank of a group of {p}")));
            }
            if p == 1 {
                return Ok(());
            }
            let count = self.count(&desc, n)?;
            self.arrive(&desc, &mut s.c, start)?;
            let a = view::<T>(&mut s.a, n);
            if me == root {
                a.copy_from_slice(buf);
            }
            let mut req = [null_request()];
            // SAFETY: the scratch buffer holds n elements and outlives the request.
            self.start(&desc, "MPI_Ibcast", || unsafe {
                ffi::MPI_Ibcast(
                    a.as_mut_ptr() as *mut c_void,
                    count,
                    datatype(T::DTYPE),
                    root as c_int,
                    self.comm.0,
                    &mut req[0],
                )
            })?;
            self.wait(&desc, "MPI_Ibcast", &mut req, start)?;
            if me != root {
                buf.copy_from_slice(a);
            }
            Ok(())
        })
    }

    fn check_peer(&self, desc: &CallDesc, peer: usize, tag: u32, what: &str) -> CommResult<()> {
        if peer >= self.size {
            return Err(self.invalid(desc, format!("{what} {peer} is not a rank of a group of {}", self.size)));
        }
        if tag > self.proc.max_user_tag {
            return Err(self.invalid(desc, format!("tag {tag} exceeds MPI's limit of {}", self.proc.max_user_tag)));
        }
        Ok(())
    }

    fn send_t<T: CommElem>(&self, buf: &[T], to: usize, tag: u32, label: Label) -> CommResult<()> {
        let mut desc = CallDesc::new(Kind::Send, label).data(T::DTYPE, buf.len()).peer(to);
        desc.tag = tag;
        self.call(desc, |_| {
            self.check_peer(&desc, to, tag, "destination")?;
            let payload = std::mem::size_of_val(buf);
            let bytes = self.count(&desc, WIRE * 8 + payload)?;
            let mut m = self.proc.buffer(WIRE + payload.div_ceil(8));
            m[..WIRE].copy_from_slice(&encode(&desc));
            // SAFETY: `m` holds WIRE words plus at least `payload` bytes.
            unsafe {
                std::ptr::copy_nonoverlapping(buf.as_ptr() as *const u8, m.as_mut_ptr().add(WIRE) as *mut u8, payload)
            };
            let mut req = null_request();
            // SAFETY: `m` moves into the pending list below and stays alive (and unmoved: its
            // heap allocation does not move with the Vec) until the request completes.
            self.start(&desc, "MPI_Isend", || unsafe {
                ffi::MPI_Isend(
                    m.as_ptr() as *const c_void,
                    bytes,
                    bytes_type(),
                    to as c_int,
                    tag as c_int,
                    self.comm.0,
                    &mut req,
                )
            })?;
            lock(&self.proc.sends).push(PendingSend { req: Req(req), buf: m, desc, to: self.members[to] });
            Ok(())
        })
    }

    fn recv_t<T: CommElem>(&self, buf: &mut [T], from: usize, tag: u32, label: Label) -> CommResult<()> {
        let mut desc = CallDesc::new(Kind::Recv, label).data(T::DTYPE, buf.len()).peer(from);
        desc.tag = tag;
        self.call(desc, |s| {
            let start = Instant::now();
            self.check_peer(&desc, from, tag, "source")?;
            let deadline = start + self.opts.deadline;
            let mut backoff = Backoff::new();
            let mut status = empty_status();
            // SAFETY: reads a constant the MPI library initialised.
            let mut msg = unsafe { ffi::RSMPI_MESSAGE_NULL };
            loop {
                let mut flag: c_int = 0;
                // SAFETY: out-pointers are valid locals.
                self.start(&desc, "MPI_Improbe", || unsafe {
                    ffi::MPI_Improbe(from as c_int, tag as c_int, self.comm.0, &mut flag, &mut msg, &mut status)
                })?;
                if flag != 0 {
                    break;
                }
                if Instant::now() >= deadline {
                    return Err(self.recv_timeout(&desc, from, start));
                }
                backoff.snooze();
                self.proc.reap_sends().map_err(|e| self.mpi_failed(&desc, "an earlier send", e))?;
            }
            let mut bytes: c_int = 0;
            // SAFETY: `status` was filled by MPI_Improbe.
            self.start(&desc, "MPI_Get_count", || unsafe { ffi::MPI_Get_count(&status, bytes_type(), &mut bytes) })?;
            let bytes = bytes.max(0) as usize;
            let m = view::<u64>(&mut s.a, bytes.div_ceil(8).max(WIRE));
            let mut req = [null_request()];
            // SAFETY: the scratch buffer holds at least `bytes` bytes and outlives the request.
            self.start(&desc, "MPI_Imrecv", || unsafe {
                ffi::MPI_Imrecv(m.as_mut_ptr() as *mut c_void, bytes as c_int, bytes_type(), &mut msg, &mut req[0])
            })?;
            wait_all(self.proc, &mut req, deadline).map_err(|e| match e {
                WaitError::Mpi(e) => self.mpi_failed(&desc, "MPI_Imrecv", e),
                WaitError::Timeout(_) => CommError::Timeout {
                    rank: self.proc.rank,
                    waited_s: start.elapsed().as_secs_f64(),
                    call: format!("{} (receiving the matched message)", self.describe(&desc)),
                    missing: vec![self.members[from]],
                },
            })?;
            let payload = std::mem::size_of_val(buf);
            let sent = if bytes >= WIRE * 8 { decode(&m[..WIRE]) } else { None };
            let Some(sent) = sent else {
                return Err(CommError::Mismatch(format!(
                    "rank {} called {desc} but rank {} sent a message of {bytes} bytes without a descriptor",
                    self.proc.rank, self.members[from]
                )));
            };
            if sent.kind != Kind::Send
                || sent.dtype != desc.dtype
                || sent.n != buf.len() as u64
                || bytes != WIRE * 8 + payload
            {
                return Err(CommError::Mismatch(format!(
                    "rank {} called {desc} but rank {} sent {sent}",
                    self.proc.rank, self.members[from]
                )));
            }
            // SAFETY: the message holds WIRE words and then exactly `payload` bytes.
            unsafe {
                std::ptr::copy_nonoverlapping(m.as_ptr().add(WIRE) as *const u8, buf.as_mut_ptr() as *mut u8, payload)
            };
            Ok(())
        })
    }

    /// A recv's timeout, noting a message from the same rank with another tag if one waits.
    fn recv_timeout(&self, desc: &CallDesc, from: usize, start: Instant) -> CommError {
        let mut flag: c_int = 0;
        let mut st = empty_status();
        // SAFETY: out-pointers are valid locals; reads a constant.
        let rc = self
            .proc
            .call(|| unsafe { ffi::MPI_Iprobe(from as c_int, ffi::RSMPI_ANY_TAG, self.comm.0, &mut flag, &mut st) });
        let mut call = self.describe(desc);
        if rc == 0 && flag != 0 {
            call.push_str(&format!(" (a message with tag {} from rank {} is waiting)", st.MPI_TAG, self.members[from]));
        }
        CommError::Timeout {
            rank: self.proc.rank,
            waited_s: start.elapsed().as_secs_f64(),
            call,
            missing: vec![self.members[from]],
        }
    }
}

impl Communicator for MpiComm {
    fn rank(&self) -> usize {
        self.rank
    }
    fn size(&self) -> usize {
        self.size
    }
    fn all_reduce(&self, buf: Payload<'_>, op: ReduceOp, label: Label) -> CommResult<()> {
        dispatch!(Payload, buf, |b| self.all_reduce_t(b, op, label))
    }
    fn all_gather(&self, buf: Payload<'_>, label: Label) -> CommResult<()> {
        dispatch!(Payload, buf, |b| self.all_gather_t(b, label))
    }
    fn reduce_scatter(&self, buf: Payload<'_>, label: Label) -> CommResult<()> {
        dispatch!(Payload, buf, |b| self.reduce_scatter_t(b, label))
    }
    fn broadcast(&self, buf: Payload<'_>, root: usize, label: Label) -> CommResult<()> {
        dispatch!(Payload, buf, |b| self.broadcast_t(b, root, label))
    }
    fn send(&self, buf: PayloadRef<'_>, to: usize, tag: u32, label: Label) -> CommResult<()> {
        dispatch!(PayloadRef, buf, |b| self.send_t(b, to, tag, label))
    }
    fn recv(&self, buf: Payload<'_>, from: usize, tag: u32, label: Label) -> CommResult<()> {
        dispatch!(Payload, buf, |b| self.recv_t(b, from, tag, label))
    }
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
        let mut desc = CallDesc::new(Kind::Split, Label::op("split"));
        desc.color = color;
        desc.key = key;
        self.call(desc, |s| {
            let start = Instant::now();
            let (Ok(c_color), Ok(c_key)) = (c_int::try_from(color), c_int::try_from(key)) else {
                return Err(self.invalid(&desc, "color and key must fit MPI's int".into()));
            };
            self.arrive(&desc, &mut s.c, start)?;
            // Every rank's (color, key), to know the new group's members.
            let p = self.size;
            let Scratch { a, b, .. } = s;
            let a = view::<u64>(a, 2);
            a.copy_from_slice(&[color as u64, key as u64]);
            let b = view::<u64>(b, 2 * p);
            let mut req = [null_request()];
            // SAFETY: the scratch buffers hold 2 and 2p words and outlive the request.
            self.start(&desc, "MPI_Iallgather", || unsafe {
                ffi::MPI_Iallgather(
                    a.as_ptr() as *const c_void,
                    2,
                    u64_type(),
                    b.as_mut_ptr() as *mut c_void,
                    2,
                    u64_type(),
                    self.comm.0,
                    &mut req[0],
                )
            })?;
            self.wait(&desc, "MPI_Iallgather", &mut req, start)?;
            let mut same: Vec<(u64, usize)> =
                (0..p).filter(|&i| b[2 * i] == color as u64).map(|i| (b[2 * i + 1], i)).collect();
            same.sort_unstable();
            let members: Box<[usize]> = same.iter().map(|&(_, i)| self.members[i]).collect();
            let rank = same.iter().position(|&(_, i)| i == self.rank).expect("this rank has its own color");
            // Blocking, but every rank of the group has already arrived (the all-gather above).
            // SAFETY: reads a constant; the out-pointer is a valid local.
            let mut newcomm = unsafe { ffi::RSMPI_COMM_NULL };
            self.start(&desc, "MPI_Comm_split", || unsafe {
                ffi::MPI_Comm_split(self.comm.0, c_color, c_key, &mut newcomm)
            })?;
            let (mut r, mut n) = (0 as c_int, 0 as c_int);
            // SAFETY: `newcomm` is a valid communicator; the out-pointers are valid locals.
            self.proc.call(|| unsafe {
                ffi::MPI_Comm_rank(newcomm, &mut r);
                ffi::MPI_Comm_size(newcomm, &mut n);
            });
            let child = MpiComm::new(self.proc, Comm(newcomm), members, self.opts);
            if r as usize != rank || n as usize != child.size {
                return Err(self.invalid(
                    &desc,
                    format!("MPI_Comm_split gave rank {r} of {n}, expected rank {rank} of {}", child.size),
                ));
            }
            Ok(Box::new(child) as Box<dyn Communicator>)
        })
    }
}

impl MpiComm {
    fn new(proc: &'static Process, comm: Comm, members: Box<[usize]>, opts: MpiOptions) -> Self {
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
}

// ---------------------------------------------------------------------------------------------
// Entry points

/// This process's world communicator, with options from the environment
/// ([`MpiOptions::from_env`]); `None` when the process was not started by an MPI launcher.
/// Initialises MPI on first use. Every process must call it (it duplicates
/// `MPI_COMM_WORLD`, a collective).
///
/// # Panics
/// When MPI cannot be initialised or the duplication fails (see [`mpi_world_with`]).
pub fn mpi_world() -> Option<Arc<dyn Communicator>> {
    match mpi_world_with(MpiOptions::from_env()) {
        Ok(w) => w,
        Err(e) => panic!("cannot open the MPI world: {e}"),
    }
}

/// A world communicator with `opts` (a duplicate of `MPI_COMM_WORLD`, so handles never see
/// each other's messages); `Ok(None)` when the process was not started by an MPI launcher.
/// Every process must call it.
pub fn mpi_world_with(opts: MpiOptions) -> CommResult<Option<Arc<dyn Communicator>>> {
    if !super::launched() {
        return Ok(None);
    }
    let proc = process().map_err(|e| CommError::Invalid(format!("cannot start MPI: {e}")))?;
    if let Some(f) = proc.failure() {
        return Err(CommError::PeerFailed(f));
    }
    if proc.finalized.load(Ordering::Acquire) {
        return Err(CommError::Invalid("MPI has been finalised".into()));
    }
    *lock(&proc.deadline) = opts.deadline;
    let start = Instant::now();
    // The new handle is written when the request completes; boxed so that a timeout can leak
    // it instead of leaving MPI a pointer into this stack frame.
    // SAFETY: reads a constant.
    let mut newcomm = Box::new(unsafe { ffi::RSMPI_COMM_NULL });
    let mut req = [null_request()];
    // SAFETY: MPI is initialised; the out-pointers outlive the request.
    let rc = proc.call(|| unsafe { ffi::MPI_Comm_idup(ffi::RSMPI_COMM_WORLD, &mut *newcomm, &mut req[0]) });
    let fail = |msg: String| {
        proc.poison(msg.clone());
        CommError::Invalid(msg)
    };
    if rc != 0 {
        return Err(fail(format!("rank {}: MPI_Comm_idup failed: {}", proc.rank, mpi_error(rc))));
    }
    match wait_all(proc, &mut req, start + opts.deadline) {
        Ok(()) => {}
        Err(WaitError::Mpi(m)) => return Err(fail(format!("rank {}: MPI_Comm_idup failed: {m}", proc.rank))),
        Err(WaitError::Timeout(_)) => {
            std::mem::forget(newcomm);
            let e = CommError::Timeout {
                rank: proc.rank,
                waited_s: start.elapsed().as_secs_f64(),
                call: "opening the MPI world (MPI_Comm_idup)".into(),
                missing: (0..proc.size).filter(|&r| r != proc.rank).collect(),
            };
            proc.poison(e.to_string());
            return Err(e);
        }
    }
    let members: Box<[usize]> = (0..proc.size).collect();
    Ok(Some(Arc::new(MpiComm::new(proc, Comm(*newcomm), members, opts))))
}

/// Finish MPI: wait (up to the deadline) until every eager send was received, meet every
/// other process in a barrier (up to the deadline), and call `MPI_Finalize`. Later MPI calls
/// fail. Does nothing when MPI was never started or is already finalised; after a failure it
/// returns that failure and leaves MPI as it is (abort instead).
pub fn finalize() -> CommResult<()> {
    let Some(Ok(proc)) = PROCESS.get() else {
        return Ok(());
    };
    if proc.finalized.load(Ordering::Acquire) {
        return Ok(());
    }
    if let Some(f) = proc.failure() {
        return Err(CommError::PeerFailed(f));
    }
    let limit = *lock(&proc.deadline);
    let start = Instant::now();
    let fail = |e: CommError| {
        proc.poison(e.to_string());
        e
    };
    let mut backoff = Backoff::new();
    loop {
        proc.reap_sends().map_err(|e| fail(CommError::Invalid(format!("rank {}: finalising: {e}", proc.rank))))?;
        let sends = lock(&proc.sends);
        if sends.is_empty() {
            break;
        }
        if start.elapsed() >= limit {
            let what: Vec<String> = sends.iter().map(|s| format!("{} to rank {}", s.desc, s.to)).collect();
            let missing = sends.iter().map(|s| s.to).collect();
            drop(sends);
            return Err(fail(CommError::Timeout {
                rank: proc.rank,
                waited_s: start.elapsed().as_secs_f64(),
                call: format!("finalize, for sends never received: {}", what.join("; ")),
                missing,
            }));
        }
        drop(sends);
        backoff.snooze();
    }
    let mut req = [null_request()];
    // SAFETY: MPI is initialised; the out-pointer outlives the request.
    let rc = proc.call(|| unsafe { ffi::MPI_Ibarrier(ffi::RSMPI_COMM_WORLD, &mut req[0]) });
    if rc != 0 {
        return Err(fail(CommError::Invalid(format!("rank {}: MPI_Ibarrier failed: {}", proc.rank, mpi_error(rc)))));
    }
    match wait_all(proc, &mut req, start + limit) {
        Ok(()) => {}
        Err(WaitError::Mpi(m)) => {
            return Err(fail(CommError::Invalid(format!("rank {}: finalize barrier failed: {m}", proc.rank))));
        }
        Err(WaitError::Timeout(_)) => {
            return Err(fail(CommError::Timeout {
                rank: proc.rank,
                waited_s: start.elapsed().as_secs_f64(),
                call: "finalize (the other processes did not finish)".into(),
                missing: (0..proc.size).filter(|&r| r != proc.rank).collect(),
            }));
        }
    }
    let universe = {
        let _g = lock(&proc.mpi);
        proc.finalized.store(true, Ordering::Release);
        lock(&proc.universe).take()
    };
    drop(universe);
    Ok(())
}

/// Flush the standard streams and end the whole MPI job (`MPI_Abort` on the world: `mpirun`
/// stops every process); without MPI, exit the process.
pub fn abort(code: i32) -> ! {
    let _ = std::io::stdout().flush();
    let _ = std::io::stderr().flush();
    if let Some(Ok(proc)) = PROCESS.get()
        && !proc.finalized.load(Ordering::Acquire)
    {
        // Give the launcher a moment to forward what was just written before it stops the job.
        std::thread::sleep(Duration::from_millis(100));
        // SAFETY: MPI is initialised and not finalised. The process lock is not taken: another
        // thread may hold it inside a call that never returns.
        unsafe { ffi::MPI_Abort(ffi::RSMPI_COMM_WORLD, code) };
    }
    std::process::exit(code)
}

/// [`run_mpi_with`] with the grid options of `opts`, its deadline and label checking, and
/// the rest of [`MpiOptions`] from the environment (which also overrides the deadline).
pub fn run_mpi<T>(
    dims: impl Into<Dims>,
    opts: &RunOptions,
    f: impl FnOnce(usize, Grid) -> anyhow::Result<T>,
) -> anyhow::Result<T> {
    let mpi =
        MpiOptions::default().deadline(opts.inprocess.deadline).check_labels(opts.inprocess.check_labels).with_env();
    run_mpi_with(dims, &opts.grid, mpi, f)
}

/// Run `f(rank, grid)` for this process's rank of a `dims` grid over the MPI world, then
/// finalise MPI and return its result.
///
/// On an error or panic of `f` (or a failed finalisation) this process prints
/// `rank r failed (in|after <call>): <error>` to stderr and calls `MPI_Abort`, so `mpirun`
/// stops every other process at once: it does not return. Fails (without touching MPI) when
/// the process was not started by an MPI launcher.
pub fn run_mpi_with<T>(
    dims: impl Into<Dims>,
    grid: &GridOptions,
    opts: MpiOptions,
    f: impl FnOnce(usize, Grid) -> anyhow::Result<T>,
) -> anyhow::Result<T> {
    let dims = dims.into();
    anyhow::ensure!(super::launched(), "run_mpi: this process was not started by an MPI launcher (mpirun)");
    let proc = process().map_err(|e| anyhow::anyhow!("cannot start MPI: {e}"))?;
    let out = catch_unwind(AssertUnwindSafe(|| -> anyhow::Result<T> {
        let world = mpi_world_with(opts)?.expect("launched by mpirun");
        let grid = Grid::new(world, dims, grid)?;
        f(proc.rank, grid)
    }));
    let message = match out {
        Ok(Ok(v)) => match finalize() {
            Ok(()) => return Ok(v),
            Err(e) => e.to_string(),
        },
        Ok(Err(e)) => format!("{e:#}"),
        Err(payload) => format!("panicked: {}", panic_message(&*payload)),
    };
    let during = proc.failure().and_then(|f| f.during).or_else(|| proc.activity());
    // One write, so that lines of several failing ranks do not interleave.
    let line = format!("{}\n", Failure { rank: proc.rank, during, message });
    let _ = std::io::stderr().write_all(line.as_bytes());
    abort(1)
}
