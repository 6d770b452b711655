// LayerNorm over the latent (LaX), forward and backward. n[0] = rows, n[1] = cols.
#include "common.cuh"

// v0 = y, v1 = mean (rows × 1), v2 = rstd (rows × 1), v3 = x, v4 = w, v5 = b; f[0] = eps.
// One block per row; two passes (mean, then the centred variance).
KERNEL(k_layernorm_fwd) {
    SHARED(float, sh, NT);
    long long i = blockIdx.x, cols = p.n[1];
    float n = (float)cols;
    float acc = 0.0f;
    for (long long j = threadIdx.x; j < cols; j += NT) acc += ld(p.v[3], i, j);
    float mu = block_sum(acc, sh) / n;
    acc = 0.0f;
    for (long long j = threadIdx.x; j < cols; j += NT) {
        float c = ld(p.v[3], i, j) - mu;
        acc += c * c;
    }
    float var = block_sum(acc, sh) / n;
    float rs = 1.0f / sqrtf(var + (float)p.f[0]);
    if (threadIdx.x == 0) {
        st(p.v[1], i, 0, mu);
        st(p.v[2], i, 0, rs);
    }
    for (long long j = threadIdx.x; j < cols; j += NT)
        st(p.v[0], i, j, (ld(p.v[3], i, j) - mu) * rs * ld(p.v[4], 0, j) + ld(p.v[5], 0, j));
}

// v0 = dx, v1 = dy, v2 = x, v3 = w, v4 = mean, v5 = rstd. One block per row; overwrites dx:
// dx = r·(dy·w − mean(dy·w) − x̂·mean(dy·w·x̂)), x̂ = (x − m)·r.
KERNEL(k_layernorm_bwd_dx) {
    SHARED(float, sh, NT);
    long long i = blockIdx.x, cols = p.n[1];
    float n = (float)cols;
    float m = ld(p.v[4], i, 0), r = ld(p.v[5], i, 0);
    float a1 = 0.0f, a2 = 0.0f;
    for (long long j = threadIdx.x; j < cols; j += NT) {
        float dh = ld(p.v[1], i, j) * ld(p.v[3], 0, j);
        a1 += dh;
        a2 += dh * (ld(p.v[2], i, j) - m) * r;
    }
    float s1 = block_sum(a1, sh) / n;
    float s2 = block_sum(a2, sh) / n;
    for (long long j = threadIdx.x; j < cols; j += NT) {
        float xh = (ld(p.v[2], i, j) - m) * r;
        st(p.v[0], i, j, r * (ld(p.v[1], i, j) * ld(p.v[3], 0, j) - s1 - xh * s2));
    }
}

// v0 = dw (1 × cols), v1 = dy, v2 = x, v3 = mean, v4 = rstd; dw += Σ_i dy·(x − m)·r.
KERNEL(k_layernorm_dw) {
    Tv dy = p.v[1], x = p.v[2], m = p.v[3], r = p.v[4];
    col_reduce(p.v[0], p.n[0], p.n[1],
               [&](long long i, long long j) { return ld(dy, i, j) * (ld(x, i, j) - ld(m, i, 0)) * ld(r, i, 0); });
}
