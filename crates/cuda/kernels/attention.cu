// Causal attention with GQA without the S×S probability matrix (FlashAttention's online
// softmax): the forward keeps one log-sum-exp per (sequence, head, query row); the backward
// recomputes each probability from it. Every sum runs in a fixed order, so results are
// deterministic: the query-side kernel gives dQ and the per-row D_i = Σ_j P_ij·dP_ij (as
// dO_i·O_i, from the forward's output), and a key-side kernel gives dK and dV by walking the
// query rows (of every head sharing the kv head, in head order) for each key row — no
// atomics.
//
// Common parameters: v0 = qkv (q: T × heads·d_h, then k and v: T × kv_heads·d_h each, one
// after the other, all of v0's dtype; T = batch·seq), n[0..5] = batch, seq, heads, kv_heads,
// head_dim, f[0] = the score scale. Log-sum-exps and D are fp32, row (b, h, i) at
// (b·heads + h)·seq + i; head_dim ≤ FA_DH.
//
// A block of FA_NT threads owns a tile of R rows (fa_rows: 32 for head_dim ≤ 64, 16 for 128)
// and stages tiles of R rows of the other side in shared memory, rows padded to head_dim + 1
// floats so that the threads of a warp reading one column of different rows hit different
// banks. Each R×R block of scores is computed in 2×2 micro-tiles, one per thread, into shared
// memory; a thread per row then updates that row's statistics, and each thread accumulates
// the R×head_dim tile elements it owns (e = thread + FA_NT·k) in registers. Sums over keys
// (or queries) run in index order, one tile after another.
#define FA_NT 256  // threads per block
// Two blocks per multiprocessor: without the bound the kernels take 128-142 registers a
// thread, which leaves room for one, and a cola-60m layer's attention took 864 + 350 µs
// (backward + forward) on an H100 instead of 695 + 247. (The emulator includes every kernel
// file in one unit, hence the #undef.)
#undef KERNEL_BOUNDS
#define KERNEL_BOUNDS __launch_bounds__(FA_NT, 2)
#include "common.cuh"

#define FA_BUF 2080                              // floats per staged tile: R × (head_dim + 1)
#define FA_R 32                                  // most rows per tile
#define FA_DH 128                                // largest head_dim
#define FA_PER ((FA_BUF + FA_NT - 1) / FA_NT)    // tile elements a thread owns

// Rows per tile for head_dim dh (the host's flash::rows).
__device__ __forceinline__ long long fa_rows(long long dh) {
    long long r = FA_BUF / (dh + 1);
    return r < FA_R ? r : FA_R;
}

// The 2×2 block of dot products a_r·b_c (r, c ∈ {0, 1}) over n elements: four sums from four
// loads per element instead of eight (the score tiles are bound by shared-memory loads).
__device__ __forceinline__ void dots2x2(const float* a0, const float* a1, const float* b0, const float* b1,
                                        long long n, float s[4]) {
    float s00 = 0.0f, s01 = 0.0f, s10 = 0.0f, s11 = 0.0f;
    for (long long d = 0; d < n; d++) {
        float x0 = a0[d], x1 = a1[d], y0 = b0[d], y1 = b1[d];
        s00 += x0 * y0;
        s01 += x0 * y1;
        s10 += x1 * y0;
        s11 += x1 * y1;
    }
    s[0] = s00;
    s[1] = s01;
    s[2] = s10;
    s[3] = s11;
}

// The 2×2 micro-tile of an R×R score tile that a thread computes: rows r and r + half,
// columns c and c + half (half = ⌈R/2⌉). Element q (0..3) is (row(q), col(q)), inside the
// tile when has(q); `live` is false for threads past the tile.
struct Micro {
    long long r, c, half, R;
    bool live;
    __device__ long long row(int q) const { return q / 2 ? r + half : r; }
    __device__ long long col(int q) const { return q % 2 ? c + half : c; }
    __device__ bool has(int q) const { return row(q) < R && col(q) < R; }
    // The four dot products (a row)·(b row) of two padded tiles, rows row(q) of a and col(q)
    // of b; a row past the tile reads row r (or c) again, and its sums are never stored.
    __device__ void dots(const float* a, const float* b, long long dh, float s[4]) const {
        long long ld1 = dh + 1, r1 = r + half < R ? r + half : r, c1 = c + half < R ? c + half : c;
        dots2x2(&a[r * ld1], &a[r1 * ld1], &b[c * ld1], &b[c1 * ld1], dh, s);
    }
};

