//! `boost plan` against this machine and against a run.

use crate::common::*;
use boost_cli::plan::{PlanArgs, setup_from_args};
use boost_config::{Recompute, Scheme};
use boost_perf::*;
use clap::Parser;

/// `boost plan --validate RUN` predicts the run from its own config and sets every part beside
/// the medians of its metrics (the first step left out).
#[test]
fn plan_validate_sets_the_plan_beside_the_run() {
    let root = tempfile::tempdir().unwrap();
    let data = dataset(root.path());
    let run_dir = root.path().join("run");
    run(boost().arg("train").args(tiny(&data, &run_dir, &["parallel.dp=2", "train.steps=6"])).arg("--quiet"));
    let preset = concat!(env!("CARGO_MANIFEST_DIR"), "/../perf/presets/cpu.toml");
    let out = run(boost().args(["plan", "--json", "--cluster", preset, "--validate"]).arg(&run_dir));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["steps"], 5, "{v}");
    let part = |name: &str| v["parts"].as_array().unwrap().iter().find(|p| p["name"] == name).cloned().unwrap();
    let mut steps: Vec<f64> = metric(&run_dir, "step_time_s")[1..].iter().map(|x| x.as_f64().unwrap()).collect();
    steps.sort_by(f64::total_cmp);
    let step = part("step");
    assert_eq!(step["measured_s"].as_f64().unwrap(), steps[2], "the median of steps 2-6");
    let (p, m) = (step["predicted_s"].as_f64().unwrap(), step["measured_s"].as_f64().unwrap());
    assert!(p > 0.0);
    assert!((step["error"].as_f64().unwrap() - (p / m - 1.0)).abs() < 1e-12);
    let mut dp: Vec<f64> = metric(&run_dir, "time_split")[1..].iter().map(|t| t["dp_s"].as_f64().unwrap()).collect();
    dp.sort_by(f64::total_cmp);
    assert_eq!(part("dp exposed")["measured_s"].as_f64().unwrap(), dp[2]);
    assert!(part("dp in flight")["predicted_s"].as_f64().unwrap() > 0.0, "dp = 2 reduces gradients");
    assert!(part("optimizer")["measured_s"].is_null(), "the metrics do not split the optimizer out");
    let table =
        String::from_utf8(run(boost().args(["plan", "--cluster", preset, "--validate"]).arg(&run_dir)).stdout).unwrap();
    for row in ["step", "compute (optimizer included)", "tp exposed", "pp and bubble", "dp in flight", "not split"] {
        assert!(table.contains(row), "{row} in\n{table}");
    }
    // A GPU run must name the cluster it ran on: the default is this CPU.
    let gpu_run = root.path().join("gpu-run");
    std::fs::create_dir(&gpu_run).unwrap();
    let config = std::fs::read_to_string(run_dir.join("config.toml")).unwrap();
    assert!(config.contains("device = \"cpu\""), "{config}");
    std::fs::write(gpu_run.join("config.toml"), config.replace("device = \"cpu\"", "device = \"cuda\"")).unwrap();
    std::fs::copy(run_dir.join("metrics.jsonl"), gpu_run.join("metrics.jsonl")).unwrap();
    let e = fails(&boost().args(["plan", "--validate"]).arg(&gpu_run).output().unwrap());
    assert!(e.contains("train.device = cuda") && e.contains("--cluster h100"), "{e}");
    // A directory that is not a run is named.
    let e = fails(&boost().args(["plan", "--cluster", preset, "--validate"]).arg(&data).output().unwrap());
    assert!(e.contains("config.toml") && e.contains(&data.display().to_string()), "{e}");
}

