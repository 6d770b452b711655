//! Scenarios for the MPI backend's tests, one process per rank:
//! `mpirun -np N boost-comm-mpi-harness <scenario>` (see `tests/mpi.rs`).
//!
//! * `collectives`: every collective and tagged send/recv on world handles in the default,
//!   ordered and check modes, compared with the in-process backend run in this process on the
//!   same inputs (bit-identical in ordered mode; sums within a rounding bound otherwise).
//! * `grid`: the (dp, pp, tp) grid of the world size (`BOOST_TEST_DIMS=dp,pp,tp`): groups,
//!   placement, the `Collective` adapter, pipeline send/recv and the recorder.
//! * `mismatch`, `recv_mismatch`, `error`, `panic`, `exit`, `stall`, `recv_stall`: failures the
//!   tests expect to end the job with a message.
//!
//! Each rank that finishes prints `ok <scenario> rank <r> of <p>: …` on stdout.

use anyhow::{Context, bail, ensure};
use boost_comm::mpi::{self, MpiOptions};
use boost_comm::{CommElem, CommExt, Communicator, Dims, Grid, GridOptions, Kind, run_ranks};
use boost_tensor::cpu::Cpu;
use boost_tensor::{Collective, Label, ReduceOp};
use std::time::Duration;

/// Deterministic inputs: xorshift64* values of widely spread magnitudes, so that the order
/// of a float sum changes its rounding.
fn values(seed: u64, rank: usize, n: usize) -> Vec<f64> {
    let mut x = (seed * 1000 + rank as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut next = move || {
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    };
    (0..n)
        .map(|_| {
            let u = (next() >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0;
            u * 10f64.powi((next() % 9) as i32 - 2)
        })
        .collect()
}

fn ints(seed: u64, rank: usize, n: usize) -> Vec<u32> {
    (0..n)
        .map(|i| (seed as u32 ^ 0x9e37_79b9).wrapping_mul(rank as u32 * 7 + 3).wrapping_add(i as u32 * 2_654_435_761))
        .collect()
}

/// One result of the script.
struct Res {
    name: String,
    /// Bits of every element (f32 and u32 widened).
    bits: Vec<u64>,
    vals: Vec<f64>,
    /// For float sums: Σ_k |x_k| per element and the unit roundoff, bounding the effect of
    /// the summation order.
    bound: Option<(Vec<f64>, f64)>,
}

trait Elem: CommElem {
    fn of(x: f64) -> Self;
    fn bits(self) -> u64;
    fn val(self) -> f64;
    const EPS: f64;
}

impl Elem for f32 {
    fn of(x: f64) -> Self {
        x as f32
    }
    fn bits(self) -> u64 {
        self.to_bits() as u64
    }
    fn val(self) -> f64 {
        self as f64
    }
    const EPS: f64 = f32::EPSILON as f64;
}

impl Elem for f64 {
    fn of(x: f64) -> Self {
        x
    }
    fn bits(self) -> u64 {
        self.to_bits()
    }
    fn val(self) -> f64 {
        self
    }
    const EPS: f64 = f64::EPSILON;
}

fn res<T: Elem>(name: String, v: &[T], bound: Option<(Vec<f64>, f64)>) -> Res {
    Res { name, bits: v.iter().map(|x| x.bits()).collect(), vals: v.iter().map(|x| x.val()).collect(), bound }
}

fn res_u32(name: String, v: &[u32]) -> Res {
    Res { name, bits: v.iter().map(|&x| x as u64).collect(), vals: v.iter().map(|&x| x as f64).collect(), bound: None }
}

/// Every rank of `c` holds the same bits in `x`.
fn same_everywhere<T: Elem>(c: &dyn Communicator, x: &[T]) -> anyhow::Result<()> {
    let h = x.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, v| (h ^ v.bits()).wrapping_mul(0x0100_0000_01b3));
    let mut all = vec![0u64; 2 * c.size()];
    all[2 * c.rank()] = h & 0xffff_ffff;
    all[2 * c.rank() + 1] = h >> 32;
    let mut all32: Vec<u32> = all.iter().map(|&w| w as u32).collect();
    c.all_gather_slice(&mut all32, Label::op("hash"))?;
    ensure!(all32.chunks(2).all(|w| w == &all32[..2]), "ranks hold different all_reduce results: {all32:?}");
    Ok(())
}

fn float_ops<T: Elem>(c: &dyn Communicator, n: usize, seed: u64, out: &mut Vec<Res>) -> anyhow::Result<()> {
    let (me, p) = (c.rank(), c.size());
    let dt = T::DTYPE;
    let input = |r: usize, len: usize| values(seed, r, len).into_iter().map(T::of).collect::<Vec<T>>();
    let abs_sum = |len: usize| {
        let mut s = vec![0.0f64; len];
        for r in 0..p {
            s.iter_mut().zip(input(r, len)).for_each(|(a, x)| *a += x.val().abs());
        }
        s
    };

    let mut x = input(me, n);
    c.all_reduce_slice(&mut x, ReduceOp::Sum, Label::layer("sum", n))?;
    same_everywhere(c, &x)?;
    out.push(res(format!("all_reduce sum {dt} n={n}"), &x, Some((abs_sum(n), T::EPS))));

    let mut x = input(me, n);
    if me == 1 && n > 3 {
        x[3] = T::of(f64::NAN);
    }
    c.all_reduce_slice(&mut x, ReduceOp::Max, Label::layer("max", n))?;
    out.push(res(format!("all_reduce max {dt} n={n}"), &x, None));

    let mut x = input(me, p * n);
    c.reduce_scatter_slice(&mut x, Label::layer("rs", n))?;
    let b = abs_sum(p * n)[me * n..(me + 1) * n].to_vec();
    out.push(res(format!("reduce_scatter {dt} n={n}"), &x[me * n..(me + 1) * n], Some((b, T::EPS))));

    let mut x = vec![T::default(); p * n];
    x[me * n..(me + 1) * n].copy_from_slice(&input(me, n));
    c.all_gather_slice(&mut x, Label::layer("ag", n))?;
    out.push(res(format!("all_gather {dt} n={n}"), &x, None));

    let root = n % p;
    let mut x = if me == root { input(me, n) } else { vec![T::default(); n] };
    c.broadcast_slice(&mut x, root, Label::layer("bc", n))?;
    out.push(res(format!("broadcast {dt} n={n} root {root}"), &x, None));
    Ok(())
}

fn u32_ops(c: &dyn Communicator, n: usize, seed: u64, out: &mut Vec<Res>) -> anyhow::Result<()> {
    let (me, p) = (c.rank(), c.size());
    for op in [ReduceOp::Sum, ReduceOp::Max] {
        let mut x = ints(seed, me, n);
        c.all_reduce_slice(&mut x, op, Label::layer("u", n))?;
        out.push(res_u32(format!("all_reduce {op:?} u32 n={n}"), &x));
    }
    let mut x = ints(seed, me, p * n);
    c.reduce_scatter_slice(&mut x, Label::layer("u_rs", n))?;
    out.push(res_u32(format!("reduce_scatter u32 n={n}"), &x[me * n..(me + 1) * n]));
    let mut x = vec![0u32; p * n];
    x[me * n..(me + 1) * n].copy_from_slice(&ints(seed, me, n));
    c.all_gather_slice(&mut x, Label::layer("u_ag", n))?;
    out.push(res_u32(format!("all_gather u32 n={n}"), &x));
    Ok(())
}

/// Tagged point-to-point: a ring of large messages (each rank sends before it receives),
/// messages taken out of tag order, and a message to itself.
fn p2p(c: &dyn Communicator, out: &mut Vec<Res>) -> anyhow::Result<()> {
    let (me, p) = (c.rank(), c.size());
    let (next, prev) = ((me + 1) % p, (me + p - 1) % p);
    let big: Vec<f32> = values(77, me, 200_000).into_iter().map(|x| x as f32).collect();
    c.send_slice(&big, next, 11, Label::op("act"))?;
    c.send_slice(&[me as u32; 5], next, 1, Label::op("first"))?;
    c.send_slice(&[me as u32 + 100; 6], next, 2, Label::op("second"))?;
    let mut second = [0u32; 6];
    c.recv_slice(&mut second, prev, 2, Label::op("second"))?;
    let mut first = [0u32; 5];
    c.recv_slice(&mut first, prev, 1, Label::op("first"))?;
    let mut got = vec![0.0f32; 200_000];
    c.recv_slice(&mut got, prev, 11, Label::op("act"))?;
    ensure!(first == [prev as u32; 5] && second == [prev as u32 + 100; 6], "tags mixed up: {first:?} {second:?}");
    let want: Vec<f32> = values(77, prev, 200_000).into_iter().map(|x| x as f32).collect();
    ensure!(got.iter().zip(&want).all(|(a, b)| a.to_bits() == b.to_bits()), "ring payload differs");
    c.send_slice(&[2.5f64, -1.0], me, 7, Label::op("self"))?;
    let mut own = [0.0f64; 2];
    c.recv_slice(&mut own, me, 7, Label::op("self"))?;
    ensure!(own == [2.5, -1.0], "self message {own:?}");
    out.push(res(format!("ring from {prev}"), &got[..16], None));
    Ok(())
}

fn script(c: &dyn Communicator) -> anyhow::Result<Vec<Res>> {
    let mut out = Vec::new();
    for (i, n) in [0usize, 1, 7, 33, 1000, 50_001].into_iter().enumerate() {
        let seed = 10 + i as u64;
        float_ops::<f32>(c, n, seed, &mut out)?;
        float_ops::<f64>(c, n, seed, &mut out)?;
        u32_ops(c, n, seed, &mut out)?;
    }
    c.barrier(Label::op("mid"))?;
    p2p(c, &mut out)?;
    c.barrier(Label::op("end"))?;
    Ok(out)
}

/// Compare MPI results with the in-process ones: bit-identical when `exact`, else sums within
/// 2·(p−1)·u·Σ|x| (each order's error is at most (p−1)·u·Σ|x|, u = ε/2) and the rest
/// bit-identical. Returns how many elements differ in their bits.
fn compare(mode: &str, mpi: &[Res], reference: &[Res], p: usize, exact: bool) -> anyhow::Result<usize> {
    ensure!(mpi.len() == reference.len(), "{mode}: {} results, in-process {}", mpi.len(), reference.len());
    let mut differ = 0;
    for (m, r) in mpi.iter().zip(reference) {
        ensure!(m.name == r.name && m.bits.len() == r.bits.len(), "{mode}: {} vs {}", m.name, r.name);
        for i in 0..m.bits.len() {
            if m.bits[i] == r.bits[i] {
                continue;
            }
            differ += 1;
            let tol = match (&m.bound, exact) {
                (Some((abs, eps)), false) => (p - 1) as f64 * eps * abs[i],
                _ => bail!(
                    "{mode}: {} element {i}: {} (MPI) but {} (in-process), bits differ",
                    m.name,
                    m.vals[i],
                    r.vals[i]
                ),
            };
            let d = (m.vals[i] - r.vals[i]).abs();
            ensure!(
                d <= tol,
                "{mode}: {} element {i}: {} (MPI) vs {} (in-process) differ by {d:e} > {tol:e}",
                m.name,
                m.vals[i],
                r.vals[i]
            );
        }
    }
    Ok(differ)
}

fn collectives(rank: usize, grid: Grid) -> anyhow::Result<String> {
    let p = grid.dims.world();
    let reference = run_ranks(p, |_, g| script(&**g.world.comm()))?.swap_remove(rank);
    let env = MpiOptions::from_env();
    let mut report = Vec::new();
    for (mode, opts) in [
        ("default", env.ordered(false).check(false)),
        ("ordered", env.ordered(true).check(false)),
        ("checked", env.ordered(false).check(true)),
    ] {
        let world = mpi::mpi_world_with(opts)?.context("launched by mpirun")?;
        let got = script(&*world)?;
        let exact = opts.ordered || p <= 2;
        let differ = compare(mode, &got, &reference, p, exact)?;
        report.push(format!(
            "{mode}: {differ} of {} elements differ in bits",
            got.iter().map(|r| r.bits.len()).sum::<usize>()
        ));
    }
    // The grid's own world handle too (options from the environment).
    let got = script(&**grid.world.comm())?;
    compare("grid world", &got, &reference, p, env.ordered || p <= 2)?;
    Ok(report.join("; "))
}

fn grid_scenario(rank: usize, grid: Grid) -> anyhow::Result<String> {
    let dims = grid.dims;
    ensure!(grid.rank == rank && grid.coord == dims.coord(rank), "coordinate of rank {rank}");
    for (g, want) in
        [(&grid.tp, dims.tp_members(rank)), (&grid.pp, dims.pp_members(rank)), (&grid.dp, dims.dp_members(rank))]
    {
        let mut ids = vec![0u32; g.size()];
        ids[g.rank()] = rank as u32;
        g.all_gather_slice(&mut ids, Label::op("ids"))?;
        let ids: Vec<usize> = ids.into_iter().map(|x| x as usize).collect();
        ensure!(ids == want, "{} group of rank {rank}: {ids:?}, expected {want:?}", g.name());
    }
    // Model code sees the groups as `Collective`s.
    let tp: &dyn Collective<Cpu<f32>> = &grid.tp;
    let mut x = vec![0.0f32, (rank + 1) as f32, 0.0];
    tp.all_reduce(&mut x, 1, 1, ReduceOp::Sum, Label::layer("attn.o", 0));
    let want: f32 = dims.tp_members(rank).iter().map(|&r| (r + 1) as f32).sum();
    ensure!(x == [0.0, want, 0.0], "tp all_reduce {x:?}");
    // A pipeline step: activations forward, gradients back (tag 0 through the adapter).
    let pp: &dyn Collective<Cpu<f32>> = &grid.pp;
    let mut act = vec![0.0f32; 64];
    if let Some(prev) = grid.prev_stage() {
        pp.recv(&mut act, 0, 64, prev, Label::layer("pp.act", 0));
        ensure!(act.iter().all(|&a| a == (rank - dims.tp) as f32), "activation from the previous stage");
    }
    act.iter_mut().for_each(|a| *a = rank as f32);
    if let Some(next) = grid.next_stage() {
        pp.send(&act, 0, 64, next, Label::layer("pp.act", 0));
        let mut g = vec![0.0f32; 64];
        pp.recv(&mut g, 0, 64, next, Label::layer("pp.grad", 0));
        ensure!(g.iter().all(|&v| v == -((rank + dims.tp) as f32)), "gradient from the next stage");
    }
    if let Some(prev) = grid.prev_stage() {
        pp.send(&vec![-(rank as f32); 64], 0, 64, prev, Label::layer("pp.grad", 0));
    }
    let dp: &dyn Collective<Cpu<f64>> = &grid.dp;
    let mut y = vec![rank as f64; 4];
    dp.all_reduce(&mut y, 0, 4, ReduceOp::Max, Label::op("dp.grads"));
    let mut w = vec![if rank == 0 { 42.0f64 } else { 0.0 }; 3];
    grid.world.broadcast_slice(&mut w, 0, Label::op("params"))?;
    ensure!(w == [42.0; 3], "broadcast {w:?}");
    let snap = grid.recorder().context("recorder")?.snapshot();
    ensure!(
        snap.kind(Kind::AllReduce).calls == 1 && snap.kind(Kind::Broadcast).calls == 1,
        "recorded {:?}",
        snap.totals
    );
    Ok(format!(
        "coord (dp {}, pp {}, tp {}); tp {:?}, pp {:?}, dp {:?}; {} calls recorded",
        grid.coord.dp,
        grid.coord.pp,
        grid.coord.tp,
        dims.tp_members(rank),
        dims.pp_members(rank),
        dims.dp_members(rank),
        snap.calls()
    ))
}

/// Time per call of small and large all-reduces and of a small send/recv ping-pong (not a
/// test: prints the numbers).
fn latency(grid: Grid) -> anyhow::Result<String> {
    let w = grid.world.comm();
    let mut out = Vec::new();
    for (n, reps) in [(64usize, 2000usize), (1 << 20, 20)] {
        let mut x = vec![1.0f32; n];
        w.barrier(Label::op("sync"))?;
        let t = std::time::Instant::now();
        for _ in 0..reps {
            w.all_reduce_slice(&mut x, ReduceOp::Sum, Label::op("lat"))?;
        }
        out.push(format!("all_reduce f32 × {n}: {:.1} µs", t.elapsed().as_secs_f64() * 1e6 / reps as f64));
    }
    {
        use ::mpi::collective::SystemOperation;
        use ::mpi::traits::*;
        let world = ::mpi::topology::SimpleCommunicator::world();
        for (n, reps) in [(64usize, 2000usize), (1 << 20, 20)] {
            let x = vec![1.0f32; n];
            let mut y = vec![0.0f32; n];
            world.barrier();
            let t = std::time::Instant::now();
            for _ in 0..reps {
                world.all_reduce_into(&x[..], &mut y[..], SystemOperation::sum());
            }
            out.push(format!(
                "blocking MPI_Allreduce f32 × {n}: {:.1} µs",
                t.elapsed().as_secs_f64() * 1e6 / reps as f64
            ));
        }
    }
    let (me, p) = (w.rank(), w.size());
    if p >= 2 && me < 2 {
        let mut x = [0.0f32; 16];
        let t = std::time::Instant::now();
        for _ in 0..1000 {
            if me == 0 {
                w.send_slice(&x, 1, 0, Label::op("ping"))?;
                w.recv_slice(&mut x, 1, 0, Label::op("pong"))?;
            } else {
                w.recv_slice(&mut x, 0, 0, Label::op("ping"))?;
                w.send_slice(&x, 0, 0, Label::op("pong"))?;
            }
        }
        out.push(format!("ping-pong: {:.1} µs per round trip", t.elapsed().as_secs_f64() * 1e6 / 1000.0));
    }
    w.barrier(Label::op("end"))?;
    Ok(out.join("; "))
}

fn failure_scenario(name: &str, rank: usize, grid: Grid) -> anyhow::Result<String> {
    let w = &grid.world;
    let mut x = vec![1.0f32; 8];
    w.all_reduce_slice(&mut x, ReduceOp::Sum, Label::layer("attn.qkv.A", 0))?;
    match name {
        "mismatch" => {
            let mut y = vec![0.0f32; 8 + (rank == 1) as usize];
            w.all_reduce_slice(&mut y, ReduceOp::Sum, Label::layer("attn.o.A", 0))?;
        }
        "recv_mismatch" => {
            if rank == 0 {
                w.send_slice(&[1.0f32; 8], 1, 3, Label::op("act"))?;
            } else if rank == 1 {
                let mut b = [0.0f64; 8];
                w.recv_slice(&mut b, 0, 3, Label::op("act"))?;
            }
            w.barrier_checked(Label::op("end"))?;
        }
        "error" => {
            if rank == 1 {
                bail!("boom: bad batch");
            }
            w.all_reduce_slice(&mut x, ReduceOp::Sum, Label::layer("attn.qkv.A", 1))?;
        }
        "panic" => {
            if rank == 1 {
                panic!("kernel exploded");
            }
            let tp: &dyn Collective<Cpu<f32>> = &grid.tp;
            tp.all_reduce(&mut x, 0, 8, ReduceOp::Sum, Label::layer("attn.qkv.A", 1));
        }
        "exit" => {
            if rank == 2 {
                std::process::exit(std::env::var("BOOST_TEST_EXIT_CODE").map_or(Ok(3), |v| v.parse())?);
            }
            w.all_reduce_slice(&mut x, ReduceOp::Sum, Label::layer("attn.qkv.A", 1))?;
        }
        "stall" => {
            if rank == 2 {
                std::thread::sleep(Duration::from_secs(30));
            }
            w.all_reduce_slice(&mut x, ReduceOp::Sum, Label::layer("mlp.down.A", 3))?;
        }
        "recv_stall" => {
            if rank == 0 {
                w.send_slice(&[1.0f32; 3], 1, 1, Label::op("act"))?;
                std::thread::sleep(Duration::from_secs(30));
            } else if rank == 1 {
                let mut b = [0.0f32; 3];
                w.recv_slice(&mut b, 0, 2, Label::op("grad"))?;
            }
        }
        other => bail!("unknown scenario {other}"),
    }
    w.barrier_checked(Label::op("end"))?;
    Ok("finished".into())
}

fn dims_from_env(p: usize) -> anyhow::Result<Dims> {
    let Ok(s) = std::env::var("BOOST_TEST_DIMS") else {
        return Ok(Dims::tp(p));
    };
    let v: Vec<usize> = s.split(',').map(|x| x.trim().parse()).collect::<Result<_, _>>()?;
    ensure!(v.len() == 3, "BOOST_TEST_DIMS={s}: expected dp,pp,tp");
    Ok(Dims::new(v[0], v[1], v[2]))
}

fn main() -> anyhow::Result<()> {
    let scenario = std::env::args().nth(1).context("usage: boost-comm-mpi-harness <scenario>")?;
    ensure!(mpi::launched(), "run me with mpirun");
    let p: usize = std::env::var("OMPI_COMM_WORLD_SIZE").or_else(|_| std::env::var("PMI_SIZE"))?.parse()?;
    let dims = dims_from_env(p)?;
    let grid_opts = GridOptions::default().record(scenario == "grid");
    let opts = MpiOptions::from_env();
    let name = scenario.clone();
    let (rank, info) = mpi::run_mpi_with(dims, &grid_opts, opts, move |rank, grid| {
        let info = match name.as_str() {
            "collectives" => collectives(rank, grid)?,
            "grid" => grid_scenario(rank, grid)?,
            "latency" => latency(grid)?,
            other => failure_scenario(other, rank, grid)?,
        };
        Ok((rank, info))
    })?;
    println!("ok {scenario} rank {rank} of {p}: {info}");
    Ok(())
}
