//! Results of every collective, their determinism, point-to-point ordering and the grid.

mod common;

use boost_comm::{CommElem, CommExt, Dims, InProcess, run_ranks};
use boost_tensor::cpu::Cpu;
use boost_tensor::{Collective, Label, ReduceOp, Scalar};
use common::{Rng, jitter, run, values};
use std::time::{Duration, Instant};

const SIZES: [usize; 5] = [0, 1, 17, 100, 1031];
const PS: [usize; 5] = [1, 2, 3, 4, 8];

fn bits<T: Scalar>(v: &[T]) -> Vec<u64> {
    v.iter().map(|x| x.f64().to_bits()).collect()
}

/// Element-wise `op` over ranks in order 0..p−1, in `T` arithmetic.
fn in_order<T: Scalar + CommElem>(inputs: &[Vec<T>], op: ReduceOp) -> Vec<T> {
    let mut acc = inputs[0].clone();
    for x in &inputs[1..] {
        for (a, &b) in acc.iter_mut().zip(x) {
            *a = T::combine(*a, b, op);
        }
    }
    acc
}

fn input<T: Scalar>(seed: u64, rank: usize, n: usize) -> Vec<T> {
    values(seed, rank, n).into_iter().map(T::of).collect()
}

fn check_all_reduce<T: Scalar + CommElem>() {
    for p in PS {
        for n in SIZES {
            for op in [ReduceOp::Sum, ReduceOp::Max] {
                let seed = (p * 7919 + n) as u64;
                let inputs: Vec<Vec<T>> = (0..p).map(|r| input(seed, r, n + 3)).collect();
                let want = in_order(&inputs.iter().map(|x| x[2..2 + n].to_vec()).collect::<Vec<_>>(), op);
                let out = run(p, |rank, grid| {
                    let tp: &dyn Collective<Cpu<T>> = &grid.tp;
                    let mut buf = input::<T>(seed, rank, n + 3);
                    tp.all_reduce(&mut buf, 2, n, op, Label::layer("attn.qkv.A", 1));
                    Ok(buf)
                })
                .unwrap();
                for (rank, buf) in out.iter().enumerate() {
                    assert_eq!(bits(&buf[2..2 + n]), bits(&want), "p={p} n={n} {op:?} rank {rank}");
                    assert_eq!(bits(&buf[..2]), bits(&inputs[rank][..2]), "outside the range is untouched");
                    assert_eq!(bits(&buf[2 + n..]), bits(&inputs[rank][2 + n..]), "outside the range is untouched");
                }
            }
        }
    }
}

#[test]
fn all_reduce_f32_and_f64_match_rank_order() {
    check_all_reduce::<f32>();
    check_all_reduce::<f64>();
}

#[test]
fn sum_is_in_rank_order_not_any_other() {
    // 1e8 + 1 rounds back to 1e8 in f32 (spacing 8), so the order decides the result:
    // ((1e8 + 1) − 1e8) + 1 = 1, while e.g. (1e8 − 1e8) + 1 + 1 = 2.
    let x = [1e8f32, 1.0, -1e8, 1.0];
    let want = ((x[0] + x[1]) + x[2]) + x[3];
    assert_eq!(want, 1.0);
    let other = ((x[0] + x[2]) + x[1]) + x[3];
    assert_ne!(want.to_bits(), other.to_bits());
    let out = run(4, |rank, grid| {
        let mut buf = vec![x[rank]; 40];
        grid.tp.all_reduce_slice(&mut buf, ReduceOp::Sum, Label::op("order")).map_err(anyhow::Error::from)?;
        Ok(buf)
    })
    .unwrap();
    for buf in out {
        assert!(buf.iter().all(|v| v.to_bits() == want.to_bits()), "{buf:?}");
    }

    // Many random elements over 8 ranks: the bits equal the sequential fold, and at least
    // some of them differ from the reverse-order fold (so the check has teeth).
    let n = 4096;
    let inputs: Vec<Vec<f32>> = (0..8).map(|r| input(99, r, n)).collect();
    let want = in_order(&inputs, ReduceOp::Sum);
    let rev: Vec<Vec<f32>> = inputs.iter().rev().cloned().collect();
    let reverse = in_order(&rev, ReduceOp::Sum);
    assert!(want.iter().zip(&reverse).any(|(a, b)| a.to_bits() != b.to_bits()));
    let out = run(8, |rank, grid| {
        let mut buf = input::<f32>(99, rank, n);
        grid.tp.all_reduce_slice(&mut buf, ReduceOp::Sum, Label::op("order")).map_err(anyhow::Error::from)?;
        Ok(buf)
    })
    .unwrap();
    for buf in out {
        assert_eq!(bits(&buf), bits(&want));
    }
}

