//! In-process point-to-point messages: a send copies its buffer into the (source,
//! destination) queue and returns; a recv takes the oldest message with its tag.

use super::comm::InProcessComm;
use super::rendezvous::{Msg, Phase};
use crate::call::CallDesc;
use crate::error::{CommError, CommResult};
use crate::lock::lock;
use crate::payload::{CommElem, Kind};
use crate::pool;
use boost_tensor::Label;
use std::sync::atomic::Ordering;
use std::time::Instant;

impl InProcessComm {
    pub(super) fn send_t<T: CommElem>(&self, buf: &[T], to: usize, tag: u32, label: Label) -> CommResult<()> {
        let mut desc = CallDesc::new(Kind::Send, label).data(T::DTYPE, buf.len()).peer(to);
        desc.tag = tag;
        self.call(desc, || {
            let (g, me, p) = (&*self.g, self.rank, self.g.size());
            if to >= p {
                return Err(self.invalid(&desc, format!("destination {to} is not a rank of a group of {p}")));
            }
            let bytes = std::mem::size_of_val(buf);
            let words = bytes.div_ceil(8);
            let data = pool::take(&mut lock(&g.state).pool, words);
            let mut data = pool::zeroed(data, words);
            // SAFETY: `data` holds at least `bytes` bytes.
            unsafe { std::ptr::copy_nonoverlapping(buf.as_ptr() as *const u8, data.as_mut_ptr() as *mut u8, bytes) };
            let mut st = lock(&g.state);
            st.mail[me * p + to].push_back(Msg { tag, desc, data });
            g.cv.notify_all();
            Ok(())
        })
    }

    pub(super) fn recv_t<T: CommElem>(&self, buf: &mut [T], from: usize, tag: u32, label: Label) -> CommResult<()> {
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
                if deadline.is_some_and(|d| now >= d) {
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
                st = g.sleep(st, deadline, now);
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
