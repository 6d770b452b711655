//! A failing, panicking, slow, early-returning or mismatched rank makes every other rank fail
//! promptly with a message naming it.

mod common;

use boost_comm::{
    CommError, CommExt, GridDims, InProcess, InProcessOptions, RunOptions, panic_message, run_ranks_with,
};
use boost_tensor::cpu::Cpu;
use boost_tensor::{Collective, Label, ReduceOp};
use common::run;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Mutex;
use std::time::{Duration, Instant};

fn opts(deadline_s: f64) -> RunOptions {
    RunOptions::default().deadline(Duration::from_secs_f64(deadline_s))
}

#[test]
fn an_error_in_one_rank_fails_the_others_naming_it() {
    let seen = Mutex::new(Vec::new());
    let t = Instant::now();
    let err = run(4, |rank, grid| {
        let mut x = vec![1.0f32; 8];
        grid.tp.all_reduce_slice(&mut x, ReduceOp::Sum, Label::layer("attn.qkv.A", 0))?;
        if rank == 1 {
            anyhow::bail!("boom: bad batch");
        }
        let r = grid.tp.all_reduce_slice(&mut x, ReduceOp::Sum, Label::layer("attn.qkv.A", 1));
        let e = r.expect_err("rank 1 never joins");
        seen.lock().unwrap().push((rank, e.clone()));
        Err::<(), _>(e.into())
    })
    .unwrap_err();
    assert!(t.elapsed() < Duration::from_secs(10), "poison, not the 60 s deadline, ends the wait");
    let msg = format!("{err:#}");
    assert!(msg.starts_with("rank 1 failed: boom: bad batch"), "{msg}");
    let seen = seen.into_inner().unwrap();
    assert_eq!(seen.len(), 3);
    for (rank, e) in seen {
        assert_eq!(e.culprit(), Some(1), "rank {rank}: {e}");
        let s = e.to_string();
        assert!(s.contains("rank 1 failed") && s.contains("boom: bad batch"), "rank {rank}: {s}");
        assert!(s.contains("after all_reduce(layer0.attn.qkv.A, f32 × 8)"), "rank {rank}: {s}");
    }
}

#[test]
fn a_panic_in_one_rank_fails_the_others_through_the_collective_trait() {
    let seen = Mutex::new(Vec::new());
    let t = Instant::now();
    let err = run(GridDims::new(1, 1, 3), |rank, grid| -> anyhow::Result<()> {
        let tp: &dyn Collective<Cpu<f32>> = &grid.tp;
        let mut x = vec![1.0f32; 8];
        tp.all_reduce(&mut x, 0, 8, ReduceOp::Sum, Label::layer("attn.qkv.A", 1));
        if rank == 2 {
            panic!("kernel exploded");
        }
        let r = catch_unwind(AssertUnwindSafe(|| {
            tp.all_reduce(&mut x, 0, 8, ReduceOp::Sum, Label::layer("attn.qkv.A", 2));
        }));
        let msg = panic_message(&*r.expect_err("the adapter panics"));
        seen.lock().unwrap().push(msg.clone());
        anyhow::bail!("{msg}")
    })
    .unwrap_err();
    assert!(t.elapsed() < Duration::from_secs(10));
    let msg = format!("{err:#}");
    assert!(msg.starts_with("rank 2 failed: panicked: kernel exploded"), "{msg}");
    for m in seen.into_inner().unwrap() {
        assert!(m.starts_with("collective layer2.attn.qkv.A (all_reduce, group tp) failed: rank 2 failed"), "{m}");
        assert!(m.contains("panicked: kernel exploded"), "{m}");
    }
}

