//! Where a group's ranks meet: the shared state of one group (descriptors, buffer addresses,
//! scratch, mailboxes) and its barrier rounds, with the arrival round's check that every rank
//! made the same call.

use super::universe::{Universe, Wake};
use crate::call::CallDesc;
use crate::error::{CommError, CommResult, in_group, mismatched};
use crate::lock::lock;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Instant;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Phase {
    Arrival,
    Completion,
}

pub(super) struct GroupState {
    pub(super) generation: u64,
    pub(super) arrived: usize,
    pub(super) present: Vec<bool>,
    pub(super) descs: Vec<Option<CallDesc>>,
    /// Collectives that completed their arrival round.
    pub(super) seq: u64,
    pub(super) verdict: Option<String>,
    pub(super) scratch: Vec<u64>,
    pub(super) scratch_ptr: usize,
    /// Queue `src·p + dst`.
    pub(super) mail: Vec<VecDeque<Msg>>,
    pub(super) pool: Vec<Vec<u64>>,
    pub(super) split_out: Vec<Option<(Arc<GroupShared>, usize)>>,
}

/// A message waiting in a queue, with its sender's call.
pub(super) struct Msg {
    pub(super) tag: u32,
    pub(super) desc: CallDesc,
    pub(super) data: Vec<u64>,
}

pub(super) struct GroupShared {
    pub(super) uni: Arc<Universe>,
    /// Global rank of each group rank.
    pub(super) members: Box<[usize]>,
    /// Buffer address of each rank in the current collective.
    pub(super) ptrs: Box<[AtomicUsize]>,
    pub(super) state: Mutex<GroupState>,
    pub(super) cv: Condvar,
}

impl Wake for GroupShared {
    fn wake(&self) {
        let _st = lock(&self.state);
        self.cv.notify_all();
    }
}

impl GroupShared {
    pub(super) fn new(uni: &Arc<Universe>, members: Vec<usize>) -> Arc<Self> {
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
        uni.register(g.clone());
        g
    }

    pub(super) fn size(&self) -> usize {
        self.members.len()
    }

    fn is_world(&self) -> bool {
        self.members.len() == self.uni.size && self.members.iter().enumerate().all(|(i, &m)| i == m)
    }

    pub(super) fn describe(&self, desc: &CallDesc, phase: Phase) -> String {
        let completing = if phase == Phase::Completion { " (completing)" } else { "" };
        format!("{desc}{completing}{}", in_group(&self.members, self.is_world()))
    }

    pub(super) fn deadline_from(&self, start: Instant) -> Option<Instant> {
        start.checked_add(self.uni.opts.deadline)
    }

    /// One barrier round; `on_complete` runs on the last arriver under the lock.
    pub(super) fn round<'a>(
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
            if deadline.is_some_and(|d| now >= d) {
                let missing = (0..p).filter(|&i| !st.present[i]).map(|i| self.members[i]).collect();
                return Err(CommError::Timeout {
                    rank: self.members[me],
                    waited_s: (now - start).as_secs_f64(),
                    call: self.describe(desc, phase),
                    missing,
                });
            }
            st = self.sleep(st, deadline, now);
        }
    }

    /// Wait for a wake-up until `deadline` (not passed at `now`), or without a deadline.
    pub(super) fn sleep<'a>(
        &self,
        st: MutexGuard<'a, GroupState>,
        deadline: Option<Instant>,
        now: Instant,
    ) -> MutexGuard<'a, GroupState> {
        match deadline {
            Some(d) => self.cv.wait_timeout(st, d - now).unwrap_or_else(|e| e.into_inner()).0,
            None => self.cv.wait(st).unwrap_or_else(|e| e.into_inner()),
        }
    }

    /// The completion round that ends a collective: no rank leaves before every rank is done
    /// with the others' buffers and the scratch.
    pub(super) fn complete(&self, me: usize, desc: &CallDesc) -> CommResult<()> {
        drop(self.round(lock(&self.state), me, desc, Phase::Completion, |_| {})?);
        Ok(())
    }

    /// The arrival round: publish the descriptor, check every rank made the same call, and
    /// run `action` (on the last arriver) when they did.
    pub(super) fn arrive<'a>(
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
                    let place = in_group(&self.members, self.is_world());
                    st.verdict = Some(mismatched(st.seq, &place, (self.members[0], &d0), (self.members[i], &di)));
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
