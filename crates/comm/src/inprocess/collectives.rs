//! The in-process collectives: reductions split into one chunk per rank, each reduced in rank
//! order into the group's scratch; gathers and broadcasts copied straight from the owners'
//! buffers between an arrival and a completion round.

use super::comm::InProcessComm;
use super::rendezvous::GroupState;
use crate::call::CallDesc;
use crate::error::CommResult;
use crate::payload::{CommElem, Kind, combine_into};
use boost_tensor::{Label, ReduceOp};
use std::sync::atomic::{AtomicUsize, Ordering};

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
            combine_into(out, src(k), op);
        }
    }
}

fn grow_scratch<T>(st: &mut GroupState, n: usize) {
    let words = (n * std::mem::size_of::<T>()).div_ceil(8);
    if st.scratch.len() < words {
        st.scratch.resize(words, 0);
    }
    st.scratch_ptr = st.scratch.as_mut_ptr() as usize;
}

impl InProcessComm {
    /// The chunk length of a collective over `len` elements split into one chunk per rank
    /// (reduce-scatter, all-gather), or None with one rank (nothing to do).
    fn chunk_len(&self, desc: &CallDesc, len: usize) -> CommResult<Option<usize>> {
        let p = self.g.size();
        if !len.is_multiple_of(p) {
            return Err(self.invalid(desc, format!("{len} elements do not split into {p} chunks")));
        }
        Ok((p > 1).then_some(len / p))
    }

    pub(super) fn all_reduce_t<T: CommElem>(&self, buf: &mut [T], op: ReduceOp, label: Label) -> CommResult<()> {
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
            g.complete(me, &desc)?;
            // SAFETY: the scratch is complete and unchanged until the next arrival round.
            buf.copy_from_slice(unsafe { std::slice::from_raw_parts(scratch, n) });
            Ok(())
        })
    }

    pub(super) fn reduce_scatter_t<T: CommElem>(&self, buf: &mut [T], label: Label) -> CommResult<()> {
        let desc = CallDesc::new(Kind::ReduceScatter, label).data(T::DTYPE, buf.len());
        self.call(desc, || {
            let (g, me, len) = (&*self.g, self.rank, buf.len());
            let Some(n) = self.chunk_len(&desc, len)? else { return Ok(()) };
            g.ptrs[me].store(buf.as_mut_ptr() as usize, Ordering::Relaxed);
            let st = g.arrive(me, &desc, |st| grow_scratch::<T>(st, len))?;
            // This rank's region of the scratch: chunk `me`.
            // SAFETY: the scratch holds `len` = p·n elements.
            let scratch = unsafe { (st.scratch_ptr as *mut T).add(me * n) };
            drop(st);
            // SAFETY: as in all_reduce, over chunk `me` of every buffer, into this rank's own
            // region of the scratch.
            unsafe { reduce_into(scratch, &g.ptrs, me * n, 0, n, ReduceOp::Sum) };
            g.complete(me, &desc)?;
            // SAFETY: this rank's own scratch region, written above.
            buf[me * n..(me + 1) * n].copy_from_slice(unsafe { std::slice::from_raw_parts(scratch, n) });
            Ok(())
        })
    }

    pub(super) fn all_gather_t<T: CommElem>(&self, buf: &mut [T], label: Label) -> CommResult<()> {
        let desc = CallDesc::new(Kind::AllGather, label).data(T::DTYPE, buf.len());
        self.call(desc, || {
            let (g, me, len) = (&*self.g, self.rank, buf.len());
            let Some(n) = self.chunk_len(&desc, len)? else { return Ok(()) };
            let base = buf.as_mut_ptr();
            g.ptrs[me].store(base as usize, Ordering::Relaxed);
            drop(g.arrive(me, &desc, |_| {})?);
            for s in (0..g.size()).filter(|&s| s != me) {
                let src = g.ptrs[s].load(Ordering::Relaxed) as *const T;
                // SAFETY: rank s's chunk s is only read until the departure round; this rank
                // writes only its own chunks other than `me`, which nobody reads.
                unsafe { std::ptr::copy_nonoverlapping(src.add(s * n), base.add(s * n), n) };
            }
            g.complete(me, &desc)?;
            Ok(())
        })
    }

    pub(super) fn broadcast_t<T: CommElem>(&self, buf: &mut [T], root: usize, label: Label) -> CommResult<()> {
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
            g.complete(me, &desc)?;
            Ok(())
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