__device__ __forceinline__ Micro micro_tile(long long R) {
    Micro m;
    long long e = threadIdx.x;
    m.half = (R + 1) / 2;
    m.r = e / m.half;
    m.c = e % m.half;
    m.R = R;
    m.live = e < m.half * m.half;
    return m;
}

// acc[k] *= by[row] for the tile elements this thread owns (as tile_accumulate's), e < n.
__device__ __forceinline__ void tile_scale_rows(float acc[FA_PER], const float* by, long long dh, long long n) {
    for (int k = 0; k < FA_PER; k++) {
        long long e = threadIdx.x + (long long)FA_NT * k;
        if (e < n) acc[k] *= by[e / dh];
    }
}

// Write the tile elements this thread owns (as tile_accumulate's) of the first `rows` rows
// to view v at (r0 + row, c0 + col).
__device__ __forceinline__ void tile_store(const Tv& v, long long r0, long long c0, long long rows, long long dh,
                                           const float acc[FA_PER]) {
    for (int k = 0; k < FA_PER; k++) {
        long long e = threadIdx.x + (long long)FA_NT * k;
        if (e < rows * dh) st(v, r0 + e / dh, c0 + e % dh, acc[k]);
    }
}

// dst[i] = the fp32 statistic of row r0 + i (rows at base + row in src), 0 past the sequence.
__device__ __forceinline__ void stage_stats(float* dst, const Tv& src, long long base, long long r0, long long R,
                                            long long S) {
    long long i = threadIdx.x;
    if (i < R) dst[i] = r0 + i < S ? ((const float*)src.p)[base + r0 + i] : 0.0f;
}

// acc[k] += Σ_jj a[row][jj] · t[jj][col] over jj < R, in order, for the tile elements this
// thread owns (e = thread + FA_NT·k < n, row = e / dh, col = e % dh; t's rows padded to dh + 1).
// When dh divides FA_NT all of them share the column thread % dh, so t is read once per jj.
__device__ __forceinline__ void tile_accumulate(float acc[FA_PER], const float (*a)[FA_R + 1], const float* t,
                                                long long R, long long dh, long long n) {
    long long tid = threadIdx.x, ld1 = dh + 1;
    int row[FA_PER];
    for (int k = 0; k < FA_PER; k++) {
        long long e = tid + (long long)FA_NT * k;
        row[k] = e < n ? (int)(e / dh) : -1;
    }
    if (FA_NT % dh == 0) {
        long long c = tid % dh;
        for (long long jj = 0; jj < R; jj++) {
            float tv = t[jj * ld1 + c];
            for (int k = 0; k < FA_PER; k++)
                if (row[k] >= 0) acc[k] += a[row[k]][jj] * tv;
        }
    } else {
        for (long long jj = 0; jj < R; jj++)
            for (int k = 0; k < FA_PER; k++)
                if (row[k] >= 0) acc[k] += a[row[k]][jj] * t[jj * ld1 + (tid + (long long)FA_NT * k) % dh];
    }
}

// Stage rows r0..r0+R of head column block c (c·dh ..) of view x for sequence b into a padded
// shared tile (zeros past the sequence), times `mul`; the block's threads share the copy.
__device__ __forceinline__ void stage(float* tile, const Tv& x, long long b, long long S, long long c, long long dh,
                                      long long r0, long long R, float mul) {
    for (long long e = threadIdx.x; e < R * dh; e += FA_NT) {
        long long rr = e / dh, d = e % dh, r = r0 + rr;
        tile[rr * (dh + 1) + d] = r < S ? ld(x, b * S + r, c * dh + d) * mul : 0.0f;
    }
}