/// `--cluster cpu` describes this machine: calibrated on first use, kept, and read back (saying
/// which file and when) the next time.
#[test]
fn plan_on_cluster_cpu_calibrates_this_machine_once() {
    let cache = tempfile::tempdir().unwrap();
    let plan = || {
        boost()
            .env("BOOST_CACHE_DIR", cache.path())
            .args(["plan", "--cluster", "cpu", "--set", "model.vocab=512", "--set", "model.preset=demo"])
            .output()
            .unwrap()
    };
    let first = plan();
    assert!(first.status.success(), "{}", String::from_utf8_lossy(&first.stderr));
    let err = String::from_utf8_lossy(&first.stderr);
    assert!(err.contains("calibrating this machine"), "{err}");
    let files: Vec<_> = std::fs::read_dir(cache.path()).unwrap().map(|e| e.unwrap().path()).collect();
    let kept = files
        .iter()
        .find(|p| p.extension().is_some_and(|e| e == "toml") && !p.to_string_lossy().ends_with("-mpi.toml"));
    let kept = kept.unwrap_or_else(|| panic!("a calibration is kept: {files:?}"));
    let text = std::fs::read_to_string(kept).unwrap();
    let second = plan();
    assert!(second.status.success());
    let err = String::from_utf8_lossy(&second.stderr);
    assert!(
        !err.contains("calibrating") && err.contains("calibration of") && err.contains(&kept.display().to_string()),
        "{err}"
    );
    assert_eq!(std::fs::read_to_string(kept).unwrap(), text, "read back, not measured again");
    assert_eq!(first.stdout, second.stdout, "the same description, the same plan");
    // A file there that is not a calibration is named and left as it is, never measured over.
    std::fs::write(kept, "# the user's own notes\n").unwrap();
    let third = plan();
    let err = String::from_utf8_lossy(&third.stderr);
    assert_eq!(third.status.code(), Some(1), "{err}");
    assert!(err.contains(&kept.display().to_string()) && !err.contains("calibrating"), "{err}");
    assert_eq!(std::fs::read_to_string(kept).unwrap(), "# the user's own notes\n");
}

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    plan: PlanArgs,
}

fn args(line: &str) -> PlanArgs {
    let argv = std::iter::once("plan").chain(line.split_whitespace());
    Cli::try_parse_from(argv).unwrap().plan
}

#[test]
fn shorthand_flags_reach_the_setup() {
    let hw = Hardware::preset("a100-80gb").unwrap();
    let a = args(
        "--model 7b --arch cola --scheme btp --norm local --tp 4 --pp 2 --micro-batch 2 --seq 1024 --global-batch 16 --recompute lowrank --vocab 32000",
    );
    let s = setup_from_args(&a, &hw).unwrap();
    assert_eq!((s.model.d, s.tp, s.pp, s.micro_batch, s.seq), (4096, 4, 2, 2, 1024));
    assert_eq!(s.norm, NormMode::Local);
    assert_eq!(s.scheme, Scheme::Btp);
    assert_eq!(s.recompute, Recompute::Lowrank);
    assert_eq!(s.accumulation, 8);
    assert_eq!(s.dtype, Dtype::Bf16);
    let s = setup_from_args(&args("--model 1b --arch full --set train.seq_len=512"), &hw).unwrap();
    assert_eq!((s.scheme, s.seq), (Scheme::Megatron, 512));
    let cpu = Hardware::preset("cpu").unwrap();
    assert_eq!(setup_from_args(&args("--model cola-60m"), &cpu).unwrap().dtype, Dtype::F32);
}

#[test]
fn invalid_layouts_name_the_key() {
    let hw = Hardware::preset("a100-80gb").unwrap();
    let e = setup_from_args(&args("--model 7b --arch cola --scheme megatron"), &hw).unwrap_err();
    assert!(format!("{e:#}").contains("parallel.scheme"), "{e:#}");
    let e = setup_from_args(&args("--model 7b --arch full --recompute lowrank"), &hw).unwrap_err();
    assert!(format!("{e:#}").contains("lowrank"), "{e:#}");
    let e = setup_from_args(&args("--model cola-130m --tp 8"), &hw).unwrap_err();
    assert!(format!("{e:#}").contains("parallel.tp"), "{e:#}");
}

#[test]
fn json_has_the_iteration_time_and_breakdown() {
    let hw = Hardware::preset("a100-80gb").unwrap();
    let s = setup_from_args(&args("--model 3b --arch cola --tp 2 --micro-batch 4 --seq 4096"), &hw).unwrap();
    let v = serde_json::to_value(predict(&s, &hw)).unwrap();
    assert!(v["iteration_time_s"].as_f64().unwrap() > 0.0);
    for k in ["compute_s", "communication_s", "bubble_s", "tp_comm_s", "gemm_s", "recompute_s"] {
        assert!(v["breakdown"][k].is_number(), "{k}");
    }
    assert!(v["memory"]["total"].is_number());
}
