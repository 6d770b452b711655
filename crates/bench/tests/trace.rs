//! `boost bench --grid … --trace FILE`: the timed steps of a tp2·pp2 grid as a trace whose
//! exposed time per rank and group is the bench's own time split, and a file boost did not
//! write is refused before any step and kept.

use boost_bench::BenchOptions;
use boost_config::Config;
use serde_json::Value;

fn setup() -> (BenchOptions, Config) {
    let sets = [
        "model.arch=cola",
        "model.d=32",
        "model.d_ff=64",
        "model.rank=8",
        "model.heads=2",
        "model.layers=2",
        "model.vocab=64",
        "parallel.tp=2",
        "parallel.pp=2",
        "train.seq_len=16",
        "train.micro_batch=2",
        "train.accumulation=2",
    ];
    let cfg = Config::load(None, &sets.map(String::from)).unwrap();
    let opts = BenchOptions {
        models: vec![cfg.model.clone()],
        seq: 16,
        micro_batch: 2,
        threads: 1,
        warmup: 1,
        rounds: 1,
        python: None,
    };
    (opts, cfg)
}

#[test]
fn the_trace_of_the_timed_step_is_the_time_split_of_every_rank() {
    let (opts, cfg) = setup();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("grid.json");
    let report = boost_bench::grid::run(&opts, &cfg, None, Some(&path), &|_| {}).unwrap();
    let json: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let events = json["traceEvents"].as_array().unwrap();
    let procs = events.iter().filter(|e| e["ph"] == "M" && e["name"] == "process_name").count();
    assert_eq!(procs, 4, "one process per rank");
    for row in &report.rows {
        let mine: Vec<&Value> = events.iter().filter(|e| e["ph"] == "X" && e["pid"] == row.rank as u64).collect();
        let steps: Vec<&str> =
            mine.iter().filter(|e| e["cat"] == "step").map(|e| e["name"].as_str().unwrap()).collect();
        assert_eq!(steps, ["step 2"], "rank {}: the timed step only, not the warm-up", row.rank);
        let exposed = |g: &str| -> f64 {
            let calls = mine.iter().filter(|e| e["args"]["group"] == g);
            calls.map(|e| e["args"]["exposed_us"].as_f64().unwrap() * 1e-6).sum()
        };
        // The same durations, summed in another order: the tolerance is f64 rounding.
        let s = &row.split;
        for (g, want) in [("tp", s.tp_s), ("pp", s.pp_s), ("dp", s.dp_s), ("world", s.world_s)] {
            assert!((exposed(g) - want).abs() < 1e-9, "rank {} {g}: trace {} s, split {want} s", row.rank, exposed(g));
        }
        assert!(s.pp_s > 0.0 && s.tp_s > 0.0, "rank {}: the grid communicates", row.rank);
    }
}

#[test]
fn a_file_boost_did_not_write_is_refused_before_any_step_and_kept() {
    let (opts, cfg) = setup();
    let dir = tempfile::tempdir().unwrap();
    let theirs = dir.path().join("notes.json");
    std::fs::write(&theirs, "{\"my\": \"notes\"}").unwrap();
    let logged = std::cell::Cell::new(0);
    let err = boost_bench::grid::run(&opts, &cfg, None, Some(&theirs), &|_| logged.set(logged.get() + 1)).unwrap_err();
    let msg = format!("{err:#}");
    assert!(msg.contains("notes.json") && msg.contains("not a trace boost wrote"), "{msg}");
    assert_eq!(std::fs::read_to_string(&theirs).unwrap(), "{\"my\": \"notes\"}", "kept byte for byte");
    assert_eq!(logged.get(), 0, "refused before any step");
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1, "nothing else written");
}
