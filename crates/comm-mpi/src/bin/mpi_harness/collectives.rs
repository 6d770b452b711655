//! The `collectives` scenario: every collective and tagged send/recv on world handles in the
//! default, ordered and check modes, against the in-process backend on the same inputs.

use crate::results::{Elem, Res, compare, ints, res, res_u32, values};
use anyhow::{Context, ensure};
use boost_comm::mpi::{self, MpiOptions};
use boost_comm::{CommExt, Communicator, Grid, run_ranks};
use boost_tensor::{Label, ReduceOp};

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

pub fn collectives(rank: usize, grid: Grid) -> anyhow::Result<String> {
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
