//! Handles, constants and error texts of the raw MPI bindings, and typed views of the
//! staging buffers MPI reads and writes.

use ::mpi::ffi;
use boost_comm::DType;
use std::mem::MaybeUninit;
use std::os::raw::{c_char, c_int};

/// An MPI communicator handle.
#[derive(Clone, Copy)]
pub(crate) struct Comm(pub(crate) ffi::MPI_Comm);
// SAFETY: a communicator handle is a process-wide value, valid on any thread; every MPI call
// that uses it is made under the process lock.
unsafe impl Send for Comm {}
unsafe impl Sync for Comm {}

/// A request handle of an eager send.
pub(crate) struct Req(pub(crate) ffi::MPI_Request);
// SAFETY: as for `Comm`.
unsafe impl Send for Req {}

pub(crate) fn null_request() -> ffi::MPI_Request {
    // SAFETY: reads a constant the MPI library initialised.
    unsafe { ffi::RSMPI_REQUEST_NULL }
}

pub(crate) fn datatype(d: DType) -> ffi::MPI_Datatype {
    // SAFETY: reads constants the MPI library initialised.
    unsafe {
        match d {
            DType::F32 => ffi::RSMPI_FLOAT,
            DType::F64 => ffi::RSMPI_DOUBLE,
            DType::U32 => ffi::RSMPI_UINT32_T,
        }
    }
}

pub(crate) fn bytes_type() -> ffi::MPI_Datatype {
    // SAFETY: as above.
    unsafe { ffi::RSMPI_UINT8_T }
}

pub(crate) fn u64_type() -> ffi::MPI_Datatype {
    // SAFETY: as above.
    unsafe { ffi::RSMPI_UINT64_T }
}

pub(crate) fn empty_status() -> ffi::MPI_Status {
    // SAFETY: MPI_Status is a plain C struct of integers; all zeros is a valid value.
    unsafe { MaybeUninit::zeroed().assume_init() }
}

/// The text of an MPI error code.
pub(crate) fn mpi_error(rc: c_int) -> String {
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
pub(crate) fn view<T: Copy>(v: &mut Vec<u64>, n: usize) -> &mut [T] {
    debug_assert!(std::mem::align_of::<T>() <= 8);
    let words = (n * std::mem::size_of::<T>()).div_ceil(8);
    if v.len() < words {
        v.resize(words, 0);
    }
    // SAFETY: `v` holds at least n·size_of::<T>() bytes, aligned to 8; T is f32, f64, u32, u64
    // or u8, for which every bit pattern is valid.
    unsafe { std::slice::from_raw_parts_mut(v.as_mut_ptr() as *mut T, n) }
}
