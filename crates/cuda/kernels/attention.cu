// Causal attention with GQA without the S×S probability matrix (FlashAttention's online
// softmax): the forward keeps one log-sum-exp per (sequence, head, query row); the backward
// recomputes each probability from it. Every sum runs in a fixed order, so results are
// deterministic: the query-side kernel gives dQ and the per-row D_i = Σ_j P_ij·dP_ij, and a
// key-side kernel gives dK and dV by walking the query rows (of every head sharing the kv
// head, in head order) for each key row — no atomics.
//
// Common parameters: v0 = qkv (q: T × heads·d_h, then k and v: T × kv_heads·d_h each, one
// after the other, all of v0's dtype; T = batch·seq), n[0..5] = batch, seq, heads, kv_heads,
// head_dim, f[0] = the score scale. Log-sum-exps and D are fp32, row (b, h, i) at
// (b·heads + h)·seq + i. One thread per query row (or key row) of a tile; head_dim ≤ FA_DH.
#include "common.cuh"

#define FA_ROWS 64  // threads per block: query rows (forward, dQ) or key rows (dK, dV)
#define FA_TILE 32  // rows of K/V (or Q/dO) staged in shared memory at a time
#define FA_DH 128   // largest head_dim

struct Qkv {
    Tv q, k, v;
};

// The q, k and v blocks of a qkv (or dqkv) buffer as views.
__device__ __forceinline__ Qkv qkv_views(const Tv& base, long long t, long long qw, long long kw) {
    unsigned long long es = base.bf ? 2ull : 4ull;
    Qkv r;
    r.q = base;
    r.q.ld = qw;
    r.k = base;
    r.k.p = base.p + es * (unsigned long long)(t * qw);
    r.k.ld = kw;
    r.v = base;
    r.v.p = base.p + es * (unsigned long long)(t * (qw + kw));
    r.v.ld = kw;
    return r;
}

__device__ __forceinline__ long long min_ll(long long a, long long b) { return a < b ? a : b; }

__device__ __forceinline__ float dot_n(const float* a, const float* b, long long n) {
    float s = 0.0f;
    for (long long d = 0; d < n; d++) s += a[d] * b[d];
    return s;
}

// Stage key rows j0..j0+FA_TILE of kv head g of sequence b (zeros past the sequence) into
// shared memory, the block's threads sharing the copy.
__device__ __forceinline__ void load_kv_tile(float (*ks)[FA_DH], float (*vs)[FA_DH], const Qkv& x, long long b,
                                             long long S, long long g, long long dh, long long j0) {
    for (long long e = threadIdx.x; e < FA_TILE * dh; e += FA_ROWS) {
        long long jj = e / dh, d = e % dh, j = j0 + jj;
        ks[jj][d] = j < S ? ld(x.k, b * S + j, g * dh + d) : 0.0f;
        vs[jj][d] = j < S ? ld(x.v, b * S + j, g * dh + d) : 0.0f;
    }
}

// Forward. v1 = out (T × heads·d_h), v2 = log-sum-exps (fp32). Grid: (⌈seq/FA_ROWS⌉, heads,
// batch); thread = query row i of head h, which reads kv head h / (heads / kv_heads).
KERNEL(k_attn_fwd) {
    __shared__ float ks[FA_TILE][FA_DH];
    __shared__ float vs[FA_TILE][FA_DH];
    long long S = p.n[1], H = p.n[2], HK = p.n[3], dh = p.n[4];
    Qkv x = qkv_views(p.v[0], p.n[0] * S, H * dh, HK * dh);
    long long b = blockIdx.z, h = blockIdx.y, g = h / (H / HK);
    long long i0 = (long long)blockIdx.x * FA_ROWS, i = i0 + threadIdx.x;
    long long last = min_ll(i0 + FA_ROWS, S) - 1;
    bool live = i < S;
    float scale = (float)p.f[0];
    float q[FA_DH], o[FA_DH], sc[FA_TILE];
    for (long long d = 0; d < dh; d++) {
        q[d] = live ? ld(x.q, b * S + i, h * dh + d) * scale : 0.0f;
        o[d] = 0.0f;
    }
    float m = NEG_INF, l = 0.0f;
    for (long long j0 = 0; j0 <= last; j0 += FA_TILE) {
        load_kv_tile(ks, vs, x, b, S, g, dh, j0);
        __syncthreads();
        if (live && j0 <= i) {
            long long n = min_ll(FA_TILE, i - j0 + 1);
            float mt = m;
            for (long long jj = 0; jj < n; jj++) {
                sc[jj] = dot_n(q, ks[jj], dh);
                mt = fmaxf(mt, sc[jj]);
            }
            // Rescale what the earlier tiles gave to the new maximum (0 before the first).
            float corr = expf(m - mt);
            l *= corr;
            for (long long d = 0; d < dh; d++) o[d] *= corr;
            for (long long jj = 0; jj < n; jj++) {
                float pj = expf(sc[jj] - mt);
                l += pj;
                for (long long d = 0; d < dh; d++) o[d] += pj * vs[jj][d];
            }
            m = mt;
        }
        __syncthreads();
    }
    if (live) {
        float inv = 1.0f / l;
        for (long long d = 0; d < dh; d++) st(p.v[1], b * S + i, h * dh + d, o[d] * inv);
        ((float*)p.v[2].p)[(b * H + h) * S + i] = m + logf(l);
    }
}

