//! Microbenchmarks of this machine that fill a CPU hardware description: f32 GEMM throughput
//! over a set of shapes (the `gemm` crate, rayon-parallel), copy and elementwise bandwidth, and
//! the fixed cost of one parallel kernel.
//!
//! Fitting: with `f(x) = x / (x + c)`, the model says `GFLOP/s(M, N, K) = P · f(M)·f(N)·f(K)`.
//! For each c on a grid, the best P is the geometric mean of `measured / (f(M)f(N)f(K))`; the c
//! with the least squared log error wins. The file then has `peak_flops = P`,
//! `gemm_efficiency = 1` (P is already an achieved rate) and `gemm_half_dim = c`.
//!
//! Collectives: [`calibrate_collectives`] times the in-process all-reduce of two ranks and
//! fits α and β; [`calibrate_mpi_collectives`] does the same between two MPI processes (run
//! by `--calibrate-cpu` through `mpirun -np 2` when the build has MPI), for a second file.

use crate::hardware::LinkSpec;
use anyhow::{Context, Result};
use rayon::prelude::*;
use std::fmt::Write as _;
use std::path::Path;
use std::time::Instant;

/// GEMM shapes (M, N, K) measured: large squares for the peak, one small dimension at a time
/// for the curve, and the shapes of the cola-60m and 1b layers at a few thousand tokens.
pub const SHAPES: &[(usize, usize, usize)] = &[
    (1024, 1024, 1024),
    (2048, 1024, 1024),
    (2048, 2048, 512),
    (2048, 1024, 16),
    (2048, 1024, 32),
    (2048, 1024, 64),
    (2048, 1024, 128),
    (2048, 1024, 256),
    (2048, 16, 1024),
    (2048, 32, 1024),
    (2048, 64, 1024),
    (2048, 128, 1024),
    (2048, 256, 1024),
    (32, 1024, 1024),
    (64, 1024, 1024),
    (128, 1024, 1024),
    (256, 1024, 1024),
    (2048, 384, 512),
    (2048, 512, 128),
    (2048, 1376, 128),
    (2048, 128, 1376),
    (2048, 1536, 2048),
    (2048, 512, 2048),
    (2048, 2048, 512),
    (512, 128, 2048),
];

#[derive(Debug, Clone)]
pub struct GemmSample {
    pub m: usize,
    pub n: usize,
    pub k: usize,
    pub flops_per_s: f64,
}

/// Measure one f32 GEMM `(m×k)·(k×n)` (row-major), best of a few timed runs.
pub fn measure_gemm(m: usize, n: usize, k: usize, threads: usize) -> f64 {
    let lhs: Vec<f32> = (0..m * k).map(|i| ((i % 97) as f32 - 48.0) * 0.01).collect();
    let rhs: Vec<f32> = (0..k * n).map(|i| ((i % 89) as f32 - 44.0) * 0.01).collect();
    let mut dst = vec![0f32; m * n];
    let flops = 2.0 * (m * n * k) as f64;
    let run = |dst: &mut [f32]| {
        // SAFETY: the three buffers are distinct, row-major, and sized m×k, k×n, m×n.
        unsafe {
            gemm::gemm(
                m,
                n,
                k,
                dst.as_mut_ptr(),
                1,
                n as isize,
                false,
                lhs.as_ptr(),
                1,
                k as isize,
                rhs.as_ptr(),
                1,
                n as isize,
                0.0f32,
                1.0f32,
                false,
                false,
                false,
                gemm::Parallelism::Rayon(threads),
            )
        }
    };
    run(&mut dst);
    // Repeat to at least ~60 ms per timed run.
    let t0 = Instant::now();
    run(&mut dst);
    let once = t0.elapsed().as_secs_f64().max(1e-7);
    let reps = ((0.06 / once).ceil() as usize).clamp(1, 10_000);
    let mut best = f64::MAX;
    for _ in 0..3 {
        let t = Instant::now();
        for _ in 0..reps {
            run(&mut dst);
        }
        best = best.min(t.elapsed().as_secs_f64() / reps as f64);
    }
    std::hint::black_box(&dst);
    flops / best
}

/// Fit (P, c) of `P · Π x/(x+c)` to the samples; returns (P, c, rms log error).
pub fn fit_curve(samples: &[GemmSample]) -> (f64, f64, f64) {
    let f = |x: usize, c: f64| x as f64 / (x as f64 + c);
    let eval = |c: f64| {
        let logs: Vec<f64> =
            samples.iter().map(|s| s.flops_per_s.ln() - (f(s.m, c) * f(s.n, c) * f(s.k, c)).ln()).collect();
        let lp = logs.iter().sum::<f64>() / logs.len() as f64;
        let err = logs.iter().map(|l| (l - lp).powi(2)).sum::<f64>() / logs.len() as f64;
        (lp.exp(), err.sqrt())
    };
    let mut best = (0.0, f64::MAX, 0.0);
    let mut c = 0.0;
    while c <= 1024.0 {
        let (p, e) = eval(c);
        if e < best.1 {
            best = (c, e, p);
        }
        c += if c < 64.0 { 0.5 } else { 4.0 };
    }
    (best.2, best.0, best.1)
}

