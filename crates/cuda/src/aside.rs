//! Copies set aside on a GPU for the host to read later (`Device::copy_aside`): each slot is
//! page-locked host memory that an asynchronous copy fills in stream order, with an event
//! recorded after it, so that reading a slot waits for that copy and not for the work queued
//! on the stream since.

use cudarc::driver::{result, sys};

pub(crate) struct PinnedAside {
    host: *mut u8,
    /// Bytes of each slot.
    each: usize,
    events: Vec<sys::CUevent>,
}

// SAFETY: the host memory and events are used under the device's mutex only.
unsafe impl Send for PinnedAside {}

impl PinnedAside {
    pub fn new(slots: usize, each: usize) -> Result<Self, result::DriverError> {
        // SAFETY: a plain page-locked allocation, freed in Drop.
        let host = unsafe { result::malloc_host(slots * each, 0)? } as *mut u8;
        // Built before the events, so that Drop frees what a failed creation leaves.
        let mut made = Self { host, each, events: Vec::with_capacity(slots) };
        for _ in 0..slots {
            made.events.push(result::event::create(sys::CUevent_flags::CU_EVENT_DISABLE_TIMING)?);
        }
        Ok(made)
    }

    pub fn slots(&self) -> usize {
        self.events.len()
    }

    /// Queue the copy of `bytes` from `src` into `slot`, then its event.
    pub fn copy(
        &mut self,
        slot: usize,
        src: u64,
        bytes: usize,
        stream: sys::CUstream,
    ) -> Result<(), result::DriverError> {
        assert!(bytes <= self.each && slot < self.slots(), "copy aside: {bytes} bytes into slot {slot}");
        // SAFETY: the slot is `each` bytes of page-locked memory this struct owns; no host
        // code reads it until its event completes (`read`).
        unsafe {
            let dst = std::slice::from_raw_parts_mut(self.host.add(slot * self.each), bytes);
            result::memcpy_dtoh_async(dst, src, stream)?;
            result::event::record(self.events[slot], stream)
        }
    }

    /// Wait for `slot`'s copy, then read it.
    pub fn read(&self, slot: usize, dst: &mut [u8]) -> Result<(), result::DriverError> {
        assert!(dst.len() <= self.each && slot < self.slots(), "read aside: {} bytes of slot {slot}", dst.len());
        // SAFETY: the event was created here; once it completes the copy has landed.
        unsafe {
            result::event::synchronize(self.events[slot])?;
            dst.copy_from_slice(std::slice::from_raw_parts(self.host.add(slot * self.each), dst.len()));
        }
        Ok(())
    }
}

impl Drop for PinnedAside {
    fn drop(&mut self) {
        // SAFETY: created in `new`, destroyed once; a copy still in flight has completed
        // once its event has.
        unsafe {
            for &e in &self.events {
                let _ = result::event::synchronize(e);
                let _ = result::event::destroy(e);
            }
            let _ = result::free_host(self.host as *mut std::ffi::c_void);
        }
    }
}
