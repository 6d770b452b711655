//! `train.device = cuda` through the trainer, on the CPU emulator of the CUDA kernels (feature
//! `emulate`; the same code drives a real GPU with the `cuda` feature): a single rank and a
//! tp2·pp2 grid whose collectives are staged through host memory both follow the CPU engine's
//! loss curve, and the grid records the same collectives as the CPU grid. A dp2 ZeRO-1 pair
//! on the same path gives the same losses bit for bit with overlap on and off.
//!
//! Tolerance: 0.5 % of the CPU loss per step, the size of one bf16 rounding (8-bit mantissa).
//! The GPU path rounds weight copies and GEMM operands to bf16 but keeps fp32 master weights,
//! statistics and accumulation, so the losses differ by a few 1e-4 here (the 50-step curve of
//! boost-cuda's tests ends 0.4 % from the CPU's). A wrong collective or a dropped gradient
//! moves the loss by far more.
#![cfg(feature = "emulate")]

#[path = "../../train/tests/common/mod.rs"]
mod common;

use boost_config::Config;
use boost_train::trainer::Gpus;
use boost_train::{Summary, TrainOptions};

fn train(cfg: Config, opts: TrainOptions) -> anyhow::Result<Summary> {
    boost_train::train_on(cfg, opts, &Gpus::default())
}

fn losses(root: &std::path::Path, name: &str, sets: &[&str]) -> Vec<f64> {
    let mut all: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
    all.push(format!("run.dir={}", root.join(name).display()));
    all.push("model.heads=4".into());
    all.push("model.layers=4".into());
    let refs: Vec<&str> = all.iter().map(|s| s.as_str()).collect();
    let cfg = common::config(root, &refs);
    train(cfg, TrainOptions { quiet: true, ..Default::default() }).unwrap_or_else(|e| panic!("{name}: {e:#}")).losses
}

#[test]
fn gpu_runs_follow_the_cpu_loss_curve() {
    let root = tempfile::tempdir().unwrap();
    common::build_dataset(&root.path().join("data"));
    let acc = ["train.accumulation=2"];
    let cpu = losses(root.path(), "cpu", &acc);
    let gpu = losses(root.path(), "gpu", &["train.accumulation=2", "train.device=cuda"]);
    let grid = losses(
        root.path(),
        "gpu-grid",
        &["train.accumulation=2", "train.device=cuda", "parallel.tp=2", "parallel.pp=2"],
    );
    let cpu_grid = losses(root.path(), "cpu-grid", &["train.accumulation=2", "parallel.tp=2", "parallel.pp=2"]);
    assert!(cpu.last() < cpu.first(), "the CPU run learns: {cpu:?}");
    assert_eq!(cpu_grid.len(), grid.len());
    // Host-staged collectives are recorded like the CPU groups' (fp32 payloads both): the
    // same calls and bytes every step.
    let comm = |name: &str| -> Vec<(u64, u64)> {
        let text = std::fs::read_to_string(root.path().join(name).join("metrics.jsonl")).unwrap();
        text.lines()
            .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
            .filter(|v| v.get("loss").is_some())
            .map(|v| (v["comm_calls"].as_u64().unwrap(), v["comm_bytes"].as_u64().unwrap()))
            .collect()
    };
    let (on_cpu, on_gpu) = (comm("cpu-grid"), comm("gpu-grid"));
    assert_eq!(on_cpu.len(), cpu.len());
    assert!(on_cpu.iter().all(|&(calls, bytes)| calls > 0 && bytes > 0), "{on_cpu:?}");
    assert_eq!(on_gpu, on_cpu, "collectives recorded per step, GPU grid vs CPU grid");
    for (what, run) in [("single GPU rank", &gpu), ("tp2·pp2 on the GPU", &grid)] {
        assert_eq!(run.len(), cpu.len(), "{what}: step count");
        for (i, (g, c)) in run.iter().zip(&cpu).enumerate() {
            assert!((g - c).abs() <= 0.005 * c, "{what}: step {} loss {g} vs CPU {c}\n{run:?}\n{cpu:?}", i + 1);
        }
    }
}

#[test]
fn nccl_collectives_are_refused_where_they_cannot_run() {
    // parallel.gpu_collectives = nccl needs mpirun processes on GPUs of their own; here the
    // ranks are threads on the emulator, which has no NCCL: an error naming the key and the
    // way out, before any step. `auto` (the default) stages through host memory instead, as
    // the test above shows, and `host` is accepted.
    let root = tempfile::tempdir().unwrap();
    common::build_dataset(&root.path().join("data"));
    let run = |name: &str, choice: &str| {
        let dir = format!("run.dir={}", root.path().join(name).display());
        let gc = format!("parallel.gpu_collectives={choice}");
        let sets = ["train.device=cuda", "parallel.tp=2", "train.steps=2", "model.heads=4", gc.as_str(), dir.as_str()];
        train(common::config(root.path(), &sets), TrainOptions { quiet: true, ..Default::default() })
    };
    let err = format!("{:#}", run("nccl", "nccl").expect_err("nccl on the emulator is refused"));
    assert!(err.contains("parallel.gpu_collectives = nccl") && err.contains("\"host\""), "{err}");
    assert_eq!(run("host", "host").expect("host-staged collectives run").losses.len(), 2);
    let bad = boost_config::Config::load(None, &["parallel.gpu_collectives=gloo".to_string()]).err().unwrap();
    assert!(bad.to_string().contains("parallel.gpu_collectives"), "{bad}");
}