/// Bytes per second of a parallel copy (read + write counted) and of `a = b + c`
/// (two reads, one write), on 64 MiB buffers.
pub fn measure_bandwidth() -> (f64, f64) {
    let n = 16 << 20;
    let src = vec![1.0f32; n];
    let src2 = vec![2.0f32; n];
    let mut dst = vec![0.0f32; n];
    let chunk = 1 << 16;
    let time = |f: &mut dyn FnMut()| {
        f();
        let mut best = f64::MAX;
        for _ in 0..5 {
            let t = Instant::now();
            f();
            best = best.min(t.elapsed().as_secs_f64());
        }
        best
    };
    let copy = time(&mut || {
        dst.par_chunks_mut(chunk).zip(src.par_chunks(chunk)).for_each(|(d, s)| d.copy_from_slice(s));
    });
    let add = time(&mut || {
        dst.par_chunks_mut(chunk).zip(src.par_chunks(chunk)).zip(src2.par_chunks(chunk)).for_each(|((d, a), b)| {
            for ((x, y), z) in d.iter_mut().zip(a).zip(b) {
                *x = y + z;
            }
        });
    });
    std::hint::black_box(&dst);
    let bytes = (n * 4) as f64;
    (2.0 * bytes / copy, 3.0 * bytes / add)
}

/// The fixed cost of launching one small rayon-parallel kernel.
pub fn measure_kernel_overhead() -> f64 {
    let mut v = vec![0f32; 1024];
    let reps = 2000;
    let t = Instant::now();
    for i in 0..reps {
        v.par_chunks_mut(256).for_each(|c| c[0] += i as f32);
    }
    std::hint::black_box(&v);
    t.elapsed().as_secs_f64() / reps as f64
}

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
/// [`fit_link`]). Each size is the median of 30 (10) calls after a warm-up.
pub fn calibrate_collectives() -> Option<LinkSpec> {
    use boost_comm::{Dims, run_ranks};
    let times = run_ranks(Dims::tp(2), |_, grid| all_reduce_times(&grid, 30)).ok()?;
    Some(fit_link(times[0]))
}

/// The same measurement between two MPI processes: call in a program started by
/// `mpirun -np 2` (every process calls it; rank 0 gets the fit).
pub fn calibrate_mpi_collectives() -> Result<Option<LinkSpec>> {
    use boost_comm::{Dims, RunOptions, mpi};
    mpi::run_mpi(Dims::tp(2), &RunOptions::default(), |rank, grid| {
        anyhow::ensure!(grid.world.size() == 2, "measure the MPI links with mpirun -np 2");
        let link = fit_link(all_reduce_times(&grid, 30)?);
        Ok((rank == 0).then_some(link))
    })
}

