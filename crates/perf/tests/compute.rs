//! FLOPs, GEMM shapes, parameters, activation memory and predictions of the cost model
//! against docs/PARALLELISM.md (§2.4, §5, §6).

mod common;

use boost_config::{Arch, LaxGate, Recompute, Scheme};
use boost_perf::*;
use common::setup;

fn gemm_flops(s: &Setup, include_recompute: bool) -> (f64, f64) {
    let mut sum = 0.0;
    let mut attn_full = 0.0;
    for st in 0..s.pp {
        for op in stage_ops(s, st).all() {
            if op.phase() == Phase::Recompute && !include_recompute {
                continue;
            }
            match op {
                CostOp::Gemm(g) => sum += g.flops(),
                CostOp::Attention(a) => attn_full += a.model_flops_full(),
                _ => {}
            }
        }
    }
    (sum, attn_full)
}

#[test]
fn flops_agree_with_six_n_plus_attention() {
    for arch in [Arch::Full, Arch::Svd, Arch::Cola, Arch::Lax] {
        let mut s = setup("cola-60m", arch, if arch == Arch::Full { Scheme::Megatron } else { Scheme::Btp }, 1);
        s.model.vocab = 32000;
        s.micro_batch = 2;
        s.seq = 256;
        let t = s.tokens() as f64;
        let (gemm, attn_full) = gemm_flops(&s, false);
        let n = matmul_params(&s.model) as f64;
        assert!((gemm / (6.0 * n * t) - 1.0).abs() < 1e-12, "{arch:?}: {gemm} vs 6N·T = {}", 6.0 * n * t);
        let (d, l, sq) = (s.model.d as f64, s.model.layers as f64, s.seq as f64);
        assert!((attn_full / (12.0 * sq * d * l * t) - 1.0).abs() < 1e-12);
        s.attention = AttnConvention::Full;
        assert!((model_flops_per_token(&s) * t / (gemm + attn_full) - 1.0).abs() < 1e-12);
        s.attention = AttnConvention::Causal;
        assert!((model_flops_per_token(&s) * t / (gemm + attn_full / 2.0) - 1.0).abs() < 1e-12);
    }
}

#[test]
fn sharded_gemms_add_up_to_the_whole_model() {
    // Summed over TP ranks, the GEMM FLOPs equal tp = 1, except replicated work (LaX gates).
    for (arch, scheme) in [
        (Arch::Full, Scheme::Megatron),
        (Arch::Cola, Scheme::Vanilla),
        (Arch::Cola, Scheme::Btp),
        (Arch::Svd, Scheme::Btp),
    ] {
        for grouping in [true, false] {
            let mut one = setup("cola-60m", arch, scheme, 1);
            one.grouping = grouping;
            let mut four = one.clone();
            four.tp = 4;
            let (g1, a1) = gemm_flops(&one, false);
            let (g4, a4) = gemm_flops(&four, false);
            let attn_ratio = if scheme == Scheme::Vanilla { 1.0 } else { 0.25 };
            assert!((4.0 * g4 / g1 - 1.0).abs() < 1e-12, "{arch:?} {scheme:?}");
            assert!((a4 / a1 - attn_ratio).abs() < 1e-12, "attention {scheme:?}");
        }
    }
}

#[test]
fn kronecker_gate_is_cheaper_than_dense() {
    let mut dense = setup("cola-60m", Arch::Lax, Scheme::Btp, 1);
    dense.model.lax.gate = LaxGate::Dense;
    let mut kron = dense.clone();
    kron.model.lax.gate = LaxGate::Kron;
    assert!(gemm_flops(&kron, false).0 < gemm_flops(&dense, false).0);
}