#[test]
fn max_propagates_nan_and_handles_u32() {
    let out = run(3, |rank, grid| {
        let mut f = vec![rank as f32, -(rank as f32), if rank == 1 { f32::NAN } else { 0.0 }];
        grid.tp.all_reduce_slice(&mut f, ReduceOp::Max, Label::op("max"))?;
        let mut u = vec![rank as u32 * 10, u32::MAX - 1 + (rank == 0) as u32];
        grid.tp.all_reduce_slice(&mut u, ReduceOp::Sum, Label::op("u32"))?;
        Ok((f, u))
    })
    .unwrap();
    for (f, u) in out {
        assert_eq!(f[0], 2.0);
        assert_eq!(f[1], 0.0);
        assert!(f[2].is_nan());
        assert_eq!(u[0], 30);
        assert_eq!(u[1], (u32::MAX).wrapping_add(u32::MAX - 1).wrapping_add(u32::MAX - 1));
    }
}

fn check_gather_scatter_broadcast<T: Scalar + CommElem>() {
    for p in PS {
        for n in [0usize, 1, 5, 33, 257] {
            let seed = (p * 31 + n) as u64 + 5;
            let inputs: Vec<Vec<T>> = (0..p).map(|r| input(seed, r, p * n + 1)).collect();
            let sum = in_order(&inputs, ReduceOp::Sum);
            let out = run(p, |rank, grid| {
                let c: &dyn Collective<Cpu<T>> = &grid.tp;
                // all_gather at offset 1: chunk i comes from rank i.
                let mut g = input::<T>(seed, rank, p * n + 1);
                c.all_gather(&mut g, 1, n, Label::op("gather"));
                // reduce_scatter at offset 1.
                let mut rs = input::<T>(seed, rank, p * n + 1);
                c.reduce_scatter(&mut rs, 1, n, Label::op("scatter"));
                let mine = rs[1 + rank * n..1 + (rank + 1) * n].to_vec();
                // broadcast from every root in turn.
                let mut b = Vec::new();
                for root in 0..p {
                    let mut x = input::<T>(seed + root as u64, rank, n + 1);
                    c.broadcast(&mut x, 1, n, root, Label::op("bcast"));
                    b.push(x);
                }
                Ok((g, mine, b))
            })
            .unwrap();
            for (rank, (g, mine, b)) in out.into_iter().enumerate() {
                assert_eq!(bits(&g[..1]), bits(&inputs[rank][..1]));
                for (i, src) in inputs.iter().enumerate() {
                    let chunk = 1 + i * n..1 + (i + 1) * n;
                    assert_eq!(bits(&g[chunk.clone()]), bits(&src[chunk]), "all_gather p={p} n={n} chunk {i}");
                }
                assert_eq!(bits(&mine), bits(&sum[1 + rank * n..1 + (rank + 1) * n]), "reduce_scatter p={p} n={n}");
                for (root, x) in b.iter().enumerate() {
                    let src = input::<T>(seed + root as u64, root, n + 1);
                    assert_eq!(bits(&x[1..]), bits(&src[1..]), "broadcast p={p} n={n} root {root}");
                    let own = input::<T>(seed + root as u64, rank, n + 1);
                    assert_eq!(x[0].f64().to_bits(), own[0].f64().to_bits());
                }
            }
        }
    }
}

#[test]
fn all_gather_reduce_scatter_broadcast_f32_and_f64() {
    check_gather_scatter_broadcast::<f32>();
    check_gather_scatter_broadcast::<f64>();
}

/// A mixed sequence of collectives with random sleeps between and inside ranks' steps.
fn jittered_run(run_seed: u64, p: usize) -> Vec<Vec<u64>> {
    run(p, |rank, grid| {
        let mut rng = Rng::new(run_seed * 100 + rank as u64);
        let c: &dyn Collective<Cpu<f32>> = &grid.tp;
        let mut out = Vec::new();
        for step in 0..12u64 {
            jitter(&mut rng);
            let n = 64 + 37 * step as usize;
            let mut x = input::<f32>(step, rank, p * n);
            match step % 3 {
                0 => c.all_reduce(&mut x, 0, p * n, ReduceOp::Sum, Label::layer("mix", step as usize)),
                1 => c.reduce_scatter(&mut x, 0, n, Label::layer("mix", step as usize)),
                _ => c.all_gather(&mut x, 0, n, Label::layer("mix", step as usize)),
            }
            jitter(&mut rng);
            out.extend(bits(&x));
            out.push(u64::MAX);
        }
        Ok(out)
    })
    .unwrap()
}

