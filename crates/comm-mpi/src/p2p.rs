//! Point-to-point messages of the MPI communicator: a send copies its buffer behind its call
//! descriptor and sends eagerly; a recv probes for the message, receives it and checks the
//! sender's descriptor against its own call.

use crate::comm::MpiComm;
use crate::process::PendingSend;
use crate::raw::{Req, bytes_type, empty_status, null_request, view};
use crate::wait::{Backoff, WaitError, wait_all};
use crate::wire::{WIRE, decode, encode};
use ::mpi::ffi;
use boost_comm::backend::CallDesc;
use boost_comm::backend::lock;
use boost_comm::{CommElem, Kind};
use boost_comm::{CommError, CommResult};
use boost_tensor::Label;
use std::os::raw::{c_int, c_void};
use std::time::Instant;

impl MpiComm {
    fn check_peer(&self, desc: &CallDesc, peer: usize, tag: u32, what: &str) -> CommResult<()> {
        if peer >= self.size {
            return Err(self.invalid(desc, format!("{what} {peer} is not a rank of a group of {}", self.size)));
        }
        if tag > self.proc.max_user_tag {
            return Err(self.invalid(desc, format!("tag {tag} exceeds MPI's limit of {}", self.proc.max_user_tag)));
        }
        Ok(())
    }

    pub(crate) fn send_t<T: CommElem>(&self, buf: &[T], to: usize, tag: u32, label: Label) -> CommResult<()> {
        let mut desc = CallDesc::new(Kind::Send, label).data(T::DTYPE, buf.len()).peer(to);
        desc.tag = tag;
        self.call_bare(desc, || {
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

    pub(crate) fn recv_t<T: CommElem>(&self, buf: &mut [T], from: usize, tag: u32, label: Label) -> CommResult<()> {
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