#[test]
fn gemm_shapes_per_rank_follow_the_spec() {
    // Vanilla A (T×d)(d×r/p), B (T×r/p)(r/p×d_out); BTP A (T×d/p)(d/p×r), B (T×r)(r×d_out/p).
    let find = |s: &Setup, label: &str| -> Gemm {
        layer_ops(s, 0).forward.iter().filter_map(CostOp::as_gemm).find(|g| g.label == label).unwrap().clone()
    };
    let mut v = setup("7b", Arch::Cola, Scheme::Vanilla, 4);
    v.grouping = false;
    let t = v.tokens();
    let a = find(&v, "attn.o.A");
    assert_eq!((a.m, a.k, a.n), (t, 4096, 256));
    let b = find(&v, "attn.o.B");
    assert_eq!((b.m, b.k, b.n), (t, 256, 4096));
    let mut p = setup("7b", Arch::Cola, Scheme::Btp, 4);
    p.grouping = false;
    let a = find(&p, "attn.o.A");
    assert_eq!((a.m, a.k, a.n), (t, 1024, 1024));
    let b = find(&p, "mlp.gate.B");
    assert_eq!((b.m, b.k, b.n), (t, 1024, 11008 / 4));
    let ai = b.flops() / (2.0 * (t * 1024 + 1024 * 2752 + t * 2752) as f64);
    assert!((b.intensity() - ai).abs() < 1e-9);
}

#[test]
fn bubble_formula() {
    assert_eq!(bubble_fraction(1, 8), 0.0);
    assert!((bubble_fraction(4, 4) - 3.0 / 7.0).abs() < 1e-15);
    assert!((bubble_fraction(2, 4) - 0.2).abs() < 1e-15);
    let hw = Hardware::preset("a100-80gb").unwrap();
    let mut s = setup("13b", Arch::Cola, Scheme::Btp, 4);
    s.pp = 2;
    s.accumulation = 4;
    let p = predict(&s, &hw);
    let slot = p.micro_batch.compute_s + p.micro_batch.tp_comm_s;
    assert!((p.breakdown.bubble_s - slot).abs() < 1e-12);
    let frac = p.breakdown.bubble_s / (p.breakdown.bubble_s + 4.0 * slot);
    assert!((frac - bubble_fraction(2, 4)).abs() < 1e-12);
}

#[test]
fn low_rank_layers_hold_two_and_a_half_times_fewer_parameters() {
    for name in ["1b", "3b", "7b", "13b", "30b"] {
        let m = boost_config::ModelConfig::preset(name).unwrap();
        let (d, dff, r) = (m.d as f64, m.d_ff as f64, m.rank as f64);
        let full = boost_config::ModelConfig { arch: Arch::Full, ..m.clone() };
        let low = boost_config::ModelConfig { arch: Arch::Cola, ..m.clone() };
        let counted = (layer_params(&full, 0) as f64 - 2.0 * d) / (layer_params(&low, 0) as f64 - 2.0 * d);
        let formula = (4.0 * d * d + 3.0 * d * dff) / (8.0 * d * r + 3.0 * r * (d + dff));
        assert!((counted / formula - 1.0).abs() < 1e-12, "{name}");
        assert!((2.3..2.7).contains(&formula), "{name}: {formula}");
    }
}

#[test]
fn activation_memory_per_recompute_policy() {
    let elems = |s: &Setup| layer_saved(s, 0).iter().map(|x| x.elements_per_token).sum::<f64>();
    let mut s = setup("7b", Arch::Cola, Scheme::Btp, 4);
    let (d, r, p) = (4096.0, 1024.0, 4.0);
    s.recompute = Recompute::Lowrank;
    assert_eq!(elems(&s), 7.0 * r + 2.0 * d / p + 2.0);
    s.recompute = Recompute::Full;
    assert_eq!(elems(&s), d / p);
    s.recompute = Recompute::None;
    assert!(elems(&s) > 7.0 * r + 2.0 * d / p + 2.0);
    // Without recompute, per token: the residual at both norms, two statistics, the seven
    // latents before and after φ, q, k, v, the attention output, one log-sum-exp a head,
    // SwiGLU's gate and up. BTP shards all but the latents; vanilla replicates the residual,
    // attention and MLP and shards the latents, so it keeps far more.
    let (dff, heads) = (11008.0, 32.0);
    assert_eq!(elems(&s), 2.0 * d / p + 2.0 + 14.0 * r + 4.0 * d / p + heads / p + 2.0 * dff / p);
    let mut v = setup("7b", Arch::Cola, Scheme::Vanilla, 4);
    assert_eq!(elems(&v), 2.0 * d + 2.0 + 14.0 * r / p + 4.0 * d + heads + 2.0 * dff);
    assert!(elems(&v) > 1.9 * elems(&s));
    v.recompute = Recompute::Full;
    assert_eq!(elems(&v), d);
}

