//! The cost model against the formulas of spec/BOOST.md (§2.4, §5, §6).

use boost_config::{Arch, LaxGate, Recompute, Scheme};
use boost_perf::*;

fn setup(preset: &str, arch: Arch, scheme: Scheme, tp: usize) -> Setup {
    let mut s = Setup::preset(preset, arch).unwrap();
    s.scheme = scheme;
    s.tp = tp;
    s.validate().unwrap();
    s
}

/// (forward calls, forward elements per token, backward calls, backward elements per token).
fn comm(s: &Setup) -> (usize, f64, usize, f64) {
    let c = layer_comm(s);
    (c.forward_calls, c.forward_elements_per_token, c.backward_calls, c.backward_elements_per_token)
}

#[test]
fn per_layer_collectives_match_the_spec_table() {
    for preset in ["cola-60m", "7b"] {
        let m = boost_config::ModelConfig::preset(preset).unwrap();
        let (d, dff, r) = (m.d as f64, m.d_ff as f64, m.rank as f64);
        for p in [2, 4] {
            let s = setup(preset, Arch::Full, Scheme::Megatron, p);
            assert_eq!(comm(&s), (2, 2.0 * d, 2, 2.0 * d), "megatron {preset} p={p}");
            for grouping in [true, false] {
                let mut s = setup(preset, Arch::Cola, Scheme::Vanilla, p);
                s.grouping = grouping;
                assert_eq!(comm(&s), (7, 5.0 * d + 2.0 * dff, 4, 3.0 * d + dff), "vanilla grouped={grouping}");
            }
            let rows = [
                (NormKind::Online, true, (4, 7.0 * r + 2.0, 4, 7.0 * r)),
                (NormKind::Online, false, (7, 7.0 * r + 2.0, 7, 7.0 * r)),
                (NormKind::Sync, true, (6, 7.0 * r + 2.0, 6, 7.0 * r + 2.0)),
                (NormKind::Sync, false, (9, 7.0 * r + 2.0, 9, 7.0 * r + 2.0)),
                (NormKind::Local, true, (4, 7.0 * r, 4, 7.0 * r)),
                (NormKind::Local, false, (7, 7.0 * r, 7, 7.0 * r)),
            ];
            for (norm, grouping, want) in rows {
                for arch in [Arch::Svd, Arch::Cola, Arch::Lax] {
                    let mut s = setup(preset, arch, Scheme::Btp, p);
                    s.norm = norm;
                    s.grouping = grouping;
                    assert_eq!(comm(&s), want, "btp {arch:?} {norm:?} grouped={grouping} {preset} p={p}");
                }
            }
        }
    }
}

#[test]
fn gqa_changes_only_vanillas_forward() {
    let mut m = boost_config::ModelConfig::preset("7b").unwrap();
    m.kv_heads = Some(8);
    let (d, dff, r, dkv) = (m.d as f64, m.d_ff as f64, m.rank as f64, m.d_kv() as f64);
    assert_eq!(dkv, 1024.0);
    let mk = |scheme, arch| {
        let mut s = setup("7b", arch, scheme, 4);
        s.model = boost_config::ModelConfig { arch, ..m.clone() };
        s.validate().unwrap();
        s
    };
    assert_eq!(comm(&mk(Scheme::Megatron, Arch::Full)), (2, 2.0 * d, 2, 2.0 * d));
    for grouping in [true, false] {
        let mut s = mk(Scheme::Vanilla, Arch::Cola);
        s.grouping = grouping;
        assert_eq!(comm(&s), (7, 3.0 * d + 2.0 * dkv + 2.0 * dff, 4, 3.0 * d + dff));
    }
    assert_eq!(comm(&mk(Scheme::Btp, Arch::Cola)), (4, 7.0 * r + 2.0, 4, 7.0 * r));
}

#[test]
fn no_tensor_parallel_no_collectives() {
    for (arch, scheme) in [(Arch::Full, Scheme::Megatron), (Arch::Cola, Scheme::Vanilla), (Arch::Lax, Scheme::Btp)] {
        let s = setup("cola-60m", arch, scheme, 1);
        assert_eq!(comm(&s), (0, 0.0, 0, 0.0));
        assert!(step_collectives(&s, 0).is_empty());
    }
}

