//! Without an installed MPI backend, a process started by mpirun gets a clear error instead of
//! running the job alone.

use boost_comm::mpi;
use boost_comm::{GridDims, RunOptions};

#[test]
fn run_mpi_explains_how_to_get_mpi() {
    assert!(!mpi::available());
    // SAFETY: the only test of this binary; no other thread reads the environment.
    unsafe { std::env::set_var("OMPI_COMM_WORLD_SIZE", "2") };
    assert!(mpi::launched());
    assert!(mpi::mpi_world().is_none());
    let e = mpi::run_mpi(GridDims::tp(2), &RunOptions::default(), |_, _| Ok(())).unwrap_err();
    assert!(e.to_string().contains("built without MPI support"), "{e:#}");
}
