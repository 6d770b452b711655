// Reductions: whole-view sums (fp64 partials per block), and per-row sums, dot products and
// maxima (one block of NT threads per row). n[0] = rows, n[1] = cols.
#include "common.cuh"

// v0 = x, v1 = out (gridDim.x doubles); n[2] = square the elements first.
// out[b] = Σ over the elements block b visits (a fixed set for a fixed grid); the host adds
// the partials in block order.
KERNEL(k_full_sum) {
    SHARED(double, sh, NT);
    long long rows = p.n[0], cols = p.n[1];
    double acc = 0.0;
    FOR_EACH(rows, cols) {
        double x = (double)ld(p.v[0], i, j);
        acc += p.n[2] ? x * x : x;
    }
    double s = block_sum(acc, sh);
    if (threadIdx.x == 0) ((double*)p.v[1].p)[blockIdx.x] = s;
}

// v0 = out (rows × 1), v1 = x; out[i] = Σ_j x[i, j]².
KERNEL(k_row_sumsq) {
    SHARED(float, sh, NT);
    long long i = blockIdx.x, cols = p.n[1];
    float acc = 0.0f;
    for (long long j = threadIdx.x; j < cols; j += NT) {
        float x = ld(p.v[1], i, j);
        acc += x * x;
    }
    float s = block_sum(acc, sh);
    if (threadIdx.x == 0) st(p.v[0], i, 0, s);
}

// v0 = out, v1 = a, v2 = b, v3 = row (when n[2]); f[0] = alpha; n[3] = accumulate.
// out[i] (+)= alpha · Σ_j a·b · row[i]².
KERNEL(k_row_dot) {
    SHARED(float, sh, NT);
    long long i = blockIdx.x, cols = p.n[1];
    float acc = 0.0f;
    for (long long j = threadIdx.x; j < cols; j += NT) acc += ld(p.v[1], i, j) * ld(p.v[2], i, j);
    float s = block_sum(acc, sh);
    if (threadIdx.x == 0) {
        float f = 1.0f;
        if (p.n[2]) {
            float r = ld(p.v[3], i, 0);
            f = r * r;
        }
        float v = (float)p.f[0] * s * f;
        st(p.v[0], i, 0, p.n[3] ? ld(p.v[0], i, 0) + v : v);
    }
}

// v0 = max (rows × 1), v1 = x; max[i] = max_j x[i, j].
KERNEL(k_row_max) {
    SHARED(float, sh, NT);
    long long i = blockIdx.x, cols = p.n[1];
    float m = NEG_INF;
    for (long long j = threadIdx.x; j < cols; j += NT) m = fmaxf(m, ld(p.v[1], i, j));
    float r = block_max(m, sh);
    if (threadIdx.x == 0) st(p.v[0], i, 0, r);
}

// k_full_sum over many views in one launch: view blockIdx.y + n[1] of the table v0 is
// reduced by the gridDim.x blocks of row y exactly as k_full_sum's grid would, its partials
// written to v1 at (blockIdx.y + n[1]) · gridDim.x + blockIdx.x; n[2] = square first.
KERNEL(k_full_sum_multi) {
    SHARED(double, sh, NT);
    long long t = blockIdx.y + p.n[1];
    SumView w = ((const SumView*)p.v[0].p)[t];
    long long rows = w.rows, cols = w.cols;
    double acc = 0.0;
    FOR_EACH(rows, cols) {
        double x = (double)ld(w.v, i, j);
        acc += p.n[2] ? x * x : x;
    }
    double s = block_sum(acc, sh);
    if (threadIdx.x == 0) ((double*)p.v[1].p)[t * gridDim.x + blockIdx.x] = s;
}
