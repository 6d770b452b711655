//! The planner: search and hardware files (the arguments of `boost plan`
//! are tested in boost-cli).

mod common;

use boost_config::{Arch, Recompute};
use boost_perf::search::{SearchOptions, search};
use boost_perf::*;
use common::gemm;

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
    assert!(found.iter().all(|c| c.setup.norm != NormMode::Local || c.setup.tp == 1));
    assert!(found.iter().all(|c| c.setup.world() == 4 && c.setup.global_batch() == 8));
}

#[test]
fn the_memory_model_agrees_with_the_papers_recompute_facts() {
    // Spec §7: at 7B TP4, micro-batch 4, the vanilla baseline needed full-layer recompute to fit.
    let hw = Hardware::preset("a100-80gb").unwrap();
    use boost_perf::paper::{CASES, Method, paper_setup};
    let seven = CASES.iter().find(|c| c.preset == "7b").unwrap();
    let mut v = paper_setup(seven, Method::Vanilla);
    assert_eq!(v.recompute, Recompute::Full);
    assert!(predict(&v, &hw).fits);
    v.recompute = Recompute::None;
    assert!(!predict(&v, &hw).fits);
    assert!(predict(&paper_setup(seven, Method::FullRank), &hw).fits);
    assert!(predict(&paper_setup(seven, Method::Btp), &hw).fits);
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
        group: CollGroup::Tp,
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

/// The cpu preset with `lines` added to its `[compute]` section.
fn cpu_with(lines: &str) -> anyhow::Result<Hardware> {
    let text = boost_perf::hardware::PRESETS.iter().find(|(n, _)| *n == "cpu").unwrap().1;
    Hardware::from_toml_str(&text.replacen("[compute]\n", &format!("[compute]\n{lines}\n"), 1))
}

#[test]
fn the_shared_rank_and_per_dimension_keys_are_refused_out_of_range_by_key() {
    for bad in ["shared_rank_efficiency = 0.0", "shared_rank_efficiency = 2.5", "shared_rank_efficiency = nan"] {
        let e = cpu_with(bad).unwrap_err().to_string();
        assert!(e.contains("compute.shared_rank_efficiency"), "{bad}: {e}");
    }
    let e = cpu_with("gemm_half_dims = [1.0, -2.0, 3.0]").unwrap_err().to_string();
    assert!(e.contains("compute.gemm_half_dims") && e.contains("index 1"), "{e}");
    assert!(cpu_with("shared_rank_efficiency = 0.9\ngemm_half_dims = [50.0, 10.0, 0.0]").is_ok());
}

#[test]
fn ranks_sharing_a_device_each_get_its_shared_efficiency_over_world() {
    let plain = cpu_with("").unwrap();
    let shared = cpu_with("shared_rank_efficiency = 0.8").unwrap();
    let one = Setup::preset("cola-60m", boost_config::Arch::Full).unwrap();
    let two = Setup { dp: 2, ..one.clone() };
    let g = gemm(2048, 512, 512);
    let overhead = plain.compute.kernel_overhead_s;
    let t = |hw: &Hardware, s: &Setup| Timer::new(hw, s).gemm(&g) - overhead;
    // One rank owns the machine: the key changes nothing.
    assert_eq!(t(&shared, &one), t(&plain, &one));
    // Two: half of it each without the key, 0.8 of that with it.
    assert!((t(&plain, &two) / t(&plain, &one) - 2.0).abs() < 1e-12);
    assert!((t(&shared, &two) / t(&plain, &two) - 1.0 / 0.8).abs() < 1e-12);
}

#[test]
fn each_gemm_dimension_reads_its_own_half_dimension() {
    let hw = cpu_with("gemm_half_dims = [64.0, 0.0, 0.0]").unwrap();
    let s = Setup::preset("cola-60m", boost_config::Arch::Full).unwrap();
    let timer = Timer::new(&hw, &s);
    let g = gemm;
    let eta = hw.compute.gemm_efficiency;
    // Only M pays: M = 64 halves the rate, a short N or K costs nothing with c = 0.
    assert!((timer.gemm_efficiency(&g(64, 8, 8)) - eta * 0.5).abs() < 1e-12);
    assert!((timer.gemm_efficiency(&g(4096 - 64, 64, 64)) - eta * (4096.0 - 64.0) / 4096.0).abs() < 1e-12);
}
