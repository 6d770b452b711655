//! `boost plan`: argument handling, JSON, search, hardware files, calibration fit, chart.

use boost_config::{Arch, Recompute, Scheme};
use boost_perf::cli::{PlanArgs, setup_from_args};
use boost_perf::search::{SearchOptions, search};
use boost_perf::*;
use clap::Parser;

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
    assert_eq!(s.norm, NormKind::Local);
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

#[test]
fn search_ranks_feasible_layouts_first() {
    let hw = Hardware::preset("a100-80gb").unwrap();
    let mut base = Setup::preset("7b", Arch::Cola).unwrap();
    base.model.vocab = 32000;
    let found =
        search(&base, &hw, &SearchOptions { devices: 4, global_batch: 8, allow_local: false, max_micro_batch: 8 });
    assert!(found.len() > 20);
    assert!(found[0].prediction.fits);
    let fit: Vec<_> = found.iter().take_while(|c| c.prediction.fits).collect();
    assert!(fit.windows(2).all(|w| w[0].prediction.iteration_time_s <= w[1].prediction.iteration_time_s));
    assert!(fit.iter().all(|c| c.prediction.memory.total <= hw.usable_memory()));
    assert!(found.iter().all(|c| c.setup.norm != NormKind::Local || c.setup.tp == 1));
    assert!(found.iter().all(|c| c.setup.world() == 4 && c.setup.global_batch() == 8));
}

#[test]
fn the_memory_model_agrees_with_the_papers_recompute_facts() {
    // Spec §7: at 7B TP4, micro-batch 4, the vanilla baseline needed full-layer recompute to fit.
    let hw = Hardware::preset("a100-80gb").unwrap();
    use boost_perf::paper::{CASES, Variant, paper_setup};
    let seven = CASES.iter().find(|c| c.preset == "7b").unwrap();
    let mut v = paper_setup(seven, Variant::Vanilla);
    assert_eq!(v.recompute, Recompute::Full);
    assert!(predict(&v, &hw).fits);
    v.recompute = Recompute::None;
    assert!(!predict(&v, &hw).fits);
    assert!(predict(&paper_setup(seven, Variant::FullRank), &hw).fits);
    assert!(predict(&paper_setup(seven, Variant::Btp), &hw).fits);
}

#[test]
fn hardware_toml_round_trips_and_rejects_nonsense() {
    for name in boost_perf::hardware::preset_names() {
        let hw = Hardware::preset(name).unwrap();
        let again = Hardware::from_toml_str(&hw.to_toml()).unwrap();
        assert_eq!(hw, again, "{name}");
    }
    let mut bad = Hardware::preset("h100").unwrap();
    bad.compute.peak_flops = -1.0;
    let e = Hardware::from_toml_str(&bad.to_toml()).unwrap_err();
    assert!(format!("{e:#}").contains("compute.peak_flops"), "{e:#}");
    assert!(Hardware::load("no-such-cluster").is_err());
}

#[test]
fn collective_times_follow_the_alpha_beta_formulas() {
    let hw = Hardware::preset("a100-80gb").unwrap();
    let mut s = Setup::preset("7b", Arch::Cola).unwrap();
    s.tp = 4;
    let timer = Timer::new(&hw, &s);
    let c = Collective {
        label: "x".into(),
        phase: Phase::Forward,
        kind: CollKind::AllReduce,
        group: Group::Tp,
        elements: 1 << 20,
        elements_f32: 0,
        dtype_bytes: 2,
    };
    let (a, b, n, p) = (hw.intra_node.alpha_s, hw.intra_node.bandwidth, (2u64 << 20) as f64, 4.0);
    assert!((timer.collective(&c) - (2.0 * (p - 1.0) * a + 2.0 * (p - 1.0) / p * n / b)).abs() < 1e-15);
    let g = Collective { kind: CollKind::AllGather, ..c.clone() };
    assert!((timer.collective(&g) - ((p - 1.0) * a + (p - 1.0) / p * n / b)).abs() < 1e-15);
    // Eight TP ranks do not fit in a 4-GPU node: the network link is used.
    s.tp = 8;
    let timer = Timer::new(&hw, &s);
    let (a, b, p) = (hw.inter_node.alpha_s, hw.inter_node.bandwidth, 8.0);
    assert!((timer.collective(&c) - (2.0 * (p - 1.0) * a + 2.0 * (p - 1.0) / p * n / b)).abs() < 1e-15);
}

#[test]
fn calibration_fit_recovers_a_known_curve() {
    use boost_perf::calibrate::{GemmSample, SHAPES, fit_curve};
    let (p, c) = (120e9, 24.0);
    let f = |x: usize| x as f64 / (x as f64 + c);
    let samples: Vec<GemmSample> =
        SHAPES.iter().map(|&(m, n, k)| GemmSample { m, n, k, flops_per_s: p * f(m) * f(n) * f(k) }).collect();
    let (fp, fc, rms) = fit_curve(&samples);
    assert!((fp / p - 1.0).abs() < 1e-3, "{fp}");
    assert!((fc - c).abs() < 0.5, "{fc}");
    assert!(rms < 1e-3);
}

#[test]
fn calibration_measures_a_gemm() {
    let r = boost_perf::calibrate::measure_gemm(64, 64, 64, 1);
    assert!(r > 1e8, "{r}");
}

#[test]
fn chart_renders_a_png() {
    let hw = Hardware::preset("a100-80gb").unwrap();
    let s = Setup::preset("1b", Arch::Cola).unwrap();
    let p = predict(&s, &hw);
    let dir = std::env::temp_dir().join(format!("boost-perf-chart-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("c.png");
    boost_perf::chart::draw_breakdown(&path, false, "test", "s", &[("a".into(), p.breakdown.clone(), 1.0)]).unwrap();
    let bytes = std::fs::read(&path).unwrap();
    assert_eq!(&bytes[1..4], b"PNG");
    std::fs::remove_dir_all(&dir).unwrap();
}
