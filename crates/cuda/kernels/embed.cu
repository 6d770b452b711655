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

// v0 = dtable (n[3] rows × d), v1 = dout (t × d), v2 = ids, v3 = runs: n[4] + 1 run starts,
// then the positions of the ids in first..first+rows grouped by id (each id's positions in
// order); n[2] = first. Block (r, c): the r-th distinct id, columns c·blockDim.x...; each sum
// walks the id's positions in order, so it has a fixed order.
KERNEL(k_embed_bwd) {
    long long d = p.n[1], first = p.n[2], nruns = p.n[4];
    const unsigned* runs = (const unsigned*)p.v[3].p;
    const unsigned* pos = runs + nruns + 1;
    long long r = blockIdx.x, j = (long long)blockIdx.y * blockDim.x + threadIdx.x;
    if (j >= d) return;
    long long a = runs[r], b = runs[r + 1];
    long long id = (long long)id_at(p.v[2], pos[a]) - first;
    float acc = ld(p.v[0], id, j);
    for (long long k = a; k < b; k++) acc += ld(p.v[1], pos[k], j);
    st(p.v[0], id, j, acc);
}
