//! RMSNorm (whole and as the online-statistics pieces) and LayerNorm, forward and backward.

use crate::{Outs, buf, f32buf, read, rnd};
use boost_tensor::{Backend, Mat, MatMut};
use boost_tensor::{LayerNormBwd, LayerNormFwd, OnlineNormBwd, RmsNormBwd, SiluNormBwd};

fn rmsnorm_case<B: Backend>(be: &B, act: bool) -> Outs {
    let (t, d, ld) = (7, 300, 301);
    let x = buf(be, act, &rnd(t * ld, 20));
    let dy = buf(be, act, &rnd(t * d, 21));
    let gamma = f32buf(be, &rnd(d, 22).iter().map(|v| 1.0 + 0.5 * v).collect::<Vec<_>>());
    let mut s = f32buf(be, &vec![0.0; t]);
    be.row_sumsq(MatMut::new(&mut s, t, 1), Mat::at(&x, 0, t, d, ld));
    let sumsq = read(be, Mat::new(&s, t, 1));
    be.rstd_from_sumsq(MatMut::new(&mut s, t, 1), d, 1e-6);
    let mut y = buf(be, act, &vec![0.0; t * d]);
    be.rmsnorm_apply(MatMut::new(&mut y, t, d), Mat::at(&x, 0, t, d, ld), Mat::new(&gamma, 1, d), Mat::new(&s, t, 1));
    let mut dot = f32buf(be, &vec![0.0; t]);
    be.rmsnorm_bwd_dot(
        MatMut::new(&mut dot, t, 1),
        Mat::new(&dy, t, d),
        Mat::at(&x, 0, t, d, ld),
        Mat::new(&gamma, 1, d),
    );
    let mut dx = buf(be, act, &rnd(t * d, 23));
    let mut dg = f32buf(be, &rnd(d, 24));
    for acc in [true, false] {
        be.rmsnorm_bwd(RmsNormBwd {
            dx: MatMut::new(&mut dx, t, d),
            dgamma: MatMut::new(&mut dg, 1, d),
            dy: Mat::new(&dy, t, d),
            x: Mat::at(&x, 0, t, d, ld),
            gamma: Mat::new(&gamma, 1, d),
            rstd: Mat::new(&s, t, 1),
            dot: Mat::new(&dot, t, 1),
            n: d,
            accumulate: acc,
        });
    }
    vec![
        ("row_sumsq", sumsq),
        ("rstd", read(be, Mat::new(&s, t, 1))),
        ("y", read(be, Mat::new(&y, t, d))),
        ("dot", read(be, Mat::new(&dot, t, 1))),
        ("dx", read(be, Mat::new(&dx, t, d))),
        ("dgamma", read(be, Mat::new(&dg, 1, d))),
    ]
}
case!(rmsnorm_forward_backward, rmsnorm_case);

fn online_norm_case<B: Backend>(be: &B, act: bool) -> Outs {
    let (t, d) = (9, 70);
    let a = buf(be, act, &rnd(t * d, 30));
    let b = buf(be, act, &rnd(t * d, 31));
    let row = f32buf(be, &rnd(t, 32));
    let gamma = f32buf(be, &rnd(d, 33));
    let mut out = f32buf(be, &rnd(t, 34));
    be.row_dot(
        MatMut::new(&mut out, t, 1),
        Mat::new(&a, t, d),
        Mat::new(&b, t, d),
        Some(Mat::new(&row, t, 1)),
        -0.5,
        true,
    );
    let with_row = read(be, Mat::new(&out, t, 1));
    be.row_dot(MatMut::new(&mut out, t, 1), Mat::new(&a, t, d), Mat::new(&b, t, d), None, 2.0, false);
    let mut dx = buf(be, act, &rnd(t * d, 35));
    let mut dg = f32buf(be, &rnd(d, 36));
    for acc in [true, false, true] {
        be.online_norm_bwd(OnlineNormBwd {
            dx: MatMut::new(&mut dx, t, d),
            dgamma: Some(MatMut::new(&mut dg, 1, d)),
            g: Mat::new(&a, t, d),
            x: Mat::new(&b, t, d),
            gamma: Mat::new(&gamma, 1, d),
            ds: Mat::new(&row, t, 1),
            accumulate: acc,
        });
    }
    // Without dγ (γ folded into the next GEMM): dx only.
    be.online_norm_bwd(OnlineNormBwd {
        dx: MatMut::new(&mut dx, t, d),
        dgamma: None,
        g: Mat::new(&a, t, d),
        x: Mat::new(&b, t, d),
        gamma: Mat::new(&gamma, 1, d),
        ds: Mat::new(&row, t, 1),
        accumulate: true,
    });
    vec![
        ("row_dot (row², acc)", with_row),
        ("row_dot", read(be, Mat::new(&out, t, 1))),
        ("dx", read(be, Mat::new(&dx, t, d))),
        ("dgamma", read(be, Mat::new(&dg, 1, d))),
    ]
}
case!(online_norm_pieces, online_norm_case);