/// ZeRO-1 on the GPU path (two ranks sharing the device, collectives staged through host
/// memory): with overlap, the parameter all-gathers of each update stay in flight into the
/// next step's first forward, which completes each device buffer's gather before reading it.
/// The losses equal the blocking order's bit for bit.
#[test]
fn zero1_gathers_into_the_next_forward_match_the_blocking_order_on_the_gpu_path() {
    let root = tempfile::tempdir().unwrap();
    common::build_dataset(&root.path().join("data"));
    let run = |name: &str, overlap: &str| {
        let o = format!("parallel.overlap={overlap}");
        let sets = ["train.device=cuda", "parallel.dp=2", "parallel.zero=1", "parallel.bucket_mb=0.001", o.as_str()];
        losses(root.path(), name, &sets)
    };
    let (on, off) = (run("zero-on", "true"), run("zero-off", "false"));
    assert!(on.len() > 2, "several steps: {on:?}");
    let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    assert_eq!(bits(&on), bits(&off), "overlap on {on:?} vs off {off:?}");
}

/// `boost train` on the emulated GPU at the test corpus's small shape, 2 steps, into `run`.
fn boost_train(root: &std::path::Path, run: &str) -> std::process::Command {
    let cfg = common::config(root, &["train.device=cuda", "train.steps=2"]);
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_boost"));
    cmd.arg("train");
    for (key, value) in [
        ("model.d", cfg.model.d.to_string()),
        ("model.d_ff", cfg.model.d_ff.to_string()),
        ("model.layers", cfg.model.layers.to_string()),
        ("model.heads", cfg.model.heads.to_string()),
        ("model.rank", cfg.model.rank.to_string()),
        ("train.seq_len", cfg.train.seq_len.to_string()),
        ("train.micro_batch", cfg.train.micro_batch.to_string()),
        ("train.steps", "2".into()),
        ("train.eval_every", "0".into()),
        ("train.checkpoint_every", "0".into()),
        ("train.device", "cuda".into()),
        ("data.corpus", "none".into()),
        ("data.dir", cfg.data.dir.clone()),
        ("run.dir", root.join(run).display().to_string()),
        ("run.progress", "false".into()),
    ] {
        cmd.arg("--set").arg(format!("{key}={value}"));
    }
    cmd
}

/// A GPU run whose plan does not fit the device is refused before anything is allocated or
/// written, with the breakdown; one that fits trains. The emulator has no device memory, so
/// `BOOST_GPU_MEMORY` stands in for the device's figure (through the binary: it is read from
/// the environment, which the other tests of this binary share).
#[test]
fn a_gpu_run_larger_than_the_device_is_refused_before_it_starts() {
    let root = tempfile::tempdir().unwrap();
    common::build_dataset(&root.path().join("data"));
    let boost = |run: &str, bytes: &str| {
        boost_train(root.path(), run).arg("--quiet").env("BOOST_GPU_MEMORY", bytes).output().unwrap()
    };
    let out = boost("small", "100000");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("GiB of GPU memory") && err.contains("cuda:0") && err.contains("activations"), "{err}");
    assert!(err.contains("train.micro_batch") && !err.contains("panicked"), "{err}");
    assert!(!root.path().join("small").exists(), "refused before the run directory was made");
    let out = boost("fits", "100000000000");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(root.path().join("fits/metrics.jsonl").is_file());
}

