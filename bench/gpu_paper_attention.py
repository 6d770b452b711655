"""The device benchmark's attention stage (bench/gpu_paper.py): causal attention alone,
forward and backward, in TFLOP/s, at head_dim 64 and 128 and seq 2048, 4096 and 8192
(16384 tokens a call, d = 2048 of heads: the 1B preset's width), for cuDNN's fused attention
and ours (`cuda_bench --attention`) and PyTorch's SDPA with the flash backend
(bench/torch_attention.py), on the same GPU. On the emulator: one tiny shape, ours only
(the emulator has no cuDNN), no timing claims; PyTorch's flash backend needs a GPU.
"""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
TORCH = os.path.join(HERE, "torch_attention.py")
FLOPS = "causal: forward 4·b·h·s²·d/2 (Q·Kᵀ and P·V over the lower triangle), backward 2.5× forward"


def shapes(emulate):
    """(batch, seq, heads, kv_heads, head_dim): multi-head, as the 1B preset."""
    if emulate:
        return [(1, 32, 2, 2, 64)]
    return [(16384 // s, s, 2048 // d, 2048 // d, d) for d in (64, 128) for s in (2048, 4096, 8192)]


def stage(run):
    """Fills run.record["attention"]: per shape, each side's line (TFLOP/s, or why not)."""
    rec = {"flops_counted": FLOPS, "buffers": "bf16", "shapes": []}
    run.record["attention"] = rec
    run.save()
    spec = [f for s in shapes(run.emulate) for f in ("--attention", ",".join(map(str, s)))]
    sides = {"boost": None, "cudnn": None, "torch": None}
    for kernels in ("boost", "cudnn"):
        sides[kernels] = run.call(f"attention-{kernels}", run.bench(*spec, "--kernels", kernels), 90, lines=True)
    if run.emulate:
        rec["torch"] = "skipped: PyTorch's flash backend needs a GPU"
    elif not run.torch:
        rec["torch"] = "skipped: PyTorch not installed"
    else:
        sides["torch"] = run.call("attention-torch", [sys.executable, TORCH, *spec], 90, lines=True)
    for s in shapes(run.emulate):
        key = dict(zip(("batch", "seq", "heads", "kv_heads", "head_dim"), s))
        row = {"shape": key}
        for name, lines in sides.items():
            line = next((l for l in lines or [] if l.get("attention") == key), None)
            row[name] = line and {k: line[k] for k in ("fwd_tflops", "bwd_tflops", "fwd_s", "bwd_s", "error", "chosen") if k in line}
        rec["shapes"].append(row)
    if run.emulate:
        rec["mode"] = "emulated: ours only, no timing claims"
    run.save()
