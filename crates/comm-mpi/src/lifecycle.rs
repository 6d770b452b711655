//! The life of MPI in this process: opening the world communicator, running a rank's job,
//! finalising, and aborting the whole job on a failure.

use crate::comm::MpiComm;
use crate::process::{PROCESS, process};
use crate::raw::{Comm, mpi_error, null_request};
use crate::wait::{Backoff, WaitError, wait_all};
use ::mpi::ffi;
use boost_comm::Communicator;
use boost_comm::backend::lock;
use boost_comm::backend::panic_message;
use boost_comm::mpi::{Job, MpiOptions};
use boost_comm::{CommError, CommResult, Failure};
use boost_comm::{Grid, GridDims, GridOptions};
use std::io::Write;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// `boost_comm::mpi::mpi_world_with`: a duplicate of `MPI_COMM_WORLD`, so handles never see
/// each other's messages.
pub(crate) fn mpi_world_with(opts: MpiOptions) -> CommResult<Option<Arc<dyn Communicator>>> {
    if !boost_comm::mpi::launched() {
        return Ok(None);
    }
    let proc = process().map_err(|e| CommError::Invalid(format!("cannot start MPI: {e}")))?;
    if let Some(f) = proc.failure() {
        return Err(CommError::PeerFailed(f));
    }
    if proc.finalized.load(Ordering::Acquire) {
        return Err(CommError::Invalid("MPI has been finalised".into()));
    }
    *lock(&proc.deadline) = opts.deadline;
    let start = Instant::now();
    // The new handle is written when the request completes; boxed so that a timeout can leak
    // it instead of leaving MPI a pointer into this stack frame.
    // SAFETY: reads a constant.
    let mut newcomm = Box::new(unsafe { ffi::RSMPI_COMM_NULL });
    let mut req = [null_request()];
    // SAFETY: MPI is initialised; the out-pointers outlive the request.
    let rc = proc.call(|| unsafe { ffi::MPI_Comm_idup(ffi::RSMPI_COMM_WORLD, &mut *newcomm, &mut req[0]) });
    let fail = |msg: String| {
        proc.poison(msg.clone());
        CommError::Invalid(msg)
    };
    if rc != 0 {
        return Err(fail(format!("rank {}: MPI_Comm_idup failed: {}", proc.rank, mpi_error(rc))));
    }
    match wait_all(proc, &mut req, start + opts.deadline) {
        Ok(()) => {}
        Err(WaitError::Mpi(m)) => return Err(fail(format!("rank {}: MPI_Comm_idup failed: {m}", proc.rank))),
        Err(WaitError::Timeout(_)) => {
            std::mem::forget(newcomm);
            let e = CommError::Timeout {
                rank: proc.rank,
                waited_s: start.elapsed().as_secs_f64(),
                call: "opening the MPI world (MPI_Comm_idup)".into(),
                missing: (0..proc.size).filter(|&r| r != proc.rank).collect(),
            };
            proc.poison(e.to_string());
            return Err(e);
        }
    }
    let members: Box<[usize]> = (0..proc.size).collect();
    Ok(Some(Arc::new(MpiComm::new(proc, Comm(*newcomm), members, opts))))
}

