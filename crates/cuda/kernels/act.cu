// SiLU and the SwiGLU product, forward and backward. n[0] = rows, n[1] = cols.
#include "common.cuh"


__device__ __forceinline__ float silu_grad(float x) {
    float s = sigmoidf_(x);
    return s * (1.0f + x * (1.0f - s));
}

// v0 = y, v1 = x; y = x · σ(x).
KERNEL(k_silu) {
    FOR_EACH_PAIR(p.n[0], p.n[1]) {
        F2 x = ld2(p.v[1], i, j, two);
        st2(p.v[0], i, j, two, F2{x.x * sigmoidf_(x.x), x.y * sigmoidf_(x.y)});
    }
}

// v0 = d, v1 = x; d *= silu'(x).
KERNEL(k_silu_bwd) {
    FOR_EACH_PAIR(p.n[0], p.n[1]) {
        F2 d = ld2(p.v[0], i, j, two), x = ld2(p.v[1], i, j, two);
        st2(p.v[0], i, j, two, F2{d.x * silu_grad(x.x), d.y * silu_grad(x.y)});
    }
}

// v0 = m (t × n), v1 = gu (g rows 0..t over u rows t..2t); n[2] = outer SiLU.
// m = act(g) ⊙ u.
KERNEL(k_swiglu) {
    long long t = p.n[0];
    FOR_EACH_PAIR(t, p.n[1]) {
        F2 g = ld2(p.v[1], i, j, two), u = ld2(p.v[1], t + i, j, two);
        F2 a = p.n[2] ? F2{g.x * sigmoidf_(g.x), g.y * sigmoidf_(g.y)} : g;
        st2(p.v[0], i, j, two, F2{a.x * u.x, a.y * u.y});
    }
}

// v0 = dgu (stacked like gu), v1 = dm (t × n), v2 = gu; n[2] = outer SiLU; n[3] = rebuild:
// then dm ← m, the forward's product (k_swiglu's arithmetic), over the pair just read.
KERNEL(k_swiglu_bwd) {
    long long t = p.n[0];
    FOR_EACH_PAIR(t, p.n[1]) {
        F2 d = ld2(p.v[1], i, j, two);
        F2 g = ld2(p.v[2], i, j, two), u = ld2(p.v[2], t + i, j, two);
        F2 a = g;
        if (p.n[2]) {
            st2(p.v[0], i, j, two, F2{d.x * u.x * silu_grad(g.x), d.y * u.y * silu_grad(g.y)});
            st2(p.v[0], t + i, j, two, F2{d.x * g.x * sigmoidf_(g.x), d.y * g.y * sigmoidf_(g.y)});
            a = F2{g.x * sigmoidf_(g.x), g.y * sigmoidf_(g.y)};
        } else {
            st2(p.v[0], i, j, two, F2{d.x * u.x, d.y * u.y});
            st2(p.v[0], t + i, j, two, F2{d.x * g.x, d.y * g.y});
        }
        if (p.n[3]) st2(p.v[1], i, j, two, F2{a.x * u.x, a.y * u.y});
    }
}
