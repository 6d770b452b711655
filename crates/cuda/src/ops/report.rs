//! A step's report kept on the device (`Backend::tally_loss`, `snapshot_report`,
//! `read_report`): the loss summed per micro-batch into the step scalars without a wait, and
//! the scalars copied aside at the end of a step, into one of [`RING`] slots the host reads
//! later, waiting for that copy only, not for the steps queued after it.

use super::multi::{S_LOSS, S_NORM, S_VERDICT, S_Z, SCALARS, SUM_BLOCKS, scalars};
use crate::backend::{Cuda, WS_PART};
use crate::buf::CudaBuf;
use crate::device::{Launch, P};
use crate::launch::tv;
use boost_tensor::{Mat, StepReport, Verdict};

/// Reports kept aside at once: a ticket can be read until this many later ones are taken.
pub(crate) const RING: usize = 4;

pub(crate) fn begin_loss_tally(be: &Cuda) {
    let mut st = be.optim();
    (st.tally_fresh, st.tallied) = (true, false);
}

/// Σ x into the step's loss: `k_full_sum`'s partials, added in order by one thread.
pub(crate) fn tally_loss(be: &Cuda, x: Mat<CudaBuf>) -> bool {
    if x.rows == 0 || x.cols == 0 {
        return true;
    }
    let mut st = be.optim();
    let s = scalars(be, &mut st);
    let part = be.ws(WS_PART, 8 * SUM_BLOCKS);
    let mut p = P::of(&[tv(&x)]);
    p.v[1].p = part;
    p.n = [x.rows as i64, x.cols as i64, 0, 0, 0, 0];
    be.blocks("k_full_sum", SUM_BLOCKS, &p);
    let mut q = P::default();
    q.v[0].p = part;
    q.v[1].p = s;
    q.n[0] = SUM_BLOCKS as i64;
    q.n[1] = st.tally_fresh as i64;
    be.launch("k_tally", Launch { grid: (1, 1, 1), block: (1, 1, 1) }, &q);
    (st.tally_fresh, st.tallied) = (false, true);
    true
}

/// Copy the step scalars aside once the device reaches this point.
pub(crate) fn snapshot_report(be: &Cuda) -> Option<u64> {
    let mut st = be.optim();
    let s = scalars(be, &mut st);
    let ticket = st.tickets;
    st.tickets += 1;
    let slot = ticket as usize % RING;
    st.ticket_tallied[slot] = st.tallied;
    be.dev().copy_aside(slot, s, 8 * SCALARS);
    Some(ticket)
}

/// The report of `ticket`: waits for its copy. A loss of 0 where the step tallied none.
pub(crate) fn read_report(be: &Cuda, ticket: u64) -> StepReport {
    let (slot, tallied) = {
        let st = be.optim();
        assert!(
            ticket < st.tickets && st.tickets - ticket <= RING as u64,
            "step report {ticket}: only the last {RING} of {} are kept",
            st.tickets
        );
        let slot = ticket as usize % RING;
        (slot, st.ticket_tallied[slot])
    };
    let mut bytes = vec![0u8; 8 * SCALARS];
    be.dev().read_aside(slot, &mut bytes);
    let s = |i: usize| f64::from_le_bytes(bytes[8 * i..8 * i + 8].try_into().unwrap());
    StepReport {
        loss_sum: if tallied { s(S_LOSS) } else { 0.0 },
        grad_norm: s(S_NORM),
        verdict: Verdict::from_code(s(S_VERDICT), s(S_Z)),
    }
}
