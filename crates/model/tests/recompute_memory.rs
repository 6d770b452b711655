//! The engine's activation accounting equals the formulas of spec §5, per layer and token:
//! low-rank recompute keeps 7r + 2d/p + 2 elements under BTP (the four latents before φ, the
//! two residual shards that feed a norm, the two norm statistics), full recompute keeps the
//! layer input d/p (plus, for LaX, the 7r latents the next layer's crossing reads); with
//! `train.recompute_layers = N` the first N layers keep that and the others everything.

use boost_config::{Config, Recompute};
use boost_model::{Layout, Model};
use boost_tensor::cpu::Cpu;

fn per_token(sets: &[&str], tp: usize, policy: Recompute) -> (Vec<usize>, usize) {
    let mut all: Vec<String> =
        ["model.d=64", "model.d_ff=96", "model.heads=4", "model.rank=16", "model.vocab=50", "model.layers=3"]
            .iter()
            .chain(sets)
            .map(|s| s.to_string())
            .collect();
    all.push(format!("parallel.tp={tp}"));
    let cfg = Config::load(None, &all).unwrap();
    let layout = Layout::from_config(&cfg.model, &cfg.parallel, 0);
    let mut m = Model::declare(Cpu::<f32>::new(), &cfg.model, layout).unwrap();
    m.set_recompute(policy);
    m.set_recompute_layers(cfg.train.recompute_layers);
    let (b, s) = (2, 12);
    let mem = m.activation_memory(b, s);
    assert_eq!(mem.elem_bytes, 4);
    assert_eq!(mem.tokens, b * s);
    for e in &mem.per_layer {
        assert_eq!(e % (b * s), 0, "per-layer activations are a whole number of elements per token");
    }
    assert_eq!(mem.recompute_scratch % (b * s), 0);
    (mem.per_layer.iter().map(|e| e / (b * s)).collect(), mem.recompute_scratch / (b * s))
}

#[test]
fn lowrank_keeps_7r_plus_2d_over_p_plus_2() {
    let (d, r) = (64, 16);
    for tp in [1, 2, 4] {
        for sets in [
            &["model.arch=cola"][..],
            &["model.arch=svd", "parallel.grouping=false"],
            &["model.arch=lax"],
            &["model.arch=cola", "parallel.norm=sync"],
        ] {
            let (layers, scratch) = per_token(sets, tp, Recompute::Lowrank);
            assert!(layers.iter().all(|&e| e == 7 * r + 2 * d / tp + 2), "{sets:?} tp={tp}: {layers:?}");
            assert!(scratch > 0);
        }
        // Vanilla shards the latent and replicates the residual.
        let (layers, _) = per_token(&["model.arch=cola", "parallel.scheme=vanilla"], tp, Recompute::Lowrank);
        assert!(layers.iter().all(|&e| e == 7 * r / tp + 2 * d + 2), "vanilla tp={tp}: {layers:?}");
    }
}

#[test]
fn full_keeps_the_layer_input() {
    let (d, r) = (64, 16);
    for tp in [1, 2, 4] {
        let (layers, _) = per_token(&["model.arch=cola"], tp, Recompute::Full);
        assert!(layers.iter().all(|&e| e == d / tp), "cola tp={tp}: {layers:?}");
        let (layers, _) = per_token(&["model.arch=full"], tp, Recompute::Full);
        assert!(layers.iter().all(|&e| e == d), "megatron keeps the whole residual, tp={tp}: {layers:?}");
        let (layers, _) = per_token(&["model.arch=lax"], tp, Recompute::Full);
        assert!(layers.iter().all(|&e| e == d / tp + 7 * r), "lax tp={tp}: {layers:?}");
    }
}

#[test]
fn no_recompute_keeps_more_than_either_policy() {
    for tp in [1, 2] {
        let (none, scratch) = per_token(&["model.arch=cola"], tp, Recompute::None);
        let (low, _) = per_token(&["model.arch=cola"], tp, Recompute::Lowrank);
        let (full, _) = per_token(&["model.arch=cola"], tp, Recompute::Full);
        assert_eq!(scratch, 0);
        for l in 0..3 {
            assert!(
                none[l] > low[l] && low[l] > full[l],
                "tp={tp} layer {l}: none {} lowrank {} full {}",
                none[l],
                low[l],
                full[l]
            );
        }
    }
}

#[test]
fn recompute_of_the_first_layers_keeps_everything_above_them() {
    let (d, r) = (64, 16);
    for tp in [1, 2] {
        let (none, _) = per_token(&["model.arch=cola"], tp, Recompute::None);
        for first in [1, 2] {
            let n = format!("train.recompute_layers={first}");
            let (low, scratch) = per_token(&["model.arch=cola", &n], tp, Recompute::Lowrank);
            let (full, _) = per_token(&["model.arch=cola", &n], tp, Recompute::Full);
            for l in 0..3 {
                let (want_low, want_full) =
                    if l < first { (7 * r + 2 * d / tp + 2, d / tp) } else { (none[l], none[l]) };
                assert_eq!((low[l], full[l]), (want_low, want_full), "tp={tp} first={first} layer {l}");
            }
            // The recomputed layers run in one set of buffers each, at most two in turn: the
            // activations of none minus the layer input each.
            let want: usize = (0..first.min(2)).map(|l| none[l] - d / tp).sum();
            assert_eq!(scratch, want, "tp={tp} first={first}");
        }
    }
}

#[test]
fn no_recompute_keeps_every_activation_but_the_swiglu_product() {
    // CoLA, d = 64, d_ff = 96, 4 heads of 16, r = 16, one rank; per token and layer (each
    // group's latent buffer starts with a statistic slot, used after a norm):
    let (d, d_ff, r, heads) = (64, 96, 16, 4);
    let kept = d // the layer input
        + (1 + 3 * r + 3 * r) // q/k/v: the norm statistic, the latents before and after φ
        + 3 * d // q, k, v after RoPE
        + heads // attention's log-sum-exp, one a head
        + d // the attention output
        + (1 + 2 * r) // o: statistic slot, latents before and after φ
        + d // the residual after attention
        + (1 + 2 * r + 2 * r) // gate/up: statistic and latents
        + 2 * d_ff // g and u
        + (1 + 2 * r); // down: statistic slot and latents
    // Not the SwiGLU product (d_ff more): SwiGLU's backward rebuilds it.
    let (layers, _) = per_token(&["model.arch=cola"], 1, Recompute::None);
    assert!(layers.iter().all(|&e| e == kept), "{layers:?} against {kept}");
}
