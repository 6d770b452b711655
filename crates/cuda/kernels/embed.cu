// Token embedding lookup and its backward.
#include "common.cuh"

// v0 = out (t × d), v1 = table (n[3] rows × d), v2 = ids; n[2] = first.
// out[i] = table[ids[i] − first] for ids in first..first+rows, zero otherwise.
KERNEL(k_embed) {
    long long first = p.n[2], nrows = p.n[3];
    FOR_EACH(p.n[0], p.n[1]) {
        long long id = (long long)id_at(p.v[2], i) - first;
        st(p.v[0], i, j, (id >= 0 && id < nrows) ? ld(p.v[1], id, j) : 0.0f);
    }
}

// v0 = dtable (n[3] rows × d), v1 = dout (t × d), v2 = ids; n[2] = first.
// One thread per column walks the ids in order, so each sum has a fixed order.
KERNEL(k_embed_bwd) {
    long long t = p.n[0], d = p.n[1], first = p.n[2], nrows = p.n[3];
    long long j = gtid();
    if (j >= d) return;
    for (long long i = 0; i < t; i++) {
        long long id = (long long)id_at(p.v[2], i) - first;
        if (id >= 0 && id < nrows) st(p.v[0], id, j, ld(p.v[0], id, j) + ld(p.v[1], i, j));
    }
}
