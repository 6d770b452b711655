"""PyTorch GPU peer for the CUDA backend's training benchmark.

The same model as crates/bench/peers/torch_peer.py (its BoostLM, state_dict keys = canonical
names), on a GPU, with the same mixed precision as the Rust CUDA backend's `Precision::Bf16`:
fp32 parameters and AdamW state (fused AdamW), the forward under
`torch.autocast("cuda", dtype=torch.bfloat16)` so matrix products run in bf16 with fp32
accumulation while norms, softmax statistics and the loss stay fp32; attention is
`F.scaled_dot_product_attention`. `--dtype fp32` turns autocast off (and TF32 off) for the
fp32 comparison. `--compile` runs `torch.compile` of the same model with SDPA held to its
flash backend: the peer a GPU user reaches for first.

    python3 bench/torch_peer_cuda.py --device cuda --dtype bf16 --arch cola --d 512 \\
        --d-ff 1376 --layers 8 --heads 8 --rank 128 --vocab 8192 --seq 256 --micro-batch 8 --json
    python3 bench/torch_peer_cuda.py --device cuda --gemm-peak 8192   # bf16 torch.mm, N³

One JSON line on stdout: step_time_s (median of the timed steps, each bracketed by CUDA
events after a synchronize), step_times_s, tokens_per_sec, peak_memory_bytes
(torch.cuda.max_memory_allocated), device name, dtype, torch and CUDA versions, params and
the config. With `--profile N`, N more steps run under torch.profiler and "split" gives a
step's seconds of GEMM kernels, attention kernels and other kernels on the GPU (by kernel
name), and idle_s, the median step less those. `--device cpu` runs the same script on the
CPU (a smoke test of the script itself, no timing claims; the split is then by operator).
"""

import argparse
import json
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "crates", "bench", "peers"))
from torch_peer import BoostLM, add_model_args, check_model_args, make_config, profiled_split  # noqa: E402

# Kernel names (lower case) by kind: cuBLAS/cuBLASLt and CUTLASS GEMMs, and the attention
# kernels of SDPA's backends (flash, memory-efficient, cuDNN) and of torch.compile.
GEMM_KERNELS = ("gemm", "cutlass", "nvjet", "xmma", "cublas", "sm90_", "sm80_", "ampere_", "matmul")
ATTENTION_KERNELS = ("flash", "fmha", "attention", "sdpa", "cudnn_generated_fort_native_sdpa")


def sync(dev):
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def timed(fn, dev):
    """Seconds of one call of fn, from a synchronize to the next."""
    sync(dev)
    t0 = time.perf_counter()
    r = fn()
    sync(dev)
    return time.perf_counter() - t0, r


def gemm_peak(n, dev):
    """bf16 torch.mm of n × n by n × n (fp32 accumulation, bf16 out): the median of five runs of
    back-to-back calls lasting at least ~50 ms each, after a warm-up."""
    a = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
    b = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
    c = torch.empty(n, n, device=dev, dtype=torch.bfloat16)
    timed(lambda: torch.mm(a, b, out=c), dev)
    one, _ = timed(lambda: torch.mm(a, b, out=c), dev)
    reps = max(1, min(1000, int(0.05 / max(one, 1e-9)) + 1))

    def run():
        for _ in range(reps):
            torch.mm(a, b, out=c)

    runs = [timed(run, dev)[0] / reps for _ in range(5)]
    secs = statistics.median(runs)
    return {"gemm": n, "dtype": "bf16 in, fp32 accumulate, bf16 out", "seconds": secs, "runs_s": runs,
            "tflops": 2.0 * n**3 / secs / 1e12, "device": torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu",
            "torch_version": torch.__version__}


