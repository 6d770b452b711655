// AdamW with decoupled weight decay, PyTorch's arithmetic order, fp32 state. Updates the
// fp32 master weights and, when there is one, their bf16 compute copy in the same pass.
#include "common.cuh"

// The update of element j: one function for the per-buffer and the multi-tensor kernels, so
// that both compute the same bits. `pv` = p, g, m, v, bf16 copy (when `copy`).
__device__ __forceinline__ void adam_elem(const Tv* pv, bool copy, long long j, float b1, float b2, float ob1,
                                          float ob2, float keep, float step, float sq_bc2, float eps, float gs) {
    float g = ld(pv[1], 0, j) * gs;
    float m = b1 * ld(pv[2], 0, j) + ob1 * g;
    float v = b2 * ld(pv[3], 0, j) + ob2 * g * g;
    float denom = sqrtf(v) / sq_bc2 + eps;
    float w = ld(pv[0], 0, j) * keep - step * m / denom;
    st(pv[2], 0, j, m);
    st(pv[3], 0, j, v);
    st(pv[0], 0, j, w);
    if (copy) st(pv[4], 0, j, w);
}

// v0 = p (master), v1 = g, v2 = m, v3 = v, v4 = bf16 copy of p (when n[2]); n[1] = count.
// f = [β1, β2, 1−β1, 1−β2, keep (1 − lr·wd or 1), lr/bc1, √bc2, eps, grad scale].
KERNEL(k_adamw) {
    float b1 = (float)p.f[0], b2 = (float)p.f[1], ob1 = (float)p.f[2], ob2 = (float)p.f[3];
    float keep = (float)p.f[4], step = (float)p.f[5], sq_bc2 = (float)p.f[6], eps = (float)p.f[7];
    float gs = (float)p.f[8];
    for (long long j = gtid(); j < p.n[1]; j += gthreads())
        adam_elem(p.v, p.n[2] != 0, j, b1, b2, ob1, ob2, keep, step, sq_bc2, eps, gs);
}

// One tensor of the multi-tensor update: p, g, m, v, bf16 copy; `copy` = it has one;
// `decay` = weight decay applies.
struct AdamTensor {
    Tv v[5];
    long long copy, decay;
};
// A stretch of a tensor's elements that one block updates.
struct AdamChunk {
    long long tensor, off, len;
};

// β^t as the host's f64::powi computes it (compiler-builtins' __powidf2: square-and-multiply
// from the lowest bit), so that bias corrections computed here match the host's bit for bit.
__device__ __forceinline__ double powi_host(double a, long long t) {
    double r = 1.0;
    for (;;) {
        if (t & 1) r *= a;
        t >>= 1;
        if (t == 0) break;
        a *= a;
    }
    return r;
}

// Every tensor of a model in one launch. v0 = chunks (n[0] of them), v1 = tensors, v2 = the
// step's scalars (common.cuh's S_*; doubles): [0] Σg², [1] ‖g‖, [2] clip coefficient,
// [3] β1, [4] β2, [5] 1−β1, [6] 1−β2, [7] 1 − lr·wd, [8] lr/bc1, [9] √bc2, [10] eps,
// [11] grad scale given by the host. n[1]: scale by the clip coefficient [2] instead of [11].
// n[2]: the guard judged the norm (step.cu): nothing is updated unless its verdict is 0, and
// the bias corrections are those of update t = [S_T] less the skips the host has not seen.
KERNEL(k_adamw_multi) {
    const AdamChunk* chunks = (const AdamChunk*)p.v[0].p;
    const AdamTensor* ts = (const AdamTensor*)p.v[1].p;
    const double* s = (const double*)p.v[2].p;
    float b1 = (float)s[3], b2 = (float)s[4], ob1 = (float)s[5], ob2 = (float)s[6];
    float step = (float)s[S_STEP], sq_bc2 = (float)s[S_SQRT_BC2], eps = (float)s[10];
    float gs = (float)(p.n[1] ? s[S_CLIP] : s[11]);
    if (p.n[2]) {
        if (s[S_VERDICT] != 0.0) return;
        long long t = (long long)(s[S_T] - (s[S_SKIPS] - s[S_SKIPS_SEEN]));
        step = (float)(s[S_LR] / (1.0 - powi_host(s[S_BETA1], t)));
        sq_bc2 = (float)sqrt(1.0 - powi_host(s[S_BETA2], t));
    }
    for (long long c = blockIdx.x; c < p.n[0]; c += gridDim.x) {
        AdamChunk ch = chunks[c];
        const AdamTensor& t = ts[ch.tensor];
        float keep = t.decay ? (float)s[7] : 1.0f;
        for (long long j = ch.off + threadIdx.x; j < ch.off + ch.len; j += blockDim.x)
            adam_elem(t.v, t.copy != 0, j, b1, b2, ob1, ob2, keep, step, sq_bc2, eps, gs);
    }
}
