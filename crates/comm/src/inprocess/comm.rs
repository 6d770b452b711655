//! One rank's handle on one in-process group: how a call starts and fails, and the
//! `Communicator` methods over the collectives and point-to-point modules.

use super::rendezvous::{GroupShared, Phase};
use crate::call::CallDesc;
use crate::communicator::Communicator;
use crate::error::{CommError, CommResult};
use crate::lock::lock;
use crate::payload::Kind;
use crate::typed_calls;
use boost_tensor::Label;
use std::sync::Arc;

/// One rank's handle on one in-process group.
pub struct InProcessComm {
    pub(super) g: Arc<GroupShared>,
    pub(super) rank: usize,
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
    pub(super) fn call<R>(&self, desc: CallDesc, body: impl FnOnce() -> CommResult<R>) -> CommResult<R> {
        let uni = &self.g.uni;
        if let Some(f) = uni.failure() {
            return Err(CommError::PeerFailed(f));
        }
        let me = self.global_rank();
        lock(&uni.activity[me]).begin(desc);
        let r = body();
        if let Err(e) = &r
            && !matches!(e, CommError::PeerFailed(_))
        {
            uni.poison(me, e.to_string());
        }
        lock(&uni.activity[me]).end(desc);
        r
    }

    pub(super) fn invalid(&self, desc: &CallDesc, what: String) -> CommError {
        CommError::Invalid(format!("rank {}: {}: {what}", self.global_rank(), self.g.describe(desc, Phase::Arrival)))
    }
}

impl Communicator for InProcessComm {
    fn rank(&self) -> usize {
        self.rank
    }
    fn size(&self) -> usize {
        self.g.size()
    }
    typed_calls!();
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
