// Causal attention with GQA on the tensor cores, for Precision::Bf16 and head_dim 32, 64 or
// 128: attention.cu's algorithm (one log-sum-exp per row; D = dO·O; dQ on the query side, dK
// and dV on the key side walking the query rows in order, no atomics) with the products of
// each warp's 16 rows taken by mma.sync m16n8k16 — bf16 operands, fp32 accumulation — in
// FlashAttention-2's register layout, where a score tile's accumulators are the next
// product's A operand. q·scale, k, v, dO, P and dS are rounded to bf16 for the products, as
// cuBLAS rounds a GEMM's inputs under Bf16; the softmax, its statistics, the sums of D and
// the outputs stay fp32. Every sum runs in a fixed order: deterministic.
//
// Parameters as attention.cu's: v0 = qkv, n[0..5] = batch, seq, heads, kv_heads, head_dim,
// f[0] = the score scale; forward v1 = out, v2 = log-sum-exps; backward v1 = dout, v2 =
// log-sum-exps, v3 = D, v4 = dqkv, v5 = the forward's output. A block of TC_NT threads (4
// warps) owns TC_ROWS rows, 16 a warp; the other side is staged in bf16 tiles of shared
// memory, rows padded by 8 elements so that a warp's fragment loads hit 32 different banks.
//
// Fragments (PTX ISA, mma.m16n8k16 with .bf16): lane = 4·gr + qd; A (16×16) a[0..3] hold rows
// gr, gr + 8, gr, gr + 8 at columns 2qd, 2qd + 1 (+8 for a[2], a[3]); B (16×8) b0, b1 hold
// rows 2qd, 2qd + 1 (+8 for b1) of column gr; C (16×8, fp32) c[0..3] hold (gr, 2qd),
// (gr, 2qd + 1), (gr + 8, 2qd), (gr + 8, 2qd + 1). Two bf16 in a 32-bit word: the lower
// column in the low half.
#undef KERNEL_BOUNDS
#define KERNEL_BOUNDS __launch_bounds__(TC_NT)
#include "common.cuh"

#define TC_NT 128   // threads per block: 4 warps
#define TC_ROWS 64  // rows a block owns, 16 a warp
#define TC_PAD 8    // elements a shared tile's rows are padded by (fragment loads: 32 banks)
// Loads a thread has in flight at most when staging a tile (four elements each): at head_dim
// 128 the forward's 64-row tiles are 16 a thread, and holding all of them beside the output's
// accumulators spilled 236 bytes (ptxas, sm_90); shorter tiles load as before, all at once.
#define TC_STAGE 8

// A loop over a fragment array's index, fully unrolled so that the array stays in registers
// (the key side's last loop: at head_dim 128 dK's and dV's accumulators went to local memory).
#ifdef BOOST_EMU
#define TC_UNROLL
#else
#define TC_UNROLL _Pragma("unroll")
#endif

// Shared tiles are read as 32-bit words: they are SHARED_ALIGNED (16 bytes).

// The two bf16 at p (4-byte aligned) as one word.
__device__ __forceinline__ unsigned ld2(const bf16_t* p) {
#ifdef BOOST_EMU
    unsigned u;
    memcpy(&u, p, 4);
    return u;
#else
    return *(const unsigned*)p;
#endif
}

// lo and hi rounded to bf16 (nearest even) in one word, lo in the low half.
__device__ __forceinline__ unsigned pack2(float lo, float hi) {
#ifdef BOOST_EMU
    return (unsigned)f2bf(lo) | ((unsigned)f2bf(hi) << 16);
#else
    unsigned u;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(u) : "f"(hi), "f"(lo));
    return u;
#endif
}

// c += A·B for the warp (layouts above).
__device__ __forceinline__ void mma16816(float c[4], const unsigned a[4], unsigned b0, unsigned b1) {
#ifdef BOOST_EMU
    emu_mma_bf16_16816(c, a, b0, b1);
#else
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#endif
}

// x of the lane whose index differs from this one's by the bits of m.
__device__ __forceinline__ float shfl_xor(float x, int m) {
#ifdef BOOST_EMU
    return __uint_as_float(emu_shfl_xor(__float_as_uint(x), m));
#else
    unsigned r;
    asm volatile("shfl.sync.bfly.b32 %0, %1, %2, 0x1f, 0xffffffff;" : "=r"(r) : "r"(__float_as_uint(x)), "r"(m));
    return __uint_as_float(r);
#endif
}

