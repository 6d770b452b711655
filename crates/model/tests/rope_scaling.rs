//! Llama 3.1's RoPE frequency scaling (`[model.rope_scaling] type = "llama3"`) in the training
//! passes and the decode cache: the cached decoding gives the full forward's logits (f64,
//! 1e-10 of the largest logit, as decode.rs: only the attention's summation order differs),
//! the backward's gradient through the scaled rotation matches central differences, and the
//! scaling changes the logits (so it is applied, not ignored).

use boost_config::{Arch, LaxGate, ModelConfig, RopeScaling};
use boost_model::{Batch, Layout, Model};
use boost_tensor::cpu::Cpu;
use boost_tensor::{Backend, Solo};
use boost_testkit::decode::cached_decoding_matches_the_forward;
use boost_testkit::small_model;

/// Head dimension 8 (four pairs); an original context of 8 with factors 1 and 4 puts the
/// cut-off wavelengths at 2 and 8: pair 0 (wavelength 2π) is smoothed, pairs 1.. are stretched.
fn scaled(arch: Arch) -> ModelConfig {
    let mut cfg = small_model(arch, LaxGate::Dense, 32, 8, 50);
    cfg.rope_scaling = RopeScaling { original_max_position_embeddings: 8, ..RopeScaling::llama3() };
    cfg.validate().unwrap();
    cfg
}

fn ids(n: usize, v: usize) -> Vec<u32> {
    (0..n).map(|i| ((i * 13 + 7) % v) as u32).collect()
}

#[test]
fn cached_decoding_with_llama3_scaling_matches_the_full_forward() {
    for arch in [Arch::Full, Arch::Cola] {
        let cfg = scaled(arch);
        let full = cached_decoding_matches_the_forward(&cfg, &format!("{arch:?}"));
        let ids = ids(12, cfg.vocab);
        let n = ids.len();
        // The same weights without the scaling: the logits past position 0 move.
        let plain = ModelConfig { rope_scaling: RopeScaling::default(), ..cfg.clone() };
        let mut p = Model::new(Cpu::<f64>::new(), &plain, Layout::single(&plain), 3).unwrap();
        let unscaled = p.logits(&Solo, &ids, 1, n);
        let diff = full.iter().zip(&unscaled).map(|(a, b)| (a - b).abs()).fold(0.0, f64::max);
        assert!(diff > 1e-6, "{arch:?}: the scaling changed no logit (max difference {diff:e})");
    }
}

#[test]
fn the_backward_through_scaled_rope_matches_central_differences() {
    let cfg = scaled(Arch::Full);
    let (n, v) = (12, cfg.vocab);
    let (ids, targets) = (ids(n, v), ids(n + 1, v)[1..].to_vec());
    let b = Batch { ids: &ids, targets: &targets, batch: 1, seq: n };
    let mut m = Model::new(Cpu::<f64>::new(), &cfg, Layout::single(&cfg), 3).unwrap();
    m.forward_backward(&Solo, &b, 1.0);
    let grads = m.store().grads().to_vec();
    let mut checked = 0;
    for name in ["model.layers.0.self_attn.q_proj.weight", "model.layers.1.self_attn.k_proj.weight"] {
        let slot = m.store().piece(name).unwrap_or_else(|| panic!("no piece {name}")).slot;
        let g: Vec<f64> = m.be().read_mat(slot.of(&grads));
        let w: Vec<f64> = m.be().read_mat(slot.of(m.store().values()));
        for k in [0, 5, 17, 40, 63] {
            let h = 1e-5;
            let mut at = |x: f64| {
                let mut wk = w.clone();
                wk[k] = x;
                let (be, store) = m.be_and_store_mut();
                be.write_mat(slot.of_mut(store.values_mut()), &wk);
                m.evaluate(&Solo, &b).sum
            };
            let fd = (at(w[k] + h) - at(w[k] - h)) / (2.0 * h);
            let (be, store) = m.be_and_store_mut();
            be.write_mat(slot.of_mut(store.values_mut()), &w);
            // Central differences in f64 at h = 1e-5: rounding ~1e-16*L/h = 5e-10 for a loss sum
            // L = 12 ln 50, truncation ~h^2 L''' ~ 1e-10; the gradients are ~1e-3, so 1e-8 is a
            // relative 1e-5, and an unscaled table in the backward (angles off by radians) fails it.
            assert!(g[k].abs() > 1e-4 && (fd - g[k]).abs() <= 1e-8, "{name}[{k}]: fd {fd:e}, backward {:e}", g[k]);
            checked += 1;
        }
    }
    assert_eq!(checked, 10);
}
