"""The engine's GEMM against torch.mm (oneDNN on CPU) in one process, on a cola-60m step's shapes.

    cargo build --release -p boost-tensor --example gemm_ffi
    python3 bench/gemm_vs_torch.py [--threads 1] [--rounds 11] [--flush-mib 8]

Both run on the same buffers, alternated call by call (who goes first alternates too), with
--flush-mib of other memory written before each call, so that operands come from memory or the
last-level cache as in a step. Each shape's ratio is the median over rounds of that round's
ratio, which a host whose speed drifts affects far less than separate timings. Use one thread:
with more, the two libraries' idle worker threads (rayon's and OpenMP's) spin against each other
on the same cores and both sides read slow.
"""

import argparse
import ctypes
import os
import statistics
import time

T, D, R, FF, V = 2048, 512, 128, 1376, 8192
# (name, m, n, k, a stored transposed (k × m), b stored transposed (n × k))
SHAPES = [
    ("128ᵀ × 2048 · 2048 × 512", R, D, T, True, False),
    ("512ᵀ × 2048 · 2048 × 128", D, R, T, True, False),
    ("128ᵀ × 2048 · 2048 × 1376", R, FF, T, True, False),
    ("1376ᵀ × 2048 · 2048 × 128", FF, R, T, True, False),
    ("512ᵀ × 2048 · 2048 × 384", D, 384, T, True, False),
    ("8192ᵀ × 2048 · 2048 × 512", V, D, T, True, False),
    ("2048 × 128 · 128 × 512", T, D, R, False, False),
    ("2048 × 128 · 128 × 1376", T, FF, R, False, False),
    ("2048 × 512 · 512 × 384", T, 384, D, False, False),
    ("2048 × 512 · 512 × 128ᵀ", T, R, D, False, True),
    ("2048 × 1376 · 1376 × 128ᵀ", T, R, FF, False, True),
    ("2048 × 512 · 512 × 8192ᵀ", T, V, D, False, True),
    ("2048 × 8192 · 8192 × 512", T, D, V, False, False),
]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=11)
    ap.add_argument("--flush-mib", type=int, default=8)
    here = os.path.dirname(os.path.abspath(__file__))
    default_lib = os.path.join(here, "..", "target", "release", "examples", "libgemm_ffi.so")
    ap.add_argument("--lib", default=default_lib, help="the gemm_ffi example's library")
    args = ap.parse_args()
    # Before torch starts its pool and before the library's rayon pool exists.
    os.environ["RAYON_NUM_THREADS"] = str(args.threads)
    import torch

    torch.set_num_threads(args.threads)
    lib = ctypes.CDLL(args.lib)
    size, ssize, ptr = ctypes.c_size_t, ctypes.c_ssize_t, ctypes.c_void_p
    lib.boost_gemm.argtypes = [size, size, size, ptr, size, ptr, ssize, ssize, ptr, ssize, ssize, ctypes.c_bool]
    other = torch.ones(args.flush_mib * (1 << 20) // 4)
    print(
        f"{args.threads} threads, {args.rounds} rounds, {args.flush_mib} MiB written before each call; "
        f"torch {torch.__version__}"
    )
    print("| m × k · k × n | torch.mm GFLOP/s | ours GFLOP/s | ours / torch.mm (median of rounds) |")
    print("|---|---|---|---|")
    for name, m, n, k, ta, tb in SHAPES:
        a_st = torch.randn(k, m) if ta else torch.randn(m, k)
        b_st = torch.randn(n, k) if tb else torch.randn(k, n)
        a, b = (a_st.t() if ta else a_st), (b_st.t() if tb else b_st)
        c_torch, c_ours = torch.empty(m, n), torch.empty(m, n)
        a_rs, a_cs = (1, m) if ta else (k, 1)
        b_rs, b_cs = (1, k) if tb else (n, 1)

        def ours():
            c_ptr, a_ptr, b_ptr = c_ours.data_ptr(), a_st.data_ptr(), b_st.data_ptr()
            lib.boost_gemm(m, n, k, c_ptr, n, a_ptr, a_rs, a_cs, b_ptr, b_rs, b_cs, False)

        def theirs():
            torch.mm(a, b, out=c_torch)

        ours()
        theirs()
        if not torch.allclose(c_ours, c_torch, rtol=1e-3, atol=1e-2):
            raise SystemExit(f"{name}: the two products differ")
        flops = 2 * m * n * k
        rates = {ours: [], theirs: []}
        ratios = []
        for i in range(args.rounds):
            secs = {}
            for f in (ours, theirs) if i % 2 == 0 else (theirs, ours):
                other.add_(1.0)
                t0 = time.perf_counter()
                f()
                secs[f] = time.perf_counter() - t0
                rates[f].append(flops / secs[f] / 1e9)
            ratios.append(secs[theirs] / secs[ours])
        med = statistics.median
        print(f"| {name} | {med(rates[theirs]):.0f} | {med(rates[ours]):.0f} | {med(ratios):.2f}× |")


if __name__ == "__main__":
    main()
