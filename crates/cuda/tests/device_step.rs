//! A training step's work on the device, counted (`Cuda::counters`): after the first step,
//! a step allocates nothing and waits for the device once, to read its loss; the optimizer
//! (gradient norm, clipping, AdamW) launches the same few kernels whatever the number of
//! parameter buffers, and waits for nothing. Its multi-tensor kernels compute the same bits
//! as the per-buffer ones (`k_full_sum` partials added on the host, `k_adamw` per buffer).
#![cfg(any(feature = "cuda", feature = "emulate"))]

mod common;

use boost_config::{Arch, LaxGate, ModelConfig, TrainConfig};
use boost_cuda::{Counters, Cuda, Precision};
use boost_exec::optim::{AdamW, adam_step, clip_coef};
use boost_model::{Batch, Layout, Model};
use boost_tensor::{Backend, Mat, Solo};

const VOCAB: usize = 64;
const BATCH: usize = 2;
const SEQ: usize = 16;

fn config(layers: usize) -> ModelConfig {
    let mut c = boost_testkit::small_model(Arch::Cola, LaxGate::Dense, 32, 8, VOCAB);
    c.layers = layers;
    c.validate().unwrap();
    c
}

/// Micro-batch `step`'s ids and targets (a per-step stride, so each step's ids differ).
fn data(step: usize) -> (Vec<u32>, Vec<u32>) {
    let ids: Vec<u32> = (0..BATCH * SEQ + 1).map(|i| ((i * (step + 3) + step) % VOCAB) as u32).collect();
    (ids[..BATCH * SEQ].to_vec(), ids[1..].to_vec())
}

/// Forward and backward of micro-batch `step` (gradients zeroed first).
fn grads(m: &mut Model<Cuda>, step: usize) {
    let (ids, targets) = data(step);
    m.zero_grads();
    let b = Batch { ids: &ids, targets: &targets, batch: BATCH, seq: SEQ };
    m.forward_backward(&Solo, &b, 1.0 / (BATCH * SEQ) as f64);
}

/// (the whole step's counts, the optimizer's) of `steps` steps with the norm, clipping
/// coefficient and update on the device.
fn counted_steps(be: Cuda, layers: usize, steps: usize) -> Vec<(Counters, Counters)> {
    let cfg = config(layers);
    let mut m = Model::new(be.clone(), &cfg, Layout::single(&cfg), 7).unwrap();
    let mut adam = AdamW::new(m.be(), m.store());
    let tc = TrainConfig::default();
    (0..steps)
        .map(|s| {
            let c0 = be.counters();
            grads(&mut m, s);
            let c1 = be.counters();
            let (be, st) = m.be_and_store_mut();
            adam.update_clipped(be, st, &tc, 1e-3 * (1.0 + s as f64), 1.0);
            let c2 = be.counters();
            (c2.since(&c0), c2.since(&c1))
        })
        .collect()
}

#[test]
fn steps_after_the_first_allocate_nothing_and_wait_only_for_the_loss() {
    let Some(be) = common::backend(Precision::Bf16) else { return };
    let steps = counted_steps(be, 2, 4);
    // The first step builds the optimizer's tables and the workspaces.
    assert!(steps[0].0.allocs > 0, "{:?}", steps[0].0);
    for (s, (step, opt)) in steps.iter().enumerate().skip(1) {
        assert_eq!(step.allocs, 0, "step {s} allocated: {step:?}");
        // The only wait: the loss, summed on the device and read back by the forward.
        assert_eq!((step.syncs, step.downloads), (1, 1), "step {s}: {step:?}");
        // Inputs and targets, then the step's scalars (learning rate, bias corrections).
        assert_eq!(step.uploads, 3, "step {s}: {step:?}");
        assert_eq!((opt.syncs, opt.allocs, opt.uploads), (0, 0, 1), "step {s}'s optimizer: {opt:?}");
    }
}

#[test]
fn optimizer_launches_do_not_depend_on_the_number_of_buffers() {
    let Some(be) = common::backend(Precision::F32) else { return };
    let Some(be4) = common::backend(Precision::F32) else { return };
    let (small, large) = (config(1), config(4));
    let bufs = |c: &ModelConfig| Model::new(be.clone(), c, Layout::single(c), 7).unwrap().store().buf_count();
    let (n1, n4) = (bufs(&small), bufs(&large));
    assert!(n4 > n1 + 10, "{n1} and {n4} buffers");
    let a = counted_steps(be, 1, 2);
    let b = counted_steps(be4, 4, 2);
    let (oa, ob) = (&a[1].1, &b[1].1);
    assert_eq!(oa.launches, ob.launches, "{n1} buffers: {oa:?}; {n4} buffers: {ob:?}");
    // The multi-tensor sum of squares, the norm and coefficient, the multi-tensor AdamW.
    assert_eq!(oa.kernel_launches(), 3, "{oa:?}");
    assert_eq!(oa.gemms, 0);
}

