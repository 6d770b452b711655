//! Microbenchmarks of this machine that fill a CPU hardware description: f32 GEMM throughput
//! over a set of shapes (the engine's kernels, rayon-parallel), the engine's attention by head
//! dimension and sequence, copy and elementwise bandwidth, and the fixed cost of one parallel
//! kernel.
//!
//! Fitting: with `f(x; c) = x / (x + c)`, the model says
//! `GFLOP/s(M, N, K) = P · f(M; c_M)·f(N; c_N)·f(K; c_K)`. For given c's, the best P is the
//! geometric mean of `measured / Π f`; the c's with the least squared log error win (a grid
//! search of one c for all three, then of each in turn). The file then has `peak_flops = P`,
//! `gemm_efficiency = 1` (P is already an achieved rate) and `gemm_half_dims = [c_M, c_N, c_K]`.
//!
//! Collectives: [`calibrate_collectives`] times the in-process all-reduce of two ranks and
//! fits α and β; [`calibrate_mpi_collectives`] does the same between two MPI processes (run
//! by `--calibrate-cpu` through `mpirun -np 2` when the build has MPI), for a second file.

mod attention;
mod bandwidth;
mod file;
mod gemm;
mod links;
mod machine;
mod shared;

pub use attention::{AttentionSample, measure_attention};
pub use bandwidth::{measure_bandwidth, measure_kernel_overhead};
pub use gemm::{GemmSample, SHAPES, fit_curve, fit_curve_per_dim, measure_gemm};
pub use links::{calibrate_collectives, calibrate_mpi_collectives};
pub use machine::{cache_dir, this_machine};
pub use shared::measure_shared_efficiency;

use anyhow::Result;
use boost_perf::hardware::LinkSpec;
use boost_perf::median;
use file::{Measured, refuse_existing, write_checked};
use links::mpi_links_via_mpirun;
use std::path::Path;
use std::time::Instant;

/// Timed runs per measurement; the median is kept.
const TIMED_RUNS: usize = 5;

/// Seconds of one `run`, in the current pool with its workers held awake as a training step
/// runs them: after a warm-up call, the median of [`TIMED_RUNS`] timed runs of enough calls to
/// last at least ~60 ms each. The median, not the best: a step runs at the rate this machine
/// sustains, busy moments of a shared host included, and the benchmarks quote step medians.
fn typical_seconds(mut run: impl FnMut() + Send) -> f64 {
    boost_tensor::cpu::pool::hold_pool(|| {
        run();
        let t0 = Instant::now();
        run();
        let once = t0.elapsed().as_secs_f64().max(1e-7);
        let reps = ((0.06 / once).ceil() as usize).clamp(1, 10_000);
        let runs: Vec<f64> = (0..TIMED_RUNS)
            .map(|_| {
                let t = Instant::now();
                for _ in 0..reps {
                    run();
                }
                t.elapsed().as_secs_f64() / reps as f64
            })
            .collect();
        median(runs)
    })
}