// Over the four lanes of a quad (the lanes holding one row of a C fragment), in a fixed order.
__device__ __forceinline__ float quad_max(float x) {
    x = fmaxf(x, shfl_xor(x, 1));
    return fmaxf(x, shfl_xor(x, 2));
}
__device__ __forceinline__ float quad_sum(float x) {
    x += shfl_xor(x, 1);
    return x + shfl_xor(x, 2);
}

// The lane's place in its fragments: row group and column pair.
struct Lane {
    int gr, qd;
};
__device__ __forceinline__ Lane lane_of() {
    int l = threadIdx.x % 32;
    return Lane{l / 4, l % 4};
}

// The A operand rows row0.., columns k0.. of a row-major bf16 tile with row stride ld.
__device__ __forceinline__ void load_a(unsigned a[4], const bf16_t* t, int ld, int row0, int k0, Lane L) {
    const bf16_t* p0 = t + (row0 + L.gr) * ld + k0 + 2 * L.qd;
    const bf16_t* p1 = p0 + 8 * ld;
    a[0] = ld2(p0);
    a[1] = ld2(p1);
    a[2] = ld2(p0 + 8);
    a[3] = ld2(p1 + 8);
}

// The B operand at rows (k) k0.., columns (n) n0.. where B(k, n) = t[n][k], t row-major with
// row stride ld.
__device__ __forceinline__ void load_b(unsigned& b0, unsigned& b1, const bf16_t* t, int ld, int n0, int k0, Lane L) {
    const bf16_t* p = t + (n0 + L.gr) * ld + k0 + 2 * L.qd;
    b0 = ld2(p);
    b1 = ld2(p + 8);
}

// The A operand of the 16 columns k0 = 16kc.. of a warp's 16-row C tile held as c[k0/8] and
// c[k0/8 + 1] (16×8 each), rounded to bf16.
__device__ __forceinline__ void c_to_a(unsigned a[4], const float c0[4], const float c1[4]) {
    a[0] = pack2(c0[0], c0[1]);
    a[1] = pack2(c0[2], c0[3]);
    a[2] = pack2(c1[0], c1[1]);
    a[3] = pack2(c1[2], c1[3]);
}

// c[n] = A·B_n for the warp's 16 rows (a: DH/16 A operands along k) and TILES tiles of 8
// columns, B(k, n) = t[n][k] (t row-major with row stride ld), k in order.
template <int DH, int TILES>
__device__ __forceinline__ void product(float c[TILES][4], const unsigned a[DH / 16][4], const bf16_t* t, int ld,
                                        Lane L) {
    for (int n = 0; n < TILES; n++) {
        for (int e = 0; e < 4; e++) c[n][e] = 0.0f;
        for (int kk = 0; kk < DH / 16; kk++) {
            unsigned b0, b1;
            load_b(b0, b1, t, ld, 8 * n, 16 * kk, L);
            mma16816(c[n], a[kk], b0, b1);
        }
    }
}

// acc[n] += C·B_n over the DH/8 tiles of 8 columns, C the warp's 16 × 8·NC tile c (rounded to
// bf16 as an A operand), B(k, n) = t[n][k] (t row-major with row stride ld), k in order.
template <int DH, int NC>
__device__ __forceinline__ void accumulate(float acc[DH / 8][4], float c[NC][4], const bf16_t* t, int ld, Lane L) {
    for (int kc = 0; kc < NC / 2; kc++) {
        unsigned a[4];
        c_to_a(a, c[2 * kc], c[2 * kc + 1]);
        for (int n = 0; n < DH / 8; n++) {
            unsigned b0, b1;
            load_b(b0, b1, t, ld, 8 * n, 16 * kc, L);
            mma16816(acc[n], a, b0, b1);
        }
    }
}

// Two words at p (8-byte aligned).
__device__ __forceinline__ void store2(bf16_t* p, unsigned w0, unsigned w1) {
#ifdef BOOST_EMU
    unsigned w[2] = {w0, w1};
    memcpy(p, w, 8);
#else
    *(uint2*)p = make_uint2(w0, w1);
#endif
}

