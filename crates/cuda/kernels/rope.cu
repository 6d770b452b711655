// Rotary position embedding (Hugging Face "rotate_half" layout), in place.
#include "common.cuh"

// Rotate pair k of head `head` in row i of x: position = i mod seq; cs = [cos | sin].
__device__ __forceinline__ void rotate(const Tv& x, const float* cs, long long i, long long j, long long seq,
                                       long long hd, bool inverse) {
    long long half = hd / 2, head = j / half, k = j % half, pos = i % seq;
    float c = cs[pos * half + k], s = cs[seq * half + pos * half + k];
    if (inverse) s = -s;
    long long ja = head * hd + k, jb = ja + half;
    float a = ld(x, i, ja), b = ld(x, i, jb);
    st(x, i, ja, a * c - b * s);
    st(x, i, jb, b * c + a * s);
}

// v0 = x (rows × cols, cols a multiple of the head dim), v1 = table ([cos | sin], each
// seq × head_dim/2, fp32); n[2] = seq, n[3] = head_dim, n[4] = inverse. Position = row mod seq.
// One thread per rotated pair.
KERNEL(k_rope) {
    const float* cs = (const float*)p.v[1].p;
    FOR_EACH(p.n[0], p.n[1] / 2) rotate(p.v[0], cs, i, j, p.n[2], p.n[3], p.n[4]);
}

// q and k in one launch: v0 = q (rows × n[1]), v1 = table, v2 = k (rows × n[5]); n[2..4] as
// k_rope. One thread per rotated pair of a row's q, then of its k.
KERNEL(k_rope_qk) {
    const float* cs = (const float*)p.v[1].p;
    long long qh = p.n[1] / 2;
    FOR_EACH(p.n[0], qh + p.n[5] / 2) {
        if (j < qh) rotate(p.v[0], cs, i, j, p.n[2], p.n[3], p.n[4]);
        else rotate(p.v[2], cs, i, j - qh, p.n[2], p.n[3], p.n[4]);
    }
}
