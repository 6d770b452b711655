// SiLU and the SwiGLU product, forward and backward. n[0] = rows, n[1] = cols.
#include "common.cuh"


__device__ __forceinline__ float silu_grad(float x) {
    float s = sigmoidf_(x);
    return s * (1.0f + x * (1.0f - s));
}

// v0 = y, v1 = x; y = x · σ(x).
KERNEL(k_silu) {
    FOR_EACH(p.n[0], p.n[1]) {
        float x = ld(p.v[1], i, j);
        st(p.v[0], i, j, x * sigmoidf_(x));
    }
}

// v0 = d, v1 = x; d *= silu'(x).
KERNEL(k_silu_bwd) {
    FOR_EACH(p.n[0], p.n[1]) st(p.v[0], i, j, ld(p.v[0], i, j) * silu_grad(ld(p.v[1], i, j)));
}

// v0 = m (t × n), v1 = gu (g rows 0..t over u rows t..2t); n[2] = outer SiLU.
// m = act(g) ⊙ u.
KERNEL(k_swiglu) {
    long long t = p.n[0];
    FOR_EACH(t, p.n[1]) {
        float g = ld(p.v[1], i, j), u = ld(p.v[1], t + i, j);
        float a = p.n[2] ? g * sigmoidf_(g) : g;
        st(p.v[0], i, j, a * u);
    }
}

// v0 = dgu (stacked like gu), v1 = dm (t × n), v2 = gu; n[2] = outer SiLU.
KERNEL(k_swiglu_bwd) {
    long long t = p.n[0];
    FOR_EACH(t, p.n[1]) {
        float d = ld(p.v[1], i, j);
        float g = ld(p.v[2], i, j), u = ld(p.v[2], t + i, j);
        if (p.n[2]) {
            st(p.v[0], i, j, d * u * silu_grad(g));
            st(p.v[0], t + i, j, d * g * sigmoidf_(g));
        } else {
            st(p.v[0], i, j, d * u);
            st(p.v[0], t + i, j, d * g);
        }
    }
}
