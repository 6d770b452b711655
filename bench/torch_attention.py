#!/usr/bin/env python3
"""PyTorch's scaled-dot-product attention alone, forward and backward, with the flash backend
(torch.nn.attention.sdpa_kernel(SDPBackend.FLASH_ATTENTION)), causal, bf16 [b, h, s, d]
tensors: the peer of `cuda_bench --attention`. One JSON line per shape, shaped like its lines.

    python3 bench/torch_attention.py --attention 4,4096,16,16,128 [--attention ...]

FLOPs counted (as cuda_bench's): forward 4·b·h·s²·d/2, backward 2.5× forward. Times: the
median of five runs of back-to-back calls lasting about 50 ms each, CUDA events around them.
Grouped-query shapes (kv_heads < heads) repeat K and V to every head first, outside the timing.
"""

import argparse
import json
import statistics
import sys

FLOPS = "causal: forward 4·b·h·s²·d/2 (Q·Kᵀ and P·V over the lower triangle), backward 2.5× forward"


def timed(torch, call):
    call()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    call()
    end.record()
    torch.cuda.synchronize()
    one = start.elapsed_time(end) / 1e3
    reps = max(1, min(1000, int(0.05 / max(one, 1e-9)) + 1))
    runs = []
    for _ in range(5):
        start.record()
        for _ in range(reps):
            call()
        end.record()
        torch.cuda.synchronize()
        runs.append(start.elapsed_time(end) / 1e3 / reps)
    return statistics.median(runs)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--attention", action="append", required=True, help="BATCH,SEQ,HEADS,KV_HEADS,HEAD_DIM")
    args = ap.parse_args()
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    if not torch.cuda.is_available():
        sys.exit("torch_attention: no CUDA device (the flash backend needs one)")
    dev = torch.device("cuda")
    for spec in args.attention:
        b, s, h, kv, d = (int(x) for x in spec.split(","))
        line = {"attention": {"batch": b, "seq": s, "heads": h, "kv_heads": kv, "head_dim": d}, "kernels": "torch-sdpa-flash",
                "flops_counted": FLOPS, "device": torch.cuda.get_device_name(), "torch": torch.__version__}
        try:
            g = torch.Generator(device=dev).manual_seed(0)
            q = torch.randn(b, h, s, d, device=dev, dtype=torch.bfloat16, generator=g).requires_grad_()
            k = torch.randn(b, kv, s, d, device=dev, dtype=torch.bfloat16, generator=g)
            v = torch.randn(b, kv, s, d, device=dev, dtype=torch.bfloat16, generator=g)
            k = k.repeat_interleave(h // kv, dim=1).detach().requires_grad_()
            v = v.repeat_interleave(h // kv, dim=1).detach().requires_grad_()
            do = torch.randn(b, h, s, d, device=dev, dtype=torch.bfloat16, generator=g)
            with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
                fwd = timed(torch, lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True))
                o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
                bwd = timed(torch, lambda: torch.autograd.grad(o, (q, k, v), do, retain_graph=True))
            f = 4.0 * b * h * d * s * s / 2
            line.update(fwd_s=fwd, bwd_s=bwd, fwd_flops=f, bwd_flops=2.5 * f, fwd_tflops=f / fwd / 1e12, bwd_tflops=2.5 * f / bwd / 1e12)
        except Exception as e:  # a shape the backend refuses, or out of memory: said, not fatal
            line["error"] = f"{type(e).__name__}: {e}"[:400]
        print(json.dumps(line), flush=True)


if __name__ == "__main__":
    main()
