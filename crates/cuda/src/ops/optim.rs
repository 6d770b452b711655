//! AdamW with decoupled weight decay, updating a parameter's bf16 copy in the same pass.

use crate::backend::Cuda;
use crate::buf::CudaBuf;
use crate::device::{P, Tv};
use crate::launch::tv_of;
use boost_tensor::AdamUpdate;

// The operands of `Backend::adamw`, after the backend.
pub(crate) fn adamw(be: &Cuda, args: AdamUpdate<CudaBuf>) {
    let AdamUpdate { p, g, m, v, off, n, step, decay } = args;
    for (b, what) in [(&*p, "p"), (g, "g"), (&*m, "m"), (&*v, "v")] {
        assert!(off + n <= b.len, "adamw: {what} has {} elements, the update needs {}", b.len, off + n);
    }
    let mut q = P::of(&[tv_of(p, off, n), tv_of(g, off, n), tv_of(m, off, n), tv_of(v, off, n)]);
    if let Some(sp) = p.shadow_ptr(off) {
        q.v[4] = Tv { p: sp, ld: n as i64, bf: 1, pad: 0 };
        q.n[2] = 1;
    }
    let s = step;
    q.f[..9].copy_from_slice(&[
        s.beta1,
        s.beta2,
        1.0 - s.beta1,
        1.0 - s.beta2,
        if decay { 1.0 - s.lr * s.weight_decay } else { 1.0 },
        s.lr / s.bias_corr1,
        s.bias_corr2.sqrt(),
        s.eps,
        s.grad_scale,
    ]);
    q.n[1] = n as i64;
    be.flat("k_adamw", n, &q);
}
