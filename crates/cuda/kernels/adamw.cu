// AdamW with decoupled weight decay, PyTorch's arithmetic order, fp32 state. Updates the
// fp32 master weights and, when there is one, their bf16 compute copy in the same pass.
#include "common.cuh"

// v0 = p (master), v1 = g, v2 = m, v3 = v, v4 = bf16 copy of p (when n[2]); n[1] = count.
// f = [β1, β2, 1−β1, 1−β2, keep (1 − lr·wd or 1), lr/bc1, √bc2, eps, grad scale].
KERNEL(k_adamw) {
    float b1 = (float)p.f[0], b2 = (float)p.f[1], ob1 = (float)p.f[2], ob2 = (float)p.f[3];
    float keep = (float)p.f[4], step = (float)p.f[5], sq_bc2 = (float)p.f[6], eps = (float)p.f[7];
    float gs = (float)p.f[8];
    for (long long j = gtid(); j < p.n[1]; j += gthreads()) {
        float g = ld(p.v[1], 0, j) * gs;
        float m = b1 * ld(p.v[2], 0, j) + ob1 * g;
        float v = b2 * ld(p.v[3], 0, j) + ob2 * g * g;
        float denom = sqrtf(v) / sq_bc2 + eps;
        float w = ld(p.v[0], 0, j) * keep - step * m / denom;
        st(p.v[2], 0, j, m);
        st(p.v[3], 0, j, v);
        st(p.v[0], 0, j, w);
        if (p.n[2]) st(p.v[4], 0, j, w);
    }
}
