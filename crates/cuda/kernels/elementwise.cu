// Elementwise kernels over a rows × cols view, one grid-stride loop each.
// n[0] = rows, n[1] = cols in every kernel here.
#include "common.cuh"


// v0 = x; x = f0.
KERNEL(k_fill) {
    FOR_EACH(p.n[0], p.n[1]) st(p.v[0], i, j, (float)p.f[0]);
}

// v0 = dst, v1 = src (dtypes may differ: this is also the fp32 ↔ bf16 cast).
KERNEL(k_copy) {
    FOR_EACH_PAIR(p.n[0], p.n[1]) st2(p.v[0], i, j, two, ld2(p.v[1], i, j, two));
}

// v0 = dst, v1 = src; dst += f0 · src.
KERNEL(k_axpy) {
    float a = (float)p.f[0];
    FOR_EACH_PAIR(p.n[0], p.n[1]) {
        F2 d = ld2(p.v[0], i, j, two), s = ld2(p.v[1], i, j, two);
        st2(p.v[0], i, j, two, F2{d.x + a * s.x, d.y + a * s.y});
    }
}

// v0 = x; x *= f0.
KERNEL(k_scale) {
    float s = (float)p.f[0];
    FOR_EACH_PAIR(p.n[0], p.n[1]) {
        F2 x = ld2(p.v[0], i, j, two);
        st2(p.v[0], i, j, two, F2{x.x * s, x.y * s});
    }
}

// v0 = x, v1 = row (rows × 1); x[i, j] *= row[i].
KERNEL(k_mul_rows) {
    FOR_EACH(p.n[0], p.n[1]) st(p.v[0], i, j, ld(p.v[0], i, j) * ld(p.v[1], i, 0));
}

// v0 = y, v1 = x, v2 = col (1 × cols); y[i, j] = x[i, j] · col[j].
KERNEL(k_mul_cols) {
    FOR_EACH(p.n[0], p.n[1]) st(p.v[0], i, j, ld(p.v[1], i, j) * ld(p.v[2], 0, j));
}

// v0 = y, v1 = b (1 × cols); y[i, j] += b[j].
KERNEL(k_add_bias) {
    FOR_EACH(p.n[0], p.n[1]) st(p.v[0], i, j, ld(p.v[0], i, j) + ld(p.v[1], 0, j));
}

// v0 = db (1 × cols), v1 = dy; db[j] += Σ_i dy[i, j]. Column-reduction launch.
KERNEL(k_bias_grad) {
    Tv dy = p.v[1];
    col_reduce(p.v[0], p.n[0], p.n[1], [&](long long i, long long j) { return ld(dy, i, j); });
}

// Many views zeroed in one launch: view blockIdx.y + n[1] of the table v0 (SumView entries),
// its elements grid-strided by the gridDim.x blocks of row y.
KERNEL(k_zero_multi) {
    SumView w = ((const SumView*)p.v[0].p)[blockIdx.y + p.n[1]];
    FOR_EACH(w.rows, w.cols) st(w.v, i, j, 0.0f);
}
