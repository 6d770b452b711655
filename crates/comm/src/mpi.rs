//! Several processes, one rank each, over MPI (Debian's OpenMPI), through an installed backend.
//!
//! A program started by `mpirun -np N prog …` runs the same code in N processes. A trainer
//! picks the backend once, at the top:
//!
//! ```no_run
//! use boost_comm::{GridDims, RunOptions, mpi, run_ranks_with};
//!
//! # fn train(rank: usize, grid: boost_comm::Grid) -> anyhow::Result<Option<f32>> { Ok(None) }
//! # fn main() -> anyhow::Result<()> {
//! let dims = GridDims::new(1, 2, 2);
//! let opts = RunOptions::default();
//! let lead: Option<f32> = if mpi::launched() {
//!     // This process's rank only; an error or panic in any rank aborts the whole job.
//!     mpi::run_mpi(dims, &opts, |rank, grid| train(rank, grid))?
//! } else {
//!     run_ranks_with(dims, &opts, |rank, grid| train(rank, grid))?.swap_remove(0)
//! };
//! # Ok(()) }
//! ```
//!
//! This crate links no MPI library: the functions here dispatch to the [`MpiBackend`] the
//! program installed at start-up ([`install`]). The crate `boost-comm-mpi` is that backend
//! (`boost_comm_mpi::install()`); the `boost` binary built with `--features mpi` installs it
//! first thing in `main`. Without an installed backend this module still detects `mpirun`
//! ([`launched`]), and [`run_mpi`] fails with a message saying how to rebuild, so a binary
//! built without MPI never runs N independent copies of a job.
//!
//! # Semantics
//!
//! The MPI communicator (`boost_comm_mpi::MpiComm`) implements [`crate::Communicator`] with
//! the same contract as the in-process backend, with these differences:
//!
//! * Sums use MPI's own reduction order by default (bit-identical to the in-process backend
//!   for p ≤ 2; for p > 2 the association may differ by rounding). [`MpiOptions::ordered`]
//!   (`BOOST_MPI_ORDERED=1`) reduces every element in rank order 0..p−1 instead (an
//!   all-to-all of chunks, a local ordered reduction, an all-gather: the same traffic as a
//!   ring all-reduce), which is bit-identical to the in-process backend. Float max reductions
//!   always take the ordered path, so a NaN propagates as it does in-process.
//! * Every call is a non-blocking MPI operation polled until done or until
//!   [`MpiOptions::deadline`] (`BOOST_MPI_DEADLINE_S`, default 300 s) passes; then it fails
//!   with [`crate::CommError::Timeout`] naming the operation. A recv names the rank it waited
//!   for; a collective names the group, and, in check mode, the ranks that did not arrive.
//! * Kinds, dtypes and sizes of collectives are only compared across ranks in check mode
//!   ([`MpiOptions::check`], `BOOST_MPI_CHECK=1`): before each collective every rank sends
//!   its call's descriptor to the others, and a mismatch fails on every rank with the
//!   in-process message (`mismatched collectives at call #k: rank a called … but rank b
//!   called …`). Point-to-point messages always carry their sender's descriptor: a recv
//!   whose dtype or length differs from the message fails naming both calls.
//! * A failure ends the process's use of MPI: every later call fails with
//!   [`crate::CommError::PeerFailed`] naming this rank. [`run_mpi`] prints the failure and
//!   calls `MPI_Abort`, which makes `mpirun` stop every other process. A process that dies
//!   (a crash, `exit` without finalising) is detected by `mpirun`, which stops the others.
//! * Send buffers are copied and sent eagerly: a send never waits for its recv.
//!   MPI works on buffers this backend owns (a copy in and out of each call), so an operation
//!   left pending by a timeout never touches a caller's memory.
//! * User tags must be below the MPI implementation's tag bound less one (OpenMPI:
//!   2³¹ − 2).

use crate::communicator::Communicator;
use crate::error::CommResult;
use crate::grid::{Grid, GridDims, GridOptions};
use crate::runner::RunOptions;
use std::io::Write;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

