//! Results of every collective and their determinism: rank-order reductions, NaN and u32
//! handling, and bit-identical results under random timing.

mod common;

use boost_comm::CommElem;
use boost_tensor::cpu::Cpu;
use boost_tensor::{Collective, Label, ReduceOp, Scalar};
use common::{Rng, jitter, run, values};

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
