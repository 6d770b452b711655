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
//! [`CommError::PeerFailed`] naming the failed rank. A rank that returns normally is marked
//! exited ([`InProcess::mark_exited`]); a call waiting for it fails at once. Every wait also
//! has a deadline ([`InProcessOptions::deadline`]).

use crate::call::CallDesc;
use crate::communicator::Communicator;
use crate::error::{CommError, CommResult, Failure, list};
use crate::payload::{CommElem, Kind, Payload, PayloadRef, dispatch};
use boost_tensor::{Label, ReduceOp};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};

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

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// What one rank is doing, for failure messages.
#[derive(Default)]
struct Activity {
    current: Option<CallDesc>,
    last: Option<CallDesc>,
}

struct Universe {
    size: usize,
    opts: InProcessOptions,
    poisoned: AtomicBool,
    failure: Mutex<Option<Failure>>,
    exited: Box<[AtomicBool]>,
    activity: Box<[Mutex<Activity>]>,
    groups: Mutex<Vec<Weak<GroupShared>>>,
    handed_out: AtomicBool,
}

impl Universe {
    fn failure(&self) -> Option<Failure> {
        if !self.poisoned.load(Ordering::Acquire) {
            return None;
        }
        lock(&self.failure).clone()
    }

    fn poison(&self, rank: usize, message: String) -> bool {
        let first = {
            let mut f = lock(&self.failure);
            if f.is_some() {
                false
            } else {
                let during = rank_activity(self, rank);
                *f = Some(Failure { rank, during, message });
                self.poisoned.store(true, Ordering::Release);
                true
            }
        };
        if first {
            self.wake_all();
        }
        first
    }

    fn mark_exited(&self, rank: usize) {
        self.exited[rank].store(true, Ordering::Release);
        self.wake_all();
    }

    fn wake_all(&self) {
        let groups: Vec<Arc<GroupShared>> = lock(&self.groups).iter().filter_map(Weak::upgrade).collect();
        for g in groups {
            let _st = lock(&g.state);
            g.cv.notify_all();
        }
    }

    fn register(&self, g: &Arc<GroupShared>) {
        let mut groups = lock(&self.groups);
        groups.retain(|w| w.strong_count() > 0);
        groups.push(Arc::downgrade(g));
    }
}

