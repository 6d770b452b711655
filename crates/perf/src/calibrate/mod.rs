//! Microbenchmarks of this machine that fill a CPU hardware description: f32 GEMM throughput
//! over a set of shapes (the engine's kernels, rayon-parallel), the engine's attention by head
//! dimension and sequence, copy and elementwise bandwidth, and the fixed cost of one parallel
//! kernel.
//!
//! Fitting: with `f(x) = x / (x + c)`, the model says `GFLOP/s(M, N, K) = P · f(M)·f(N)·f(K)`.
//! For each c on a grid, the best P is the geometric mean of `measured / (f(M)f(N)f(K))`; the c
//! with the least squared log error wins. The file then has `peak_flops = P`,
//! `gemm_efficiency = 1` (P is already an achieved rate) and `gemm_half_dim = c`.
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

pub use attention::{AttentionSample, measure_attention};
pub use bandwidth::{measure_bandwidth, measure_kernel_overhead};
pub use gemm::{GemmSample, SHAPES, fit_curve, measure_gemm};
pub use links::{calibrate_collectives, calibrate_mpi_collectives};
pub use machine::{cache_dir, this_machine};

use crate::hardware::LinkSpec;
use anyhow::Result;
use file::{Measured, refuse_existing, write_checked};
use links::mpi_links_via_mpirun;
use std::path::Path;
use std::time::Instant;

/// Seconds of one `run`, in the current pool with its workers held awake as a training step
/// runs them: after a warm-up call, the best of three timed runs of enough calls to last at
/// least ~60 ms each.
fn best_seconds(mut run: impl FnMut() + Send) -> f64 {
    boost_tensor::cpu::pool::hold_pool(|| {
        run();
        let t0 = Instant::now();
        run();
        let once = t0.elapsed().as_secs_f64().max(1e-7);
        let reps = ((0.06 / once).ceil() as usize).clamp(1, 10_000);
        let mut best = f64::MAX;
        for _ in 0..3 {
            let t = Instant::now();
            for _ in 0..reps {
                run();
            }
            best = best.min(t.elapsed().as_secs_f64() / reps as f64);
        }
        best
    })
}

/// Run every microbenchmark and write a CPU hardware TOML to `out`; returns the text.
/// Every measurement is repeated `rounds` times (whole sweeps, so that a busy moment on a
/// shared machine hits one round, not all) and the best of the rounds is kept.
pub fn calibrate_cpu(out: &Path, threads: usize, rounds: usize, verbose: bool, force: bool) -> Result<String> {
    // Refuse before measuring, not after minutes of it.
    refuse_existing(out, force)?;
    let threads = if threads == 0 { rayon::current_num_threads() } else { threads };
    let rounds = rounds.max(1);
    let mut samples: Vec<GemmSample> =
        SHAPES.iter().map(|&(m, n, k)| GemmSample { m, n, k, flops_per_s: 0.0 }).collect();
    let mut attention: Vec<AttentionSample> =
        attention::POINTS.iter().map(|&(head_dim, seq)| AttentionSample { head_dim, seq, flops_per_s: 0.0 }).collect();
    let (mut copy_bw, mut add_bw, mut overhead) = (0.0f64, 0.0f64, f64::MAX);
    // Every measurement runs on one pool of `threads` workers, made once.
    let mut sweep = || {
        for round in 0..rounds {
            for s in samples.iter_mut() {
                let r = measure_gemm(s.m, s.n, s.k);
                if verbose {
                    eprintln!("round {round}: gemm {:>5} × {:>5} × {:>5}: {:7.1} GFLOP/s", s.m, s.n, s.k, r / 1e9);
                }
                s.flops_per_s = s.flops_per_s.max(r);
            }
            for a in attention.iter_mut() {
                let r = measure_attention(a.head_dim, a.seq);
                if verbose {
                    eprintln!(
                        "round {round}: attention head_dim {:>3} seq {:>5}: {:7.1} GFLOP/s",
                        a.head_dim,
                        a.seq,
                        r / 1e9
                    );
                }
                a.flops_per_s = a.flops_per_s.max(r);
            }
            let (c, a) = measure_bandwidth();
            copy_bw = copy_bw.max(c);
            add_bw = add_bw.max(a);
            overhead = overhead.min(measure_kernel_overhead());
        }
    };
    if threads == rayon::current_num_threads() {
        sweep();
    } else {
        rayon::ThreadPoolBuilder::new().num_threads(threads).build()?.install(sweep);
    }
    let (peak, c, rms) = fit_curve(&samples);
    if verbose {
        eprintln!(
            "fit: P = {:.1} GFLOP/s, c = {c:.1}, rms log error {rms:.3}; copy {:.1} GB/s, add {:.1} GB/s; kernel {:.1} µs",
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
    let text = measured.text("cpu", "threads of one process", "in-process ranks", comment, &link);
    write_checked(out, &text, force)?;
    if let Some(mpi) = mpi_links_via_mpirun(verbose) {
        let path = out
            .with_file_name(format!("{}-mpi.toml", out.file_stem().map(|s| s.to_string_lossy()).unwrap_or_default()));
        let mpi_text = measured.text(
            "cpu-mpi",
            "MPI processes on this machine",
            "one MPI process per rank (mpirun)",
            "MPI all-reduce between two processes: α from a 1-element call, β from 16 MiB [measured].",
            &mpi,
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
