//! Several processes, one rank each, over MPI (feature `mpi`; Debian's OpenMPI).
//!
//! A program started by `mpirun -np N prog …` runs the same code in N processes. A trainer
//! picks the backend once, at the top:
//!
//! ```no_run
//! use boost_comm::{Dims, RunOptions, mpi, run_ranks_with};
//!
//! # fn train(rank: usize, grid: boost_comm::Grid) -> anyhow::Result<Option<f32>> { Ok(None) }
//! # fn main() -> anyhow::Result<()> {
//! let dims = Dims::new(1, 2, 2);
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
//! Without the `mpi` feature this module still detects `mpirun` ([`launched`]), and
//! [`run_mpi`] fails with a message saying how to rebuild, so a binary built without MPI
//! never runs N independent copies of a job.
//!
//! # Semantics
//!
//! The MPI communicator (`MpiComm`, feature `mpi`) implements [`crate::Communicator`] with
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

use std::time::Duration;

// The backend, one job a module: how buffers and descriptors reach MPI (raw, wire), the
// process's state and waits (process, wait), the communicator and its calls (comm, arrival,
// collectives, p2p), and the entry points (lifecycle).
#[cfg(feature = "mpi")]
mod arrival;
#[cfg(feature = "mpi")]
mod collectives;
#[cfg(feature = "mpi")]
mod comm;
#[cfg(feature = "mpi")]
mod lifecycle;
#[cfg(feature = "mpi")]
mod p2p;
#[cfg(feature = "mpi")]
mod process;
#[cfg(feature = "mpi")]
mod raw;
#[cfg(feature = "mpi")]
mod wait;
#[cfg(feature = "mpi")]
mod wire;

#[cfg(feature = "mpi")]
pub use comm::MpiComm;
#[cfg(feature = "mpi")]
pub use lifecycle::{abort, finalize, mpi_world, mpi_world_with, run_mpi, run_mpi_with};

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

/// Whether this crate was built with the MPI backend (feature `mpi`).
pub const fn available() -> bool {
    cfg!(feature = "mpi")
}

/// Whether this process was started by an MPI launcher (`mpirun`, `mpiexec`, `srun` with
/// PMI): one of `OMPI_COMM_WORLD_SIZE`, `PMI_SIZE`, `PMIX_RANK` is set.
pub fn launched() -> bool {
    ["OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"].iter().any(|v| std::env::var_os(v).is_some())
}

#[cfg(not(feature = "mpi"))]
mod stub {
    use super::MpiOptions;
    use crate::communicator::Communicator;
    use crate::error::CommResult;
    use crate::grid::{Dims, Grid, GridOptions};
    use crate::runner::RunOptions;
    use std::sync::Arc;

    const NO_MPI: &str = "this program was started by an MPI launcher, but it was built without MPI support: rebuild with `cargo build --release --features mpi` (Debian: apt-get install libopenmpi-dev openmpi-bin libclang-dev), or run it without mpirun";

    /// Without the `mpi` feature there is no MPI world.
    pub fn mpi_world() -> Option<Arc<dyn Communicator>> {
        None
    }

    /// Without the `mpi` feature there is no MPI world.
    pub fn mpi_world_with(_opts: MpiOptions) -> CommResult<Option<Arc<dyn Communicator>>> {
        Ok(None)
    }

    /// Fails: this build has no MPI backend.
    pub fn run_mpi<T>(
        _dims: impl Into<Dims>,
        _opts: &RunOptions,
        _f: impl FnOnce(usize, Grid) -> anyhow::Result<T>,
    ) -> anyhow::Result<T> {
        anyhow::bail!("{NO_MPI}")
    }

    /// Fails: this build has no MPI backend.
    pub fn run_mpi_with<T>(
        _dims: impl Into<Dims>,
        _grid: &GridOptions,
        _opts: MpiOptions,
        _f: impl FnOnce(usize, Grid) -> anyhow::Result<T>,
    ) -> anyhow::Result<T> {
        anyhow::bail!("{NO_MPI}")
    }

    /// Nothing to finalise without MPI.
    pub fn finalize() -> CommResult<()> {
        Ok(())
    }
}

#[cfg(not(feature = "mpi"))]
pub use stub::{finalize, mpi_world, mpi_world_with, run_mpi, run_mpi_with};
