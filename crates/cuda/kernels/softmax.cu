// The row-wise parts of causal attention; the products around them are cuBLAS batched GEMMs.
// Probabilities are [batch·heads·seq rows] × seq; row r is query i = r mod seq.
#include "common.cuh"

// v0 = scores → probabilities (n[0] rows × n[1] = seq). One block per row: softmax over
// columns 0..=i in fp32, zeros after.
KERNEL(k_softmax_causal) {
    SHARED(float, sh, NT);
    long long r = blockIdx.x, s = p.n[1], i = r % s;
    float m = NEG_INF;
    for (long long j = threadIdx.x; j <= i; j += NT) m = fmaxf(m, ld(p.v[0], r, j));
    m = block_max(m, sh);
    float acc = 0.0f;
    for (long long j = threadIdx.x; j <= i; j += NT) acc += expf(ld(p.v[0], r, j) - m);
    float inv = 1.0f / block_sum(acc, sh);
    for (long long j = threadIdx.x; j < s; j += NT)
        st(p.v[0], r, j, j <= i ? expf(ld(p.v[0], r, j) - m) * inv : 0.0f);
}

// v0 = dP → dS, v1 = P (same shape). dS = P ⊙ (dP − Σ_j P·dP) on the causal part, 0 after.
KERNEL(k_softmax_causal_bwd) {
    SHARED(float, sh, NT);
    long long r = blockIdx.x, s = p.n[1], i = r % s;
    float acc = 0.0f;
    for (long long j = threadIdx.x; j <= i; j += NT) acc += ld(p.v[1], r, j) * ld(p.v[0], r, j);
    float dsum = block_sum(acc, sh);
    for (long long j = threadIdx.x; j < s; j += NT)
        st(p.v[0], r, j, j <= i ? ld(p.v[1], r, j) * (ld(p.v[0], r, j) - dsum) : 0.0f);
}
