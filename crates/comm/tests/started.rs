//! Started (non-blocking) calls: the same bits as the blocking calls, several in flight at
//! once, recorded with their start, completion and time waited; and a failure, panic or
//! mismatch with calls in flight still stops every rank with a message naming its cause.

mod common;

use boost_comm::{GridDims, GridOptions, GroupLinks, Kind, Link, RunOptions, panic_message, run_ranks_with};
use boost_tensor::cpu::Cpu;
use boost_tensor::{Collective, Label, ReduceOp};
use common::values;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Mutex;
use std::time::{Duration, Instant};

fn overlapped(deadline_s: f64) -> RunOptions {
    RunOptions::default()
        .deadline(Duration::from_secs_f64(deadline_s))
        .grid(GridOptions::default().record(true).overlap(true))
}

fn f32s(seed: u64, rank: usize, n: usize) -> Vec<f32> {
    values(seed, rank, n).into_iter().map(|v| v as f32).collect()
}

#[test]
fn started_calls_give_the_blocking_calls_bits_with_several_in_flight() {
    let n = 1000;
    let out = run_ranks_with(GridDims::new(4, 1, 1), &overlapped(60.0), |rank, grid| {
        assert!(grid.dp.overlaps());
        let dp: &dyn Collective<Cpu<f32>> = &grid.dp;
        // Blocking references.
        let mut sum = f32s(1, rank, n);
        dp.all_reduce(&mut sum, 0, n, ReduceOp::Sum, Label::op("ref.sum"));
        let mut rs = f32s(2, rank, 4 * n);
        dp.reduce_scatter(&mut rs, 0, n, Label::op("ref.rs"));
        let mut ag = f32s(3, rank, 4 * n);
        dp.all_gather(&mut ag, 0, n, Label::op("ref.ag"));
        // The same three started together (with an offset on the first), then waited for
        // in reverse order while the caller goes on.
        let mut padded = vec![7.0f32; 3];
        padded.extend(f32s(1, rank, n));
        let a = dp.start_all_reduce(padded, 3, n, ReduceOp::Sum, Label::op("sum"));
        let b = dp.start_reduce_scatter(f32s(2, rank, 4 * n), 0, n, Label::op("rs"));
        let c = dp.start_all_gather(f32s(3, rank, 4 * n), 0, n, Label::op("ag"));
        let (c, b, a) = (c.wait(), b.wait(), a.wait());
        assert_eq!(&a[..3], &[7.0; 3], "outside the range is untouched");
        assert_eq!(a[3..].to_vec(), sum, "all-reduce bits");
        let own = rank * n..(rank + 1) * n;
        assert_eq!(b[own.clone()].to_vec(), rs[own].to_vec(), "reduce-scatter bits");
        assert_eq!(c, ag, "all-gather bits");
        // Point to point: a receive posted before its message is sent.
        let peer = rank ^ 1;
        let r = dp.start_recv(vec![0.0f32; n], 0, n, peer, Label::op("p2p"));
        let s = dp.start_send(f32s(4, rank, n), 0, n, peer, Label::op("p2p"));
        assert_eq!(r.wait(), f32s(4, peer, n), "received bits");
        assert_eq!(s.wait(), f32s(4, rank, n), "a send hands its buffer back");
        Ok(a[3])
    })
    .unwrap();
    assert!(out.iter().all(|v| v.to_bits() == out[0].to_bits()), "every rank has the same sum: {out:?}");
}

#[test]
fn the_recorder_logs_start_completion_and_time_waited() {
    // 1 MB over 1 GB/s between two ranks: 1 ms + α per all-reduce, slept on the lane.
    let link = Link::new(100.0, 1.0);
    let grid = GridOptions::default().record(true).log_capacity(16).overlap(true);
    let opts = RunOptions::default().grid(grid.links(GroupLinks { dp: Some(link), ..GroupLinks::default() }));
    let got = run_ranks_with(GridDims::new(2, 1, 1), &opts, |rank, grid| {
        let dp: &dyn Collective<Cpu<f32>> = &grid.dp;
        let n = 250_000;
        let mut x = vec![rank as f32; n];
        dp.all_reduce(&mut x, 0, n, ReduceOp::Sum, Label::op("blocking"));
        let h = dp.start_all_reduce(x, 0, n, ReduceOp::Sum, Label::op("started"));
        // Work longer than the call: the wait should find it done.
        std::thread::sleep(Duration::from_millis(60));
        let x = h.wait();
        assert_eq!(x[0], 2.0);
        Ok(grid.recorder().unwrap().snapshot())
    })
    .unwrap();
    let emulated = link.cost(Kind::AllReduce, 2, 1_000_000);
    for snap in got {
        let [blocking, started] = &snap.events[..] else { panic!("two calls: {:?}", snap.events) };
        assert_eq!(blocking.waited, blocking.in_flight, "a blocking call is exposed whole");
        assert!(blocking.in_flight >= emulated, "{blocking:?}");
        assert!(started.in_flight >= emulated, "the lane sleeps the link: {started:?}");
        assert!(started.start >= blocking.start + blocking.time, "starts are in issue order");
        assert!(started.waited < started.in_flight, "the wait came after the call was done: {started:?}");
        let t = snap.group("dp");
        assert_eq!(t.waited, blocking.waited + started.waited);
        assert_eq!(t.in_flight, blocking.in_flight + started.in_flight);
    }
}