#[test]
fn recompute_of_the_first_layers_of_each_stage() {
    let mut s = setup("7b", Arch::Cola, Scheme::Btp, 4);
    let elems = |s: &Setup, l: usize| layer_saved(s, l).iter().map(|x| x.elements_per_token).sum::<f64>();
    let none: Vec<f64> = (0..s.model.layers).map(|l| elems(&s, l)).collect();
    s.pp = 2;
    s.recompute = Recompute::Lowrank;
    s.recompute_layers = 3;
    let half = s.model.layers / 2;
    for (l, &kept_without) in none.iter().enumerate() {
        let recomputed = l % half < 3;
        assert_eq!(elems(&s, l) < kept_without, recomputed, "layer {l}");
        assert_eq!(layer_ops(&s, l).recompute.is_empty(), !recomputed, "layer {l}");
    }
}

#[test]
fn presets_parse_and_predict() {
    for name in boost_perf::hardware::preset_names() {
        let hw = Hardware::preset(name).unwrap();
        let mut s = setup("1b", Arch::Cola, Scheme::Btp, 2);
        s.dtype = hw.default_dtype();
        let p = predict(&s, &hw);
        assert!(p.iteration_time_s > 0.0 && p.iteration_time_s.is_finite(), "{name}");
        let b = &p.breakdown;
        let sum = b.compute_s + b.communication_s + b.bubble_s + b.optimizer_s;
        assert!((sum / p.iteration_time_s - 1.0).abs() < 1e-12);
    }
}

#[test]
fn every_variant_predicts_and_recompute_trades_memory_for_time() {
    let hw = Hardware::preset("a100-80gb").unwrap();
    let combos = [
        (Arch::Full, Scheme::Megatron),
        (Arch::Svd, Scheme::Vanilla),
        (Arch::Cola, Scheme::Vanilla),
        (Arch::Svd, Scheme::Btp),
        (Arch::Cola, Scheme::Btp),
        (Arch::Lax, Scheme::Btp),
    ];
    for (arch, scheme) in combos {
        for norm in NormMode::ALL {
            for grouping in [true, false] {
                for kv in [None, Some(8)] {
                    let mut s = setup("cola-350m", arch, scheme, 4);
                    s.model.kv_heads = kv;
                    s.norm = norm;
                    s.grouping = grouping;
                    s.pp = 2;
                    s.accumulation = 3;
                    s.seq = 1024;
                    let mut last: Option<(f64, f64)> = None;
                    for rc in [Recompute::None, Recompute::Lowrank, Recompute::Full] {
                        if rc == Recompute::Lowrank && arch == Arch::Full {
                            continue;
                        }
                        s.recompute = rc;
                        s.validate().unwrap();
                        let p = predict(&s, &hw);
                        let what = format!("{arch:?} {scheme:?} {norm:?} g={grouping} kv={kv:?} {rc:?}");
                        assert!(p.iteration_time_s.is_finite() && p.iteration_time_s > 0.0, "{what}");
                        assert!(p.memory.total > 0.0, "{what}");
                        assert!(p.flops.hfu >= p.flops.mfu * 0.99, "{what}");
                        // Each stronger policy keeps less and takes longer.
                        if let Some((t, m)) = last {
                            assert!(p.iteration_time_s > t, "{what}: time");
                            assert!(p.memory.activations < m, "{what}: memory");
                        }
                        last = Some((p.iteration_time_s, p.memory.activations));
                    }
                }
            }
        }
    }
}

