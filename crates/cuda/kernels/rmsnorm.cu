// RMSNorm building blocks: plain, over a hidden shard (sync statistics) and the online
// norm's backward. Statistics and accumulation in fp32. n[0] = rows, n[1] = cols.
#include "common.cuh"

// v0 = s (rows × cols); n[2] = feature count n; f[0] = eps. s ← 1/√(s/n + eps).
KERNEL(k_rstd_from_sumsq) {
    float inv_n = (float)(1.0 / (double)p.n[2]), eps = (float)p.f[0];
    FOR_EACH(p.n[0], p.n[1]) st(p.v[0], i, j, 1.0f / sqrtf(ld(p.v[0], i, j) * inv_n + eps));
}

// v0 = y, v1 = x, v2 = gamma (1 × cols), v3 = rstd (rows × 1); y = x · rstd[i] · gamma[j].
KERNEL(k_rmsnorm_apply) {
    FOR_EACH_PAIR(p.n[0], p.n[1]) {
        F2 x = ld2(p.v[1], i, j, two), g = ld2(p.v[2], 0, j, two);
        float r = ld(p.v[3], i, 0);
        st2(p.v[0], i, j, two, F2{x.x * r * g.x, x.y * r * g.y});
    }
}

// Row i of x (v0) += r (v1), then Σ_j x² of the stored row (the block's sum, every thread):
// the residual add with the next norm's statistic, shared by the two kernels after it.
__device__ __forceinline__ float block_residual_add_sumsq(const P& p, long long i, long long cols, float* sh) {
    float acc = 0.0f;
    for (long long j = threadIdx.x; j < cols; j += NT) {
        st(p.v[0], i, j, ld(p.v[0], i, j) + ld(p.v[1], i, j));
        float x = ld(p.v[0], i, j); // as stored
        acc += x * x;
    }
    return block_sum(acc, sh);
}

// v0 = x (the residual, in place), v1 = r, v2 = y, v3 = rstd (rows × 1), v4 = gamma; f[0] =
// eps. x += r; rstd = 1/√(Σ_j x²/n + eps), n = cols; y = x·rstd·gamma. One block per row:
// the residual add, k_row_sumsq, k_rstd_from_sumsq and k_rmsnorm_apply in one launch.
KERNEL(k_residual_rmsnorm) {
    SHARED(float, sh, NT);
    long long i = blockIdx.x, cols = p.n[1];
    float s = block_residual_add_sumsq(p, i, cols, sh);
    float inv_n = (float)(1.0 / (double)cols), eps = (float)p.f[0];
    float r = 1.0f / sqrtf(s * inv_n + eps);
    if (threadIdx.x == 0) st(p.v[3], i, 0, r);
    for (long long j = threadIdx.x; j < cols; j += NT) st(p.v[2], i, j, ld(p.v[0], i, j) * r * ld(p.v[4], 0, j));
}

// v0 = x (the residual, in place), v1 = r, v2 = out (rows × 1). x += r; out = Σ_j x²: the
// residual add and k_row_sumsq in one launch (a sharded norm's statistic, finished elsewhere).
KERNEL(k_residual_sumsq) {
    SHARED(float, sh, NT);
    long long i = blockIdx.x, cols = p.n[1];
    float s = block_residual_add_sumsq(p, i, cols, sh);
    if (threadIdx.x == 0) st(p.v[2], i, 0, s);
}

// Σ_j dy·x·gamma over row i (v1 = dy, v2 = x, v3 = gamma; the block's sum, every thread):
// the RMSNorm backward's row dot, alone or followed by its dx.
__device__ __forceinline__ float block_rmsnorm_row_dot(const P& p, long long i, long long cols, float* sh) {
    float acc = 0.0f;
    for (long long j = threadIdx.x; j < cols; j += NT)
        acc += ld(p.v[1], i, j) * ld(p.v[2], i, j) * ld(p.v[3], 0, j);
    return block_sum(acc, sh);
}

