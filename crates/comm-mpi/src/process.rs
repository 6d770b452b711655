//! The state of this process's one rank: the MPI `Universe`, the lock around every MPI call,
//! the first failure, the rank's current and last call, and the eager sends in flight.
//!
//! The library is initialised with `MPI_THREAD_SERIALIZED`, so handles may be used from
//! several threads, one call at a time. After a failure every call fails naming it.

use crate::raw::{Req, mpi_error};
use ::mpi::ffi;
use boost_comm::Failure;
use boost_comm::backend::lock;
use boost_comm::backend::{Activity, CallDesc, take_buffer, zeroed_buffer};
use boost_comm::mpi::MpiOptions;
use std::os::raw::{c_int, c_void};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

/// An eager send in flight; its buffer is MPI's until the request completes.
pub(crate) struct PendingSend {
    pub(crate) req: Req,
    pub(crate) buf: Vec<u64>,
    pub(crate) desc: CallDesc,
    /// World rank of the destination.
    pub(crate) to: usize,
}

pub(crate) struct Process {
    pub(crate) universe: Mutex<Option<::mpi::environment::Universe>>,
    pub(crate) rank: usize,
    pub(crate) size: usize,
    /// The largest tag a user may pass; the one above it carries check-mode descriptors.
    pub(crate) max_user_tag: u32,
    /// Held around every MPI call.
    pub(crate) mpi: Mutex<()>,
    pub(crate) poisoned: AtomicBool,
    pub(crate) failure: Mutex<Option<Failure>>,
    pub(crate) activity: Mutex<Activity>,
    pub(crate) sends: Mutex<Vec<PendingSend>>,
    pub(crate) pool: Mutex<Vec<Vec<u64>>>,
    pub(crate) finalized: AtomicBool,
    /// Deadline of finalisation (the last one a run or world handle asked for).
    pub(crate) deadline: Mutex<Duration>,
}

pub(crate) static PROCESS: OnceLock<Result<Process, String>> = OnceLock::new();

pub(crate) fn process() -> Result<&'static Process, String> {
    PROCESS.get_or_init(Process::init).as_ref().map_err(Clone::clone)
}

impl Process {
    fn init() -> Result<Process, String> {
        if !boost_comm::mpi::launched() {
            return Err("this process was not started by an MPI launcher (mpirun)".into());
        }
        let (universe, _level) = ::mpi::initialize_with_threading(::mpi::Threading::Serialized)
            .ok_or("MPI was already initialised outside boost_comm")?;
        // SAFETY: MPI is initialised; the out-pointers are valid locals.
        let (rank, size, tag_ub) = unsafe {
            let world = ffi::RSMPI_COMM_WORLD;
            let rc = ffi::MPI_Comm_set_errhandler(world, ffi::RSMPI_ERRORS_RETURN);
            if rc != 0 {
                return Err(format!("MPI_Comm_set_errhandler failed: {}", mpi_error(rc)));
            }
            let (mut rank, mut size) = (0 as c_int, 0 as c_int);
            ffi::MPI_Comm_rank(world, &mut rank);
            ffi::MPI_Comm_size(world, &mut size);
            let mut ub: *mut c_int = std::ptr::null_mut();
            let mut flag: c_int = 0;
            ffi::MPI_Comm_get_attr(
                world,
                ffi::MPI_TAG_UB as c_int,
                &mut ub as *mut *mut c_int as *mut c_void,
                &mut flag,
            );
            let tag_ub = if flag != 0 && !ub.is_null() { *ub } else { 32767 };
            (rank, size, tag_ub)
        };
        Ok(Process {
            universe: Mutex::new(Some(universe)),
            rank: rank as usize,
            size: size as usize,
            max_user_tag: (tag_ub.max(2) - 1) as u32,
            mpi: Mutex::new(()),
            poisoned: AtomicBool::new(false),
            failure: Mutex::new(None),
            activity: Mutex::new(Activity::default()),
            sends: Mutex::new(Vec::new()),
            pool: Mutex::new(Vec::new()),
            finalized: AtomicBool::new(false),
            deadline: Mutex::new(MpiOptions::default().deadline),
        })
    }

    /// Run one MPI call under the process lock.
    pub(crate) fn call<R>(&self, f: impl FnOnce() -> R) -> R {
        let _g = lock(&self.mpi);
        f()
    }

    pub(crate) fn failure(&self) -> Option<Failure> {
        if !self.poisoned.load(Ordering::Acquire) {
            return None;
        }
        lock(&self.failure).clone()
    }

    pub(crate) fn activity(&self) -> Option<String> {
        lock(&self.activity).describe()
    }

    /// Record the first failure of this rank; later calls fail with it.
    pub(crate) fn poison(&self, message: String) {
        let mut f = lock(&self.failure);
        if f.is_none() {
            *f = Some(Failure { rank: self.rank, during: self.activity(), message });
            self.poisoned.store(true, Ordering::Release);
        }
    }

    /// Complete the eager sends that are done and pool their buffers.
    pub(crate) fn reap_sends(&self) -> Result<(), String> {
        let mut sends = lock(&self.sends);
        if sends.is_empty() {
            return Ok(());
        }
        let mut i = 0;
        while i < sends.len() {
            let mut flag: c_int = 0;
            let rc = self.call(|| {
                // SAFETY: a live request of this process; its buffer is kept in `sends`.
                unsafe { ffi::MPI_Test(&mut sends[i].req.0, &mut flag, ffi::RSMPI_STATUS_IGNORE) }
            });
            if rc != 0 {
                let s = &sends[i];
                return Err(format!("{} to rank {} failed: {}", s.desc, s.to, mpi_error(rc)));
            }
            if flag != 0 {
                let done = sends.swap_remove(i);
                let mut pool = lock(&self.pool);
                if pool.len() < 16 {
                    pool.push(done.buf);
                }
            } else {
                i += 1;
            }
        }
        Ok(())
    }

    /// A pooled buffer of at least `words` words.
    pub(crate) fn buffer(&self, words: usize) -> Vec<u64> {
        let v = take_buffer(&mut lock(&self.pool), words);
        zeroed_buffer(v, words)
    }
}
