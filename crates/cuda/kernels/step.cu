// A training step's figures kept on the device, in the step scalars (common.cuh's S_*): the
// loss tallied over micro-batches, the gradient norm with its clip coefficient, and the
// guard's verdict on the norm, which the update obeys (adamw.cu). One thread each: they add
// a few hundred doubles, in the order the host would.
#include "common.cuh"

// Products and sums not contracted into fused multiply-adds: the guard's statistics match
// the host's bit for bit (the emulator's host compiler does not contract by default).
#ifdef BOOST_EMU
#define DMUL(a, b) ((a) * (b))
#define DADD(a, b) ((a) + (b))
#else
#define DMUL(a, b) __dmul_rn(a, b)
#define DADD(a, b) __dadd_rn(a, b)
#endif

// Σ of n partials, in order.
__device__ __forceinline__ double sum_in_order(const double* part, long long n) {
    double v = 0.0;
    for (long long b = 0; b < n; b++) v += part[b];
    return v;
}

// v0 = partials (n[0] views × n[2] blocks), v1 = step scalars. The gradient norm, added as
// the host adds the partials (each view's blocks in order, then the views in order): [S_SUMSQ]
// Σ, [S_NORM] √Σ, [S_CLIP] PyTorch's clip coefficient min(1, f[0] / (√Σ + 1e-6)), 1 when
// f[0] ≤ 0. With n[3], the guard (train's, on the host otherwise) judges the norm into
// [S_VERDICT]: 0 apply; 1 skip, not finite (n[1] = skip_nonfinite); 2 skip, more than f[1]
// standard deviations (z in [S_Z]) above the mean of the last n[4] applied norms, once
// there are n[5]; 3 halt, not finite without skip_nonfinite, or any step after a halt.
KERNEL(k_norm_finish) {
    if (blockIdx.x != 0 || threadIdx.x != 0) return;
    const double* part = (const double*)p.v[0].p;
    double* s = (double*)p.v[1].p;
    double sq = 0.0;
    for (long long t = 0; t < p.n[0]; t++) sq += sum_in_order(part + t * p.n[2], p.n[2]);
    double norm = sqrt(sq);
    s[S_SUMSQ] = sq;
    s[S_NORM] = norm;
    double c = p.f[0] / (norm + 1e-6);
    s[S_CLIP] = p.f[0] <= 0.0 ? 1.0 : (c < 1.0 ? c : 1.0);
    if (!p.n[3]) return;
    long long w = p.n[4], n = (long long)s[S_WIN_COUNT], head = (long long)s[S_WIN_HEAD];
    const double* win = s + S_WIN;
    int verdict = 0;
    bool finite = norm - norm == 0.0;
    if (s[S_HALTED] != 0.0 || (!finite && !p.n[1])) {
        verdict = 3;
    } else if (!finite) {
        verdict = 1;
    } else if (p.n[1] && n >= p.n[5]) {
        // The host's Guard::check_grad: mean and population deviation, oldest norm first.
        double sum = 0.0;
        for (long long i = 0; i < n; i++) sum = DADD(sum, win[(head + i) % w]);
        double mean = sum / (double)n, dev = 0.0;
        for (long long i = 0; i < n; i++) {
            double d = win[(head + i) % w] - mean;
            dev = DADD(dev, DMUL(d, d));
        }
        double sd = sqrt(dev / (double)n);
        double am = mean < 0.0 ? -mean : mean;
        double floor = DMUL(1e-12, am > 1e-30 ? am : 1e-30);
        double z = (norm - mean) / (sd > floor ? sd : floor);
        s[S_Z] = z;
        if (z > p.f[1]) verdict = 2;
    }
    s[S_VERDICT] = (double)verdict;
    if (verdict == 3) s[S_HALTED] = 1.0;
    if (verdict != 0) {
        s[S_SKIPS] += 1.0;
        return;
    }
    double* ring = s + S_WIN;
    if (n < w) {
        ring[(head + n) % w] = norm;
        s[S_WIN_COUNT] = (double)(n + 1);
    } else {
        ring[head] = norm;
        s[S_WIN_HEAD] = (double)((head + 1) % w);
    }
}

// v0 = partials (n[0] of them, k_full_sum's), v1 = step scalars: [S_LOSS] = Σ partials in
// order when n[1] (the step's first tally), else [S_LOSS] + Σ.
KERNEL(k_tally) {
    if (blockIdx.x != 0 || threadIdx.x != 0) return;
    const double* part = (const double*)p.v[0].p;
    double* s = (double*)p.v[1].p;
    double v = sum_in_order(part, p.n[0]);
    s[S_LOSS] = p.n[1] ? v : s[S_LOSS] + v;
}