// v0 = dx, v1 = dy, v2 = x, v3 = gamma, v4 = rstd, v5 = dot (rows × 1, written); n[3] =
// accumulate. k_rmsnorm_bwd_dot then k_rmsnorm_bwd_dx over whole rows (n = cols), one block
// per row.
KERNEL(k_rmsnorm_bwd_rows) {
    SHARED(float, sh, NT);
    long long i = blockIdx.x, cols = p.n[1];
    float dot = block_rmsnorm_row_dot(p, i, cols, sh);
    if (threadIdx.x == 0) st(p.v[5], i, 0, dot);
    float inv_n = (float)(1.0 / (double)cols), r = ld(p.v[4], i, 0);
    float c = dot * r * r * r * inv_n;
    for (long long j = threadIdx.x; j < cols; j += NT) {
        float v = r * ld(p.v[3], 0, j) * ld(p.v[1], i, j) - ld(p.v[2], i, j) * c;
        if (p.n[3]) v += ld(p.v[0], i, j);
        st(p.v[0], i, j, v);
    }
}

// v0 = dot (rows × 1), v1 = dy, v2 = x, v3 = gamma; dot[i] = Σ_j dy·x·gamma. One block per row.
KERNEL(k_rmsnorm_bwd_dot) {
    SHARED(float, sh, NT);
    long long i = blockIdx.x, cols = p.n[1];
    float s = block_rmsnorm_row_dot(p, i, cols, sh);
    if (threadIdx.x == 0) st(p.v[0], i, 0, s);
}

// v0 = dx, v1 = dy, v2 = x, v3 = gamma, v4 = rstd, v5 = dot; n[2] = n; n[3] = accumulate.
// dx (+)= rstd·gamma·dy − x·rstd³·dot/n.
KERNEL(k_rmsnorm_bwd_dx) {
    float inv_n = (float)(1.0 / (double)p.n[2]);
    FOR_EACH_PAIR(p.n[0], p.n[1]) {
        float r = ld(p.v[4], i, 0);
        float c = ld(p.v[5], i, 0) * r * r * r * inv_n;
        F2 g = ld2(p.v[3], 0, j, two), dy = ld2(p.v[1], i, j, two), x = ld2(p.v[2], i, j, two);
        F2 v = F2{r * g.x * dy.x - x.x * c, r * g.y * dy.y - x.y * c};
        if (p.n[3]) {
            F2 o = ld2(p.v[0], i, j, two);
            v = F2{o.x + v.x, o.y + v.y};
        }
        st2(p.v[0], i, j, two, v);
    }
}

// v0 = dgamma (1 × cols), v1 = dy, v2 = x, v3 = rstd; dgamma += Σ_i dy·x·rstd[i].
KERNEL(k_rmsnorm_dgamma) {
    Tv dy = p.v[1], x = p.v[2], r = p.v[3];
    col_reduce(p.v[0], p.n[0], p.n[1], [&](long long i, long long j) { return ld(dy, i, j) * ld(x, i, j) * ld(r, i, 0); });
}

// v0 = dx, v1 = g, v2 = x, v3 = gamma, v4 = ds (rows × 1); n[3] = accumulate.
// dx (+)= gamma·g + 2·ds[i]·x.
KERNEL(k_online_norm_bwd_dx) {
    FOR_EACH_PAIR(p.n[0], p.n[1]) {
        float ds2 = 2.0f * ld(p.v[4], i, 0);
        F2 gm = ld2(p.v[3], 0, j, two), g = ld2(p.v[1], i, j, two), x = ld2(p.v[2], i, j, two);
        F2 v = F2{gm.x * g.x + ds2 * x.x, gm.y * g.y + ds2 * x.y};
        if (p.n[3]) {
            F2 o = ld2(p.v[0], i, j, two);
            v = F2{o.x + v.x, o.y + v.y};
        }
        st2(p.v[0], i, j, two, v);
    }
}

// v0 = dgamma (1 × cols), v1 = x, v2 = g; dgamma += Σ_i x·g.
KERNEL(k_online_norm_dgamma) {
    Tv x = p.v[1], g = p.v[2];
    col_reduce(p.v[0], p.n[0], p.n[1], [&](long long i, long long j) { return ld(x, i, j) * ld(g, i, j); });
}
