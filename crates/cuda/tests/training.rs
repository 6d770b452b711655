//! Whole training steps of the model on the CUDA backend against the CPU fp32 engine: the
//! first step's loss and every gradient, then a 50-step loss curve.
//!
//! The loop is the trainer's (zero grads, forward/backward, global gradient norm, clipping
//! at 1.0, AdamW with bias correction, decay on matrices only) on a synthetic corpus with
//! learnable structure (each next token is the current one plus a per-sequence stride).
#![cfg(any(feature = "cuda", feature = "emulate"))]

mod common;

use boost_config::{Arch, LaxGate, ModelConfig, RopeScaling, TrainConfig};
use boost_cuda::Precision;
use boost_exec::optim::{AdamW, clip_coef, grad_norm};
use boost_model::{Batch, Layout, Model};
use boost_tensor::cpu::Cpu;
use boost_tensor::{Backend, Solo};
use boost_testkit::{Tol, bf16_forward_roundings};

const VOCAB: usize = 64;
const BATCH: usize = 4;
/// Sequence length of the one-step comparison; the loss curve runs at 32.
const SEQ: usize = 16;
const CURVE_SEQ: usize = 32;

fn config(arch: Arch, gate: LaxGate) -> ModelConfig {
    boost_testkit::small_model(arch, gate, 64, 16, VOCAB)
}

