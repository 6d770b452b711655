//! The GPU presets' GEMM tile model and attention table (docs/COST_MODEL.md §6), and cluster
//! files without them.

mod common;

use boost_config::Arch;
use boost_perf::paper::{CASES, Method, paper_setup};
use boost_perf::*;
use common::gemm;

fn bf16_setup() -> Setup {
    let mut s = Setup::preset("7b", Arch::Cola).unwrap();
    s.dtype = Dtype::Bf16;
    s
}

#[test]
fn a100_gemm_time_is_a_hand_counted_number_of_waves() {
    let hw = Hardware::preset("a100-80gb").unwrap();
    let s = bf16_setup();
    let timer = Timer::new(&hw, &s);
    let g = gemm(16384, 512, 4096);
    // The per-SM rate: η_max = 0.80 is the measured fraction of an 8192³ GEMM, which in 128×128
    // tiles is 64·64 = 4096 tiles in ⌈4096/108⌉ = 38 waves with k factor 8192/(8192 + 128).
    let reference = 4096.0 / (38.0 * 108.0) * (8192.0 / 8320.0);
    let sm_rate = 312e12 / 108.0 * (0.80 / reference);
    // 16384×512 in 128×128 tiles: 128·4 = 512 tiles, ⌈512/108⌉ = 5 waves of one
    // 128×128×4096 tile each (k factor 4096/4224), plus the 2 µs launch.
    let tile_s = 2.0 * 128.0 * 128.0 * 4096.0 / (sm_rate * (4096.0 / 4224.0));
    let want = 5.0 * tile_s + 2e-6;
    let plan = timer.tile_model().unwrap().plan(&g);
    assert_eq!((plan.tile, plan.split_k, plan.tiles, plan.waves), ([128, 128], 1, 512, 5), "{plan:?}");
    assert!((timer.gemm(&g) / want - 1.0).abs() < 1e-12, "{} vs {want}", timer.gemm(&g));
    assert!((want - 296.27e-6).abs() < 0.01e-6, "{want}");
    // Compute-bound: the operands stream in 84.6 µs.
    assert!((plan.memory_s - 155_189_248.0 / (2.039e12 * 0.9)).abs() < 1e-15);
    assert!(plan.memory_s < plan.compute_s);
}

#[test]
fn one_tile_past_a_full_wave_is_slower_per_flop() {
    let hw = Hardware::preset("a100-80gb").unwrap();
    let s = bf16_setup();
    let timer = Timer::new(&hw, &s);
    // 108 tiles of 128×128 fill the 108 SMs once; 109 need a second wave (or split-K).
    let full = gemm(108 * 128, 128, 4096);
    let past = gemm(109 * 128, 128, 4096);
    let per_flop = |g: &Gemm| timer.gemm(g) / g.flops();
    assert!(per_flop(&past) > 1.3 * per_flop(&full), "{} vs {}", per_flop(&past), per_flop(&full));
    let tiles = timer.tile_model().unwrap();
    assert_eq!(tiles.plan_with(&full, [128, 128], 1).waves, 1);
    assert_eq!(tiles.plan_with(&past, [128, 128], 1).waves, 2);
}

#[test]
fn each_call_gets_the_tile_that_quantizes_it_best() {
    // Without 128×128, n = 384 fits 256×128 tiles exactly but wastes a third of 128×256 tiles.
    let text = PRESETS_A100
        .replace("gemm_tiles = [[128, 128], [128, 256], [256, 128]]", "gemm_tiles = [[128, 256], [256, 128]]");
    let hw = Hardware::from_toml_str(&text).unwrap();
    let s = bf16_setup();
    let timer = Timer::new(&hw, &s);
    let tall = gemm(16384, 384, 4096);
    let tiles = timer.tile_model().unwrap();
    assert_eq!(tiles.plan(&tall).tile, [256, 128]);
    let wide = gemm(384, 16384, 4096);
    assert_eq!(tiles.plan(&wide).tile, [128, 256]);
    let forced = tiles.plan_with(&tall, [128, 256], 1).time_s();
    assert!(tiles.plan(&tall).time_s() < forced);
}