// Elements (i, j..j+4) of a view (fp32 or bf16), as fp32; `vec`: the four are aligned for one
// vector load.
__device__ __forceinline__ void load4(const Tv& x, long long i, long long j, bool vec, float v[4]) {
    long long off = i * x.ld + j;
    if (vec && !x.bf) {
#ifdef BOOST_EMU
        memcpy(v, (const float*)x.p + off, 16);
#else
        float4 f = *(const float4*)((const float*)x.p + off);
        v[0] = f.x, v[1] = f.y, v[2] = f.z, v[3] = f.w;
#endif
    } else if (vec) {
        unsigned u[2];
#ifdef BOOST_EMU
        memcpy(u, (const bf16_t*)x.p + off, 8);
#else
        uint2 w = *(const uint2*)((const bf16_t*)x.p + off);
        u[0] = w.x, u[1] = w.y;
#endif
        for (int e = 0; e < 4; e++) v[e] = bf2f((bf16_t)(u[e / 2] >> (16 * (e % 2))));
    } else {
        for (int e = 0; e < 4; e++) v[e] = ld(x, i, j + e);
    }
}

// Rows r0..r0+R of head column block c of x (sequence b) times mul, rounded to bf16, into dst
// (row rr at dst + rr·ldd) and, when dst_t is given, transposed into dst_t (column rr at
// dst_t + d·ldt + rr); zeros past the sequence. The block's threads share the copy, four
// consecutive columns a thread at a time, every load of a thread issued before the first
// store so that they are in flight together.
template <int DH, int R>
__device__ __forceinline__ void stage_bf(bf16_t* dst, int ldd, bf16_t* dst_t, int ldt, const Tv& x, long long b,
                                         long long S, long long c, long long r0, float mul) {
    constexpr int QUADS = R * DH / 4, PER = (QUADS + TC_NT - 1) / TC_NT;
    constexpr int GROUP = PER < TC_STAGE ? PER : TC_STAGE;
    static_assert(PER % GROUP == 0, "a tile's loads split into whole groups");
    unsigned long long align = x.bf ? 8 : 16;
    bool vec = x.ld % 4 == 0 && x.p % align == 0;
    for (int k0 = 0; k0 < PER; k0 += GROUP) {
        float v[GROUP][4];
        for (int k = 0; k < GROUP; k++) {
            int e = threadIdx.x + TC_NT * (k0 + k), rr = e / (DH / 4), d = e % (DH / 4) * 4;
            long long r = r0 + rr;
            if (e < QUADS && r < S)
                load4(x, b * S + r, c * DH + d, vec, v[k]);
            else
                for (int j = 0; j < 4; j++) v[k][j] = 0.0f;
        }
        for (int k = 0; k < GROUP; k++) {
            int e = threadIdx.x + TC_NT * (k0 + k), rr = e / (DH / 4), d = e % (DH / 4) * 4;
            if (e >= QUADS) continue;
            unsigned w0 = pack2(v[k][0] * mul, v[k][1] * mul), w1 = pack2(v[k][2] * mul, v[k][3] * mul);
            if (dst) store2(dst + rr * ldd + d, w0, w1);
            if (dst_t) {
                dst_t[(d + 0) * ldt + rr] = (bf16_t)(w0 & 0xffffu);
                dst_t[(d + 1) * ldt + rr] = (bf16_t)(w0 >> 16);
                dst_t[(d + 2) * ldt + rr] = (bf16_t)(w1 & 0xffffu);
                dst_t[(d + 3) * ldt + rr] = (bf16_t)(w1 >> 16);
            }
        }
    }
}

// The warp's A operands for rows r0 + 16w.. (w: its warp) of head column block c of x, times
// mul: the block's TC_ROWS rows staged through buf (row stride DH + TC_PAD), which the block
// may reuse once this returns.
template <int DH>
__device__ __forceinline__ void operand_rows(unsigned a[DH / 16][4], bf16_t* buf, const Tv& x, long long b,
                                             long long S, long long c, long long r0, float mul, Lane L) {
    stage_bf<DH, TC_ROWS>(buf, DH + TC_PAD, nullptr, 0, x, b, S, c, r0, mul);
    __syncthreads();
    int w = threadIdx.x / 32;
    for (int kk = 0; kk < DH / 16; kk++) load_a(a[kk], buf, DH + TC_PAD, 16 * w, 16 * kk, L);
    __syncthreads();
}