#[test]
fn a_panic_inside_a_rank_that_others_wait_on_in_a_subgroup() {
    // Ranks wait in different groups (tp and dp); the failure reaches all of them.
    let t = Instant::now();
    let err = run(GridDims::new(2, 1, 2), |rank, grid| {
        let mut x = vec![0.0f64; 4];
        if rank == 3 {
            std::thread::sleep(Duration::from_millis(50));
            panic!("rank three gives up");
        }
        grid.dp.all_reduce_slice(&mut x, ReduceOp::Sum, Label::op("grads"))?;
        grid.tp.all_reduce_slice(&mut x, ReduceOp::Sum, Label::op("act"))?;
        Ok(())
    })
    .unwrap_err();
    assert!(t.elapsed() < Duration::from_secs(10));
    assert!(format!("{err:#}").contains("rank 3 failed: panicked: rank three gives up"), "{err:#}");
}

#[test]
fn the_deadline_names_the_missing_rank() {
    let waited = Mutex::new(None);
    let t = Instant::now();
    let err = run_ranks_with(2, &opts(1.0), |rank, grid| {
        let mut x = vec![0.0f32; 8];
        if rank == 1 {
            std::thread::sleep(Duration::from_millis(2500));
        }
        let t0 = Instant::now();
        let r = grid.tp.all_reduce_slice(&mut x, ReduceOp::Sum, Label::layer("mlp.down.A", 3));
        if rank == 0 {
            *waited.lock().unwrap() = Some(t0.elapsed());
        }
        r.map_err(Into::into)
    })
    .unwrap_err();
    let waited = waited.into_inner().unwrap().unwrap();
    assert!(waited >= Duration::from_millis(990) && waited < Duration::from_secs(2), "{waited:?}");
    assert!(t.elapsed() < Duration::from_secs(10));
    let msg = format!("{err:#}");
    assert!(msg.starts_with("rank 0 failed"), "{msg}");
    assert!(msg.contains("rank 0 waited 1.0 s in all_reduce(layer3.mlp.down.A, f32 × 8) for rank(s) 1"), "{msg}");
}

#[test]
fn a_rank_that_returns_early_is_reported() {
    let t = Instant::now();
    let err = run(3, |rank, grid| {
        if rank == 2 {
            return Ok(());
        }
        grid.tp.barrier_checked(Label::op("sync"))?;
        Ok(())
    })
    .unwrap_err();
    assert!(t.elapsed() < Duration::from_secs(10));
    let msg = format!("{err:#}");
    assert!(msg.contains("waited in barrier(sync) for rank 2, which had already returned"), "{msg}");
}

#[test]
fn mismatched_calls_are_reported_with_both_calls() {
    let err = run(2, |rank, grid| {
        grid.tp.barrier_checked(Label::op("start"))?;
        let mut x = vec![0.0f32; 4 + rank];
        grid.tp.all_reduce_slice(&mut x, ReduceOp::Sum, Label::layer("attn.o.A", 0))?;
        Ok(())
    })
    .unwrap_err();
    let msg = format!("{err:#}");
    assert!(
        msg.contains(
            "mismatched collectives at call #1: rank 0 called all_reduce(layer0.attn.o.A, f32 × 4) \
             but rank 1 called all_reduce(layer0.attn.o.A, f32 × 5)"
        ),
        "{msg}"
    );

    let err = run(2, |rank, grid| {
        let mut x = vec![0.0f64; 4];
        if rank == 0 {
            grid.tp.all_gather_slice(&mut x, Label::op("latent"))?;
        } else {
            grid.tp.all_reduce_slice(&mut x, ReduceOp::Max, Label::op("latent"))?;
        }
        Ok(())
    })
    .unwrap_err();
    let msg = format!("{err:#}");
    assert!(
        msg.contains("rank 0 called all_gather(latent, f64 × 4) but rank 1 called all_reduce_max(latent, f64 × 4)"),
        "{msg}"
    );

    // Same size, different label, in a sub-group (ranks 2 and 3 of a (2, 1, 2) grid).
    let err = run(GridDims::new(2, 1, 2), |rank, grid| {
        let mut x = vec![0.0f32; 6];
        let label = if rank == 3 { Label::layer("mlp.gu.A", 0) } else { Label::layer("attn.qkv.A", 0) };
        grid.tp.all_reduce_slice(&mut x, ReduceOp::Sum, label)?;
        Ok(())
    })
    .unwrap_err();
    let msg = format!("{err:#}");
    assert!(msg.contains("in the group of ranks [2, 3]: rank 2 called all_reduce(layer0.attn.qkv.A"), "{msg}");
    assert!(msg.contains("rank 3 called all_reduce(layer0.mlp.gu.A"), "{msg}");
}

