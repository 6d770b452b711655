//! AdamW over a parameter store (fp32 moments, one pair per parameter buffer), and the
//! global gradient norm.

use boost_config::TrainConfig;
use boost_model::params::ParamStore;
use boost_tensor::{AdamStep, Backend, Collective, Label, Mat, ReduceOp};

pub struct AdamW<B: Backend> {
    pub m: Vec<B::Buf>,
    pub v: Vec<B::Buf>,
    /// Optimizer steps taken.
    pub step: u64,
}

impl<B: Backend> AdamW<B> {
    pub fn new(be: &B, store: &ParamStore<B>) -> Self {
        Self {
            m: store.bufs.iter().map(|b| be.alloc(b.len)).collect(),
            v: store.bufs.iter().map(|b| be.alloc(b.len)).collect(),
            step: 0,
        }
    }

    /// One update with learning rate `lr`; the gradient is multiplied by `grad_scale` first
    /// (the clipping coefficient).
    pub fn update(&mut self, be: &B, store: &mut ParamStore<B>, cfg: &TrainConfig, lr: f64, grad_scale: f64) {
        self.step += 1;
        let s = adam_step(cfg, self.step, lr, grad_scale);
        for (i, info) in store.bufs.iter().enumerate() {
            be.adamw(boost_tensor::AdamUpdate {
                p: &mut store.values[i],
                g: &store.grads[i],
                m: &mut self.m[i],
                v: &mut self.v[i],
                off: 0,
                n: info.len,
                step: &s,
                decay: info.decay,
            });
        }
    }
}

/// ‖g‖₂ over the whole model: each rank sums its buffers (a buffer replicated across the
/// tensor-parallel group only on rank 0), then the sum is all-reduced over `group`.
pub fn grad_norm<B: Backend>(be: &B, store: &ParamStore<B>, tp_rank: usize, group: &dyn Collective<B>) -> f64 {
    let mut sq = 0.0;
    for (g, info) in store.grads.iter().zip(&store.bufs) {
        if info.replicated && tp_rank != 0 {
            continue;
        }
        sq += be.sumsq(Mat::new(g, 1, info.len));
    }
    if group.size() > 1 {
        let mut buf = be.alloc(1);
        be.write_mat(boost_tensor::MatMut::new(&mut buf, 1, 1), &[sq]);
        group.all_reduce(&mut buf, 0, 1, ReduceOp::Sum, Label::op("grad_norm"));
        sq = be.read_mat::<f64>(Mat::new(&buf, 1, 1))[0];
    }
    sq.sqrt()
}

/// PyTorch's clip_grad_norm_ coefficient: min(1, max_norm / (norm + 1e-6)); 1 when off.
pub fn clip_coef(norm: f64, max_norm: f64) -> f64 {
    if max_norm <= 0.0 { 1.0 } else { (max_norm / (norm + 1e-6)).min(1.0) }
}

/// The scalars of AdamW update number `step` (1-based).
pub fn adam_step(cfg: &TrainConfig, step: u64, lr: f64, grad_scale: f64) -> AdamStep {
    let t = step as i32;
    AdamStep {
        lr,
        beta1: cfg.beta1,
        beta2: cfg.beta2,
        eps: cfg.eps,
        weight_decay: cfg.weight_decay,
        bias_corr1: 1.0 - cfg.beta1.powi(t),
        bias_corr2: 1.0 - cfg.beta2.powi(t),
        grad_scale,
    }
}
