// Rotary position embedding (Hugging Face "rotate_half" layout), in place.
#include "common.cuh"

// v0 = x (rows × cols, cols a multiple of the head dim), v1 = table ([cos | sin], each
// seq × head_dim/2, fp32); n[2] = seq, n[3] = head_dim, n[4] = inverse. Position = row mod seq.
// One thread per rotated pair.
KERNEL(k_rope) {
    long long rows = p.n[0], cols = p.n[1], seq = p.n[2], hd = p.n[3], half = hd / 2;
    const float* cs = (const float*)p.v[1].p;
    FOR_EACH(rows, cols / 2) {
        long long head = j / half, k = j % half, pos = i % seq;
        float c = cs[pos * half + k], s = cs[seq * half + pos * half + k];
        if (p.n[4]) s = -s;
        long long ja = head * hd + k, jb = ja + half;
        float a = ld(p.v[0], i, ja), b = ld(p.v[0], i, jb);
        st(p.v[0], i, ja, a * c - b * s);
        st(p.v[0], i, jb, b * c + a * s);
    }
}