def kernel_split(step, steps, dev):
    """Seconds a step of GPU kernels by kind, over `steps` steps under torch.profiler."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            step()
        sync(dev)
    gemm = attention = other = 0.0
    kernels = 0
    for e in prof.events():
        if e.device_type != torch.autograd.DeviceType.CUDA:
            continue
        name = e.name.lower()
        s = e.device_time / 1e6 / steps if hasattr(e, "device_time") else e.cuda_time / 1e6 / steps
        kernels += 1
        if any(k in name for k in ATTENTION_KERNELS):
            attention += s
        elif any(k in name for k in GEMM_KERNELS):
            gemm += s
        else:
            other += s
    return {"steps": steps, "gemm_s": gemm, "attention_s": attention, "other_s": other, "kernel_calls": kernels // steps}


def main(argv=None):
    ap = argparse.ArgumentParser(description="PyTorch GPU training-step benchmark")
    ap.add_argument("--device", default="cuda", help="cuda, cuda:N or cpu")
    ap.add_argument("--gemm-peak", type=int, default=0, metavar="N", help="time bf16 torch.mm of N³ and exit")
    ap.add_argument("--dtype", choices=["bf16", "fp32"], default="bf16")
    ap.add_argument("--compile", action="store_true", help="torch.compile the model; SDPA's flash backend on a GPU")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--profile", type=int, default=0, metavar="N", help="N more steps under torch.profiler")
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", action="store_true", help="print only the JSON line")
    if "--gemm-peak" in (argv if argv is not None else sys.argv[1:]):
        args, _ = ap.parse_known_args(argv)
        dev = torch.device(args.device)
        if dev.type == "cuda" and not torch.cuda.is_available():
            ap.error("--device cuda: PyTorch sees no GPU")
        print(json.dumps(gemm_peak(args.gemm_peak, dev)), flush=True)
        return
    add_model_args(ap)
    args = ap.parse_args(argv)
    check_model_args(ap, args)

    dev = torch.device(args.device)
    gpu = dev.type == "cuda"
    if gpu and not torch.cuda.is_available():
        ap.error("--device cuda: PyTorch sees no GPU")
    torch.manual_seed(args.seed)
    if gpu:
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False

    cfg = make_config(args)
    model = BoostLM(cfg).to(dev)
    params = list(model.parameters())
    opt = torch.optim.AdamW(params, lr=args.lr, fused=gpu)
    n_params = sum(p.numel() for p in params)
    forward = torch.compile(model) if args.compile else model
    ids = torch.randint(0, args.vocab, (args.micro_batch, args.seq), device=dev)
    targets = torch.randint(0, args.vocab, (args.micro_batch, args.seq), device=dev)
    amp = torch.autocast(dev.type, dtype=torch.bfloat16, enabled=args.dtype == "bf16")
    backend = "default"
    if args.compile and gpu:
        from torch.nn.attention import SDPBackend, sdpa_kernel

        backend = "flash"
        held = sdpa_kernel([SDPBackend.FLASH_ATTENTION])
        held.__enter__()

    def step():
        opt.zero_grad(set_to_none=True)
        with amp:
            logits = forward(ids)
        loss = F.cross_entropy(logits.float().view(-1, logits.shape[-1]), targets.view(-1))
        loss.backward()
        opt.step()
        return loss

    if gpu:
        torch.cuda.reset_peak_memory_stats(dev)
    times = []
    for i in range(args.warmup + args.rounds):
        if gpu:
            torch.cuda.synchronize(dev)
            t0, t1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            t0.record()
            loss = step()
            t1.record()
            torch.cuda.synchronize(dev)
            dt = t0.elapsed_time(t1) / 1e3
        else:
            dt, loss = timed(step, dev)
        if i >= args.warmup:
            times.append(dt)
        if not args.json:
            kind = "warmup" if i < args.warmup else "step"
            print(f"{kind} {i}: {dt * 1e3:.2f} ms, loss {loss.item():.4f}", file=sys.stderr)

    median = statistics.median(times)
    peak = torch.cuda.max_memory_allocated(dev) if gpu else None
    split = None
    if args.profile > 0:
        split = kernel_split(step, args.profile, dev) if gpu else profiled_split(step, args.profile)
        split["idle_s"] = max(0.0, median - split["gemm_s"] - split["attention_s"] - split["other_s"])
    tokens = args.micro_batch * args.seq
    out = {
        "step_time_s": median,
        "step_times_s": times,
        "step_time_min_s": min(times),
        "tokens_per_sec": tokens / median,
        "tokens_per_step": tokens,
        "peak_memory_bytes": peak,
        "split": split,
        "device": torch.cuda.get_device_name(dev) if gpu else "cpu",
        "dtype": "bf16 autocast, fp32 master weights" if args.dtype == "bf16" else "float32",
        "compiled": args.compile,
        "sdpa_backend": backend,
        "optimizer": "AdamW(fused)" if gpu else "AdamW",
        "params": n_params,
        "last_loss": loss.item(),
        "torch_version": torch.__version__,
        "cuda_version": torch.version.cuda,
        "arch": args.arch,
        "config": cfg,
    }
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
