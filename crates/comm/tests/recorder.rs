//! The recorder's counts and bytes, and link emulation's added time.

mod common;

use boost_comm::{DType, GridDims, GridOptions, GroupLinks, Kind, Link, RunOptions, run_ranks_with};
use boost_tensor::cpu::Cpu;
use boost_tensor::{Collective, Label, ReduceOp};
use std::time::{Duration, Instant};

#[test]
fn btp_online_grouped_forward_counts() {
    // One BTP forward (grouped, online norm) per layer: 4 all-reduces carrying 3r+1, r, 2r+1
    // and r elements per token — 7r+2 in all. Two steps, with take() between them.
    let (r, tokens, layers) = (8usize, 6usize, 3usize);
    let opts = RunOptions::default()
        .deadline(Duration::from_secs(60))
        .grid(GridOptions::default().record(true).log_capacity(64));
    let out = run_ranks_with(GridDims::new(1, 1, 2), &opts, |_, grid| {
        let tp: &dyn Collective<Cpu<f32>> = &grid.tp;
        let rec = grid.recorder().expect("recording").clone();
        let mut buf = vec![0.0f32; tokens * (3 * r + 1)];
        let mut snaps = Vec::new();
        for _step in 0..2 {
            for l in 0..layers {
                for (op, width) in
                    [("attn.qkv.A", 3 * r + 1), ("attn.o.A", r), ("mlp.gu.A", 2 * r + 1), ("mlp.down.A", r)]
                {
                    tp.all_reduce(&mut buf, 0, tokens * width, ReduceOp::Sum, Label::layer(op, l));
                }
            }
            // A size-1 group communicates nothing and is not recorded.
            let dp: &dyn Collective<Cpu<f32>> = &grid.dp;
            dp.all_reduce(&mut buf, 0, 4, ReduceOp::Sum, Label::op("grads"));
            // A max all-reduce and a f64 statistic.
            tp.all_reduce(&mut buf, 0, tokens, ReduceOp::Max, Label::op("ce.max"));
            grid.tp.all_reduce_slice(&mut [0.0f64; 2], ReduceOp::Sum, Label::op("grad_norm"))?;
            snaps.push(rec.take());
        }
        assert_eq!(rec.totals().calls, 0, "take() resets");
        Ok(snaps)
    })
    .unwrap();
    for snaps in out {
        let counts = |i: usize| -> Vec<_> {
            snaps[i].by_key.iter().map(|a| (a.key, a.totals.calls, a.totals.elements, a.totals.bytes)).collect()
        };
        assert_eq!(counts(0), counts(1), "both steps record the same calls");
        for s in &snaps {
            let fwd = s.sum(|k| k.kind == Kind::AllReduce && k.label.layer.is_some());
            assert_eq!(fwd.calls, (4 * layers) as u64);
            assert_eq!(fwd.elements, (layers * tokens * (7 * r + 2)) as u64);
            assert_eq!(fwd.bytes, 4 * fwd.elements);
            for l in 0..layers {
                let per_layer = s.sum(|k| k.label.layer == Some(l as u32));
                assert_eq!((per_layer.calls, per_layer.elements), (4, (tokens * (7 * r + 2)) as u64));
            }
            let qkv = s.op("attn.qkv.A");
            assert_eq!((qkv.calls, qkv.elements), (layers as u64, (layers * tokens * (3 * r + 1)) as u64));
            let one = s.get("tp", Label::layer("mlp.gu.A", 1), Kind::AllReduce);
            assert_eq!(
                (one.calls, one.elements, one.bytes),
                (1, (tokens * (2 * r + 1)) as u64, (4 * tokens * (2 * r + 1)) as u64)
            );
            assert_eq!(s.kind(Kind::AllReduceMax).elements, tokens as u64);
            let norm = s.label(Label::op("grad_norm"));
            assert_eq!((norm.calls, norm.bytes), (1, 16));
            assert!(s.by_key.iter().any(|a| a.key.dtype == DType::F64 && a.key.label.op == "grad_norm"));
            assert_eq!(s.group("dp").calls, 0);
            assert_eq!(s.calls(), (4 * layers + 2) as u64);
            assert_eq!(s.bytes(), fwd.bytes + 4 * tokens as u64 + 16);
            assert_eq!(s.events.len(), 4 * layers + 2);
            assert_eq!(s.events[1].key.label, Label::layer("attn.o.A", 0));
            assert_eq!(s.dropped_events, 0);
            assert_eq!(s.totals.emulated, Duration::ZERO);
            // Aggregates come in first-issued order and serialize to JSON.
            assert_eq!(s.by_key[0].key.label, Label::layer("attn.qkv.A", 0));
            let json = serde_json::to_string(&s.by_key[0]).unwrap();
            assert!(
                json.contains("\"label\":\"layer0.attn.qkv.A\"") && json.contains("\"kind\":\"all_reduce\""),
                "{json}"
            );
        }
    }
}