/// Settings of MPI communicators ([`MpiOptions::from_env`] reads them from the environment).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MpiOptions {
    /// How long one call may wait before it fails (`BOOST_MPI_DEADLINE_S`, seconds).
    pub deadline: Duration,
    /// Reduce in rank order 0..p−1, bit-identical to the in-process backend
    /// (`BOOST_MPI_ORDERED=1`).
    pub ordered: bool,
    /// Compare every collective's kind, dtype, size, root and label across the group before
    /// running it (`BOOST_MPI_CHECK=1`).
    pub check: bool,
    /// Whether check mode also compares labels.
    pub check_labels: bool,
}

impl Default for MpiOptions {
    fn default() -> Self {
        Self { deadline: Duration::from_secs(300), ordered: false, check: false, check_labels: true }
    }
}

fn env_flag(name: &str) -> Option<bool> {
    let v = std::env::var(name).ok()?;
    Some(matches!(v.trim().to_ascii_lowercase().as_str(), "1" | "true" | "yes" | "on"))
}

impl MpiOptions {
    /// The defaults, overridden by `BOOST_MPI_DEADLINE_S`, `BOOST_MPI_ORDERED` and
    /// `BOOST_MPI_CHECK` where set (flags accept 1/true/yes/on).
    pub fn from_env() -> Self {
        Self::default().with_env()
    }

    /// These options, overridden by the environment variables of [`MpiOptions::from_env`]
    /// where set.
    pub fn with_env(mut self) -> Self {
        if let Some(s) = std::env::var("BOOST_MPI_DEADLINE_S").ok().and_then(|v| v.trim().parse::<f64>().ok())
            && s.is_finite()
            && s > 0.0
        {
            self.deadline = Duration::from_secs_f64(s);
        }
        if let Some(on) = env_flag("BOOST_MPI_ORDERED") {
            self.ordered = on;
        }
        if let Some(on) = env_flag("BOOST_MPI_CHECK") {
            self.check = on;
        }
        self
    }

    pub fn deadline(mut self, d: Duration) -> Self {
        self.deadline = d;
        self
    }
    pub fn ordered(mut self, on: bool) -> Self {
        self.ordered = on;
        self
    }
    pub fn check(mut self, on: bool) -> Self {
        self.check = on;
        self
    }
    pub fn check_labels(mut self, on: bool) -> Self {
        self.check_labels = on;
        self
    }
}

/// Whether this process was started by an MPI launcher (`mpirun`, `mpiexec`, `srun` with
/// PMI): one of `OMPI_COMM_WORLD_SIZE`, `PMI_SIZE`, `PMIX_RANK` is set.
pub fn launched() -> bool {
    ["OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"].iter().any(|v| std::env::var_os(v).is_some())
}

/// The MPI entry points a backend provides; [`install`] makes it this process's backend.
/// This module's functions call it and document the behaviour it must have.
pub trait MpiBackend: Send + Sync {
    /// [`mpi_world_with`]: a world communicator with `opts`, `Ok(None)` when the process was
    /// not started by an MPI launcher.
    fn world(&self, opts: MpiOptions) -> CommResult<Option<Arc<dyn Communicator>>>;
    /// [`run_mpi_with`], the job's result kept by the job: run `job` for this process's
    /// rank of a `dims` grid over the world and finalise; on a failure, report it and abort.
    fn run(&self, dims: GridDims, grid: &GridOptions, opts: MpiOptions, job: Job<'_>) -> anyhow::Result<()>;
    /// [`finalize`].
    fn finalize(&self) -> CommResult<()>;
    /// [`abort`].
    fn abort(&self, code: i32) -> !;
}

/// A rank's job as [`MpiBackend::run`] takes it: called once, with the process's rank and
/// its grid.
pub type Job<'a> = Box<dyn FnOnce(usize, Grid) -> anyhow::Result<()> + 'a>;

static BACKEND: OnceLock<&'static dyn MpiBackend> = OnceLock::new();

/// Make `backend` this process's MPI backend (`boost_comm_mpi::install()` calls it). Call it
/// first thing in `main`, before any other function of this module. Returns false, keeping
/// the first, when a backend was already installed.
pub fn install(backend: &'static dyn MpiBackend) -> bool {
    BACKEND.set(backend).is_ok()
}

fn backend() -> Option<&'static dyn MpiBackend> {
    BACKEND.get().copied()
}