#[test]
fn overlap_hides_data_parallel_buckets_behind_the_backward() {
    let hw = Hardware::preset("a100-80gb").unwrap();
    let mut s = setup("1b", Arch::Cola, Scheme::Btp, 2);
    s.dp = 4;
    s.accumulation = 2;
    s.overlap = false;
    let (off, off_t) = {
        let p = predict(&s, &hw);
        (p.breakdown, p.iteration_time_s)
    };
    // Without overlap every second of data-parallel traffic adds to the step.
    assert!(off.dp_comm_s > 0.0);
    assert!((off.dp_comm_s - off.dp_in_flight_s).abs() < 1e-15);
    s.overlap = true;
    let (on, on_t) = {
        let p = predict(&s, &hw);
        (p.breakdown, p.iteration_time_s)
    };
    // The same traffic is in flight; less of it is exposed, and exactly that much less is
    // added to the step (nothing else in the model depends on overlap).
    assert!((on.dp_in_flight_s - off.dp_in_flight_s).abs() < 1e-15);
    assert!(on.dp_comm_s < on.dp_in_flight_s);
    let saved = off.dp_comm_s - on.dp_comm_s;
    assert!(((off_t - on_t) - saved).abs() < 1e-12);
    // One bucket for everything hides nothing.
    s.bucket_mb = boost_config::BucketSize::Mb(1e9);
    let one = predict(&s, &hw).breakdown;
    assert!((one.dp_comm_s - off.dp_comm_s).abs() < 1e-12);
}

#[test]
fn zero1_parameter_gathers_hide_behind_the_update_and_the_next_forward() {
    let hw = Hardware::preset("a100-80gb").unwrap();
    let mut s = setup("1b", Arch::Cola, Scheme::Btp, 2);
    s.dp = 4;
    s.accumulation = 2;
    s.zero = 1;
    s.overlap = false;
    let off = predict(&s, &hw).breakdown;
    s.overlap = true;
    let on = predict(&s, &hw).breakdown;
    // The same traffic is in flight. A 1b micro-batch's forward on an A100 is far longer
    // than the gathers (and its backward than the reduce-scatters), so what stays exposed is
    // the embedding table's share of both: its gradient is final last and its parameters are
    // read first. (Hiding the gathers behind the update alone, the model before they were
    // left to the forward, left a third of the traffic exposed: 0.018 of 0.055 s.)
    assert!((on.dp_in_flight_s - off.dp_in_flight_s).abs() < 1e-12);
    let table = step::unhidden_dp_elements(&s, 0, true) as f64 / step::stage_params_rank(&s, 0) as f64;
    assert!(table > 0.0 && table < 0.5, "the table is {table} of the stage");
    let share = off.dp_comm_s * table;
    assert!(on.dp_comm_s >= share - 1e-15, "exposed {} s, less than the table's share {share} s", on.dp_comm_s);
    // Within 2 % of that share (the reduce-scatters' last bucket adds a little), far below
    // the third left by the update alone.
    assert!(on.dp_comm_s < 1.02 * share, "exposed {} s for a table's share of {share} s", on.dp_comm_s);
}

