// Cross-entropy: whole-vocabulary rows, and the vocabulary-parallel pieces. One block of NT
// threads per row; statistics in fp32. n[0] = rows, n[1] = this rank's vocabulary columns.
#include "common.cuh"

// v0 = losses (rows × 1), v1 = logits, v2 = targets; n[2] = write the gradient, f[0] = scale.
// loss = ln Σ exp(x − m) + m − x[t]; gradient: logits ← s·(softmax − onehot). Ignored
// targets: loss 0 and a zero gradient row.
KERNEL(k_cross_entropy) {
    SHARED(float, sh, NT);
    long long i = blockIdx.x, v = p.n[1];
    unsigned t = id_at(p.v[2], i);
    if (t == IGNORE_ID) {
        if (threadIdx.x == 0) st(p.v[0], i, 0, 0.0f);
        if (p.n[2])
            for (long long j = threadIdx.x; j < v; j += NT) st(p.v[1], i, j, 0.0f);
        return;
    }
    float m = NEG_INF;
    for (long long j = threadIdx.x; j < v; j += NT) m = fmaxf(m, ld(p.v[1], i, j));
    m = block_max(m, sh);
    float acc = 0.0f;
    for (long long j = threadIdx.x; j < v; j += NT) acc += expf(ld(p.v[1], i, j) - m);
    float sum = block_sum(acc, sh);
    float xt = ld(p.v[1], i, t);
    __syncthreads();
    if (threadIdx.x == 0) st(p.v[0], i, 0, logf(sum) + m - xt);
    if (p.n[2]) {
        float s = (float)p.f[0], f = s / sum;
        for (long long j = threadIdx.x; j < v; j += NT) {
            float g = expf(ld(p.v[1], i, j) - m) * f;
            st(p.v[1], i, j, j == (long long)t ? g - s : g);
        }
    }
}

// v0 = stats (rows × 2), v1 = logits, v2 = max (rows × 1, global), v3 = targets; n[2] = first.
// stats[i] = [Σ_j exp(x − max), the target's logit if it is among these columns else 0].
KERNEL(k_xent_partials) {
    SHARED(float, sh, NT);
    long long i = blockIdx.x, v = p.n[1], first = p.n[2];
    float m = ld(p.v[2], i, 0);
    float acc = 0.0f;
    for (long long j = threadIdx.x; j < v; j += NT) acc += expf(ld(p.v[1], i, j) - m);
    float sum = block_sum(acc, sh);
    if (threadIdx.x == 0) {
        unsigned t = id_at(p.v[3], i);
        long long k = (long long)t - first;
        st(p.v[0], i, 0, sum);
        st(p.v[0], i, 1, (t != IGNORE_ID && k >= 0 && k < v) ? ld(p.v[1], i, k) : 0.0f);
    }
}

// v0 = losses, v1 = logits, v2 = max, v3 = stats (global), v4 = targets; n[2] = first,
// n[3] = write the gradient, f[0] = scale. loss = ln S + max − target logit.
KERNEL(k_xent_finish) {
    long long i = blockIdx.x, v = p.n[1], first = p.n[2];
    unsigned t = id_at(p.v[4], i);
    if (t == IGNORE_ID) {
        if (threadIdx.x == 0) st(p.v[0], i, 0, 0.0f);
        if (p.n[3])
            for (long long j = threadIdx.x; j < v; j += NT) st(p.v[1], i, j, 0.0f);
        return;
    }
    float m = ld(p.v[2], i, 0), sum = ld(p.v[3], i, 0), xt = ld(p.v[3], i, 1);
    if (threadIdx.x == 0) st(p.v[0], i, 0, logf(sum) + m - xt);
    if (p.n[3]) {
        float s = (float)p.f[0], f = s / sum;
        long long k = (long long)t - first;
        for (long long j = threadIdx.x; j < v; j += NT) {
            float g = expf(ld(p.v[1], i, j) - m) * f;
            st(p.v[1], i, j, j == k ? g - s : g);
        }
    }
}