#[test]
fn lax_under_vanilla_is_refused_as_the_engine_refuses_it() {
    // The planner reads the engine's plan, so it cannot cost a layout the engine will not run.
    let mut s = Setup::preset("cola-60m", Arch::Lax).unwrap();
    s.scheme = Scheme::Vanilla;
    s.tp = 2;
    let planner = s.validate().unwrap_err().to_string();
    let engine =
        boost_plan::Plan::new(Scheme::Vanilla, Arch::Lax, boost_config::NormMode::Online, false, 2).unwrap_err();
    assert!(planner.contains(&engine), "planner: {planner}\nengine: {engine}");
    assert!(engine.contains("LaX under vanilla TP needs the whole latent"), "{engine}");
    s.tp = 1;
    s.validate().unwrap();
}

#[test]
fn seven_b_forward_volumes_per_layer() {
    // Spec §2.4: LLaMA-7B shapes, b = 4, s = 4096, bf16, p = 4.
    let gib = |s: &Setup| layer_comm(s).forward_bytes / (1u64 << 30) as f64;
    let full = gib(&setup("7b", Arch::Full, Scheme::Megatron, 4));
    let van = gib(&setup("7b", Arch::Cola, Scheme::Vanilla, 4));
    let btp = gib(&setup("7b", Arch::Cola, Scheme::Btp, 4));
    assert_eq!(format!("{full:.2} {van:.2} {btp:.2}"), "0.25 1.30 0.22");
}