// Forward. v1 = out (T × heads·d_h), v2 = log-sum-exps (fp32). Grid: (⌈seq/R⌉, heads,
// batch); the block owns query rows i0..i0+R of head h, which reads kv head h / (heads /
// kv_heads).
KERNEL(k_attn_fwd) {
    SHARED(float, qs, FA_BUF);
    SHARED(float, ks, FA_BUF);
    SHARED(float, vs, FA_BUF);
    SHARED2(float, ss, FA_R, FA_R + 1);
    SHARED(float, ms, FA_R);
    SHARED(float, ls, FA_R);
    SHARED(float, cs, FA_R);
    long long S = p.n[1], H = p.n[2], HK = p.n[3], dh = p.n[4], R = fa_rows(dh);
    Qkv x = qkv_views(p.v[0], p.n[0] * S, H * dh, HK * dh);
    long long b = blockIdx.z, h = blockIdx.y, g = h / (H / HK);
    long long i0 = (long long)blockIdx.x * R, nq = min_ll(R, S - i0);
    long long tid = threadIdx.x;
    stage(qs, x.q, b, S, h, dh, i0, R, (float)p.f[0]);
    if (tid < R) {
        ms[tid] = NEG_INF;
        ls[tid] = 0.0f;
    }
    float o[FA_PER];
    for (int k = 0; k < FA_PER; k++) o[k] = 0.0f;
    Micro mic = micro_tile(R);
    for (long long j0 = 0; j0 < i0 + nq; j0 += R) {
        stage(ks, x.k, b, S, g, dh, j0, R, 1.0f);
        stage(vs, x.v, b, S, g, dh, j0, R, 1.0f);
        __syncthreads();
        if (mic.live) {
            float sc[4];
            mic.dots(qs, ks, dh, sc);
            for (int q = 0; q < 4; q++) {
                long long ii = mic.row(q), jj = mic.col(q);
                if (mic.has(q)) ss[ii][jj] = j0 + jj > i0 + ii ? NEG_INF : sc[q];
            }
        }
        __syncthreads();
        // Rescale what the earlier tiles gave to the new maximum (0 before the first); every
        // row has a key in its first tile, so the maximum is finite from then on.
        if (tid < R) {
            float m = ms[tid], mt = m;
            for (long long jj = 0; jj < R; jj++) mt = fmaxf(mt, ss[tid][jj]);
            float l = 0.0f;
            for (long long jj = 0; jj < R; jj++) {
                float pj = expf(ss[tid][jj] - mt);
                ss[tid][jj] = pj;
                l += pj;
            }
            float corr = expf(m - mt);
            ls[tid] = ls[tid] * corr + l;
            ms[tid] = mt;
            cs[tid] = corr;
        }
        __syncthreads();
        tile_scale_rows(o, cs, dh, R * dh);
        tile_accumulate(o, ss, vs, R, dh, R * dh);
        __syncthreads();
    }
    if (tid < R) cs[tid] = 1.0f / ls[tid];
    __syncthreads();
    tile_scale_rows(o, cs, dh, nq * dh);
    tile_store(p.v[1], b * S + i0, h * dh, nq, dh, o);
    if (tid < nq) ((float*)p.v[2].p)[(b * H + h) * S + i0 + tid] = ms[tid] + logf(ls[tid]);
}

// Backward, query side. v1 = dout, v2 = log-sum-exps, v3 = D (fp32, written), v4 = dqkv (its
// q block is written), v5 = the forward's output. Grid as the forward's. D_i = Σ_j P_ij·dP_ij
// is dO_i·O_i (O_i = Σ_j P_ij·v_j), summed over head_dim in order; then one pass over the keys
// gives dQ_i = scale·Σ_j P_ij·(dP_ij − D_i)·k_j, with dP_ij = dO_i·v_j.
KERNEL(k_attn_bwd_q) {
    SHARED(float, qs, FA_BUF);
    SHARED(float, dos, FA_BUF);
    SHARED(float, ks, FA_BUF);
    SHARED(float, vs, FA_BUF);
    SHARED2(float, ss, FA_R, FA_R + 1);
    SHARED(float, lse, FA_R);
    SHARED(float, dsum, FA_R);
    long long S = p.n[1], H = p.n[2], HK = p.n[3], dh = p.n[4], T = p.n[0] * S, R = fa_rows(dh);
    Qkv x = qkv_views(p.v[0], T, H * dh, HK * dh);
    Qkv dx = qkv_views(p.v[4], T, H * dh, HK * dh);
    long long b = blockIdx.z, h = blockIdx.y, g = h / (H / HK);
    long long i0 = (long long)blockIdx.x * R, nq = min_ll(R, S - i0);
    long long tid = threadIdx.x;
    float scale = (float)p.f[0];
    stage(qs, x.q, b, S, h, dh, i0, R, scale);
    stage(dos, p.v[1], b, S, h, dh, i0, R, 1.0f);
    stage(ks, p.v[5], b, S, h, dh, i0, R, 1.0f);  // the output rows, until the first key tile
    stage_stats(lse, p.v[2], (b * H + h) * S, i0, R, S);
    __syncthreads();
    if (tid < R) {
        float acc = 0.0f;
        for (long long d = 0; d < dh; d++) acc += dos[tid * (dh + 1) + d] * ks[tid * (dh + 1) + d];
        dsum[tid] = acc;
    }
    __syncthreads();
    float dq[FA_PER];
    for (int k = 0; k < FA_PER; k++) dq[k] = 0.0f;
    Micro mic = micro_tile(R);
    for (long long j0 = 0; j0 < i0 + nq; j0 += R) {
        stage(ks, x.k, b, S, g, dh, j0, R, 1.0f);
        stage(vs, x.v, b, S, g, dh, j0, R, 1.0f);
        __syncthreads();
        if (mic.live) {
            float sc[4], dp[4];
            mic.dots(qs, ks, dh, sc);
            mic.dots(dos, vs, dh, dp);
            for (int q = 0; q < 4; q++) {
                long long ii = mic.row(q), jj = mic.col(q);
                if (!mic.has(q)) continue;
                float v = 0.0f;
                if (j0 + jj <= i0 + ii) v = expf(sc[q] - lse[ii]) * (dp[q] - dsum[ii]) * scale;
                ss[ii][jj] = v;
            }
        }
        __syncthreads();
        tile_accumulate(dq, ss, ks, R, dh, R * dh);
        __syncthreads();
    }
    tile_store(dx.q, b * S + i0, h * dh, nq, dh, dq);
    if (tid < nq) ((float*)p.v[3].p)[(b * H + h) * S + i0 + tid] = dsum[tid];
}

