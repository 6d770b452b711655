//! The model's LM head loss by chunks of logits (`Backend::head_xent`) on the CUDA backend:
//! a training step's loss and every gradient against the CPU engine (which keeps the whole
//! logits), the logits `Model::logits` still gives, and the step's memory high-water mark
//! against the same step holding the whole logits. The chunk budget is process-wide
//! (`set_head_loss_chunk_bytes`), so this file is its own test binary with one test.
#![cfg(any(feature = "cuda", feature = "emulate"))]

mod common;

use boost_config::{Arch, LaxGate, ModelConfig};
use boost_cuda::{Precision, set_head_loss_chunk_bytes};
use boost_model::{Batch, Layout, Model};
use boost_tensor::cpu::Cpu;
use boost_tensor::{Backend, Solo};
use boost_testkit::{Tol, bf16_forward_roundings};

const VOCAB: usize = 256;
const BATCH: usize = 4;
const SEQ: usize = 16;

fn batch() -> (Vec<u32>, Vec<u32>) {
    let ids: Vec<u32> = (0..BATCH * SEQ).map(|i| (i * 37 % VOCAB) as u32).collect();
    let targets = ids.iter().map(|&i| (i * 5 + 3) % VOCAB as u32).collect();
    (ids, targets)
}

/// One step's mean loss, every gradient, the device's high-water mark (a GPU's) and the logits.
struct Step {
    loss: f64,
    grads: Vec<(String, Vec<f64>)>,
    peak: Option<u64>,
    logits: Vec<f64>,
}

fn step<B: Backend>(be: B, cfg: &ModelConfig) -> Step {
    let mut model = Model::new(be, cfg, Layout::single(cfg), 7).unwrap();
    let (ids, targets) = batch();
    let b = Batch { ids: &ids, targets: &targets, batch: BATCH, seq: SEQ };
    let l = model.forward_backward(&Solo, &b, 1.0 / (BATCH * SEQ) as f64);
    let peak = model.be().peak_memory_bytes();
    let st = model.store();
    let grads = st.pieces().iter().map(|p| (p.name.clone(), model.be().read_mat(p.slot.of(st.grads())))).collect();
    let logits = model.logits(&Solo, &ids, BATCH, SEQ);
    Step { loss: l.sum / l.tokens as f64, grads, peak, logits }
}

/// Tolerances as `training.rs`'s one-step test: fp32 1e-4 (summation order: the head's
/// weight gradient is summed chunk by chunk); mixed precision `Tol::bf16`'s bounds from bf16's
/// unit roundoff (the chunks store their logits in bf16 as the whole logits are).
#[test]
fn a_step_with_the_chunked_head_loss_matches_the_cpu_engine_in_less_memory() {
    let t = BATCH * SEQ;
    for prec in [Precision::F32, Precision::Bf16] {
        let Some(be) = common::backend(prec) else { return };
        let act = be.elem_bytes();
        let whole = t * VOCAB * act;
        for (name, arch) in [("full", Arch::Full), ("cola", Arch::Cola)] {
            let cfg = boost_testkit::small_model(arch, LaxGate::Dense, 64, 16, VOCAB);
            let tol = match prec {
                Precision::F32 => Tol::uniform(1e-4),
                Precision::Bf16 => Tol::bf16(bf16_forward_roundings(&cfg), t, 200_000),
            };
            // Whole logits (the budget holds them), then chunks of 8 rows.
            set_head_loss_chunk_bytes(usize::MAX);
            assert_eq!(be.head_loss_chunk_rows(t, VOCAB), None);
            let fresh = || if common::on_gpu(&be) { be.clone() } else { common::backend(prec).expect("the emulator") };
            let whole_peak = step(fresh(), &cfg).peak;
            set_head_loss_chunk_bytes(8 * VOCAB * act);
            assert_eq!(be.head_loss_chunk_rows(t, VOCAB), Some(8));
            let (g, c) = (step(fresh(), &cfg), step(Cpu::<f32>::new(), &cfg));
            let chunked_peak = g.peak;
            let what = format!("{name} [{}]", be.name());
            tol.check_out(&format!("{what} loss"), &[g.loss], &[c.loss]);
            tol.check_out(&format!("{what} logits"), &g.logits, &c.logits);
            let (mut all_g, mut all_c) = (Vec::new(), Vec::new());
            for ((n, g), (_, c)) in g.grads.iter().zip(&c.grads) {
                tol.check_tensor(&format!("{what} grad {n}"), g, c);
                all_g.extend_from_slice(g);
                all_c.extend_from_slice(c);
            }
            tol.check_all(&format!("{what} all gradients"), &all_g, &all_c);
            if !common::on_gpu(&be) {
                // A fresh emulated device per run: the high-water marks compare. The whole
                // logits are held for the step; the chunks only while the loss runs.
                let (w, c) = (whole_peak.unwrap(), chunked_peak.unwrap());
                eprintln!("{what}: peak {w} B with the whole logits ({whole} B), {c} B by chunks of 8 rows");
                assert!(w - c >= (whole - 8 * VOCAB * act) as u64, "{what}: {w} B whole, {c} B chunked");
            }
        }
    }
    set_head_loss_chunk_bytes(64 << 20);
}