#[test]
fn bit_identical_across_ranks_and_runs_with_random_sleeps() {
    for p in [3, 4] {
        let first = jittered_run(1, p);
        for seed in 2..4 {
            assert!(jittered_run(seed, p) == first, "p={p}: run {seed} differs from run 1");
        }
        // The all-reduce steps give every rank the same bits.
        let n = 64;
        let len = p * n;
        for r in 1..p {
            assert_eq!(first[r][..len], first[0][..len]);
        }
    }
}

#[test]
fn send_recv_in_order_per_tag() {
    let out = run(2, |rank, grid| {
        let w = &grid.world;
        let l = Label::op("pp");
        if rank == 0 {
            w.send_slice(&[1.0f32, 1.5], 1, 7, l)?;
            w.send_slice(&[2.0f32, 2.5], 1, 9, l)?;
            w.send_slice(&[3.0f32, 3.5], 1, 7, l)?;
            w.send_slice(&[4u32], 1, 7, l)?;
            let mut back = [0f64; 3];
            w.recv_slice(&mut back, 1, 0, l)?;
            Ok(vec![back[0], back[1], back[2]])
        } else {
            let mut got = Vec::new();
            let mut b = [0f32; 2];
            // Tag 9 first although it was sent second.
            w.recv_slice(&mut b, 0, 9, l)?;
            got.extend(b.iter().map(|&x| x as f64));
            w.recv_slice(&mut b, 0, 7, l)?;
            got.extend(b.iter().map(|&x| x as f64));
            w.recv_slice(&mut b, 0, 7, l)?;
            got.extend(b.iter().map(|&x| x as f64));
            let mut u = [0u32];
            w.recv_slice(&mut u, 0, 7, l)?;
            got.push(u[0] as f64);
            w.send_slice(&[0.25f64, 0.5, 0.75], 0, 0, l)?;
            Ok(got)
        }
    })
    .unwrap();
    assert_eq!(out[0], vec![0.25, 0.5, 0.75]);
    assert_eq!(out[1], vec![2.0, 2.5, 1.0, 1.5, 3.0, 3.5, 4.0]);
}

#[test]
fn pipeline_ring_through_the_collective_trait() {
    // Stages pass a buffer forward and gradients backward, many times, through the pp group.
    let dims = Dims::new(1, 4, 1);
    let out = run(dims, |_, grid| {
        let pp: &dyn Collective<Cpu<f64>> = &grid.pp;
        let s = grid.stage();
        let mut act = vec![0.0f64; 8];
        let mut trace = Vec::new();
        for micro in 0..20 {
            if let Some(prev) = grid.prev_stage() {
                pp.recv(&mut act, 0, 8, prev, Label::op("act"));
            } else {
                act.iter_mut().enumerate().for_each(|(i, a)| *a = (micro * 100 + i) as f64);
            }
            act.iter_mut().for_each(|a| *a += 1.0);
            if let Some(next) = grid.next_stage() {
                pp.send(&act, 0, 8, next, Label::op("act"));
            }
            trace.push(act[0]);
        }
        let mut grad = vec![s as f64; 4];
        if let Some(next) = grid.next_stage() {
            pp.recv(&mut grad, 0, 4, next, Label::op("grad"));
        }
        if let Some(prev) = grid.prev_stage() {
            pp.send(&grad, 0, 4, prev, Label::op("grad"));
        }
        trace.push(grad[0]);
        Ok(trace)
    })
    .unwrap();
    for (s, trace) in out.iter().enumerate() {
        for (micro, &t) in trace[..20].iter().enumerate() {
            assert_eq!(t, (micro * 100) as f64 + s as f64 + 1.0);
        }
        assert_eq!(trace[20], 3.0, "the last stage's gradient reaches every stage");
    }
}

#[test]
fn grid_membership_222() {
    let dims = Dims::new(2, 2, 2);
    let out = run(dims, |rank, grid| {
        // Each group gathers its members' global ranks.
        let mut m = Vec::new();
        for g in [&grid.tp, &grid.pp, &grid.dp, &grid.world] {
            let mut buf = vec![0u32; g.size()];
            buf[g.rank()] = rank as u32;
            g.all_gather_slice(&mut buf, Label::op("members"))?;
            m.push(buf.into_iter().map(|x| x as usize).collect::<Vec<_>>());
        }
        Ok((grid.coord, grid.tp.rank(), grid.pp.rank(), grid.dp.rank(), m))
    })
    .unwrap();
    for (rank, (coord, tpr, ppr, dpr, m)) in out.into_iter().enumerate() {
        assert_eq!(rank, (coord.dp * 2 + coord.pp) * 2 + coord.tp);
        assert_eq!((tpr, ppr, dpr), (coord.tp, coord.pp, coord.dp));
        assert_eq!(m[0], dims.tp_members(rank), "tp group of rank {rank}");
        assert_eq!(m[1], dims.pp_members(rank), "pp group of rank {rank}");
        assert_eq!(m[2], dims.dp_members(rank), "dp group of rank {rank}");
        assert_eq!(m[3], (0..8).collect::<Vec<_>>());
    }
    assert_eq!(dims.tp_members(5), vec![4, 5]);
    assert_eq!(dims.pp_members(5), vec![5, 7]);
    assert_eq!(dims.dp_members(5), vec![1, 5]);
}

