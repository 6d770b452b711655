//! `train.async_checkpoint`: training goes on while a background thread writes the
//! checkpoint, and a `kill -9` in the middle of that write leaves `latest` as it was,
//! loadable and resumable to the uninterrupted run's losses (bit for bit: a resume is exact).

mod common;

use common::*;
use std::fs;
use std::path::Path;
use std::time::{Duration, Instant};

const ASYNC: [&str; 2] = ["train.async_checkpoint=true", "train.checkpoint_every=1"];

fn steps_logged(run_dir: &Path) -> usize {
    fs::read_to_string(run_dir.join("metrics.jsonl")).map(|t| t.lines().count()).unwrap_or(0)
}

#[test]
fn a_kill_during_a_background_write_leaves_latest_resumable() {
    let root = tempfile::tempdir().unwrap();
    let data = dataset(root.path());
    let (run_dir, full) = (root.path().join("run"), root.path().join("full"));
    let args = |dir: &Path, steps: &str| {
        let mut v: Vec<&str> = ASYNC.to_vec();
        v.push(steps);
        tiny(&data, dir, &v)
    };
    run(boost().arg("train").args(args(&full, "train.steps=6")).arg("--quiet"));
    run(boost().arg("train").args(args(&run_dir, "train.steps=2")).arg("--quiet"));
    let ck = run_dir.join("checkpoints");
    assert_eq!(fs::read_to_string(ck.join("latest")).unwrap().trim(), "step-00000002");

    // The writer stalls after its first tensor: step 3's checkpoint stays half-written while
    // step 4 trains, then the process is killed.
    let mut child = boost()
        .arg("train")
        .args(args(&run_dir, "train.steps=100"))
        .args(["--quiet", "--resume"])
        .env("BOOST_CHECKPOINT_WRITE_DELAY_MS", "600000")
        .spawn()
        .unwrap();
    let t = Instant::now();
    while steps_logged(&run_dir) < 4 {
        assert!(t.elapsed() < Duration::from_secs(120), "step 4 never trained during the stalled write");
        std::thread::sleep(Duration::from_millis(20));
    }
    let tmp = ck.join(".tmp-step-00000003");
    let half = tmp.join("model.safetensors");
    assert!(half.is_file() && !tmp.join("part.pp00.tp00.dp00.json").exists(), "step 3's write is under way");
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(!ck.join("step-00000003").exists(), "no half-written checkpoint took a step's name");
    assert_eq!(fs::read_to_string(ck.join("latest")).unwrap().trim(), "step-00000002", "latest is untouched");

    // `latest` loads and resumes; the next start removes the half-written directory.
    run(boost().args(["eval", "--checkpoint"]).arg(&run_dir));
    run(boost().arg("train").args(args(&run_dir, "train.steps=6")).args(["--quiet", "--resume"]));
    assert!(!tmp.exists(), "the temporary is removed at the next start");
    assert_eq!(fs::read_to_string(ck.join("latest")).unwrap().trim(), "step-00000006");
    let (a, b) = (losses(&run_dir), losses(&full));
    // The resume replaced the killed run's lines of steps 3 and 4 with its own.
    assert_eq!(a.len(), 6);
    let bits = |v: &[f64]| v[v.len() - 4..].iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    assert_eq!(bits(&a), bits(&b), "resumed {a:?} vs uninterrupted {b:?}");
}

/// The same run written synchronously and in the background gives identical checkpoints.
#[test]
fn background_and_synchronous_checkpoints_hold_the_same_state() {
    let root = tempfile::tempdir().unwrap();
    let data = dataset(root.path());
    let grid = ["parallel.tp=2", "parallel.pp=2", "train.accumulation=2"];
    let (a, b) = (root.path().join("sync"), root.path().join("async"));
    run(boost().arg("train").args(tiny(&data, &a, &grid)).arg("--quiet"));
    let with_async: Vec<&str> = grid.iter().copied().chain(["train.async_checkpoint=true"]).collect();
    run(boost().arg("train").args(tiny(&data, &b, &with_async)).arg("--quiet"));
    for step in ["step-00000002", "step-00000004"] {
        let (x, y) = (a.join("checkpoints").join(step), b.join("checkpoints").join(step));
        let names = |d: &Path| {
            let mut v: Vec<String> =
                fs::read_dir(d).unwrap().flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect();
            v.sort();
            v
        };
        assert_eq!(names(&x), names(&y), "{step}: the same files");
        for n in names(&x).iter().filter(|n| n.ends_with(".safetensors")) {
            assert_eq!(fs::read(x.join(n)).unwrap(), fs::read(y.join(n)).unwrap(), "{step}/{n}");
        }
    }
}
