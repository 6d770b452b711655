//! Batch jobs: with stderr not a terminal (here a pipe, as under SLURM, nohup or mpirun) a
//! run prints a timestamped line every `train.log_every` steps and at the last, and none when
//! quiet or with `train.log_every = 0`.

mod common;

use common::{boost, dataset, run, tiny};

fn log_lines(stderr: &[u8]) -> Vec<String> {
    String::from_utf8_lossy(stderr)
        .lines()
        .filter(|l| l.contains(" step ") && l.contains(" eta "))
        .map(String::from)
        .collect()
}

#[test]
fn a_run_without_a_terminal_logs_every_n_steps() {
    let root = tempfile::tempdir().unwrap();
    let data = dataset(root.path());
    let out =
        run(boost().arg("train").args(tiny(&data, &root.path().join("a"), &["train.steps=5", "train.log_every=2"])));
    let lines = log_lines(&out.stderr);
    assert_eq!(lines.len(), 3, "steps 2, 4 and the last (5):\n{}", String::from_utf8_lossy(&out.stderr));
    // The peak MFU is taken against is this machine's, measured at the start, and named.
    let stderr = String::from_utf8_lossy(&out.stderr);
    let peak = stderr.lines().find_map(|l| l.split("GEMM peak, measured now: ").nth(1)).expect("the peak's line");
    let gflops: f64 = peak.split_whitespace().next().unwrap().parse().unwrap();
    assert!(gflops > 0.0 && gflops.is_finite(), "{peak}");
    for (line, step) in lines.iter().zip([2, 4, 5]) {
        let f: Vec<&str> = line.split_whitespace().collect();
        // 2026-11-24T03:45:12Z step 2/5 loss 5.6 lr 1e-3 grad_norm 0.8 tok/s 900 MFU 1.2% eta 0:00:01
        assert_eq!(f.len(), 15, "{line}");
        assert!(f[0].len() == 20 && f[0].ends_with('Z') && f[0].as_bytes()[10] == b'T', "UTC timestamp: {line}");
        assert_eq!((f[1], f[2]), ("step", format!("{step}/5").as_str()), "{line}");
        for (k, i) in [("loss", 3), ("lr", 5), ("grad_norm", 7), ("tok/s", 9)] {
            assert_eq!(f[i], k, "{line}");
            let v: f64 = f[i + 1].parse().unwrap_or_else(|_| panic!("{k} is a number: {line}"));
            assert!(v.is_finite() && v > 0.0, "{k} {v}: {line}");
        }
        assert_eq!(f[11], "MFU", "{line}");
        let mfu: f64 = f[12].trim_end_matches('%').parse().unwrap();
        assert!(mfu > 0.0 && mfu < 100.0, "{line}");
        assert_eq!(f[13], "eta", "{line}");
        assert_eq!(f[14].matches(':').count(), 2, "{line}");
    }
    assert!(lines[2].ends_with("eta 0:00:00"), "nothing left after the last step: {}", lines[2]);

    let quiet =
        run(boost().arg("train").arg("--quiet").args(tiny(&data, &root.path().join("b"), &["train.log_every=1"])));
    assert!(log_lines(&quiet.stderr).is_empty());
    let off = run(boost().arg("train").args(tiny(&data, &root.path().join("c"), &["train.log_every=0"])));
    assert!(log_lines(&off.stderr).is_empty(), "{}", String::from_utf8_lossy(&off.stderr));
}
