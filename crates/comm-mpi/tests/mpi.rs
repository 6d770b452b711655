//! The MPI backend under `mpirun` (feature `mpi`): each test launches the
//! `boost-comm-mpi-harness` binary on 2 to 4 processes and checks its output. Skipped (with a
//! note on stderr) when `mpirun` is not installed.
#![cfg(feature = "mpi")]

use boost_comm::mpi;
use boost_comm::{GridDims, RunOptions};
use std::io::Read;
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

const HARNESS: &str = env!("CARGO_BIN_EXE_boost-comm-mpi-harness");

/// One mpirun at a time: the machines running these tests may have 2 cores.
static SERIAL: Mutex<()> = Mutex::new(());

struct Outcome {
    code: Option<i32>,
    stdout: String,
    stderr: String,
    elapsed: Duration,
}

impl Outcome {
    fn all(&self) -> String {
        format!(
            "exit {:?} after {:.2?}\n--- stdout\n{}\n--- stderr\n{}",
            self.code, self.elapsed, self.stdout, self.stderr
        )
    }
    fn ok_lines(&self, scenario: &str) -> usize {
        self.stdout.lines().filter(|l| l.starts_with(&format!("ok {scenario} rank "))).count()
    }
}

fn have_mpirun() -> bool {
    Command::new("mpirun")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// `mpirun -np <np> harness <scenario>` with `env`, stopped (SIGTERM, then SIGKILL) after
/// `limit`. `None` when mpirun is missing.
fn mpirun(np: usize, scenario: &str, env: &[(&str, &str)], limit: Duration) -> Option<Outcome> {
    if !have_mpirun() {
        eprintln!("skipped: mpirun not found (apt-get install openmpi-bin libopenmpi-dev)");
        return None;
    }
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let mut cmd = Command::new("mpirun");
    cmd.args(["--oversubscribe", "--allow-run-as-root", "-np", &np.to_string(), HARNESS, scenario])
        .env("OMPI_MCA_mpi_yield_when_idle", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        .env("RUST_BACKTRACE", "0")
        .env_remove("BOOST_MPI_ORDERED")
        .env_remove("BOOST_MPI_CHECK")
        .env_remove("BOOST_MPI_DEADLINE_S")
        .env_remove("BOOST_TEST_DIMS")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let t = Instant::now();
    let mut child = cmd.spawn().expect("mpirun starts");
    let mut out = child.stdout.take().expect("piped");
    let mut err = child.stderr.take().expect("piped");
    let reader_out = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = out.read_to_string(&mut s);
        s
    });
    let reader_err = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    let status = loop {
        if let Some(s) = child.try_wait().expect("waitable") {
            break Some(s);
        }
        if t.elapsed() > limit {
            // SIGTERM lets mpirun stop its processes; SIGKILL if it does not.
            let _ = Command::new("kill").args(["-TERM", &child.id().to_string()]).status();
            std::thread::sleep(Duration::from_secs(2));
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let elapsed = t.elapsed();
    let o = Outcome {
        code: status.and_then(|s| s.code()),
        stdout: reader_out.join().unwrap_or_default(),
        stderr: reader_err.join().unwrap_or_default(),
        elapsed,
    };
    assert!(status.is_some(), "mpirun {scenario} was still running after {limit:?}:\n{}", o.all());
    Some(o)
}

fn expect_success(np: usize, scenario: &str, env: &[(&str, &str)]) -> Option<Outcome> {
    let o = mpirun(np, scenario, env, Duration::from_secs(60))?;
    assert_eq!(o.code, Some(0), "{}", o.all());
    assert_eq!(o.ok_lines(scenario), np, "{}", o.all());
    eprintln!("{scenario} on {np} processes: {:.2?}\n{}", o.elapsed, o.stdout);
    Some(o)
}

/// A failure that must end the whole job within `within`, with `needles` in its stderr.
fn expect_failure(np: usize, scenario: &str, env: &[(&str, &str)], within: Duration, needles: &[&str]) {
    let Some(o) = mpirun(np, scenario, env, Duration::from_secs(60)) else { return };
    assert_ne!(o.code, Some(0), "{}", o.all());
    assert_eq!(o.ok_lines(scenario), 0, "no rank finishes: {}", o.all());
    assert!(o.elapsed < within, "took {:.2?}, expected under {within:?}: {}", o.elapsed, o.all());
    for n in needles {
        assert!(o.stderr.contains(n), "missing {n:?} in:\n{}", o.all());
    }
    eprintln!("{scenario} on {np} processes ended in {:.2?}", o.elapsed);
}

#[test]
fn collectives_on_2_processes_are_bit_identical_to_in_process() {
    // The harness compares every result with the in-process backend: bit-identical for p ≤ 2
    // in every mode.
    let Some(o) = expect_success(2, "collectives", &[]) else { return };
    assert!(o.stdout.contains("default: 0 of"), "{}", o.all());
}

#[test]
fn collectives_on_3_processes_match_in_process() {
    // The grid's world handle takes ordered and check mode from the environment.
    expect_success(3, "collectives", &[("BOOST_MPI_ORDERED", "1"), ("BOOST_MPI_CHECK", "1")]);
}

#[test]
fn collectives_on_4_processes_match_in_process_ordered_bit_identical() {
    // Sums in MPI's order stay within 2(p−1)·u·Σ|x| of the in-process ones; the ordered mode
    // is bit-identical (checked by the harness for every element).
    let Some(o) = expect_success(4, "collectives", &[]) else { return };
    assert!(o.stdout.lines().all(|l| !l.starts_with("ok") || l.contains("ordered: 0 of")), "{}", o.all());
}

#[test]
fn grid_1_2_2_on_4_processes() {
    let Some(o) = expect_success(4, "grid", &[("BOOST_TEST_DIMS", "1,2,2")]) else { return };
    assert!(
        o.stdout.contains("ok grid rank 3 of 4: coord (dp 0, pp 1, tp 1); tp [2, 3], pp [1, 3], dp [3]"),
        "{}",
        o.all()
    );
}

/// With progress threads a receive posted before its send does not hold up this rank's own
/// send (it did: the two shared the handle's scratch buffers and both stages waited forever).
#[test]
fn posted_receives_and_sends_overlap_on_4_processes() {
    expect_success(4, "overlap", &[("BOOST_TEST_DIMS", "1,2,2"), ("BOOST_MPI_DEADLINE_S", "20")]);
}

#[test]
fn check_mode_names_both_ranks_of_a_mismatched_collective() {
    expect_failure(
        3,
        "mismatch",
        &[("BOOST_MPI_CHECK", "1"), ("BOOST_MPI_DEADLINE_S", "20")],
        Duration::from_secs(15),
        &[
            "mismatched collectives at call #4: rank 0 called all_reduce(layer0.attn.o.A, f32 × 8) but rank 1 called all_reduce(layer0.attn.o.A, f32 × 9)",
        ],
    );
}

#[test]
fn a_recv_that_does_not_match_its_send_names_both_calls() {
    expect_failure(
        2,
        "recv_mismatch",
        &[("BOOST_MPI_DEADLINE_S", "20")],
        Duration::from_secs(15),
        &[
            "rank 1 failed (in recv(act, from 0, tag 3, f64 × 8)): rank 1 called recv(act, from 0, tag 3, f64 × 8) but rank 0 sent send(act, to 1, tag 3, f32 × 8)",
        ],
    );
}

#[test]
fn an_error_in_one_rank_stops_the_others_naming_it() {
    // A 60 s deadline: the abort, not a timeout, ends the others' wait.
    expect_failure(
        3,
        "error",
        &[("BOOST_MPI_DEADLINE_S", "60")],
        Duration::from_secs(15),
        &["rank 1 failed (after all_reduce(layer0.attn.qkv.A, f32 × 8)): boom: bad batch"],
    );
}

#[test]
fn a_panic_in_one_rank_stops_the_others_naming_it() {
    expect_failure(
        2,
        "panic",
        &[("BOOST_MPI_DEADLINE_S", "60")],
        Duration::from_secs(15),
        &["rank 1 failed (after all_reduce(layer0.attn.qkv.A, f32 × 8)): panicked: kernel exploded"],
    );
}

#[test]
fn a_rank_that_dies_stops_the_others() {
    // Exiting without finalising, with an error code and without: mpirun names the process
    // and stops the others, which would otherwise wait 60 s.
    expect_failure(
        3,
        "exit",
        &[("BOOST_MPI_DEADLINE_S", "60"), ("BOOST_TEST_EXIT_CODE", "3")],
        Duration::from_secs(15),
        &["Process name: [[", ",2]\n  Exit code:    3"],
    );
    expect_failure(
        3,
        "exit",
        &[("BOOST_MPI_DEADLINE_S", "60"), ("BOOST_TEST_EXIT_CODE", "0")],
        Duration::from_secs(15),
        &["mpirun has exited due to process rank 2"],
    );
}

#[test]
fn a_stalled_rank_makes_the_others_time_out_naming_the_operation() {
    // Rank 2 sleeps 30 s; the others give up after 1 s and the job ends well before rank 2
    // would have arrived. Check mode names the late rank.
    expect_failure(
        3,
        "stall",
        &[("BOOST_MPI_CHECK", "1"), ("BOOST_MPI_DEADLINE_S", "1")],
        Duration::from_secs(15),
        &["waited 1.", "s in all_reduce(layer3.mlp.down.A, f32 × 8) for rank(s) 2"],
    );
    expect_failure(
        3,
        "stall",
        &[("BOOST_MPI_DEADLINE_S", "1")],
        Duration::from_secs(15),
        &[
            "waited 1.",
            "s in all_reduce(layer3.mlp.down.A, f32 × 8) (MPI does not tell which rank is late; BOOST_MPI_CHECK=1 does)",
        ],
    );
}

#[test]
fn a_recv_that_never_comes_times_out_naming_its_source() {
    expect_failure(
        2,
        "recv_stall",
        &[("BOOST_MPI_DEADLINE_S", "1")],
        Duration::from_secs(15),
        &[
            "rank 1 waited 1.",
            "s in recv(grad, from 0, tag 2, f32 × 3) (a message with tag 1 from rank 0 is waiting) for rank(s) 0",
        ],
    );
}

#[test]
fn outside_mpirun_there_is_no_mpi_world() {
    if mpi::launched() {
        return;
    }
    boost_comm_mpi::install();
    assert!(mpi::available());
    assert!(mpi::mpi_world().is_none());
    let e = mpi::run_mpi(GridDims::tp(2), &RunOptions::default(), |_, _| Ok(())).unwrap_err();
    assert!(e.to_string().contains("not started by an MPI launcher"), "{e:#}");
}