#[test]
fn records_every_kind_with_its_element_count() {
    let opts = RunOptions::default().deadline(Duration::from_secs(60)).record(true);
    let out = run_ranks_with(GridDims::new(1, 2, 2), &opts, |_, grid| {
        let tp: &dyn Collective<Cpu<f32>> = &grid.tp;
        let pp: &dyn Collective<Cpu<f32>> = &grid.pp;
        let mut b = vec![0.0f32; 64];
        tp.all_gather(&mut b, 0, 10, Label::op("exit"));
        tp.reduce_scatter(&mut b, 0, 12, Label::op("entry"));
        tp.broadcast(&mut b, 0, 5, 1, Label::op("bcast"));
        tp.barrier();
        if grid.is_first_stage() {
            pp.send(&b, 0, 7, 1, Label::op("act"));
        } else {
            pp.recv(&mut b, 0, 7, 0, Label::op("act"));
        }
        Ok((grid.stage(), grid.recorder().unwrap().take()))
    })
    .unwrap();
    for (stage, s) in out {
        assert_eq!(s.kind(Kind::AllGather).elements, 20, "the full gathered range");
        assert_eq!(s.kind(Kind::ReduceScatter).elements, 24, "the full scattered range");
        assert_eq!(s.kind(Kind::Broadcast).elements, 5);
        assert_eq!(s.kind(Kind::Barrier).calls, 1);
        let (send, recv) = (s.kind(Kind::Send), s.kind(Kind::Recv));
        if stage == 0 {
            assert_eq!((send.calls, send.bytes, recv.calls), (1, 28, 0));
        } else {
            assert_eq!((send.calls, recv.calls, recv.bytes), (0, 1, 28));
        }
        assert_eq!(s.group("pp").calls, 1);
        assert_eq!(s.group("tp").calls, 4);
    }
}

#[test]
fn link_emulation_adds_the_modelled_time() {
    // 1 MB all-reduce over 2 ranks at α = 200 µs, β = 0.1 GB/s:
    // 2·1·α + 2·(1/2)·1e6/1e8 s = 0.4 ms + 10 ms = 10.4 ms per call.
    let link = Link::new(200.0, 0.1);
    let n = 250_000usize;
    let calls = 6;
    let per_call = link.cost(Kind::AllReduce, 2, 4 * n);
    assert!((per_call.as_secs_f64() - 0.0104).abs() < 1e-9);
    let go = |links: GroupLinks| {
        let opts = RunOptions::default()
            .deadline(Duration::from_secs(60))
            .grid(GridOptions::default().record(true).links(links));
        run_ranks_with(2, &opts, |_, grid| {
            let tp: &dyn Collective<Cpu<f32>> = &grid.tp;
            let mut x = vec![1.0f32; n];
            let t = Instant::now();
            for i in 0..calls {
                tp.all_reduce(&mut x, 0, n, ReduceOp::Sum, Label::layer("x", i));
            }
            Ok((t.elapsed(), grid.recorder().unwrap().take()))
        })
        .unwrap()
    };
    let plain = go(GroupLinks::default());
    let slow = go(GroupLinks { tp: Some(link), ..GroupLinks::default() });
    let modelled = per_call * calls as u32;
    for ((t_plain, s_plain), (t_slow, s_slow)) in plain.iter().zip(&slow) {
        assert_eq!(s_plain.totals.emulated, Duration::ZERO);
        assert_eq!(s_slow.totals.emulated, modelled, "the emulated time is recorded exactly");
        assert!(s_slow.totals.time < *t_slow, "real time is recorded apart from the sleep");
        let added = t_slow.saturating_sub(*t_plain);
        assert!(*t_slow >= modelled, "{t_slow:?} < {modelled:?}");
        assert!(
            added.as_secs_f64() > 0.7 * modelled.as_secs_f64()
                && added.as_secs_f64() < 3.0 * modelled.as_secs_f64() + 0.2,
            "added {added:?} for a modelled {modelled:?} (plain {t_plain:?}, emulated {t_slow:?})"
        );
    }
}