/// A GPU run says what it holds: its log names the activations' dtype (bf16) and the
/// device's peak memory, and every metrics.jsonl record has `device_peak_mib`, the
/// allocator's high-water mark, which can only grow and holds at least the fp32 master weights
/// with their bf16 copies, their gradients and AdamW's two moments. A CPU run has no such key.
#[test]
fn a_gpu_run_reports_its_activation_dtype_and_peak_memory() {
    let root = tempfile::tempdir().unwrap();
    common::build_dataset(&root.path().join("data"));
    let out = boost_train(root.path(), "gpu").output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("activations bf16 (residual stream fp32)"), "{err}");
    let done = err.lines().find(|l| l.starts_with("done:")).unwrap_or_else(|| panic!("{err}"));
    assert!(done.contains("device peak memory") && done.contains("MiB"), "{done}");
    let peaks: Vec<f64> = std::fs::read_to_string(root.path().join("gpu/metrics.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .map(|v| v["device_peak_mib"].as_f64().unwrap_or_else(|| panic!("no device_peak_mib in {v}")))
        .collect();
    assert_eq!(peaks.len(), 2, "{peaks:?}");
    assert!(peaks[1] >= peaks[0], "a high-water mark never falls: {peaks:?}");
    // The model state as the bf16 plan counts it: bf16 weight copies beside fp32 master weights,
    // their gradients and AdamW's moments
    // (of the run's resolved configuration: the vocabulary is the corpus's).
    let cfg = Config::load(Some(&root.path().join("gpu/config.toml")), &[]).unwrap();
    let plan = boost_perf::step::memory(&boost_perf::Setup::from_config(&cfg, None, boost_perf::Dtype::Bf16).unwrap());
    let state_mib = (plan.weights + plan.gradients + plan.optimizer) / (1024.0 * 1024.0);
    assert!(peaks[0] >= state_mib, "peak {} MiB below the model state's {state_mib} MiB", peaks[0]);
    losses(root.path(), "cpu", &["train.steps=1", "train.eval_every=0"]);
    let cpu = std::fs::read_to_string(root.path().join("cpu/metrics.jsonl")).unwrap();
    assert!(!cpu.is_empty() && !cpu.contains("device_peak_mib"), "{cpu}");
}

/// `train.attention` on the emulator: `auto` runs our kernels and says so in the log and in
/// every metrics.jsonl record; `cudnn` is refused before training, naming the key and why,
/// without a panic; a CPU run with `cudnn` is refused by the configuration's check.
#[test]
fn attention_auto_takes_ours_on_the_emulator_and_cudnn_is_refused() {
    let root = tempfile::tempdir().unwrap();
    common::build_dataset(&root.path().join("data"));
    let out = boost_train(root.path(), "auto").output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let line = err.lines().find(|l| l.starts_with("attention:")).unwrap_or_else(|| panic!("{err}"));
    assert!(line.contains("boost (cuDNN not taken: this run is on the CUDA emulator"), "{line}");
    let kinds: Vec<String> = std::fs::read_to_string(root.path().join("auto/metrics.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["attention"].to_string())
        .collect();
    assert_eq!(kinds, ["\"boost\"", "\"boost\""]);

    let out = boost_train(root.path(), "cudnn").args(["--set", "train.attention=cudnn"]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("train.attention = cudnn: this run is on the CUDA emulator, which has no cuDNN"), "{err}");
    assert!(!err.contains("panicked") && !root.path().join("cudnn/metrics.jsonl").exists(), "{err}");

    let cpu = Config::load(None, &["train.attention=cudnn".to_string()]).unwrap_err().to_string();
    assert!(cpu.contains("train.attention") && cpu.contains("train.device = \"cpu\""), "{cpu}");
}

#[test]
fn cuda_graphs_give_the_eager_losses_bit_for_bit() {
    let root = tempfile::tempdir().unwrap();
    common::build_dataset(&root.path().join("data"));
    // One rank, and a tp2·pp2 grid whose host-staged collectives end the lists of launches.
    for (name, grid) in [("one", &[][..]), ("grid", &["parallel.tp=2", "parallel.pp=2"][..])] {
        let run = |graphs: bool| {
            let on = format!("train.cuda_graphs={graphs}");
            let sets: Vec<&str> = ["train.accumulation=2", "train.device=cuda", on.as_str()]
                .into_iter()
                .chain(grid.iter().copied())
                .collect();
            losses(root.path(), &format!("{name}-{graphs}"), &sets)
        };
        let bits = |v: Vec<f64>| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        let (eager, graphs) = (run(false), run(true));
        assert!(eager.len() > 2, "{name}: {eager:?}");
        assert_eq!(bits(graphs.clone()), bits(eager.clone()), "{name}: with graphs {graphs:?}, eager {eager:?}");
    }
    let e = Config::load(None, &["train.cuda_graphs=true".to_string()]).unwrap_err().to_string();
    assert!(e.contains("train.cuda_graphs") && e.contains("train.device"), "{e}");
}

/// The run `sets` describe, on the emulated GPU or the CPU (`train.device`), in `root/name`:
/// its summary or error, and the steps and flags its metrics recorded.
#[allow(clippy::type_complexity)]
fn guarded(root: &std::path::Path, name: &str, sets: &[&str]) -> (Result<Summary, String>, Vec<(u64, bool)>) {
    let dir = root.join(name);
    let mut all: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
    all.push(format!("run.dir={}", dir.display()));
    let refs: Vec<&str> = all.iter().map(|s| s.as_str()).collect();
    let out = train(common::config(root, &refs), TrainOptions { quiet: true, ..Default::default() });
    let text = std::fs::read_to_string(dir.join("metrics.jsonl")).unwrap_or_default();
    let steps = (text.lines().map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()))
        .filter(|v| v.get("loss").is_some())
        .map(|v| {
            let skipped = v["flags"].as_array().is_some_and(|f| f.iter().any(|x| x == "skipped"));
            (v["step"].as_u64().unwrap(), skipped)
        })
        .collect();
    (out.map_err(|e| format!("{e:#}")), steps)
}

/// A single-rank GPU step is queued whole and its figures read after the next step is
/// queued; the guard runs on the device. A rate that ruins the weights at the first update
/// makes step 2's gradient norm NaN: without `train.skip_nonfinite` the run stops there with
/// the CPU run's message, having recorded step 1 only; with it, every later step is skipped
/// and flagged as on the CPU, and the final checkpoint is refused.
#[test]
fn a_gpu_run_stops_or_skips_on_a_non_finite_norm_as_the_cpu_run_does() {
    let root = tempfile::tempdir().unwrap();
    common::build_dataset(&root.path().join("data"));
    let ruin = ["train.lr=1e6", "train.warmup_steps=0", "train.checkpoint_every=0"];
    for skip in [false, true] {
        let s = format!("train.skip_nonfinite={skip}");
        let sets = |device: &'static str| [&ruin[..], &[device, s.as_str()]].concat();
        let (cpu, cpu_steps) = guarded(root.path(), &format!("cpu-{skip}"), &sets("train.device=cpu"));
        let (gpu, gpu_steps) = guarded(root.path(), &format!("gpu-{skip}"), &sets("train.device=cuda"));
        let (cpu, gpu) = (cpu.unwrap_err(), gpu.unwrap_err());
        assert_eq!(gpu_steps, cpu_steps, "skip_nonfinite={skip}: GPU {gpu}\nCPU {cpu}");
        if skip {
            assert_eq!(gpu_steps.len(), 6, "{gpu_steps:?}");
            assert!(gpu_steps[1..].iter().all(|&(_, skipped)| skipped), "{gpu_steps:?}");
            assert!(gpu.contains("not written") && cpu.contains("not written"), "GPU: {gpu}\nCPU: {cpu}");
        } else {
            assert_eq!(gpu_steps, [(1, false)]);
            let said = "the gradient norm became NaN at step 2; the update was not applied";
            assert!(gpu.contains(said) && cpu.contains(said), "GPU: {gpu}\nCPU: {cpu}");
        }
    }
}

/// Steps read one behind still give a record for every step in order, with evaluations and
/// checkpoints at the steps they are due (their steps are read at once).
#[test]
fn a_gpu_run_records_every_step_in_order_with_its_evaluations_and_checkpoints() {
    let root = tempfile::tempdir().unwrap();
    common::build_dataset(&root.path().join("data"));
    let sets = ["train.device=cuda", "train.steps=7", "train.eval_every=3", "train.checkpoint_every=4"];
    let (summary, steps) = guarded(root.path(), "run", &sets);
    let summary = summary.unwrap();
    assert_eq!(steps, (1..=7).map(|s| (s, false)).collect::<Vec<_>>());
    assert_eq!(summary.losses.len(), 7);
    assert!(summary.losses.iter().all(|l| l.is_finite()), "{:?}", summary.losses);
    assert_eq!(summary.val.iter().map(|v| v.0).collect::<Vec<_>>(), [3, 6, 7]);
    let last = summary.last_checkpoint.expect("the final checkpoint");
    let meta = std::fs::read_to_string(last.join("meta.json")).unwrap();
    assert!(meta.contains("\"step\": 7") || meta.contains("\"step\":7"), "{meta}");
}

/// A checkpoint of queued steps holds the update count the device used (its reports read
/// before the checkpoint): resuming from it continues the run bit for bit.
#[test]
fn a_gpu_run_resumes_bit_for_bit_from_a_checkpoint_of_queued_steps() {
    let root = tempfile::tempdir().unwrap();
    common::build_dataset(&root.path().join("data"));
    let (full, _) = guarded(root.path(), "full", &["train.device=cuda", "train.checkpoint_every=3"]);
    let full = full.unwrap();
    assert_eq!(full.losses.len(), 6);
    let run2 = format!("run.dir={}", root.path().join("resumed").display());
    let cfg = common::config(root.path(), &["train.device=cuda", "train.checkpoint_every=3", &run2]);
    let ck = root.path().join("full/checkpoints/step-00000003");
    let resumed = train(cfg, TrainOptions { resume: Some(ck), quiet: true, ..Default::default() }).unwrap();
    let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    assert_eq!(bits(&resumed.losses), bits(&full.losses[3..]), "resumed {:?}, whole {:?}", resumed.losses, full.losses);
}
