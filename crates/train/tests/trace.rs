//! `boost train --trace`: a tp2·pp2 run's timeline is valid Chrome trace-event JSON with one
//! process per rank, its spans well formed, every collective of the traced steps once with
//! the recorder's bytes and waited time, and the steps compute the same with tracing on.

mod common;

use boost_train::trace::TraceSteps;
use boost_train::trainer::{TrainOptions, train};
use serde_json::Value;
use std::collections::HashMap;

const GRID: [&str; 5] =
    ["model.arch=cola", "parallel.tp=2", "parallel.pp=2", "train.accumulation=2", "parallel.overlap=true"];

fn run(root: &std::path::Path, name: &str, trace: Option<TraceSteps>) -> boost_train::Summary {
    let mut sets: Vec<String> = GRID.iter().map(|s| s.to_string()).collect();
    sets.extend(["train.steps=3".into(), "train.checkpoint_every=0".into(), "train.eval_every=0".into()]);
    sets.push(format!("run.dir={}", root.join(name).display()));
    let refs: Vec<&str> = sets.iter().map(|s| s.as_str()).collect();
    train(common::config(root, &refs), TrainOptions { quiet: true, trace, ..Default::default() }).unwrap()
}

fn f(v: &Value, k: &str) -> f64 {
    v[k].as_f64().unwrap_or_else(|| panic!("{k} of {v}"))
}

#[test]
fn a_tp2_pp2_trace_holds_every_rank_and_collective_and_changes_no_number() {
    let root = tempfile::tempdir().unwrap();
    common::build_dataset(&root.path().join("data"));
    let plain = run(root.path(), "plain", None);
    assert!(!root.path().join("plain/trace.json").exists(), "no trace unless asked");
    let traced = run(root.path(), "traced", Some("2..3".parse().unwrap()));
    let bits = |s: &boost_train::Summary| s.losses.iter().map(|l| l.to_bits()).collect::<Vec<_>>();
    assert_eq!(bits(&plain), bits(&traced), "tracing changes no loss, to the bit");

    let text = std::fs::read_to_string(root.path().join("traced/trace.json")).unwrap();
    let json: Value = serde_json::from_str(&text).unwrap();
    let events = json["traceEvents"].as_array().unwrap();
    let meta = |name: &'static str| events.iter().filter(move |e| e["ph"] == "M" && e["name"] == name);
    let mut ranks: Vec<(u64, String)> = meta("process_name")
        .map(|e| (e["pid"].as_u64().unwrap(), e["args"]["name"].as_str().unwrap().into()))
        .collect();
    ranks.sort();
    let want: Vec<(u64, String)> =
        (0..4).map(|r| (r, format!("rank {r} (dp 0, pp {}, tp {})", r / 2, r % 2))).collect();
    assert_eq!(ranks, want, "one process per rank, named by its grid coordinates");
    let spans: Vec<&Value> = events.iter().filter(|e| e["ph"] == "X").collect();
    for s in &spans {
        assert!(f(s, "ts") >= 0.0 && f(s, "dur") >= 0.0, "{s}");
    }
    let track = |s: &Value| {
        meta("thread_name")
            .find(|m| m["pid"] == s["pid"] && m["tid"] == s["tid"])
            .map(|m| m["args"]["name"].as_str().unwrap().to_string())
            .unwrap()
    };
    for r in 0..4u64 {
        let mine: Vec<&&Value> = spans.iter().filter(|s| s["pid"] == r).collect();
        let steps: Vec<(f64, f64)> =
            mine.iter().filter(|s| s["cat"] == "step").map(|s| (f(s, "ts"), f(s, "ts") + f(s, "dur"))).collect();
        assert_eq!(steps.len(), 2, "rank {r}: steps 2 and 3 traced, not step 1");
        let layers: Vec<&&&Value> = mine
            .iter()
            .filter(|s| s["cat"] == "forward" && s["name"].as_str().unwrap().starts_with("forward L"))
            .collect();
        // Two micro-batches through this rank's one layer in each of two steps.
        assert_eq!(layers.len(), 4, "rank {r}: {layers:?}");
        for l in &layers {
            let (a, b) = (f(l, "ts"), f(l, "ts") + f(l, "dur"));
            assert!(steps.iter().any(|&(s, e)| s <= a && b <= e), "rank {r}: {l} outside its step");
            assert_eq!(track(l), "compute");
        }
        assert!(mine.iter().any(|s| s["cat"] == "gemm"), "rank {r}: GEMM spans");
        assert!(mine.iter().any(|s| s["cat"] == "attention"), "rank {r}: attention spans");
        // Stage 0 sends activations and receives gradients; stage 1 the other way round.
        for kind in ["send", "recv"] {
            let pp = mine.iter().filter(|s| s["args"]["group"] == "pp" && s["args"]["kind"] == kind);
            assert!(
                pp.clone().count() > 0 && pp.clone().all(|s| track(s).starts_with("pp send/recv")),
                "rank {r}: pp {kind}"
            );
        }
    }
    // Rank 0's collectives against its metrics: the recorder's calls, bytes and waited time
    // of each traced step, exactly (times are written to the nanosecond; the tolerance is the
    // rounding of summing them in f64).
    let metrics = std::fs::read_to_string(root.path().join("traced/metrics.jsonl")).unwrap();
    let records: Vec<Value> = metrics.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let rank0: Vec<&&Value> = spans.iter().filter(|s| s["pid"] == 0).collect();
    let mut steps: Vec<&&&Value> = rank0.iter().filter(|s| s["cat"] == "step").collect();
    steps.sort_by(|a, b| f(a, "ts").total_cmp(&f(b, "ts")));
    for (step, s) in steps.iter().enumerate().map(|(i, s)| (i + 2, s)) {
        let (a, b) = (f(s, "ts"), f(s, "ts") + f(s, "dur"));
        let comm: Vec<&&&Value> = rank0
            .iter()
            .filter(|c| c["cat"].as_str().unwrap().starts_with("comm.") && (a..=b).contains(&f(c, "ts")))
            .collect();
        let m = &records[step - 1];
        assert_eq!(m["step"], step as u64);
        assert_eq!(comm.len() as u64, m["comm_calls"].as_u64().unwrap(), "step {step}: one span per call");
        let bytes: u64 = comm.iter().map(|c| c["args"]["bytes"].as_u64().unwrap()).sum();
        assert_eq!(bytes, m["comm_bytes"].as_u64().unwrap(), "step {step}: bytes");
        let mut exposed: HashMap<&str, f64> = HashMap::new();
        for c in &comm {
            let a = &c["args"];
            *exposed.entry(a["group"].as_str().unwrap()).or_default() += f(a, "exposed_us") * 1e-6;
            assert_eq!(a["exposed"].as_bool().unwrap(), c["cat"] == "comm.exposed");
        }
        for g in ["tp", "pp", "world"] {
            let want = f(&m["time_split"], &format!("{g}_s"));
            let got = exposed.get(g).copied().unwrap_or(0.0);
            assert!((got - want).abs() < 1e-9, "step {step} {g}: exposed {got} s in the trace, {want} s in metrics");
        }
    }
}

