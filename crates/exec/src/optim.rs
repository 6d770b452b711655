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
    /// Per buffer: its length and whether weight decay applies (`Backend::adamw_all`).
    lens: Vec<(usize, bool)>,
    /// Guarded updates the device skipped that step reports have shown
    /// ([`AdamW::update_guarded`], [`AdamW::unapply`]).
    skips_seen: u64,
}

impl<B: Backend> AdamW<B> {
    pub fn new(be: &B, store: &ParamStore<B>) -> Self {
        Self {
            m: store.bufs().iter().map(|b| be.alloc(b.len)).collect(),
            v: store.bufs().iter().map(|b| be.alloc(b.len)).collect(),
            step: 0,
            lens: store.bufs().iter().map(|b| (b.len, b.decay)).collect(),
            skips_seen: 0,
        }
    }

    /// One update with learning rate `lr`; the gradient is multiplied by `grad_scale` first
    /// (the clipping coefficient).
    pub fn update(&mut self, be: &B, store: &mut ParamStore<B>, cfg: &TrainConfig, lr: f64, grad_scale: f64) {
        self.update_all(be, store, cfg, lr, Clip::Host(grad_scale))
    }

    /// One update with learning rate `lr`, the gradients clipped to `max_norm` by the norm
    /// the device computes ([`Backend::queue_grad_sumsq`]; `Backend::read_grad_sumsq` reads
    /// it afterwards): nothing waits for the device. Where the backend keeps no norm on a
    /// device, the norm is summed on the host first, as [`grad_norm`] does.
    pub fn update_clipped(&mut self, be: &B, store: &mut ParamStore<B>, cfg: &TrainConfig, lr: f64, max_norm: f64) {
        let views = || store.grads().iter().zip(store.bufs()).map(|(g, i)| Mat::new(g, 1, i.len));
        if be.keeps_grad_sumsq() {
            let views: Vec<Mat<B::Buf>> = views().collect();
            assert!(be.queue_grad_sumsq(&views, max_norm, None), "{}: no gradient sum on the device", be.name());
            self.update_all(be, store, cfg, lr, Clip::Device)
        } else {
            let coef = clip_coef(sumsq_in_order(be, views()).sqrt(), max_norm);
            self.update_all(be, store, cfg, lr, Clip::Host(coef))
        }
    }

    /// One update at rate `lr`, clipped by the norm that [`Backend::queue_grad_sumsq`] with
    /// a guard just judged on the device, applied only if the guard says so: counted as
    /// applied until a step report says otherwise ([`AdamW::unapply`]).
    pub fn update_guarded(&mut self, be: &B, store: &mut ParamStore<B>, cfg: &TrainConfig, lr: f64) {
        self.update_all(be, store, cfg, lr, Clip::Guarded)
    }

    /// A step report showed that the device skipped a guarded update: it is not counted.
    pub fn unapply(&mut self) {
        self.step -= 1;
        self.skips_seen += 1;
    }

    fn update_all(&mut self, be: &B, store: &mut ParamStore<B>, cfg: &TrainConfig, lr: f64, clip: Clip) {
        self.step += 1;
        let scale = if let Clip::Host(c) = clip { c } else { 1.0 };
        let s = adam_step(cfg, self.step, lr, scale);
        let u = store.for_update();
        be.adamw_all(boost_tensor::AdamAll {
            p: u.values,
            g: u.grads,
            m: &mut self.m,
            v: &mut self.v,
            lens: &self.lens,
            step: &s,
            device_clip: !matches!(clip, Clip::Host(_)),
            guarded: (clip == Clip::Guarded)
                .then_some(boost_tensor::Guarded { t: self.step, skips_seen: self.skips_seen }),
        });
    }
}

/// Where an update's clip coefficient comes from: the host's, the device's norm, or the
/// device's norm that its guard judged (the update obeys the verdict).
#[derive(Clone, Copy, PartialEq)]
enum Clip {
    Host(f64),
    Device,
    Guarded,
}

