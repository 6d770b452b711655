// The LaX Kronecker gate: per row, the latent as an a×b matrix Z maps to Kaᵀ·Z·Kb.
// n[0] = rows, n[2] = a, n[3] = b. Latent index i·b + j (i < a, j < b).
#include "common.cuh"

// v0 = u (rows × a·b), v1 = z, v2 = kb (b × b); u = Z·Kb per row.
KERNEL(k_kron_right) {
    long long a = p.n[2], b = p.n[3];
    FOR_EACH(p.n[0], a * b) {
        long long ii = j / b, l = j % b;
        float s = 0.0f;
        for (long long jj = 0; jj < b; jj++) s += ld(p.v[1], i, ii * b + jj) * ld(p.v[2], jj, l);
        st(p.v[0], i, j, s);
    }
}

// v0 = y, v1 = u, v2 = ka (a × a); n[4] = accumulate. y (+)= Kaᵀ·U per row.
KERNEL(k_kron_left) {
    long long a = p.n[2], b = p.n[3];
    FOR_EACH(p.n[0], a * b) {
        long long k = j / b, l = j % b;
        float s = 0.0f;
        for (long long ii = 0; ii < a; ii++) s += ld(p.v[2], ii, k) * ld(p.v[1], i, ii * b + l);
        st(p.v[0], i, j, p.n[4] ? ld(p.v[0], i, j) + s : s);
    }
}

// v0 = du, v1 = dy, v2 = ka; dU = Ka·dY per row.
KERNEL(k_kron_du) {
    long long a = p.n[2], b = p.n[3];
    FOR_EACH(p.n[0], a * b) {
        long long ii = j / b, l = j % b;
        float s = 0.0f;
        for (long long k = 0; k < a; k++) s += ld(p.v[2], ii, k) * ld(p.v[1], i, k * b + l);
        st(p.v[0], i, j, s);
    }
}

// v0 = dz, v1 = du, v2 = kb; dZ += dU·Kbᵀ per row.
KERNEL(k_kron_dz) {
    long long a = p.n[2], b = p.n[3];
    FOR_EACH(p.n[0], a * b) {
        long long ii = j / b, jj = j % b;
        float s = 0.0f;
        for (long long l = 0; l < b; l++) s += ld(p.v[1], i, ii * b + l) * ld(p.v[2], jj, l);
        st(p.v[0], i, j, ld(p.v[0], i, j) + s);
    }
}

// v0 = part (n[4] chunks × a², fp32), v1 = u, v2 = dy. Chunk c covers rows c·per..; part[c,
// ii·a + k] = Σ_rows Σ_l U[ii, l]·dY[k, l], rows in order. n[5] = per.
KERNEL(k_kron_dka_part) {
    long long rows = p.n[0], a = p.n[2], b = p.n[3], per = p.n[5];
    FOR_EACH(p.n[4], a * a) {
        long long ii = j / a, k = j % a;
        long long r0 = i * per, r1 = r0 + per < rows ? r0 + per : rows;
        float s = 0.0f;
        for (long long r = r0; r < r1; r++) {
            float t = 0.0f;
            for (long long l = 0; l < b; l++) t += ld(p.v[1], r, ii * b + l) * ld(p.v[2], r, k * b + l);
            s += t;
        }
        st(p.v[0], i, j, s);
    }
}

// v0 = part (n[4] chunks × b²), v1 = z, v2 = du; part[c, jj·b + l] = Σ_rows Σ_ii Z[ii, jj]·dU[ii, l].
KERNEL(k_kron_dkb_part) {
    long long rows = p.n[0], a = p.n[2], b = p.n[3], per = p.n[5];
    FOR_EACH(p.n[4], b * b) {
        long long jj = j / b, l = j % b;
        long long r0 = i * per, r1 = r0 + per < rows ? r0 + per : rows;
        float s = 0.0f;
        for (long long r = r0; r < r1; r++) {
            float t = 0.0f;
            for (long long ii = 0; ii < a; ii++) t += ld(p.v[1], r, ii * b + jj) * ld(p.v[2], r, ii * b + l);
            s += t;
        }
        st(p.v[0], i, j, s);
    }
}

// v0 = out (n[0] × n[1] view), v1 = part (n[2] chunks × n[0]·n[1]); out += Σ_c part[c] in
// chunk order.
KERNEL(k_sum_parts) {
    long long cols = p.n[1], chunks = p.n[2];
    FOR_EACH(p.n[0], cols) {
        float s = 0.0f;
        for (long long c = 0; c < chunks; c++) s += ld(p.v[1], c, i * cols + j);
        st(p.v[0], i, j, ld(p.v[0], i, j) + s);
    }
}