/// With tp chunks, each chunk's passes get a track of their own, and the spans where every
/// chunk sat in a tp call add up to the tp time the step reports exposed (the same intervals,
/// written to the nanosecond: the tolerance is that rounding, once per interval).
#[test]
fn tp_chunks_trace_their_own_tracks_and_the_exposed_tp_time() {
    let root = tempfile::tempdir().unwrap();
    common::build_dataset(&root.path().join("data"));
    let sets = [
        "model.arch=cola".to_string(),
        "parallel.tp=2".into(),
        "parallel.tp_chunks=2".into(),
        "train.steps=2".into(),
        "train.checkpoint_every=0".into(),
        "train.eval_every=0".into(),
        format!("run.dir={}", root.path().join("chunks").display()),
    ];
    let refs: Vec<&str> = sets.iter().map(|s| s.as_str()).collect();
    let trace = Some("2".parse().unwrap());
    train(common::config(root.path(), &refs), TrainOptions { quiet: true, trace, ..Default::default() }).unwrap();
    let text = std::fs::read_to_string(root.path().join("chunks/trace.json")).unwrap();
    let json: Value = serde_json::from_str(&text).unwrap();
    let events = json["traceEvents"].as_array().unwrap();
    let tracks: Vec<(u64, u64, &str)> = events
        .iter()
        .filter(|e| e["ph"] == "M" && e["name"] == "thread_name")
        .map(|e| (e["pid"].as_u64().unwrap(), e["tid"].as_u64().unwrap(), e["args"]["name"].as_str().unwrap()))
        .collect();
    let spans_on = |pid: u64, track: &str| -> Vec<&Value> {
        let tids: Vec<u64> = tracks.iter().filter(|t| t.0 == pid && t.2.starts_with(track)).map(|t| t.1).collect();
        events
            .iter()
            .filter(|e| e["ph"] == "X" && e["pid"] == pid && tids.contains(&e["tid"].as_u64().unwrap()))
            .collect()
    };
    for c in 0..2 {
        let forwards = spans_on(0, &format!("tp chunk {c}"));
        assert!(forwards.iter().any(|e| e["name"] == "forward L0"), "chunk {c} runs its own layers");
    }
    let metrics = std::fs::read_to_string(root.path().join("chunks/metrics.jsonl")).unwrap();
    let m: Value = serde_json::from_str(metrics.lines().nth(1).unwrap()).unwrap();
    let idle = spans_on(0, "tp chunks exposed");
    let traced: f64 = idle.iter().map(|e| f(e, "dur") * 1e-6).sum();
    let want = f(&m["time_split"], "tp_s");
    assert!(want > 0.0, "the chunks waited at some point: {m}");
    assert!((traced - want).abs() <= 1e-9 * (idle.len() as f64 + 1.0), "trace {traced} s, metrics {want} s");
}
