//! Arrival at a collective: every call is numbered and, in check mode, every rank sends its
//! call descriptor to the others and compares them before the collective runs.

use crate::comm::MpiComm;
use crate::raw::{null_request, u64_type, view};
use crate::wait::{WaitError, wait_all};
use crate::wire::{WIRE, WireDesc, decode, encode};
use ::mpi::ffi;
use boost_comm::backend::CallDesc;
use boost_comm::backend::{in_group, mismatched};
use boost_comm::{CommError, CommResult};
use std::os::raw::{c_int, c_void};
use std::sync::atomic::Ordering;
use std::time::Instant;

impl MpiComm {
    /// Number this collective and, in check mode, exchange descriptors with every other rank
    /// of the group and compare them (rank 0's against each other rank's, as in-process).
    pub(crate) fn arrive(&self, desc: &CallDesc, c: &mut Vec<u64>, start: Instant) -> CommResult<()> {
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
        let place = in_group(&self.members, self.is_world());
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
                return Err(CommError::Mismatch(mismatched(
                    seq,
                    &place,
                    (self.members[0], &d0),
                    (self.members[i], di),
                )));
            }
        }
        Ok(())
    }
}
