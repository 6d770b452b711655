// Shared definitions of every kernel file: the parameter block, typed views and fixed-order
// block reductions. Every kernel takes one `P` by value; its doc comment says which slots
// hold what. Views are fp32 or bf16 (stored as raw 16-bit words, so no CUDA header is
// needed and NVRTC compiles these files as they are).
#pragma once

#ifdef BOOST_EMU
#include "emu.h"
#endif

typedef unsigned short bf16_t;

// A row-major view: element (i, j) at p + (i * ld + j) elements; bf != 0 means bf16.
struct Tv {
    unsigned long long p;
    long long ld;
    int bf;
    int pad;
};

// The one parameter of every kernel: views, integers, reals.
struct P {
    Tv v[6];
    long long n[6];
    double f[10];
};

// Launch bounds for every kernel of a file, which may define KERNEL_BOUNDS before including
// this header (e.g. __launch_bounds__(256, 2): registers for two blocks per multiprocessor).
#ifndef KERNEL_BOUNDS
#define KERNEL_BOUNDS
#endif
#ifndef KERNEL
#define KERNEL(name) extern "C" __global__ void KERNEL_BOUNDS name(const P p)
#endif

// Shared memory: SHARED(type, name, n) declares `type name[n]`, SHARED_ALIGNED the same on a
// 16-byte boundary (vector loads), SHARED2(type, name, rows, cols) `type name[rows][cols]`.
// Kernels declare shared arrays only through these, so that the emulator can give each one
// guard pages and poison it before every block (emu.h).
#ifndef BOOST_EMU
#define SHARED(type, name, n) __shared__ type name[n]
#define SHARED_ALIGNED(type, name, n) __shared__ __attribute__((aligned(16))) type name[n]
#define SHARED2(type, name, rows, cols) __shared__ type name[rows][cols]
#endif

// The optimizer's step scalars (doubles in device memory; crates/cuda/src/ops/multi.rs
// names the same slots). Written by the device: S_SUMSQ, S_NORM, S_CLIP and from S_VERDICT
// on; by the host before each update: S_BETA1 to S_SKIPS_SEEN.
#define S_SUMSQ 0
#define S_NORM 1
#define S_CLIP 2
#define S_BETA1 3
#define S_BETA2 4
#define S_STEP 8
#define S_SQRT_BC2 9
#define S_T 12
#define S_LR 13
#define S_SKIPS_SEEN 14
#define S_VERDICT 15
#define S_Z 16
#define S_SKIPS 17
#define S_HALTED 18
#define S_LOSS 19
#define S_WIN_COUNT 20
#define S_WIN_HEAD 21
#define S_WIN 22
#define S_WIN_MAX 64

// Threads per block of the row kernels (one block per row) and full reductions.
#define NT 256
// Column reductions: blocks of CR_X columns × CR_Y row lanes.
#define CR_X 32
#define CR_Y 8

__device__ __forceinline__ float bf2f(bf16_t h) { return __uint_as_float(((unsigned)h) << 16); }