fn rank_activity(u: &Universe, rank: usize) -> Option<String> {
    let a = lock(u.activity.get(rank)?);
    match (&a.current, &a.last) {
        (Some(c), _) => Some(format!("in {c}")),
        (None, Some(l)) => Some(format!("after {l}")),
        (None, None) => None,
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Arrival,
    Completion,
}

struct Msg {
    tag: u32,
    desc: CallDesc,
    data: Vec<u64>,
}

struct GroupState {
    generation: u64,
    arrived: usize,
    present: Vec<bool>,
    descs: Vec<Option<CallDesc>>,
    /// Collectives that completed their arrival round.
    seq: u64,
    verdict: Option<String>,
    scratch: Vec<u64>,
    scratch_ptr: usize,
    /// Queue `src·p + dst`.
    mail: Vec<VecDeque<Msg>>,
    pool: Vec<Vec<u64>>,
    split_out: Vec<Option<(Arc<GroupShared>, usize)>>,
}

struct GroupShared {
    uni: Arc<Universe>,
    /// Global rank of each group rank.
    members: Box<[usize]>,
    /// Buffer address of each rank in the current collective.
    ptrs: Box<[AtomicUsize]>,
    state: Mutex<GroupState>,
    cv: Condvar,
}

impl GroupShared {
    fn new(uni: &Arc<Universe>, members: Vec<usize>) -> Arc<Self> {
        let p = members.len();
        let g = Arc::new(Self {
            uni: uni.clone(),
            ptrs: (0..p).map(|_| AtomicUsize::new(0)).collect(),
            state: Mutex::new(GroupState {
                generation: 0,
                arrived: 0,
                present: vec![false; p],
                descs: vec![None; p],
                seq: 0,
                verdict: None,
                scratch: Vec::new(),
                scratch_ptr: 0,
                mail: (0..p * p).map(|_| VecDeque::new()).collect(),
                pool: Vec::new(),
                split_out: (0..p).map(|_| None).collect(),
            }),
            cv: Condvar::new(),
            members: members.into_boxed_slice(),
        });
        uni.register(&g);
        g
    }

    fn size(&self) -> usize {
        self.members.len()
    }

    fn is_world(&self) -> bool {
        self.members.len() == self.uni.size && self.members.iter().enumerate().all(|(i, &m)| i == m)
    }

    fn describe(&self, desc: &CallDesc, phase: Phase) -> String {
        let mut s = desc.to_string();
        if phase == Phase::Completion {
            s.push_str(" (completing)");
        }
        if !self.is_world() {
            s.push_str(&format!(" in the group of ranks [{}]", list(&self.members)));
        }
        s
    }

    fn deadline_from(&self, start: Instant) -> Option<Instant> {
        start.checked_add(self.uni.opts.deadline)
    }

    /// One barrier round; `on_complete` runs on the last arriver under the lock.
    fn round<'a>(
        &'a self,
        mut st: MutexGuard<'a, GroupState>,
        me: usize,
        desc: &CallDesc,
        phase: Phase,
        on_complete: impl FnOnce(&mut GroupState),
    ) -> CommResult<MutexGuard<'a, GroupState>> {
        if let Some(f) = self.uni.failure() {
            return Err(CommError::PeerFailed(f));
        }
        let p = self.size();
        let generation = st.generation;
        st.present[me] = true;
        st.arrived += 1;
        if st.arrived == p {
            on_complete(&mut st);
            st.arrived = 0;
            st.present.iter_mut().for_each(|x| *x = false);
            st.generation = st.generation.wrapping_add(1);
            self.cv.notify_all();
            return Ok(st);
        }
        let start = Instant::now();
        let deadline = self.deadline_from(start);
        loop {
            if st.generation != generation {
                return Ok(st);
            }
            if let Some(f) = self.uni.failure() {
                return Err(CommError::PeerFailed(f));
            }
            if let Some(i) =
                (0..p).find(|&i| !st.present[i] && self.uni.exited[self.members[i]].load(Ordering::Acquire))
            {
                return Err(CommError::PeerExited {
                    rank: self.members[i],
                    waiting: self.members[me],
                    call: self.describe(desc, phase),
                });
            }
            let now = Instant::now();
            match deadline {
                Some(d) if now >= d => {
                    let missing = (0..p).filter(|&i| !st.present[i]).map(|i| self.members[i]).collect();
                    return Err(CommError::Timeout {
                        rank: self.members[me],
                        waited_s: (now - start).as_secs_f64(),
                        call: self.describe(desc, phase),
                        missing,
                    });
                }
                Some(d) => st = self.cv.wait_timeout(st, d - now).unwrap_or_else(|e| e.into_inner()).0,
                None => st = self.cv.wait(st).unwrap_or_else(|e| e.into_inner()),
            }
        }
    }

    /// The arrival round: publish the descriptor, check every rank made the same call, and
    /// run `action` (on the last arriver) when they did.
    fn arrive<'a>(
        &'a self,
        me: usize,
        desc: &CallDesc,
        action: impl FnOnce(&mut GroupState),
    ) -> CommResult<MutexGuard<'a, GroupState>> {
        let mut st = lock(&self.state);
        st.descs[me] = Some(*desc);
        let check = self.uni.opts.check_labels;
        let st = self.round(st, me, desc, Phase::Arrival, |st| {
            st.verdict = None;
            let d0 = st.descs[0].expect("arrived rank has a descriptor");
            for i in 1..st.descs.len() {
                let di = st.descs[i].expect("arrived rank has a descriptor");
                if !d0.matches(&di, check) {
                    let place = if self.is_world() {
                        String::new()
                    } else {
                        format!(" in the group of ranks [{}]", list(&self.members))
                    };
                    st.verdict = Some(format!(
                        "mismatched collectives at call #{}{place}: rank {} called {d0} but rank {} called {di}",
                        st.seq, self.members[0], self.members[i]
                    ));
                    break;
                }
            }
            if st.verdict.is_none() {
                action(st);
            }
            st.seq += 1;
        })?;
        match &st.verdict {
            Some(v) => Err(CommError::Mismatch(v.clone())),
            None => Ok(st),
        }
    }
}

