//! The MPI backend of [`boost_comm::mpi`]: one rank per process under `mpirun`, over the MPI
//! library (Debian's OpenMPI) through the `mpi` crate's bindings.
//!
//! A program installs it first thing in `main`; from then on `boost_comm::mpi::run_mpi`,
//! `mpi_world`, `finalize` and `abort` use MPI, and `boost_comm::mpi::available()` is true
//! (see `install`).
//!
//! The semantics (reduction order, deadlines, check mode, failures) are those documented in
//! [`boost_comm::mpi`]. Everything here needs the crate's feature `mpi` (the MPI library and
//! libclang for the bindings); without it the crate is empty, so that a workspace build
//! needs no MPI.
#![cfg(feature = "mpi")]
#![deny(unsafe_op_in_unsafe_fn)]

// One job a module: how buffers and descriptors reach MPI (raw, wire), the process's state
// and waits (process, wait), the communicator and its calls (comm, arrival, collectives,
// p2p), and the entry points (lifecycle).
mod arrival;
mod collectives;
mod comm;
mod lifecycle;
mod p2p;
mod process;
mod raw;
mod wait;
mod wire;

use boost_comm::mpi::{Job, MpiBackend, MpiOptions};
use boost_comm::{CommResult, Communicator, GridDims, GridOptions};
use std::sync::Arc;

pub use comm::MpiComm;

/// The MPI backend; [`install`] installs it.
#[derive(Debug, Clone, Copy, Default)]
pub struct Mpi;

impl MpiBackend for Mpi {
    fn world(&self, opts: MpiOptions) -> CommResult<Option<Arc<dyn Communicator>>> {
        lifecycle::mpi_world_with(opts)
    }
    fn run(&self, dims: GridDims, grid: &GridOptions, opts: MpiOptions, job: Job<'_>) -> anyhow::Result<()> {
        lifecycle::run(dims, grid, opts, job)
    }
    fn finalize(&self) -> CommResult<()> {
        lifecycle::finalize()
    }
    fn abort(&self, code: i32) -> ! {
        lifecycle::abort(code)
    }
}

/// Make MPI this process's backend of [`boost_comm::mpi`] (no effect when a backend is
/// already installed). Call it first thing in `main`:
///
/// ```no_run
/// boost_comm_mpi::install();
/// assert!(boost_comm::mpi::available());
/// // … then boost_comm::mpi::run_mpi(dims, &opts, |rank, grid| …) under mpirun.
/// ```
pub fn install() {
    boost_comm::mpi::install(&Mpi);
}
