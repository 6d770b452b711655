//! GEMMs in every transpose, on strided views and parameter operands; elementwise kernels
//! and reductions; SiLU and SwiGLU.

use crate::{Outs, buf, f32buf, read, rnd};
use boost_tensor::{Backend, Mat, MatMut};

fn gemm_case<B: Backend>(be: &B, act: bool) -> Outs {
    let mut outs = Vec::new();
    // A: 5×7 view (ld 9, offset 2), B: 7×6 view (ld 8, offset 3), and their transposes.
    let (m, k, n) = (5, 7, 6);
    for (ta, tb, name_acc) in [(false, false, "nn"), (true, false, "tn"), (false, true, "nt"), (true, true, "tt")] {
        let (ar, ac) = if ta { (k, m) } else { (m, k) };
        let (br, bc) = if tb { (n, k) } else { (k, n) };
        let a = buf(be, act, &rnd(2 + ar * 9, 1));
        let b = buf(be, act, &rnd(3 + br * 8, 2));
        let mut c = f32buf(be, &rnd(1 + m * 10, 3));
        let mut av = Mat::at(&a, 2, ar, ac, 9);
        let mut bv = Mat::at(&b, 3, br, bc, 8);
        if ta {
            av = av.t();
        }
        if tb {
            bv = bv.t();
        }
        be.gemm(MatMut::at(&mut c, 1, m, n, 10), av, bv, 0.5, false);
        be.gemm(MatMut::at(&mut c, 1, m, n, 10), av, bv, -1.5, true);
        outs.push((name_acc, read(be, Mat::at(&c, 0, 1, 1 + m * 10, 1 + m * 10))));
    }
    // A parameter operand (fp32 master, bf16 copy under mixed precision) and k = 0.
    let mut w = be.alloc_param(k * n);
    be.write_mat(MatMut::new(&mut w, k, n), &rnd(k * n, 4));
    let x = buf(be, act, &rnd(m * k, 5));
    let mut y = f32buf(be, &rnd(m * n, 6));
    be.gemm(MatMut::new(&mut y, m, n), Mat::new(&x, m, k), Mat::new(&w, k, n), 1.0, true);
    outs.push(("param", read(be, Mat::new(&y, m, n))));
    let e = buf(be, act, &[]);
    be.gemm(MatMut::new(&mut y, m, n), Mat::new(&e, m, 0), Mat::new(&e, 0, n), 1.0, false);
    outs.push(("k=0", read(be, Mat::new(&y, m, n))));
    outs
}
case!(gemm_all_layouts, gemm_case);

fn elementwise_case<B: Backend>(be: &B, act: bool) -> Outs {
    let (r, c, ld) = (6, 5, 7);
    let mut x = buf(be, act, &rnd(r * ld + 1, 10));
    let src = buf(be, act, &rnd(r * ld, 11));
    let rows = f32buf(be, &rnd(r, 12));
    let cols = f32buf(be, &rnd(c, 13));
    let mut outs = Vec::new();
    be.fill(MatMut::at(&mut x, 1, 2, c, ld), 0.25);
    be.axpy(MatMut::at(&mut x, 1, r, c, ld), Mat::at(&src, 0, r, c, ld), -0.75);
    be.scale(MatMut::at(&mut x, 1, r, c, ld), 1.5);
    be.mul_rows(MatMut::at(&mut x, 1, r, c, ld), Mat::new(&rows, r, 1));
    outs.push(("fill·axpy·scale·mul_rows", read(be, Mat::new(&x, 1, r * ld + 1))));
    let mut y = buf(be, act, &rnd(r * c, 14));
    be.mul_cols(MatMut::new(&mut y, r, c), Mat::at(&src, 1, r, c, ld), Mat::new(&cols, 1, c));
    outs.push(("mul_cols", read(be, Mat::new(&y, r, c))));
    be.copy(MatMut::at(&mut x, 0, r, c, ld), Mat::new(&y, r, c));
    outs.push(("copy", read(be, Mat::new(&x, 1, r * ld + 1))));
    be.add_bias(MatMut::new(&mut y, r, c), Mat::new(&cols, 1, c));
    outs.push(("add_bias", read(be, Mat::new(&y, r, c))));
    let mut db = f32buf(be, &rnd(c, 15));
    be.bias_grad(MatMut::new(&mut db, 1, c), Mat::at(&src, 2, r, c, ld));
    outs.push(("bias_grad", read(be, Mat::new(&db, 1, c))));
    let big = f32buf(be, &rnd(3000, 16));
    outs.push((
        "sumsq, sum",
        vec![
            be.sumsq(Mat::new(&big, 1, 3000)),
            be.sum(Mat::new(&big, 1, 3000)),
            be.sumsq(Mat::at(&src, 1, r, c, ld)),
            be.sum(Mat::at(&src, 1, r, c, ld)),
        ],
    ));
    // One read-back for several views: each the bits `sumsq` gives it alone.
    let views = [Mat::new(&big, 1, 3000), Mat::at(&src, 1, r, c, ld), Mat::new(&big, 0, 0), Mat::at(&big, 7, 3, 5, 9)];
    let mut each = vec![f64::NAN; views.len()];
    be.sumsq_each(&views, &mut each);
    let alone: Vec<f64> = views.iter().map(|&v| be.sumsq(v)).collect();
    assert_eq!(
        each.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
        alone.iter().map(|v| v.to_bits()).collect::<Vec<_>>()
    );
    assert_eq!(each[2], 0.0);
    outs.push(("sumsq_each", each));
    outs
}
case!(elementwise_and_reductions, elementwise_case);

fn act_case<B: Backend>(be: &B, act: bool) -> Outs {
    let (t, n) = (5, 33);
    let x = buf(be, act, &rnd(t * n, 50).iter().map(|v| 4.0 * v).collect::<Vec<_>>());
    let mut y = buf(be, act, &vec![0.0; t * n]);
    be.silu(MatMut::new(&mut y, t, n), Mat::new(&x, t, n));
    let mut d = buf(be, act, &rnd(t * n, 51));
    be.silu_bwd(MatMut::new(&mut d, t, n), Mat::new(&x, t, n));
    let gu = buf(be, act, &rnd(2 * t * n, 52).iter().map(|v| 3.0 * v).collect::<Vec<_>>());
    let mut outs = vec![("silu", read(be, Mat::new(&y, t, n))), ("silu_bwd", read(be, Mat::new(&d, t, n)))];
    for outer in [true, false] {
        let mut m = buf(be, act, &vec![0.0; t * n]);
        be.swiglu(MatMut::new(&mut m, t, n), Mat::new(&gu, 2 * t, n), outer);
        let mut dgu = buf(be, act, &vec![0.0; 2 * t * n]);
        // dm, then the product rebuilt over it.
        let mut dm = buf(be, act, &rnd(t * n, 53));
        be.swiglu_bwd(
            MatMut::new(&mut dgu, 2 * t, n),
            MatMut::new(&mut dm, t, n),
            Mat::new(&gu, 2 * t, n),
            outer,
            true,
        );
        outs.push(("swiglu", read(be, Mat::new(&m, t, n))));
        outs.push(("swiglu_bwd", read(be, Mat::new(&dgu, 2 * t, n))));
        outs.push(("swiglu_bwd's rebuilt product", read(be, Mat::new(&dm, t, n))));
    }
    outs
}
case!(silu_and_swiglu, act_case);