fn gemm_flops(s: &Setup, include_recompute: bool) -> (f64, f64) {
    let mut sum = 0.0;
    let mut attn_full = 0.0;
    for st in 0..s.pp {
        for op in stage_ops(s, st).all() {
            if op.phase() == Phase::Recompute && !include_recompute {
                continue;
            }
            match op {
                Op::Gemm(g) => sum += g.flops(),
                Op::Attention(a) => attn_full += a.model_flops_full(),
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
        layer_ops(s, 0).forward.iter().filter_map(Op::as_gemm).find(|g| g.label == label).unwrap().clone()
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
    // Vanilla keeps far more without recompute: the residual, attention and MLP are replicated.
    let mut v = setup("7b", Arch::Cola, Scheme::Vanilla, 4);
    assert!(elems(&v) > 2.0 * elems(&s));
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
fn low_rank_recompute_communicates_only_under_vanilla() {
    let mut s = setup("7b", Arch::Cola, Scheme::Btp, 4);
    s.recompute = Recompute::Lowrank;
    let ops = layer_ops(&s, 1);
    assert!(ops.recompute.iter().all(|o| o.as_collective().is_none()));
    // No A GEMM is re-run; B_o and B_down neither.
    assert!(ops.recompute.iter().filter_map(Op::as_gemm).all(|g| g.label.ends_with(".B")));
    assert!(
        ops.recompute.iter().filter_map(Op::as_gemm).all(|g| !g.label.contains(".o.") && !g.label.contains("down"))
    );
    s.recompute = Recompute::Full;
    let full = layer_ops(&s, 1);
    assert_eq!(full.recompute.iter().filter(|o| o.as_collective().is_some()).count(), 4);
    let mut v = setup("7b", Arch::Cola, Scheme::Vanilla, 4);
    v.recompute = Recompute::Lowrank;
    let n = layer_ops(&v, 1).recompute.iter().filter(|o| o.as_collective().is_some()).count();
    assert_eq!(n, 5, "B_q, B_k, B_v, B_gate, B_up re-issue their all-reduces");
}

#[test]
fn stack_entry_and_exit_collectives() {
    let labels = |s: &Setup| -> Vec<(String, Phase, CollKind)> {
        step_collectives(s, 0)
            .into_iter()
            .filter(|c| c.layer.is_none())
            .map(|c| (c.collective.label, c.collective.phase, c.collective.kind))
            .collect()
    };
    let s = setup("cola-60m", Arch::Cola, Scheme::Btp, 2);
    assert_eq!(
        labels(&s),
        vec![
            ("head.gather".into(), Phase::Forward, CollKind::AllGather),
            ("loss.max".into(), Phase::Forward, CollKind::AllReduceMax),
            ("loss.sumexp".into(), Phase::Forward, CollKind::AllReduce),
            ("head.f.bwd".into(), Phase::Backward, CollKind::AllReduce),
            ("grad_norm".into(), Phase::Backward, CollKind::AllReduce),
        ]
    );
    let mut tied = s.clone();
    tied.model.tie_embeddings = true;
    let l = labels(&tied);
    assert_eq!(l[0], ("embed".into(), Phase::Forward, CollKind::ReduceScatter));
    assert!(l.contains(&("embed.bwd".into(), Phase::Backward, CollKind::AllGather)));
    let m = setup("cola-60m", Arch::Full, Scheme::Megatron, 2);
    assert_eq!(labels(&m)[0], ("embed".into(), Phase::Forward, CollKind::AllReduce));
    // The cross-entropy statistics are fp32: max (T) and [target, sum-exp] (T × 2).
    let ce: Vec<_> = step_collectives(&s, 0).into_iter().filter(|c| c.collective.label.starts_with("loss")).collect();
    assert_eq!(ce[0].collective.elements, s.tokens());
    assert_eq!(ce[1].collective.elements, 2 * s.tokens());
    assert_eq!(ce[1].collective.bytes(), 8 * s.tokens());
}

#[test]
fn step_collectives_repeat_per_micro_batch() {
    let mut s = setup("cola-60m", Arch::Cola, Scheme::Btp, 2);
    s.accumulation = 3;
    let all = step_collectives(&s, 0);
    let per_layer = all.iter().filter(|c| c.layer == Some(0) && c.micro_batch == Some(2)).count();
    assert_eq!(per_layer, 8);
    let totals = collective_totals(all.iter().map(|c| &c.collective));
    let (calls, _) = totals[&("attn.qkv.A".to_string(), Phase::Forward, CollKind::AllReduce)];
    assert_eq!(calls, 3 * s.model.layers);
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
        for norm in NormKind::ALL {
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
fn collective_labels_in_program_order() {
    let names = |s: &Setup, phase: Phase| -> Vec<String> {
        layer_ops(s, 1).collectives().filter(|c| c.phase == phase).map(|c| c.label.clone()).collect()
    };
    let m = setup("cola-60m", Arch::Full, Scheme::Megatron, 2);
    assert_eq!(names(&m, Phase::Forward), ["attn.o.B", "mlp.down.B"]);
    assert_eq!(names(&m, Phase::Backward), ["mlp.gate_up.f.bwd", "attn.qkv.f.bwd"]);
    let v = setup("cola-60m", Arch::Cola, Scheme::Vanilla, 2);
    assert_eq!(
        names(&v, Phase::Forward),
        ["attn.q.B", "attn.k.B", "attn.v.B", "attn.o.B", "mlp.gate.B", "mlp.up.B", "mlp.down.B"]
    );
    assert_eq!(names(&v, Phase::Backward), ["mlp.down.f.bwd", "mlp.gate_up.f.bwd", "attn.o.f.bwd", "attn.qkv.f.bwd"]);
    let mut b = setup("cola-60m", Arch::Cola, Scheme::Btp, 2);
    assert_eq!(names(&b, Phase::Forward), ["attn.qkv.A", "attn.o.A", "mlp.gate_up.A", "mlp.down.A"]);
    assert_eq!(names(&b, Phase::Backward), ["mlp.down.B.bwd", "mlp.gate_up.B.bwd", "attn.o.B.bwd", "attn.qkv.B.bwd"]);
    b.norm = NormKind::Sync;
    b.grouping = false;
    assert_eq!(
        names(&b, Phase::Forward),
        [
            "attn.norm.stat",
            "attn.q.A",
            "attn.k.A",
            "attn.v.A",
            "attn.o.A",
            "mlp.norm.stat",
            "mlp.gate.A",
            "mlp.up.A",
            "mlp.down.A"
        ]
    );
    assert_eq!(
        names(&b, Phase::Backward),
        [
            "mlp.down.B.bwd",
            "mlp.gate.B.bwd",
            "mlp.up.B.bwd",
            "mlp.norm.stat.bwd",
            "attn.o.B.bwd",
            "attn.q.B.bwd",
            "attn.k.B.bwd",
            "attn.v.B.bwd",
            "attn.norm.stat.bwd"
        ]
    );
    // Online: the statistic rides with the first A after each norm (T + T·r elements).
    b.norm = NormKind::Online;
    let q = layer_ops(&b, 1).collectives().find(|c| c.label == "attn.q.A").unwrap().clone();
    assert_eq!((q.elements, q.elements_f32), (b.tokens() * (b.model.rank as u64 + 1), b.tokens()));
}