// Round to nearest even; NaN stays NaN.
__device__ __forceinline__ bf16_t f2bf(float f) {
    unsigned u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (bf16_t)((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (bf16_t)(u >> 16);
}

__device__ __forceinline__ float ld(const Tv& v, long long i, long long j) {
    long long k = i * v.ld + j;
    return v.bf ? bf2f(((const bf16_t*)v.p)[k]) : ((const float*)v.p)[k];
}

__device__ __forceinline__ void st(const Tv& v, long long i, long long j, float x) {
    long long k = i * v.ld + j;
    if (v.bf)
        ((bf16_t*)v.p)[k] = f2bf(x);
    else
        ((float*)v.p)[k] = x;
}

// Two adjacent elements of a row.
struct alignas(8) F2 {
    float x, y;
};

// Elements (i, j) and, when `two`, (i, j + 1): one 32-bit load for a bf16 pair or one 64-bit
// load for an fp32 pair where the address is aligned to it, else element by element.
__device__ __forceinline__ F2 ld2(const Tv& v, long long i, long long j, bool two) {
    unsigned long long a = v.p + (v.bf ? 2ull : 4ull) * (unsigned long long)(i * v.ld + j);
    if (two && (a & (v.bf ? 3ull : 7ull)) == 0) {
        if (!v.bf) return *(const F2*)a;
        unsigned w = *(const unsigned*)a;
        return F2{bf2f((bf16_t)(w & 0xffffu)), bf2f((bf16_t)(w >> 16))};
    }
    return F2{ld(v, i, j), two ? ld(v, i, j + 1) : 0.0f};
}

// Store what `ld2` loads.
__device__ __forceinline__ void st2(const Tv& v, long long i, long long j, bool two, F2 x) {
    unsigned long long a = v.p + (v.bf ? 2ull : 4ull) * (unsigned long long)(i * v.ld + j);
    if (two && (a & (v.bf ? 3ull : 7ull)) == 0) {
        if (v.bf)
            *(unsigned*)a = (unsigned)f2bf(x.x) | ((unsigned)f2bf(x.y) << 16);
        else
            *(F2*)a = x;
        return;
    }
    st(v, i, j, x.x);
    if (two) st(v, i, j + 1, x.y);
}

// Token ids live in a u32 array passed as a view's pointer.
__device__ __forceinline__ unsigned id_at(const Tv& v, long long i) { return ((const unsigned*)v.p)[i]; }

#define IGNORE_ID 0xffffffffu

// −∞ without a math header.
#define NEG_INF __uint_as_float(0xff800000u)

__device__ __forceinline__ long long gtid() { return (long long)blockIdx.x * blockDim.x + threadIdx.x; }
__device__ __forceinline__ long long gthreads() { return (long long)gridDim.x * blockDim.x; }

// Sum over the NT threads of a block (float or double), in a fixed tree order; every thread
// gets the result.
template <typename T>
__device__ __forceinline__ T block_sum(T x, T* sh) {
    sh[threadIdx.x] = x;
    __syncthreads();
    for (int s = NT / 2; s > 0; s >>= 1) {
        if ((int)threadIdx.x < s) sh[threadIdx.x] += sh[threadIdx.x + s];
        __syncthreads();
    }
    T r = sh[0];
    __syncthreads();
    return r;
}

__device__ __forceinline__ float block_max(float x, float* sh) {
    sh[threadIdx.x] = x;
    __syncthreads();
    for (int s = NT / 2; s > 0; s >>= 1) {
        if ((int)threadIdx.x < s) sh[threadIdx.x] = fmaxf(sh[threadIdx.x], sh[threadIdx.x + s]);
        __syncthreads();
    }
    float r = sh[0];
    __syncthreads();
    return r;
}

__device__ __forceinline__ float sigmoidf_(float x) { return 1.0f / (1.0f + expf(-x)); }

// out[0, j] += Σ_i f(i, j) for j < cols: CR_Y lanes each walk every CR_Y-th row in order,
// then one thread adds the CR_Y partials in lane order. Launch: grid.x = ⌈cols / CR_X⌉,
// block = (CR_X, CR_Y).
template <typename F>
__device__ __forceinline__ void col_reduce(const Tv& out, long long rows, long long cols, F f) {
    SHARED2(float, sh, CR_Y, CR_X);
    long long j = (long long)blockIdx.x * CR_X + threadIdx.x;
    float acc = 0.0f;
    if (j < cols)
        for (long long i = threadIdx.y; i < rows; i += CR_Y) acc += f(i, j);
    sh[threadIdx.y][threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.y == 0 && j < cols) {
        float t = 0.0f;
        for (int k = 0; k < CR_Y; k++) t += sh[k][threadIdx.x];
        st(out, 0, j, ld(out, 0, j) + t);
    }
}

// An entry of a multi-tensor table (k_full_sum_multi, k_zero_multi): a view and its shape.
struct SumView {
    Tv v;
    long long rows, cols;
};

// Grid-stride loop over the elements (i, j) of a rows × cols view.
#define FOR_EACH(rows, cols)                                                  \
    for (long long e = gtid(), n_ = (rows) * (cols); e < n_; e += gthreads()) \
        for (long long i = e / (cols), j = e % (cols), once_ = 1; once_; once_ = 0)

// Grid-stride loop over the column pairs (i, j), (i, j + 1) of a rows × cols view, j even;
// `two` is false for the lone last column of an odd width. For `ld2` and `st2`.
#define FOR_EACH_PAIR(rows, cols)                                                                   \
    for (long long e = gtid(), h_ = ((cols) + 1) / 2, n_ = (rows) * h_; e < n_; e += gthreads()) \
        for (long long i = e / h_, j = 2 * (e % h_), once_ = 1; once_; once_ = 0)                  \
            for (bool two = j + 1 < (cols), o2_ = true; o2_; o2_ = false)

// Attention's operands (attention.cu, attention_tc.cu): q, k and v one after the other in a qkv
// buffer (q: T × qw, k and v: T × kw each).
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