fn silu_norm_case<B: Backend>(be: &B, act: bool) -> Outs {
    // Two components side by side in rows of 2·r, as a grouped latent.
    let (t, r) = (9, 37);
    let x = buf(be, act, &rnd(t * 2 * r, 50));
    let stat = f32buf(be, &rnd(t, 51).iter().map(|v| 1.0 + 0.5 * v).collect::<Vec<_>>());
    let mut dp = buf(be, act, &rnd(t * 2 * r, 52));
    let mut ds = f32buf(be, &rnd(t, 53));
    for j in 0..2 {
        be.silu_norm_bwd(SiluNormBwd {
            dp: MatMut::at(&mut dp, j * r, t, r, 2 * r),
            x: Mat::at(&x, j * r, t, r, 2 * r),
            p: Mat::at(&x, j * r, t, r, 2 * r),
            stat: Mat::new(&stat, t, 1),
            ds: MatMut::new(&mut ds, t, 1),
            alpha: -0.5 / 74.0,
            accumulate: j > 0,
        });
    }
    vec![("dp", read(be, Mat::new(&dp, t, 2 * r))), ("ds", read(be, Mat::new(&ds, t, 1)))]
}
case!(silu_norm_backward, silu_norm_case);

fn layernorm_case<B: Backend>(be: &B, act: bool) -> Outs {
    let (t, r) = (6, 40);
    let x = buf(be, act, &rnd(t * r, 40).iter().map(|v| 3.0 + v).collect::<Vec<_>>());
    let w = f32buf(be, &rnd(r, 41));
    let b = f32buf(be, &rnd(r, 42));
    let dy = buf(be, act, &rnd(t * r, 43));
    let mut y = buf(be, act, &vec![0.0; t * r]);
    let mut mean = f32buf(be, &vec![0.0; t]);
    let mut rstd = f32buf(be, &vec![0.0; t]);
    be.layernorm_fwd(LayerNormFwd {
        y: MatMut::new(&mut y, t, r),
        mean: MatMut::new(&mut mean, t, 1),
        rstd: MatMut::new(&mut rstd, t, 1),
        x: Mat::new(&x, t, r),
        w: Mat::new(&w, 1, r),
        b: Mat::new(&b, 1, r),
        eps: 1e-6,
    });
    let mut dx = buf(be, act, &vec![0.0; t * r]);
    let mut dw = f32buf(be, &rnd(r, 44));
    let mut db = f32buf(be, &rnd(r, 45));
    be.layernorm_bwd(LayerNormBwd {
        dx: MatMut::new(&mut dx, t, r),
        dw: MatMut::new(&mut dw, 1, r),
        db: MatMut::new(&mut db, 1, r),
        dy: Mat::new(&dy, t, r),
        x: Mat::new(&x, t, r),
        w: Mat::new(&w, 1, r),
        mean: Mat::new(&mean, t, 1),
        rstd: Mat::new(&rstd, t, 1),
    });
    vec![
        ("y", read(be, Mat::new(&y, t, r))),
        ("mean", read(be, Mat::new(&mean, t, 1))),
        ("rstd", read(be, Mat::new(&rstd, t, 1))),
        ("dx", read(be, Mat::new(&dx, t, r))),
        ("dw", read(be, Mat::new(&dw, 1, r))),
        ("db", read(be, Mat::new(&db, 1, r))),
    ]
}
case!(layernorm_forward_backward, layernorm_case);
