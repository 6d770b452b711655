//! The LaX Kronecker gate, forward and backward.

use crate::{Outs, buf, f32buf, read, rnd};
use boost_tensor::KronBwd;
use boost_tensor::{Backend, Mat, MatMut};

fn kron_case<B: Backend>(be: &B, act: bool) -> Outs {
    let (rows, a, b) = (70, 3, 4);
    let r = a * b;
    let z = buf(be, act, &rnd(rows * r, 100));
    let ka = f32buf(be, &rnd(a * a, 101));
    let kb = f32buf(be, &rnd(b * b, 102));
    let dy = buf(be, act, &rnd(rows * r, 103));
    let mut scratch = be.alloc(2 * rows * r + 64 * (a * a + b * b));
    let mut y = buf(be, act, &rnd(rows * r, 104));
    be.kron_fwd(
        MatMut::new(&mut y, rows, r),
        Mat::new(&z, rows, r),
        Mat::new(&ka, a, a),
        Mat::new(&kb, b, b),
        &mut scratch,
        true,
    );
    let acc = read(be, Mat::new(&y, rows, r));
    be.kron_fwd(
        MatMut::new(&mut y, rows, r),
        Mat::new(&z, rows, r),
        Mat::new(&ka, a, a),
        Mat::new(&kb, b, b),
        &mut scratch,
        false,
    );
    let mut dz = buf(be, act, &rnd(rows * r, 105));
    let mut dka = f32buf(be, &rnd(a * a, 106));
    let mut dkb = f32buf(be, &rnd(b * b, 107));
    be.kron_bwd(KronBwd {
        dz: MatMut::new(&mut dz, rows, r),
        dka: MatMut::new(&mut dka, a, a),
        dkb: MatMut::new(&mut dkb, b, b),
        dy: Mat::new(&dy, rows, r),
        z: Mat::new(&z, rows, r),
        ka: Mat::new(&ka, a, a),
        kb: Mat::new(&kb, b, b),
        scratch: &mut scratch,
    });
    vec![
        ("y (acc)", acc),
        ("y", read(be, Mat::new(&y, rows, r))),
        ("dz", read(be, Mat::new(&dz, rows, r))),
        ("dka", read(be, Mat::new(&dka, a, a))),
        ("dkb", read(be, Mat::new(&dkb, b, b))),
    ]
}
case!(kronecker_gate_forward_backward, kron_case);
