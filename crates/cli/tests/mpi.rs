//! `mpirun -np N boost train …` runs one rank per process with the in-process backend's
//! losses and gradients, and a failing rank stops every process with its rank named. Needs the `mpi`
//! feature and `mpirun`; skipped with a message otherwise.
#![cfg(feature = "mpi")]

mod common;

use common::*;
use std::process::Command;
use std::time::Instant;

fn mpirun(np: usize) -> Option<Command> {
    let ok = Command::new("mpirun").arg("--version").output().map(|o| o.status.success()).unwrap_or(false);
    if !ok {
        eprintln!("mpirun is not available: skipping");
        return None;
    }
    let mut c = Command::new("mpirun");
    c.args(["--oversubscribe", "--allow-run-as-root", "-np", &np.to_string()])
        .env("OMPI_MCA_mpi_yield_when_idle", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        .arg(env!("CARGO_BIN_EXE_boost"));
    Some(c)
}

#[test]
fn four_processes_match_the_in_process_run() {
    let Some(mut mpi) = mpirun(4) else { return };
    let root = tempfile::tempdir().unwrap();
    let data = dataset(root.path());
    let grid = ["parallel.tp=2", "parallel.pp=2", "train.accumulation=2"];
    let (a, b, single) = (root.path().join("in-process"), root.path().join("mpi"), root.path().join("single"));
    let dump = ["--quiet", "--dump-grads", "1"];
    run(boost().arg("train").args(tiny(&data, &a, &grid)).args(dump));
    run(mpi.arg("train").args(tiny(&data, &b, &grid)).args(dump));
    run(boost().arg("train").args(tiny(&data, &single, &["train.accumulation=2"])).args(dump));
    let (la, lb) = (losses(&a), losses(&b));
    assert_eq!(la.len(), lb.len());
    // Two-rank sums are exact in any order, so the runs agree to the bit.
    for (x, y) in la.iter().zip(&lb) {
        assert_eq!(x.to_bits(), y.to_bits(), "in-process {la:?} vs mpi {lb:?}");
    }
    assert!(b.join("checkpoints/step-00000004/model.safetensors").is_file());
    // The gradients too: bit-identical to the in-process grid, and the single rank's within
    // docs/TESTING.md's fp32 bound (norm-wise 1e-5; only summation order differs).
    let (ga, gb) = (grads(&a, 1), grads(&b, 1));
    assert_grads_close(&gb, &ga, 0.0);
    assert_grads_close(&gb, &grads(&single, 1), 1e-5);
}

/// `parallel.tp_chunks` under mpirun: each chunk's tp group is an MPI communicator split off
/// the tp group, and two processes give the in-process run's losses and gradients bit for bit
/// (two-rank sums are exact, and chunks are added in a fixed order).
#[test]
fn tp_chunks_under_mpirun_match_the_in_process_run() {
    let Some(mut mpi) = mpirun(2) else { return };
    let root = tempfile::tempdir().unwrap();
    let data = dataset(root.path());
    let grid = ["parallel.tp=2", "parallel.tp_chunks=2"];
    let (a, b) = (root.path().join("in-process"), root.path().join("mpi"));
    let dump = ["--quiet", "--dump-grads", "2"];
    run(boost().arg("train").args(tiny(&data, &a, &grid)).args(dump));
    run(mpi.arg("train").args(tiny(&data, &b, &grid)).args(dump));
    let (la, lb) = (losses(&a), losses(&b));
    assert_eq!(la.len(), lb.len());
    for (x, y) in la.iter().zip(&lb) {
        assert_eq!(x.to_bits(), y.to_bits(), "in-process {la:?} vs mpi {lb:?}");
    }
    assert_grads_close(&grads(&b, 2), &grads(&a, 2), 0.0);
}

#[test]
fn a_failing_process_stops_the_others_and_is_named() {
    let Some(mut mpi) = mpirun(4) else { return };
    let root = tempfile::tempdir().unwrap();
    let data = dataset(root.path());
    let t0 = Instant::now();
    let out = mpi
        .arg("train")
        .args(tiny(&data, &root.path().join("fail"), &["parallel.tp=2", "parallel.pp=2", "train.accumulation=2"]))
        .args(["--quiet", "--inject-fault", "3:1"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("rank 3") && err.contains("injected fault at step 1"), "{err}");
    assert!(t0.elapsed().as_secs() < 60, "took {:?}", t0.elapsed());
}

/// `parallel.overlap` under mpirun: a dp2·pp2 grid of processes (gradient buckets reduced
/// during the backward by the MPI progress threads, pipeline receives posted ahead) gives the
/// losses and gradients of the blocking order bit for bit, and a process failing while its
/// replicas' buckets are in flight stops every process, named.
#[test]
fn overlap_is_bit_identical_and_hides_no_failure_under_mpirun() {
    let Some(_) = mpirun(4) else { return };
    let root = tempfile::tempdir().unwrap();
    let data = dataset(root.path());
    let grid = ["parallel.dp=2", "parallel.pp=2", "train.accumulation=2", "parallel.bucket_mb=0.001"];
    overlap_matches_blocking(4, &grid, &data, root.path());

    let t0 = Instant::now();
    let sets: Vec<&str> = grid.iter().copied().chain(["parallel.overlap=true"]).collect();
    let out = mpirun(4)
        .expect("mpirun")
        .arg("train")
        .args(tiny(&data, &root.path().join("fail"), &sets))
        .args(["--quiet", "--inject-fault", "3:2"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("rank 3") && err.contains("injected fault at step 2"), "{err}");
    assert!(t0.elapsed().as_secs() < 60, "took {:?}", t0.elapsed());
}

/// ZeRO-1 with `parallel.overlap` under mpirun: the parameter all-gathers of one step are
/// still in flight (MPI requests on the dp communicator) while the step's loss report and the
/// next step's first forward run, and are completed buffer by buffer as that forward reads
/// them; losses and gradients equal the blocking order's bit for bit.
#[test]
fn zero1_parameter_gathers_into_the_next_forward_are_bit_identical_under_mpirun() {
    let Some(_) = mpirun(2) else { return };
    let root = tempfile::tempdir().unwrap();
    let data = dataset(root.path());
    let grid = ["parallel.dp=2", "parallel.zero=1", "train.accumulation=1", "parallel.bucket_mb=0.001"];
    overlap_matches_blocking(2, &grid, &data, root.path());
}

/// `boost train` on `np` processes with `grid`, overlap on and off: the same losses and
/// gradients (step 3), bit for bit.
fn overlap_matches_blocking(np: usize, grid: &[&str], data: &std::path::Path, root: &std::path::Path) {
    let runs: Vec<_> = ["true", "false"]
        .iter()
        .map(|on| {
            let dir = root.join(format!("overlap-{on}"));
            let overlap = format!("parallel.overlap={on}");
            let sets: Vec<&str> = grid.iter().copied().chain([overlap.as_str()]).collect();
            let mut mpi = mpirun(np).expect("mpirun");
            run(mpi.arg("train").args(tiny(data, &dir, &sets)).args(["--quiet", "--dump-grads", "3"]));
            (losses(&dir), grads(&dir, 3))
        })
        .collect();
    let ((loss_on, grads_on), (loss_off, grads_off)) = (&runs[0], &runs[1]);
    let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    assert_eq!(bits(loss_on), bits(loss_off), "{grid:?}: losses {loss_on:?} vs {loss_off:?}");
    assert_grads_close(grads_on, grads_off, 0.0);
}

/// The MPI link calibration of `boost plan` times real MPI all-reduces between two processes.
#[test]
fn plan_measures_the_mpi_links() {
    let Some(mut mpi) = mpirun(2) else { return };
    let out = run(mpi.args(["plan", "--measure-mpi-links"]));
    let link: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON line from rank 0");
    let (alpha, beta) = (link["alpha_s"].as_f64().unwrap(), link["bandwidth"].as_f64().unwrap());
    // A latency between 10 ns and 10 ms, a bandwidth between 1 MB/s and 1 TB/s: a real fit,
    // not a default or a division by zero.
    assert!((1e-8..1e-2).contains(&alpha) && (1e6..1e12).contains(&beta), "{link}");
}