// Backward, key side. v1 = dout, v2 = log-sum-exps, v3 = D (from k_attn_bwd_q), v4 = dqkv
// (its k and v blocks are written). Grid: (⌈seq/R⌉, kv_heads, batch); the block owns key rows
// j0..j0+R of kv head g: dK_j = scale·Σ_h Σ_{i≥j} dS_ij·q_i, dV_j = Σ_h Σ_{i≥j} P_ij·dO_i over
// the heads h of g in order, query tiles from the block's own (the earlier rows see none of
// its keys).
KERNEL(k_attn_bwd_kv) {
    SHARED(float, ks, FA_BUF);
    SHARED(float, vs, FA_BUF);
    SHARED(float, qs, FA_BUF);
    SHARED(float, dos, FA_BUF);
    SHARED2(float, ss, FA_R, FA_R + 1);
    SHARED(float, lse, FA_R);
    SHARED(float, dsum, FA_R);
    long long S = p.n[1], H = p.n[2], HK = p.n[3], dh = p.n[4], T = p.n[0] * S, R = fa_rows(dh);
    Qkv x = qkv_views(p.v[0], T, H * dh, HK * dh);
    Qkv dx = qkv_views(p.v[4], T, H * dh, HK * dh);
    long long b = blockIdx.z, g = blockIdx.y, group = H / HK;
    long long j0 = (long long)blockIdx.x * R, nk = min_ll(R, S - j0);
    float scale = (float)p.f[0];
    stage(ks, x.k, b, S, g, dh, j0, R, scale);
    stage(vs, x.v, b, S, g, dh, j0, R, 1.0f);
    float dk[FA_PER], dv[FA_PER], ds[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (int k = 0; k < FA_PER; k++) {
        dk[k] = 0.0f;
        dv[k] = 0.0f;
    }
    Micro mic = micro_tile(R);
    for (long long h = g * group; h < (g + 1) * group; h++) {
        for (long long t0 = j0; t0 < S; t0 += R) {
            stage(qs, x.q, b, S, h, dh, t0, R, 1.0f);
            stage(dos, p.v[1], b, S, h, dh, t0, R, 1.0f);
            stage_stats(lse, p.v[2], (b * H + h) * S, t0, R, S);
            stage_stats(dsum, p.v[3], (b * H + h) * S, t0, R, S);
            __syncthreads();
            // P (kept in shared memory for dV) and dS (kept in registers until dV is done), a
            // 2×2 micro-tile (key rows jj, query rows ii) per thread.
            if (mic.live) {
                float sc[4], dp[4];
                mic.dots(ks, qs, dh, sc);
                mic.dots(vs, dos, dh, dp);
                for (int q = 0; q < 4; q++) {
                    long long jj = mic.row(q), ii = mic.col(q), i = t0 + ii;
                    float pj = 0.0f, d = 0.0f;
                    if (mic.has(q) && i >= j0 + jj && i < S) {
                        pj = expf(sc[q] - lse[ii]);
                        d = pj * (dp[q] - dsum[ii]) * scale;
                    }
                    if (mic.has(q)) ss[jj][ii] = pj;
                    ds[q] = d;
                }
            }
            __syncthreads();
            tile_accumulate(dv, ss, dos, R, dh, R * dh);
            __syncthreads();
            if (mic.live)
                for (int q = 0; q < 4; q++)
                    if (mic.has(q)) ss[mic.row(q)][mic.col(q)] = ds[q];
            __syncthreads();
            tile_accumulate(dk, ss, qs, R, dh, R * dh);
            __syncthreads();
        }
    }
    tile_store(dx.k, b * S + j0, g * dh, nk, dh, dk);
    tile_store(dx.v, b * S + j0, g * dh, nk, dh, dv);
}