/// Run `mpirun -np 2 <this program> plan --measure-mpi-links` and read its fit; None (with
/// the reason on stderr when `verbose`) without the `mpi` feature, without `mpirun`, or when
/// the launch fails.
fn mpi_links_via_mpirun(verbose: bool) -> Option<LinkSpec> {
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

/// The `[intra_node]` and `[inter_node]` sections of a one-machine description.
fn links_toml(comment: &str, l: &LinkSpec) -> String {
    let mut o = String::new();
    let _ = writeln!(o, "# {comment}");
    let _ = writeln!(o, "[intra_node]\nalpha_s = {:.3e}\nbandwidth = {:.4e}\n", l.alpha_s, l.bandwidth);
    let _ = writeln!(o, "[inter_node]\nalpha_s = {:.3e}\nbandwidth = {:.4e}\n", l.alpha_s, l.bandwidth);
    o
}

/// Run every microbenchmark and write a CPU hardware TOML to `out`; returns the text.
/// Every measurement is repeated `rounds` times (whole sweeps, so that a busy moment on a
/// shared machine hits one round, not all) and the best of the rounds is kept.
pub fn calibrate_cpu(out: &Path, threads: usize, rounds: usize, verbose: bool) -> Result<String> {
    let threads = if threads == 0 { rayon::current_num_threads() } else { threads };
    let rounds = rounds.max(1);
    let mut samples: Vec<GemmSample> =
        SHAPES.iter().map(|&(m, n, k)| GemmSample { m, n, k, flops_per_s: 0.0 }).collect();
    let (mut copy_bw, mut add_bw, mut overhead) = (0.0f64, 0.0f64, f64::MAX);
    for round in 0..rounds {
        for s in samples.iter_mut() {
            let r = measure_gemm(s.m, s.n, s.k, threads);
            if verbose {
                eprintln!("round {round}: gemm {:>5} × {:>5} × {:>5}: {:7.1} GFLOP/s", s.m, s.n, s.k, r / 1e9);
            }
            s.flops_per_s = s.flops_per_s.max(r);
        }
        let (c, a) = measure_bandwidth();
        copy_bw = copy_bw.max(c);
        add_bw = add_bw.max(a);
        overhead = overhead.min(measure_kernel_overhead());
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
    let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    let mem = memory_total_bytes().unwrap_or(24.0 * (1u64 << 30) as f64);
    // The two files differ in their name, in how ranks talk and in their links.
    let intro = |name: &str, ranks: &str, kind: &str| -> String {
        let mut o = String::new();
        let _ = writeln!(
            o,
            "# This machine, measured by `boost plan --calibrate-cpu` ({cores} cores, {threads} threads, f32, best of {rounds} rounds)."
        );
        let _ = writeln!(o, "# Ranks are {ranks} sharing the cores: each gets 1/world of compute and bandwidth.");
        let _ = writeln!(
            o,
            "# GEMM: the `gemm` crate (f32, Parallelism::Rayon({threads})) over {} shapes, fitted to",
            samples.len()
        );
        let _ = writeln!(o, "#   P · Π x/(x+c); rms log error {rms:.3}. Measured samples are in [calibration].");
        let _ = writeln!(o, "name = \"{name}\"");
        let _ = writeln!(o, "description = \"this machine: {cores} cores, f32 via the gemm crate, {kind}\"");
        let _ = writeln!(o, "dtype = \"f32\"");
        let _ = writeln!(o, "devices_per_node = 1024              # in-process ranks: one \"node\"");
        let _ = writeln!(o, "memory_bytes = {mem:.0}              # /proc/meminfo MemTotal [measured]");
        let _ = writeln!(
            o,
            "usable_memory_fraction = 0.8         # leave room for the OS and other processes [assumption]"
        );
        let _ = writeln!(o, "ranks_share_device = true");
        let _ = writeln!(o);
        o
    };
    let mut o = String::new();
    let _ = writeln!(o, "[compute]");
    let _ = writeln!(o, "peak_flops = {peak:.4e}             # fitted P [measured]");
    let _ = writeln!(o, "gemm_efficiency = 1.0                # P is already an achieved rate");
    let _ = writeln!(o, "gemm_half_dim = {c:.1}                # fitted c [measured]");
    let _ = writeln!(
        o,
        "attention_efficiency = 0.5           # not measured: the engine's attention kernel is timed by `boost bench` [assumption]"
    );
    let _ = writeln!(o, "kernel_overhead_s = {overhead:.3e}    # one small rayon-parallel kernel [measured]");
    let _ = writeln!(o);
    let _ = writeln!(o, "[memory]");
    let _ =
        writeln!(o, "bandwidth = {add_bw:.4e}              # a = b + c over 64 MiB, bytes read + written [measured]");
    let _ = writeln!(o, "efficiency = 1.0                     # the bandwidth above is already achieved");
    let _ = writeln!(o);
    let body = o;
    let mut o = String::new();
    let _ = writeln!(o, "[calibration]");
    let _ = writeln!(o, "threads = {threads}");
    let _ = writeln!(o, "copy_bandwidth = {copy_bw:.4e}");
    let _ = writeln!(o, "elementwise_bandwidth = {add_bw:.4e}");
    let _ = writeln!(o, "fit_rms_log_error = {rms:.4}");
    let _ = writeln!(o, "# [m, n, k, measured GFLOP/s, fitted GFLOP/s]");
    let _ = writeln!(o, "gemm = [");
    let f = |x: usize| x as f64 / (x as f64 + c);
    for s in &samples {
        let _ = writeln!(
            o,
            "  [{}, {}, {}, {:.1}, {:.1}],",
            s.m,
            s.n,
            s.k,
            s.flops_per_s / 1e9,
            peak * f(s.m) * f(s.n) * f(s.k) / 1e9
        );
    }
    let _ = writeln!(o, "]");
    let tail = o;
    let (comment, link) = match links {
        Some(l) => ("In-process all-reduce of two ranks: α from a 1-element call, β from 16 MiB [measured].", l),
        None => (
            "The in-process all-reduce could not be timed: a condvar hand-off and a copy at half the copy bandwidth [placeholder].",
            LinkSpec { alpha_s: 20e-6, bandwidth: copy_bw / 2.0 },
        ),
    };
    let text = format!(
        "{}{body}{}{tail}",
        intro("cpu", "threads of one process", "in-process ranks"),
        links_toml(comment, &link)
    );
    write_checked(out, &text)?;
    if let Some(mpi) = mpi_links_via_mpirun(verbose) {
        let path = out
            .with_file_name(format!("{}-mpi.toml", out.file_stem().map(|s| s.to_string_lossy()).unwrap_or_default()));
        let mpi_text = format!(
            "{}{body}{}{tail}",
            intro("cpu-mpi", "MPI processes on this machine", "one MPI process per rank (mpirun)"),
            links_toml(
                "MPI all-reduce between two processes: α from a 1-element call, β from 16 MiB [measured].",
                &mpi
            )
        );
        write_checked(&path, &mpi_text)?;
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

fn write_checked(path: &Path, text: &str) -> Result<()> {
    crate::hardware::Hardware::from_toml_str(text).context("the calibrated description does not parse")?;
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))
}

fn memory_total_bytes() -> Option<f64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kb: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024.0)
}