#[test]
fn split_orders_by_key_then_rank() {
    // 6 ranks: colour = rank % 2, key = reversed rank, so the groups are [4, 2, 0] and [5, 3, 1].
    let out = run(6, |rank, grid| {
        let sub = grid.world.comm().split(rank % 2, 10 - rank)?;
        let mut buf = vec![0u32; sub.size()];
        buf[sub.rank()] = rank as u32;
        sub.all_gather_slice(&mut buf, Label::op("members"))?;
        // A nested split of the sub-group, and collectives on both interleaved.
        let solo = sub.split(sub.rank(), 0)?;
        let mut x = [rank as f32];
        solo.all_reduce_slice(&mut x, ReduceOp::Sum, Label::op("solo"))?;
        sub.all_reduce_slice(&mut x, ReduceOp::Sum, Label::op("sub"))?;
        Ok((sub.rank(), buf, x[0], solo.size()))
    })
    .unwrap();
    for (rank, (sr, members, sum, solo)) in out.into_iter().enumerate() {
        let want: Vec<u32> = if rank % 2 == 0 { vec![4, 2, 0] } else { vec![5, 3, 1] };
        assert_eq!(members, want);
        assert_eq!(want[sr], rank as u32);
        assert_eq!(sum, if rank % 2 == 0 { 6.0 } else { 9.0 });
        assert_eq!(solo, 1);
    }
}

#[test]
fn eight_ranks_on_two_cores_finish_quickly() {
    let t = Instant::now();
    let out = run(Dims::new(2, 2, 2), |rank, grid| {
        let tp: &dyn Collective<Cpu<f32>> = &grid.tp;
        let dp: &dyn Collective<Cpu<f32>> = &grid.dp;
        let world: &dyn Collective<Cpu<f32>> = &grid.world;
        let mut x = vec![rank as f32; 1024];
        for i in 0..300 {
            tp.all_reduce(&mut x, 0, 1024, ReduceOp::Sum, Label::layer("tp", i % 4));
            x.iter_mut().for_each(|v| *v *= 0.5);
            dp.all_reduce(&mut x, 0, 512, ReduceOp::Sum, Label::layer("dp", i % 4));
            x.iter_mut().for_each(|v| *v *= 0.5);
        }
        let mut y = vec![0.0f32; 8 * 16];
        y[rank * 16..(rank + 1) * 16].fill(rank as f32);
        for _ in 0..100 {
            world.all_gather(&mut y, 0, 16, Label::op("world"));
        }
        world.barrier();
        Ok(x[0] + y[127])
    })
    .unwrap();
    let secs = t.elapsed().as_secs_f64();
    assert_eq!(out.len(), 8);
    assert!(secs < 20.0, "8 ranks × 700 collectives took {secs:.1} s");
    eprintln!("8 ranks, 1300 collectives: {secs:.2} s");
}

#[test]
fn raw_universe_with_guards() {
    // The universe without the runner: threads own their handles and guards.
    let uni = InProcess::new(3);
    let comms = uni.communicators();
    let results: Vec<f64> = std::thread::scope(|s| {
        let hs: Vec<_> = comms
            .into_iter()
            .enumerate()
            .map(|(rank, c)| {
                let guard = uni.guard(rank);
                s.spawn(move || {
                    let mut x = [rank as f64 + 0.5];
                    c.all_reduce_slice(&mut x, ReduceOp::Sum, Label::op("x")).unwrap();
                    c.barrier(Label::op("end")).unwrap();
                    guard.finish();
                    x[0]
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert_eq!(results, vec![4.5; 3]);
    assert!(uni.failure().is_none());
}

#[test]
fn run_ranks_returns_results_in_rank_order() {
    let out = run_ranks(Dims::new(2, 1, 2), |rank, grid| Ok((rank, grid.coord.dp, grid.coord.tp))).unwrap();
    assert_eq!(out, vec![(0, 0, 0), (1, 0, 1), (2, 1, 0), (3, 1, 1)]);
    let t = Instant::now();
    for _ in 0..20 {
        run_ranks(8, |_, _| Ok(())).unwrap();
    }
    assert!(t.elapsed() < Duration::from_secs(10));
}
