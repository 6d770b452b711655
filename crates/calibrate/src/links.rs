//! The all-reduce between two ranks, in process or between two MPI processes, timed and
//! fitted to the ring model.

use anyhow::Result;
use boost_perf::hardware::LinkSpec;
use std::time::Instant;

/// Payloads timed by the collective calibration: one element (α) and 16 MiB (β).
const SMALL: usize = 1;
const LARGE: usize = 1 << 22;

/// Median seconds of a sum all-reduce of `SMALL` and of `LARGE` f32 elements over `grid.tp`.
fn all_reduce_times(grid: &boost_comm::Grid, reps: usize) -> Result<(f64, f64)> {
    use boost_tensor::{Label, ReduceOp};
    let median = |n: usize, reps: usize| -> Result<f64> {
        let mut buf = vec![1.0f32; n];
        let mut t = Vec::with_capacity(reps);
        for i in 0..reps + 3 {
            let t0 = Instant::now();
            grid.tp.all_reduce_slice(&mut buf, ReduceOp::Sum, Label::op("calibrate"))?;
            if i >= 3 {
                t.push(t0.elapsed().as_secs_f64());
            }
        }
        t.sort_by(|a, b| a.total_cmp(b));
        Ok(t[t.len() / 2])
    };
    Ok((median(SMALL, reps)?, median(LARGE, reps / 3)?))
}

/// The ring model for p = 2, t = 2α + bytes/β: α from the one-element call, β from the
/// difference to the 16 MiB call.
fn fit_link((small, large): (f64, f64)) -> LinkSpec {
    let bandwidth = (LARGE * 4) as f64 / (large - small).max(1e-9);
    LinkSpec { alpha_s: small / 2.0, bandwidth }
}

/// Time the in-process all-reduce of two ranks (the engine's embedded default) over a small
/// and a large payload and fit the ring model t = 2(p−1)·α + 2(p−1)/p · bytes/β (see
/// `fit_link`). Each size is the median of 30 (10) calls after a warm-up.
pub fn calibrate_collectives() -> Option<LinkSpec> {
    use boost_comm::{GridDims, run_ranks};
    let times = run_ranks(GridDims::tp(2), |_, grid| all_reduce_times(&grid, 30)).ok()?;
    Some(fit_link(times[0]))
}

/// The same measurement between two MPI processes: call in a program started by
/// `mpirun -np 2` (every process calls it; rank 0 gets the fit).
pub fn calibrate_mpi_collectives() -> Result<Option<LinkSpec>> {
    use boost_comm::{GridDims, RunOptions, mpi};
    mpi::run_mpi(GridDims::tp(2), &RunOptions::default(), |rank, grid| {
        anyhow::ensure!(grid.world.size() == 2, "measure the MPI links with mpirun -np 2");
        let link = fit_link(all_reduce_times(&grid, 30)?);
        Ok((rank == 0).then_some(link))
    })
}

/// Run `mpirun -np 2 <this program> plan --measure-mpi-links` and read its fit; None (with
/// the reason on stderr when `verbose`) without the `mpi` feature, without `mpirun`, or when
/// the launch fails.
pub(super) fn mpi_links_via_mpirun(verbose: bool) -> Option<LinkSpec> {
    let why = |s: String| {
        if verbose {
            eprintln!("MPI links not measured: {s}");
        }
        None
    };
    if !boost_comm::mpi::available() {
        return why("this build has no MPI backend (cargo feature `mpi`)".into());
    }
    let exe = match std::env::current_exe() {
        Ok(e) => e,
        Err(e) => return why(format!("cannot locate this program: {e}")),
    };
    let out = std::process::Command::new("mpirun")
        .args(["--oversubscribe", "-np", "2"])
        .arg(exe)
        .args(["plan", "--measure-mpi-links"])
        // Waiting ranks yield their core; a root shell (containers) may launch.
        .env("OMPI_MCA_mpi_yield_when_idle", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        .output();
    match out {
        Err(e) => why(format!("cannot run mpirun: {e}")),
        Ok(o) if !o.status.success() => why(format!("mpirun failed: {}", String::from_utf8_lossy(&o.stderr).trim())),
        Ok(o) => match serde_json::from_slice::<LinkSpec>(&o.stdout) {
            Ok(l) => Some(l),
            Err(e) => why(format!("unexpected output of --measure-mpi-links ({e})")),
        },
    }
}