// Backward, query side. v1 = dout, v2 = log-sum-exps, v3 = D (fp32, written), v4 = dqkv (its
// q block is written). Grid as the forward's. Two passes over the keys: D_i, then
// dQ_i = scale·Σ_j P_ij·(dP_ij − D_i)·k_j with dP_ij = dO_i·v_j.
KERNEL(k_attn_bwd_q) {
    __shared__ float ks[FA_TILE][FA_DH];
    __shared__ float vs[FA_TILE][FA_DH];
    long long S = p.n[1], H = p.n[2], HK = p.n[3], dh = p.n[4], T = p.n[0] * S;
    Qkv x = qkv_views(p.v[0], T, H * dh, HK * dh);
    Qkv dx = qkv_views(p.v[4], T, H * dh, HK * dh);
    long long b = blockIdx.z, h = blockIdx.y, g = h / (H / HK);
    long long i0 = (long long)blockIdx.x * FA_ROWS, i = i0 + threadIdx.x;
    long long last = min_ll(i0 + FA_ROWS, S) - 1;
    bool live = i < S;
    float scale = (float)p.f[0];
    long long row = (b * H + h) * S + i;
    float lse = live ? ((const float*)p.v[2].p)[row] : 0.0f;
    float q[FA_DH], dout[FA_DH], dq[FA_DH];
    for (long long d = 0; d < dh; d++) {
        q[d] = live ? ld(x.q, b * S + i, h * dh + d) * scale : 0.0f;
        dout[d] = live ? ld(p.v[1], b * S + i, h * dh + d) : 0.0f;
        dq[d] = 0.0f;
    }
    float dsum = 0.0f;
    for (int pass = 0; pass < 2; pass++) {
        for (long long j0 = 0; j0 <= last; j0 += FA_TILE) {
            load_kv_tile(ks, vs, x, b, S, g, dh, j0);
            __syncthreads();
            if (live && j0 <= i) {
                long long n = min_ll(FA_TILE, i - j0 + 1);
                for (long long jj = 0; jj < n; jj++) {
                    float pj = expf(dot_n(q, ks[jj], dh) - lse);
                    float dp = dot_n(dout, vs[jj], dh);
                    if (pass == 0) {
                        dsum += pj * dp;
                    } else {
                        float ds = pj * (dp - dsum) * scale;
                        for (long long d = 0; d < dh; d++) dq[d] += ds * ks[jj][d];
                    }
                }
            }
            __syncthreads();
        }
    }
    if (live) {
        ((float*)p.v[3].p)[row] = dsum;
        for (long long d = 0; d < dh; d++) st(dx.q, b * S + i, h * dh + d, dq[d]);
    }
}

// Backward, key side. v1 = dout, v2 = log-sum-exps, v3 = D (from k_attn_bwd_q), v4 = dqkv
// (its k and v blocks are written). Grid: (⌈seq/FA_ROWS⌉, kv_heads, batch); thread = key row
// j of kv head g: dK_j = scale·Σ_h Σ_{i≥j} dS_ij·q_i, dV_j = Σ_h Σ_{i≥j} P_ij·dO_i over the
// heads h of g in order.
KERNEL(k_attn_bwd_kv) {
    __shared__ float qs[FA_TILE][FA_DH];
    __shared__ float dos[FA_TILE][FA_DH];
    __shared__ float lses[FA_TILE];
    __shared__ float dsums[FA_TILE];
    long long S = p.n[1], H = p.n[2], HK = p.n[3], dh = p.n[4], T = p.n[0] * S;
    Qkv x = qkv_views(p.v[0], T, H * dh, HK * dh);
    Qkv dx = qkv_views(p.v[4], T, H * dh, HK * dh);
    long long b = blockIdx.z, g = blockIdx.y, group = H / HK;
    long long j0 = (long long)blockIdx.x * FA_ROWS, j = j0 + threadIdx.x;
    bool live = j < S;
    float scale = (float)p.f[0];
    float k[FA_DH], v[FA_DH], dk[FA_DH], dv[FA_DH];
    for (long long d = 0; d < dh; d++) {
        k[d] = live ? ld(x.k, b * S + j, g * dh + d) * scale : 0.0f;
        v[d] = live ? ld(x.v, b * S + j, g * dh + d) : 0.0f;
        dk[d] = 0.0f;
        dv[d] = 0.0f;
    }
    // Query rows before the block's first key row see none of its keys.
    for (long long h = g * group; h < (g + 1) * group; h++) {
        for (long long t0 = j0 - j0 % FA_TILE; t0 < S; t0 += FA_TILE) {
            for (long long e = threadIdx.x; e < FA_TILE * dh; e += FA_ROWS) {
                long long ii = e / dh, d = e % dh, i = t0 + ii;
                qs[ii][d] = i < S ? ld(x.q, b * S + i, h * dh + d) : 0.0f;
                dos[ii][d] = i < S ? ld(p.v[1], b * S + i, h * dh + d) : 0.0f;
            }
            for (long long ii = threadIdx.x; ii < FA_TILE; ii += FA_ROWS) {
                long long i = t0 + ii, row = (b * H + h) * S + i;
                lses[ii] = i < S ? ((const float*)p.v[2].p)[row] : 0.0f;
                dsums[ii] = i < S ? ((const float*)p.v[3].p)[row] : 0.0f;
            }
            __syncthreads();
            if (live) {
                for (long long ii = 0; ii < FA_TILE; ii++) {
                    long long i = t0 + ii;
                    if (i < j || i >= S) continue;
                    float pj = expf(dot_n(k, qs[ii], dh) - lses[ii]);
                    float dp = dot_n(v, dos[ii], dh);
                    float ds = pj * (dp - dsums[ii]) * scale;
                    for (long long d = 0; d < dh; d++) {
                        dk[d] += ds * qs[ii][d];
                        dv[d] += pj * dos[ii][d];
                    }
                }
            }
            __syncthreads();
        }
    }
    if (live)
        for (long long d = 0; d < dh; d++) {
            st(dx.k, b * S + j, g * dh + d, dk[d]);
            st(dx.v, b * S + j, g * dh + d, dv[d]);
        }
}