// Forward. Grid: (heads, ⌈seq/64⌉, batch), heads first so that the blocks of every head's last
// rows, which walk the most keys, start first: block (h, y) owns query rows i0..i0+64 of head
// h, i0 = 64·(⌈seq/64⌉ − 1 − y), which reads kv head h / (heads / kv_heads); key tiles of 64.
template <int DH>
__device__ __forceinline__ void tc_attn_fwd(const P& p) {
    constexpr int BC = 64, LD = DH + TC_PAD, LDT = BC + TC_PAD;
    SHARED_ALIGNED(bf16_t, ks, BC * LD);  // the key tile (q·scale before the first one)
    SHARED_ALIGNED(bf16_t, vt, DH * LDT);  // the value tile, transposed
    long long S = p.n[1], H = p.n[2], HK = p.n[3];
    Qkv x = qkv_views(p.v[0], p.n[0] * S, H * DH, HK * DH);
    long long b = blockIdx.z, h = blockIdx.x, kh = h / (H / HK);
    long long i0 = (long long)(gridDim.y - 1 - blockIdx.y) * TC_ROWS;
    int w = threadIdx.x / 32;
    Lane L = lane_of();
    long long row[2] = {i0 + 16 * w + L.gr, i0 + 16 * w + L.gr + 8};
    unsigned qa[DH / 16][4];
    operand_rows<DH>(qa, ks, x.q, b, S, h, i0, (float)p.f[0], L);
    float o[DH / 8][4];
    for (int n = 0; n < DH / 8; n++)
        for (int e = 0; e < 4; e++) o[n][e] = 0.0f;
    // Each lane's row maxima (shared by its quad) and partial sums over its own columns.
    float m[2] = {NEG_INF, NEG_INF}, l[2] = {0.0f, 0.0f};
    for (long long j0 = 0; j0 < min_ll(i0 + TC_ROWS, S); j0 += BC) {
        __syncthreads();  // every warp is done with the last tile (and with q's)
        stage_bf<DH, BC>(ks, LD, nullptr, 0, x.k, b, S, kh, j0, 1.0f);
        stage_bf<DH, BC>(nullptr, 0, vt, LDT, x.v, b, S, kh, j0, 1.0f);
        __syncthreads();
        float s[BC / 8][4];
        product<DH, BC / 8>(s, qa, ks, LD, L);
        // Mask the keys after each row; the new maxima (every row has key 0 in the first
        // tile, so they are finite from then on).
        float mx[2] = {m[0], m[1]};
        for (int n = 0; n < BC / 8; n++)
            for (int e = 0; e < 4; e++) {
                if (j0 + 8 * n + 2 * L.qd + e % 2 > row[e / 2]) s[n][e] = NEG_INF;
                mx[e / 2] = fmaxf(mx[e / 2], s[n][e]);
            }
        float corr[2];
        for (int r = 0; r < 2; r++) {
            mx[r] = quad_max(mx[r]);
            corr[r] = expf(m[r] - mx[r]);
            m[r] = mx[r];
            l[r] *= corr[r];
        }
        for (int n = 0; n < BC / 8; n++)
            for (int e = 0; e < 4; e++) {
                s[n][e] = expf(s[n][e] - m[e / 2]);
                l[e / 2] += s[n][e];
            }
        for (int n = 0; n < DH / 8; n++)
            for (int e = 0; e < 4; e++) o[n][e] *= corr[e / 2];
        accumulate<DH, BC / 8>(o, s, vt, LDT, L);
    }
    for (int r = 0; r < 2; r++) l[r] = quad_sum(l[r]);
    for (int n = 0; n < DH / 8; n++)
        for (int e = 0; e < 4; e++)
            if (row[e / 2] < S) st(p.v[1], b * S + row[e / 2], h * DH + 8 * n + 2 * L.qd + e % 2, o[n][e] / l[e / 2]);
    if (L.qd == 0)
        for (int r = 0; r < 2; r++)
            if (row[r] < S) ((float*)p.v[2].p)[(b * H + h) * S + row[r]] = m[r] + logf(l[r]);
}