#[test]
fn an_error_with_calls_in_flight_stops_every_rank_naming_it() {
    let seen = Mutex::new(Vec::new());
    let t = Instant::now();
    let err = run_ranks_with(GridDims::new(3, 1, 1), &overlapped(60.0), |rank, grid| -> anyhow::Result<()> {
        let dp: &dyn Collective<Cpu<f32>> = &grid.dp;
        let a = dp.start_all_reduce(vec![1.0f32; 64], 0, 64, ReduceOp::Sum, Label::op("dp.grads"));
        if rank == 1 {
            // Leaves with its call in flight and never starts the second.
            anyhow::bail!("out of memory in the backward");
        }
        let b = dp.start_all_reduce(vec![1.0f32; 64], 0, 64, ReduceOp::Sum, Label::op("dp.grads2"));
        let r = catch_unwind(AssertUnwindSafe(|| (a.wait(), b.wait())));
        let msg = panic_message(&*r.expect_err("rank 1 never starts the second call"));
        seen.lock().unwrap().push(msg.clone());
        anyhow::bail!("{msg}")
    })
    .unwrap_err();
    assert!(t.elapsed() < Duration::from_secs(20), "the failure, not the 60 s deadline, ends the waits");
    let msg = format!("{err:#}");
    assert!(msg.starts_with("rank 1 failed: out of memory in the backward"), "{msg}");
    let seen = seen.into_inner().unwrap();
    assert_eq!(seen.len(), 2, "{seen:?}");
    for m in seen {
        assert!(m.contains("(all_reduce, group dp) failed: rank 1 failed"), "{m}");
        assert!(m.contains("out of memory in the backward"), "{m}");
    }
}

#[test]
fn a_panic_with_calls_in_flight_is_named_and_a_mismatch_still_reported() {
    let t = Instant::now();
    let err = run_ranks_with(GridDims::new(1, 2, 1), &overlapped(60.0), |rank, grid| -> anyhow::Result<()> {
        let pp: &dyn Collective<Cpu<f32>> = &grid.pp;
        let h = pp.start_recv(vec![0.0f32; 8], 0, 8, rank ^ 1, Label::op("act"));
        if rank == 0 {
            panic!("kernel exploded");
        }
        h.wait();
        Ok(())
    })
    .unwrap_err();
    assert!(t.elapsed() < Duration::from_secs(20));
    let msg = format!("{err:#}");
    assert!(msg.starts_with("rank 0 failed: panicked: kernel exploded"), "{msg}");

    let err = run_ranks_with(GridDims::new(2, 1, 1), &overlapped(60.0), |rank, grid| -> anyhow::Result<()> {
        let dp: &dyn Collective<Cpu<f32>> = &grid.dp;
        let n = 4 + rank;
        dp.start_all_reduce(vec![0.0f32; n], 0, n, ReduceOp::Sum, Label::op("dp.grads")).wait();
        Ok(())
    })
    .unwrap_err();
    let msg = format!("{err:#}");
    assert!(
        msg.contains("rank 0 called all_reduce(dp.grads, f32 × 4) but rank 1 called all_reduce(dp.grads, f32 × 5)"),
        "{msg}"
    );
}

#[test]
fn without_overlap_a_started_call_completes_at_once() {
    let opts = RunOptions::default().grid(GridOptions::default().record(true));
    run_ranks_with(GridDims::new(2, 1, 1), &opts, |rank, grid| {
        assert!(!grid.dp.overlaps());
        let dp: &dyn Collective<Cpu<f64>> = &grid.dp;
        let h = dp.start_all_reduce(vec![rank as f64 + 1.0; 4], 0, 4, ReduceOp::Sum, Label::op("x"));
        // Done before the wait: the calls issued since are recorded after it.
        assert_eq!(grid.recorder().unwrap().totals().calls, 1);
        assert_eq!(h.wait(), vec![3.0; 4]);
        Ok(())
    })
    .unwrap();
}

/// A group and its duplicate (`Group::duplicate`, the tp chunks' communicators) are the same
/// ranks on the same emulated wire: two calls in flight at once take turns with their bytes.
#[test]
fn duplicates_share_the_emulated_wire() {
    // 10 MB over 0.1 GB/s between two ranks: 100 ms of transfer per all-reduce, no latency.
    let link = Link::new(0.0, 0.1);
    let opts = RunOptions::default()
        .grid(GridOptions::default().links(GroupLinks { tp: Some(link), ..GroupLinks::default() }));
    let slowest = run_ranks_with(GridDims::tp(2), &opts, |_, grid| {
        let twin = grid.tp.duplicate()?;
        // Ends are measured from one instant before both calls: with one wire the second
        // transfer cannot end before 200 ms after it, however the threads are scheduled.
        let t0 = Instant::now();
        let ends: Vec<Duration> = std::thread::scope(|s| {
            let calls: Vec<_> = [&grid.tp, &twin]
                .into_iter()
                .map(|g| {
                    s.spawn(move || {
                        let mut x = vec![1.0f32; 2_500_000];
                        g.all_reduce_slice(&mut x, ReduceOp::Sum, Label::op("chunk")).unwrap();
                        t0.elapsed()
                    })
                })
                .collect();
            calls.into_iter().map(|c| c.join().unwrap()).collect()
        });
        Ok(ends.into_iter().max().unwrap())
    })
    .unwrap();
    // Each alone would end after 100 ms; the later of the two waits for the other's bytes.
    for t in slowest {
        assert!(t >= Duration::from_millis(200), "the later call ended after {t:?}");
    }
}