/// `boost_comm::mpi::finalize`: wait until every eager send was received, a barrier with
/// every other process, then `MPI_Finalize`.
pub(crate) fn finalize() -> CommResult<()> {
    let Some(Ok(proc)) = PROCESS.get() else {
        return Ok(());
    };
    if proc.finalized.load(Ordering::Acquire) {
        return Ok(());
    }
    if let Some(f) = proc.failure() {
        return Err(CommError::PeerFailed(f));
    }
    let limit = *lock(&proc.deadline);
    let start = Instant::now();
    let fail = |e: CommError| {
        proc.poison(e.to_string());
        e
    };
    let mut backoff = Backoff::new();
    loop {
        proc.reap_sends().map_err(|e| fail(CommError::Invalid(format!("rank {}: finalising: {e}", proc.rank))))?;
        let sends = lock(&proc.sends);
        if sends.is_empty() {
            break;
        }
        if start.elapsed() >= limit {
            let what: Vec<String> = sends.iter().map(|s| format!("{} to rank {}", s.desc, s.to)).collect();
            let missing = sends.iter().map(|s| s.to).collect();
            drop(sends);
            return Err(fail(CommError::Timeout {
                rank: proc.rank,
                waited_s: start.elapsed().as_secs_f64(),
                call: format!("finalize, for sends never received: {}", what.join("; ")),
                missing,
            }));
        }
        drop(sends);
        backoff.snooze();
    }
    let mut req = [null_request()];
    // SAFETY: MPI is initialised; the out-pointer outlives the request.
    let rc = proc.call(|| unsafe { ffi::MPI_Ibarrier(ffi::RSMPI_COMM_WORLD, &mut req[0]) });
    if rc != 0 {
        return Err(fail(CommError::Invalid(format!("rank {}: MPI_Ibarrier failed: {}", proc.rank, mpi_error(rc)))));
    }
    match wait_all(proc, &mut req, start + limit) {
        Ok(()) => {}
        Err(WaitError::Mpi(m)) => {
            return Err(fail(CommError::Invalid(format!("rank {}: finalize barrier failed: {m}", proc.rank))));
        }
        Err(WaitError::Timeout(_)) => {
            return Err(fail(CommError::Timeout {
                rank: proc.rank,
                waited_s: start.elapsed().as_secs_f64(),
                call: "finalize (the other processes did not finish)".into(),
                missing: (0..proc.size).filter(|&r| r != proc.rank).collect(),
            }));
        }
    }
    let universe = {
        let _g = lock(&proc.mpi);
        proc.finalized.store(true, Ordering::Release);
        lock(&proc.universe).take()
    };
    drop(universe);
    Ok(())
}

/// Flush the standard streams and end the whole MPI job (`MPI_Abort` on the world: `mpirun`
/// stops every process); before MPI starts or after it finalised, exit the process.
pub(crate) fn abort(code: i32) -> ! {
    let _ = std::io::stdout().flush();
    let _ = std::io::stderr().flush();
    if let Some(Ok(proc)) = PROCESS.get()
        && !proc.finalized.load(Ordering::Acquire)
    {
        // Give the launcher a moment to forward what was just written before it stops the job.
        std::thread::sleep(Duration::from_millis(100));
        // SAFETY: MPI is initialised and not finalised. The process lock is not taken: another
        // thread may hold it inside a call that never returns.
        unsafe { ffi::MPI_Abort(ffi::RSMPI_COMM_WORLD, code) };
    }
    std::process::exit(code)
}

/// Run `job(rank, grid)` for this process's rank of a `dims` grid over the MPI world, then
/// finalise MPI.
///
/// On an error or panic of `job` (or a failed finalisation) this process prints
/// `rank r failed (in|after <call>): <error>` to stderr and calls `MPI_Abort`, so `mpirun`
/// stops every other process at once: it does not return. Fails (without touching MPI) when
/// the process was not started by an MPI launcher.
pub(crate) fn run(dims: GridDims, grid: &GridOptions, opts: MpiOptions, job: Job<'_>) -> anyhow::Result<()> {
    anyhow::ensure!(boost_comm::mpi::launched(), "run_mpi: this process was not started by an MPI launcher (mpirun)");
    let proc = process().map_err(|e| anyhow::anyhow!("cannot start MPI: {e}"))?;
    let out = catch_unwind(AssertUnwindSafe(|| -> anyhow::Result<()> {
        let world = mpi_world_with(opts)?.expect("launched by mpirun");
        let grid = Grid::new(world, dims, grid)?;
        job(proc.rank, grid)
    }));
    let message = match out {
        Ok(Ok(())) => match finalize() {
            Ok(()) => return Ok(()),
            Err(e) => e.to_string(),
        },
        Ok(Err(e)) => format!("{e:#}"),
        Err(payload) => format!("panicked: {}", panic_message(&*payload)),
    };
    let during = proc.failure().and_then(|f| f.during).or_else(|| proc.activity());
    // One write, so that lines of several failing ranks do not interleave.
    let line = format!("{}\n", Failure { rank: proc.rank, during, message });
    let _ = std::io::stderr().write_all(line.as_bytes());
    abort(1)
}