// Backward, query side. Grid as the forward's; key tiles of 32. D_i = dO_i·O_i (fp32, summed
// over head_dim in order), then dQ_i = scale·Σ_j P_ij·(dP_ij − D_i)·k_j with dP_ij = dO_i·v_j.
template <int DH>
__device__ __forceinline__ void tc_attn_bwd_q(const P& p) {
    constexpr int BC = 32, LD = DH + TC_PAD, LDT = BC + TC_PAD;
    // The key and value tiles, one after the other (q·scale, then dO, before the first).
    SHARED_ALIGNED(bf16_t, kv, 2 * BC * LD);
    SHARED_ALIGNED(bf16_t, kt, DH * LDT);  // the key tile, transposed
    SHARED(float, lse_s, TC_ROWS);
    SHARED(float, d_s, TC_ROWS);
    bf16_t *ks = kv, *vs = kv + BC * LD;
    long long S = p.n[1], H = p.n[2], HK = p.n[3], T = p.n[0] * S;
    Qkv x = qkv_views(p.v[0], T, H * DH, HK * DH);
    Qkv dx = qkv_views(p.v[4], T, H * DH, HK * DH);
    long long b = blockIdx.z, h = blockIdx.x, kh = h / (H / HK);
    long long i0 = (long long)(gridDim.y - 1 - blockIdx.y) * TC_ROWS, base = (b * H + h) * S;
    int tid = threadIdx.x, w = tid / 32;
    Lane L = lane_of();
    float scale = (float)p.f[0];
    if (tid < TC_ROWS) {
        long long i = i0 + tid;
        float acc = 0.0f;
        if (i < S)
            for (int d = 0; d < DH; d++) acc += ld(p.v[1], b * S + i, h * DH + d) * ld(p.v[5], b * S + i, h * DH + d);
        d_s[tid] = acc;
        lse_s[tid] = i < S ? ((const float*)p.v[2].p)[base + i] : 0.0f;
        if (i < S) ((float*)p.v[3].p)[base + i] = acc;
    }
    unsigned qa[DH / 16][4], da[DH / 16][4];
    operand_rows<DH>(qa, kv, x.q, b, S, h, i0, scale, L);
    operand_rows<DH>(da, kv, p.v[1], b, S, h, i0, 1.0f, L);
    int rr[2] = {16 * w + L.gr, 16 * w + L.gr + 8};
    float lse[2] = {lse_s[rr[0]], lse_s[rr[1]]}, dsum[2] = {d_s[rr[0]], d_s[rr[1]]};
    float dq[DH / 8][4];
    for (int n = 0; n < DH / 8; n++)
        for (int e = 0; e < 4; e++) dq[n][e] = 0.0f;
    for (long long j0 = 0; j0 < min_ll(i0 + TC_ROWS, S); j0 += BC) {
        __syncthreads();
        stage_bf<DH, BC>(ks, LD, kt, LDT, x.k, b, S, kh, j0, 1.0f);
        stage_bf<DH, BC>(vs, LD, nullptr, 0, x.v, b, S, kh, j0, 1.0f);
        __syncthreads();
        float s[BC / 8][4], dp[BC / 8][4];
        product<DH, BC / 8>(s, qa, ks, LD, L);
        product<DH, BC / 8>(dp, da, vs, LD, L);
        // dS · scale, into s.
        for (int n = 0; n < BC / 8; n++)
            for (int e = 0; e < 4; e++) {
                int r = e / 2;
                bool live = j0 + 8 * n + 2 * L.qd + e % 2 <= i0 + rr[r];
                s[n][e] = live ? expf(s[n][e] - lse[r]) * (dp[n][e] - dsum[r]) * scale : 0.0f;
            }
        accumulate<DH, BC / 8>(dq, s, kt, LDT, L);
    }
    for (int n = 0; n < DH / 8; n++)
        for (int e = 0; e < 4; e++) {
            long long i = i0 + rr[e / 2];
            if (i < S) st(dx.q, b * S + i, h * DH + 8 * n + 2 * L.qd + e % 2, dq[n][e]);
        }
}

