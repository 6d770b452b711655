//! The GPU memory `boost plan` predicts against what the allocator holds in a real training
//! step: for each recompute policy (none, full, lowrank) and architecture (full rank, CoLA),
//! one step (forward/backward, gradient norm, AdamW) at d 256, 4 layers, seq 256 × 4, where
//! fixed workspaces are small beside the activations. The engine stores activations in fp32
//! today, so the plan's fp32 figure (`Dtype::F32`, what `check_gpu_memory` refuses runs by)
//! is the one held to the allocator's high-water mark: the total within 10 %, and the
//! activations and logits within 10 % of what the step adds on top of the model and its
//! optimizer state. 10 %: the plan counts what every layer keeps, not each scratch buffer or
//! workspace, and is used to refuse runs that cannot fit; a wrong term (a missing buffer per
//! layer, a dtype's bytes) moves it by far more.
#![cfg(any(feature = "cuda", feature = "emulate"))]

mod common;

use boost_config::{Config, TrainConfig};
use boost_cuda::Precision;
use boost_exec::optim::{AdamW, clip_coef, grad_norm};
use boost_model::{Batch, Layout, Model};
use boost_perf::{Dtype, Setup};
use boost_tensor::{Backend, Solo};

const MIB: f64 = 1024.0 * 1024.0;

fn config(arch: &str, policy: &str) -> Config {
    let sets: Vec<String> = [
        "model.d=256",
        "model.d_ff=688",
        "model.heads=4",
        "model.layers=4",
        "model.rank=64",
        "model.vocab=512",
        "train.seq_len=256",
        "train.micro_batch=4",
    ]
    .iter()
    .map(|s| s.to_string())
    .chain([format!("model.arch={arch}"), format!("train.recompute={policy}")])
    .collect();
    Config::load(None, &sets).unwrap()
}

/// (bytes held after the model and optimizer are allocated, peak bytes of one step).
fn measure(cfg: &Config) -> Option<(f64, f64)> {
    let be = common::backend(Precision::Bf16)?;
    let mut model = Model::new(be.clone(), &cfg.model, Layout::single(&cfg.model), 1).unwrap();
    model.set_recompute(cfg.train.recompute);
    let mut adam = AdamW::new(&model.be, &model.store);
    let before = be.peak_memory_bytes().expect("the allocator counts its bytes") as f64;
    let (mb, seq) = (cfg.train.micro_batch, cfg.train.seq_len);
    let ids: Vec<u32> = (0..mb * seq + 1).map(|i| ((i * 37 + 11) % cfg.model.vocab) as u32).collect();
    let b = Batch { ids: &ids[..mb * seq], targets: &ids[1..], batch: mb, seq };
    model.store.zero_grads(&model.be);
    model.forward_backward(&Solo, &b, 1.0 / (mb * seq) as f64);
    let coef = clip_coef(grad_norm(&model.be, &model.store, 0, &Solo), 1.0);
    adam.update(&model.be, &mut model.store, &TrainConfig::default(), 1e-3, coef);
    be.sync();
    Some((before, be.peak_memory_bytes().unwrap() as f64))
}

/// Measured on the emulator (MiB, predicted → measured): the model state 52.29 → 58.82 (full)
/// and 23.10 → 25.98 (CoLA), 12.5 % over, exactly the bf16 weight copy `alloc_param` keeps
/// beside the fp32 master (18 bytes a parameter, the fp32 plan counts 16); the step without
/// recompute 70.34 → 69.19 (full) and 84.34 → 88.38 (CoLA), within 5 %, though partly by
/// cancellation (the plan counts the SwiGLU product the engine rebuilds, ~11 MiB here, and no
/// scratch: the layer-gradient buffers, the norm outputs' gradients, the residual gradient);
/// with recompute the step is 22–31 MiB over the plan (full/full 26.09 → 48.38, CoLA/full
/// 29.59 → 60.57, CoLA/lowrank 40.62 → 71.60): the plan counts one recomputed layer's working
/// set and the engine allocates two (`Work::blocks`, even and odd layers in turn), one layer's
/// activations being ~17 (full) and ~20 (CoLA) MiB; the remaining 6–11 MiB is not yet
/// attributed (logging the emulator's allocation sizes would show it). Ignored until the plan
/// counts what the engine allocates (#68, item 4); run with `--ignored`.
#[test]
#[ignore = "the plan misses the bf16 weight copy and the second recompute set (#68, item 4)"]
fn plan_memory_matches_the_allocator() {
    let mut failures = Vec::new();
    for arch in ["full", "cola"] {
        for policy in ["none", "full", "lowrank"] {
            if arch == "full" && policy == "lowrank" {
                continue; // low-rank recompute needs latents
            }
            let cfg = config(arch, policy);
            let plan = boost_perf::step::memory(&Setup::from_config(&cfg, None, Dtype::F32).unwrap());
            let Some((before, peak)) = measure(&cfg) else { return };
            let (state, step) = (plan.weights + plan.gradients + plan.optimizer, plan.activations + plan.logits);
            println!(
                "{arch} {policy}: predicted state {:.2} + step {:.2} (activations {:.2}, logits {:.2}) = {:.2} MiB; \
                 measured state {:.2} + step {:.2} = {:.2} MiB",
                state / MIB,
                step / MIB,
                plan.activations / MIB,
                plan.logits / MIB,
                plan.total / MIB,
                before / MIB,
                (peak - before) / MIB,
                peak / MIB
            );
            for (what, predicted, measured) in
                [("total", plan.total, peak), ("model state", state, before), ("step", step, peak - before)]
            {
                let err = (predicted - measured).abs() / measured;
                if err > 0.10 {
                    failures.push(format!(
                        "{arch} {policy} {what}: predicted {predicted:.0} B, measured {measured:.0} B ({:.1} % off)",
                        err * 100.0
                    ));
                }
            }
        }
    }
    assert!(failures.is_empty(), "the plan's memory is more than 10 % off:\n{}", failures.join("\n"));
}
