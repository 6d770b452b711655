//! Collectives of the cost model against docs/PARALLELISM.md (§2.4, §6): calls and volumes per
//! layer, labels and program order, the stack's entry and exit, the whole step.

mod common;

use boost_config::{Arch, Recompute, Scheme};
use boost_perf::*;
use common::setup;

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
                (NormMode::Online, true, (4, 7.0 * r + 2.0, 4, 7.0 * r)),
                (NormMode::Online, false, (7, 7.0 * r + 2.0, 7, 7.0 * r)),
                (NormMode::Sync, true, (6, 7.0 * r + 2.0, 6, 7.0 * r + 2.0)),
                (NormMode::Sync, false, (9, 7.0 * r + 2.0, 9, 7.0 * r + 2.0)),
                (NormMode::Local, true, (4, 7.0 * r, 4, 7.0 * r)),
                (NormMode::Local, false, (7, 7.0 * r, 7, 7.0 * r)),
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

#[test]
fn low_rank_recompute_communicates_only_under_vanilla() {
    let mut s = setup("7b", Arch::Cola, Scheme::Btp, 4);
    s.recompute = Recompute::Lowrank;
    let ops = layer_ops(&s, 1);
    assert!(ops.recompute.iter().all(|o| o.as_collective().is_none()));
    // No A GEMM is re-run; B_o and B_down neither.
    assert!(ops.recompute.iter().filter_map(CostOp::as_gemm).all(|g| g.label.ends_with(".B")));
    assert!(
        ops.recompute.iter().filter_map(CostOp::as_gemm).all(|g| !g.label.contains(".o.") && !g.label.contains("down"))
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
    b.norm = NormMode::Sync;
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
    b.norm = NormMode::Online;
    let q = layer_ops(&b, 1).collectives().find(|c| c.label == "attn.q.A").unwrap().clone();
    assert_eq!((q.elements, q.elements_f32), (b.tokens() * (b.model.rank as u64 + 1), b.tokens()));
}