/// Run every microbenchmark and write a CPU hardware TOML to `out`; returns the text.
/// Every measurement is repeated `rounds` times (whole sweeps) and the median of the rounds is
/// kept: the rate the machine sustains, as a step sees it.
pub fn calibrate_cpu(out: &Path, threads: usize, rounds: usize, verbose: bool, force: bool) -> Result<String> {
    // Refuse before measuring, not after minutes of it.
    refuse_existing(out, force)?;
    let threads = if threads == 0 { rayon::current_num_threads() } else { threads };
    let rounds = rounds.max(1);
    // Every round's figure of every measurement; the median of the rounds is kept.
    let mut gemm_rounds: Vec<Vec<f64>> = vec![Vec::new(); SHAPES.len()];
    let mut attention_rounds: Vec<Vec<f64>> = vec![Vec::new(); attention::POINTS.len()];
    let (mut copy, mut add, mut launch, mut shared) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    // In-process ranks share the process's global pool, so their measurement needs it.
    let global = threads == rayon::current_num_threads();
    // Every measurement runs on one pool of `threads` workers, made once.
    let mut sweep = || {
        for round in 0..rounds {
            for (&(m, n, k), figures) in SHAPES.iter().zip(gemm_rounds.iter_mut()) {
                let r = measure_gemm(m, n, k);
                if verbose {
                    eprintln!("round {round}: gemm {m:>5} × {n:>5} × {k:>5}: {:7.1} GFLOP/s", r / 1e9);
                }
                figures.push(r);
            }
            for (&(head_dim, seq), figures) in attention::POINTS.iter().zip(attention_rounds.iter_mut()) {
                let r = measure_attention(head_dim, seq);
                if verbose {
                    eprintln!("round {round}: attention head_dim {head_dim:>3} seq {seq:>5}: {:7.1} GFLOP/s", r / 1e9);
                }
                figures.push(r);
            }
            let (c, a) = measure_bandwidth();
            copy.push(c);
            add.push(a);
            launch.push(measure_kernel_overhead());
            if global {
                let e = measure_shared_efficiency();
                if verbose {
                    eprintln!("round {round}: {} ranks at once reach {e:.3} of one rank's GEMM rate", shared::CALLERS);
                }
                shared.push(e);
            }
        }
    };
    if global {
        sweep();
    } else {
        rayon::ThreadPoolBuilder::new().num_threads(threads).build()?.install(sweep);
    }
    let samples: Vec<GemmSample> =
        SHAPES.iter().zip(gemm_rounds).map(|(&(m, n, k), f)| GemmSample { m, n, k, flops_per_s: median(f) }).collect();
    let attention: Vec<AttentionSample> = attention::POINTS
        .iter()
        .zip(attention_rounds)
        .map(|(&(head_dim, seq), f)| AttentionSample { head_dim, seq, flops_per_s: median(f) })
        .collect();
    let (copy_bw, add_bw, overhead) = (median(copy), median(add), median(launch));
    let shared_efficiency = (!shared.is_empty()).then(|| median(shared));
    let (peak, c, rms) = fit_curve_per_dim(&samples);
    if verbose {
        eprintln!(
            "fit: P = {:.1} GFLOP/s, c_M, c_N, c_K = {c:?}, rms log error {rms:.3}; copy {:.1} GB/s, add {:.1} GB/s; kernel {:.1} µs",
            peak / 1e9,
            copy_bw / 1e9,
            add_bw / 1e9,
            overhead * 1e6
        );
    }
    let links = calibrate_collectives();
    let measured = Measured { threads, rounds, samples, attention, peak, c, rms, copy_bw, add_bw, overhead };
    let (comment, link) = match links {
        Some(l) => ("In-process all-reduce of two ranks: α from a 1-element call, β from 16 MiB [measured].", l),
        None => (
            "The in-process all-reduce could not be timed: a condvar hand-off and a copy at half the copy bandwidth [placeholder].",
            LinkSpec { alpha_s: 20e-6, bandwidth: copy_bw / 2.0 },
        ),
    };
    let kind = ("cpu", "threads of one process", "in-process ranks");
    let text = measured.text(kind, comment, &link, shared_efficiency);
    write_checked(out, &text, force)?;
    if let Some(mpi) = mpi_links_via_mpirun(verbose) {
        let path = out
            .with_file_name(format!("{}-mpi.toml", out.file_stem().map(|s| s.to_string_lossy()).unwrap_or_default()));
        let mpi_text = measured.text(
            ("cpu-mpi", "MPI processes on this machine", "one MPI process per rank (mpirun)"),
            "MPI all-reduce between two processes: α from a 1-element call, β from 16 MiB [measured].",
            &mpi,
            None,
        );
        write_checked(&path, &mpi_text, force)?;
        if verbose {
            eprintln!(
                "links: MPI α {:.1} µs, β {:.2} GB/s (wrote {})",
                mpi.alpha_s * 1e6,
                mpi.bandwidth / 1e9,
                path.display()
            );
        }
    }
    Ok(text)
}
