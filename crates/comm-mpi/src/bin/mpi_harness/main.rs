//! Scenarios for the MPI backend's tests, one process per rank:
//! `mpirun -np N boost-comm-mpi-harness <scenario>` (see `tests/mpi.rs`).
//!
//! * `collectives`: every collective and tagged send/recv on world handles in the default,
//!   ordered and check modes, compared with the in-process backend run in this process on the
//!   same inputs (bit-identical in ordered mode; sums within a rounding bound otherwise).
//! * `grid`: the (dp, pp, tp) grid of the world size (`BOOST_TEST_DIMS=dp,pp,tp`): groups,
//!   placement, the `Collective` adapter, pipeline send/recv and the recorder.
//! * `overlap`: started sends and receives (posted first) on pipeline groups with progress
//!   threads (`BOOST_TEST_DIMS`, two stages).
//! * `mismatch`, `recv_mismatch`, `error`, `panic`, `exit`, `stall`, `recv_stall`: failures the
//!   tests expect to end the job with a message.
//!
//! Each rank that finishes prints `ok <scenario> rank <r> of <p>: …` on stdout.

mod collectives;
mod failures;
mod grid;
mod latency;
mod overlap;
mod results;

use anyhow::{Context, ensure};
use boost_comm::mpi::{self, MpiOptions};
use boost_comm::{GridDims, GridOptions};

fn dims_from_env(p: usize) -> anyhow::Result<GridDims> {
    let Ok(s) = std::env::var("BOOST_TEST_DIMS") else {
        return Ok(GridDims::tp(p));
    };
    let v: Vec<usize> = s.split(',').map(|x| x.trim().parse()).collect::<Result<_, _>>()?;
    ensure!(v.len() == 3, "BOOST_TEST_DIMS={s}: expected dp,pp,tp");
    Ok(GridDims::new(v[0], v[1], v[2]))
}

fn main() -> anyhow::Result<()> {
    boost_comm_mpi::install();
    let scenario = std::env::args().nth(1).context("usage: boost-comm-mpi-harness <scenario>")?;
    ensure!(mpi::launched(), "run me with mpirun");
    let p: usize = std::env::var("OMPI_COMM_WORLD_SIZE").or_else(|_| std::env::var("PMI_SIZE"))?.parse()?;
    let dims = dims_from_env(p)?;
    let grid_opts = GridOptions::default().record(scenario == "grid").overlap(scenario == "overlap");
    let opts = MpiOptions::from_env();
    let name = scenario.clone();
    let (rank, info) = mpi::run_mpi_with(dims, &grid_opts, opts, move |rank, grid| {
        let info = match name.as_str() {
            "collectives" => collectives::collectives(rank, grid)?,
            "grid" => grid::grid_scenario(rank, grid)?,
            "latency" => latency::latency(grid)?,
            "overlap" => overlap::overlap_scenario(rank, grid)?,
            other => failures::failure_scenario(other, rank, grid)?,
        };
        Ok((rank, info))
    })?;
    println!("ok {scenario} rank {rank} of {p}: {info}");
    Ok(())
}