/// ‖g‖₂ over the whole model: each rank sums its buffers (a buffer replicated across the
/// tensor-parallel group only on rank 0), then the sum is all-reduced over `group`.
pub fn grad_norm<B: Backend>(be: &B, store: &ParamStore<B>, tp_rank: usize, group: &dyn Collective<B>) -> f64 {
    let counted = (store.grads().iter().zip(store.bufs()))
        .filter(|(_, info)| !info.replicated || tp_rank == 0)
        .map(|(g, info)| Mat::new(g, 1, info.len));
    let mut sq = sumsq(be, counted);
    if group.size() > 1 {
        let mut buf = be.alloc(1);
        be.write_mat(boost_tensor::MatMut::new(&mut buf, 1, 1), &[sq]);
        group.all_reduce(&mut buf, 0, 1, ReduceOp::Sum, Label::op("grad_norm"));
        sq = be.read_mat::<f64>(Mat::new(&buf, 1, 1))[0];
    }
    sq.sqrt()
}

/// Σ of the squares of every view, added in order: on the device where the backend keeps
/// it there ([`Backend::queue_grad_sumsq`], one read back), else [`sumsq_in_order`].
pub fn sumsq<'a, B: Backend>(be: &B, views: impl IntoIterator<Item = Mat<'a, B::Buf>>) -> f64 {
    if !be.keeps_grad_sumsq() {
        return sumsq_in_order(be, views);
    }
    let views: Vec<Mat<B::Buf>> = views.into_iter().collect();
    assert!(be.queue_grad_sumsq(&views, 0.0, None), "{}: no gradient sum on the device", be.name());
    be.read_grad_sumsq()
}

/// Σ of the squares of every view, added in order. A device reads the sums back once per
/// `CHUNK` views (`Backend::sumsq_each`), not once per view; the views go through a stack
/// array, so a step allocates nothing here.
pub fn sumsq_in_order<'a, B: Backend>(be: &B, views: impl IntoIterator<Item = Mat<'a, B::Buf>>) -> f64 {
    const CHUNK: usize = 128;
    let mut views = views.into_iter().peekable();
    let Some(&first) = views.peek() else { return 0.0 };
    let (mut chunk, mut sums) = ([first; CHUNK], [0.0f64; CHUNK]);
    let mut sq = 0.0;
    loop {
        let mut n = 0;
        for v in views.by_ref().take(CHUNK) {
            chunk[n] = v;
            n += 1;
        }
        if n == 0 {
            return sq;
        }
        be.sumsq_each(&chunk[..n], &mut sums[..n]);
        for s in &sums[..n] {
            sq += s;
        }
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use boost_tensor::cpu::Cpu;

    #[test]
    fn sums_of_squares_in_chunks_equal_the_one_by_one_sum_bit_for_bit() {
        let be = Cpu::<f32>::new();
        // More views than one chunk holds, of uneven lengths, one of them empty.
        let bufs: Vec<Vec<f32>> = (0..300)
            .map(|i| (0..(i * 37) % 101).map(|j| ((i * 13 + j * 7) % 23) as f32 / 7.0 - 1.5).collect())
            .collect();
        let views = || bufs.iter().map(|b| Mat::new(b, 1, b.len()));
        let mut one_by_one = 0.0;
        for v in views() {
            one_by_one += be.sumsq(v);
        }
        assert!(one_by_one > 0.0);
        assert_eq!(sumsq_in_order(&be, views()).to_bits(), one_by_one.to_bits());
        assert_eq!(sumsq_in_order(&be, views().take(128)).to_bits(), {
            let mut s = 0.0;
            views().take(128).for_each(|v| s += be.sumsq(v));
            s.to_bits()
        });
        assert_eq!(sumsq_in_order(&be, views().take(0)), 0.0);
    }
}