const PRESETS_A100: &str = include_str!("../presets/a100-80gb.toml");

#[test]
fn h100_reproduces_its_measured_8192_cubed_rate() {
    let s = bf16_setup();
    for (name, measured) in [("h100", 0.807), ("h200", 0.797), ("a100-80gb", 0.80)] {
        let hw = Hardware::preset(name).unwrap();
        let timer = Timer::new(&hw, &s);
        let g = gemm(8192, 8192, 8192);
        assert!((timer.gemm_efficiency(&g) / measured - 1.0).abs() < 1e-12, "{name}");
        let t = g.flops() / (hw.compute.peak_flops * measured) + hw.compute.kernel_overhead_s;
        assert!((timer.gemm(&g) / t - 1.0).abs() < 1e-12, "{name}");
    }
}

#[test]
fn the_attention_table_gives_the_published_points() {
    let hw = Hardware::preset("a100-80gb").unwrap();
    let s = bf16_setup();
    let timer = Timer::new(&hw, &s);
    let attn = |head_dim, seq| Attention {
        label: "a".into(),
        phase: Phase::Forward,
        batch: 1,
        seq,
        heads: 8,
        kv_heads: 8,
        head_dim,
        dtype_bytes: 2,
    };
    // FlashAttention-2, causal, head dim 128, seq 4k: 173 TFLOP/s of 312.
    assert_eq!(timer.attention_efficiency(&attn(128, 4096)), 0.554);
    assert_eq!(timer.attention_efficiency(&attn(64, 512)), 0.282);
    let between = timer.attention_efficiency(&attn(128, 3000));
    assert!(between > 0.497 && between < 0.554, "{between}");
    let a = attn(128, 4096);
    let want = a.executed_flops() / (312e12 * 0.554) + 2e-6;
    assert!((timer.attention(&a) / want - 1.0).abs() < 1e-12);
    // Without a table, the scalar.
    let cpu = Hardware::preset("cpu").unwrap();
    let t = Timer::new(&cpu, &s);
    assert_eq!(t.attention_efficiency(&a), cpu.compute.attention_efficiency);
}

#[test]
fn cluster_files_without_the_new_keys_keep_the_curve_and_their_times() {
    // The A100 preset as it was before the tile model, links and attention table.
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/a100-without-tile-keys.toml"))
        .unwrap();
    let hw = Hardware::from_toml_str(&text).unwrap();
    let s = bf16_setup();
    let timer = Timer::new(&hw, &s);
    assert!(timer.tile_model().is_none());
    let g = gemm(16384, 512, 4096);
    let f = |x: f64| x / (x + 64.0);
    let eta = 0.80 * f(16384.0) * f(512.0) * f(4096.0);
    let want = (g.flops() / (312e12 * eta)).max(g.bytes() / (2.039e12 * 0.9)) + 2e-6;
    assert!((timer.gemm(&g) / want - 1.0).abs() < 1e-12);
    // Iteration times of the paper's set-up on this file, as the model gave them before.
    let row = |name: &str| CASES.iter().find(|c| c.name == name).unwrap();
    for (case, v, before) in [
        ("3B", Method::Vanilla, 7.808075932423767e-1),
        ("7B", Method::Vanilla, 1.631970287661257e0),
        ("7B", Method::Btp, 5.207179297555828e-1),
        ("13B", Method::Btp, 2.292366430544824e0),
        ("30B", Method::FullRank, 8.526029772793114e0),
    ] {
        let t = predict(&paper_setup(row(case), v), &hw).iteration_time_s;
        assert!((t / before - 1.0).abs() < 1e-12, "{case} {v:?}: {t} vs {before}");
    }
    // The CPU presets and calibration files have no tile keys either.
    for name in ["cpu", "cpu-mpi"] {
        let hw = Hardware::preset(name).unwrap();
        assert!(Timer::new(&hw, &s).tile_model().is_none(), "{name}");
    }
}