/// Micro-batch `step`: sequences `s, s+k, s+2k, …` (mod VOCAB) with per-sequence s and k.
fn batch(step: usize, seq: usize) -> (Vec<u32>, Vec<u32>) {
    let mut ids = Vec::with_capacity(BATCH * seq);
    let mut targets = Vec::with_capacity(BATCH * seq);
    for b in 0..BATCH {
        let h = ((step * BATCH + b) as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        let (s, k) = ((h >> 20) as usize % VOCAB, 1 + (h >> 40) as usize % 5);
        for i in 0..seq {
            ids.push(((s + i * k) % VOCAB) as u32);
            targets.push(((s + (i + 1) * k) % VOCAB) as u32);
        }
    }
    (ids, targets)
}

struct Trainer<B: Backend> {
    model: Model<B>,
    adam: AdamW<B>,
    train: TrainConfig,
    seq: usize,
}

impl<B: Backend> Trainer<B> {
    fn new(be: B, cfg: &ModelConfig, seq: usize) -> Self {
        let model = Model::new(be, cfg, Layout::single(cfg), 7).unwrap();
        let adam = AdamW::new(model.be(), model.store());
        Self { model, adam, train: TrainConfig::default(), seq }
    }

    /// Gradients of micro-batch `step` (zeroed first); returns the mean loss.
    fn grads(&mut self, step: usize) -> f64 {
        let (ids, targets) = batch(step, self.seq);
        self.model.zero_grads();
        let b = Batch { ids: &ids, targets: &targets, batch: BATCH, seq: self.seq };
        let l = self.model.forward_backward(&Solo, &b, 1.0 / (BATCH * self.seq) as f64);
        l.sum / l.tokens as f64
    }

    /// The trainer's update: clipping at 1.0, then AdamW with `TrainConfig`'s defaults
    /// (β 0.9/0.999, ε 1e-8, decay 0.01).
    fn update(&mut self, lr: f64) {
        let (be, st) = self.model.be_and_store_mut();
        let coef = clip_coef(grad_norm(be, st, 0, &Solo), 1.0);
        self.adam.update(be, st, &self.train, lr, coef);
    }

    fn grad_vectors(&self) -> Vec<(String, Vec<f64>)> {
        let st = self.model.store();
        st.pieces().iter().map(|p| (p.name.clone(), self.model.be().read_mat(p.slot.of(st.grads())))).collect()
    }
}

fn archs() -> Vec<(&'static str, ModelConfig)> {
    vec![
        ("full", config(Arch::Full, LaxGate::Dense)),
        ("svd", config(Arch::Svd, LaxGate::Dense)),
        ("cola", config(Arch::Cola, LaxGate::Dense)),
        ("lax-dense", config(Arch::Lax, LaxGate::Dense)),
        ("lax-kron", config(Arch::Lax, LaxGate::Kron)),
        // Llama 3.1's RoPE scaling, its original context short enough to scale most pairs
        // over 16 positions: the device's forward and backward take the scaled table.
        (
            "cola-llama3",
            ModelConfig {
                rope_scaling: RopeScaling { original_max_position_embeddings: 8, ..RopeScaling::llama3() },
                ..config(Arch::Cola, LaxGate::Dense)
            },
        ),
    ]
}

/// One step's loss and every parameter gradient, on both measures. fp32: 1e-4 for the loss,
/// every tensor and all gradients as one vector. Mixed precision: `Tol::bf16`'s bounds for
/// each model's forward and 64 tokens (at most 2·10⁵ values a vector), derived from bf16's
/// unit roundoff.
#[test]
fn one_training_step_matches_the_cpu_engine() {
    for prec in [Precision::F32, Precision::Bf16] {
        let Some(be) = common::backend(prec) else { return };
        for (name, cfg) in archs() {
            let tol = match prec {
                Precision::F32 => Tol::uniform(1e-4),
                Precision::Bf16 => Tol::bf16(bf16_forward_roundings(&cfg), BATCH * SEQ, 200_000),
            };
            let mut cpu = Trainer::new(Cpu::<f32>::new(), &cfg, SEQ);
            let mut gpu = Trainer::new(be.clone(), &cfg, SEQ);
            let (lc, lg) = (cpu.grads(0), gpu.grads(0));
            let what = format!("{name} [{}]", be.name());
            tol.check_out(&format!("{what} loss"), &[lg], &[lc]);
            let (mut all_g, mut all_c) = (Vec::new(), Vec::new());
            for ((n, g), (_, c)) in gpu.grad_vectors().iter().zip(cpu.grad_vectors()) {
                tol.check_tensor(&format!("{what} grad {n}"), g, &c);
                all_g.extend_from_slice(g);
                all_c.extend(c);
            }
            tol.check_all(&format!("{what} all gradients"), &all_g, &all_c);
        }
    }
}

/// 50 AdamW steps at seq 32 track the CPU fp32 run. Mixed precision: every step's loss
/// within 1 % of the CPU's, and the mean of the last ten too (the loss averages the logits'
/// rounding errors over the batch's 128 tokens, so a step's loss is far closer than the
/// logits' 2.4 % of `Tol::bf16`; 1 % leaves room for the slow drift of two runs whose
/// updates differ by rounding). fp32: every step within 1e-3. The loss must fall. On the
/// emulator only the CoLA model runs (for time).
#[test]
fn fifty_step_loss_curve_tracks_the_cpu_run() {
    let steps = 50;
    for (prec, tol, tail_tol) in [(Precision::Bf16, 1e-2, 1e-2), (Precision::F32, 1e-3, 1e-3)] {
        let Some(be) = common::backend(prec) else { return };
        let models =
            if common::on_gpu(&be) { vec![archs().remove(2), archs().remove(4)] } else { vec![archs().remove(2)] };
        for (name, cfg) in models {
            let mut cpu = Trainer::new(Cpu::<f32>::new(), &cfg, CURVE_SEQ);
            let mut gpu = Trainer::new(be.clone(), &cfg, CURVE_SEQ);
            let (mut lc, mut lg) = (Vec::new(), Vec::new());
            for step in 0..steps {
                let lr = 3e-3 * ((step + 1) as f64 / 5.0).min(1.0);
                lc.push(cpu.grads(step));
                cpu.update(lr);
                lg.push(gpu.grads(step));
                gpu.update(lr);
            }
            eprintln!(
                "{name} [{}]: cpu {:.4} → {:.4}, cuda {:.4} → {:.4}",
                be.name(),
                lc[0],
                lc[steps - 1],
                lg[0],
                lg[steps - 1]
            );
            for (i, (g, c)) in lg.iter().zip(&lc).enumerate() {
                assert!((g - c).abs() <= tol * c, "{name} [{}] step {i}: loss {g} vs cpu {c}", be.name());
            }
            let tail = |l: &[f64]| l[steps - 10..].iter().sum::<f64>() / 10.0;
            let (tg, tc) = (tail(&lg), tail(&lc));
            assert!((tg - tc).abs() <= tail_tol * tc, "{name} [{}]: last ten steps {tg} vs cpu {tc}", be.name());
            assert!(lg[steps - 1] < lg[0] - 0.5, "{name}: the loss must fall ({} → {})", lg[0], lg[steps - 1]);
        }
    }
}