#[test]
fn tp_chunks_hide_tp_collectives_behind_the_other_chunks_compute() {
    // The overlap benchmark's CPU, its tp pairs on the A100-scaled link (3500 µs, 0.34 GB/s)
    // of the chunks' measurement (docs/PERFORMANCE.md, "Tensor-parallel chunks").
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/overlap-bench-cluster.toml"))
        .unwrap()
        .replace("alpha_s = 5e-6", "alpha_s = 3.5e-3")
        .replace("bandwidth = 1e10", "bandwidth = 3.4e8");
    let hw = Hardware::from_toml_str(&text).unwrap();
    let mut s = setup("cola-60m", Arch::Cola, Scheme::Btp, 2);
    (s.micro_batch, s.seq, s.dtype, s.model.vocab) = (8, 256, Dtype::F32, 8192);
    let one = predict(&s, &hw);
    // One chunk: every tp second adds to the step.
    let b1 = &one.micro_batch;
    assert!(b1.tp_comm_s > 0.1 && (b1.tp_comm_s - b1.tp_in_flight_s).abs() < 1e-12, "{b1:?}");
    s.tp_chunks = 2;
    let two = predict(&s, &hw);
    let b2 = &two.micro_batch;
    // Twice the calls on half the elements each: the latency terms twice over, so more in
    // flight ...
    let timer = Timer::new(&hw, &s);
    let latency = |o: &CostOp| match o {
        CostOp::Collective(c) if c.group == CollGroup::Tp => {
            timer.op(&CostOp::Collective(Collective { elements: 0, ..c.clone() }))
        }
        _ => 0.0,
    };
    let extra: f64 = stage_ops(&s, 0).all().map(latency).sum();
    assert!(extra > 0.1, "{extra}");
    assert!((b2.tp_in_flight_s - b1.tp_in_flight_s - extra).abs() < 1e-9, "{b1:?} {b2:?}");
    // ... but most of it behind the other chunk's compute; the compute itself is the same
    // work on smaller GEMMs, no faster.
    assert!(b2.tp_comm_s < 0.5 * b2.tp_in_flight_s, "{b2:?}");
    assert!(b2.compute_s >= b1.compute_s * (1.0 - 1e-9), "{b1:?} {b2:?}");
    assert!(two.iteration_time_s < one.iteration_time_s, "{} vs {}", two.iteration_time_s, one.iteration_time_s);
    // Each chunk after the first keeps gradients of its own.
    assert!((two.memory.gradients - 2.0 * one.memory.gradients).abs() < 1.0);
    // The chunk model walks every op of the stage once, forward before backward.
    let stage = stage_ops(&s, 0);
    let order = chunks::in_order(&stage);
    assert_eq!(order.len(), stage.all().count());
    let first_backward = order.iter().position(|o| o.phase() != Phase::Forward).unwrap();
    assert!(
        order[first_backward..].iter().all(|o| o.phase() != Phase::Forward),
        "a forward op after the backward began"
    );
    // ZeRO-1 across two replicas: the same traffic in flight, but the parameter gathers hide
    // behind the update alone with chunks (they complete before the first chunk starts).
    (s.dp, s.zero) = (2, 1);
    let zero = |c: usize| predict(&Setup { tp_chunks: c, ..s.clone() }, &hw).breakdown;
    let (z1, z2) = (zero(1), zero(2));
    assert!((z1.dp_in_flight_s - z2.dp_in_flight_s).abs() < 1e-12, "{z1:?} {z2:?}");
    assert!(z2.dp_comm_s > z1.dp_comm_s + 0.05, "{z1:?} {z2:?}");
    (s.dp, s.zero) = (1, 0);
    // A micro-batch that does not split is refused, naming the key.
    s.tp_chunks = 3;
    let e = s.validate().unwrap_err().to_string();
    assert!(e.contains("parallel.tp_chunks") && e.contains("train.micro_batch"), "{e}");
}

#[test]
fn hardware_flops_of_a_pipeline_are_its_stages_summed_not_the_slowest_counted_pp_times() {
    // The last stage holds the LM head, so counting it once per stage overstated HFU (113 % on
    // the cpu preset's full-rank pp2, against 80 % on one stage).
    let hw = Hardware::preset("cpu").unwrap();
    for arch in [Arch::Full, Arch::Cola] {
        let scheme = if arch == Arch::Full { Scheme::Megatron } else { Scheme::Btp };
        let mut one = setup("cola-60m", arch, scheme, 1);
        one.accumulation = 2;
        let two = Setup { pp: 2, ..one.clone() };
        let (a, b) = (predict(&one, &hw).flops, predict(&two, &hw).flops);
        assert!(
            (b.hardware_flops / a.hardware_flops - 1.0).abs() < 1e-9,
            "{arch:?}: {} vs {}",
            b.hardware_flops,
            a.hardware_flops
        );
        assert!(b.hfu <= 1.0 && b.hfu >= b.mfu * 0.99, "{arch:?}: HFU {} MFU {}", b.hfu, b.mfu);
    }
}