/// Chunk `r` of `n` elements over `p` ranks, in multiples of 16 elements (no two ranks write
/// one cache line).
fn chunk(n: usize, p: usize, r: usize) -> (usize, usize) {
    let c = n.div_ceil(p).div_ceil(16) * 16;
    ((r * c).min(n), ((r + 1) * c).min(n))
}

/// `out[lo..hi] = buf_0[off+lo..off+hi] ∘ buf_1[…] ∘ … ∘ buf_{p−1}[…]`, in rank order.
///
/// # Safety
/// Every `ptrs[k]` points at a live buffer of at least `off + hi` elements of `T` that nobody
/// writes in `off+lo..off+hi` meanwhile; `out` has at least `hi` elements, is not one of the
/// inputs, and nobody else touches `out[lo..hi]`.
unsafe fn reduce_into<T: CommElem>(out: *mut T, ptrs: &[AtomicUsize], off: usize, lo: usize, hi: usize, op: ReduceOp) {
    if lo >= hi {
        return;
    }
    let len = hi - lo;
    // SAFETY: guaranteed by the caller.
    unsafe {
        let out = std::slice::from_raw_parts_mut(out.add(lo), len);
        let src =
            |k: usize| std::slice::from_raw_parts((ptrs[k].load(Ordering::Relaxed) as *const T).add(off + lo), len);
        out.copy_from_slice(src(0));
        for k in 1..ptrs.len() {
            let b = src(k);
            match op {
                ReduceOp::Sum => out.iter_mut().zip(b).for_each(|(o, &x)| *o = T::add(*o, x)),
                ReduceOp::Max => out.iter_mut().zip(b).for_each(|(o, &x)| *o = T::max(*o, x)),
            }
        }
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

/// One rank's handle on one in-process group.
pub struct InProcessComm {
    g: Arc<GroupShared>,
    rank: usize,
}

impl InProcessComm {
    /// World rank of this handle.
    pub fn global_rank(&self) -> usize {
        self.g.members[self.rank]
    }

    /// Global ranks of the group, by group rank.
    pub fn members(&self) -> &[usize] {
        &self.g.members
    }

    /// Run `body` as the call `desc`: fail at once if poisoned, keep the rank's activity for
    /// failure messages, and poison the universe on an error raised here.
    fn call<R>(&self, desc: CallDesc, body: impl FnOnce() -> CommResult<R>) -> CommResult<R> {
        let uni = &self.g.uni;
        if let Some(f) = uni.failure() {
            return Err(CommError::PeerFailed(f));
        }
        let me = self.global_rank();
        lock(&uni.activity[me]).current = Some(desc);
        let r = body();
        if let Err(e) = &r
            && !matches!(e, CommError::PeerFailed(_))
        {
            uni.poison(me, e.to_string());
        }
        let mut a = lock(&uni.activity[me]);
        a.current = None;
        a.last = Some(desc);
        r
    }

    fn invalid(&self, desc: &CallDesc, what: String) -> CommError {
        CommError::Invalid(format!("rank {}: {}: {what}", self.global_rank(), self.g.describe(desc, Phase::Arrival)))
    }

    fn all_reduce_t<T: CommElem>(&self, buf: &mut [T], op: ReduceOp, label: Label) -> CommResult<()> {
        let mut desc = CallDesc::new(Kind::all_reduce(op), label).data(T::DTYPE, buf.len());
        desc.op = Some(op);
        self.call(desc, || {
            let (g, me, p, n) = (&*self.g, self.rank, self.g.size(), buf.len());
            if p == 1 {
                return Ok(());
            }
            g.ptrs[me].store(buf.as_mut_ptr() as usize, Ordering::Relaxed);
            let st = g.arrive(me, &desc, |st| grow_scratch::<T>(st, n))?;
            let scratch = st.scratch_ptr as *mut T;
            drop(st);
            let (lo, hi) = chunk(n, p, me);
            // SAFETY: after arrival every rank's buffer stays unchanged until the completion
            // round; chunks of the scratch are disjoint; the scratch holds n elements.
            unsafe { reduce_into(scratch, &g.ptrs, 0, lo, hi, op) };
            drop(g.round(lock(&g.state), me, &desc, Phase::Completion, |_| {})?);
            // SAFETY: the scratch is complete and unchanged until the next arrival round.
            buf.copy_from_slice(unsafe { std::slice::from_raw_parts(scratch, n) });
            Ok(())
        })
    }

    fn reduce_scatter_t<T: CommElem>(&self, buf: &mut [T], label: Label) -> CommResult<()> {
        let desc = CallDesc::new(Kind::ReduceScatter, label).data(T::DTYPE, buf.len());
        self.call(desc, || {
            let (g, me, p, len) = (&*self.g, self.rank, self.g.size(), buf.len());
            if !len.is_multiple_of(p) {
                return Err(self.invalid(&desc, format!("{len} elements do not split into {p} chunks")));
            }
            if p == 1 {
                return Ok(());
            }
            let n = len / p;
            g.ptrs[me].store(buf.as_mut_ptr() as usize, Ordering::Relaxed);
            let st = g.arrive(me, &desc, |st| grow_scratch::<T>(st, len))?;
            // This rank's region of the scratch: chunk `me`.
            // SAFETY: the scratch holds `len` = p·n elements.
            let scratch = unsafe { (st.scratch_ptr as *mut T).add(me * n) };
            drop(st);
            // SAFETY: as in all_reduce, over chunk `me` of every buffer, into this rank's own
            // region of the scratch.
            unsafe { reduce_into(scratch, &g.ptrs, me * n, 0, n, ReduceOp::Sum) };
            drop(g.round(lock(&g.state), me, &desc, Phase::Completion, |_| {})?);
            // SAFETY: this rank's own scratch region, written above.
            buf[me * n..(me + 1) * n].copy_from_slice(unsafe { std::slice::from_raw_parts(scratch, n) });
            Ok(())
        })
    }

    fn all_gather_t<T: CommElem>(&self, buf: &mut [T], label: Label) -> CommResult<()> {
        let desc = CallDesc::new(Kind::AllGather, label).data(T::DTYPE, buf.len());
        self.call(desc, || {
            let (g, me, p, len) = (&*self.g, self.rank, self.g.size(), buf.len());
            if !len.is_multiple_of(p) {
                return Err(self.invalid(&desc, format!("{len} elements do not split into {p} chunks")));
            }
            if p == 1 {
                return Ok(());
            }
            let n = len / p;
            let base = buf.as_mut_ptr();
            g.ptrs[me].store(base as usize, Ordering::Relaxed);
            drop(g.arrive(me, &desc, |_| {})?);
            for s in (0..p).filter(|&s| s != me) {
                let src = g.ptrs[s].load(Ordering::Relaxed) as *const T;
                // SAFETY: rank s's chunk s is only read until the departure round; this rank
                // writes only its own chunks other than `me`, which nobody reads.
                unsafe { std::ptr::copy_nonoverlapping(src.add(s * n), base.add(s * n), n) };
            }
            drop(g.round(lock(&g.state), me, &desc, Phase::Completion, |_| {})?);
            Ok(())
        })
    }

    fn broadcast_t<T: CommElem>(&self, buf: &mut [T], root: usize, label: Label) -> CommResult<()> {
        let desc = CallDesc::new(Kind::Broadcast, label).data(T::DTYPE, buf.len()).peer(root);
        self.call(desc, || {
            let (g, me, p, n) = (&*self.g, self.rank, self.g.size(), buf.len());
            if root >= p {
                return Err(self.invalid(&desc, format!("root {root} is not a rank of a group of {p}")));
            }
            if p == 1 {
                return Ok(());
            }
            let base = buf.as_mut_ptr();
            g.ptrs[me].store(base as usize, Ordering::Relaxed);
            drop(g.arrive(me, &desc, |_| {})?);
            if me != root {
                let src = g.ptrs[root].load(Ordering::Relaxed) as *const T;
                // SAFETY: the root's buffer is only read until the departure round.
                unsafe { std::ptr::copy_nonoverlapping(src, base, n) };
            }
            drop(g.round(lock(&g.state), me, &desc, Phase::Completion, |_| {})?);
            Ok(())
        })
    }

    fn send_t<T: CommElem>(&self, buf: &[T], to: usize, tag: u32, label: Label) -> CommResult<()> {
        let mut desc = CallDesc::new(Kind::Send, label).data(T::DTYPE, buf.len()).peer(to);
        desc.tag = tag;
        self.call(desc, || {
            let (g, me, p) = (&*self.g, self.rank, self.g.size());
            if to >= p {
                return Err(self.invalid(&desc, format!("destination {to} is not a rank of a group of {p}")));
            }
            let bytes = std::mem::size_of_val(buf);
            let words = bytes.div_ceil(8);
            let mut data = {
                let mut st = lock(&g.state);
                match st.pool.iter().position(|v| v.capacity() >= words) {
                    Some(i) => st.pool.swap_remove(i),
                    None => st.pool.pop().unwrap_or_default(),
                }
            };
            data.clear();
            data.resize(words, 0);
            // SAFETY: `data` holds at least `bytes` bytes.
            unsafe { std::ptr::copy_nonoverlapping(buf.as_ptr() as *const u8, data.as_mut_ptr() as *mut u8, bytes) };
            let mut st = lock(&g.state);
            st.mail[me * p + to].push_back(Msg { tag, desc, data });
            g.cv.notify_all();
            Ok(())
        })
    }

    fn recv_t<T: CommElem>(&self, buf: &mut [T], from: usize, tag: u32, label: Label) -> CommResult<()> {
        let mut desc = CallDesc::new(Kind::Recv, label).data(T::DTYPE, buf.len()).peer(from);
        desc.tag = tag;
        self.call(desc, || {
            let (g, me, p) = (&*self.g, self.rank, self.g.size());
            if from >= p {
                return Err(self.invalid(&desc, format!("source {from} is not a rank of a group of {p}")));
            }
            let mut st = lock(&g.state);
            let start = Instant::now();
            let deadline = g.deadline_from(start);
            let msg = loop {
                let q = &mut st.mail[from * p + me];
                if let Some(i) = q.iter().position(|m| m.tag == tag) {
                    break q.remove(i).expect("position is in range");
                }
                if let Some(f) = g.uni.failure() {
                    return Err(CommError::PeerFailed(f));
                }
                let src = g.members[from];
                if g.uni.exited[src].load(Ordering::Acquire) {
                    return Err(CommError::PeerExited {
                        rank: src,
                        waiting: g.members[me],
                        call: g.describe(&desc, Phase::Arrival),
                    });
                }
                let now = Instant::now();
                match deadline {
                    Some(d) if now >= d => {
                        let queued: Vec<String> = st.mail[from * p + me].iter().map(|m| m.desc.to_string()).collect();
                        let mut call = g.describe(&desc, Phase::Arrival);
                        if !queued.is_empty() {
                            call.push_str(&format!(" (queued from rank {src}: {})", queued.join("; ")));
                        }
                        return Err(CommError::Timeout {
                            rank: g.members[me],
                            waited_s: (now - start).as_secs_f64(),
                            call,
                            missing: vec![src],
                        });
                    }
                    Some(d) => st = g.cv.wait_timeout(st, d - now).unwrap_or_else(|e| e.into_inner()).0,
                    None => st = g.cv.wait(st).unwrap_or_else(|e| e.into_inner()),
                }
            };
            drop(st);
            if msg.desc.dtype != desc.dtype || msg.desc.n != desc.n {
                return Err(CommError::Mismatch(format!(
                    "rank {} called {} but rank {} sent {}",
                    g.members[me], desc, g.members[from], msg.desc
                )));
            }
            let bytes = std::mem::size_of_val(buf);
            // SAFETY: the message holds exactly `n` elements of `T` (checked above).
            unsafe {
                std::ptr::copy_nonoverlapping(msg.data.as_ptr() as *const u8, buf.as_mut_ptr() as *mut u8, bytes)
            };
            lock(&g.state).pool.push(msg.data);
            Ok(())
        })
    }
}

fn grow_scratch<T>(st: &mut GroupState, n: usize) {
    let words = (n * std::mem::size_of::<T>()).div_ceil(8);
    if st.scratch.len() < words {
        st.scratch.resize(words, 0);
    }
    st.scratch_ptr = st.scratch.as_mut_ptr() as usize;
}

impl Communicator for InProcessComm {
    fn rank(&self) -> usize {
        self.rank
    }
    fn size(&self) -> usize {
        self.g.size()
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
        self.call(desc, || {
            if self.g.size() > 1 {
                drop(self.g.arrive(self.rank, &desc, |_| {})?);
            }
            Ok(())
        })
    }
    fn split(&self, color: usize, key: usize) -> CommResult<Box<dyn Communicator>> {
        let mut desc = CallDesc::new(Kind::Split, Label::op("split"));
        desc.color = color;
        desc.key = key;
        self.call(desc, || {
            let (g, me) = (&*self.g, self.rank);
            if g.size() == 1 {
                let child = GroupShared::new(&g.uni, vec![g.members[0]]);
                return Ok(Box::new(InProcessComm { g: child, rank: 0 }) as Box<dyn Communicator>);
            }
            let mut st = g.arrive(me, &desc, |st| {
                let mut order: Vec<(usize, usize, usize)> = st
                    .descs
                    .iter()
                    .enumerate()
                    .map(|(r, d)| {
                        let d = d.expect("arrived rank has a descriptor");
                        (d.color, d.key, r)
                    })
                    .collect();
                order.sort_unstable();
                for same in order.chunk_by(|a, b| a.0 == b.0) {
                    let child = GroupShared::new(&g.uni, same.iter().map(|&(_, _, r)| g.members[r]).collect());
                    for (i, &(_, _, r)) in same.iter().enumerate() {
                        st.split_out[r] = Some((child.clone(), i));
                    }
                }
            })?;
            let (child, rank) = st.split_out[me].take().expect("split assigned every rank");
            Ok(Box::new(InProcessComm { g: child, rank }) as Box<dyn Communicator>)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::chunk;

    #[test]
    fn chunks_cover_and_align() {
        for n in [0, 1, 5, 16, 17, 100, 1000] {
            for p in 1..9 {
                let mut next = 0;
                for r in 0..p {
                    let (lo, hi) = chunk(n, p, r);
                    assert_eq!(lo, next.min(n));
                    assert!(lo <= hi && hi <= n);
                    assert!(lo % 16 == 0 || lo == n);
                    next = hi;
                }
                assert_eq!(next, n);
            }
        }
    }
}
