//! AdamW on fp32 master weights, and the bf16 copy a GEMM reads under mixed precision.

use crate::common::backend;
use crate::{Outs, f32buf, read, rnd};
use boost_cuda::Precision;
use boost_tensor::AdamUpdate;
use boost_tensor::{AdamStep, Backend, Mat, MatMut};

fn adamw_case<B: Backend>(be: &B, _act: bool) -> Outs {
    let n = 1000;
    let mut p = be.alloc_param(n);
    be.write_mat(MatMut::new(&mut p, 1, n), &rnd(n, 110));
    let g = f32buf(be, &rnd(n, 111));
    let mut m = f32buf(be, &rnd(n, 112).iter().map(|v| 0.1 * v).collect::<Vec<_>>());
    let mut v = f32buf(be, &rnd(n, 113).iter().map(|v| 0.01 * v * v).collect::<Vec<_>>());
    for (t, decay, off, len) in [(1, true, 0, n), (2, false, 100, 500), (3, true, 7, 993)] {
        let s = AdamStep {
            lr: 1e-2,
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
            weight_decay: 0.1,
            bias_corr1: 1.0 - 0.9f64.powi(t),
            bias_corr2: 1.0 - 0.999f64.powi(t),
            grad_scale: 0.5,
        };
        be.adamw(AdamUpdate { p: &mut p, g: &g, m: &mut m, v: &mut v, off, n: len, step: &s, decay });
    }
    // The GEMM reads the bf16 copy of a parameter under mixed precision: x·p with x = e₀
    // must give p's first row (rounded to bf16 there).
    let e = f32buf(be, &[1.0]);
    let mut row = f32buf(be, &[0.0; 10]);
    be.gemm(MatMut::new(&mut row, 1, 10), Mat::new(&e, 1, 1), Mat::new(&p, 1, 10), 1.0, false);
    vec![
        ("p", read(be, Mat::new(&p, 1, n))),
        ("m", read(be, Mat::new(&m, 1, n))),
        ("v", read(be, Mat::new(&v, 1, n))),
        ("p through gemm", read(be, Mat::new(&row, 1, 10))),
    ]
}
case!(adamw_updates_master_and_copy, adamw_case);

/// The bf16 copy of a parameter follows every write: after AdamW, a GEMM (which reads the
/// copy under mixed precision) sees the master weights rounded to bf16, exactly.
#[test]
fn parameter_copy_tracks_the_master_weights() {
    let Some(be) = backend(Precision::Bf16) else { return };
    let n = 64;
    let mut p = be.alloc_param(n);
    assert!(p.has_bf16_copy());
    be.write_mat(MatMut::new(&mut p, 1, n), &rnd(n, 120));
    let g = be.alloc(n);
    let (mut m, mut v) = (be.alloc(n), be.alloc(n));
    let mut gh = be.alloc(n);
    be.write_mat(MatMut::new(&mut gh, 1, n), &rnd(n, 121));
    let s = AdamStep {
        lr: 0.1,
        beta1: 0.9,
        beta2: 0.99,
        eps: 1e-8,
        weight_decay: 0.0,
        bias_corr1: 0.1,
        bias_corr2: 0.01,
        grad_scale: 1.0,
    };
    be.adamw(AdamUpdate { p: &mut p, g: &gh, m: &mut m, v: &mut v, off: 0, n, step: &s, decay: false });
    drop(g);
    let master: Vec<f64> = be.read_mat(Mat::new(&p, 1, n));
    let e = be.alloc_act(1);
    let mut e = e;
    be.write_mat(MatMut::new(&mut e, 1, 1), &[1.0f64]);
    let mut out = be.alloc(n);
    be.gemm(MatMut::new(&mut out, 1, n), Mat::new(&e, 1, 1), Mat::new(&p, 1, n), 1.0, false);
    let through: Vec<f64> = be.read_mat(Mat::new(&out, 1, n));
    for (a, b) in through.iter().zip(&master) {
        assert_eq!(*a, half::bf16::from_f64(*b).to_f64(), "the GEMM must read the bf16 copy of the master weight");
    }
}