// Backward, key side. Grid: (kv_heads, ⌈seq/64⌉, batch), the first key rows (which walk the
// most queries) first: block (g, y) owns key rows j0 = 64·y..j0+64 of kv head g: dK_j = scale·Σ_h Σ_{i≥j} dS_ij·q_i and dV_j = Σ_h Σ_{i≥j} P_ij·dO_i over the heads
// h of g in order, query tiles of BQ from the block's first key in order.
//
// At head_dim 128 a thread holds dK's and dV's accumulators (128 registers) and k's and v's A
// operands (64): the query tiles there are 16 rows, which halves the score tiles' registers;
// with tiles of 32, ptxas (sm_90) spilled 100 bytes a thread and loaded them 244 times.
template <int DH>
__device__ __forceinline__ void tc_attn_bwd_kv(const P& p) {
    constexpr int BQ = DH == 128 ? 16 : 32, LD = DH + TC_PAD, LDT = BQ + TC_PAD;
    // The q·scale and dO tiles, one after the other (k's, then v's TC_ROWS rows before the
    // first, for their A operands: the buffer holds the larger).
    constexpr int QD_ROWS = 2 * BQ > TC_ROWS ? 2 * BQ : TC_ROWS;
    SHARED_ALIGNED(bf16_t, qd, QD_ROWS * LD);
    SHARED_ALIGNED(bf16_t, qt, DH * LDT);   // q·scale, transposed
    SHARED_ALIGNED(bf16_t, dot, DH * LDT);  // dO, transposed
    SHARED(float, lse_s, BQ);
    SHARED(float, d_s, BQ);
    bf16_t *qs = qd, *dos = qd + BQ * LD;
    long long S = p.n[1], H = p.n[2], HK = p.n[3], T = p.n[0] * S, group = H / HK;
    Qkv x = qkv_views(p.v[0], T, H * DH, HK * DH);
    Qkv dx = qkv_views(p.v[4], T, H * DH, HK * DH);
    long long b = blockIdx.z, g = blockIdx.x, j0 = (long long)blockIdx.y * TC_ROWS;
    int tid = threadIdx.x, w = tid / 32;
    Lane L = lane_of();
    float scale = (float)p.f[0];
    unsigned ka[DH / 16][4], va[DH / 16][4];
    operand_rows<DH>(ka, qd, x.k, b, S, g, j0, 1.0f, L);
    operand_rows<DH>(va, qd, x.v, b, S, g, j0, 1.0f, L);
    long long key[2] = {j0 + 16 * w + L.gr, j0 + 16 * w + L.gr + 8};
    float dk[DH / 8][4], dv[DH / 8][4];
    for (int n = 0; n < DH / 8; n++)
        for (int e = 0; e < 4; e++) dk[n][e] = dv[n][e] = 0.0f;
    for (long long h = g * group; h < (g + 1) * group; h++) {
        long long base = (b * H + h) * S;
        for (long long t0 = j0; t0 < S; t0 += BQ) {
            __syncthreads();
            stage_bf<DH, BQ>(qs, LD, qt, LDT, x.q, b, S, h, t0, scale);
            stage_bf<DH, BQ>(dos, LD, dot, LDT, p.v[1], b, S, h, t0, 1.0f);
            if (tid < BQ) {
                bool in = t0 + tid < S;
                lse_s[tid] = in ? ((const float*)p.v[2].p)[base + t0 + tid] : 0.0f;
                d_s[tid] = in ? ((const float*)p.v[3].p)[base + t0 + tid] : 0.0f;
            }
            __syncthreads();
            // Pᵀ and dSᵀ (key rows, query columns) into st and dpt.
            float st_[BQ / 8][4], dpt[BQ / 8][4];
            product<DH, BQ / 8>(st_, ka, qs, LD, L);
            product<DH, BQ / 8>(dpt, va, dos, LD, L);
            for (int n = 0; n < BQ / 8; n++)
                for (int e = 0; e < 4; e++) {
                    int c = 8 * n + 2 * L.qd + e % 2;
                    long long i = t0 + c;
                    bool live = i >= key[e / 2] && i < S;
                    float pt = live ? expf(st_[n][e] - lse_s[c]) : 0.0f;
                    st_[n][e] = pt;
                    dpt[n][e] = pt * (dpt[n][e] - d_s[c]);
                }
            accumulate<DH, BQ / 8>(dv, st_, dot, LDT, L);
            accumulate<DH, BQ / 8>(dk, dpt, qt, LDT, L);
        }
    }
    TC_UNROLL
    for (int n = 0; n < DH / 8; n++)
        TC_UNROLL
        for (int e = 0; e < 4; e++) {
            long long j = key[e / 2];
            if (j >= S) continue;
            st(dx.k, b * S + j, g * DH + 8 * n + 2 * L.qd + e % 2, dk[n][e]);
            st(dx.v, b * S + j, g * DH + 8 * n + 2 * L.qd + e % 2, dv[n][e]);
        }
}

KERNEL(k_attn_tc_fwd_32) { tc_attn_fwd<32>(p); }
KERNEL(k_attn_tc_fwd_64) { tc_attn_fwd<64>(p); }
KERNEL(k_attn_tc_fwd_128) { tc_attn_fwd<128>(p); }
KERNEL(k_attn_tc_bwd_q_32) { tc_attn_bwd_q<32>(p); }
KERNEL(k_attn_tc_bwd_q_64) { tc_attn_bwd_q<64>(p); }
KERNEL(k_attn_tc_bwd_q_128) { tc_attn_bwd_q<128>(p); }
KERNEL(k_attn_tc_bwd_kv_32) { tc_attn_bwd_kv<32>(p); }
KERNEL(k_attn_tc_bwd_kv_64) { tc_attn_bwd_kv<64>(p); }
KERNEL(k_attn_tc_bwd_kv_128) { tc_attn_bwd_kv<128>(p); }
