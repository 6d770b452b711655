//! Point-to-point ordering, the pipeline ring, the grid's groups and splits, many ranks on
//! few cores, and running ranks with the runner or a raw universe.

mod common;

use boost_comm::{CommExt, GridDims, InProcess, run_ranks};
use boost_tensor::cpu::Cpu;
use boost_tensor::{Collective, Label, ReduceOp};
use common::run;
use std::time::{Duration, Instant};

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
    let dims = GridDims::new(1, 4, 1);
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
    let dims = GridDims::new(2, 2, 2);
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
    let out = run(GridDims::new(2, 2, 2), |rank, grid| {
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
    let out = run_ranks(GridDims::new(2, 1, 2), |rank, grid| Ok((rank, grid.coord.dp, grid.coord.tp))).unwrap();
    assert_eq!(out, vec![(0, 0, 0), (1, 0, 1), (2, 1, 0), (3, 1, 1)]);
    let t = Instant::now();
    for _ in 0..20 {
        run_ranks(8, |_, _| Ok(())).unwrap();
    }
    assert!(t.elapsed() < Duration::from_secs(10));
}