#[test]
fn a_recorded_collective_counts_what_a_recording_group_counts() {
    // The same calls through a recording group and through `Recorded` around the same
    // communicator without a recorder give the same calls, elements and bytes per key.
    use boost_comm::{Group, Recorded, Recorder};
    use std::sync::Arc;
    let opts = RunOptions::default().deadline(Duration::from_secs(60)).grid(GridOptions::default().record(true));
    let out = run_ranks_with(GridDims::new(1, 1, 2), &opts, |rank, grid| {
        let mine = Arc::new(Recorder::new());
        let bare = Group::new("tp", grid.tp.comm().clone());
        let wrapped = Recorded::new(bare, "tp", DType::F32, mine.clone());
        let group_rec = grid.recorder().expect("recording").clone();
        for tp in [&grid.tp as &dyn Collective<Cpu<f32>>, &wrapped] {
            let mut buf = vec![1.0f32; 24];
            tp.all_reduce(&mut buf, 0, 12, ReduceOp::Sum, Label::layer("attn.qkv.A", 0));
            tp.all_reduce(&mut buf, 0, 3, ReduceOp::Max, Label::op("loss.max"));
            tp.all_gather(&mut buf, 0, 5, Label::op("head.gather"));
            tp.reduce_scatter(&mut buf, 0, 6, Label::op("embed"));
            tp.broadcast(&mut buf, 0, 4, 0, Label::op("init"));
            if rank == 0 {
                tp.send(&buf, 0, 7, 1, Label::op("pp.act"));
            } else {
                tp.recv(&mut buf, 0, 7, 0, Label::op("pp.act"));
            }
            tp.barrier();
        }
        let strip = |s: boost_comm::Snapshot| -> Vec<_> {
            s.by_key.iter().map(|a| (a.key, a.totals.calls, a.totals.elements, a.totals.bytes)).collect()
        };
        Ok((strip(group_rec.take()), strip(mine.take())))
    })
    .unwrap();
    for (by_group, by_wrapper) in out {
        assert_eq!(by_group.len(), 7, "every kind of call is recorded: {by_group:?}");
        assert_eq!(by_group, by_wrapper);
    }
}

#[test]
fn a_recorded_collective_records_started_calls_when_they_are_waited_for() {
    // A call still in flight after its start (a group with a progress thread) is recorded
    // when it is waited for: in flight at least the time between its start and its wait,
    // plus the wait. A call that completed inside its start (no progress thread) is
    // recorded as a blocking call: waited for all the time it was in flight.
    use boost_comm::{Group, Recorded, Recorder};
    use std::sync::Arc;
    let pause = Duration::from_millis(100);
    let opts = RunOptions::default().deadline(Duration::from_secs(60));
    let out = run_ranks_with(GridDims::new(1, 1, 2), &opts, |rank, grid| {
        let rec = Arc::new(Recorder::with_log(8));
        let mut overlapped = Group::new("dp", grid.tp.comm().clone());
        overlapped.enable_overlap()?;
        let dp = Recorded::new(overlapped, "dp", DType::F32, rec.clone());
        let call = dp.start_all_reduce(vec![rank as f32 + 1.0; 8], 0, 8, ReduceOp::Sum, Label::op("dp.grads"));
        std::thread::sleep(pause);
        assert_eq!(call.wait(), vec![3.0; 8], "the started sum");
        let plain = Recorded::new(Group::new("dp", grid.tp.comm().clone()), "dp", DType::F32, rec.clone());
        let call = plain.start_all_reduce(vec![1.0f32; 4], 0, 4, ReduceOp::Sum, Label::op("dp.norm"));
        std::thread::sleep(pause);
        assert_eq!(call.wait(), vec![2.0; 4], "the sum done at its start");
        Ok(rec.take().events)
    })
    .unwrap();
    for events in out {
        assert_eq!(events.len(), 2, "{events:?}");
        let (started, blocking) = (&events[0], &events[1]);
        assert_eq!((started.key.label, started.elements), (Label::op("dp.grads"), 8));
        assert!(
            started.in_flight >= pause + started.waited,
            "in flight from the start to the end of the wait: {started:?}"
        );
        assert_eq!(blocking.key.label, Label::op("dp.norm"));
        assert_eq!(blocking.waited, blocking.in_flight, "a call done at its start is exposed whole: {blocking:?}");
        assert!(blocking.in_flight < started.in_flight, "not in flight during the pause: {blocking:?}");
    }
}