/// Whether this process has an MPI backend ([`install`]).
pub fn available() -> bool {
    backend().is_some()
}

const NO_MPI: &str = "this program was started by an MPI launcher, but it was built without MPI support: rebuild with `cargo build --release --features mpi` (Debian: apt-get install libopenmpi-dev openmpi-bin libclang-dev; a program of your own installs the backend with `boost_comm_mpi::install()`), or run it without mpirun";

/// This process's world communicator, with options from the environment
/// ([`MpiOptions::from_env`]); `None` when the process was not started by an MPI launcher
/// or has no MPI backend. Initialises MPI on first use. Every process must call it (it
/// duplicates `MPI_COMM_WORLD`, a collective).
///
/// # Panics
/// When MPI cannot be initialised or the duplication fails (see [`mpi_world_with`]).
pub fn mpi_world() -> Option<Arc<dyn Communicator>> {
    match mpi_world_with(MpiOptions::from_env()) {
        Ok(w) => w,
        Err(e) => panic!("cannot open the MPI world: {e}"),
    }
}

/// A world communicator with `opts` (a duplicate of `MPI_COMM_WORLD`, so handles never see
/// each other's messages); `Ok(None)` when the process was not started by an MPI launcher
/// or has no MPI backend. Every process must call it.
pub fn mpi_world_with(opts: MpiOptions) -> CommResult<Option<Arc<dyn Communicator>>> {
    match backend() {
        Some(b) => b.world(opts),
        None => Ok(None),
    }
}

/// Finish MPI: wait (up to the deadline) until every eager send was received, meet every
/// other process in a barrier (up to the deadline), and call `MPI_Finalize`. Later MPI calls
/// fail. Does nothing when MPI was never started or is already finalised, or without a
/// backend; after a failure it returns that failure and leaves MPI as it is (abort instead).
pub fn finalize() -> CommResult<()> {
    backend().map_or(Ok(()), |b| b.finalize())
}

/// Flush the standard streams and end the whole MPI job (`MPI_Abort` on the world: `mpirun`
/// stops every process); without MPI, exit the process.
pub fn abort(code: i32) -> ! {
    if let Some(b) = backend() {
        b.abort(code)
    }
    let _ = std::io::stdout().flush();
    let _ = std::io::stderr().flush();
    std::process::exit(code)
}

/// [`run_mpi_with`] with the grid options of `opts`, its deadline and label checking, and
/// the rest of [`MpiOptions`] from the environment (which also overrides the deadline).
pub fn run_mpi<T>(
    dims: impl Into<GridDims>,
    opts: &RunOptions,
    f: impl FnOnce(usize, Grid) -> anyhow::Result<T>,
) -> anyhow::Result<T> {
    let mpi =
        MpiOptions::default().deadline(opts.inprocess.deadline).check_labels(opts.inprocess.check_labels).with_env();
    run_mpi_with(dims, &opts.grid, mpi, f)
}

/// Run `f(rank, grid)` for this process's rank of a `dims` grid over the MPI world, then
/// finalise MPI and return its result.
///
/// On an error or panic of `f` (or a failed finalisation) this process prints
/// `rank r failed (in|after <call>): <error>` to stderr and calls `MPI_Abort`, so `mpirun`
/// stops every other process at once: it does not return. Fails (without touching MPI) when
/// the process was not started by an MPI launcher, and, saying how to rebuild, when it has
/// no MPI backend.
pub fn run_mpi_with<T>(
    dims: impl Into<GridDims>,
    grid: &GridOptions,
    opts: MpiOptions,
    f: impl FnOnce(usize, Grid) -> anyhow::Result<T>,
) -> anyhow::Result<T> {
    let Some(b) = backend() else { anyhow::bail!("{NO_MPI}") };
    let mut out = None;
    b.run(
        dims.into(),
        grid,
        opts,
        Box::new(|rank, grid| {
            out = Some(f(rank, grid)?);
            Ok(())
        }),
    )?;
    out.ok_or_else(|| anyhow::anyhow!("the MPI backend returned without running the job"))
}