#[test]
fn recv_problems_are_reported() {
    // A recv whose tag never comes times out, listing what is queued.
    let err = run_ranks_with(2, &opts(1.0), |rank, grid| {
        if rank == 0 {
            grid.world.send_slice(&[1.0f32; 3], 1, 1, Label::op("act"))?;
            std::thread::sleep(Duration::from_millis(2000));
        } else {
            let mut b = [0.0f32; 3];
            grid.world.recv_slice(&mut b, 0, 2, Label::op("grad"))?;
        }
        Ok(())
    })
    .unwrap_err();
    let msg = format!("{err:#}");
    assert!(msg.contains("rank 1 waited 1.0 s in recv(grad, from 0, tag 2, f32 × 3)"), "{msg}");
    assert!(msg.contains("queued from rank 0: send(act, to 1, tag 1, f32 × 3)"), "{msg}");

    // A size mismatch names both calls.
    let err = run(2, |rank, grid| {
        if rank == 0 {
            grid.world.send_slice(&[1.0f32; 3], 1, 0, Label::op("act"))?;
            grid.world.barrier_checked(Label::op("end"))?;
        } else {
            let mut b = [0.0f32; 4];
            grid.world.recv_slice(&mut b, 0, 0, Label::op("act"))?;
            grid.world.barrier_checked(Label::op("end"))?;
        }
        Ok(())
    })
    .unwrap_err();
    let msg = format!("{err:#}");
    assert!(
        msg.contains("rank 1 called recv(act, from 0, tag 0, f32 × 4) but rank 0 sent send(act, to 1, tag 0, f32 × 3)"),
        "{msg}"
    );
}

#[test]
fn invalid_sizes_and_poisoned_universes_fail_fast() {
    let err = run(3, |_, grid| {
        let mut x = vec![0u32; 7];
        grid.tp.all_gather_slice(&mut x, Label::op("ids"))?;
        Ok(())
    })
    .unwrap_err();
    assert!(format!("{err:#}").contains("7 elements do not split into 3 chunks"), "{err:#}");

    let uni = InProcess::with_options(2, InProcessOptions::default().deadline(Duration::from_secs(60)));
    let comms = uni.communicators();
    assert!(uni.poison(1, "lost its GPU"));
    assert!(!uni.poison(0, "second failure is not the root cause"));
    let t = Instant::now();
    let mut x = [0.0f32];
    let e = comms[0].all_reduce_slice(&mut x, ReduceOp::Sum, Label::op("x")).unwrap_err();
    assert!(t.elapsed() < Duration::from_secs(1));
    assert!(matches!(&e, CommError::PeerFailed(f) if f.rank == 1 && f.message == "lost its GPU"), "{e}");
    assert_eq!(e.to_string(), "rank 1 failed: lost its GPU");
}

#[test]
fn a_dropped_guard_poisons() {
    let uni = InProcess::new(2);
    let comms = uni.communicators();
    let r = std::thread::scope(|s| {
        let g0 = uni.guard(0);
        let g1 = uni.guard(1);
        let c1 = &comms[1];
        let waiter = s.spawn(move || {
            let mut x = [0.0f64; 2];
            let r = c1.all_reduce_slice(&mut x, ReduceOp::Sum, Label::op("x"));
            g1.finish();
            r
        });
        s.spawn(move || {
            std::thread::sleep(Duration::from_millis(30));
            drop(g0);
        });
        waiter.join().unwrap()
    });
    let e = r.unwrap_err();
    assert_eq!(e.culprit(), Some(0));
    assert!(e.to_string().contains("ended without reporting success"), "{e}");
}