#[test]
fn gradients_are_zeroed_in_one_launch_whatever_the_number_of_buffers() {
    for layers in [1, 4] {
        let Some(be) = common::backend(Precision::Bf16) else { return };
        let cfg = config(layers);
        let mut m = Model::new(be.clone(), &cfg, Layout::single(&cfg), 7).unwrap();
        grads(&mut m, 0);
        let nonzero = |m: &Model<Cuda>| {
            let st = m.store();
            (st.grads().iter().zip(st.bufs()))
                .filter(|(g, i)| m.be().read_mat::<f32>(Mat::new(g, 1, i.len)).iter().any(|&x| x != 0.0))
                .count()
        };
        assert!(nonzero(&m) > 10, "{layers} layers: the backward left most gradients non-zero");
        for _ in 0..2 {
            let c0 = be.counters();
            m.zero_grads();
            let c = be.counters().since(&c0);
            assert_eq!(c.launches.get("k_zero_multi"), Some(&1), "{layers} layers: {c:?}");
            assert_eq!(c.kernel_launches(), 1, "{layers} layers, {} buffers: {c:?}", m.store().buf_count());
            // The table of views went up with the first zeroing (before the backward above);
            // zeroing the same buffers again reuses it.
            assert_eq!((c.allocs, c.uploads, c.syncs), (0, 0, 0), "{c:?}");
            assert_eq!(nonzero(&m), 0, "{layers} layers: a gradient was left non-zero");
        }
    }
}

/// The clipping threshold of the bit-for-bit comparison: below the first steps' norms.
const MAX_NORM: f64 = 0.5;

/// The per-buffer path: each gradient's sum of squares read back and added on the host,
/// PyTorch's clip coefficient on the host, then one `k_adamw` per buffer.
fn per_buffer_update(m: &mut Model<Cuda>, adam: &mut AdamW<Cuda>, tc: &TrainConfig, lr: f64) -> f64 {
    let mut sq = 0.0;
    for (g, info) in m.store().grads().iter().zip(m.store().bufs()) {
        sq += m.be().sumsq(Mat::new(g, 1, info.len));
    }
    let norm = sq.sqrt();
    adam.step += 1;
    let s = adam_step(tc, adam.step, lr, clip_coef(norm, MAX_NORM));
    let (be, st) = m.be_and_store_mut();
    let u = st.for_update();
    for (i, info) in u.bufs.iter().enumerate() {
        be.adamw(boost_tensor::AdamUpdate {
            p: &mut u.values[i],
            g: &u.grads[i],
            m: &mut adam.m[i],
            v: &mut adam.v[i],
            off: 0,
            n: info.len,
            step: &s,
            decay: info.decay,
        });
    }
    norm
}

#[test]
fn multi_tensor_norm_clip_and_adamw_equal_the_per_buffer_kernels_bit_for_bit() {
    for prec in [Precision::F32, Precision::Bf16] {
        let (Some(be_a), Some(be_b)) = (common::backend(prec), common::backend(prec)) else { return };
        let cfg = config(2);
        let mut a = Model::new(be_a, &cfg, Layout::single(&cfg), 7).unwrap();
        let mut b = Model::new(be_b, &cfg, Layout::single(&cfg), 7).unwrap();
        let (mut adam_a, mut adam_b) = (AdamW::new(a.be(), a.store()), AdamW::new(b.be(), b.store()));
        // Clipped steps and a changing learning rate.
        let tc = TrainConfig::default();
        let mut clipped = 0;
        for s in 0..5 {
            grads(&mut a, s);
            grads(&mut b, s);
            let lr = 1e-2 / (1.0 + s as f64);
            let (be, st) = a.be_and_store_mut();
            adam_a.update_clipped(be, st, &tc, lr, MAX_NORM);
            let norm = per_buffer_update(&mut b, &mut adam_b, &tc, lr);
            let device_norm = a.be().read_grad_sumsq().sqrt();
            assert_eq!(device_norm.to_bits(), norm.to_bits(), "{prec:?} step {s}: norm {device_norm} vs {norm}");
            clipped += (norm > MAX_NORM) as usize;
            for (i, info) in a.store().bufs().iter().enumerate() {
                let (x, y, n) = (a.store().value(i), b.store().value(i), info.len);
                let (x, y): (Vec<f32>, Vec<f32>) =
                    (a.be().read_mat(Mat::new(x, 1, n)), b.be().read_mat(Mat::new(y, 1, n)));
                let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
                assert!(bits(&x) == bits(&y), "{prec:?} step {s}: buffer {i} differs");
            }
        }
        assert!(clipped > 0, "{prec:?}: no step was clipped, the coefficient went untested");
    }
}
