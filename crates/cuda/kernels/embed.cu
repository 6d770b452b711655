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

// v0 = dtable (n[3] rows × d), v1 = dout (t × d), v2 = ids (t = n[0] of them), v3 = runs
// (written with the ids): [0] R, the number of distinct ids, then t + 1 slots of which the
// first R + 1 are where each id's run starts (and the end), then the t positions grouped by
// id in increasing order, each id's positions in order; n[2] = first. The grid is fixed by
// the shape (t × column blocks): block (r, c) adds the r-th distinct id's rows when that id
// is in first..first+rows, columns c·blockDim.x...; each sum walks the id's positions in
// order, so it has a fixed order.
KERNEL(k_embed_bwd) {
    long long t = p.n[0], d = p.n[1], first = p.n[2], nrows = p.n[3];
    const unsigned* runs = (const unsigned*)p.v[3].p;
    const unsigned* starts = runs + 1;
    const unsigned* pos = runs + t + 2;
    long long r = blockIdx.x, j = (long long)blockIdx.y * blockDim.x + threadIdx.x;
    if (r >= (long long)runs[0] || j >= d) return;
    long long a = starts[r], b = starts[r + 1];
    long long id = (long long)id_at(p.v[2], pos[a]) - first;
    if (id < 0 || id >= nrows) return;
    float acc = ld(p.v[0], id, j);
    for (long long k = a; k < b; k++) acc += ld(p.v[1], pos[k], j);
    st(p.v[0], id, j, acc);
}
